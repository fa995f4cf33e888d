"""The KV cache: keys and values of past tokens, kept so each new token is attended, not recomputed.

Two contiguous caches behind the model's attention seam (see `gpt`): a forward pass over
positions pos .. pos + n − 1 runs between ``ctx = cache.begin_step(pos, n)`` and
``cache.end_step(ctx)``; every layer calls ``ctx.attend(layer, q, k, v)``, which stores the
step's keys/values with ``cache.update(layer, k, v, pos)`` and attends over positions
0 .. pos + n − 1. ``GPT.forward(tokens, cache=cache, pos=pos)`` does the three calls.

* `KVCache` preallocates one tensor per layer for the longest sequence and writes in place,
  as production engines do (vLLM preallocates its whole pool at start-up).
* `ConcatKVCache` grows by `torch.cat` at every step, as the lesson's list-based class and the
  blog's pseudo-code do; each step copies the whole cache, so a sequence of n tokens copies
  O(n²) bytes in total.
"""

from __future__ import annotations

import torch

from . import validate
from .gpt import GPTConfig, causal_attention


class CacheStep:
    """The attention context of one step on a contiguous cache: positions pos .. pos + n − 1."""

    def __init__(self, cache, pos: int, n: int):
        self.cache, self.pos, self.n = cache, pos, n
        self.batch = cache.batch
        self.positions = torch.arange(pos, pos + n, device=cache.device)

    @property
    def stop(self) -> int:
        return self.pos + self.n

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [batch, n, heads, d]; store k, v; return causal attention [batch, n, heads, d]."""
        # begin_step checked the span and forward the batch: store without re-checking per layer
        keys, values = self.cache._store(layer, k.transpose(1, 2), v.transpose(1, 2), self.pos)
        return causal_attention(q.transpose(1, 2), keys, values).transpose(1, 2)


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
            validate.positive_int(name, value)
        validate.torch_dtype("dtype", dtype)
        device = validate.device("device", device)
        shape = (n_layers, batch, n_heads, max_len, head_dim)
        validate.tensor_elements("n_layers x batch x n_heads x max_len x head_dim", (2,) + shape)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.n_layers, self.batch, self.max_len = n_layers, batch, max_len
        self.device = self.k.device
        self.length = 0  # positions 0 .. length - 1 hold valid keys/values

    @classmethod
    def for_model(cls, config, batch: int, max_len: int, dtype=torch.float32, device="cpu"):
        """Return a cache shaped for a `gpt.GPTConfig`."""
        validate.instance_of("config", config, GPTConfig)
        return cls(config.n_layer, batch, config.n_head, max_len, config.head_dim, dtype, device)

    def begin_step(self, pos: int, n: int) -> CacheStep:
        """Return the attention context that writes positions pos .. pos + n − 1.

        pos ≤ length: a step appends (pos == length) or rewrites from pos on (pos < length,
        e.g. rolling back rejected speculative tokens). Nothing changes until `end_step`.
        """
        pos, n = validate.non_negative_int("pos", pos), validate.positive_int("n", n)
        self._check_span(pos, n)
        return CacheStep(self, pos, n)

    def end_step(self, step: CacheStep) -> None:
        """Close `step`: the cache now holds positions 0 .. pos + n − 1."""
        if step.cache is not self:
            raise ValueError("end_step got a step of another cache")
        self.length = step.stop

    def _check_span(self, pos: int, n: int) -> None:
        if pos + n > self.max_len:
            raise ValueError(
                f"KVCache is full: writing positions {pos}..{pos + n - 1} but max_len={self.max_len}; "
                "allocate the cache with a larger max_len"
            )
        if pos > self.length:
            raise ValueError(f"KVCache gap: writing at position {pos} but only {self.length} are filled")

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """Store k_new, v_new ([batch, heads, t, d]) at positions pos..pos+t−1 of `layer`; return
        the layer's keys/values for positions 0..pos+t−1. `length` changes only at `end_step`."""
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise validate.ArgumentTypeError(f"{name} must be a 4-axis torch.Tensor [batch, heads, t, d], "
                                                 f"got {getattr(t, 'shape', type(t).__name__)}")
        if k_new.shape != v_new.shape or k_new.shape[:2] != self.k.shape[1:3] or k_new.shape[3] != self.k.shape[4]:
            raise ValueError(f"k_new and v_new must both be [batch={self.batch}, heads={self.k.shape[2]}, t, "
                             f"d={self.k.shape[4]}], got {tuple(k_new.shape)} and {tuple(v_new.shape)}")
        validate.integer("layer", layer, 0, self.n_layers - 1)
        pos = validate.non_negative_int("pos", pos)
        t = k_new.shape[-2]
        if pos + t > self.max_len:
            raise ValueError(f"KVCache is full: writing positions {pos}..{pos + t - 1} but max_len={self.max_len}")
        return self._store(layer, k_new, v_new, pos)

    def _store(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        t = k_new.shape[-2]
        self.k[layer, :, :, pos:pos + t] = k_new
        self.v[layer, :, :, pos:pos + t] = v_new
        return self.k[layer, :, :, :pos + t], self.v[layer, :, :, :pos + t]

    @property
    def nbytes(self) -> int:
        """Return the bytes reserved by the cache (both K and V)."""
        return self.k.numel() * self.k.element_size() * 2


class ConcatKVCache:
    """Cache that grows by concatenation: one list entry per layer, replaced at every step."""

    def __init__(self, n_layers: int):
        self.n_layers = validate.integer("n_layers", n_layers, 1, 2**20)
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.length = 0
        self.device = None

    @classmethod
    def for_model(cls, config, batch: int = 1, max_len: int = 0, dtype=None, device=None):
        """Return a cache for a `gpt.GPTConfig` (batch, max_len, dtype, device are not needed)."""
        return cls(validate.instance_of("config", config, GPTConfig).n_layer)

    @property
    def batch(self) -> int | None:
        """Rows the cache holds (None while empty: the first step fixes it)."""
        return None if self.k[0] is None else self.k[0].shape[0]

    def begin_step(self, pos: int, n: int) -> CacheStep:
        """Return the attention context that appends positions pos .. pos + n − 1 (pos == length)."""
        pos, n = validate.non_negative_int("pos", pos), validate.integer("n", n, 1, 2**31)
        if pos != self.length:
            raise ValueError(f"ConcatKVCache can only append: got pos={pos}, holds {self.length} positions")
        return CacheStep(self, pos, n)

    def end_step(self, step: CacheStep) -> None:
        """Close `step`: the cache now holds positions 0 .. pos + n − 1."""
        if step.cache is not self:
            raise ValueError("end_step got a step of another cache")
        self.length = step.stop

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """Append k_new, v_new ([batch, heads, t, d]) after the cached positions; return all."""
        validate.integer("layer", layer, 0, self.n_layers - 1)
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.dtype.is_floating_point:
                raise validate.ArgumentTypeError(f"{name} must be a 4-axis floating-point tensor [batch, heads, t, d], "
                                                 f"got {getattr(t, 'shape', type(t).__name__)}")
        if k_new.shape != v_new.shape:
            raise ValueError(f"k_new and v_new must have one shape, got {tuple(k_new.shape)} and {tuple(v_new.shape)}")
        if self.k[layer] is not None and k_new.shape[3] != self.k[layer].shape[3]:
            raise ValueError(f"k_new has head_dim {k_new.shape[3]}, the cache holds {self.k[layer].shape[3]}")
        have = 0 if self.k[layer] is None else self.k[layer].shape[-2]
        if pos != have:
            raise ValueError(f"ConcatKVCache can only append: got pos={pos}, holds {have} positions")
        if self.k[layer] is not None and k_new.shape[:2] != self.k[layer].shape[:2]:
            raise ValueError(f"k_new has batch/heads {tuple(k_new.shape[:2])}, the cache holds "
                             f"{tuple(self.k[layer].shape[:2])}")
        return self._store(layer, k_new, v_new, pos)

    def _store(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k_new, v_new
        else:
            self.k[layer] = torch.cat([self.k[layer], k_new], dim=-2)
            self.v[layer] = torch.cat([self.v[layer], v_new], dim=-2)
        return self.k[layer], self.v[layer]
