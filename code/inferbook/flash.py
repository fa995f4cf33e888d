"""FlashAttention in NumPy: the FlashAttention-2 loop order, forward and backward.

Shapes (the same as the Triton chapter's kernel):
    q: [batch, heads, n_q, head_dim]      k: [batch, kv_heads, n_k, head_dim]
    v: [batch, kv_heads, n_k, head_dim_v] o: [batch, heads, n_q, head_dim_v]
    lse: [batch, heads, n_q], the logsumexp of each row of the scaled scores S = scale * q k^T
`heads` must be a multiple of `kv_heads` (grouped-query attention): query head h reads
key/value head h // (heads // kv_heads).

Conventions, chosen to match FlashAttention-2 (>= 2.1) and stated once here:
  * `scale` defaults to 1/sqrt(head_dim).
  * causal=True aligns the mask to the bottom-right corner: query row i sees keys j <= i + n_k - n_q.
    With n_q == n_k this is the usual lower triangle; with n_q < n_k (decoding or chunked prefill
    against a KV cache) the last query sees every key.
  * A row that sees no key at all (causal with n_q > n_k, or n_k == 0) is *fully masked*: its
    output is 0 and its lse is -inf (the logsumexp of an empty sum). The backward gives it zero
    gradients. (FlashAttention-2's CUDA code stores +inf there instead; both make exp(S - lse) = 0.)
  * Tiles are computed in float32 (float64 if any input is float64), whatever the input dtype,
    as GPU kernels do; o is returned in the input dtype, lse in the accumulator dtype: float32
    for float16/float32 inputs, as `inferbook.triton_flash.flash_attention` returns it too.
  * Names shared with the Triton kernel's API: `scale`, `block_q` (its BLOCK_M), `block_k`
    (its BLOCK_N). `attention_reference` with float64 inputs is the book's one float64
    reference; the Triton tests use it too.

`attention_reference` is the plain computation that materialises the n_q x n_k score matrix:
the baseline the tests and the benchmark compare against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import validate
from .masks import causal_flag, causal_mask_numpy
from .softmax import online_update


@dataclass(frozen=True)
class TileState:
    """What the forward loop holds on chip right after processing tile (Q rows, K/V rows).

    m, l: [batch, heads, q_end - q_start]; acc: [batch, heads, q_end - q_start, head_dim_v]
    (the unnormalised output; acc / l is the output so far). p: the tile's exp(S - m_new).
    """

    q_start: int
    q_end: int
    k_start: int
    k_end: int
    m: np.ndarray
    l: np.ndarray
    acc: np.ndarray
    p: np.ndarray


def flash_attention_forward(
    q,
    k,
    v,
    causal: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    scale: float | None = None,
    on_tile: Callable[[TileState], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (o, lse): attention of q over k, v, computed tile by tile without the n_q x n_k matrix.

    Outer loop over Q tiles of `block_q` rows; inner loop over K/V tiles of `block_k` rows; each
    row keeps a running max m, a running sum l and an unnormalised output accumulator. With
    `causal`, K/V tiles entirely above the diagonal are skipped and only tiles that cross it are
    masked. `on_tile`, if given, is called after every tile with a `TileState` (for the chapter's
    tile stepper). Within a tile everything is vectorised over batch, heads and the tile.
    """
    q, k, v, acc_dtype, scale = _check_inputs(q, k, v, scale, block_q, block_k)
    causal = causal_flag(causal)
    if on_tile is not None and not callable(on_tile):
        raise TypeError(f"on_tile must be a function of a TileState or None; got {type(on_tile).__name__}")
    batch, heads, n_q, _ = q.shape
    kv_heads, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads // kv_heads
    offset = n_k - n_q  # causal: row i sees keys j <= i + offset

    # Query head h = kv_head * group + g, so one K/V tile serves a whole group of query heads.
    qg = q.reshape(batch, kv_heads, group, n_q, -1)
    kg, vg = k[:, :, None], v[:, :, None]
    o = np.empty((batch, kv_heads, group, n_q, d_v), dtype=q.dtype)
    lse = np.empty((batch, kv_heads, group, n_q), dtype=acc_dtype)

    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        q_tile = qg[..., qs:qe, :].astype(acc_dtype) * acc_dtype.type(scale)
        m = np.full(q_tile.shape[:-1], -np.inf, dtype=acc_dtype)
        l = np.zeros(q_tile.shape[:-1], dtype=acc_dtype)
        acc = np.zeros((*q_tile.shape[:-1], d_v), dtype=acc_dtype)
        for ks in range(0, n_k, block_k):
            ke = min(ks + block_k, n_k)
            if causal and ks > qe - 1 + offset:
                break  # this tile and every later one lie above the diagonal: skip them
            s = q_tile @ kg[..., ks:ke, :].astype(acc_dtype, copy=False).swapaxes(-1, -2)
            if causal and ke - 1 > qs + offset:  # the tile crosses the diagonal: mask it
                s = np.where(causal_mask_numpy(n_q, n_k, qs, qe, ks, ke), s, -np.inf)
            m, l, alpha, p = online_update(m, l, s)
            acc = alpha[..., None] * acc + p @ vg[..., ks:ke, :].astype(acc_dtype, copy=False)
            if on_tile is not None:
                on_tile(_tile_state(qs, qe, ks, ke, m, l, acc, p, batch, heads))
        seen = l > 0
        o[..., qs:qe, :] = np.where(seen[..., None], acc / np.where(seen, l, 1)[..., None], 0)
        with np.errstate(divide="ignore"):
            lse[..., qs:qe] = np.where(seen, m + np.log(np.where(seen, l, 1)), -np.inf)
    return o.reshape(batch, heads, n_q, d_v), lse.reshape(batch, heads, n_q)


def flash_attention_backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    causal: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (dq, dk, dv), the gradients of sum(o * do), recomputing P tile by tile from lse.

    Nothing of size n_q x n_k is stored: P = exp(S - lse) is rebuilt from q, k and the saved
    lse, and D = rowsum(do * o) replaces the rowsum(P * dP) term of the softmax gradient
    (FlashAttention-2, Algorithm 2). Outer loop over K/V tiles, inner loop over Q tiles; dk and dv
    of a K/V head sum over the query heads of its group. Returned in the input dtypes.
    """
    q, k, v, acc_dtype, scale = _check_inputs(q, k, v, scale, block_q, block_k)
    causal = causal_flag(causal)
    batch, heads, n_q, d = q.shape
    kv_heads, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads // kv_heads
    o, do, lse = np.asarray(o), np.asarray(do), np.asarray(lse)
    if o.shape != (batch, heads, n_q, d_v) or do.shape != o.shape:
        raise ValueError(
            f"o and do must have shape {(batch, heads, n_q, d_v)}, got {o.shape} and {do.shape}"
        )
    if lse.shape != (batch, heads, n_q):
        raise ValueError(f"lse must have shape {(batch, heads, n_q)}, got {lse.shape}")
    offset = n_k - n_q

    qg = q.reshape(batch, kv_heads, group, n_q, d).astype(acc_dtype)
    dog = do.reshape(batch, kv_heads, group, n_q, d_v).astype(acc_dtype)
    # D_i = sum_j P_ij dP_ij = do_i . o_i: one number per row, computed once, O(n) memory.
    delta = np.einsum("bkgnd,bkgnd->bkgn", dog, o.reshape(dog.shape).astype(acc_dtype))
    # A fully masked row has lse = -inf; +inf makes its recomputed P exactly 0.
    lse_g = lse.reshape(batch, kv_heads, group, n_q).astype(acc_dtype)
    lse_g = np.where(np.isneginf(lse_g), np.inf, lse_g)
    dq = np.zeros_like(qg)
    dk = np.zeros((batch, kv_heads, n_k, d), dtype=acc_dtype)
    dv = np.zeros((batch, kv_heads, n_k, d_v), dtype=acc_dtype)

    for ks in range(0, n_k, block_k):
        ke = min(ks + block_k, n_k)
        k_tile = k[:, :, None, ks:ke, :].astype(acc_dtype)
        v_tile = v[:, :, None, ks:ke, :].astype(acc_dtype)
        for qs in range(0, n_q, block_q):
            qe = min(qs + block_q, n_q)
            if causal and ks > qe - 1 + offset:
                continue  # no row of this Q tile sees this K/V tile
            q_tile, do_tile = qg[..., qs:qe, :], dog[..., qs:qe, :]
            s = scale * (q_tile @ k_tile.swapaxes(-1, -2))
            if causal and ke - 1 > qs + offset:
                s = np.where(causal_mask_numpy(n_q, n_k, qs, qe, ks, ke), s, -np.inf)
            p = np.exp(s - lse_g[..., qs:qe, None])  # recomputed, exactly normalised
            dv[:, :, ks:ke] += (p.swapaxes(-1, -2) @ do_tile).sum(axis=2)
            dp = do_tile @ v_tile.swapaxes(-1, -2)
            ds = p * (dp - delta[..., qs:qe, None])
            dq[..., qs:qe, :] += scale * (ds @ k_tile)
            dk[:, :, ks:ke] += scale * (ds.swapaxes(-1, -2) @ q_tile).sum(axis=2)
    return (
        dq.reshape(batch, heads, n_q, d).astype(q.dtype),
        dk.astype(k.dtype),
        dv.astype(v.dtype),
    )


def attention_reference(
    q, k, v, causal: bool = False, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return (o, lse) by the plain computation: S = scale q k^T, P = softmax(S), o = P v.

    It materialises S and P ([batch, heads, n_q, n_k]). Each of S, P and o is rounded to the
    input dtype, with matmuls and the softmax done in float32 (float64 for float64 inputs): what
    PyTorch's unfused attention does on a GPU. With float64 inputs it is the reference.
    Same conventions as `flash_attention_forward` (causal alignment, fully masked rows).
    """
    q, k, v, acc_dtype, scale = _check_inputs(q, k, v, scale, 1, 1)
    causal = causal_flag(causal)
    dtype = q.dtype
    batch, heads, n_q, _ = q.shape
    n_k = k.shape[2]
    group = heads // k.shape[1]
    k = np.repeat(k, group, axis=1).astype(acc_dtype)
    v = np.repeat(v, group, axis=1).astype(acc_dtype)

    def rounded(x):  # store an intermediate in the input precision, as an unfused kernel would
        return x.astype(dtype).astype(acc_dtype, copy=False)

    s = rounded(acc_dtype.type(scale) * (q.astype(acc_dtype) @ k.swapaxes(-1, -2)))
    if causal:
        s = np.where(causal_mask_numpy(n_q, n_k), s, -np.inf)
    m = s.max(axis=-1, initial=-np.inf)
    seen = ~np.isneginf(m)
    e = np.exp(s - np.where(seen, m, 0)[..., None])
    total = e.sum(axis=-1)
    p = rounded(e / np.where(seen, total, 1)[..., None])
    o = (p @ v).astype(dtype)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, m + np.log(np.where(seen, total, 1)), -np.inf)
    return o, lse


def attention_flops(n_q: int, n_k: int, head_dim: int, causal: bool = False, batch_heads: int = 1) -> int:
    """Return the forward matmul FLOPs: 2 matmuls x 2 n_q n_k d (about half of that if causal).

    Tiling changes where the data lives, not how much arithmetic is done: the count is the same
    for the plain and the tiled computation (the tiled one skips masked tiles, the plain one
    could too). Causal counts the visible (query, key) pairs exactly.
    """
    n_q, n_k = validate.non_negative_int("n_q", n_q), validate.non_negative_int("n_k", n_k)
    head_dim = validate.non_negative_int("head_dim", head_dim)
    batch_heads = validate.non_negative_int("batch_heads", batch_heads)
    if causal_flag(causal):
        offset = n_k - n_q
        pairs = sum(min(n_k, max(0, i + offset + 1)) for i in range(n_q))
    else:
        pairs = n_q * n_k
    return 4 * pairs * head_dim * batch_heads


def _tile_state(qs, qe, ks, ke, m, l, acc, p, batch, heads) -> TileState:
    rows = qe - qs
    return TileState(
        qs, qe, ks, ke,
        m.reshape(batch, heads, rows).copy(),
        l.reshape(batch, heads, rows).copy(),
        acc.reshape(batch, heads, rows, -1).copy(),
        p.reshape(batch, heads, rows, ke - ks).copy(),
    )


def _check_inputs(q, k, v, scale, block_q, block_k):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(
                f"{name} must be 4-D [batch, heads, seq, head_dim], got shape {x.shape}"
            )
        if x.dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(f"{name} must be float16, float32 or float64, got {x.dtype}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree on [batch, kv_heads, n_k], got {k.shape} and {v.shape}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must have the same head_dim, got {q.shape[3]} and {k.shape[3]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"heads ({q.shape[1]}) must be a positive multiple of kv_heads ({k.shape[1]})"
        )
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"{name} must be a positive integer, got {block!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3]) if q.shape[3] else 1.0
    elif isinstance(scale, bool) or not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    acc_dtype = np.dtype(np.float64 if np.float64 in (q.dtype, k.dtype, v.dtype) else np.float32)
    return q, k, v, acc_dtype, float(scale)
