"""Softmax, three ways, and the lesson's one-query tiled attention.

    naive_softmax      exp(x) / sum(exp(x))                      overflows for logits > ~88 (fp32)
    safe_softmax       subtract the max first: three passes       max, sum of exps, normalise
    online_softmax     running max and rescaled sum: two passes   (max, sum) in one streaming pass
    tiled_softmax_dot  softmax(q K^T) V for one query, one pass over K/V tiles (the lesson's step 2)

Every function works along the last axis. The running state of the online algorithm is the pair
(m, l) = (running max, running sum of exp(x - m)); `online_update` is the one step shared by the
streaming softmax, `tiled_softmax_dot` and FlashAttention (`inferbook.flash`).
"""

from __future__ import annotations

import numpy as np


def _as_float_array(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one axis, got a scalar")
    return x


def naive_softmax(x) -> np.ndarray:
    """Return exp(x) / sum(exp(x)) along the last axis, exactly as written (it overflows)."""
    x = _as_float_array(x, "x")
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def safe_softmax(x) -> np.ndarray:
    """Return softmax along the last axis with the max subtracted: three passes over x."""
    x = _as_float_array(x, "x")
    m = x.max(axis=-1, keepdims=True)  # pass 1: the max
    m = np.where(np.isneginf(m), 0.0, m).astype(x.dtype)  # an all -inf row stays all-zero, not NaN
    e = np.exp(x - m)
    total = e.sum(axis=-1, keepdims=True)  # pass 2: the sum
    return _divide_or_zero(e, total)  # pass 3: normalise


def online_update(m, l, scores):
    """Return (m_new, l_new, alpha, p): one step of the online softmax over a new block of scores.

    m, l: [...] running max and running sum of exp(score - m) of the blocks seen so far
    (m = -inf, l = 0 before the first block). scores: [..., block].
    m_new = max(m, max(scores));  alpha = exp(m - m_new) rescales everything computed with the old
    max; p = exp(scores - m_new);  l_new = alpha * l + sum(p).
    A row whose scores are all -inf so far keeps m = -inf, l = 0 and gets p = 0 (never NaN).
    """
    scores = _as_float_array(scores, "scores")
    _check_running(m, l, scores)
    m_new = np.maximum(m, scores.max(axis=-1))
    # exp(-inf - (-inf)) is NaN; subtracting 0 instead gives exp(-inf) = 0, the right answer.
    m_safe = np.where(np.isneginf(m_new), 0.0, m_new).astype(m_new.dtype)
    alpha = np.exp(m - m_safe)
    p = np.exp(scores - m_safe[..., None])
    l_new = alpha * l + p.sum(axis=-1)
    return m_new, l_new, alpha, p


def _check_running(m, l, scores) -> None:
    """Raise unless (m, l) are running maxima and sums shaped like `scores` without its last axis."""
    for name, v in (("m", m), ("l", l)):
        if isinstance(v, bool) or np.asarray(v).dtype.kind not in "fiu":
            raise ValueError(f"{name} must hold real numbers, got {v!r}"[:200])
    m_arr, l_arr = np.asarray(m, dtype=np.float64), np.asarray(l, dtype=np.float64)
    if np.isnan(m_arr).any() or np.isposinf(m_arr).any():
        raise ValueError("m must hold running maxima: -inf or finite numbers, not NaN or +inf")
    if not (np.isfinite(l_arr).all() and (l_arr >= 0).all()):
        raise ValueError("l must hold running sums: finite numbers ≥ 0")
    if scores.shape[-1] == 0:
        raise ValueError("scores must hold at least one score per row (a block of size ≥ 1)")
    for name, v in (("m", m_arr), ("l", l_arr)):
        if v.ndim and v.shape != scores.shape[:-1]:
            raise ValueError(f"{name} must have the shape of scores without its last axis "
                             f"{scores.shape[:-1]} (or be a scalar), got {v.shape}")


def online_softmax(x, block: int = 4) -> np.ndarray:
    """Return softmax along the last axis in two passes: a streaming (max, sum) pass, then normalise.

    Pass 1 visits x in blocks of `block` elements and keeps only the running (m, l) per row.
    """
    x = _as_float_array(x, "x")
    _check_tile(block, "block")
    m = np.full(x.shape[:-1], -np.inf, dtype=x.dtype)
    l = np.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block):
        m, l, _, _ = online_update(m, l, x[..., start : start + block])
    m_safe = np.where(np.isneginf(m), 0.0, m).astype(x.dtype)
    return _divide_or_zero(np.exp(x - m_safe[..., None]), l[..., None])


def tiled_softmax_dot(q, K, V, tile: int = 4) -> np.ndarray:
    """Return softmax(K q) V for one query, visiting K and V once, `tile` rows at a time.

    q: [d], K: [n, d], V: [n, d_v] -> [d_v]. Like the lesson's version there is no 1/sqrt(d):
    scale q first if you want it. The working set is one tile of K and V plus the running
    (m, l) and an unnormalised output accumulator of d_v numbers. Accumulates in float64 (or the
    input dtype if wider); the result is not bit-identical to the one-shot formula (see chapter 3).
    """
    q = _as_float_array(q, "q")
    K = _as_float_array(K, "K")
    V = _as_float_array(V, "V")
    if q.ndim != 1 or K.ndim != 2 or V.ndim != 2:
        raise ValueError(
            f"expected q: [d], K: [n, d], V: [n, d_v]; got shapes {q.shape}, {K.shape}, {V.shape}"
        )
    if K.shape[1] != q.shape[0] or K.shape[0] != V.shape[0] or K.shape[0] == 0:
        raise ValueError(
            f"shapes do not match: q {q.shape}, K {K.shape}, V {V.shape} "
            "(need K.shape[1] == len(q), len(K) == len(V) >= 1)"
        )
    _check_tile(tile, "tile")
    acc_dtype = np.promote_types(np.result_type(q, K, V), np.float64)
    q, K, V = q.astype(acc_dtype), K.astype(acc_dtype), V.astype(acc_dtype)
    m = np.array(-np.inf, dtype=acc_dtype)
    l = np.array(0.0, dtype=acc_dtype)
    out = np.zeros(V.shape[1], dtype=acc_dtype)
    for start in range(0, K.shape[0], tile):
        scores = K[start : start + tile] @ q
        m, l, alpha, p = online_update(m, l, scores)
        out = alpha * out + p @ V[start : start + tile]
    return out / l


def _divide_or_zero(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    # A row with nothing to normalise (sum 0) is defined as all zeros rather than 0/0 = NaN.
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0).astype(num.dtype)


def _check_tile(tile, name: str) -> None:
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"{name} must be a positive integer, got {tile!r}")


P_CAST_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn")


def _cast_inputs(dtype, score_std, n_keys, head_dim, rows, seed):
    """Return (P, V, row sums, O in float64) for `p_cast_error` and `o_cast_error`."""
    if dtype not in P_CAST_DTYPES:
        raise ValueError(f"dtype must be one of {P_CAST_DTYPES}, got {dtype!r}")
    if isinstance(score_std, bool) or not np.isfinite(score_std) or not score_std > 0:
        raise ValueError(f"score_std must be a positive finite number, got {score_std!r}")
    for name, value in (("n_keys", n_keys), ("head_dim", head_dim), ("rows", rows)):
        _check_tile(value, name)
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, score_std, size=(rows, n_keys))
    v = rng.normal(size=(n_keys, head_dim))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    l = p.sum(axis=1, keepdims=True)
    return p, v, l, p @ v / l


def _round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Return float64 `x` rounded to `dtype` (torch's rounding) and back to float64."""
    import torch

    return torch.from_numpy(x).to(getattr(torch, dtype)).to(torch.float64).numpy()


def p_cast_error(dtype: str, score_std: float, n_keys: int = 1024, head_dim: int = 64,
                 rows: int = 64, seed: int = 0) -> float:
    """Return the relative error that rounding P to `dtype` before P V adds to attention.

    FlashAttention keeps the scores, the running max and sum in float32 but casts the tile's
    unnormalised probabilities P = exp(S - m) (values in (0, 1]) to the input dtype before the
    second matmul. This isolates that one rounding: scores ~ N(0, score_std) (the logits after
    the 1/sqrt(d) scale), values ~ N(0, 1); the reference is float64 throughout, the tested
    output rounds P to `dtype` and does everything else in float64 (the row sum from the
    unrounded P, as the kernel does). Returns ||O - O_ref||_F / ||O_ref||_F. Needs torch (for
    bfloat16 and float8 rounding on the CPU).
    """
    p, v, l, ref = _cast_inputs(dtype, score_std, n_keys, head_dim, rows, seed)
    out = _round_to(p, dtype) @ v / l
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def o_cast_error(dtype: str, score_std: float, n_keys: int = 1024, head_dim: int = 64,
                 rows: int = 64, seed: int = 0) -> float:
    """Return the relative error of rounding the exact output O once to `dtype`, on the same
    inputs as `p_cast_error` (same arguments, same seed): the yardstick P's rounding is compared
    with, since every kernel stores O in its input dtype anyway. ||round(O) - O||_F / ||O||_F."""
    _, _, _, ref = _cast_inputs(dtype, score_std, n_keys, head_dim, rows, seed)
    return float(np.linalg.norm(_round_to(ref, dtype) - ref) / np.linalg.norm(ref))
