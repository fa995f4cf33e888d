"""FP8 (e4m3) attention with its scales: what the format does to P, Q, K, V, and how FA3 copes.

e4m3 (`torch.float8_e4m3fn`) has 4 exponent bits (bias 7), 3 mantissa bits and a largest
finite value of 448. Attention in FP8 rounds three kinds of values:

* P = exp(S − m) in (0, 1]: no scale is needed for the top, but the bottom is coarse. The
  smallest subnormal is 2^(1 − bias − mantissa bits) = 2^−9; anything at most half of it rounds
  to zero (a tie rounds to the even neighbour, 0), so probabilities ≤ 2^−10 of the row's largest
  flush. `e4m3_limits()` computes these from the format's parameters.
* Q, K, V: real activations leave e4m3's range, so each is stored as x ≈ scale · x_8 with
  scale = amax / 448. One scale per tensor lets one outlier coarsen every value; FlashAttention-3
  quantizes per block (one scale per tile of rows) {Shah et al. 2024}.
* Outlier *features* (a few channels much larger than the rest, as in real LLM activations) are
  shared by every row, so per-row or per-block scales cannot isolate them. FA3's incoherent
  processing multiplies Q and K by one random orthogonal matrix M (a Hadamard transform with
  random signs, O(d log d)): (QM)(KM)^T = QK^T exactly, but the rotation spreads each outlier
  over all channels before quantization.

- `e4m3_limits()` -> dict of the format's max, smallest normal and subnormal, flush threshold.
- `quantize(x, block_rows=None)` -> the e4m3 round trip of x with per-tensor (None) or per-block
  scales, as float64.
- `random_hadamard(d, seed)` -> a d×d orthogonal matrix: normalised Hadamard times random signs.
- `fp8_attention(q, k, v, block_rows=None, rotate=False, seed=0)` -> attention with Q, K, V and
  P in e4m3 (everything else in float64): the quantization error alone.
- `attention_inputs(n, d, outlier_channels, outlier_scale, seed)` -> (q, k, v) float64.

Arrays are NumPy, `[n, d]` for one head. Needs torch for the e4m3 rounding (works on the CPU).
"""

from __future__ import annotations

import numpy as np

from . import validate

__all__ = ["e4m3_limits", "quantize", "random_hadamard", "fp8_attention", "attention_inputs",
           "E4M3_MAX"]

EXPONENT_BITS, MANTISSA_BITS, BIAS = 4, 3, 7
E4M3_MAX = 448.0  # e4m3fn: exponent 1111 with mantissa 111 is NaN, so 1.75 · 2^8


def e4m3_limits() -> dict[str, float]:
    """Return e4m3's max, smallest normal, smallest subnormal and flush-to-zero threshold."""
    smallest_normal = 2.0 ** (1 - BIAS)
    smallest_subnormal = 2.0 ** (1 - BIAS - MANTISSA_BITS)
    return dict(max=E4M3_MAX, smallest_normal=smallest_normal,
                smallest_subnormal=smallest_subnormal,
                flush_at_or_below=smallest_subnormal / 2)   # ties to even: to 0


def _e4m3(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float8_e4m3fn).to(
        torch.float64).numpy()


def quantize(x, block_rows: int | None = None) -> np.ndarray:
    """Return x rounded through e4m3 with scale = amax / 448 per tensor or per block of rows."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"x must be a non-empty [rows, d] array, got shape {x.shape}")
    if block_rows is None:
        block_rows = x.shape[0]
    block_rows = validate.positive_int("block_rows", block_rows)
    out = np.empty_like(x)
    for start in range(0, x.shape[0], block_rows):
        tile = x[start:start + block_rows]
        amax = np.abs(tile).max()
        scale = amax / E4M3_MAX if amax > 0 else 1.0
        out[start:start + block_rows] = _e4m3(tile / scale) * scale
    return out


def random_hadamard(d: int, seed: int = 0) -> np.ndarray:
    """Return H·diag(signs)/sqrt(d): orthogonal, d a power of two (Sylvester's construction)."""
    d = validate.positive_int("d", d)
    if d & (d - 1):
        raise ValueError(f"d must be a power of two for a Hadamard matrix, got {d}")
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=d)
    return h * signs[None, :] / np.sqrt(d)


def _softmax_pv(s, v, p_round):
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=1, keepdims=True)       # the row sum from the unrounded P, as kernels do
    return (p_round(p) @ v) / l


def fp8_attention(q, k, v, block_rows: int | None = None, rotate: bool = False,
                  seed: int = 0) -> np.ndarray:
    """Return softmax(q k^T / sqrt(d)) v with Q, K, V and P rounded to e4m3 (float64 otherwise).

    block_rows: None = one scale per tensor, else one per block of that many rows (FA3: the
    tile). rotate: multiply q and k by `random_hadamard(d, seed)` first (incoherent processing).
    """
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    if q.ndim != 2 or k.shape != v.shape or k.ndim != 2 or q.shape[1] != k.shape[1]:
        raise ValueError(f"q [n_q, d], k and v [n_k, d] with one d; got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    validate.flag("rotate", rotate)
    if rotate:
        m = random_hadamard(q.shape[1], seed)
        q, k = q @ m, k @ m
    qq, kq, vq = (quantize(t, block_rows) for t in (q, k, v))
    s = qq @ kq.T / np.sqrt(q.shape[1])
    return _softmax_pv(s, vq, _e4m3)


def attention_inputs(n: int, d: int, outliers: str = "none", seed: int = 0):
    """Return (q, k, v) [n, d] float64, standard normal, with outliers of one of two kinds.

    "entries": 0.1 % of the entries of q, k and v drawn from N(0, 10^2) instead (FA3's test);
    "channels": two of k's channels 8× larger in every row (outlier features, as in LLMs' keys);
    "none": plain Gaussian (this chapter's inputs).
    """
    n, d = validate.positive_int("n", n), validate.positive_int("d", d)
    validate.one_of("outliers", outliers, ("none", "entries", "channels"))
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(n, d)) for _ in range(3))
    if outliers == "entries":
        for t in (q, k, v):
            hit = rng.random(t.shape) < 1e-3
            t[hit] = rng.normal(0.0, 10.0, size=hit.sum())
    elif outliers == "channels":
        k[:, rng.choice(d, size=2, replace=False)] *= 8.0
    return q, k, v
