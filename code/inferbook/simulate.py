"""Serving on a simulated clock: the engine's own loop and scheduler, timed by a step-cost model.

The engine of chapter 6 (`inferbook.engine`) runs `steploop.run`: every step the scheduler
(`steploop.Scheduler`) decides which sequences run and how many tokens each computes, then a step
executor runs them. Here the *same* loop and scheduler make the same decisions (token budget,
chunked prefill, prefix-cache hits, preemption, `max_num_seqs`) on block books without tensors
(`blocks.BlockManager`), and the executor (`CostExecutor`) charges a step-cost model's time
(`cost_model.CostModel`) instead of running a model.

On top of one replica (`serve_simulated`, `Deployment`): replicas behind a round-robin router
(`run_replicas`) and prefill/decode disaggregation (`disaggregated`). How many GPUs a traffic
needs is `capacity.decide_capacity`, which runs these. torch-free: importing this module loads
no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from . import sizing, validate, vllm_memory
from .blocks import BlockAllocator, BlockManager
from .cost_model import FITTED, MAX_BATCH, CostModel, Efficiency
from .hardware import GPU
from .hardware import gpu as gpu_preset
from .metrics import RequestMetrics
from .models import ModelSpec, as_spec
from .prefix_cache import PrefixCache
from .steploop import EngineResult, Request, Scheduler, Sequence, run

PLACEHOLDER_TOKEN = 10**9  # + request id: a generated token that matches no other request's


def bookkeeping_cache(num_blocks: int, block_size: int = 16) -> BlockManager:
    """Return block books for a scheduler that runs no model: a `blocks.BlockManager` (no tensors)."""
    return BlockManager(BlockAllocator(num_blocks, block_size))


class CostExecutor:
    """The step executor of `steploop.run` on a simulated clock: a step lasts `cost.step_time` of
    its scheduled (new_tokens, past_tokens); idle time jumps to the next arrival (as the engine's
    CPU clock does). Generated tokens are placeholders (`PLACEHOLDER_TOKEN` + request id, so they
    never match another request's prefix). `decode_only_cost`: prompt tokens cost nothing (a
    decode instance whose KV arrives from a prefill instance)."""

    def __init__(self, cost, decode_only_cost: bool = False):
        if not callable(getattr(cost, "step_time", None)):
            raise TypeError(f"cost must have a step_time(shapes) method (a CostModel), got "
                            f"{type(cost).__name__}")
        self.cost = cost
        if type(decode_only_cost) is not bool:
            raise TypeError(f"decode_only_cost must be True or False, got {decode_only_cost!r}")
        self.decode_only_cost = decode_only_cost
        self.t = 0.0

    def check(self, request: Request) -> None:
        """Every request the scheduler accepts can be simulated."""

    def now(self) -> float:
        return self.t

    def wait(self, now: float, next_arrival: float) -> None:
        validate.finite_float("now", now)
        self.t = validate.finite_float("next_arrival", next_arrival)

    def execute(self, scheduled: list[tuple[Sequence, int]]) -> list[int]:
        # A padding row (n = 0, static batching) costs one decode row, as in the engine.
        shapes = [(n, s.num_computed) if n else (1, s.num_computed - 1) for s, n in scheduled]
        if self.decode_only_cost:
            shapes = [(n, p) for (n, p), (s, _) in zip(shapes, scheduled) if n == 1 and len(s.output) > 0]
        step = float(self.cost.step_time(shapes))
        if not (math.isfinite(step) and step >= 0):
            raise ValueError(f"cost.step_time returned {step!r}; a step time must be finite and ≥ 0")
        self.t += step
        return [PLACEHOLDER_TOKEN + s.seq_id for s, _ in scheduled]


def serve_simulated(requests: list[Request], cost: CostModel, *, num_blocks: int, block_size: int = 16,
                    max_num_seqs: int = 16, max_num_batched_tokens: int = 512,
                    policy: str = "continuous", chunked_prefill: bool = False,
                    prefix_caching: bool = False, decode_only_cost: bool = False) -> EngineResult:
    """Return what `engine.Engine.run(requests)` would return, timed by `cost` instead of a model.

    The loop (`steploop.run`) and the decisions (`steploop.Scheduler`) are the engine's, on the
    block books of `num_blocks` blocks (`blocks.BlockManager`); the step executor is a
    `CostExecutor`. All arguments are checked before anything runs.
    """
    if type(prefix_caching) is not bool:
        raise TypeError(f"prefix_caching must be True or False, got {prefix_caching!r}")
    requests = _requests(requests)
    books = bookkeeping_cache(num_blocks, block_size)
    prefix = PrefixCache(books.allocator) if prefix_caching else None
    sched = Scheduler(books, max_num_seqs, max_num_batched_tokens, policy, chunked_prefill, prefix)
    return run(sched, requests, CostExecutor(cost, decode_only_cost))


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

    serve_simulated(requests, Recorder(), num_blocks=num_blocks, block_size=block_size, **sched_kwargs)
    return recorded


# ---------------------------------------------------------------------------------------------
# a GPU deployment


def kv_blocks(spec: ModelSpec, gpu: GPU, tp: int, block_size: int = 16, kv_dtype: str = "fp16",
              weight_dtype: str = "fp16", *, max_num_seqs: int = 256,
              max_num_batched_tokens: int = 8192,
              gpu_memory_utilization: float = vllm_memory.DEFAULT_UTILIZATION) -> int:
    """Return the KV blocks of `block_size` tokens one replica holds: vLLM's start-up budget
    (`vllm_memory.layout_budget`, the one the planner reads) turned into blocks
    (`vllm_memory.vllm_kv_cache`). `spec` and `gpu` are resolved objects (`Deployment`
    resolves names)."""
    block_size = validate.positive_int("block_size", block_size)
    tp = validate.positive_int("tp", tp)
    sizing.get_dtype(kv_dtype, "kv_dtype"), sizing.get_dtype(weight_dtype, "weight_dtype")
    budget = vllm_memory.layout_budget(vllm_memory.EngineLayout(
        spec, gpu, tp, 1, weight_dtype, max_num_batched_tokens, max_num_seqs,
        gpu_memory_utilization))
    return vllm_memory.vllm_kv_cache(
        spec, tp, available_bytes=max(0, budget.available_kv_bytes),
        max_model_len=spec.max_position_embeddings, kv_dtype=kv_dtype, block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens).num_blocks


@dataclass(frozen=True)
class Deployment:
    """One replica's configuration: the model on `tp` GPUs, the scheduler's limits, the
    efficiencies (default: `FITTED`'s, fitted on published runs) and vLLM's
    `gpu_memory_utilization` (its KV pool, `num_blocks`). An entry point: `spec` and `gpu` may be
    preset names, resolved here once (the fields then hold the `ModelSpec` and the `GPU`)."""

    spec: ModelSpec | str
    gpu: GPU | str
    tp: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    kv_dtype: str = "fp16"
    weight_dtype: str = "fp16"
    block_size: int = 16
    eff: Efficiency = field(default_factory=lambda: FITTED.efficiency())
    gpu_memory_utilization: float = vllm_memory.DEFAULT_UTILIZATION

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", as_spec(self.spec))  # a preset name becomes its ModelSpec
        object.__setattr__(self, "gpu", gpu_preset(self.gpu))  # and a GPU name its GPU
        object.__setattr__(self, "gpu_memory_utilization", sizing.fraction(
            "gpu_memory_utilization", self.gpu_memory_utilization, high_open=False))
        for name in ("tp", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            validate.positive_int(name, getattr(self, name))
        if type(self.chunked_prefill) is not bool:
            raise TypeError(f"chunked_prefill must be True or False, got {self.chunked_prefill!r}")
        sizing.get_dtype(self.kv_dtype, "kv_dtype"), sizing.get_dtype(self.weight_dtype, "weight_dtype")
        if not isinstance(self.eff, Efficiency):
            raise TypeError(f"eff must be an Efficiency, got {type(self.eff).__name__}")
        problem = sizing.tp_problem(self.spec, self.tp)
        if problem:
            raise ValueError(problem)

    def cost_model(self) -> CostModel:
        return CostModel.for_gpu(self.spec, self.gpu, self.tp, self.eff, self.kv_dtype, self.weight_dtype)

    def num_blocks(self) -> int:
        return kv_blocks(self.spec, self.gpu, self.tp, self.block_size, self.kv_dtype, self.weight_dtype,
                         max_num_seqs=self.max_num_seqs,
                         max_num_batched_tokens=self.max_num_batched_tokens,
                         gpu_memory_utilization=self.gpu_memory_utilization)

    def run(self, requests: list[Request], **overrides) -> EngineResult:
        """Return the simulated run of `requests` on one replica."""
        kwargs = dict(num_blocks=self.num_blocks(), block_size=self.block_size,
                      max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                      chunked_prefill=self.chunked_prefill)
        kwargs.update(overrides)
        return serve_simulated(requests, self.cost_model(), **kwargs)


def _requests(requests) -> list[Request]:
    if isinstance(requests, Request):
        raise validate.ArgumentTypeError("requests must be a list of Request objects, got one Request")
    requests = validate.items("requests", requests)
    if not requests:
        raise ValueError("requests must hold at least one Request")
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {type(r).__name__}")
    return requests


def _deployment(name: str, dep) -> Deployment:
    if not isinstance(dep, Deployment):
        raise TypeError(f"{name} must be a simulate.Deployment, got {type(dep).__name__}")
    return dep


def split_round_robin(requests: list[Request], replicas: int) -> list[list[Request]]:
    """Return the requests each of `replicas` receives from a round-robin router."""
    requests, replicas = _requests(requests), validate.integer("replicas", replicas, 1, MAX_BATCH)
    return [requests[i::replicas] for i in range(replicas)]


def run_replicas(dep: Deployment, requests: list[Request], replicas: int) -> list[RequestMetrics]:
    """Return every request's metrics when `replicas` copies of `dep` share the traffic."""
    dep = _deployment("dep", dep)
    requests = _requests(requests)
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("request_ids must be unique (each request's metrics are reported by its id)")
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
    dep_prefill, dep_decode = _deployment("dep_prefill", dep_prefill), _deployment("dep_decode", dep_decode)
    requests = _requests(requests)
    validate.integer("n_prefill", n_prefill, 1, MAX_BATCH)
    validate.integer("n_decode", n_decode, 1, MAX_BATCH)
    if link_bytes_per_s is not None:  # None: the prefill GPU's own link
        validate.positive_float("link_bytes_per_s", link_bytes_per_s)
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("request_ids must be unique")
    prefill_reqs = [replace(r, max_new_tokens=1) for r in requests]
    first: dict[int, RequestMetrics] = {}
    for part in split_round_robin(prefill_reqs, n_prefill):
        if part:
            for m in dep_prefill.run(part).metrics:
                first[m.request_id] = m
    g = dep_prefill.gpu
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

