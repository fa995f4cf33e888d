"""The KV cache: keys and values of past tokens, kept so each new token is attended, not recomputed.

Two implementations of the same protocol, `update(layer, k_new, v_new, pos) -> (k, v)`:

* `KVCache` preallocates one tensor per layer for the longest sequence and writes in place,
  as production engines do (vLLM preallocates its whole pool at start-up).
* `ConcatKVCache` grows by `torch.cat` at every step, as the lesson's list-based class and the
  blog's pseudo-code do; each step copies the whole cache, so a sequence of n tokens copies
  O(n²) bytes in total.
"""

from __future__ import annotations

import torch


class KVCache:
    """Preallocated cache. Storage: k, v each [n_layers, batch, n_heads, max_len, head_dim]."""

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        for name, value in [("n_layers", n_layers), ("batch", batch), ("n_heads", n_heads),
                            ("max_len", max_len), ("head_dim", head_dim)]:
            if value <= 0:
                raise ValueError(f"KVCache {name} must be positive, got {value}")
        shape = (n_layers, batch, n_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0  # positions 0 .. length - 1 hold valid keys/values

    @classmethod
    def for_model(cls, config, batch: int, max_len: int, dtype=torch.float32, device="cpu"):
        """Return a cache shaped for a `gpt.GPTConfig`."""
        return cls(config.n_layer, batch, config.n_head, max_len, config.head_dim, dtype, device)

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """Store k_new, v_new ([batch, heads, t, d]) at positions pos..pos+t-1; return all keys/values."""
        t = k_new.shape[-2]
        if pos + t > self.max_len:
            raise ValueError(
                f"KVCache is full: writing positions {pos}..{pos + t - 1} but max_len={self.max_len}; "
                "allocate the cache with a larger max_len"
            )
        if pos > self.length:
            raise ValueError(f"KVCache gap: writing at position {pos} but only {self.length} are filled")
        self.k[layer, :, :, pos:pos + t] = k_new
        self.v[layer, :, :, pos:pos + t] = v_new
        if layer == self.k.shape[0] - 1:  # the last layer closes the step
            self.length = pos + t
        return self.k[layer, :, :, :pos + t], self.v[layer, :, :, :pos + t]

    @property
    def nbytes(self) -> int:
        """Return the bytes reserved by the cache (both K and V)."""
        return self.k.numel() * self.k.element_size() * 2


class ConcatKVCache:
    """Cache that grows by concatenation: one list entry per layer, replaced at every step."""

    def __init__(self, n_layers: int):
        if n_layers <= 0:
            raise ValueError(f"ConcatKVCache n_layers must be positive, got {n_layers}")
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers

    @classmethod
    def for_model(cls, config, batch: int = 1, max_len: int = 0, dtype=None, device=None):
        """Return a cache for a `gpt.GPTConfig` (batch, max_len, dtype, device are not needed)."""
        return cls(config.n_layer)

    @property
    def length(self) -> int:
        return 0 if self.k[-1] is None else self.k[-1].shape[-2]

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """Append k_new, v_new ([batch, heads, t, d]) after the cached positions; return all."""
        have = 0 if self.k[layer] is None else self.k[layer].shape[-2]
        if pos != have:
            raise ValueError(f"ConcatKVCache can only append: got pos={pos}, holds {have} positions")
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k_new, v_new
        else:
            self.k[layer] = torch.cat([self.k[layer], k_new], dim=-2)
            self.v[layer] = torch.cat([self.v[layer], v_new], dim=-2)
        return self.k[layer], self.v[layer]
