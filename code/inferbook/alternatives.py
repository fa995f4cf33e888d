"""Sized alternatives to a plan's layout: data-parallel attention with expert parallelism for
MoE/MLA models, and CPU KV offloading when the KV pool is the limit.

Each alternative is a `Decision` whose value holds its numbers (KV capacity, estimated decode
tokens/s by chapter 9's step-cost model, host memory) and its commands for vLLM 0.33.0 and
SGLang 0.5.23, or None with the reason it does not apply. No torch at import.
"""

from __future__ import annotations

import math

from . import rules
from .arith import ceil_div
from .commands import check_command
from .decision import Decision
from .hardware import GPU, GPUS
from .models import ModelSpec

GiB = 2**30
HOST_GIB_PER_GPU = 256   # assumed host memory per GPU of a GPU server (2 TiB for 8 GPUs)


def dp_ep(spec: ModelSpec, lay: rules.Layout, rates, tp_held: int, tp_rate: float) -> Decision:
    """Return the runner-up of the other kind (data-parallel attention + EP against tensor
    parallelism) from the main ranking's `rates` (`parallelism.rate_layouts`)."""
    others = [r for r in rates if (r.layout.ep > 1) != (lay.ep > 1)]
    if not others:
        return Decision(None, "no layout of the other kind holds one longest request",
                        rules.CH_SERVING)
    best = max(others, key=lambda r: r.tokens_per_s)
    o = best.layout
    if o.ep > 1:
        flags = ["--tensor-parallel-size", "1", "--data-parallel-size", str(o.dp),
                 "--enable-expert-parallel"]
        sglang = ["--tp-size", str(o.ep), "--attn-dp-size", str(o.ep), "--ep-size", str(o.ep)]
        name = (f"data-parallel attention over {o.dp} GPUs with the {spec.n_routed_experts} "
                f"routed experts spread over {o.ep}")
    else:
        flags = ["--tensor-parallel-size", str(o.tp)] + (
            ["--data-parallel-size", str(o.dp)] if o.dp > 1 else [])
        sglang = ["--tp-size", str(o.tp)] + (["--dp-size", str(o.dp)] if o.dp > 1 else [])
        name = f"tensor parallelism TP={o.tp}" + (f" x {o.dp} replicas" if o.dp > 1 else "")
    assert not check_command(["vllm", "serve", "m", *flags], "vllm")
    assert not check_command(["python", "-m", "sglang.launch_server", *sglang], "sglang")
    why = (f"{name}: {o.budget.weight_bytes / 1e9:.1f} GB of weights per GPU, KV for "
           f"{best.held} requests (the plan: {tp_held}), about {best.tokens_per_s:,.0f} tokens/s "
           f"by the step-cost model (the plan: {tp_rate:,.0f}). vLLM: {' '.join(flags)}; "
           f"SGLang 0.5.23: {' '.join(sglang)}"
           + (" (--attn-dp-size replaces the deprecated --enable-dp-attention)" if o.ep > 1
              else ""))
    return Decision(dict(held=best.held, tokens_per_s=best.tokens_per_s,
                         weight_bytes=o.budget.weight_bytes, vllm_flags=tuple(flags),
                         sglang_flags=tuple(sglang)), why, rules.CH_SERVING,
                    f"{rules.WHEEL}: config/parallel.py::ParallelConfig; "
                    "sglang 0.5.23 srt/arg_groups/parallel_hook.py:39")


def kv_offload(spec: ModelSpec, w, lay: rules.Layout, held_per_replica: int) -> Decision:
    """Return CPU KV offloading sized for the requests the GPU KV pool cannot hold."""
    target = max(w.concurrency or 0, rules.MIN_USEFUL_BATCH * lay.dp)
    missing = ceil_div(target, lay.dp) - held_per_replica
    if missing <= 0:
        return Decision(None, "the GPU KV pool holds the requested concurrency", rules.CH_PAGED)
    per_gpu = lay.kv_bytes(spec, w.sizing_tokens)
    replica_gib = math.ceil(missing * per_gpu * lay.tp * lay.pp / GiB)
    per_gpu_gb = math.ceil(missing * per_gpu / 1e9)
    if replica_gib * lay.dp > HOST_GIB_PER_GPU * lay.dp * lay.tp * lay.pp:
        return Decision(None, (
            f"offloading the {missing} requests per replica the GPU KV pool cannot hold would "
            f"need {replica_gib:,} GiB of host memory per replica, more than the "
            f"~{HOST_GIB_PER_GPU} GiB per GPU a GPU server has (assumed); add GPUs instead"),
            rules.CH_PAGED)
    flags = ["--kv-offloading-size", str(replica_gib), "--kv-offloading-backend", "native"]
    sglang = ["--enable-hierarchical-cache", "--hicache-size", str(per_gpu_gb)]
    assert not check_command(["vllm", "serve", "m", *flags], "vllm")
    assert not check_command(["python", "-m", "sglang.launch_server", *sglang], "sglang")
    why = (f"the GPU KV pool holds {held_per_replica} requests of {w.sizing_tokens:,} tokens per "
           f"replica, {missing} short of {ceil_div(target, lay.dp)}; CPU offloading keeps the KV "
           "of preempted and waiting requests (and of earlier turns) in host memory, so they "
           "are copied back instead of recomputed (it does not enlarge the running batch): "
           f"{replica_gib} GiB of host memory per replica, {replica_gib * lay.dp} GiB in all. "
           f"vLLM: {' '.join(flags)} (the size is summed over a replica's TP ranks); SGLang: "
           f"{' '.join(sglang)} (GB per rank)")
    return Decision(dict(host_gib=replica_gib * lay.dp, vllm_flags=tuple(flags),
                         sglang_flags=tuple(sglang)), why, rules.CH_PAGED,
                    f"{rules.WHEEL}: config/cache.py::CacheConfig.kv_offloading_size; "
                    "config/vllm.py (cpu_bytes_to_use = size x 2**30)")


def alternatives(spec: ModelSpec, g: GPU, n: int, w, lay: rules.Layout, kv: dict,
                 rate: float, rates=()) -> tuple[tuple[str, Decision], ...]:
    """Return the sized alternatives that apply to this plan, by name."""
    out = []
    if spec.is_moe and n > 1:
        name = "tensor parallel" if lay.ep > 1 else "dp attention + expert parallel"
        out.append((name, dp_ep(spec, lay, rates, lay.dp * kv["sequences"], rate)))
    off = kv_offload(spec, w, lay, kv["sequences"])
    if off.value is not None:
        out.append(("cpu kv offloading", off))
    return tuple(out)


def memory_fixes(spec: ModelSpec, g: GPU, n: int, ctx: int,
                 allow_quantization: bool) -> tuple[str, ...]:
    """Return the changes that would make `ctx`-token requests of `spec` fit, each checked with
    the same budget rules: more GPUs of this type, a GPU with more memory, a shorter context
    (only when the weights alone leave room), quantized weights (only when they would fit)."""
    def fits(gpu: GPU, count: int, tokens: int, quant: bool) -> bool:
        req = rules.PlanRequest(count, rules.compute_dtype(gpu), "latency", None, 0.92)
        return rules.decide_weights(spec, gpu, tokens, req, quant).value is not None

    out = []
    more = next((m for m in (2, 4, 8, 16, 32, 64) if m > n and fits(g, m, ctx, False)), None)
    if more:
        out.append(f"at least {more}x {g.name} (the checkpoint's weights at TP/PP over them)")
    bigger = [x.name for x in GPUS.values() if x.hbm_bytes > g.hbm_bytes and fits(x, n, ctx, False)]
    if bigger:
        out.append(f"{n}x a GPU with more memory: {', '.join(bigger)}")
    if ctx > 1024 and fits(g, n, 1024, False):
        lo, hi = 1024, ctx
        while hi - lo > 256:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(g, n, mid, False) else (lo, mid)
        out.append(f"a --max-model-len of at most {lo:,} on these GPUs")
    if not allow_quantization and fits(g, n, ctx, True):
        out.append("quantized weights (allow_quantization=True), after a quality check")
    nothing = (f"{spec.name} does not fit on {n}x {g.name} at any context: weights alone "
               f"exceed the budget; use more GPUs than one node's {rules.GPUS_PER_NODE} or a smaller "
               "model")
    return tuple(out) or (nothing,)
