"""Serving at scale on a simulated clock: the engine's own scheduler, a step-cost model, capacity.

The engine of chapter 6 (`inferbook.engine`) decides every step which sequences run and how many
tokens each computes (`engine.Scheduler`), then runs the model (`engine.forward_batch`). Here the
*same* `Scheduler` makes the same decisions (token budget, chunked prefill, prefix-cache hits,
preemption, `max_num_seqs`) on a KV-block pool that only keeps the books, and the forward pass is
replaced by a cost model that says how long the step would take:

    step_time = overhead + seq_overhead · n_seqs + max(compute, memory) + comm

* compute = FLOPs / (flops_efficiency · peak FLOP/s). FLOPs per sequence come from
  `roofline.forward_cost` (2 per active weight per token, 4·d_attn per causal query–key pair
  and layer), divided over the `tp` GPUs.
* memory = (weights per GPU + KV bytes read) / (bandwidth_efficiency · HBM bandwidth).
  Weights per GPU: `sizing.weight_bytes / tp`; KV bytes per token per GPU from
  `sizing.kv_bytes_per_gpu`; each sequence reads its whole context once per step.
* comm = tensor-parallel all-reduce: two per layer (after attention and after the MLP) of
  tokens × hidden_size × 2 bytes each, as a ring all-reduce: 2 (tp − 1) / tp of the message
  crosses each GPU's link in each direction, at link_efficiency × the one-direction bandwidth
  (half of `hardware.GPU.nvlink_bytes_per_s`, or of the PCIe figure without NVLink), plus a
  fixed latency per all-reduce.
* overhead: a fixed cost per step (launches, scheduling, sampling) and per sequence.

Every efficiency factor is a named field of `Efficiency`; none is hidden. On the CPU the
constants are fitted to the engine's measured steps (`fit_cpu`); for GPUs they are fitted on
two published runs and checked on others (tests/bench/bench_simulate.py, chapter 9).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from . import roofline, sizing
from .arith import ceil_div
from .decision import Decision
from .engine import EngineResult, Request, Scheduler, Sequence, StepRecord, engine_result
from .hardware import GPU
from .hardware import gpu as gpu_preset
from .metrics import SLO, RequestMetrics, p90
from .metrics import goodput_fraction as _goodput_fraction
from .models import ModelSpec
from .paged import BlockAllocator, PagedKVCache
from .prefix_cache import PrefixCache

# ---------------------------------------------------------------------------------------------
# the step-cost model


@dataclass(frozen=True)
class Efficiency:
    """The named factors between datasheet peaks and what a serving step achieves.

    flops_efficiency: achieved / peak tensor FLOP/s in the step's matrix products.
    bandwidth_efficiency: achieved / peak HBM bandwidth reading weights and KV cache.
    link_efficiency: achieved / peak one-direction GPU-to-GPU bandwidth in an all-reduce.
    step_overhead_s: fixed seconds per step; seq_overhead_s: seconds per sequence in the step.
    allreduce_latency_s: fixed seconds per all-reduce (tp > 1 only).
    """

    flops_efficiency: float = 0.5
    bandwidth_efficiency: float = 0.8
    link_efficiency: float = 0.7
    step_overhead_s: float = 0.0
    seq_overhead_s: float = 0.0
    allreduce_latency_s: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("flops_efficiency", "bandwidth_efficiency", "link_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"Efficiency.{name} must be in (0, 1], got {value!r}")
        for name in ("step_overhead_s", "seq_overhead_s", "allreduce_latency_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"Efficiency.{name} must be ≥ 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class StepCost:
    """One step's time and its terms, in seconds: total = overhead + max(compute, memory) + comm."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.overhead_s + max(self.compute_s, self.memory_s) + self.comm_s

    @property
    def bound(self) -> str:
        """Return which of compute or memory sets the step's main term."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


@dataclass(frozen=True)
class CostModel:
    """Step time of one replica (`tp` GPUs) serving one model; see the module docstring.

    Shape (whole model): n_params (active per token), n_layer, d_attn, kv_dim, hidden.
    Per GPU: weight_bytes, kv_bytes_per_token, peak_flops (None: `eff.flops_efficiency`
    multiplies nothing and `achieved_flops` is given instead), hbm_bytes_per_s (None: the
    memory term is left out, e.g. on a CPU whose tiny model sits in cache), link_bytes_per_s
    (one direction).
    """

    name: str
    n_params: float
    n_layer: int
    d_attn: int
    kv_dim: int
    hidden: int
    weight_bytes: float
    kv_bytes_per_token: float
    peak_flops: float | None
    hbm_bytes_per_s: float | None
    eff: Efficiency = field(default_factory=Efficiency)
    tp: int = 1
    link_bytes_per_s: float | None = None
    achieved_flops: float | None = None   # used when peak_flops is None (fitted on a CPU)

    @classmethod
    def for_gpu(cls, spec: ModelSpec, gpu: GPU | str, tp: int = 1, eff: Efficiency | None = None,
                kv_dtype: str = "fp16", weight_dtype: str = "fp16") -> "CostModel":
        """Return the cost model of `spec` on `tp` GPUs of type `gpu` (weights sharded by TP).

        FP8 weights on a GPU with FP8 tensor cores (compute capability ≥ 8.9) run at twice the
        FP16 peak, as NVIDIA's datasheets state for Ada and Hopper.
        """
        g = gpu_preset(gpu) if isinstance(gpu, str) else gpu
        problem = sizing.tp_problem(spec, tp)
        if problem:
            raise ValueError(problem)
        if g.fp16_tensor_flops is None:
            raise ValueError(f"{g.name} has no published FP16 tensor peak; pick another GPU")
        peak = g.fp16_tensor_flops
        if sizing.get_dtype(weight_dtype).bits == 8 and g.compute_capability >= (8, 9):
            peak *= 2
        link = g.nvlink_bytes_per_s or g.pcie_bytes_per_s
        return cls(
            name=f"{spec.name} on {tp}x {g.name} ({weight_dtype} weights, {kv_dtype} KV)",
            n_params=spec.n_active_params, n_layer=spec.num_hidden_layers,
            d_attn=spec.num_attention_heads * spec.head_dim,
            kv_dim=spec.num_key_value_heads * spec.head_dim, hidden=spec.hidden_size,
            weight_bytes=sizing.weight_bytes_per_gpu(spec, n_gpus=tp, weight_dtype=weight_dtype),
            kv_bytes_per_token=sizing.kv_bytes_per_gpu(spec, n_gpus=tp, ctx_tokens=1, batch=1,
                                                       kv_dtype=kv_dtype),
            peak_flops=peak, hbm_bytes_per_s=g.hbm_bytes_per_s, eff=eff or Efficiency(), tp=tp,
            link_bytes_per_s=None if link is None else link / 2)

    @classmethod
    def for_gpt(cls, config, achieved_flops: float, eff: Efficiency) -> "CostModel":
        """Return a CPU cost model of a `gpt.GPTConfig` (fp32, MHA), with fitted FLOP/s."""
        n = config.n_layer * 12 * config.n_embd ** 2 + config.vocab_size * config.n_embd
        return cls(name=f"GPT {config.n_layer}x{config.n_embd} on this CPU", n_params=n,
                   n_layer=config.n_layer, d_attn=config.n_embd, kv_dim=config.n_embd,
                   hidden=config.n_embd, weight_bytes=4 * n,
                   kv_bytes_per_token=2 * 4 * config.n_layer * config.n_embd, peak_flops=None,
                   hbm_bytes_per_s=None, eff=eff, achieved_flops=achieved_flops)

    def with_eff(self, **changes) -> "CostModel":
        """Return a copy with some `Efficiency` fields changed."""
        return replace(self, eff=replace(self.eff, **changes))

    # -- the terms ------------------------------------------------------------------------------
    def flops(self, shapes: list[tuple[int, int]]) -> float:
        """Return the FLOPs of a step (all GPUs together). shapes: (new_tokens, past_tokens) per sequence."""
        decodes = [p for n, p in shapes if n == 1]
        total = 0.0
        if decodes:  # attention FLOPs are linear in the context: one call at the mean context
            total += roofline.forward_cost(self.n_params, self.n_layer, self.d_attn, self.kv_dim,
                                           len(decodes), 1, sum(decodes) / len(decodes)).flops
        for n, p in shapes:
            if n > 1:
                total += roofline.forward_cost(self.n_params, self.n_layer, self.d_attn,
                                               self.kv_dim, 1, n, p).flops
        return total

    def cost(self, shapes: list[tuple[int, int]]) -> StepCost:
        """Return the step's terms for sequences computing (new_tokens, past_tokens) each."""
        if not shapes:
            return StepCost(0.0, 0.0, 0.0, 0.0)
        e = self.eff
        flops_per_gpu = self.flops(shapes) / self.tp
        rate = (self.peak_flops * e.flops_efficiency if self.peak_flops is not None
                else self.achieved_flops)
        compute = flops_per_gpu / rate
        memory = 0.0
        if self.hbm_bytes_per_s is not None:
            kv_tokens = sum(n + p for n, p in shapes)
            memory = ((self.weight_bytes + kv_tokens * self.kv_bytes_per_token)
                      / (e.bandwidth_efficiency * self.hbm_bytes_per_s))
        comm = 0.0
        if self.tp > 1:
            tokens = sum(n for n, _ in shapes)
            message = tokens * self.hidden * 2  # bf16/fp16 activations
            per_allreduce = 2 * (self.tp - 1) / self.tp * message / (e.link_efficiency * self.link_bytes_per_s)
            comm = 2 * self.n_layer * (per_allreduce + e.allreduce_latency_s)
        overhead = e.step_overhead_s + e.seq_overhead_s * len(shapes)
        return StepCost(compute, memory, comm, overhead)

    def step_time(self, shapes: list[tuple[int, int]]) -> float:
        """Return the seconds one step takes (see `cost` for the terms)."""
        return self.cost(shapes).total_s


# ---------------------------------------------------------------------------------------------
# the scheduler on a simulated clock


PLACEHOLDER_TOKEN = 10**9  # + request id: a generated token that matches no other request's


def bookkeeping_cache(num_blocks: int, block_size: int = 16) -> PagedKVCache:
    """Return a paged cache that only keeps the books (block tables, ref counts): 1 value per slot."""
    return PagedKVCache(BlockAllocator(num_blocks, block_size), 1, 1, 1)


def simulate(requests: list[Request], cost: CostModel, *, num_blocks: int, block_size: int = 16,
             max_num_seqs: int = 16, max_num_batched_tokens: int = 512, policy: str = "continuous",
             chunked_prefill: bool = False, prefix_caching: bool = False,
             decode_only_cost: bool = False) -> EngineResult:
    """Return what `engine.Engine.run(requests)` would return, timed by `cost` instead of a model.

    The decisions are `engine.Scheduler`'s, on a cache of `num_blocks` blocks; each step lasts
    `cost.step_time` of the scheduled (new_tokens, past_tokens); idle time jumps to the next
    arrival, as the engine's CPU clock does. Generated tokens are placeholders (`PLACEHOLDER_TOKEN`
    + request id, so they never match another request's prefix). `decode_only_cost`: prompt tokens cost
    nothing (a decode instance whose KV arrives from a prefill instance).
    """
    for r in requests:
        if len(r.prompt) > max_num_batched_tokens and not chunked_prefill:
            raise ValueError(f"request {r.request_id}: prompt of {len(r.prompt)} tokens exceeds "
                             f"max_num_batched_tokens={max_num_batched_tokens}; enable chunked_prefill")
        if ceil_div(len(r.prompt) + r.max_new_tokens - 1, block_size) > num_blocks:
            raise ValueError(f"request {r.request_id} needs more than the pool's {num_blocks} blocks")
    cache = bookkeeping_cache(num_blocks, block_size)
    prefix = PrefixCache(cache.allocator) if prefix_caching else None
    sched = Scheduler(cache, max_num_seqs, max_num_batched_tokens, policy, chunked_prefill, prefix)
    pending = deque(sorted((Sequence.from_request(r) for r in requests),
                           key=lambda s: s.request.arrival_time))
    seqs, timeline, t = {}, [], 0.0
    while pending or sched.waiting or sched.running:
        while pending and pending[0].request.arrival_time <= t:
            seq = pending.popleft()
            seqs[seq.seq_id] = seq
            sched.add(seq)
        scheduled = sched.schedule(t)
        if not scheduled:
            if not pending:
                raise RuntimeError("the scheduler admits nothing and no request is left to arrive")
            t = pending[0].request.arrival_time
            continue
        # A padding row (n = 0, static batching) costs one decode row, as in the engine.
        shapes = [(n, s.num_computed) if n else (1, s.num_computed - 1) for s, n in scheduled]
        if decode_only_cost:
            shapes = [(n, p) for (n, p), (s, _) in zip(shapes, scheduled)
                      if n == 1 and len(s.output) > 0]
        t += cost.step_time(shapes)
        tokens = [PLACEHOLDER_TOKEN + seq.seq_id for seq, _ in scheduled]
        prefill, padding = sched.complete(scheduled, tokens, t)
        timeline.append(StepRecord(t, len(sched.running), len(sched.waiting) + len(pending), prefill,
                                   sum(n for _, n in scheduled) - prefill,
                                   cache.allocator.num_used_blocks, padding))
        sched.end_static_batch(t)
    return engine_result(seqs, requests, timeline, sched.num_preemptions,
                         prefix.hit_rate if prefix else 0.0)


def step_shapes(requests: list[Request], *, num_blocks: int, block_size: int = 16, **sched_kwargs
                ) -> list[list[tuple[int, int]]]:
    """Return the (new_tokens, past_tokens) of every step the scheduler takes when all requests
    arrive at t = 0 (the order does not depend on step times then): the features for `fit_cpu`."""
    recorded = []

    class Recorder:
        name = "recorder"

        def step_time(self, shapes):
            recorded.append(list(shapes))
            return 1.0

    simulate(requests, Recorder(), num_blocks=num_blocks, block_size=block_size, **sched_kwargs)
    return recorded


# ---------------------------------------------------------------------------------------------
# workloads


def fixed_workload(n_requests: int, prompt_tokens: int, output_tokens: int, rate: float | None = None,
                   seed: int = 0, shared_prefix_tokens: int = 0) -> list[Request]:
    """Return requests of fixed lengths with random token ids; Poisson arrivals at `rate` per second
    (None: all at t = 0, an offline benchmark). The first `shared_prefix_tokens` of every prompt
    are the same (a system prompt), the rest differ."""
    if prompt_tokens < 1 or output_tokens < 1 or n_requests < 1:
        raise ValueError(f"need n_requests, prompt_tokens, output_tokens ≥ 1, got "
                         f"{n_requests}, {prompt_tokens}, {output_tokens}")
    if not 0 <= shared_prefix_tokens <= prompt_tokens:
        raise ValueError(f"shared_prefix_tokens must be in [0, {prompt_tokens}], got {shared_prefix_tokens}")
    rng = np.random.default_rng(seed)
    shared = tuple(rng.integers(0, 32000, shared_prefix_tokens).tolist())
    t, out = 0.0, []
    for i in range(n_requests):
        if rate is not None:
            t += float(rng.exponential(1.0 / rate))
        # distinct first token after the shared part: no accidental prefix hits
        rest = (100000 + i,) + tuple(rng.integers(0, 32000, prompt_tokens - shared_prefix_tokens - 1).tolist())
        prompt = (shared + rest)[:prompt_tokens] if shared_prefix_tokens < prompt_tokens else shared
        out.append(Request(i, prompt, output_tokens, t))
    return out


def poisson_arrivals(requests: list[Request], rate: float, seed: int = 0) -> list[Request]:
    """Return the same requests with Poisson arrival times at `rate` per clock unit."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, len(requests)))
    return [replace(r, arrival_time=float(t)) for r, t in zip(requests, times)]


# ---------------------------------------------------------------------------------------------
# fitting the constants on the CPU


def fit_cpu(shapes: list[list[tuple[int, int]]], seconds: list[float], config) -> CostModel:
    """Return a CPU `CostModel` whose step_overhead, seq_overhead and achieved FLOP/s are the
    least-squares fit (non-negative) of measured step `seconds` to the steps' `shapes`.

    On the CPU the step is a sum, not a max: the tiny model's weights sit in cache, so the
    memory term is left out and time = overhead + seq_overhead · n_seqs + FLOPs / achieved.
    """
    if len(shapes) != len(seconds) or len(shapes) < 3:
        raise ValueError(f"need ≥ 3 steps and one time per step, got {len(shapes)} and {len(seconds)}")
    probe = CostModel.for_gpt(config, 1.0, Efficiency())
    x = np.array([[1.0, len(s), probe.flops(s)] for s in shapes])
    y = np.asarray(seconds, dtype=float)
    scale = x.max(axis=0)
    coef = _nnls(x / scale, y) / scale
    eff = Efficiency(step_overhead_s=float(coef[0]), seq_overhead_s=float(coef[1]))
    return CostModel.for_gpt(config, 1.0 / max(coef[2], 1e-30), eff)


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every subset of columns (3 columns: 7 subsets)."""
    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(b ** 2))
    for mask in range(1, 2 ** n):
        cols = [i for i in range(n) if mask >> i & 1]
        sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if (sol >= 0).all():
            full = np.zeros(n)
            full[cols] = sol
            err = float(np.sum((a @ full - b) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


# ---------------------------------------------------------------------------------------------
# a GPU deployment


def kv_blocks(spec: ModelSpec, gpu: GPU | str, tp: int, block_size: int = 16, kv_dtype: str = "fp16",
              weight_dtype: str = "fp16", reserve_fraction: float = sizing.DEFAULT_RESERVE_FRACTION) -> int:
    """Return the KV blocks of `block_size` tokens one replica holds: `sizing.max_batch` of
    one-block sequences (memory after the reserve and the weights, per GPU)."""
    return sizing.max_batch(spec, gpu, n_gpus=tp, ctx_tokens=block_size, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype, reserve_fraction=reserve_fraction)


@dataclass(frozen=True)
class Deployment:
    """One replica's configuration: the model on `tp` GPUs, the scheduler's limits."""

    spec: ModelSpec
    gpu: str
    tp: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    kv_dtype: str = "fp16"
    weight_dtype: str = "fp16"
    block_size: int = 16
    eff: Efficiency = field(default_factory=Efficiency)

    def cost_model(self) -> CostModel:
        return CostModel.for_gpu(self.spec, self.gpu, self.tp, self.eff, self.kv_dtype, self.weight_dtype)

    def num_blocks(self) -> int:
        return kv_blocks(self.spec, self.gpu, self.tp, self.block_size, self.kv_dtype, self.weight_dtype)

    def run(self, requests: list[Request], **overrides) -> EngineResult:
        """Return the simulated run of `requests` on one replica."""
        kwargs = dict(num_blocks=self.num_blocks(), block_size=self.block_size,
                      max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                      chunked_prefill=self.chunked_prefill)
        kwargs.update(overrides)
        return simulate(requests, self.cost_model(), **kwargs)


def split_round_robin(requests: list[Request], replicas: int) -> list[list[Request]]:
    """Return the requests each of `replicas` receives from a round-robin router."""
    return [requests[i::replicas] for i in range(replicas)]


def run_replicas(dep: Deployment, requests: list[Request], replicas: int) -> list[RequestMetrics]:
    """Return every request's metrics when `replicas` copies of `dep` share the traffic."""
    metrics = []
    for part in split_round_robin(requests, replicas):
        if part:
            metrics += dep.run(part).metrics
    return metrics


def disaggregated(dep_prefill: Deployment, dep_decode: Deployment, requests: list[Request],
                  n_prefill: int, n_decode: int, link_bytes_per_s: float | None = None
                  ) -> list[RequestMetrics]:
    """Return per-request metrics of prefill/decode disaggregation (DistServe, Splitwise).

    `n_prefill` replicas compute prompts (each request runs to its first token there); its KV
    cache then crosses to one of `n_decode` replicas at `link_bytes_per_s` (default: the
    prefill GPU's one-direction NVLink or PCIe bandwidth), which generates the other tokens with
    its prompt already cached (prompt tokens cost nothing there but hold KV blocks).
    """
    prefill_reqs = [replace(r, max_new_tokens=1) for r in requests]
    first: dict[int, RequestMetrics] = {}
    for part in split_round_robin(prefill_reqs, n_prefill):
        if part:
            for m in dep_prefill.run(part).metrics:
                first[m.request_id] = m
    g = gpu_preset(dep_prefill.gpu)
    link = link_bytes_per_s or (g.nvlink_bytes_per_s or g.pcie_bytes_per_s) / 2
    kv_per_token = sizing.kv_bytes_per_token(dep_prefill.spec, kv_dtype=dep_prefill.kv_dtype)
    handoff = []
    for r in requests:
        ready = r.arrival_time + first[r.request_id].ttft + len(r.prompt) * kv_per_token / link
        if r.max_new_tokens > 1:
            handoff.append(replace(r, prompt=r.prompt + (PLACEHOLDER_TOKEN + r.request_id,),
                                   max_new_tokens=r.max_new_tokens - 1, arrival_time=ready))
    done: dict[int, RequestMetrics] = {}
    for part in split_round_robin(sorted(handoff, key=lambda r: r.arrival_time), n_decode):
        if part:
            for m in dep_decode.run(part, decode_only_cost=True,
                                    max_num_batched_tokens=max(dep_decode.max_num_batched_tokens,
                                                               max(len(r.prompt) for r in part))).metrics:
                done[m.request_id] = m
    out = []
    for r in requests:
        f = first[r.request_id]
        if r.request_id not in done:
            out.append(replace(f, request_id=r.request_id))
            continue
        d = done[r.request_id]
        ready = r.arrival_time + f.ttft + len(r.prompt) * kv_per_token / link
        # token 2 comes at ready + d.ttft; tokens 2..n are d's tokens (TPOT over tokens 1..n)
        e2e = ready + d.e2e - r.arrival_time
        tpot = (e2e - f.ttft) / (r.max_new_tokens - 1)
        itl = (ready + d.ttft - r.arrival_time - f.ttft,) + d.itl  # token 1 → 2, then d's gaps
        out.append(RequestMetrics(r.request_id, len(r.prompt), r.max_new_tokens, f.ttft, tpot, e2e,
                                  f.preemptions + d.preemptions, itl))
    return out


def goodput_fraction(metrics: list[RequestMetrics], ttft_s: float, tpot_s: float) -> float:
    """Return `metrics.goodput_fraction(metrics, SLO(ttft=ttft_s, tpot=tpot_s))` (kept for
    chapter 9's earlier cells; new code calls `metrics.goodput_fraction` with an `SLO`)."""
    return _goodput_fraction(metrics, SLO(ttft=ttft_s, tpot=tpot_s))


# ---------------------------------------------------------------------------------------------
# capacity: how many GPUs for this traffic

# Measured error of the GPU model on held-out published runs, written by
# tests/bench/bench_simulate.py into outputs/benchmarks/simulate_published.json; `decide_capacity`
# quotes it. GPU efficiency factors fitted there (see `GPU_EFFICIENCY`).
GPU_EFFICIENCY = Efficiency()


def _published_summary() -> tuple[Efficiency, str]:
    """Return the fitted GPU efficiency and a sentence on the model's error, from the benchmark JSON."""
    import json

    from .notebook import repo_root

    try:
        path = repo_root() / "outputs" / "benchmarks" / "simulate_published.json"
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return GPU_EFFICIENCY, "the GPU cost model's error is not measured in this checkout"
    eff = Efficiency(**data["fitted_efficiency"])
    errs = [abs(p["relative_error"]) for p in data["points"] if p["role"] == "held-out"]
    return eff, (f"fitted on {sum(p['role'] == 'fit' for p in data['points'])} published runs, the "
                 f"model's throughput error on {len(errs)} held-out published runs is "
                 f"{np.median(errs):.0%} median, {max(errs):.0%} worst")


def decide_capacity(spec: ModelSpec, gpu_name: str, *, request_rate: float, prompt_tokens: int,
                    output_tokens: int, ttft_p90_s: float, tpot_p90_s: float, kv_dtype: str = "fp16",
                    weight_dtype: str = "fp16", max_gpus: int = 8, n_requests: int = 400,
                    seed: int = 0) -> Decision:
    """Return the replica count, TP degree and `max_num_seqs` that meet p90 TTFT/TPOT targets at
    `request_rate` requests/s with the fewest GPUs, simulated; with the predicted p90s.

    For each TP degree that fits (`sizing.tp_problem`, memory for at least one request), and
    each `max_num_seqs` in (32, 64, 128, 256), the smallest replica count whose simulated p90s
    meet both targets (Poisson arrivals, fixed lengths, round-robin routing, chunked prefill).
    Fewest GPUs wins; ties go to the smaller TP degree, then the larger `max_num_seqs`.
    `value`: dict(tensor_parallel_size, replicas, max_num_seqs, p90_ttft_s, p90_tpot_s); None
    when nothing up to 64 replicas meets the targets.
    """
    for name, v in (("request_rate", request_rate), ("ttft_p90_s", ttft_p90_s), ("tpot_p90_s", tpot_p90_s)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v!r}")
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError(f"prompt_tokens and output_tokens must be ≥ 1, got {prompt_tokens}, {output_tokens}")
    eff, error_sentence = _published_summary()
    ctx = prompt_tokens + output_tokens
    best, tried = None, []
    for tp in sizing.valid_tp_degrees(spec, max_gpus):
        if best is not None and tp >= best[0][0]:  # cannot use fewer GPUs (ties go to smaller TP)
            break
        if sizing.max_batch(spec, gpu_name, n_gpus=tp, ctx_tokens=ctx, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype) < 1:
            continue
        for seqs in (256, 128, 64, 32):
            # Only fewer GPUs can win (or as many at a smaller TP): search no further than that.
            limit = 64
            if best is not None:
                gpus, best_tp = best[0][0], best[0][1]
                limit = gpus // tp if tp < best_tp else (gpus - 1) // tp
            if limit < 1:
                continue
            dep = Deployment(spec, gpu_name, tp, seqs, max(8192, prompt_tokens), True, kv_dtype,
                             weight_dtype, eff=eff)
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


def _min_replicas(dep: Deployment, rate: float, prompt_tokens: int, output_tokens: int,
                  n_requests: int, seed: int, ttft_s: float, tpot_s: float,
                  limit: int = 64) -> tuple[int, float, float] | None:
    """Return (replicas, p90 TTFT, p90 TPOT) for the fewest replicas meeting both targets, or None.

    Identical replicas behind a random router: each sees Poisson arrivals at rate / replicas,
    so one simulated replica stands for all of them.
    """
    cache: dict[int, tuple[bool, float, float]] = {}

    def ok(n: int) -> bool:
        if n not in cache:
            reqs = fixed_workload(n_requests, prompt_tokens, output_tokens, rate=rate / n, seed=seed)
            m = dep.run(reqs).metrics
            t90, o90 = p90(m, "ttft"), p90(m, "tpot")
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
