"""The step-cost model: how long one serving step takes, on a GPU or on this CPU.

Chapter 9's simulator (`inferbook.simulate`) and the planner (`inferbook.rules`,
`inferbook.recommend`) both time a step here, so the two cannot disagree:

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
constants are fitted to measured steps (`fit_cpu`) or to a real server's latencies
(tests/bench/bench_vllm_serve.py). For GPUs they are fitted on published runs and checked on
held-out ones (tests/bench/bench_simulate.py writes outputs/benchmarks/simulate_published.json);
**`FITTED`** holds that fit and its measured error, and every applied path uses it by default:
`CostModel.for_gpu(eff=None)`, `decode_step_time`, the simulator's `Deployment`, the capacity
decision. No applied path runs on unfitted defaults. A GPU without a published FP16 peak has no
fitted model; `roofline_decode_seconds` is the fallback the planner uses for it (bandwidth alone).

    decode_step_time(spec, gpu, tp, batch, context) -> seconds of one decode step
    decode_tokens_per_s(spec, gpu, tp, batch, context) -> output tokens per second of a replica

torch-free: importing this module loads no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import roofline, sizing, validate
from .hardware import GPU, require_gpu
from .hardware import gpu as gpu_preset
from .models import ModelSpec, as_spec, require_spec

MAX_BATCH = 2**20     # more sequences in one step (or replicas, or requests) is a mistake

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
    (one direction). head_params: weights of the output head (vocab × hidden, part of
    n_params) that an engine applies only to the last scheduled token of each sequence, as vLLM
    computes logits only where it samples; the other new tokens of a prefill chunk then cost
    2·(n_params − head_params) FLOPs each. 0 (the default): every token pays all of n_params,
    as the book's engine and the GPU fit count it.
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
    head_params: float = 0.0              # output-head weights applied to a step's last token only

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise validate.ArgumentTypeError(f"name must be a string, got {type(self.name).__name__}")
        for name in ("n_params", "weight_bytes", "kv_bytes_per_token"):
            validate.finite_float(name, getattr(self, name), minimum=0.0)
        for name in ("n_layer", "d_attn", "kv_dim", "hidden", "tp"):
            validate.positive_int(name, getattr(self, name))
        validate.finite_float("head_params", self.head_params, minimum=0.0, maximum=self.n_params)
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
    def for_gpu(cls, spec: ModelSpec, gpu: GPU, tp: int = 1, eff: Efficiency | None = None,
                kv_dtype: str = "fp16", weight_dtype: str = "fp16") -> CostModel:
        """Return the cost model of `spec` on `tp` GPUs of type `gpu` (weights sharded by TP);
        `eff` None: the efficiencies fitted on published runs (`FITTED`).

        FP8 weights on a GPU with FP8 tensor cores (compute capability ≥ 8.9) run at twice the
        FP16 peak, as NVIDIA's datasheets state for Ada and Hopper.
        """
        spec, g = require_spec(spec), require_gpu(gpu)
        tp = validate.positive_int("tp", tp)
        _eff(eff), sizing.get_dtype(kv_dtype, "kv_dtype"), sizing.get_dtype(weight_dtype, "weight_dtype")
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
    def for_gpt(cls, config, achieved_flops: float, eff: Efficiency, logits: str = "all",
                achieved_bytes_per_s: float | None = None) -> CostModel:
        """Return a CPU cost model of a `gpt.GPTConfig` (fp32, MHA), with fitted FLOP/s.

        logits: "all" (the book's engine: the output head runs on every token of a step) or
        "last" (vLLM: only on each sequence's last scheduled token; sets `head_params`).
        achieved_bytes_per_s: None (the step is a sum, no memory term: the book's engine's fit)
        or the fitted rate at which a step streams the fp32 weights and the KV it reads; the
        step is then overhead + max(compute, memory), the GPU form, with memory = bytes /
        (eff.bandwidth_efficiency · achieved_bytes_per_s) (pass bandwidth_efficiency=1.0)."""
        _gpt_config(config)
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
        if achieved_bytes_per_s is not None:
            achieved_bytes_per_s = validate.finite_float("achieved_bytes_per_s", achieved_bytes_per_s)
            if achieved_bytes_per_s <= 0:
                raise ValueError(f"achieved_bytes_per_s must be > 0 bytes/s, got {achieved_bytes_per_s}")
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
                   hbm_bytes_per_s=achieved_bytes_per_s, eff=eff, achieved_flops=achieved_flops,
                   head_params=config.vocab_size * config.n_embd if logits == "last" else 0.0)

    def with_eff(self, **changes) -> CostModel:
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
                total -= 2 * self.head_params * (n - 1)  # no logits before the last token
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


def _eff(eff) -> Efficiency | None:
    """Return `eff` (an Efficiency, or None: the fitted one); raise otherwise."""
    if eff is not None and not isinstance(eff, Efficiency):
        raise validate.ArgumentTypeError(f"eff must be an Efficiency (or None: FITTED's), got {type(eff).__name__}")
    return eff


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
# fitting the constants on the CPU (the book's engine's measured steps)


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

    def cost_model(self, spec: ModelSpec | str, gpu: GPU | str, tp: int = 1, kv_dtype: str = "fp16",
                   weight_dtype: str = "fp16") -> CostModel:
        """Return `CostModel.for_gpu` with the fitted efficiencies. An entry point (chapter 9
        calls it with a GPU name): `spec` and `gpu` may be preset names, resolved here once."""
        return CostModel.for_gpu(as_spec(spec), gpu_preset(gpu), tp, self.efficiency(), kv_dtype,
                                 weight_dtype)


def load_fitted(path: Path = _PUBLISHED_JSON) -> FittedGPUModel:
    """Return the fitted GPU cost model stored at `path` (default: the committed fit); one with
    no efficiencies (`eff` None, which `efficiency()` refuses) when the file is missing or bad."""
    try:
        data = json.loads(path.read_text())
        eff = Efficiency(**data["fitted_efficiency"])
        points = data["points"]
    except (OSError, ValueError, KeyError, TypeError):
        return FittedGPUModel(None, source=str(path))
    return FittedGPUModel(eff, sum(p["role"] == "fit" for p in points),
                          tuple(p["relative_error"] for p in points if p["role"] == "held-out"),
                          str(path))


FITTED = load_fitted()
GPU_EFFICIENCY = FITTED.eff  # the fitted efficiencies (chapter 9's name for them)


def decode_step_time(spec: ModelSpec, gpu: GPU, tp: int, batch: int, context: int, *,
                     kv_dtype: str = "fp16", weight_dtype: str = "fp16",
                     eff: Efficiency | None = None) -> float:
    """Return the seconds of one decode step of `batch` sequences, each `context` tokens long
    (one new token after `context` − 1 cached ones), on `tp` GPUs: the fitted cost model."""
    batch = validate.integer("batch", batch, 1, MAX_BATCH)
    context = validate.positive_int("context", context)
    cm = CostModel.for_gpu(spec, gpu, tp, _eff(eff), kv_dtype, weight_dtype)
    return cm.step_time([(1, context - 1)] * batch)


def decode_tokens_per_s(spec: ModelSpec, gpu: GPU, tp: int, batch: int, context: int, *,
                        kv_dtype: str = "fp16", weight_dtype: str = "fp16",
                        eff: Efficiency | None = None) -> float:
    """Return the output tokens per second of one replica decoding `batch` sequences at
    `context` tokens: batch / `decode_step_time` (the fitted model)."""
    batch = validate.integer("batch", batch, 1, MAX_BATCH)
    return batch / decode_step_time(spec, gpu, tp, batch, context, kv_dtype=kv_dtype,
                                    weight_dtype=weight_dtype, eff=eff)


def roofline_decode_seconds(spec: ModelSpec, gpu: GPU, n_gpus: int, batch: int,
                            weight_bytes: float, kv_bytes: float) -> float:
    """Return the roofline bound on one decode step of `batch` sequences spread over `n_gpus`
    (TP × PP) GPUs: max(bytes / bandwidth, FLOPs / peak) with `weight_bytes` and `kv_bytes` read
    per GPU, 2 FLOPs per active weight per token. The planner's fallback for a GPU without a
    published FP16 peak, for which no step-cost model is fitted (bandwidth alone bounds it)."""
    spec, g = require_spec(spec), require_gpu(gpu)
    n_gpus = validate.positive_int("n_gpus", n_gpus)
    batch = validate.integer("batch", batch, 0, MAX_BATCH)
    weight_bytes = validate.finite_float("weight_bytes", weight_bytes, minimum=0.0)
    kv_bytes = validate.finite_float("kv_bytes", kv_bytes, minimum=0.0)
    cost = roofline.ForwardCost(flops=2 * spec.n_active_params * max(batch, 1) / n_gpus,
                                bytes_moved=weight_bytes + kv_bytes)
    return roofline.step_seconds(g, cost)
