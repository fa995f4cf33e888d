"""FlashAttention-2 forward as a Triton kernel, its launch choices, and split-KV decoding.

Returns of the public functions:

- `flash_attention(q, k, v, causal, scale)` -> `(o, lse)`: the Triton forward (FlashAttention-2
  work split, Dao 2023), differentiable in `q`, `k`, `v`.
- `launch_config(head_dim, dtype, capability)` -> `(BLOCK_M, BLOCK_N, num_warps, num_stages)`:
  the untuned launch for one GPU generation, sized to its per-block shared memory.
- `smem_limit_bytes(capability)` -> the per-block shared-memory limit, from `inferbook.hardware`.
- `launch_plan(batch, heads, kv_heads, n_q, block_m)` -> how the kernel's grid covers the work
  (with a GQA group's decode queries packed into one Q tile).
- `compile_forward(...)` -> the kernel compiled ahead of time for a GPU that need not be present.
- `attention_naive(q, k, v, causal)` -> `(o, lse)`: the plain computation in the inputs' dtype
  (the baseline of flash-attention's error rule). The float64 reference is
  `inferbook.flash.attention_reference`, the one reference of the book.
- `split_kv_attention(q, k, v, num_splits)` -> `(o, lse)`: decoding attention split along the
  KV cache ("flash-decoding", Dao et al. 2023), in PyTorch.
- `merge_partials(outputs, lses)` -> `(o, lse)`: the exact merge of partial attention results.
- `FLASH_ATTENTION_VERSIONS`, `flash_versions_for`: re-exported from
  `inferbook.attention_backends` (which imports without Triton).

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

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from . import validate
from .attention_backends import FLASH_ATTENTION_VERSIONS, FlashAttentionVersion, flash_versions_for
from .hardware import GPUS

__all__ = [
    "FLASH_ATTENTION_VERSIONS", "FlashAttentionVersion", "flash_versions_for",
    "flash_attention", "launch_config", "smem_limit_bytes", "launch_plan", "compile_forward",
    "compile_forwards", "CompiledForward",
    "attention_naive", "split_kv_attention", "merge_partials", "kv_tile_schedule",
    "benchmark_flops", "load_benchmark_results", "benchmark_label", "plot_benchmark_results",
]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634  # log2(e): the kernel works with exp2, as GPUs have a fast exp2
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
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
# Input checks
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
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
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


# --------------------------------------------------------------------------------------
# Launch choices per GPU generation
# --------------------------------------------------------------------------------------
def _smem_limits() -> dict[tuple[int, int], int]:
    """Return {compute capability: per-block shared-memory limit}, from the GPU presets."""
    limits: dict[tuple[int, int], int] = {}
    for g in GPUS.values():
        if g.smem_bytes_per_block is not None:
            cc = g.compute_capability
            limits[cc] = min(limits.get(cc, g.smem_bytes_per_block), g.smem_bytes_per_block)
    return limits


SMEM_BYTES_PER_BLOCK: dict[tuple[int, int], int] = _smem_limits()

# (BLOCK_M, BLOCK_N, num_warps, num_stages) for 2-byte inputs, per architecture and BLOCK_D
# (head_dim rounded up to a power of two). Each fits its architecture's per-block shared
# memory with no register spills: tests/test_triton_aot.py compiles every entry ahead of time
# with Triton's own ptxas and checks both. Larger tiles where there is more shared memory;
# fewer rows (BLOCK_M) or keys (BLOCK_N) as head_dim grows, so that the float32 accumulator
# (BLOCK_M x BLOCK_D) and the scores (BLOCK_M x BLOCK_N) stay in registers. On sm75 Triton
# (3.9) lowers tl.dot to FMA instructions, not tensor cores, with float32 operands in
# registers: hence the T4's small tiles and 8 warps.
_LAUNCH_TABLE: dict[tuple[int, int], dict[int, tuple[int, int, int, int]]] = {
    (7, 5): {16: (64, 64, 8, 2), 32: (64, 32, 8, 2), 64: (64, 32, 8, 2),
             128: (32, 32, 8, 2), 256: (32, 16, 8, 2)},
    (8, 0): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
    (8, 6): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 32, 8, 3), 256: (64, 32, 8, 2)},
    (8, 9): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 32, 8, 3), 256: (64, 32, 8, 2)},
    (9, 0): {16: (128, 128, 8, 3), 32: (128, 128, 8, 3), 64: (128, 128, 8, 3),
             128: (128, 64, 8, 3), 256: (64, 32, 8, 2)},
    (10, 0): {16: (128, 128, 8, 3), 32: (128, 128, 8, 3), 64: (128, 128, 8, 3),
              128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
}
TUNED_CAPABILITIES = tuple(_LAUNCH_TABLE)


def _capability(capability) -> tuple[int, int]:
    """Return (major, minor) from (8, 0), 80 or "sm80"; ValueError otherwise."""
    if isinstance(capability, str) and capability.startswith("sm") and capability[2:].isdigit():
        capability = int(capability[2:])
    if isinstance(capability, int) and not isinstance(capability, bool) and capability > 0:
        return divmod(capability, 10)
    if (isinstance(capability, tuple) and len(capability) == 2
            and all(isinstance(x, int) for x in capability)):
        return capability
    raise ValueError(f"capability must be (major, minor), e.g. (8, 0), or 80 / 'sm80'; "
                     f"got {capability!r}")


def _tuned_for(capability) -> tuple[int, int]:
    """Return the tuned architecture used for `capability`.

    A capability in the table is itself; another of the same major generation uses the
    nearest one below it (sm87 -> sm86); anything else from sm75 on uses the T4's choices,
    the most frugal ones.
    """
    cc = _capability(capability)
    if cc < (7, 5):
        raise ValueError(f"the kernel needs compute capability 7.5 or newer; got {cc}")
    same_major = [t for t in TUNED_CAPABILITIES if t[0] == cc[0] and t <= cc]
    return max(same_major) if same_major else (7, 5)


def smem_limit_bytes(capability) -> int:
    """Return the largest shared memory one thread block may use on this GPU generation.

    From `inferbook.hardware` (the smallest limit among the presets of that capability); a
    capability without a preset takes the limit of the architecture `launch_config` uses for it.
    """
    cc = _capability(capability)
    return SMEM_BYTES_PER_BLOCK.get(cc) or SMEM_BYTES_PER_BLOCK[_tuned_for(cc)]


def _element_bytes(dtype: torch.dtype) -> int:
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(a).removeprefix("torch.") for a in SUPPORTED_DTYPES)
        raise ValueError(f"dtype is {dtype}; allowed: {names}")
    return torch.empty((), dtype=dtype).element_size()


def launch_config(head_dim: int, dtype: torch.dtype,
                  capability) -> tuple[int, int, int, int]:
    """Return (BLOCK_M, BLOCK_N, num_warps, num_stages): the untuned launch for this GPU.

    capability: (major, minor) as `torch.cuda.get_device_capability()` gives it (or 80, "sm80").
    Per-architecture choices for sm75 (T4), sm80 (A100), sm86 (A10, RTX 30), sm89 (L4,
    RTX 40), sm90 (H100, H200) and sm100 (B200); each fits `smem_limit_bytes(capability)`.
    float32 inputs take half the rows (and fewer keys where needed). bfloat16 needs sm80 or
    newer (a T4 has no bf16 tensor cores): ValueError below that.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not (
            MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM):
        raise ValueError(f"head_dim must be an int in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]; "
                         f"got {head_dim!r}")
    wide = _element_bytes(dtype) // 2          # 2 for float32: twice the bytes per element
    arch = _tuned_for(capability)
    if dtype == torch.bfloat16 and _capability(capability) < (8, 0):
        raise ValueError(f"bfloat16 needs compute capability 8.0 or newer; got "
                         f"{_capability(capability)} (use float16 on a T4)")
    block_m, block_n, warps, stages = _LAUNCH_TABLE[arch][triton.next_power_of_2(head_dim)]
    block_m = max(block_m // wide, 16)
    limit = smem_limit_bytes(capability)
    while smem_estimate_bytes(head_dim, dtype, block_m, block_n, warps, stages) > limit:
        if block_n > 16:
            block_n //= 2                 # float32 tiles: twice the bytes, half the keys
        elif stages > 1:
            stages -= 1
        else:
            break
    return block_m, block_n, warps, stages


def autotune_configs(head_dim: int, dtype: torch.dtype,
                     capability) -> list[tuple[int, int, int, int]]:
    """Return the (BLOCK_M, BLOCK_N, num_warps, num_stages) the GPU autotuner tries.

    `launch_config`'s choice first, then neighbours (half or double the K/V tile, one more or
    one fewer pipeline stage, the other warp count), kept only if their shared memory, by
    `smem_estimate_bytes`, fits `smem_limit_bytes(capability)`.
    """
    bm, bn, warps, stages = launch_config(head_dim, dtype, capability)
    candidates = [(bm, bn, warps, stages), (bm, bn * 2, warps, stages),
                  (bm, bn // 2, warps, stages), (bm, bn, warps, stages + 1),
                  (bm, bn, warps, max(stages - 1, 1)), (bm, bn, 12 - warps, stages),
                  (bm // 2, bn, 4, stages)]
    limit = smem_limit_bytes(capability)
    out = []
    for c in candidates:
        if c not in out and c[0] >= 16 and c[1] >= 16 and smem_estimate_bytes(
                head_dim, dtype, *c) <= limit:
            out.append(c)
    return out


def smem_estimate_bytes(head_dim: int, dtype: torch.dtype, block_m: int, block_n: int,
                        num_warps: int, num_stages: int) -> int:
    """Return an upper estimate of the kernel's shared memory for one launch configuration.

    Tensor-core code (sm80+) keeps K and V tiles, BLOCK_N x BLOCK_D each, for every pipeline
    stage and a Q tile in shared memory, plus up to 2 KiB of barriers. FMA code (sm75)
    stages the float32 operands of one matmul at a time: (BLOCK_M + BLOCK_N) x BLOCK_D for
    the first, BLOCK_M x BLOCK_N plus max(BLOCK_M, BLOCK_N) x BLOCK_D for the second. The
    estimate is the larger of the two; `tests/test_triton_aot.py` checks that it is never
    below what the compiler reports.
    """
    d = triton.next_power_of_2(head_dim)
    e = _element_bytes(dtype)
    tensor_cores = e * (2 * max(num_stages, 1) * block_n * d + block_m * d) + 2048
    fma = 4 * max((block_m + block_n) * d, block_m * block_n + max(block_m, block_n) * d)
    return max(tensor_cores, fma)


@dataclass(frozen=True)
class LaunchPlan:
    """How the kernel's grid covers one call: a view of q/o for the kernel, and the grid.

    `packed` is True for a decode step (n_q = 1) with grouped-query attention: the `group`
    query heads that share a KV head become the rows of one Q tile (flash-attn's
    seqlen/ngroups swap), so each K/V tile is read once per KV head instead of once per query
    head. Then the kernel sees `heads = kv_heads`, `n_q = group`, `group_size = 1`, and
    strides that walk q's heads as if they were rows: no copy.
    """

    heads: int          # heads as the kernel sees them
    group_size: int     # query heads per KV head, as the kernel sees them
    n_q: int            # query rows per (batch, head), as the kernel sees them
    block_m: int
    grid: tuple[int, int]
    packed: bool


def launch_plan(batch: int, heads: int, kv_heads: int, n_q: int, block_m: int) -> LaunchPlan:
    """Return the LaunchPlan: grid (cdiv(n_q, BLOCK_M), batch x heads), or packed for decode.

    Packing applies when n_q == 1 and heads > kv_heads; the Q tile then holds the group's
    rows, BLOCK_M = max(16, next power of two >= group) but no more than `block_m`, and the
    grid is (cdiv(group, BLOCK_M), batch x kv_heads).
    """
    group = heads // kv_heads
    if n_q == 1 and group > 1:
        bm = min(block_m, max(16, triton.next_power_of_2(group)))
        return LaunchPlan(kv_heads, 1, group, bm, (triton.cdiv(group, bm), batch * kv_heads),
                          True)
    return LaunchPlan(heads, group, n_q, block_m, (triton.cdiv(n_q, block_m), batch * heads),
                      False)


def _kernel_strides(t: torch.Tensor, plan: LaunchPlan) -> tuple[int, int, int]:
    """Return (batch, head, row) strides of q or o as the kernel walks them under `plan`."""
    if plan.packed:   # rows are the group's heads; a "head" is a whole group
        return t.stride(0), plan.n_q * t.stride(1), t.stride(1)
    return t.stride(0), t.stride(1), t.stride(2)


def _signature(dtype: torch.dtype) -> dict[str, str]:
    """Return the kernel's argument types for `triton.compile`, as a launch specialises them."""
    ptr = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}[dtype]
    sig = {name: ptr for name in ("Q", "K", "V", "O")}
    sig["LSE"] = "*fp32"
    for t in "qkvo":
        for axis in ("b", "h", "m" if t in "qo" else "n"):
            sig[f"stride_{t}{axis}"] = "i32"
    sig.update(num_heads="i32", group_size="i32", n_q="i32", n_kv="i32", qk_scale="fp32")
    for name in ("CAUSAL", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "BLOCK_D", "DOT_PRECISION"):
        sig[name] = "constexpr"
    return sig


@dataclass(frozen=True)
class CompiledForward:
    """The forward kernel compiled ahead of time for one target and configuration."""

    head_dim: int
    dtype: torch.dtype
    capability: tuple[int, int]
    causal: bool
    config: tuple[int, int, int, int]   # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    shared_bytes: int                   # the launch's shared memory, as Triton requests it
    ptx: str
    cubin: bytes


def compile_forward(head_dim: int, dtype: torch.dtype, capability, causal: bool,
                    config: tuple[int, int, int, int] | None = None) -> CompiledForward:
    """Return the forward kernel compiled ahead of time for `capability` (no GPU needed).

    Uses Triton's compiler and its own ptxas; `config` defaults to `launch_config`'s choice.
    Pointers and strides are marked 16-divisible, as a launch on contiguous tensors with
    head_dim a multiple of 16 specialises them, so the code is what a real launch would run.
    """
    return compile_forwards([(head_dim, dtype, capability, causal, config)])[0]


def compile_forwards(requests) -> list[CompiledForward]:
    """Return `compile_forward(*r)` for each request tuple, in order.

    Under the interpreter (TRITON_INTERPRET=1) Triton cannot compile in this process, so the
    batch is compiled by one Python subprocess without the variable. Triton caches each
    compiled kernel by source hash (~/.triton/cache): an unchanged kernel compiles once.
    """
    requests = [(hd, dt, _capability(cc), bool(causal), tuple(cfg) if cfg else None)
                for hd, dt, cc, causal, cfg in requests]
    if not INTERPRETED:
        return [_compile_one(*r) for r in requests]
    import pickle
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_parent, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "requests.pkl"), Path(tmp, "results.pkl")
        src.write_bytes(pickle.dumps(requests))
        code = ("import pickle, sys; from inferbook import triton_flash as tf; "
                "reqs = pickle.load(open(sys.argv[1], 'rb')); "
                "pickle.dump(tf.compile_forwards(reqs), open(sys.argv[2], 'wb'))")
        run = subprocess.run([sys.executable, "-c", code, str(src), str(dst)], env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"ahead-of-time compile failed:\n{run.stderr[-3000:]}")
        return pickle.loads(dst.read_bytes())


def _compile_one(head_dim, dtype, cc, causal, config) -> CompiledForward:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    config = config or launch_config(head_dim, dtype, cc)
    bm, bn, warps, stages = config
    sig = _signature(dtype)
    names = list(sig)
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names
               if n in ("Q", "K", "V", "O", "LSE") or n.startswith("stride")}
    constexprs = dict(CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=head_dim,
                      BLOCK_D=triton.next_power_of_2(head_dim),
                      DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32")
    src = ASTSource(fn=_flash_forward_kernel, signature=sig, constexprs=constexprs,
                    attrs=aligned)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc[0] * 10 + cc[1], 32),
                            options=dict(num_warps=warps, num_stages=stages))
    return CompiledForward(head_dim, dtype, cc, causal, config, kernel.metadata.shared,
                           kernel.asm["ptx"], kernel.asm["cubin"])


def _autotune_pruner(capability):
    """Return triton.autotune's early_config_prune: keep `autotune_configs`' choices only."""
    def prune(configs, named_args, **kwargs):
        head_dim = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        allowed = set(autotune_configs(head_dim, named_args["Q"].dtype, capability))
        kept = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                       c.num_stages) in allowed]
        return kept or configs[:1]
    return prune


def _autotuned_kernel(capability):
    """Return `_flash_forward_kernel` under `triton.autotune` for one GPU generation (cached).

    The configurations are every (BLOCK_M, BLOCK_N, warps, stages) `autotune_configs` may
    return; the pruner keeps those it returns for this head_dim and dtype, so only a few are
    timed, once per (n_q, n_kv, head_dim, causal).
    """
    cc = _capability(capability)
    if cc not in _AUTOTUNED:
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                   for bm in (16, 32, 64, 128) for bn in (16, 32, 64, 128, 256)
                   for w in (4, 8) for s in (1, 2, 3, 4)]
        _AUTOTUNED[cc] = triton.autotune(
            configs, key=["n_q", "n_kv", "HEAD_DIM", "CAUSAL"],
            prune_configs_by={"early_config_prune": _autotune_pruner(cc)})(_flash_forward_kernel)
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
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value is not None and (value < 16 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    out_dtype = q.dtype
    if INTERPRETED and q.dtype == torch.bfloat16:
        q, k, v = q.float(), k.float(), v.float()       # the interpreter's bf16 is wrong
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if INTERPRETED:
        bm, bn, warps, stages = INTERPRETER_BLOCK, INTERPRETER_BLOCK, 4, 1
    else:
        capability = torch.cuda.get_device_capability(q.device)
        bm, bn, warps, stages = launch_config(head_dim, q.dtype, capability)
    tuned = not INTERPRETED and block_q is None and block_k is None
    bm, bn = block_q or bm, block_k or bn
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
    plan = launch_plan(batch, heads, kv_heads, n_q, bm)
    args = (q, k, v, o, lse, *_kernel_strides(q, plan),
            k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
            *_kernel_strides(o, plan), plan.heads, plan.group_size, plan.n_q, n_kv,
            scale * LOG2E)
    consts = dict(CAUSAL=causal and not plan.packed,   # one decode row sees the whole cache
                  HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim),
                  DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    if tuned and not plan.packed:
        def grid(meta):
            return triton.cdiv(plan.n_q, meta["BLOCK_M"]), batch * plan.heads
        _autotuned_kernel(capability)[grid](*args, **consts)
    else:
        _flash_forward_kernel[plan.grid](*args, BLOCK_M=plan.block_m, BLOCK_N=bn, **consts,
                                         num_warps=warps, num_stages=stages)
    return o.to(out_dtype), lse


# --------------------------------------------------------------------------------------
# Backward (PyTorch, recompute-based) and the autograd wrapper
# --------------------------------------------------------------------------------------
def _causal_visible(n_q: int, n_kv: int, kv_start: int, kv_end: int, device) -> torch.Tensor:
    """Return the [n_q, kv_end - kv_start] bool mask of keys each query sees (bottom-right)."""
    rows = torch.arange(n_q, device=device)[:, None] + (n_kv - n_q)
    cols = torch.arange(kv_start, kv_end, device=device)[None, :]
    return cols <= rows


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
            s = s.masked_fill(~_causal_visible(n_q, n_kv, start, end, q.device), float("-inf"))
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
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scale = validate.finite_float("scale", scale)
    return FlashAttentionFunction.apply(q, k, v, bool(causal), scale, block_q, block_k)


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
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    n_q, n_kv = q.shape[2], k.shape[2]
    if causal:
        s = s.masked_fill(~_causal_visible(n_q, n_kv, 0, n_kv, q.device), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)          # a row of all -inf gives NaN -> 0
    return p @ v, lse


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


def split_kv_attention(q, k, v, num_splits: int, scale=None):
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
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
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
