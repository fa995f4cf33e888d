"""FlashAttention-2 forward as a Triton kernel, its launch, its backward and its baseline.

The neighbouring ideas live in their own modules, imported directly by their callers: the launch
choices per GPU generation in `inferbook.triton_launch` (no Triton needed), the ahead-of-time
compile in `inferbook.triton_aot`, split-KV decoding and the merge in `inferbook.split_kv`
(PyTorch only), the benchmark files and plots in `inferbook.triton_plots`, the FlashAttention
versions in `inferbook.attention_backends`.

Returns of the public functions:

- `flash_attention(q, k, v, causal, scale)` -> `(o, lse)`: the Triton forward (FlashAttention-2
  work split, Dao 2023), differentiable in `q`, `k`, `v`.
- `attention_naive(q, k, v, causal)` -> `(o, lse)`: the plain computation in the inputs' dtype
  (the baseline of flash-attention's error rule). The float64 reference is
  `inferbook.flash.attention_reference`, the one reference of the book.
- `kv_tile_schedule(pid_m, n_q, n_kv, block_m, block_n, causal)` -> `(full_end, masked_end)`:
  which K/V tiles a Q tile reads unmasked and masked.

Shapes: `q: [batch, heads, n_q, head_dim]`, `k, v: [batch, kv_heads, n_kv, head_dim]` with
`heads % kv_heads == 0` (grouped-query attention: query head `h` reads KV head
`h // (heads // kv_heads)`); `o` has q's shape and dtype; `lse: [batch, heads, n_q]` float32,
natural log. Names and conventions follow the NumPy chapter (`inferbook.flash`): `scale`
(default 1/sqrt(head_dim)), `block_q`/`block_k` for the tile sizes, and an lse that is float32
for float16/bfloat16/float32 inputs in both.

Causal masking is aligned bottom-right, as in flash-attn >= 2.1: query `i` sees key `j` iff
`j <= i + n_kv - n_q`. For `n_q == n_kv` this is the usual lower triangle (what PyTorch's
`is_causal=True` means); for a decode step (`n_q = 1`) the query sees the whole cache. A query
row that sees no key at all (causal with `n_q > n_kv`) gets `o = 0` and `lse = -inf`.

Offsets: a program's base offsets (`b * stride_qb`, `h * stride_qh`, the tile's first row and
first key times the row stride) are computed in 64 bits, so tensors past 2**31 elements work;
offsets inside a tile stay 32-bit.

Running without a GPU: set the environment variable `TRITON_INTERPRET=1` *before* this module
is imported (Triton reads it when `@triton.jit` decorates the kernel), then call it with CPU
tensors; the kernel is executed by Triton's NumPy interpreter. The interpreter computes
bfloat16 wrongly (triton-lang/triton issue 11584), so under the interpreter bf16 inputs are
upcast to float32 before the kernel and the output is cast back; on a GPU bf16 runs natively.
On a GPU the default launch is autotuned (`triton.autotune`) over a few configurations that fit
the GPU's shared memory; the interpreter cannot autotune and uses fixed 32 x 32 tiles.

The backward pass is NOT a Triton kernel: it is the recompute-based FlashAttention backward
(Dao et al. 2022) written in PyTorch (`_flash_backward_torch`): from Q, K, V, O,
dO and the saved logsumexp it recomputes P one K/V tile at a time, so it never stores the
N x N matrix either, but it runs at PyTorch speed, not kernel speed.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from . import validate
from .masks import causal_flag, causal_mask
from . import triton_launch as launch

__all__ = ["flash_attention", "flash_forward_kernel", "attention_naive", "kv_tile_schedule", "INTERPRETED", "LOG2E"]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634  # log2(e): the kernel works with exp2, as GPUs have a fast exp2
INTERPRETER_BLOCK = 32          # numpy-sized tiles under the interpreter: fewer Python steps


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
    """Fold K/V tiles [kv_start, kv_end) into the running (acc, m_i, l_i) of a Q tile.

    MASKED=False is the fast path for tiles every row of the Q tile sees completely;
    MASKED=True adds the n_kv bound (the ragged tail) and, if CAUSAL, the causal test
    (the diagonal tiles). m_i is the running row max in log2 units, l_i the running
    row sum, acc the unnormalised output; all float32.
    """
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < HEAD_DIM
    for start_n in range(kv_start, kv_end, BLOCK_N):
        cols = start_n + offs_n
        kv_ok = cols < n_kv
        # first key in 64 bits (n_kv * stride may pass 2**31), then 32-bit offsets
        first = tl.cast(start_n, tl.int64)
        k_tile = k_base + first * stride_kn
        v_tile = v_base + first * stride_vn
        # K tile as [HEAD_DIM, BLOCK_N] (transposed by the pointers), V as [BLOCK_N, D]
        k = tl.load(k_tile + offs_n[None, :] * stride_kn + offs_d[:, None],
                    mask=kv_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_tile + offs_n[:, None] * stride_vn + offs_d[None, :],
                    mask=kv_ok[:, None] & d_ok[None, :], other=0.0)
        s = tl.dot(q, k, input_precision=DOT_PRECISION) * qk_scale  # log2 units
        if MASKED:
            visible = kv_ok[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_offset)
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no visible key yet keeps m = -inf; shift by 0 instead
        # so that exp2(-inf - (-inf)) never produces NaN.
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_shift)     # rescales what was accumulated so far
        p = tl.math.exp2(s - m_shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def flash_forward_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    num_heads, group_size, n_q, n_kv, qk_scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program = one BLOCK_M tile of queries of one (batch, head): writes O, LSE."""
    # -- which tile: axis 0 walks Q tiles, axis 1 walks batch x heads ---------------
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)  # 64-bit: b * stride_qb may pass 2**31
    b = pid_bh // num_heads
    h = pid_bh % num_heads
    kv_h = h // group_size                                # grouped-query attention
    first_m = pid_m.to(tl.int64) * BLOCK_M                # this tile's first query row
    q_base = Q + b * stride_qb + h * stride_qh + first_m * stride_qm
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh

    # -- load the Q tile once; it stays on chip for the whole loop ------------------
    rows = tl.arange(0, BLOCK_M)                    # offsets inside the tile: 32-bit
    offs_m = pid_m * BLOCK_M + rows
    offs_d = tl.arange(0, BLOCK_D)                  # BLOCK_D: power of 2 >= HEAD_DIM
    m_ok = offs_m < n_q
    d_ok = offs_d < HEAD_DIM
    q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    # -- running statistics, float32 ------------------------------------------------
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- which K/V tiles: unmasked ones first, then the diagonal / ragged tail ------
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

    # -- epilogue: normalise once, write O and the logsumexp ------------------------
    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]
    log2_l = tl.math.log2(tl.where(seen, l_i, 1.0))
    lse = tl.where(seen, (m_i + log2_l) * 0.6931471805599453, float("-inf"))
    o_base = O + b * stride_ob + h * stride_oh + first_m * stride_om
    tl.store(o_base + rows[:, None] * stride_om + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    tl.store(LSE + pid_bh * n_q + offs_m, lse, mask=m_ok)


def kv_tile_schedule(pid_m: int, n_q: int, n_kv: int, block_m: int, block_n: int,
                     causal: bool) -> tuple[int, int]:
    """Return (full_end, masked_end): the kernel's K/V range split for Q tile `pid_m`.

    Keys [0, full_end) are visible to every row of the tile (the unmasked loop); keys
    [full_end, masked_end) go through the masked loop (the causal diagonal and the ragged
    tail); keys from masked_end on are never loaded. The same integer arithmetic as
    `flash_forward_kernel`, in Python, for the chapter's figure and for the tests.
    """
    n_q, n_kv = validate.positive_int("n_q", n_q), validate.positive_int("n_kv", n_kv)
    block_m, block_n = validate.positive_int("block_m", block_m), validate.positive_int("block_n", block_n)
    validate.integer("pid_m", pid_m, 0, (n_q - 1) // block_m)
    if causal_flag(causal):
        offset = n_kv - n_q
        full_end = max((pid_m * block_m + offset + 1) // block_n * block_n, 0)
        masked_end = min((pid_m + 1) * block_m + offset, n_kv)
    else:
        full_end, masked_end = n_kv // block_n * block_n, n_kv
    return full_end, masked_end


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------
def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  allowed: tuple = launch.SUPPORTED_DTYPES) -> None:
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
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"k/v batch and head_dim must match q's ({batch}, {head_dim}); "
                         f"got k {tuple(k.shape)}")
    kv_heads = k.shape[1]
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"q heads ({heads}) must be a multiple of k/v heads ({kv_heads})")
    if not launch.MIN_HEAD_DIM <= head_dim <= launch.MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [{launch.MIN_HEAD_DIM}, {launch.MAX_HEAD_DIM}]; "
                         f"got {head_dim}")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError(f"sequence lengths must be >= 1; got n_q={q.shape[2]}, n_kv={k.shape[2]}")



# --------------------------------------------------------------------------------------
# The launch (the choices per GPU are in inferbook.triton_launch)
# --------------------------------------------------------------------------------------
def _autotuned_kernel(capability):
    """Return `flash_forward_kernel` under `triton.autotune` for one GPU generation (cached).

    The configurations are every (BLOCK_M, BLOCK_N, warps, stages) `autotune_configs` may
    return; the pruner keeps those it returns for this head_dim and dtype, so only a few are
    timed, once per (n_q, n_kv, head_dim, causal).
    """
    cc = launch.parse_capability(capability)
    if cc not in _AUTOTUNED:
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                   for bm in (16, 32, 64, 128) for bn in (16, 32, 64, 128, 256)
                   for w in (4, 8) for s in (1, 2, 3, 4)]
        _AUTOTUNED[cc] = triton.autotune(
            configs, key=["n_q", "n_kv", "HEAD_DIM", "CAUSAL"],
            prune_configs_by={"early_config_prune": launch.autotune_pruner(cc)})(flash_forward_kernel)
    return _AUTOTUNED[cc]


_AUTOTUNED: dict = {}


def _launch_forward(q, k, v, causal, scale, block_q, block_k):
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
    if INTERPRETED:
        bm, bn, warps, stages = INTERPRETER_BLOCK, INTERPRETER_BLOCK, 4, 1
    else:
        capability = torch.cuda.get_device_capability(q.device)
        bm, bn, warps, stages = launch.launch_config(head_dim, q.dtype, capability)
    tuned = not INTERPRETED and block_q is None and block_k is None
    bm, bn = block_q or bm, block_k or bn
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
    plan = launch.launch_plan(batch, heads, kv_heads, n_q, bm)
    args = (q, k, v, o, lse, *launch.kernel_strides(q, plan),
            k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
            *launch.kernel_strides(o, plan), plan.heads, plan.group_size, plan.n_q, n_kv,
            scale * LOG2E)
    consts = dict(CAUSAL=causal and not plan.packed,   # one decode row sees the whole cache
                  HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim),
                  DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    if tuned and not plan.packed:
        def grid(meta):
            return triton.cdiv(plan.n_q, meta["BLOCK_M"]), batch * plan.heads
        _autotuned_kernel(capability)[grid](*args, **consts)
    else:
        flash_forward_kernel[plan.grid](*args, BLOCK_M=plan.block_m, BLOCK_N=bn, **consts,
                                         num_warps=warps, num_stages=stages)
    return o.to(out_dtype), lse


# --------------------------------------------------------------------------------------
# Backward (PyTorch, recompute-based) and the autograd wrapper
# --------------------------------------------------------------------------------------
def _flash_backward_torch(q, k, v, o, lse, do, causal, scale, block_n=128):
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
        s = qf @ k_t.transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(~causal_mask(n_q, n_kv, k_start=start, k_end=end, device=q.device),
                                 float("-inf"))
        p = torch.exp(s - lse_safe)
        dv[:, :, start:end] = p.transpose(-1, -2) @ dof
        dp = dof @ v_t.transpose(-1, -2)
        ds = p * (dp - delta)
        dq += ds @ k_t * scale
        dk[:, :, start:end] = ds.transpose(-1, -2) @ qf * scale
    if group > 1:
        dk = dk.view(batch, kv_heads, group, n_kv, head_dim).sum(2)
        dv = dv.view(batch, kv_heads, group, n_kv, head_dim).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: Triton forward, recompute-based PyTorch backward (see module doc)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_q, block_k):
        o, lse = _launch_forward(q, k, v, causal, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _flash_backward_torch(q, k, v, o, lse, do, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (o, lse): softmax(scale * q k^T [causal mask]) v and its row logsumexp.

    q: [batch, heads, n_q, head_dim]; k, v: [batch, kv_heads, n_kv, head_dim]; head_dim in
    [16, 256]; dtype float16, bfloat16 or float32. scale defaults to 1/sqrt(head_dim).
    block_q, block_k (BLOCK_M, BLOCK_N in the kernel) override the tile sizes (powers of two
    >= 16); without them a GPU launch is autotuned. lse is float32. Differentiable in q, k, v.
    """
    _check_inputs(q, k, v)
    causal = causal_flag(causal)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scale = validate.finite_float("scale", scale)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value is not None and (validate.positive_int(name, value) < 16 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    return FlashAttentionFunction.apply(q, k, v, causal, scale, block_q, block_k)


# --------------------------------------------------------------------------------------
# Plain attention in the inputs' precision: the baseline of the error rule
# --------------------------------------------------------------------------------------
def attention_naive(q, k, v, causal=False, scale=None):
    """Return (o, lse) by materialising the full score matrix, in the inputs' dtype.

    The baseline of flash-attention's error rule: the plain computation at the inputs' own
    precision, rounding S and P on the way. (The float64 reference is
    `inferbook.flash.attention_reference`.) Differentiable; fully masked rows give o = 0 and
    lse = -inf, like the kernel; lse is float32.
    """
    _check_inputs(q, k, v)
    causal = causal_flag(causal)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else validate.finite_float("scale", scale)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    n_q, n_kv = q.shape[2], k.shape[2]
    if causal:
        s = s.masked_fill(~causal_mask(n_q, n_kv, device=q.device), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)          # a row of all -inf gives NaN -> 0
    return p @ v, lse
