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

from .hardware import GPU

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

    @property
    def intensity(self) -> float:
        """Return FLOPs per byte."""
        return self.flops / self.bytes_moved


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
    for name, value in [("n_params", n_params), ("n_layer", n_layer), ("d_attn", d_attn),
                        ("kv_dim", kv_dim), ("batch", batch), ("new_tokens", new_tokens),
                        ("bytes_per_value", bytes_per_value)]:
        if value <= 0:
            raise ValueError(f"forward_cost: {name} must be positive, got {value}")
    if past_tokens < 0:
        raise ValueError(f"forward_cost: past_tokens must be ≥ 0, got {past_tokens}")
    tokens = batch * new_tokens
    pairs = batch * (new_tokens * past_tokens + new_tokens * (new_tokens + 1) / 2)
    flops = 2 * n_params * tokens + 4 * d_attn * pairs * n_layer
    kv_bytes = 2 * kv_dim * n_layer * bytes_per_value * batch * (past_tokens + new_tokens)
    weight_bytes = n_params * bytes_per_value
    return ForwardCost(flops=flops, bytes_moved=weight_bytes + kv_bytes)


def attainable_flops(gpu: GPU, intensity: float) -> float:
    """Return the roofline bound min(peak, intensity × bandwidth), in FLOP/s."""
    if gpu.fp16_tensor_flops is None:
        raise ValueError(f"{gpu.name} has no published FP16 tensor peak; pick another GPU")
    return min(gpu.fp16_tensor_flops, intensity * gpu.hbm_bytes_per_s)


def bound(gpu: GPU, intensity: float) -> str:
    """Return 'memory-bound' or 'compute-bound' for a kernel of this intensity on `gpu`."""
    return "compute-bound" if intensity >= gpu.ridge_flops_per_byte else "memory-bound"


def step_seconds(gpu: GPU, cost: ForwardCost) -> float:
    """Return the roofline lower bound on one pass's time: max(bytes / bandwidth, FLOPs / peak).

    A GPU without a published FP16 peak is bounded by bandwidth alone.
    """
    memory_time = cost.bytes_moved / gpu.hbm_bytes_per_s
    if gpu.fp16_tensor_flops is None:
        return memory_time
    return max(memory_time, cost.flops / gpu.fp16_tensor_flops)


@dataclass(frozen=True)
class TimeBound:
    """Roofline lower bounds on a kernel's time: compute_s = FLOPs / peak, memory_s = bytes / BW."""

    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        """Return max(compute_s, memory_s), the lower bound on the time."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """Return 'memory-bound' or 'compute-bound'."""
        return "memory-bound" if self.memory_s > self.compute_s else "compute-bound"


def time_bound(gpu: GPU, flops: float, bytes_moved: float,
               peak_flops: float | None = None) -> TimeBound:
    """Return the roofline's lower bounds on the time of `flops` and `bytes_moved` on `gpu`.

    `peak_flops` overrides the FP16 tensor-core peak (e.g. `FP32_FMA_FLOPS[gpu.name]` for a
    kernel that compiles to FMA instructions).
    """
    for name, value in (("flops", flops), ("bytes_moved", bytes_moved)):
        if isinstance(value, bool) or not value >= 0:
            raise ValueError(f"time_bound: {name} must be a non-negative number, got {value!r}")
    peak = gpu.fp16_tensor_flops if peak_flops is None else peak_flops
    if peak is None or not peak > 0:
        raise ValueError(f"time_bound: {gpu.name} has no published FP16 peak; pass peak_flops")
    return TimeBound(compute_s=flops / peak, memory_s=bytes_moved / gpu.hbm_bytes_per_s)


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
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"num_kv_splits: {name} must be a positive integer, got {value!r}")
    fill = num_sms // (batch * kv_heads)
    return max(1, min(fill, context // min_tokens_per_split))


def critical_tokens(gpu: GPU, flops_per_token: float, weight_bytes: float) -> float | None:
    """Return the tokens per pass above which reading the weights once stops being the bound.

    A pass over T tokens does T x flops_per_token FLOPs and reads `weight_bytes`; its intensity
    reaches the ridge point at T = ridge x weight_bytes / flops_per_token (KV reads only push this
    higher). None when the GPU has no published FP16 peak.
    """
    if gpu.fp16_tensor_flops is None:
        return None
    if not flops_per_token > 0 or not weight_bytes > 0:
        raise ValueError("flops_per_token and weight_bytes must be positive, got "
                         f"{flops_per_token!r} and {weight_bytes!r}")
    return gpu.ridge_flops_per_byte * weight_bytes / flops_per_token


# Boost clocks, Hz, for the shared-memory bandwidth below (NVIDIA's A100 and H100 SXM
# specifications: 1410 MHz and 1980 MHz).
BOOST_CLOCK_HZ: dict[str, float] = {"A100 40GB": 1.41e9, "A100 80GB": 1.41e9, "H100 SXM": 1.98e9}


def smem_bytes_per_s(gpu: GPU, clock_hz: float | None = None, bytes_per_clock: int = 128) -> float:
    """Return the GPU's total shared-memory bandwidth: SMs × 128 B per clock × clock.

    Each SM's shared memory has 32 banks of 4 bytes, one access per bank per clock (CUDA C++
    Programming Guide), so 128 B per clock per SM. `clock_hz` defaults to `BOOST_CLOCK_HZ`.
    """
    clock = BOOST_CLOCK_HZ.get(gpu.name) if clock_hz is None else clock_hz
    if clock is None or gpu.num_sms is None:
        raise ValueError(f"smem_bytes_per_s: no clock or SM count for {gpu.name}; pass clock_hz")
    if not clock > 0:
        raise ValueError(f"smem_bytes_per_s: clock_hz must be positive, got {clock!r}")
    return gpu.num_sms * bytes_per_clock * clock


def attention_ceiling_flops(gpu: GPU, n: int, d: int, algorithm: str,
                            peak_flops: float | None = None, bytes_per_element: int = 2) -> float:
    """Return the roofline ceiling, FLOP/s, of one attention forward on `gpu` (fp16 by default).

    algorithm "standard": intensity N d / (b (N + d)) (S and P through HBM); "flash": the
    intensity of `io_model.flash_attention_io` with an SRAM of the GPU's shared memory per
    block. `peak_flops` replaces the tensor-core peak (e.g. `FP32_FMA_FLOPS` for a kernel whose
    matmuls compile to FMA instructions).
    """
    from .io_model import attention_intensity, flash_attention_io, standard_attention_intensity

    if algorithm == "standard":
        intensity = standard_attention_intensity(n, d, bytes_per_element)
    elif algorithm == "flash":
        sram = gpu.smem_bytes_per_block // bytes_per_element
        intensity = attention_intensity(flash_attention_io(n, d, sram), bytes_per_element)
    else:
        raise ValueError(f"algorithm must be 'standard' or 'flash', got {algorithm!r}")
    peak = gpu.fp16_tensor_flops if peak_flops is None else peak_flops
    if peak is None:
        raise ValueError(f"{gpu.name} has no published FP16 peak; pass peak_flops")
    return min(peak, intensity * gpu.hbm_bytes_per_s)
