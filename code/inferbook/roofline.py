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
