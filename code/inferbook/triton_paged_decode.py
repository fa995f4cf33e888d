"""Paged decode attention as a Triton kernel: K/V read through a block table, split-KV, merge.

The kernel a serving engine runs for decode (vLLM's PagedAttention v2, flash-decoding). The
KV cache lives in one pool of fixed-size pages, `k_pool, v_pool: [num_blocks, page, kv_heads,
head_dim]` (the layout `inferbook.paged.PagedKVCache` stores, and vLLM's flash-attention
backend's); sequence b's token t is in page `block_tables[b][t // page]` at offset `t % page`.

- `paged_decode(q, k_pool, v_pool, block_tables, context_lens, num_splits=None, scale=None)`
  -> `(o, lse)`: attention of the last `n_q` positions of each sequence over its whole context
  (causal, bottom-right: query i of n_q sits at position `context_len - n_q + i`).
- `paged_decode_partials(...)` -> `(o_part, lse_part)`: what the kernel writes, one normalised
  output and logsumexp per KV split, before the merge.
- `decode_rows(group, n_q)` -> `BLOCK_M`: the rows of one program's Q tile.

One program = one (KV split, KV head, batch row, Q tile). Its Q tile packs the `group` query
heads that share the KV head times the `n_q` query tokens as rows (flash-attn's GQA packing),
so each K/V page is loaded once per KV head, not once per query head. The program walks the
pages of its split in logical order, loading each page's physical number from the block
table, and keeps the online-softmax state (running max m, sum l, unnormalised output) in
float32. The splits are merged exactly by `inferbook.split_kv.merge_partials`, the book's one
log-sum-exp combine: o = sum_s exp(lse_s - lse) o_s.

Shapes: q `[batch, heads, n_q, head_dim]`, heads a multiple of kv_heads; `block_tables` a list
of per-sequence lists of physical pages (ragged) or an integer tensor `[batch, width]` whose
entries past a sequence's pages are padding (any valid page id; never read); `context_lens`
integers >= n_q. o has q's shape and dtype; lse `[batch, heads, n_q]` float32, natural log.
float16, bfloat16 and float32; head_dim 1..256; any page size >= 1.

Without a GPU set TRITON_INTERPRET=1 before Triton is imported (`inferbook.triton_device`
does) and pass CPU tensors; as in `inferbook.triton_flash`, bf16 is upcast to float32 under
the interpreter (its bf16 is wrong, triton-lang/triton issue 11584).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from . import validate
from .arith import ceil_div
from .roofline import num_kv_splits
from .split_kv import merge_partials
from .triton_launch import next_power_of_2

__all__ = ["paged_decode", "paged_decode_partials", "decode_rows", "paged_decode_kernel",
           "kernel_constants", "SUPPORTED_DTYPES", "MAX_HEAD_DIM", "MAX_ROWS"]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
MAX_ROWS = 64            # rows of one Q tile; more query rows per KV head take more tiles


@triton.jit
def paged_decode_kernel(
    Q, K_POOL, V_POOL, BLOCK_TABLES, CONTEXT_LENS, O_PART, LSE_PART,
    stride_qb, stride_qh, stride_qm,
    stride_kp, stride_kt, stride_kh,
    stride_vp, stride_vt, stride_vh,
    stride_tb,
    stride_ob, stride_oh, stride_om, stride_os,
    stride_lb, stride_lh, stride_lm,
    group_size, n_q, pages_per_split, qk_scale,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program: split `program_id(0)` of KV head `program_id(1)`, sequence / Q tile axis 2."""
    split = tl.program_id(0)
    kv_h = tl.program_id(1)
    n_tiles = tl.cdiv(group_size * n_q, BLOCK_M)
    b = (tl.program_id(2) // n_tiles).to(tl.int64)
    tile = tl.program_id(2) % n_tiles
    context = tl.load(CONTEXT_LENS + b)

    # -- the Q tile: row r is query token r % n_q of the group's query head r // n_q ---------
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < group_size * n_q
    head = (kv_h * group_size + rows // n_q).to(tl.int64)
    qi = rows % n_q
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q = tl.load(Q + b * stride_qb + head[:, None] * stride_qh + qi[:, None] * stride_qm
                + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    q_pos = context - n_q + qi              # a row sees keys j <= q_pos (causal, bottom-right)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- this split's pages, in logical order, each through the block table ---------------
    offs_n = tl.arange(0, BLOCK_N)          # BLOCK_N: the page rounded up to a power of two
    first = split * pages_per_split
    last = tl.minimum(first + pages_per_split, tl.cdiv(context, PAGE))
    k_head = K_POOL + kv_h.to(tl.int64) * stride_kh
    v_head = V_POOL + kv_h.to(tl.int64) * stride_vh
    for logical in range(first, last):
        page = tl.load(BLOCK_TABLES + b * stride_tb + logical).to(tl.int64)
        cols = logical * PAGE + offs_n      # the keys' positions in the sequence
        kv_ok = (offs_n < PAGE) & (cols < context)
        k = tl.load(k_head + page * stride_kp + offs_n[None, :] * stride_kt + offs_d[:, None],
                    mask=kv_ok[None, :] & d_ok[:, None], other=0.0)      # [BLOCK_D, BLOCK_N]
        v = tl.load(v_head + page * stride_vp + offs_n[:, None] * stride_vt + offs_d[None, :],
                    mask=kv_ok[:, None] & d_ok[None, :], other=0.0)      # [BLOCK_N, BLOCK_D]
        s = tl.dot(q, k, input_precision=DOT_PRECISION) * qk_scale       # log2 units
        visible = kv_ok[None, :] & (cols[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)   # no key seen yet: no NaN
        alpha = tl.math.exp2(m_i - m_shift)
        p = tl.math.exp2(s - m_shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_new

    # -- this split's partial result: normalised output and logsumexp (-inf if no key) -------
    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    o_rows = O_PART + b * stride_ob + head * stride_oh + qi * stride_om + split * stride_os
    tl.store(o_rows[:, None] + offs_d[None, :], o, mask=row_ok[:, None] & d_ok[None, :])
    tl.store(LSE_PART + b * stride_lb + head * stride_lh + qi * stride_lm + split, lse,
             mask=row_ok)


def decode_rows(group: int, n_q: int) -> int:
    """Return BLOCK_M: group x n_q query rows per KV head, a power of two in [16, MAX_ROWS]."""
    rows = validate.positive_int("group", group) * validate.positive_int("n_q", n_q)
    return min(max(16, next_power_of_2(rows)), MAX_ROWS)


def kernel_constants(head_dim: int, page: int, group: int, n_q: int, dtype: torch.dtype) -> dict:
    """Return the kernel's constexprs for one shape (what a launch and an AOT compile pass)."""
    return dict(PAGE=page, BLOCK_N=max(16, next_power_of_2(page)), HEAD_DIM=head_dim,
                BLOCK_D=max(16, next_power_of_2(head_dim)), BLOCK_M=decode_rows(group, n_q),
                DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32")


# --------------------------------------------------------------------------------------
# The boundary: every check before anything is launched
# --------------------------------------------------------------------------------------
def _check(q, k_pool, v_pool, block_tables, context_lens, num_splits, scale):
    """Return (tables [batch, width] int32, lens [batch] int32, num_splits, scale) or raise."""
    for name, t in (("q", q), ("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(t, torch.Tensor):
            raise validate.ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(a).removeprefix("torch.") for a in SUPPORTED_DTYPES)
            raise validate.ArgumentTypeError(f"{name}.dtype is {t.dtype}; allowed: {names}")
    if q.dim() != 4 or 0 in q.shape:
        raise ValueError(f"q must be [batch, heads, n_q, head_dim] with every size >= 1, got "
                         f"{tuple(q.shape)}")
    if k_pool.dim() != 4 or k_pool.shape != v_pool.shape or 0 in k_pool.shape:
        raise ValueError(f"k_pool and v_pool must both be [num_blocks, page, kv_heads, head_dim] "
                         f"(sizes >= 1), got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    if not q.dtype == k_pool.dtype == v_pool.dtype:
        raise validate.ArgumentTypeError(f"q, k_pool and v_pool must share a dtype, got {q.dtype}, "
                                         f"{k_pool.dtype}, {v_pool.dtype}")
    if not q.device == k_pool.device == v_pool.device:
        raise ValueError(f"q, k_pool and v_pool must be on one device, got {q.device}, "
                         f"{k_pool.device}, {v_pool.device}")
    if q.device.type == "cpu" and not INTERPRETED:
        raise ValueError("CPU tensors need Triton's interpreter: import inferbook.triton_device "
                         "(or set TRITON_INTERPRET=1) before triton, or pass CUDA tensors")
    batch, heads, n_q, head_dim = q.shape
    num_blocks, page, kv_heads, pool_dim = k_pool.shape
    if pool_dim != head_dim:
        raise ValueError(f"q's head_dim ({head_dim}) must equal the pools' ({pool_dim})")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be <= {MAX_HEAD_DIM}, got {head_dim}")
    if heads % kv_heads:
        raise ValueError(f"q's heads ({heads}) must be a multiple of the pools' kv_heads ({kv_heads})")
    if k_pool.stride(-1) != 1 or v_pool.stride(-1) != 1:
        raise ValueError("k_pool and v_pool must be contiguous in head_dim (stride 1)")
    lens = validate.int_list("context_lens", context_lens, minimum=n_q)
    if len(lens) != batch:
        raise ValueError(f"context_lens must hold one length per sequence ({batch}), got {len(lens)}")
    if isinstance(block_tables, torch.Tensor):
        if block_tables.dim() != 2 or block_tables.shape[0] != batch:
            raise ValueError(f"block_tables must be [batch={batch}, width], got "
                             f"{tuple(block_tables.shape)}")
        if block_tables.dtype.is_floating_point or block_tables.dtype == torch.bool:
            raise validate.ArgumentTypeError(f"block_tables must hold integer page ids, got "
                                             f"dtype {block_tables.dtype}")
        rows = block_tables.detach().cpu().tolist()
    else:
        rows = validate.items("block_tables", block_tables)
        if len(rows) != batch:
            raise ValueError(f"block_tables must hold one table per sequence ({batch}), got {len(rows)}")
    needs = [ceil_div(n, page) for n in lens]
    for b, (row, need) in enumerate(zip(rows, needs)):
        if isinstance(row, torch.Tensor):
            row = row.tolist()
        if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
            raise validate.ArgumentTypeError(f"block_tables[{b}] must be a sequence of page ids, "
                                             f"got {type(row).__name__}")
        if len(row) < need:
            raise ValueError(f"context_lens[{b}] = {lens[b]} needs {need} pages of {page} tokens; "
                             f"block_tables[{b}] has {len(row)}")
        whole = validate.int_list(f"block_tables[{b}]", row, 0, num_blocks - 1)
        validate.block_table(f"block_tables[{b}]", whole[:need], num_blocks)   # distinct pages
        rows[b] = whole
    width = max(needs)
    tables = torch.zeros(batch, width, dtype=torch.int32)
    for b, (row, need) in enumerate(zip(rows, needs)):
        tables[b, :need] = torch.tensor(row[:need], dtype=torch.int32)
    if num_splits is None:
        sms = (torch.cuda.get_device_properties(q.device).multi_processor_count
               if q.device.type == "cuda" else 1)
        num_splits = num_kv_splits(batch, kv_heads, max(lens), sms)
    num_splits = validate.integer("num_splits", num_splits, 1, width)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else validate.finite_float("scale", scale)
    return tables.to(q.device), torch.tensor(lens, dtype=torch.int32, device=q.device), num_splits, scale


def paged_decode_partials(q, k_pool, v_pool, block_tables, context_lens, num_splits=None,
                          scale=None):
    """Return (o_part [batch, heads, n_q, S, d] float32, lse_part [batch, heads, n_q, S]).

    Split s covers pages s·P .. s·P + P − 1 of every sequence (P = ceil(width / num_splits),
    width the most pages any sequence needs); a split past a sequence's context holds o = 0,
    lse = -inf. `num_splits` defaults to `roofline.num_kv_splits` for the GPU's SMs (1 on CPU).
    """
    tables, lens, num_splits, scale = _check(q, k_pool, v_pool, block_tables, context_lens,
                                             num_splits, scale)
    return _launch(q, k_pool, v_pool, tables, lens, num_splits, scale)


def _launch(q, k_pool, v_pool, tables, lens, num_splits, scale):
    batch, heads, n_q, head_dim = q.shape
    page, kv_heads = k_pool.shape[1], k_pool.shape[2]
    if INTERPRETED and q.dtype == torch.bfloat16:
        q, k_pool, v_pool = q.float(), k_pool.float(), v_pool.float()
    q = q if q.stride(-1) == 1 else q.contiguous()
    pages_per_split = ceil_div(tables.shape[1], num_splits)
    num_splits = ceil_div(tables.shape[1], pages_per_split)        # no split left empty for all
    group = heads // kv_heads
    o_part = torch.empty(batch, heads, n_q, num_splits, head_dim, dtype=torch.float32,
                         device=q.device)
    lse_part = torch.empty(batch, heads, n_q, num_splits, dtype=torch.float32, device=q.device)
    consts = kernel_constants(head_dim, page, group, n_q, q.dtype)
    grid = (num_splits, kv_heads, batch * ceil_div(group * n_q, consts["BLOCK_M"]))
    paged_decode_kernel[grid](
        q, k_pool, v_pool, tables, lens, o_part, lse_part,
        q.stride(0), q.stride(1), q.stride(2),
        k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
        v_pool.stride(0), v_pool.stride(1), v_pool.stride(2),
        tables.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        lse_part.stride(0), lse_part.stride(1), lse_part.stride(2),
        group, n_q, pages_per_split, scale * LOG2E, **consts, num_warps=4, num_stages=2)
    return o_part, lse_part


def paged_decode(q, k_pool, v_pool, block_tables, context_lens, num_splits=None, scale=None):
    """Return (o, lse): causal attention of each sequence's last n_q positions through its pages.

    q: [batch, heads, n_q, head_dim]; k_pool, v_pool: [num_blocks, page, kv_heads, head_dim];
    block_tables: per sequence, its physical pages in logical order (lists, or a padded
    [batch, width] integer tensor); context_lens[b] >= n_q tokens. The kernel computes one
    partial result per KV split (`paged_decode_partials`); `split_kv.merge_partials` merges
    them. Bad input raises a ValueError (or `validate.ArgumentTypeError`) before any launch.
    """
    o_part, lse_part = paged_decode_partials(q, k_pool, v_pool, block_tables, context_lens,
                                             num_splits, scale)
    if o_part.shape[3] == 1:
        o, lse = o_part[:, :, :, 0], lse_part[:, :, :, 0]
    else:
        o, lse = merge_partials(o_part.movedim(3, 0), lse_part.movedim(3, 0))
    return o.to(q.dtype), lse
