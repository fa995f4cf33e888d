"""A GPT-2-architecture decoder in plain PyTorch, written so the KV cache is visible.

The model is the GPT-2 of Radford et al. (2019): learned position embeddings, pre-LayerNorm
blocks, tanh-GELU MLP, tied input/output embeddings. `load_hf_gpt2` copies the weights of a
Hugging Face `GPT2LMHeadModel` into it, so the two compute the same function.

The attention seam. The model never knows where keys and values live. Each forward pass gets
one explicit *attention context* and every layer calls ``ctx.attend(layer, q, k, v) -> y``
(q, k, v, y: ``[batch, t, heads, head_dim]``); the context stores this step's keys and values
wherever its cache keeps them and returns the attention output. Implementations:

* `CausalContext` (the default, no cache): each row attends causally to its own tokens.
* `kv_cache.KVCache.begin_step(pos, n)`: a contiguous cache, one tensor per layer.
* `paged.PagedContext`: a paged cache; slot mapping and block tables are built once per step
  (the engine's packed batch, or a `SequenceCacheView` / `BatchCacheView`).

A context carries `positions` (LongTensor ``[t]``, or ``[batch, t]`` per token) and `batch`
(the rows it serves, or None for any). ``GPT.forward(tokens, cache=c, pos=p)`` is shorthand for
``ctx = c.begin_step(p, t)``, ``GPT.forward(tokens, ctx.positions, ctx)``, ``c.end_step(ctx)``:
a step begins and ends explicitly, never by guessing from the layer index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import validate
from .masks import causal_mask


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a GPT-2-style model. Defaults are GPT-2 small (124M parameters)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            validate.positive_int(f"GPTConfig.{name}", getattr(self, name))
        validate.finite_float("GPTConfig.layer_norm_eps", self.layer_norm_eps, minimum=0.0)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_kv_head(self) -> int:
        """Key/value heads: GPT-2 has one per query head (multi-head attention)."""
        return self.n_head


@dataclass
class AttentionCounter:
    """Counts attention work in one layer and one head, as it happens.

    `query_rows`: query positions whose attention output was computed.
    `dot_products`: query-key dot products (causal: a query at position i sees keys 0..i).
    `calls`: forward passes (one per decoding step).
    """

    query_rows: int = 0
    dot_products: int = 0
    calls: int = 0

    def record(self, n_query: int, n_key: int) -> None:
        # Queries are the last n_query of n_key positions; query i (0-based among them)
        # sees n_key - n_query + i + 1 keys.
        self.calls += 1
        self.query_rows += n_query
        self.dot_products += n_query * (n_key - n_query) + n_query * (n_query + 1) // 2

    def reset(self) -> None:
        self.query_rows = self.dot_products = self.calls = 0


class AttentionContext(Protocol):
    """One forward pass's attention: where keys/values are stored and which ones are read."""

    batch: int | None  # rows of `tokens` this context serves (None: any number)
    positions: torch.Tensor  # [t] (shared by every row) or [batch, t]: each token's position

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [batch, t, heads, head_dim] of this step; return y of the same shape."""
        ...


class CausalContext:
    """No cache: each row attends causally to its own tokens (positions pos .. pos + t − 1)."""

    batch = None

    def __init__(self, positions: torch.Tensor):
        self.positions = positions

    def attend(self, layer, q, k, v):
        # [batch, t, heads, d] -> [batch, heads, t, d] and back; k, v may have fewer heads (GQA)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if k.shape[1] != q.shape[1]:
            k, v = (z.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for z in (k, v))
        return causal_attention(q, k, v).transpose(1, 2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, ctx: AttentionContext):
        """x: [batch, t, n_embd]. Returns [batch, t, n_embd]; keys/values go through `ctx`."""
        batch, t, n_embd = x.shape
        q, k, v = self.qkv(x).split(n_embd, dim=-1)
        q, k, v = (z.view(batch, t, self.n_head, self.head_dim) for z in (q, k, v))
        y = ctx.attend(self.layer, q, k, v)  # [batch, t, n_head, head_dim]
        return self.proj(y.reshape(batch, t, n_embd))


def _check_attention_inputs(q, k, v) -> None:
    """Raise naming the argument unless q, k, v are [batch, heads, n, d] with n_k >= n_q >= 1."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor [batch, heads, seq, head_dim]; got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k and v must be [batch, heads, n_k, d] with q's batch, heads and d; "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not 1 <= q.shape[2] <= k.shape[2]:
        raise ValueError(f"need 1 <= n_q <= n_k (the queries are the last n_q positions); got "
                         f"n_q={q.shape[2]}, n_k={k.shape[2]}")


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Return softmax(q kᵀ / √d + causal mask) v.

    q: [batch, heads, n_q, d]; k, v: [batch, heads, n_k, d] with n_k ≥ n_q. The queries are
    the last n_q of the n_k positions, so query i may look at keys 0 .. n_k - n_q + i.
    """
    _check_attention_inputs(q, k, v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if n_q > 1:
        scores = scores.masked_fill(~causal_mask(n_q, n_k, device=q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, ctx: AttentionContext):
        x = x + self.attn(self.ln_1(x), ctx)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 decoder. `forward(idx, cache, pos)` returns logits [batch, t, vocab]."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.counter = AttentionCounter()
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's initialisation: N(0, 0.02) weights, zero biases.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        ctx: AttentionContext | None = None,
        last_only: bool = False,
        *,
        cache=None,
        pos: int = 0,
    ) -> torch.Tensor:
        """Return logits [batch, t, vocab] for token ids `tokens` [batch, t].

        `positions`: [t] or [batch, t] (default: the context's, else pos .. pos + t − 1);
        `ctx`: the attention context (default `CausalContext`, no cache). `cache=`, `pos=`:
        shorthand that begins a step on `cache` at `pos`, runs it and ends it (see the module
        docstring). `last_only` keeps only each row's last position (what decoding needs) and
        skips the output projection of the others.
        """
        x = self.hidden_states(tokens, positions, ctx, cache=cache, pos=pos)
        if last_only:
            x = x[:, -1:, :]
        return self.head(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Return logits [..., vocab] of final hidden states x [..., n_embd] (tied embeddings)."""
        return x @ self.wte.weight.T

    def hidden_states(self, tokens, positions=None, ctx=None, *, cache=None, pos: int = 0):
        """Return the final hidden states [batch, t, n_embd] (after `ln_f`); arguments as `forward`."""
        validate.token_tensor("tokens", tokens, self.config.vocab_size)
        batch, t = tokens.shape
        if cache is not None:
            if ctx is not None or positions is not None:
                raise ValueError("give either cache= (with pos=) or ctx= (with positions), not both")
            self._check_span(validate.non_negative_int("pos", pos), t)
            validate.same("tokens.shape[0]", batch, getattr(cache, "batch", None) or batch,
                          "equal the cache's batch (a cache is never broadcast over rows)")
            ctx = cache.begin_step(pos, t)
            x = self._run(tokens, ctx.positions, ctx)
            cache.end_step(ctx)
            return x
        if ctx is not None and not hasattr(ctx, "attend"):
            raise TypeError(f"ctx must be an attention context (with .attend), got {type(ctx).__name__}; "
                            "pass a cache as cache=, with pos=")
        if ctx is None:
            if positions is None:
                self._check_span(validate.non_negative_int("pos", pos), t)
                positions = torch.arange(pos, pos + t, device=tokens.device)
            ctx = CausalContext(positions)
        validate.same("tokens.shape[0]", batch, ctx.batch or batch,
                      "equal the context's batch (a cache is never broadcast over rows)")
        if positions is None:
            positions = ctx.positions
        self._check_positions(positions, batch, t)
        return self._run(tokens, positions, ctx)

    def _check_span(self, pos: int, t: int) -> None:
        if pos + t > self.config.n_positions:
            raise ValueError(
                f"positions {pos}..{pos + t - 1} exceed n_positions={self.config.n_positions}; "
                "generate fewer tokens or use a model with a longer context"
            )

    def _check_positions(self, positions, batch: int, t: int) -> None:
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a LongTensor, got {type(positions).__name__}; "
                            "pass a cache as cache=, with pos=")
        if positions.shape not in ((t,), (batch, t)):
            raise ValueError(f"positions must be a tensor of shape [{t}] or [{batch}, {t}], got "
                             f"{getattr(positions, 'shape', positions)!r}")
        validate.int_tensor("positions", positions, 0, self.config.n_positions,
                            f"positions below n_positions={self.config.n_positions}")

    def _run(self, tokens, positions, ctx) -> torch.Tensor:
        if positions.dim() == 1:  # one sequence per row, positions positions[0] .. positions[-1]
            self.counter.record(tokens.shape[1], int(positions[-1]) + 1)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x, ctx)
        return self.ln_f(x)


def num_parameters(model: nn.Module) -> int:
    """Return the number of parameters (tied weights counted once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters())


def load_hf_gpt2(hf_model) -> GPT:
    """Return a `GPT` holding the weights of a Hugging Face `GPT2LMHeadModel`.

    HF's GPT-2 stores its linear layers as `Conv1D` with weight [in, out]; ours are
    `nn.Linear` with weight [out, in], hence the transposes.
    """
    hf = getattr(hf_model, "config", None)
    if getattr(hf, "model_type", None) != "gpt2" or not hasattr(hf_model, "transformer"):
        raise TypeError(f"hf_model must be a Hugging Face GPT-2 model (GPT2LMHeadModel); got "
                        f"{type(hf_model).__name__}")
    config = GPTConfig(
        vocab_size=hf.vocab_size,
        n_positions=hf.n_positions,
        n_embd=hf.n_embd,
        n_layer=hf.n_layer,
        n_head=hf.n_head,
        layer_norm_eps=hf.layer_norm_epsilon,
    )
    model = GPT(config)
    src = hf_model.transformer
    with torch.no_grad():
        model.wte.weight.copy_(src.wte.weight)
        model.wpe.weight.copy_(src.wpe.weight)
        for ours, theirs in zip(model.blocks, src.h):
            ours.ln_1.load_state_dict(theirs.ln_1.state_dict())
            ours.ln_2.load_state_dict(theirs.ln_2.state_dict())
            for lin, conv in [
                (ours.attn.qkv, theirs.attn.c_attn),
                (ours.attn.proj, theirs.attn.c_proj),
                (ours.mlp.fc, theirs.mlp.c_fc),
                (ours.mlp.proj, theirs.mlp.c_proj),
            ]:
                lin.weight.copy_(conv.weight.T)
                lin.bias.copy_(conv.bias)
        model.ln_f.load_state_dict(src.ln_f.state_dict())
    return model.eval()
