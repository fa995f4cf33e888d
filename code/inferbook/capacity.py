"""Capacity: how many GPUs, in what layout, serve a traffic within its latency targets.

`decide_capacity` searches tensor-parallel degrees and `max_num_seqs` for the fewest GPUs whose
simulated p90 TTFT and TPOT (`simulate.Deployment` on the fitted step-cost model,
`cost_model.FITTED`) meet the targets at a request rate; the recommender asks it when a rate and
targets are given. Memory is vLLM's start-up budget (`vllm_memory`, the one budget the planner,
the simulator and the log check read): a layout is tried only when the KV blocks of that budget
hold one request (`holds_one_request`). torch-free.
"""

from __future__ import annotations

import math

from . import sizing, validate, vllm_memory
from .cost_model import FITTED
from .decision import Decision
from .hardware import GPU
from .hardware import gpu as gpu_preset
from .metrics import p90
from .models import ModelSpec, as_spec
from .simulate import Deployment
from .workload import fixed_workload


def decide_capacity(spec: ModelSpec | str, gpu_name: GPU | str, *, request_rate: float,
                    prompt_tokens: int, output_tokens: int, ttft_p90_s: float, tpot_p90_s: float,
                    kv_dtype: str = "fp16", weight_dtype: str = "fp16", max_gpus: int = 8,
                    n_requests: int = 400, seed: int = 0,
                    gpu_memory_utilization: float = vllm_memory.DEFAULT_UTILIZATION) -> Decision:
    """Return the replica count, TP degree and `max_num_seqs` that meet p90 TTFT/TPOT targets at
    `request_rate` requests/s with the fewest GPUs, simulated; with the predicted p90s.

    For each TP degree the heads split over (`sizing.valid_tp_degrees`) and each `max_num_seqs`
    in (32, 64, 128, 256) whose vLLM budget holds one request of prompt + output tokens
    (`holds_one_request`), the smallest replica count whose simulated p90s
    meet both targets (Poisson arrivals, fixed lengths, round-robin routing, chunked prefill).
    Fewest GPUs wins; ties go to the smaller TP degree, then the larger `max_num_seqs`.
    `gpu_memory_utilization` (vLLM's, in (0, 1]; default its 0.33.0 default,
    `vllm_memory.DEFAULT_UTILIZATION`) sizes each replica's KV pool: a lower one leaves fewer
    blocks, never more, so more requests wait or are preempted (tests/test_capacity.py: it never
    lowers the GPUs a plan needs).
    `value`: dict(tensor_parallel_size, replicas, max_num_seqs, p90_ttft_s, p90_tpot_s); None
    when nothing up to 64 replicas meets the targets.

    An entry point (chapter 9 and the recommender call it): `spec` and `gpu_name` may be preset
    names, resolved here once.
    """
    spec, g = as_spec(spec), gpu_preset(gpu_name)
    gpu_name = g.name
    util = sizing.fraction("gpu_memory_utilization", gpu_memory_utilization, high_open=False)
    for name, v in (("request_rate", request_rate), ("ttft_p90_s", ttft_p90_s), ("tpot_p90_s", tpot_p90_s)):
        if validate.finite_float(name, v) <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    prompt_tokens = validate.positive_int("prompt_tokens", prompt_tokens)
    output_tokens = validate.positive_int("output_tokens", output_tokens)
    max_gpus = validate.integer("max_gpus", max_gpus, 1, 1024)
    n_requests = validate.integer("n_requests", n_requests, 1, 100_000)
    seed = validate.non_negative_int("seed", seed)
    sizing.get_dtype(kv_dtype, "kv_dtype"), sizing.get_dtype(weight_dtype, "weight_dtype")
    if prompt_tokens + output_tokens > spec.max_position_embeddings:
        raise ValueError(f"prompt_tokens + output_tokens = {prompt_tokens + output_tokens} exceeds "
                         f"{spec.name}'s context of {spec.max_position_embeddings} tokens")
    eff, error_sentence = FITTED.efficiency(), FITTED.error_sentence
    ctx = prompt_tokens + output_tokens
    best, tried = None, []
    for tp in sizing.valid_tp_degrees(spec, max_gpus):
        if best is not None and tp >= best[0][0]:  # cannot use fewer GPUs (ties go to smaller TP)
            break
        for seqs in (256, 128, 64, 32):
            # Only fewer GPUs can win (or as many at a smaller TP): search no further than that.
            limit = 64
            if best is not None:
                gpus, best_tp = best[0][0], best[0][1]
                limit = gpus // tp if tp < best_tp else (gpus - 1) // tp
            if limit < 1:
                continue
            dep = Deployment(spec, g, tp, seqs, max(8192, prompt_tokens), True, kv_dtype,
                             weight_dtype, eff=eff, gpu_memory_utilization=util)
            if not holds_one_request(dep, ctx):
                continue
            found = _min_replicas(dep, request_rate, prompt_tokens, output_tokens, n_requests,
                                  seed, ttft_p90_s, tpot_p90_s, limit)
            if found is None:
                continue
            replicas, t90, o90 = found
            tried.append((tp, seqs, replicas))
            key = (tp * replicas, tp, -seqs)
            if best is None or key < best[0]:
                best = (key, dict(tensor_parallel_size=tp, replicas=replicas, max_num_seqs=seqs,
                                  p90_ttft_s=t90, p90_tpot_s=o90))
    assumptions = (f"{n_requests} requests of {prompt_tokens} prompt + {output_tokens} output tokens, "
                   f"Poisson arrivals at {request_rate:g}/s routed at random, so each of n replicas "
                   f"sees Poisson arrivals at {request_rate:g}/n per second, "
                   f"chunked prefill, {weight_dtype} weights, {kv_dtype} KV cache, "
                   + ("" if util == vllm_memory.DEFAULT_UTILIZATION else
                      f"--gpu-memory-utilization {util:g}, ") +
                   f"efficiency: {eff.flops_efficiency:.2f} of peak FLOP/s, "
                   f"{eff.bandwidth_efficiency:.2f} of HBM bandwidth, "
                   f"{eff.link_efficiency:.2f} of link bandwidth, "
                   f"{eff.step_overhead_s * 1e3:.2f} ms per step; {error_sentence}")
    if best is None:
        return Decision(None, f"no configuration up to 64 replicas of ≤ {max_gpus} {gpu_name} GPUs "
                              f"meets p90 TTFT ≤ {ttft_p90_s:g} s and p90 TPOT ≤ {tpot_p90_s:g} s in "
                              f"simulation ({assumptions})", "ch 9")
    v = best[1]
    reason = (f"{v['replicas']} replica(s) x TP {v['tensor_parallel_size']} = "
              f"{v['replicas'] * v['tensor_parallel_size']} {gpu_name} GPUs with max_num_seqs="
              f"{v['max_num_seqs']}: simulated p90 TTFT {v['p90_ttft_s']:.3f} s (target {ttft_p90_s:g}), "
              f"p90 TPOT {v['p90_tpot_s'] * 1e3:.1f} ms (target {tpot_p90_s * 1e3:g} ms); the fewest "
              f"GPUs of the (TP, max_num_seqs) choices searched ({len(tried)} met the targets). Assumptions: {assumptions}")
    return Decision(v, reason, "ch 9", "agrawal2024vidur", extra={"tried": tried})


def request_blocks(dep: Deployment, ctx_tokens: int) -> int:
    """Return the KV blocks vLLM reserves for one request of `ctx_tokens` tokens on `dep`
    (`vllm_memory.vllm_kv_cache`'s blocks per request: every KV-cache group, windows capped)."""
    if not isinstance(dep, Deployment):
        raise validate.ArgumentTypeError(f"dep must be a simulate.Deployment, got {type(dep).__name__}")
    ctx_tokens = validate.positive_int("ctx_tokens", ctx_tokens)
    return vllm_memory.vllm_kv_cache(
        dep.spec, dep.tp, available_bytes=0, max_model_len=ctx_tokens, kv_dtype=dep.kv_dtype,
        block_size=dep.block_size, max_num_batched_tokens=dep.max_num_batched_tokens,
    ).blocks_per_request


def holds_one_request(dep: Deployment, ctx_tokens: int) -> bool:
    """Return whether `dep`'s KV pool (`Deployment.num_blocks`: vLLM's budget at the deployment's
    `gpu_memory_utilization`, `simulate.kv_blocks`) holds one request of `ctx_tokens` tokens:
    vLLM's own start-up check (maximum concurrency >= 1)."""
    return dep.num_blocks() >= request_blocks(dep, ctx_tokens)


def _min_replicas(dep: Deployment, rate: float, prompt_tokens: int, output_tokens: int,
                  n_requests: int, seed: int, ttft_s: float, tpot_s: float,
                  limit: int = 64) -> tuple[int, float, float] | None:
    """Return (replicas, p90 TTFT, p90 TPOT) for the fewest replicas meeting both targets, or None.

    Identical replicas behind a random router: each sees Poisson arrivals at rate / replicas,
    so one simulated replica stands for all of them. A replica count whose arithmetic alone
    exceeds the GPUs' time (rate / n x one request's compute seconds > 1) cannot keep up, however
    well a finite simulated burst of `n_requests` happens to go: it is refused before simulating.
    """
    cache: dict[int, tuple[bool, float, float]] = {}
    # one request's FLOPs (prompt and output tokens, causal attention) at the fitted FLOP/s
    compute_s = dep.cost_model().cost([(prompt_tokens + output_tokens - 1, 0)]).compute_s

    def ok(n: int) -> bool:
        if rate / n * compute_s > 1:
            return False
        if n not in cache:
            reqs = fixed_workload(n_requests, prompt_tokens, output_tokens, rate=rate / n, seed=seed)
            m = dep.run(reqs).metrics
            t90, o90 = p90(m, "ttft"), p90(m, "tpot")
            o90 = 0.0 if math.isnan(o90) else o90  # one-token replies: no TPOT (vLLM counts 0)
            cache[n] = (t90 <= ttft_s and o90 <= tpot_s, t90, o90)
        return cache[n][0]

    if not ok(limit):  # not even at almost no load per replica: give up at once
        return None
    hi = 1
    while not ok(hi):  # double until it meets the targets (more replicas only lower the load)
        if hi >= limit:
            return None
        hi = min(2 * hi, limit)
    lo = hi // 2  # not ok(lo) unless lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi, cache[hi][1], cache[hi][2]
