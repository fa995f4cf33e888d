"""Decoding attention split along the KV cache ("flash-decoding", Dao et al. 2023), in PyTorch.

- `split_kv_attention(q, k, v, num_splits, scale=None)` -> `(o, lse)`: non-causal attention of
  a few query rows over the whole cache, computed as `num_splits` KV chunks and a merge.
- `merge_partials(outputs, lses)` -> `(o, lse)`: the exact merge of partial attention results.
- `fa2_num_splits_heuristic(...)`, `fa2_num_splits(...)`: how many splits flash-attn 2 chooses
  (csrc/flash_attn/flash_api.cpp), line for line; `fa4_num_splits(...)`: FlashAttention-4's
  rule (flash_attn/cute/interface.py), which runs only when the caller passes num_splits < 1.

Shapes as in `inferbook.triton_flash`: `q: [batch, heads, n_q, d]`, `k, v: [batch, kv_heads,
n_kv, d]` with `heads % kv_heads == 0`; `lse` natural log. No Triton needed.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import validate
from .arith import ceil_div

__all__ = ["split_kv_attention", "merge_partials", "check_qkv", "fa2_num_splits_heuristic",
           "fa2_num_splits", "fa4_num_splits_heuristic", "fa4_num_splits"]


def check_qkv(q, k, v) -> None:
    """Raise a TypeError/ValueError naming the argument unless q, k, v are attention inputs.

    q: [batch, heads, n_q, d], k and v: [batch, kv_heads, n_kv, d], floating point, one dtype,
    one device, heads a multiple of kv_heads, every size >= 1. Nothing is broadcast.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise validate.ArgumentTypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [batch, heads, seq, head_dim]; got shape "
                             f"{tuple(t.shape)}")
        if not t.is_floating_point():
            raise validate.ArgumentTypeError(f"{name}.dtype must be a floating-point dtype; got {t.dtype}")
        if 0 in t.shape:
            raise ValueError(f"every size of {name} must be >= 1; got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise validate.ArgumentTypeError(f"{name}.dtype ({t.dtype}) must equal q.dtype ({q.dtype})")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q on {q.device}: one device")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k/v batch ({k.shape[0]}) must equal q's batch ({q.shape[0]})")
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k/v head_dim ({k.shape[3]}) must equal q's head_dim ({q.shape[3]})")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"q's heads ({q.shape[1]}) must be a multiple of k/v's heads "
                         f"({k.shape[1]}) (grouped-query attention)")


def merge_partials(outputs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (o, lse) of attention over the union of S disjoint key sets, from their partials.

    outputs: [S, ..., d] each normalised over its own keys; lses: [S, ...] their logsumexps.
    lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Exact: the weights are the
    fractions of the softmax denominator each split holds. A split with no keys (lse = -inf)
    gets weight 0; if every split is empty, o = 0 and lse = -inf.
    """
    for name, t in (("outputs", outputs), ("lses", lses)):
        if not isinstance(t, torch.Tensor):
            raise validate.ArgumentTypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if not t.is_floating_point():
            raise validate.ArgumentTypeError(f"{name}.dtype must be a floating-point dtype; got {t.dtype}")
    if outputs.dim() < 2 or outputs.shape[:-1] != lses.shape:
        raise ValueError(f"outputs {tuple(outputs.shape)} must be lses {tuple(lses.shape)} + [d]")
    if lses.shape[0] == 0:
        raise ValueError("outputs and lses need at least one split (dimension 0 is empty)")
    if outputs.device != lses.device:
        raise ValueError(f"outputs is on {outputs.device} but lses on {lses.device}: one device")
    lse = torch.logsumexp(lses, dim=0)
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(lses - lse_safe)                     # [S, ...], sums to 1 (or 0)
    o = (weights[..., None] * outputs.to(weights.dtype)).sum(0)
    return o, lse


def split_kv_attention(q, k, v, num_splits: int, scale=None):
    """Return (o, lse) of non-causal attention computed as `num_splits` KV chunks + a merge.

    The decode-time form: q is a few new query rows (usually n_q = 1) that see the whole
    cache k, v ([batch, kv_heads, n_kv, d]). The cache is cut into `num_splits` chunks of
    ceil(n_kv / num_splits) keys (the last ones padded with masked keys); each chunk's
    (o_s, lse_s) is what one GPU program would compute on its own, all chunks at once here as
    one batched computation in float32 (float64 for float64 inputs); `merge_partials` then
    combines them exactly.
    """
    check_qkv(q, k, v)
    num_splits = validate.positive_int("num_splits", num_splits)
    batch, kv_heads, n_kv, head_dim = k.shape
    if num_splits > n_kv:
        raise ValueError(f"num_splits ({num_splits}) must be <= n_kv ({n_kv})")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else validate.finite_float("scale", scale)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = q.shape[1] // kv_heads
    chunk = -(-n_kv // num_splits)
    pad = chunk * num_splits - n_kv
    # [B, H_kv, S, chunk, d]; padded keys are masked below
    split_shape = (batch, kv_heads, num_splits, chunk, head_dim)
    k_s = torch.nn.functional.pad(k.to(work), (0, 0, 0, pad)).reshape(split_shape)
    v_s = torch.nn.functional.pad(v.to(work), (0, 0, 0, pad)).reshape(split_shape)
    k_s = k_s.repeat_interleave(group, dim=1)
    v_s = v_s.repeat_interleave(group, dim=1)
    s = (q.to(work)[:, :, None] @ k_s.transpose(-1, -2)) * scale    # [B, H, S, n_q, chunk]
    real = (torch.arange(num_splits * chunk, device=q.device) < n_kv).view(num_splits, 1, chunk)
    s = s.masked_fill(~real, float("-inf"))
    lse_s = torch.logsumexp(s, dim=-1)                                  # [B, H, S, n_q]
    o_s = (torch.softmax(s, dim=-1) @ v_s).nan_to_num(0.0)              # an all-padding chunk -> 0
    o, lse = merge_partials(o_s.movedim(2, 0), lse_s.movedim(2, 0))
    return o.to(q.dtype), lse


# --------------------------------------------------------------------------------------
# How many splits flash-attn chooses (flash-attention at commit 0251105a, August 2026)
# --------------------------------------------------------------------------------------
def fa2_num_splits_heuristic(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int,
                             max_splits: int) -> int:
    """Return flash-attn 2's `num_splits_heuristic` (csrc/flash_attn/flash_api.cpp:281-314).

    1 if batch_nheads_mblocks >= 0.8 x num_sms (the grid nearly fills the GPU); otherwise,
    over S = 1 .. min(max_splits, num_sms, num_n_blocks), the wave efficiency
    n / ceil(n) with n = batch_nheads_mblocks x S / num_sms, counting only S whose blocks per
    split, ceil(num_n_blocks / S), differ from S - 1's; the smallest such S whose efficiency is
    at least 85 % of the best. float32 arithmetic as in C++ (the 0.85 comparison in double).
    `num_sms` is what the caller passes: flash-attn passes 2 x the SM count.
    """
    batch_nheads_mblocks = validate.positive_int("batch_nheads_mblocks", batch_nheads_mblocks)
    num_sms = validate.positive_int("num_sms", num_sms)
    num_n_blocks = validate.positive_int("num_n_blocks", num_n_blocks)
    max_splits = validate.positive_int("max_splits", max_splits)
    f32 = np.float32
    if f32(batch_nheads_mblocks) >= f32(0.8) * f32(num_sms):
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or ceil_div(num_n_blocks, s) != ceil_div(num_n_blocks, s - 1)

    efficiency = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            efficiency.append(f32(0.0))
            continue
        n_waves = f32(batch_nheads_mblocks * s) / f32(num_sms)
        efficiency.append(n_waves / np.ceil(n_waves))
    best = max(efficiency)
    for s in range(1, max_splits + 1):
        if eligible(s) and float(efficiency[s - 1]) >= 0.85 * float(best):
            return s
    return 1


def fa2_num_splits(batch: int, heads: int, kv_heads: int, n_q: int, n_kv: int, head_dim: int,
                   num_sms: int) -> int:
    """Return the splits flash-attn 2's forward (`mha_fwd`, `mha_fwd_kvcache` with its default
    num_splits = 0) chooses for this call on a GPU with `num_sms` SMs.

    As `set_params_splitkv` (flash_api.cpp:317-347) computes its arguments: key blocks of
    256 / 128 / 64 keys for head_dim <= 64 / <= 128 / larger, query blocks of 64 rows, and
    2 x num_sms ("128 threads per block": two blocks per SM); a decode step with GQA first
    swaps the group into the rows (`seqlenq_ngroups_swapped`: n_q = group, heads = kv_heads).
    """
    for name, value in (("batch", batch), ("heads", heads), ("kv_heads", kv_heads),
                        ("n_q", n_q), ("n_kv", n_kv), ("head_dim", head_dim),
                        ("num_sms", num_sms)):
        validate.positive_int(name, value)
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if head_dim > 256:
        raise ValueError(f"head_dim must be <= 256 (flash-attn 2's limit); got {head_dim}")
    if n_q == 1 and heads > kv_heads and head_dim % 8 == 0:
        n_q, heads = heads // kv_heads, kv_heads
    head_size = ceil_div(head_dim, 8) * 8
    block_n = 256 if head_size <= 64 else (128 if head_size <= 128 else 64)
    return fa2_num_splits_heuristic(batch * heads * ceil_div(n_q, 64), 2 * num_sms,
                                    ceil_div(n_kv, block_n), 128)


def fa4_num_splits_heuristic(total_mblocks: int, num_sms: int, num_n_blocks: int,
                             max_splits: int = 128) -> int:
    """Return FlashAttention-4's `num_splits_heuristic` (flash_attn/cute/interface.py:276-289):
    1 if num_n_blocks <= 4, else min(num_sms // total_mblocks, max_splits, num_n_blocks).

    Can be 0 when the grid already exceeds the SMs (num_sms // total_mblocks = 0): the code
    returns it as is, and its split path then treats the call as unsplit.
    """
    total_mblocks = validate.positive_int("total_mblocks", total_mblocks)
    num_sms = validate.positive_int("num_sms", num_sms)
    num_n_blocks = validate.positive_int("num_n_blocks", num_n_blocks)
    max_splits = validate.positive_int("max_splits", max_splits)
    if num_n_blocks <= 4:
        return 1
    return min(num_sms // total_mblocks, max_splits, num_n_blocks)


def fa4_num_splits(total_mblocks: int, num_n_blocks: int, num_sms: int,
                   num_splits: int = 1) -> int:
    """Return the splits FlashAttention-4's forward uses (`_get_fwd_config`,
    flash_attn/cute/interface.py:368-371): `num_splits` as passed when it is >= 1 (the default
    of `flash_attn_func` and `flash_attn_varlen_func` is 1: no split), the heuristic only when
    the caller passes num_splits < 1. total_mblocks = batch x KV heads x Q tiles (GQA packed),
    num_n_blocks = key tiles, as that function computes them from its tile sizes. Returns
    the splits the kernel runs with (at least 1).
    """
    num_splits = validate.integer("num_splits", num_splits)
    if num_splits >= 1:
        return num_splits
    # the heuristic returns 0 when the grid already exceeds the SMs; `is_split_kv =
    # num_splits > 1` (interface.py:817) then runs the call unsplit: one split
    return max(1, fa4_num_splits_heuristic(total_mblocks, num_sms, num_n_blocks, 128))
