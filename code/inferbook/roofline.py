"""Why decoding is memory-bound: FLOPs and bytes of one forward pass, and the roofline.

A dense decoder with P parameters does about 2·P FLOPs per token processed (one multiply and one
add per weight) and must read all P weights once per forward pass, whatever the number of
tokens in it. Attention adds 4·d FLOPs per (query, key) pair and layer (QKᵀ and PV) and reads the
KV cache. So a forward pass over T tokens has arithmetic intensity ≈ T FLOP/byte at 2-byte
weights: prefill (T = prompt length, or batch × prompt) sits far right on the roofline; a decode
step (T = batch size) sits far left, under the bandwidth roof (Pope et al., 2023).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import validate
from .hardware import GPU, require_gpu

# Peak FP32 throughput of the CUDA cores (fused multiply-add, no tensor cores), FLOP/s, from the
# datasheets of `inferbook.hardware`'s presets. A kernel whose matmuls compile to FMA
# instructions (Triton's `tl.dot` on sm75) is bounded by this, not by the tensor-core peak.
FP32_FMA_FLOPS: dict[str, float] = {
    "T4": 8.1e12,          # NVIDIA T4 datasheet: 8.1 TFLOPS single precision
    "A100 40GB": 19.5e12,  # NVIDIA A100 datasheet: 19.5 TFLOPS FP32
    "A100 80GB": 19.5e12,
    "H100 SXM": 67e12,     # NVIDIA H100 datasheet (SXM): 67 TFLOPS FP32
}


@dataclass(frozen=True)
class ForwardCost:
    """FLOPs and device-memory bytes of one forward pass."""

    flops: float
    bytes_moved: float

    def __post_init__(self) -> None:
        validate.finite_float("flops", self.flops, minimum=0.0)
        validate.finite_float("bytes_moved", self.bytes_moved, minimum=0.0)

    @property
    def intensity(self) -> float:
        """Return FLOPs per byte."""
        if self.bytes_moved == 0:
            raise ValueError("intensity is undefined: bytes_moved is 0")
        return self.flops / self.bytes_moved


def _gpu(gpu) -> GPU:
    """Return `gpu` if it is a `hardware.GPU`; TypeError otherwise (a preset name included:
    the caller resolves it once, `hardware.gpu(name)`)."""
    return require_gpu(gpu)


def forward_cost(
    n_params: float,
    n_layer: int,
    d_attn: int,
    kv_dim: int,
    batch: int,
    new_tokens: int,
    past_tokens: int,
    bytes_per_value: int = 2,
) -> ForwardCost:
    """Return the cost of one forward pass of `batch` sequences, each adding `new_tokens`
    after `past_tokens` already in the KV cache.

    d_attn: query width (heads × head_dim); kv_dim: KV width per K or V (kv_heads × head_dim).
    Counts matmul FLOPs (2 per weight per token) and attention FLOPs (4·d_attn per causal
    query-key pair and layer). Bytes: weights once, the KV cache read once, new K/V written.
    Activations are ignored (they are small next to weights and cache at these sizes).
    """
    n_params = validate.positive_float("n_params", n_params)
    bytes_per_value = validate.positive_float("bytes_per_value", bytes_per_value)
    for name, value in [("n_layer", n_layer), ("d_attn", d_attn), ("kv_dim", kv_dim),
                        ("batch", batch), ("new_tokens", new_tokens)]:
        validate.positive_int(name, value)
    past_tokens = validate.finite_float("past_tokens", past_tokens, minimum=0.0)  # a mean may be fractional
    tokens = batch * new_tokens
    pairs = batch * (new_tokens * past_tokens + new_tokens * (new_tokens + 1) / 2)
    flops = 2 * n_params * tokens + 4 * d_attn * pairs * n_layer
    kv_bytes = 2 * kv_dim * n_layer * bytes_per_value * batch * (past_tokens + new_tokens)
    weight_bytes = n_params * bytes_per_value
    return ForwardCost(flops=flops, bytes_moved=weight_bytes + kv_bytes)


def attainable_flops(gpu: GPU, intensity: float) -> float:
    """Return the roofline bound min(peak, intensity × bandwidth), in FLOP/s."""
    gpu, intensity = _gpu(gpu), _intensity(intensity)
    if gpu.fp16_tensor_flops is None:
        raise ValueError(f"{gpu.name} has no published FP16 tensor peak; pick another GPU")
    return min(gpu.fp16_tensor_flops, intensity * gpu.hbm_bytes_per_s)


def bound(gpu: GPU, intensity: float) -> str:
    """Return 'memory-bound' or 'compute-bound' for a kernel of this intensity on `gpu`."""
    gpu, intensity = _gpu(gpu), _intensity(intensity)
    if gpu.fp16_tensor_flops is None:
        raise ValueError(f"{gpu.name} has no published FP16 tensor peak, so no ridge point; pick another GPU")
    return "compute-bound" if intensity >= gpu.ridge_flops_per_byte else "memory-bound"


def step_seconds(gpu: GPU, cost: ForwardCost) -> float:
    """Return the roofline lower bound on one pass's time: max(bytes / bandwidth, FLOPs / peak).

    A GPU without a published FP16 peak is bounded by bandwidth alone.
    """
    gpu = _gpu(gpu)
    if not isinstance(cost, ForwardCost):
        raise validate.ArgumentTypeError(f"cost must be a roofline.ForwardCost, got {type(cost).__name__}")
    memory_time = cost.bytes_moved / gpu.hbm_bytes_per_s
    if gpu.fp16_tensor_flops is None:
        return memory_time
    return max(memory_time, cost.flops / gpu.fp16_tensor_flops)


@dataclass(frozen=True)
class TimeBound:
    """Roofline lower bounds on a kernel's time: compute_s = FLOPs / peak, memory_s = bytes / BW,
    and exp_s = exponentials / the special-function units' rate (0 when none are counted)."""

    compute_s: float
    memory_s: float
    exp_s: float = 0.0

    def __post_init__(self) -> None:
        validate.finite_float("compute_s", self.compute_s, minimum=0.0)
        validate.finite_float("memory_s", self.memory_s, minimum=0.0)
        validate.finite_float("exp_s", self.exp_s, minimum=0.0)

    @property
    def seconds(self) -> float:
        """Return max(compute_s, memory_s, exp_s), the lower bound on the time."""
        return max(self.compute_s, self.memory_s, self.exp_s)

    @property
    def serial_seconds(self) -> float:
        """Return compute_s + memory_s + exp_s: the time with no overlap between the units."""
        return self.compute_s + self.memory_s + self.exp_s

    @property
    def bound(self) -> str:
        """Return 'memory-bound', 'compute-bound' or 'exp-bound' (the largest of the three)."""
        if self.exp_s > max(self.compute_s, self.memory_s):
            return "exp-bound"
        return "memory-bound" if self.memory_s > self.compute_s else "compute-bound"


def _exp_rate(gpu: GPU) -> float:
    """Return the GPU's exponentials per second; raise when the preset has none."""
    if gpu.exp_per_s is None:
        raise ValueError(f"{gpu.name} has no exponential (special-function unit) throughput on "
                         "record; pick another GPU")
    return gpu.exp_per_s


def time_bound(gpu: GPU, flops: float, bytes_moved: float,
               peak_flops: float | None = None, exps: float = 0.0) -> TimeBound:
    """Return the roofline's lower bounds on the time of `flops`, `bytes_moved` and `exps`
    exponentials on `gpu`.

    `peak_flops` overrides the FP16 tensor-core peak (e.g. `FP32_FMA_FLOPS[gpu.name]` for a
    kernel that compiles to FMA instructions). `exps` counts the special-function unit's 2^x
    evaluations (one per attention score for the softmax); they need `gpu.exp_per_s`.
    """
    gpu = _gpu(gpu)
    flops = validate.finite_float("flops", flops, minimum=0.0)
    bytes_moved = validate.finite_float("bytes_moved", bytes_moved, minimum=0.0)
    exps = validate.finite_float("exps", exps, minimum=0.0)
    peak = gpu.fp16_tensor_flops if peak_flops is None else validate.positive_float("peak_flops", peak_flops)
    if peak is None:
        raise ValueError(f"time_bound: {gpu.name} has no published FP16 peak; pass peak_flops")
    exp_s = exps / _exp_rate(gpu) if exps else 0.0
    return TimeBound(compute_s=flops / peak, memory_s=bytes_moved / gpu.hbm_bytes_per_s,
                     exp_s=exp_s)


def softmax_exp_over_matmul(gpu: GPU, head_dim: int) -> float:
    """Return the attention forward's exponential time over its matmul time on `gpu`.

    Per (query, key) pair the forward does 4 d FLOPs of matmul (Q K^T and P V) on the tensor
    cores and one exponential on the special-function units: (1 / E) / (4 d / F) = F / (4 d E).
    Above 1 the softmax, not the matmuls, is the ceiling (FlashAttention-4's B200 at d = 128).
    """
    gpu = _gpu(gpu)
    head_dim = validate.positive_int("head_dim", head_dim)
    if gpu.fp16_tensor_flops is None:
        raise ValueError(f"{gpu.name} has no published FP16 tensor peak; pick another GPU")
    return gpu.fp16_tensor_flops / (4 * head_dim * _exp_rate(gpu))


def recompute_over_move(gpu: GPU, head_dim: int, bytes_per_element: float = 2,
                        overlap: bool = False) -> float:
    """Return the time to recompute P (S = Q K^T and exp) over the time to write and read P.

    Per score: 2 d FLOPs at the tensor peak F and one exponential at the rate E, against
    2 b bytes at bandwidth B. Serially (`overlap=False`) that is d/(b ridge) + B/(2 b E);
    with the exponentials hidden under the matmul or the other way round (`overlap=True`),
    max(d/(b ridge), B/(2 b E)).
    """
    gpu = _gpu(gpu)
    head_dim = validate.positive_int("head_dim", head_dim)
    b = validate.positive_float("bytes_per_element", bytes_per_element)
    if not isinstance(overlap, bool):
        raise validate.ArgumentTypeError(f"overlap must be a bool, got {type(overlap).__name__}")
    bound = time_bound(gpu, 2 * head_dim, 2 * b, exps=1)
    recompute = [bound.compute_s, bound.exp_s]
    return (max(recompute) if overlap else sum(recompute)) / bound.memory_s


def num_kv_splits(batch: int, kv_heads: int, context: int, num_sms: int,
                  min_tokens_per_split: int = 256) -> int:
    """Return the number of KV splits for a split-KV decode step.

    Rule: the most splits S with batch x kv_heads x S <= num_sms (fill the SMs in one wave:
    with equal chunks, one program more than there are SMs starts a second wave that doubles
    the time), but no split shorter than `min_tokens_per_split` keys (a shorter chunk does too
    little work to pay for its partial output and the merge): S = max(1, min(num_sms //
    (batch x kv_heads), context // min_tokens_per_split)). S = 1 when the grid already fills
    the GPU. flash-attn's FlashAttention-4 interface uses the same shape,
    min(num_SMs // tiles, 128, key blocks).
    """
    for name, value in (("batch", batch), ("kv_heads", kv_heads), ("context", context),
                        ("num_sms", num_sms), ("min_tokens_per_split", min_tokens_per_split)):
        validate.positive_int(name, value)
    batch, kv_heads, context, num_sms, min_tokens_per_split = map(
        int, (batch, kv_heads, context, num_sms, min_tokens_per_split))
    fill = num_sms // (batch * kv_heads)
    return max(1, min(fill, context // min_tokens_per_split))


def critical_tokens(gpu: GPU, flops_per_token: float, weight_bytes: float) -> float | None:
    """Return the tokens per pass above which reading the weights once stops being the bound.

    A pass over T tokens does T x flops_per_token FLOPs and reads `weight_bytes`; its intensity
    reaches the ridge point at T = ridge x weight_bytes / flops_per_token (KV reads only push this
    higher). None when the GPU has no published FP16 peak.
    """
    gpu = _gpu(gpu)
    flops_per_token = validate.positive_float("flops_per_token", flops_per_token)
    weight_bytes = validate.positive_float("weight_bytes", weight_bytes)
    if gpu.fp16_tensor_flops is None:
        return None
    return gpu.ridge_flops_per_byte * weight_bytes / flops_per_token


# Boost clocks, Hz, for the shared-memory bandwidth below (NVIDIA's A100 and H100 SXM
# specifications: 1410 MHz and 1980 MHz).
BOOST_CLOCK_HZ: dict[str, float] = {"A100 40GB": 1.41e9, "A100 80GB": 1.41e9, "H100 SXM": 1.98e9}


def smem_bytes_per_s(gpu: GPU, clock_hz: float | None = None, bytes_per_clock: int = 128) -> float:
    """Return the GPU's total shared-memory bandwidth: SMs × 128 B per clock × clock.

    Each SM's shared memory has 32 banks of 4 bytes, one access per bank per clock (CUDA C++
    Programming Guide), so 128 B per clock per SM. `clock_hz` defaults to `BOOST_CLOCK_HZ`.
    """
    gpu = _gpu(gpu)
    clock = BOOST_CLOCK_HZ.get(gpu.name) if clock_hz is None else validate.positive_float("clock_hz", clock_hz)
    bytes_per_clock = validate.positive_int("bytes_per_clock", bytes_per_clock)
    if clock is None or gpu.num_sms is None:
        raise ValueError(f"smem_bytes_per_s: no clock or SM count for {gpu.name}; pass clock_hz")
    return gpu.num_sms * bytes_per_clock * clock


def attention_ceiling_flops(gpu: GPU, n: int, d: int, algorithm: str,
                            peak_flops: float | None = None, bytes_per_element: int = 2,
                            exp_ceiling: bool = False) -> float:
    """Return the roofline ceiling, FLOP/s, of one attention forward on `gpu` (fp16 by default).

    algorithm "standard": intensity N d / (b (N + d)) (`io_model.standard_attention_traffic`:
    S and P through HBM); "flash": the intensity of `io_model.flash_attention_io` with an SRAM
    of the GPU's shared memory per block. `peak_flops` replaces the tensor-core peak (e.g.
    `FP32_FMA_FLOPS` for a kernel whose matmuls compile to FMA instructions). With
    `exp_ceiling`, the third ceiling applies too: one exponential per 4 d FLOPs caps the
    FLOP rate at 4 d E (E = `gpu.exp_per_s`), whatever the overlap.
    """
    from .io_model import (
        attention_intensity,
        flash_attention_io,
        standard_attention_intensity,
    )

    gpu = _gpu(gpu)
    validate.one_of("algorithm", algorithm, ("standard", "flash"))
    if peak_flops is not None:
        validate.positive_float("peak_flops", peak_flops)
    if algorithm == "standard":
        intensity = standard_attention_intensity(n, d, bytes_per_element)
    elif algorithm == "flash":
        if gpu.smem_bytes_per_block is None:
            raise ValueError(f"{gpu.name} has no shared memory per block on record; use algorithm='standard'")
        sram = int(gpu.smem_bytes_per_block // validate.positive_float("bytes_per_element", bytes_per_element))
        intensity = attention_intensity(flash_attention_io(n, d, sram), bytes_per_element)
    else:
        raise ValueError(f"algorithm must be 'standard' or 'flash', got {algorithm!r}")
    peak = gpu.fp16_tensor_flops if peak_flops is None else float(peak_flops)
    if peak is None:
        raise ValueError(f"{gpu.name} has no published FP16 peak; pass peak_flops")
    if not isinstance(exp_ceiling, bool):
        raise validate.ArgumentTypeError(f"exp_ceiling must be a bool, got {type(exp_ceiling).__name__}")
    ceiling = min(peak, intensity * gpu.hbm_bytes_per_s)
    if exp_ceiling:
        ceiling = min(ceiling, 4 * d * _exp_rate(gpu))
    return ceiling


def _intensity(intensity) -> float:
    """Return `intensity` (FLOPs per byte) as a float; raise unless it is finite and ≥ 0."""
    return validate.finite_float("intensity", intensity, minimum=0.0)
