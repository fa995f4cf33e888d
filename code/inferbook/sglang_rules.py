"""SGLang 0.5.23's own start-up rules that a plan must follow, as that release computes them.

`mem_fraction_static` is SGLang's (weights + KV pool) / GPU memory: what is left after it
reserves room for activations and CUDA graphs. SGLang derives it when the flag is not given
(`srt/arg_groups/memory_hook.py::handle_gpu_memory_settings`); a plan that passes vLLM's
`--gpu-memory-utilization` instead would leave SGLang no activation headroom. The line numbers
are those of the pinned wheel (sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl); the quotes
are in `data/sglang_rules.json` and re-checked against the wheel by the tests when
`SGLANG_SRC` is set. `decide_sglang` turns a plan's layout into SGLang's flags. No torch: the planner imports
this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import rules as _rules
from .decision import Decision
from .hardware import GPU
from .hardware import gpu as _gpu

MiB = 2**20
WHEEL = "sglang 0.5.23"
MEMORY_HOOK = "srt/arg_groups/memory_hook.py"
# srt/layers/quantization/fp8.py:339 Fp8Config.get_min_capability: `return 100 if
# self.use_mxfp8 else 80`: SGLang's fp8 linear layers need sm80 (no Marlin fallback on Turing).
FP8_MIN_SM = 80
# The fp8 KV cache goes through the same FP8 kernels: below sm80 SGLang's attention backends on
# Turing (triton, torch_native) keep the KV cache in the compute dtype; the book never emits it.
FP8_KV_MIN_SM = 80


# What `nvidia-smi --query-gpu=memory.total` prints, in MiB: the figure SGLang sizes its memory
# from (utils/common.py:806), not the smaller total CUDA reports (`hardware.GPU.cuda_total_bytes`).
# Values as public nvidia-smi output shows them; a preset without one has no entry.
SMI_TOTALS_SOURCE = "https://github.com/modal-labs/modal-client/pull/2797"
NVIDIA_SMI_TOTAL_MIB: dict[str, tuple[int, str]] = {
    "H100 SXM": (81559, "https://github.com/NVIDIA/nccl/issues/1264 (nvidia-smi, 8x H100 80GB "
                        "HBM3: '0MiB / 81559MiB'); also " + SMI_TOTALS_SOURCE),
    "A100 80GB": (81920, SMI_TOTALS_SOURCE),
    "A100 40GB": (40960, SMI_TOTALS_SOURCE),
    "L40S": (46068, SMI_TOTALS_SOURCE),
    "L4": (23034, SMI_TOTALS_SOURCE),
    "T4": (15360, SMI_TOTALS_SOURCE),
}


def nvidia_smi_total_mib(gpu_name: str | GPU) -> int:
    """Return the MiB `nvidia-smi --query-gpu=memory.total` prints for this GPU preset, the
    memory SGLang's rules read; ValueError for a preset with no published figure. An entry
    point (chapter 8 calls it with "H100"): a preset name is resolved here, once."""
    g = _gpu(gpu_name)
    if g.name not in NVIDIA_SMI_TOTAL_MIB:
        raise ValueError(f"gpu_name: no published nvidia-smi memory.total for {g.name!r}; "
                         f"known: {', '.join(NVIDIA_SMI_TOTAL_MIB)}")
    return NVIDIA_SMI_TOTAL_MIB[g.name][0]


@lru_cache(maxsize=None)
def rules_data() -> dict:
    """Return the stored quotes of SGLang's rules (file, line, text) from the pinned wheel."""
    return json.loads((Path(__file__).resolve().parent / "data" / "sglang_rules.json").read_text())


def capacity_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """Return SGLang's (chunked_prefill_size, decode CUDA-graph max_bs) for a GPU of
    `gpu_mem_mib` MiB (memory_hook.py:89-162: thresholds 20, 35, 60, 90, 160 GiB)."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """Return SGLang's prefill CUDA-graph token buckets up to `max_bs`
    (srt/arg_groups/cuda_graph_hook.py:480 generate_prefill_cuda_graph_batch_sizes)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


@dataclass(frozen=True)
class SglangMemory:
    """SGLang's static-memory fraction and the reserve terms behind it, in MiB."""

    gpu_mem_mib: float
    chunked_prefill_size: int
    decode_graph_max_bs: int
    activation_mib: float        # 512 + 1.5 x max(chunked_prefill_size, 2048)
    parallel_mib: float          # tp x pp / 8 x 1024
    graph_mib: float             # decode graphs 2 x max_bs (+ DP attention), prefill graphs
    floor_applied: bool          # GPUs over 60 GiB reserve at least 10 GiB
    reserved_mib: float
    mem_fraction_static: float

    @property
    def static_bytes(self) -> float:
        """Return what SGLang may hold for weights + KV pool on one GPU."""
        return self.mem_fraction_static * self.gpu_mem_mib * MiB


def mem_fraction_static(gpu_mem_mib: float, *, tp: int, pp: int = 1,
                        chunked_prefill_size: int | None = None,
                        max_running_requests: int | None = None, mla: bool = False,
                        attn_dp_size: int = 1) -> SglangMemory:
    """Return SGLang 0.5.23's default `mem_fraction_static` for these settings.

    The default path of `handle_gpu_memory_settings` (memory_hook.py:280-326) on CUDA, for a
    text model without disaggregation, DeepEP or post-capture KV sizing (off by default,
    environ.py:640): reserved = 512 + 1.5 x max(chunked, 2048) + tp x pp / 8 x 1024 + the graph
    reserve (memory_hook.py:357-399: 2 MiB per decode-graph batch size up to max_bs, which
    `--max-running-requests` caps (lines 182-188); with attention DP 3 x max_bs x attn_dp_size
    more (and 1.5 x more above 300); prefill graphs, on by default on CUDA and off with PP
    (cuda_graph_hook.py:150): 8 MiB per token bucket, or 1.5 GiB for MLA); on GPUs over
    60 GiB at least 10 GiB (line 314); fraction = round((total - reserved) / total, 3).
    `gpu_mem_mib` is what `nvidia-smi --query-gpu=memory.total` prints (utils/common.py:806).
    """
    chunk_default, max_bs = capacity_defaults(gpu_mem_mib, tp)
    chunk = chunk_default if chunked_prefill_size is None else chunked_prefill_size
    if max_running_requests is not None and max_bs > max_running_requests:
        max_bs = max_running_requests
    activation = 512 + max(chunk, 2048) * 1.5
    parallel = tp * pp / 8 * 1024
    graph = 2.0 * max_bs
    if attn_dp_size > 1:
        graph += max_bs * attn_dp_size * 3
        if max_bs > 300:
            graph += max_bs * attn_dp_size * 1.5
    if pp == 1:
        prefill_max = min(8192, chunk) if mla else chunk
        graph += 1.5 * 1024 if mla else 8 * len(prefill_graph_sizes(prefill_max))
    reserved = activation + parallel + graph
    floor = gpu_mem_mib > 60 * 1024 and reserved < 10 * 1024
    reserved = max(reserved, 10 * 1024) if gpu_mem_mib > 60 * 1024 else reserved
    fraction = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    return SglangMemory(gpu_mem_mib, chunk, max_bs, activation, parallel, graph, floor, reserved,
                        fraction)


def fp8_refusal(sm: int, what: str) -> str | None:
    """Return why SGLang cannot run fp8 `what` ("weights" or "KV cache") on sm`sm`, or None."""
    need = FP8_MIN_SM if what == "weights" else FP8_KV_MIN_SM
    if sm >= need:
        return None
    return (f"SGLang 0.5.23 runs fp8 {what} only from sm{need} (Fp8Config.get_min_capability, "
            f"srt/layers/quantization/fp8.py:339); this GPU is sm{sm}")


def decide_sglang(spec, g, w, lay, quantization, caps) -> Decision:
    """Return SGLang's memory split for plan layout `lay` at batching caps `caps` (value: `SglangMemory`), or None with why
    SGLang 0.5.23 cannot run it (fp8 below sm80, or its static memory holds no request)."""
    sm = _rules.sm(g)
    q = quantization
    for what, used in (("weights", lay.weight_dtype == "fp8" and q is not None),
                       ("KV cache", lay.kv_dtype == "fp8")):
        refusal = fp8_refusal(sm, what) if used else None
        if refusal:
            return Decision(None, refusal, _rules.CH_SIZING, f"{WHEEL}: "
                            "srt/layers/quantization/fp8.py:339")
    # --max-running-requests is global: SGLang gives each of the attn_dp_size attention-DP
    # workers max(1, N // attn_dp_size) (srt/mem_cache/kv_cache_configurator.py), while the
    # decode-graph reserve reads the global N (memory_hook.py:182-188, 357-399)
    attn_dp = max(1, lay.ep)

    def memory(running_global):
        return mem_fraction_static(
            lay.budget.gpu_bytes / MiB, tp=max(lay.tp, lay.ep), pp=lay.pp,
            chunked_prefill_size=caps["max_num_batched_tokens"],
            max_running_requests=running_global, mla=spec.is_mla, attn_dp_size=attn_dp)

    def pool_of(mem):
        return mem.static_bytes - lay.budget.weight_bytes

    mem = memory(attn_dp)    # the smallest cap: one request per worker
    pool = pool_of(mem)
    need = lay.kv_bytes(spec, w.context_tokens)
    cite = f"{WHEEL}: srt/arg_groups/memory_hook.py:280-326"
    if pool < need:
        return Decision(None, f"SGLang's static memory ({mem.mem_fraction_static:.3f} of the GPU) "
                        f"leaves {pool / 1e9:.1f} GB for the KV pool, less than one "
                        f"{w.context_tokens:,}-token request ({need / 1e9:.1f} GB): "
                        + sglang_why(mem, pool), _rules.CH_SIZING, cite)
    # SGLang sizes its decode CUDA graphs and request slots from --max-running-requests, and a
    # larger cap reserves more graph memory (with attention DP, 3-4.5 MiB per batch size per
    # worker): the largest per-worker cap whose own pool still holds that many requests
    per_request = max(lay.kv_bytes(spec, w.sizing_tokens), 1)
    lo, hi = 1, max(1, caps["max_num_seqs"])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if pool_of(memory(mid * attn_dp)) >= mid * per_request else (lo, mid - 1)
    per_worker = lo
    running = per_worker * attn_dp
    mem = memory(running)
    pool = pool_of(mem)
    why = sglang_why(mem, pool)
    if attn_dp > 1:
        why += (f"; --max-running-requests {running} is global: SGLang gives each of the "
                f"{attn_dp} attention-DP workers {running} // {attn_dp} = {per_worker}"
                + (f", what its pool holds of {w.sizing_tokens:,}-token requests next to the "
                   "graph memory that cap reserves" if per_worker < caps["max_num_seqs"] else ""))
        cite += "; srt/mem_cache/kv_cache_configurator.py:3128"
    elif per_worker < caps["max_num_seqs"]:
        why += (f"; --max-running-requests {running}: what that pool holds of "
                f"{w.sizing_tokens:,}-token requests")
    return Decision(mem, why, _rules.CH_SIZING, cite, extra={"max_running_requests": running,
                                                           "per_worker": per_worker})


def sglang_why(mem, pool) -> str:
    return (f"--mem-fraction-static {mem.mem_fraction_static:.3f} is SGLang 0.5.23's own rule: it "
            f"reserves {mem.reserved_mib / 1024:.1f} GiB of {mem.gpu_mem_mib / 1024:.1f} GiB for "
            f"activations ({mem.activation_mib / 1024:.1f} GiB at --chunked-prefill-size "
            f"{mem.chunked_prefill_size}), parallelism ({mem.parallel_mib / 1024:.2f}) and CUDA "
            f"graphs ({mem.graph_mib / 1024:.2f})"
            + (", at least 10 GiB on GPUs over 60 GiB" if mem.floor_applied else "")
            + f", leaving {pool / 1e9:.1f} GB per GPU for the KV pool after the weights")
