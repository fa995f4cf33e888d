"""Attention kernels by GPU generation: the FlashAttention versions (as their papers report
them) and which of them apply to a compute capability. Imports without Triton or torch, so the
sizing and deployment code (and a reader without a GPU) can use it.

- `FLASH_ATTENTION_VERSIONS`: FlashAttention 1-4 (year, hardware, what changed, reported
  speedups, cited) as data.
- `flash_versions_for(compute_capability)` -> the versions whose official kernels target it.
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
        "FlashAttention-4", 2026, "Blackwell (B200, GB200)", (10, 0),
        "fully asynchronous MMA pipelines, software-emulated exp and conditional rescaling, "
        "tensor memory and 2-CTA MMA in the backward; written in CuTe-DSL (Python)",
        "up to 1.3x over cuDNN 9.13 and 2.7x over Triton on B200 (BF16); up to 1613 TFLOP/s (71%)",
        True, "zadouri2026flashattention4"),
)


def flash_versions_for(compute_capability: tuple[int, int]) -> list[FlashAttentionVersion]:
    """Return the FlashAttention versions whose official kernels target this GPU generation.

    A version applies from its `min_compute_capability` up to (not including) the next major
    generation that got its own version, except FlashAttention-2, which runs on every sm80+ GPU.
    """
    if len(compute_capability) != 2 or compute_capability < (5, 0):
        raise ValueError(f"compute_capability must be (major, minor) >= (5, 0); got {compute_capability}")
    out = []
    for v in FLASH_ATTENTION_VERSIONS:
        if compute_capability < v.min_compute_capability:
            continue
        if v.name == "FlashAttention" and compute_capability >= (9, 0):
            continue  # the 1.x kernels were written for Turing/Ampere
        if v.name in ("FlashAttention-3",) and compute_capability[0] != 9:
            continue
        if v.name == "FlashAttention-4" and compute_capability[0] != 10:
            continue
        out.append(v)
    return out
