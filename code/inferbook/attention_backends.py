"""Attention kernels by GPU generation: the FlashAttention versions (as their papers report
them) and which of them apply to a compute capability. Imports without Triton or torch, so the
sizing and deployment code (and a reader without a GPU) can use it.

- `FLASH_ATTENTION_VERSIONS`: FlashAttention 1-4 (year, hardware, what changed, reported
  speedups, cited) as data.
- `flash_versions_for(compute_capability)` -> the versions whose official kernels target it.
- `vllm_backend(compute_capability, mla=, head_dim=, kv_dtype=)` -> `VllmBackend`: the backend
  vLLM 0.33.0 picks, and whether it can read an fp8 KV cache.

vLLM's choice, read in the pinned wheel (vllm 0.33.0): `platforms/cuda.py::
_get_backend_priorities` orders the candidates (non-MLA: FLASHINFER first on sm100, else
FLASH_ATTN, FLASHINFER, TRITON_ATTN; MLA: FLASHINFER_MLA first on sm100, else FLASH_ATTN_MLA,
FLASHMLA, FLASHINFER_MLA, TRITON_MLA) and the first one whose checks pass is used:
`FlashAttentionBackend.supports_compute_capability` (sm80+), `FlashInferBackend.
supports_compute_capability` (sm80 to sm121; FlashInfer is a hard dependency of the wheel),
`fa_utils.py::get_flash_attn_version` (FA3 on sm90, FA4 on sm100, else FA2; sm90 upgrades to
FA4 for head_dim > 256) and, for an fp8 cache, `fa_utils.py::flash_attn_supports_kv_cache_dtype`
(FA3 on sm90 or FA4 on sm100 only) and `TritonAttentionImpl.__init__` ("native FP8 (fp8e4nv)
requires SM89+"). MLA: `FlashAttnMLABackend` is sm90-only without fp8, `FlashMLABackend` sm90/
sm100 with fp8, `FlashInferMLABackend` sm100.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlashAttentionVersion:
    """One FlashAttention generation as its paper reports it. `cite` is a references.bib key."""

    name: str
    year: int
    hardware: str
    min_compute_capability: tuple[int, int]   # oldest GPU generation the official kernels target
    what_changed: str
    reported_speedup: str                      # as the paper states it, with its baseline
    has_backward: bool
    cite: str


FLASH_ATTENTION_VERSIONS: tuple[FlashAttentionVersion, ...] = (
    FlashAttentionVersion(
        "FlashAttention", 2022, "Turing and Ampere (T4, A100)", (7, 5),
        "IO-aware tiling through SRAM with an online softmax; recompute P in the backward",
        "15% end-to-end on BERT-large vs the MLPerf 1.1 record; 3x on GPT-2 (N=1K); "
        "2.4x on long-range arena (N=1K-4K)", True, "dao2022flashattention"),
    FlashAttentionVersion(
        "FlashAttention-2", 2023, "Ampere, Ada, Hopper (A100, RTX 4090, H100)", (8, 0),
        "fewer non-matmul FLOPs; parallel over the sequence too; Q split across warps, not K",
        "about 2x over FlashAttention; 50-73% of A100 peak; up to 225 TFLOP/s per A100 "
        "in GPT training", True, "dao2024flashattention2"),
    FlashAttentionVersion(
        "FlashAttention-3", 2024, "Hopper (H100)", (9, 0),
        "warp specialisation, TMA + WGMMA asynchrony, softmax overlapped with matmuls, FP8",
        "1.5-2.0x over FlashAttention-2 on H100; FP16 up to 740 TFLOP/s (75%); "
        "FP8 close to 1.2 PFLOP/s", True, "shah2024flashattention3"),
    FlashAttentionVersion(
        "FlashAttention-4", 2026, "Hopper and Blackwell (H100, B200, GB200); the paper's "
        "results are on Blackwell", (9, 0),
        "fully asynchronous MMA pipelines, software-emulated exp and conditional rescaling, "
        "tensor memory and 2-CTA MMA in the backward; written in CuTe-DSL (Python)",
        "up to 1.3x over cuDNN 9.13 and 2.7x over Triton on B200 (BF16); up to 1613 TFLOP/s (71%)",
        True, "zadouri2026flashattention4"),  # sm90 too: flash_attn/cute/README.md
)


def flash_versions_for(compute_capability: tuple[int, int]) -> list[FlashAttentionVersion]:
    """Return the FlashAttention versions whose official kernels target this GPU generation.

    A version applies from its `min_compute_capability` up to (not including) the next major
    generation that got its own version, except FlashAttention-2, which runs on every sm80+ GPU,
    and FlashAttention-4, whose CuTe-DSL kernels run on Hopper (sm90) and Blackwell (sm100), beside
    FlashAttention-3 on Hopper.
    """
    if len(compute_capability) != 2 or compute_capability < (5, 0):
        raise ValueError("compute_capability must be (major, minor) >= (5, 0); "
                         f"got {compute_capability}")
    out = []
    for v in FLASH_ATTENTION_VERSIONS:
        if compute_capability < v.min_compute_capability:
            continue
        if v.name == "FlashAttention" and compute_capability >= (9, 0):
            continue  # the 1.x kernels were written for Turing/Ampere
        if v.name in ("FlashAttention-3",) and compute_capability[0] != 9:
            continue
        if v.name == "FlashAttention-4" and compute_capability[0] not in (9, 10):
            continue
        out.append(v)
    return out


# --------------------------------------------------------------------------------------
# vLLM 0.33.0's attention backend for a GPU, a model shape and a KV-cache dtype
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VllmBackend:
    """The backend vLLM picks (`--attention-backend` name), its FlashAttention version when the
    backend is FLASH_ATTN (None otherwise), and why."""

    name: str
    flash_attention_version: int | None
    why: str


def fp8_kv_backend(compute_capability: tuple[int, int], *, mla: bool,
                   head_dim: int) -> str | None:
    """Return the backend that would read an fp8 KV cache on this GPU, or None if none can."""
    cc = _check_cc(compute_capability)
    if mla:   # TRITON_MLA reads fp8 from sm89 (triton_mla.py: "native FP8 requires SM89+")
        return {10: "FLASHINFER_MLA", 9: "FLASHMLA"}.get(
            cc[0], "TRITON_MLA" if cc >= (8, 9) else None)
    if cc >= (10, 0):
        return "FLASHINFER"
    if cc[0] == 9 and head_dim <= 256:
        return "FLASH_ATTN"            # FA3 reads fp8 on sm90
    if cc >= (8, 0):
        return "FLASHINFER"            # FA2 refuses fp8, FlashInfer takes it on sm80+
    return None                        # sm75: only Triton is left, and it needs sm89 for fp8


def _check_cc(compute_capability) -> tuple[int, int]:
    if (not isinstance(compute_capability, tuple) or len(compute_capability) != 2
            or compute_capability < (7, 5)):
        raise ValueError(f"compute_capability must be (major, minor) >= (7, 5) for vLLM; "
                         f"got {compute_capability!r}")
    return compute_capability


def _fa_version(cc: tuple[int, int], head_dim: int) -> int:
    if cc[0] == 9:
        return 4 if head_dim > 256 else 3
    return 4 if cc[0] == 10 else 2


def vllm_backend(compute_capability: tuple[int, int], *, mla: bool, head_dim: int,
                 kv_dtype: str) -> VllmBackend:
    """Return the attention backend vLLM 0.33.0 selects (see the module docstring)."""
    cc = _check_cc(compute_capability)
    sm = f"sm{cc[0]}{cc[1]}"
    if kv_dtype == "fp8":
        name = fp8_kv_backend(cc, mla=mla, head_dim=head_dim)
        if name is None:
            raise ValueError(f"{sm}: no vLLM 0.33.0 attention backend reads an fp8 KV cache")
        fa = _fa_version(cc, head_dim) if name == "FLASH_ATTN" else None
        return VllmBackend(name, fa, f"{sm} with an fp8 KV cache: {name} is the first backend "
                           "in vLLM's order that accepts fp8 here")
    if mla:
        name = {10: "FLASHINFER_MLA", 9: "FLASH_ATTN_MLA"}.get(cc[0], "TRITON_MLA")
        return VllmBackend(name, None, f"{sm}, MLA: {name} is vLLM's first MLA backend "
                           "supported here")
    if cc < (8, 0):
        return VllmBackend("TRITON_ATTN", None, f"{sm}: FLASH_ATTN and FLASHINFER need sm80, "
                           "so vLLM falls back to its Triton kernel")
    if cc[0] == 10:
        return VllmBackend("FLASHINFER", None, f"{sm}: vLLM prefers FlashInfer (TensorRT-LLM "
                           "kernels); FlashAttention-4 is what --attention-backend FLASH_ATTN "
                           "would run")
    fa = _fa_version(cc, head_dim)
    why = f"{sm}: FLASH_ATTN with FlashAttention-{fa}"
    if cc[0] == 9 and fa == 4:
        why += f" (FA3 has no head_dim {head_dim} kernel, vLLM upgrades to FA4)"
    return VllmBackend("FLASH_ATTN", fa, why)
