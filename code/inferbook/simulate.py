"""Serving at scale on a simulated clock: the engine's own loop and scheduler, a step-cost model, capacity.

The engine of chapter 6 (`inferbook.engine`) runs `steploop.run`: every step the scheduler
(`steploop.Scheduler`) decides which sequences run and how many tokens each computes, then a step
executor runs them. Here the *same* loop and scheduler make the same decisions (token budget,
chunked prefill, prefix-cache hits, preemption, `max_num_seqs`) on block books without tensors
(`blocks.BlockManager`), and the executor (`CostExecutor`) charges a cost model's time instead of
running a model:

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
constants are fitted to the engine's measured steps (`fit_cpu`). For GPUs they are fitted on
published runs and checked on held-out ones (tests/bench/bench_simulate.py writes
outputs/benchmarks/simulate_published.json); **`FITTED`** holds that fit and its measured error,
and every applied path uses it by default: `Deployment`, `CostModel.for_gpu(eff=None)`,
`decide_capacity`. No applied path runs on unfitted defaults.

For other modules (the recommender's throughput estimate):

    decode_step_time(spec, gpu, tp, batch, context) -> seconds of one decode step
    decode_tokens_per_s(spec, gpu, tp, batch, context) -> output tokens per second of a replica

both with the fitted efficiencies (keyword `eff=` overrides them; `kv_dtype=`, `weight_dtype=`).
torch-free: importing this module loads no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import roofline, sizing, validate
from .blocks import BlockAllocator, BlockManager
from .decision import Decision
from .hardware import GPU
from .hardware import gpu as gpu_preset
from .metrics import RequestMetrics, goodput_fraction, p90  # noqa: F401 (re-exported for chapter 9)
from .models import ModelSpec, as_spec
from .prefix_cache import PrefixCache
from .steploop import EngineResult, Request, Scheduler, Sequence, run
from .workload import fixed_workload, poisson_arrivals  # noqa: F401 (re-exported for chapter 9)

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
            value = validate.finite_float(f"Efficiency.{name}", getattr(self, name), maximum=1.0)
            if value <= 0:
                raise ValueError(f"Efficiency.{name} must be in (0, 1], got {value!r}")
        for name in ("step_overhead_s", "seq_overhead_s", "allreduce_latency_s"):
            validate.finite_float(f"Efficiency.{name}", getattr(self, name), minimum=0.0)


@dataclass(frozen=True)
class StepCost:
    """One step's time and its terms, in seconds: total = overhead + max(compute, memory) + comm."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    def __post_init__(self) -> None:
        for name in ("compute_s", "memory_s", "comm_s", "overhead_s"):
            validate.finite_float(name, getattr(self, name), minimum=0.0)

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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise validate.ArgumentTypeError(f"name must be a string, got {type(self.name).__name__}")
        for name in ("n_params", "weight_bytes", "kv_bytes_per_token"):
            validate.finite_float(name, getattr(self, name), minimum=0.0)
        for name in ("n_layer", "d_attn", "kv_dim", "hidden", "tp"):
            validate.positive_int(name, getattr(self, name))
        for name in ("peak_flops", "hbm_bytes_per_s", "link_bytes_per_s", "achieved_flops"):
            if getattr(self, name) is not None:
                validate.positive_float(name, getattr(self, name))
        if not isinstance(self.eff, Efficiency):
            raise TypeError(f"eff must be an Efficiency, got {type(self.eff).__name__}")
        if self.peak_flops is None and self.achieved_flops is None:
            raise ValueError("give peak_flops (a GPU) or achieved_flops (a fitted CPU)")
        if self.tp > 1 and self.link_bytes_per_s is None:
            raise ValueError(f"tp={self.tp} needs link_bytes_per_s for the all-reduce")

    @classmethod
    def for_gpu(cls, spec: ModelSpec, gpu: GPU | str, tp: int = 1, eff: Efficiency | None = None,
                kv_dtype: str = "fp16", weight_dtype: str = "fp16") -> "CostModel":
        """Return the cost model of `spec` on `tp` GPUs of type `gpu` (weights sharded by TP);
        `eff` None: the efficiencies fitted on published runs (`FITTED`).

        FP8 weights on a GPU with FP8 tensor cores (compute capability ≥ 8.9) run at twice the
        FP16 peak, as NVIDIA's datasheets state for Ada and Hopper.
        """
        spec, g = as_spec(spec), _gpu(gpu)
        tp = validate.positive_int("tp", tp)
        _eff(eff), _dtype("kv_dtype", kv_dtype), _dtype("weight_dtype", weight_dtype)
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
            peak_flops=peak, hbm_bytes_per_s=g.hbm_bytes_per_s,
            eff=FITTED.efficiency() if eff is None else eff, tp=tp,
            link_bytes_per_s=None if link is None else link / 2)

    @classmethod
    def for_gpt(cls, config, achieved_flops: float, eff: Efficiency) -> "CostModel":
        """Return a CPU cost model of a `gpt.GPTConfig` (fp32, MHA), with fitted FLOP/s."""
        _gpt_config(config)
        achieved_flops = validate.finite_float("achieved_flops", achieved_flops)
        if achieved_flops <= 0:
            raise ValueError(f"achieved_flops must be > 0 FLOP/s, got {achieved_flops}")
        if not isinstance(eff, Efficiency):
            raise TypeError(f"eff must be an Efficiency, got {type(eff).__name__}")
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
        return self._flops(_shapes(shapes))

    def _flops(self, shapes: list[tuple[int, int]]) -> float:
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
        shapes = _shapes(shapes)
        if not shapes:
            return StepCost(0.0, 0.0, 0.0, 0.0)
        e = self.eff
        flops_per_gpu = self._flops(shapes) / self.tp
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


def _gpt_config(config):
    """Raise unless `config` looks like a `gpt.GPTConfig` (positive n_layer, n_embd, vocab_size)."""
    for name in ("n_layer", "n_embd", "vocab_size"):
        if not hasattr(config, name):
            raise TypeError(f"config must be a gpt.GPTConfig, got {type(config).__name__}")
        validate.positive_int(f"config.{name}", getattr(config, name))
    return config


def _dtype(name: str, value) -> str:
    """Return `value`; raise (naming the argument) unless it is a dtype name `sizing` knows."""
    try:
        sizing.get_dtype(value)
    except validate.ArgumentTypeError as e:
        raise validate.ArgumentTypeError(f"{name}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None
    return value


def _eff(eff) -> Efficiency | None:
    """Return `eff` (an Efficiency, or None: the fitted one); raise otherwise."""
    if eff is not None and not isinstance(eff, Efficiency):
        raise validate.ArgumentTypeError(f"eff must be an Efficiency (or None: FITTED's), got {type(eff).__name__}")
    return eff


def _gpu(gpu) -> GPU:
    if isinstance(gpu, GPU):
        return gpu
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU preset name or a hardware.GPU, got {type(gpu).__name__}")
    return gpu_preset(gpu)


def _shapes(shapes) -> list[tuple[int, int]]:
    """Return `shapes` as a list of (new_tokens ≥ 1, past_tokens ≥ 0) pairs; raise otherwise."""
    shapes = validate.items("shapes", shapes)
    out = []
    for i, pair in enumerate(shapes):
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise ValueError(f"shapes[{i}] must be a (new_tokens, past_tokens) pair, got {pair!r}")
        out.append((validate.positive_int(f"shapes[{i}] new_tokens", pair[0]),
                    validate.non_negative_int(f"shapes[{i}] past_tokens", pair[1])))
    return out


# ---------------------------------------------------------------------------------------------
# the scheduler on a simulated clock


MAX_BATCH = 2**20     # more sequences in one step (or replicas, or requests) is a mistake
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
# fitting the constants on the CPU


def fit_cpu(shapes: list[list[tuple[int, int]]], seconds: list[float], config) -> CostModel:
    """Return a CPU `CostModel` whose step_overhead, seq_overhead and achieved FLOP/s are the
    least-squares fit (non-negative) of measured step `seconds` to the steps' `shapes`.

    On the CPU the step is a sum, not a max: the tiny model's weights sit in cache, so the
    memory term is left out and time = overhead + seq_overhead · n_seqs + FLOPs / achieved.
    """
    _gpt_config(config)
    shapes = [_shapes(s) for s in shapes]
    seconds = [validate.finite_float(f"seconds[{i}]", t, minimum=0.0) for i, t in enumerate(seconds)]
    if not any(seconds):
        raise ValueError("seconds are all 0: measured step times are needed to fit the constants")
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
    block_size = validate.positive_int("block_size", block_size)
    tp = validate.positive_int("tp", tp)
    _dtype("kv_dtype", kv_dtype), _dtype("weight_dtype", weight_dtype)
    return sizing.max_batch(spec, gpu, n_gpus=tp, ctx_tokens=block_size, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype, reserve_fraction=reserve_fraction)


# ---------------------------------------------------------------------------------------------
# the fitted GPU model: one object every applied caller uses

# The fit ships with the package (data/, a copy that tests/test_package_data.py keeps identical to
# outputs/benchmarks/simulate_published.json), so an installed package (Colab, pip) has it too.
_PUBLISHED_JSON = Path(__file__).resolve().parent / "data" / "simulate_published.json"


@dataclass(frozen=True)
class FittedGPUModel:
    """The GPU cost model with its efficiencies fitted on published runs, and its measured error.

    Written by tests/bench/bench_simulate.py into outputs/benchmarks/simulate_published.json:
    `eff` (None when this checkout has no such file), the runs it was fitted on (`n_fit`) and
    its relative throughput errors on held-out published runs. `Deployment`, `decide_capacity`,
    `CostModel.for_gpu` and `decode_step_time` use it when no `Efficiency` is given.
    """

    eff: Efficiency | None
    n_fit: int = 0
    held_out_errors: tuple[float, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        _eff(self.eff)
        validate.non_negative_int("n_fit", self.n_fit)
        errors = tuple(validate.finite_float(f"held_out_errors[{i}]", e)
                       for i, e in enumerate(validate.items("held_out_errors", self.held_out_errors)))
        object.__setattr__(self, "held_out_errors", errors)
        if not isinstance(self.source, str):
            raise validate.ArgumentTypeError(f"source must be a string, got {type(self.source).__name__}")

    def efficiency(self) -> Efficiency:
        """Return the fitted efficiencies; raise when they were not measured in this checkout."""
        if self.eff is None:
            raise RuntimeError(f"the fitted GPU efficiencies are missing ({self.source} not found); "
                               "run tests/bench/bench_simulate.py, or pass an Efficiency explicitly")
        return self.eff

    @property
    def error_sentence(self) -> str:
        """One sentence on the model's measured error, for a decision's reasons."""
        if not self.held_out_errors:
            return "the GPU cost model's error is not measured in this checkout"
        errs = [abs(e) for e in self.held_out_errors]
        return (f"fitted on {self.n_fit} published runs, the model's throughput error on "
                f"{len(errs)} held-out published runs is {np.median(errs):.0%} median, "
                f"{max(errs):.0%} worst")

    def cost_model(self, spec: ModelSpec, gpu: GPU | str, tp: int = 1, kv_dtype: str = "fp16",
                   weight_dtype: str = "fp16") -> CostModel:
        """Return `CostModel.for_gpu` with the fitted efficiencies."""
        return CostModel.for_gpu(spec, gpu, tp, self.efficiency(), kv_dtype, weight_dtype)


def _load_fitted(path: Path = _PUBLISHED_JSON) -> FittedGPUModel:
    try:
        data = json.loads(path.read_text())
        eff = Efficiency(**data["fitted_efficiency"])
        points = data["points"]
    except (OSError, ValueError, KeyError, TypeError):
        return FittedGPUModel(None, source=str(path))
    return FittedGPUModel(eff, sum(p["role"] == "fit" for p in points),
                          tuple(p["relative_error"] for p in points if p["role"] == "held-out"),
                          str(path))


FITTED = _load_fitted()
GPU_EFFICIENCY = FITTED.eff  # the fitted efficiencies (chapter 9's name for them)


def decode_step_time(spec: ModelSpec, gpu: GPU | str, tp: int, batch: int, context: int, *,
                     kv_dtype: str = "fp16", weight_dtype: str = "fp16",
                     eff: Efficiency | None = None) -> float:
    """Return the seconds of one decode step of `batch` sequences, each `context` tokens long
    (one new token after `context` − 1 cached ones), on `tp` GPUs: the fitted cost model."""
    batch = validate.integer("batch", batch, 1, MAX_BATCH)
    context = validate.positive_int("context", context)
    cm = CostModel.for_gpu(spec, gpu, tp, _eff(eff), kv_dtype, weight_dtype)
    return cm.step_time([(1, context - 1)] * batch)


def decode_tokens_per_s(spec: ModelSpec, gpu: GPU | str, tp: int, batch: int, context: int, *,
                        kv_dtype: str = "fp16", weight_dtype: str = "fp16",
                        eff: Efficiency | None = None) -> float:
    """Return the output tokens per second of one replica decoding `batch` sequences at
    `context` tokens: batch / `decode_step_time` (the fitted model)."""
    batch = validate.integer("batch", batch, 1, MAX_BATCH)
    return batch / decode_step_time(spec, gpu, tp, batch, context, kv_dtype=kv_dtype,
                                    weight_dtype=weight_dtype, eff=eff)


@dataclass(frozen=True)
class Deployment:
    """One replica's configuration: the model on `tp` GPUs, the scheduler's limits, the
    efficiencies (default: `FITTED`'s, fitted on published runs)."""

    spec: ModelSpec
    gpu: str
    tp: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    kv_dtype: str = "fp16"
    weight_dtype: str = "fp16"
    block_size: int = 16
    eff: Efficiency = field(default_factory=lambda: FITTED.efficiency())

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", as_spec(self.spec))  # a preset name becomes its ModelSpec
        _gpu(self.gpu)
        for name in ("tp", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            validate.positive_int(name, getattr(self, name))
        if type(self.chunked_prefill) is not bool:
            raise TypeError(f"chunked_prefill must be True or False, got {self.chunked_prefill!r}")
        _dtype("kv_dtype", self.kv_dtype), _dtype("weight_dtype", self.weight_dtype)
        if not isinstance(self.eff, Efficiency):
            raise TypeError(f"eff must be an Efficiency, got {type(self.eff).__name__}")
        problem = sizing.tp_problem(self.spec, self.tp)
        if problem:
            raise ValueError(problem)

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
    g = _gpu(dep_prefill.gpu)
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


# ---------------------------------------------------------------------------------------------
# capacity: how many GPUs for this traffic

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
    spec, gpu_name = as_spec(spec), _gpu(gpu_name).name
    for name, v in (("request_rate", request_rate), ("ttft_p90_s", ttft_p90_s), ("tpot_p90_s", tpot_p90_s)):
        if validate.finite_float(name, v) <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    prompt_tokens = validate.positive_int("prompt_tokens", prompt_tokens)
    output_tokens = validate.positive_int("output_tokens", output_tokens)
    max_gpus = validate.integer("max_gpus", max_gpus, 1, 1024)
    n_requests = validate.integer("n_requests", n_requests, 1, 100_000)
    seed = validate.non_negative_int("seed", seed)
    _dtype("kv_dtype", kv_dtype), _dtype("weight_dtype", weight_dtype)
    if prompt_tokens + output_tokens > spec.max_position_embeddings:
        raise ValueError(f"prompt_tokens + output_tokens = {prompt_tokens + output_tokens} exceeds "
                         f"{spec.name}'s context of {spec.max_position_embeddings} tokens")
    eff, error_sentence = FITTED.efficiency(), FITTED.error_sentence
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
