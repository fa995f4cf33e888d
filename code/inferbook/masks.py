"""The causal attention mask, once: which keys each query sees.

Causal masking is aligned bottom-right (flash-attn >= 2.1, PyTorch's `is_causal` for square
inputs): with `n_q` queries and `n_k` keys, query row `i` sees key `j` iff
`j <= i + (n_k - n_q)`. For `n_q == n_k` that is the lower triangle; for a decode step
(`n_q = 1`) the query sees the whole cache; with `n_q > n_k` the first rows see nothing.

- `causal_mask(n_q, n_k, ...)` -> torch bool `[rows, cols]`, True where the query may see the key,
  for the whole matrix or one tile of it (`q_start`/`q_end`, `k_start`/`k_end`).
- `causal_mask_numpy(...)` -> the same as a NumPy array (for the NumPy chapter's code).
- `position_mask(query_pos, n_keys)` -> torch bool `[..., n_keys]`: key `j` visible to a query at
  absolute position `p` iff `j <= p` (a batch of sequences padded to `n_keys`, as a paged
  cache's prefill lays them out).
"""

from __future__ import annotations

import numpy as np

from . import validate

__all__ = ["causal_mask", "causal_mask_numpy", "position_mask", "causal_offset", "causal_flag"]


def causal_offset(n_q: int, n_k: int) -> int:
    """Return n_k - n_q: query row i sees keys j <= i + causal_offset(n_q, n_k)."""
    return validate.non_negative_int("n_k", n_k) - validate.non_negative_int("n_q", n_q)


def _ranges(n_q, n_k, q_start, q_end, k_start, k_end) -> tuple[int, int, int, int, int]:
    offset = causal_offset(n_q, n_k)
    q_end = n_q if q_end is None else q_end
    k_end = n_k if k_end is None else k_end
    validate.integer("q_start", q_start, 0, n_q)
    validate.integer("q_end", q_end, q_start, n_q)
    validate.integer("k_start", k_start, 0, n_k)
    validate.integer("k_end", k_end, k_start, n_k)
    return offset, q_start, q_end, k_start, k_end


def causal_mask(n_q: int, n_k: int, q_start: int = 0, q_end: int | None = None,
                k_start: int = 0, k_end: int | None = None, device=None):
    """Return the torch bool mask [q_end - q_start, k_end - k_start]: True where query row i
    (of n_q) may see key j (of n_k), bottom-right aligned. Defaults: the whole matrix."""
    import torch

    offset, qs, qe, ks, ke = _ranges(n_q, n_k, q_start, q_end, k_start, k_end)
    rows = torch.arange(qs, qe, device=device)
    cols = torch.arange(ks, ke, device=device)
    return cols[None, :] <= rows[:, None] + offset


def causal_mask_numpy(n_q: int, n_k: int, q_start: int = 0, q_end: int | None = None,
                      k_start: int = 0, k_end: int | None = None) -> np.ndarray:
    """`causal_mask` as a NumPy bool array."""
    offset, qs, qe, ks, ke = _ranges(n_q, n_k, q_start, q_end, k_start, k_end)
    return np.arange(ks, ke)[None, :] <= np.arange(qs, qe)[:, None] + offset


def position_mask(query_pos, n_keys: int):
    """Return the torch bool mask [*query_pos.shape, n_keys]: key j visible iff j <= position.

    query_pos: an integer tensor of absolute positions (any shape, e.g. [n_seq, q_max]);
    n_keys: the padded key length. Keys past a sequence's own length are the caller's to mask.
    """
    import torch

    validate.non_negative_int("n_keys", n_keys)
    if not isinstance(query_pos, torch.Tensor) or query_pos.is_floating_point() \
            or query_pos.dtype == torch.bool:
        raise TypeError(f"query_pos must be an integer tensor; got {type(query_pos).__name__}"
                        + (f" of {query_pos.dtype}" if isinstance(query_pos, torch.Tensor) else ""))
    keys = torch.arange(n_keys, device=query_pos.device)
    return keys <= query_pos[..., None]


def causal_flag(value, name: str = "causal") -> bool:
    """Return `value` as a bool; TypeError unless it is True or False (NumPy's bools too).

    A string, a number or a tensor as `causal` is refused rather than read by its truth.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise validate.ArgumentTypeError(f"{name} must be True or False; got {value!r} "
                                     f"({type(value).__name__})")
