"""FlashAttention-2 forward as a Triton kernel, its autograd wrapper, and split-KV decoding.

Returns of the public functions:

- `flash_attention(q, k, v, causal)` -> `(o, lse)`: the Triton forward (FlashAttention-2
  work split, Dao 2023), differentiable in `q`, `k`, `v`.
- `attention_reference(q, k, v, causal)` -> `(o, lse)`: the plain computation in float64.
- `attention_naive(q, k, v, causal)` -> `(o, lse)`: the plain computation in the inputs' dtype
  (the baseline of flash-attention's error rule).
- `split_kv_attention(q, k, v, num_splits)` -> `(o, lse)`: decoding attention split along the
  KV cache ("flash-decoding", Dao et al. 2023), in PyTorch.
- `merge_partials(outputs, lses)` -> `(o, lse)`: the exact merge of partial attention results.
- `FLASH_ATTENTION_VERSIONS`: FlashAttention 1-4 (year, hardware, what changed, reported
  speedups, cited) as data; `flash_versions_for(compute_capability)` picks the applicable ones.

Shapes: `q: [batch, heads, n_q, head_dim]`, `k, v: [batch, kv_heads, n_kv, head_dim]` with
`heads % kv_heads == 0` (grouped-query attention: query head `h` reads KV head
`h // (heads // kv_heads)`); `o` has q's shape and dtype; `lse: [batch, heads, n_q]` float32,
natural log.

Causal masking is aligned bottom-right, as in flash-attn >= 2.1: query `i` sees key `j` iff
`j <= i + n_kv - n_q`. For `n_q == n_kv` this is the usual lower triangle (what PyTorch's
`is_causal=True` means); for a decode step (`n_q = 1`) the query sees the whole cache. A query
row that sees no key at all (causal with `n_q > n_kv`) gets `o = 0` and `lse = -inf`.

Running without a GPU: set the environment variable `TRITON_INTERPRET=1` *before* this module
is imported (Triton reads it when `@triton.jit` decorates the kernel), then call it with CPU
tensors; the kernel is executed by Triton's NumPy interpreter. The interpreter computes
bfloat16 wrongly (triton-lang/triton issue 11584), so under the interpreter bf16 inputs are
upcast to float32 before the kernel and the output is cast back; on a GPU bf16 runs natively.

The backward pass is NOT a Triton kernel: it is the recompute-based FlashAttention backward
(Dao et al. 2022) written in PyTorch (`_flash_backward_torch`): from Q, K, V, O,
dO and the saved logsumexp it recomputes P one K/V tile at a time, so it never stores the
N x N matrix either, but it runs at PyTorch speed, not kernel speed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634  # log2(e): the kernel works with exp2, as GPUs have a fast exp2
LN2 = 0.6931471805599453
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# --------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------
@triton.jit
def _attend_kv_tiles(
    acc, m_i, l_i, q,
    k_base, v_base, stride_kn, stride_vn,
    offs_m, offs_d, n_kv, kv_start, kv_end, causal_offset, qk_scale,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Fold the K/V tiles [kv_start, kv_end) into the running (acc, m_i, l_i) of one Q tile.

    MASKED=False is the fast path for tiles every row of the Q tile may see completely;
    MASKED=True adds the n_kv bound (the ragged tail) and, if CAUSAL, the causal test (the
    diagonal tiles).
    m_i is the running row max in log2 units, l_i the running row sum, acc the unnormalised
    output; all float32.
    """
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < HEAD_DIM
    for start_n in range(kv_start, kv_end, BLOCK_N):
        cols = start_n + offs_n
        kv_ok = cols < n_kv
        # K tile as [HEAD_DIM, BLOCK_N] (transposed by the pointer arithmetic), V as [BLOCK_N, D]
        k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None],
                    mask=kv_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=kv_ok[:, None] & d_ok[None, :], other=0.0)
        s = tl.dot(q, k, input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
        if MASKED:
            visible = kv_ok[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_offset)
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no visible key yet keeps m = -inf; shift by 0 instead so that
        # exp2(-inf - (-inf)) never produces NaN.
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_shift)           # rescales what was accumulated so far
        p = tl.math.exp2(s - m_shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _flash_forward_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    num_heads, group_size, n_q, n_kv, qk_scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program = one BLOCK_M tile of queries of one (batch, head); writes O and LSE."""
    # -- which tile: axis 0 walks Q tiles, axis 1 walks batch x heads ---------------------
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // num_heads
    h = pid_bh % num_heads
    kv_h = h // group_size                                # grouped-query attention
    q_base = Q + b * stride_qb + h * stride_qh
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh

    # -- load the Q tile once; it stays on chip for the whole loop ------------------------
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)                        # BLOCK_D = next power of 2 >= HEAD_DIM
    m_ok = offs_m < n_q
    d_ok = offs_d < HEAD_DIM
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    # -- running statistics, float32 ------------------------------------------------------
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- which K/V tiles: unmasked ones first, then the diagonal / ragged tail ------------
    causal_offset = n_kv - n_q
    if CAUSAL:
        # every row of this tile sees keys j <= pid_m*BLOCK_M + causal_offset
        full_end = (pid_m * BLOCK_M + causal_offset + 1) // BLOCK_N * BLOCK_N
        full_end = tl.maximum(full_end, 0)
        # the last row of the tile sees keys up to (pid_m+1)*BLOCK_M - 1 + causal_offset
        masked_end = tl.minimum((pid_m + 1) * BLOCK_M + causal_offset, n_kv)
    else:
        full_end = n_kv // BLOCK_N * BLOCK_N
        masked_end = n_kv
    acc, m_i, l_i = _attend_kv_tiles(
        acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_d, n_kv,
        0, full_end, causal_offset, qk_scale,
        BLOCK_N, HEAD_DIM, False, CAUSAL, DOT_PRECISION)
    acc, m_i, l_i = _attend_kv_tiles(
        acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_d, n_kv,
        full_end, masked_end, causal_offset, qk_scale,
        BLOCK_N, HEAD_DIM, True, CAUSAL, DOT_PRECISION)

    # -- epilogue: normalise once, write O and the logsumexp ------------------------------
    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    o_base = O + b * stride_ob + h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], o.to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    tl.store(LSE + pid_bh * n_q + offs_m, lse, mask=m_ok)


def kv_tile_schedule(pid_m: int, n_q: int, n_kv: int, block_m: int, block_n: int,
                     causal: bool) -> tuple[int, int]:
    """Return (full_end, masked_end): the kernel's K/V range split for Q tile `pid_m`.

    Keys [0, full_end) are visible to every row of the tile (the unmasked loop); keys
    [full_end, masked_end) go through the masked loop (the causal diagonal and the ragged
    tail); keys from masked_end on are never loaded. The same integer arithmetic as
    `_flash_forward_kernel`, in Python, for the chapter's figure and for the tests.
    """
    if causal:
        offset = n_kv - n_q
        full_end = max((pid_m * block_m + offset + 1) // block_n * block_n, 0)
        masked_end = min((pid_m + 1) * block_m + offset, n_kv)
    else:
        full_end, masked_end = n_kv // block_n * block_n, n_kv
    return full_end, masked_end


# --------------------------------------------------------------------------------------
# Launch
# --------------------------------------------------------------------------------------
def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  allowed: tuple = SUPPORTED_DTYPES) -> None:
    """Raise ValueError naming the first thing wrong with (q, k, v)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor [batch, heads, seq, head_dim]; "
                             f"got {getattr(t, 'shape', type(t))}")
        if t.dtype not in allowed:
            names = ", ".join(str(a).removeprefix("torch.") for a in allowed)
            raise ValueError(f"{name}.dtype is {t.dtype}; allowed: {names}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    batch, heads, _, head_dim = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"k/v batch and head_dim must match q's ({batch}, {head_dim}); "
                         f"got k {tuple(k.shape)}")
    kv_heads = k.shape[1]
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"q heads ({heads}) must be a multiple of k/v heads ({kv_heads})")
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]; got {head_dim}")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError(f"sequence lengths must be >= 1; got n_q={q.shape[2]}, n_kv={k.shape[2]}")


def default_blocks(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int, int]:
    """Return (BLOCK_M, BLOCK_N, num_warps, num_stages) for a GPU launch.

    Plain heuristics (no autotuning, which needs a GPU): tiles shrink as head_dim and the
    element size grow so that Q, K and V tiles fit in the shared memory of a T4 (64 KiB per SM).
    """
    wide = 2 if dtype == torch.float32 else 1
    if head_dim <= 64:
        block_m, block_n, warps = 128, 64, 4
    elif head_dim <= 128:
        block_m, block_n, warps = 128, 32, 8
    else:
        block_m, block_n, warps = 64, 32, 4
    return block_m // wide, block_n, warps, 2


def _launch_forward(q, k, v, causal, sm_scale, block_m, block_n):
    """Run the kernel; return (o, lse) with o in q's dtype and lse float32 [B, H, n_q]."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_kv = k.shape[1], k.shape[2]
    on_cpu = q.device.type == "cpu"
    if on_cpu and not INTERPRETED:
        raise ValueError("CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before "
                         "importing inferbook.triton_flash, or pass CUDA tensors")
    out_dtype = q.dtype
    if INTERPRETED and q.dtype == torch.bfloat16:
        q, k, v = q.float(), k.float(), v.float()       # the interpreter's bf16 is wrong
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    bm, bn, warps, stages = default_blocks(head_dim, q.dtype)
    if INTERPRETED:
        bm, bn = 32, 32                                  # numpy-sized tiles: fewer Python steps
    bm, bn = block_m or bm, block_n or bn
    for name, value in (("block_m", bm), ("block_n", bn)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(n_q, bm), batch * heads)
    _flash_forward_kernel[grid](
        q, k, v, o, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        heads, heads // kv_heads, n_q, n_kv, sm_scale * LOG2E,
        CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn,
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim),
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=warps, num_stages=stages,
    )
    return o.to(out_dtype), lse


# --------------------------------------------------------------------------------------
# Backward (PyTorch, recompute-based) and the autograd wrapper
# --------------------------------------------------------------------------------------
def _causal_visible(n_q: int, n_kv: int, kv_start: int, kv_end: int, device) -> torch.Tensor:
    """Return the [n_q, kv_end - kv_start] bool mask of keys each query sees (bottom-right)."""
    rows = torch.arange(n_q, device=device)[:, None] + (n_kv - n_q)
    cols = torch.arange(kv_start, kv_end, device=device)[None, :]
    return cols <= rows


def _flash_backward_torch(q, k, v, o, lse, do, causal, sm_scale, block_n=128):
    """Return (dq, dk, dv) by the FlashAttention backward, one K/V tile at a time, in float32.

    Per tile: P = exp(S - L) recomputed from the saved logsumexp L; dV = P^T dO;
    dP = dO V^T; dS = P * (dP - D) with D = rowsum(dO * O); dQ += dS K; dK = dS^T Q.
    Grouped-query heads add their dK, dV into the shared KV head.
    """
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_kv = k.shape[1], k.shape[2]
    group = heads // kv_heads
    qf, of, dof = q.float(), o.float(), do.float()
    # [B, H, n, d] views of K, V per query head (no copy for MHA)
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    delta = (dof * of).sum(-1, keepdim=True)                   # D, [B, H, n_q, 1]
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None]
    dq = torch.zeros_like(qf)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    for start in range(0, n_kv, block_n):
        end = min(start + block_n, n_kv)
        k_t, v_t = kf[:, :, start:end], vf[:, :, start:end]
        s = qf @ k_t.transpose(-1, -2) * sm_scale
        if causal:
            s = s.masked_fill(~_causal_visible(n_q, n_kv, start, end, q.device), float("-inf"))
        p = torch.exp(s - lse_safe)
        dv[:, :, start:end] = p.transpose(-1, -2) @ dof
        dp = dof @ v_t.transpose(-1, -2)
        ds = p * (dp - delta)
        dq += ds @ k_t * sm_scale
        dk[:, :, start:end] = ds.transpose(-1, -2) @ qf * sm_scale
    if group > 1:
        dk = dk.view(batch, kv_heads, group, n_kv, head_dim).sum(2)
        dv = dv.view(batch, kv_heads, group, n_kv, head_dim).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: Triton forward, recompute-based PyTorch backward (see module doc)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, block_m, block_n):
        o, lse = _launch_forward(q, k, v, causal, sm_scale, block_m, block_n)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _flash_backward_torch(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (o, lse): softmax(q k^T * sm_scale [causal mask]) v and its row logsumexp.

    q: [batch, heads, n_q, head_dim]; k, v: [batch, kv_heads, n_kv, head_dim]; head_dim in
    [16, 256]; dtype float16, bfloat16 or float32. sm_scale defaults to 1/sqrt(head_dim).
    block_m, block_n override the tile sizes (powers of two >= 16). Differentiable in q, k, v.
    """
    _check_inputs(q, k, v)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(q.shape[-1])
    return FlashAttentionFunction.apply(q, k, v, bool(causal), float(sm_scale), block_m, block_n)


# --------------------------------------------------------------------------------------
# Plain attention: the float64 reference and the same-precision baseline
# --------------------------------------------------------------------------------------
def attention_naive(q, k, v, causal=False, sm_scale=None, upcast=False):
    """Return (o, lse) by materialising the full score matrix, in q's dtype (or float64).

    With upcast=True everything is computed in float64: the reference. With upcast=False it is
    the plain computation in the inputs' own precision: the baseline of the error rule.
    Differentiable; fully masked rows give o = 0 and lse = -inf, like the kernel.
    """
    _check_inputs(q, k, v, SUPPORTED_DTYPES + (torch.float64,))
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(q.shape[-1])
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * sm_scale
    n_q, n_kv = q.shape[2], k.shape[2]
    if causal:
        s = s.masked_fill(~_causal_visible(n_q, n_kv, 0, n_kv, q.device), float("-inf"))
    lse = torch.logsumexp(s.float() if s.dtype != torch.float64 else s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)          # a row of all -inf gives NaN -> 0
    return p @ v, lse


def attention_reference(q, k, v, causal=False, sm_scale=None):
    """Return (o, lse) in float64: the ground truth every test compares against."""
    return attention_naive(q, k, v, causal, sm_scale, upcast=True)


# --------------------------------------------------------------------------------------
# Decoding: split-KV ("flash-decoding") in PyTorch
# --------------------------------------------------------------------------------------
def merge_partials(outputs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (o, lse) of attention over the union of S disjoint key sets, from their partials.

    outputs: [S, ..., d] each normalised over its own keys; lses: [S, ...] their logsumexps.
    lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Exact: the weights are the
    fractions of the softmax denominator each split holds. A split with no keys (lse = -inf)
    gets weight 0; if every split is empty, o = 0 and lse = -inf.
    """
    if outputs.shape[:-1] != lses.shape:
        raise ValueError(f"outputs {tuple(outputs.shape)} must be lses {tuple(lses.shape)} + [d]")
    lse = torch.logsumexp(lses, dim=0)
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(lses - lse_safe)                     # [S, ...], sums to 1 (or 0)
    o = (weights[..., None] * outputs.to(weights.dtype)).sum(0)
    return o, lse


def split_kv_attention(q, k, v, num_splits: int, sm_scale=None):
    """Return (o, lse) of non-causal attention computed as `num_splits` KV chunks + a merge.

    The decode-time form: q is a few new query rows (usually n_q = 1) that see the whole
    cache k, v ([batch, kv_heads, n_kv, d]). The cache is cut into `num_splits` chunks of
    ceil(n_kv / num_splits) keys (the last ones padded with masked keys); each chunk's
    (o_s, lse_s) is what one GPU program would compute on its own, all chunks at once here as
    one batched computation in float32 (float64 for float64 inputs); `merge_partials` then
    combines them exactly.
    """
    if not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"num_splits must be a positive int; got {num_splits!r}")
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError("q must be [B, H, n_q, d] and k, v [B, H_kv, n_kv, d] of equal shape")
    batch, kv_heads, n_kv, head_dim = k.shape
    if num_splits > n_kv:
        raise ValueError(f"num_splits ({num_splits}) must be <= n_kv ({n_kv})")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(q.shape[-1])
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
    s = (q.to(work)[:, :, None] @ k_s.transpose(-1, -2)) * sm_scale    # [B, H, S, n_q, chunk]
    real = (torch.arange(num_splits * chunk, device=q.device) < n_kv).view(num_splits, 1, chunk)
    s = s.masked_fill(~real, float("-inf"))
    lse_s = torch.logsumexp(s, dim=-1)                                  # [B, H, S, n_q]
    o_s = (torch.softmax(s, dim=-1) @ v_s).nan_to_num(0.0)              # an all-padding chunk -> 0
    o, lse = merge_partials(o_s.movedim(2, 0), lse_s.movedim(2, 0))
    return o.to(q.dtype), lse


# --------------------------------------------------------------------------------------
# FLOPs, benchmark results
# --------------------------------------------------------------------------------------
def benchmark_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool) -> float:
    """Return the FLOPs used to report attention TFLOP/s: 4·B·H·N²·d, halved when causal.

    Two matmuls (Q K^T and P V) of 2·N²·d FLOPs per head; halving for causal is the reporting
    convention of Triton's fused-attention tutorial and flash-attn's benchmarks. The exact
    count of visible (query, key) pairs, `inferbook.flash.attention_flops`, is (N+1)/(2N) of
    the full count: a little more than half.
    """
    for name, value in (("batch", batch), ("heads", heads), ("seq_len", seq_len),
                        ("head_dim", head_dim)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {value}")
    flops = 4.0 * batch * heads * seq_len * seq_len * head_dim
    return flops / 2 if causal else flops


def load_benchmark_results(folder: str | os.PathLike) -> list[dict]:
    """Return the parsed `flash_triton_*.json` files in `folder`, sorted by name ([] if none).

    Each must have the keys written by tests/bench/bench_triton_flash.py: "machine" (with
    "gpu", "driver", "torch", "triton", "date", ...) and "results" (a list of rows).
    """
    runs = []
    for path in sorted(Path(folder).glob("flash_triton_*.json")):
        data = json.loads(path.read_text())
        missing = {"machine", "results"} - set(data)
        if missing:
            raise ValueError(f"{path.name}: missing keys {sorted(missing)}")
        data["path"] = path.name
        runs.append(data)
    return runs


def benchmark_label(run: dict) -> str:
    """Return the one-line provenance of a benchmark run: GPU, driver, versions, date."""
    m = run["machine"]
    return (f"{m['gpu']} (sm{m.get('capability', '?')}), driver {m.get('driver', '?')}, "
            f"torch {m.get('torch', '?')}, triton {m.get('triton', '?')}, "
            f"flash-attn {m.get('flash_attn') or 'not installed'}, {m.get('date', '?')}")


def plot_benchmark_results(run: dict, head_dim: int | None = None, causal: bool = False):
    """Return a matplotlib figure: TFLOP/s and peak memory vs N, one line per method."""
    import matplotlib.pyplot as plt

    rows = [r for r in run["results"] if r.get("causal") == causal and r.get("status") == "ok"]
    dims = sorted({r["head_dim"] for r in rows})
    if head_dim is None and dims:
        head_dim = dims[0]
    rows = [r for r in rows if r["head_dim"] == head_dim]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for method in sorted({r["method"] for r in rows}):
        pts = sorted((r["seq_len"], r["tflops"], r["peak_mem_bytes"]) for r in rows
                     if r["method"] == method)
        ns = [p[0] for p in pts]
        ax_t.plot(ns, [p[1] for p in pts], marker="o", label=method)
        ax_m.plot(ns, [p[2] / 2**20 for p in pts], marker="o", label=method)
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    ax_t.set_ylabel("forward TFLOP/s")
    ax_m.set_ylabel("peak extra memory (MiB)")
    ax_m.set_yscale("log")
    ax_t.legend(fontsize=8)
    fig.suptitle(f"{benchmark_label(run)}\nhead_dim={head_dim}, causal={causal}", fontsize=9)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# The FlashAttention versions, as data (for the chapter's table and the deployment skill)
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlashAttentionVersion:
    """One FlashAttention generation as its paper reports it. `cite` is a references.bib key."""

    name: str
    year: int
    hardware: str
    min_compute_capability: tuple[int, int]   # oldest GPU generation the official kernels target
    what_changed: str
    reported_speedup: str                      # as the paper states it, with its baseline
    has_backward: bool
    cite: str


FLASH_ATTENTION_VERSIONS: tuple[FlashAttentionVersion, ...] = (
    FlashAttentionVersion(
        "FlashAttention", 2022, "Turing and Ampere (T4, A100)", (7, 5),
        "IO-aware tiling through SRAM with an online softmax; recompute P in the backward",
        "15% end-to-end on BERT-large vs the MLPerf 1.1 record; 3x on GPT-2 (N=1K); "
        "2.4x on long-range arena (N=1K-4K)", True, "dao2022flashattention"),
    FlashAttentionVersion(
        "FlashAttention-2", 2023, "Ampere, Ada, Hopper (A100, RTX 4090, H100)", (8, 0),
        "fewer non-matmul FLOPs; parallel over the sequence too; Q split across warps, not K",
        "about 2x over FlashAttention; 50-73% of A100 peak; up to 225 TFLOP/s per A100 "
        "in GPT training", True, "dao2024flashattention2"),
    FlashAttentionVersion(
        "FlashAttention-3", 2024, "Hopper (H100)", (9, 0),
        "warp specialisation, TMA + WGMMA asynchrony, softmax overlapped with matmuls, FP8",
        "1.5-2.0x over FlashAttention-2 on H100; FP16 up to 740 TFLOP/s (75%); "
        "FP8 close to 1.2 PFLOP/s", True, "shah2024flashattention3"),
    FlashAttentionVersion(
        "FlashAttention-4", 2026, "Blackwell (B200, GB200)", (10, 0),
        "fully asynchronous MMA pipelines, software-emulated exp and conditional rescaling, "
        "tensor memory and 2-CTA MMA in the backward; written in CuTe-DSL (Python)",
        "up to 1.3x over cuDNN 9.13 and 2.7x over Triton on B200 (BF16); up to 1613 TFLOP/s (71%)",
        True, "zadouri2026flashattention4"),
)


def flash_versions_for(compute_capability: tuple[int, int]) -> list[FlashAttentionVersion]:
    """Return the FlashAttention versions whose official kernels target this GPU generation.

    A version applies from its `min_compute_capability` up to (not including) the next major
    generation that got its own version, except FlashAttention-2, which runs on every sm80+ GPU.
    """
    if len(compute_capability) != 2 or compute_capability < (5, 0):
        raise ValueError(f"compute_capability must be (major, minor) >= (5, 0); got {compute_capability}")
    out = []
    for v in FLASH_ATTENTION_VERSIONS:
        if compute_capability < v.min_compute_capability:
            continue
        if v.name == "FlashAttention" and compute_capability >= (9, 0):
            continue  # the 1.x kernels were written for Turing/Ampere
        if v.name in ("FlashAttention-3",) and compute_capability[0] != 9:
            continue
        if v.name == "FlashAttention-4" and compute_capability[0] != 10:
            continue
        out.append(v)
    return out
