"""Sized alternatives to a plan's layout: data-parallel attention with expert parallelism for
MoE/MLA models, and CPU KV offloading when the KV pool is the limit.

Each alternative is a `Decision` whose value holds its numbers (KV capacity, estimated decode
tokens/s by chapter 9's step-cost model, host memory) and its commands for vLLM 0.33.0 and
SGLang 0.5.23, or None with the reason it does not apply. No torch at import.
"""

from __future__ import annotations

import math
from dataclasses import replace

from . import rules, sizing
from .arith import ceil_div
from .commands import check_command
from .decision import Decision
from .hardware import GPU
from .models import ModelSpec

GiB = 2**30
HOST_GIB_PER_GPU = 256   # assumed host memory per GPU of a GPU server (2 TiB for 8 GPUs)


def expert_params(spec: ModelSpec) -> int:
    """Return the routed experts' parameters (what expert parallelism shards), all layers."""
    if not spec.is_moe:
        return 0
    moe_layers = spec.num_hidden_layers - spec.first_k_dense_replace
    return moe_layers * spec.n_routed_experts * 3 * spec.hidden_size * spec.moe_intermediate_size


def dp_ep_memory(spec: ModelSpec, g: GPU, n: int, weight_dtype: str, utilization: float,
                 max_num_batched_tokens: int, max_num_seqs: int) -> tuple[int, int, int]:
    """Return (usable, weight, runtime) bytes per GPU with attention replicated on each of `n`
    GPUs (data-parallel attention) and the routed experts spread over them (expert parallel)."""
    byte = sizing.get_dtype(weight_dtype).bits / 8
    experts = expert_params(spec)
    weights = math.ceil((spec.n_params - experts) * byte + experts * byte / n)
    runtime = sizing.vllm_runtime_memory(spec, 1, max_num_batched_tokens=max_num_batched_tokens,
                                         max_num_seqs=max_num_seqs)
    non_torch_tp = sizing.ASSUMED_NON_TORCH_BYTES["tp"] - sizing.ASSUMED_NON_TORCH_BYTES[1]
    usable = math.ceil(g.hbm_bytes * utilization)
    return usable, weights, runtime.total_bytes + non_torch_tp


def dp_ep(spec: ModelSpec, g: GPU, n: int, w, lay: rules.Layout, tp_held: int,
          tp_rate: float) -> Decision:
    """Return the DP-attention + EP alternative on all `n` GPUs, compared with the TP plan."""
    if not (spec.is_moe or spec.is_mla) or n < 2:
        return Decision(None, "only for MoE/MLA models on several GPUs", rules.CH_SERVING)
    caps = lay.batching.value
    seqs = caps["max_num_seqs"]
    usable, weights, runtime = dp_ep_memory(spec, g, n, lay.weight_dtype,
                                            lay.budget.usable_bytes / g.hbm_bytes,
                                            caps["max_num_batched_tokens"], seqs)
    budget = usable - weights - runtime
    per_request = sizing.kv_bytes_per_gpu(spec, 1, w.sizing_tokens, 1, lay.kv_dtype)
    if budget < sizing.kv_bytes_per_gpu(spec, 1, w.context_tokens, 1, lay.kv_dtype):
        return Decision(None, (
            f"data-parallel attention does not fit: each GPU would keep the attention and dense "
            f"weights whole plus 1/{n} of the experts ({weights / 1e9:.1f} GB of "
            f"{usable / 1e9:.1f} GB usable), leaving no room for one {w.context_tokens:,}-token "
            "request"), rules.CH_SERVING)
    per_rank = budget // per_request
    b = max(1, min(per_rank, seqs, ceil_div(w.concurrency, n) if w.concurrency else seqs))
    rank = replace(lay, tp=1, pp=1, dp=n)
    try:
        cost = rules.step_cost_model(spec, g, rank)
        step = replace(cost, weight_bytes=weights).step_time([(1, w.sizing_tokens - 1)] * b)
    except ValueError:
        step = rules._roofline_seconds(spec, g, rank, b, w.sizing_tokens)
    rate = n * b / step
    flags = ["--tensor-parallel-size", "1", "--data-parallel-size", str(n),
             "--enable-expert-parallel"]
    sglang = ["--tp-size", str(n), "--attn-dp-size", str(n), "--ep-size", str(n)]
    assert not check_command(["vllm", "serve", "m", *flags], "vllm")
    assert not check_command(["python", "-m", "sglang.launch_server", *sglang], "sglang")
    why = (f"data-parallel attention over {n} GPUs with the {spec.n_routed_experts or 0} routed "
           f"experts spread over them: {weights / 1e9:.1f} GB of weights per GPU, KV for "
           f"{n * per_rank} requests of {w.sizing_tokens:,} tokens (the TP plan: {tp_held}), "
           f"about {rate:,.0f} decode tokens/s by the step-cost model (the TP plan: "
           f"{tp_rate:,.0f}; the all-to-all of expert parallelism is not in the model). vLLM: "
           f"{' '.join(flags)}; SGLang 0.5.23: {' '.join(sglang)} (--enable-dp-attention is "
           "its deprecated spelling)")
    return Decision(dict(held=n * per_rank, tokens_per_s=rate, weight_bytes=weights,
                         vllm_flags=tuple(flags), sglang_flags=tuple(sglang)), why,
                    rules.CH_SERVING, f"{rules.WHEEL}: config/parallel.py::ParallelConfig; "
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
                 rate: float) -> tuple[tuple[str, Decision], ...]:
    """Return the sized alternatives that apply to this plan, by name."""
    out = []
    if (spec.is_moe or spec.is_mla) and n > 1:
        out.append(("dp attention + expert parallel",
                    dp_ep(spec, g, n, w, lay, lay.dp * kv["sequences"], rate)))
    off = kv_offload(spec, w, lay, kv["sequences"])
    if off.value is not None:
        out.append(("cpu kv offloading", off))
    return tuple(out)
