"""A GPT-2-architecture decoder in plain PyTorch, written so the KV cache is visible.

The model is the GPT-2 of Radford et al. (2019): learned position embeddings, pre-LayerNorm
blocks, tanh-GELU MLP, tied input/output embeddings. `load_hf_gpt2` copies the weights of a
Hugging Face `GPT2LMHeadModel` into it, so the two compute the same function.

Attention takes an optional cache object with one method,
`update(layer, k_new, v_new, pos) -> (k, v)`, that stores the new keys/values at positions
`pos .. pos + t - 1` and returns all keys/values `0 .. pos + t - 1`. `kv_cache.KVCache`
(preallocated), `kv_cache.ConcatKVCache` (grows by concatenation) and the paged cache of the
PagedAttention chapter all implement it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


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
            if getattr(self, name) <= 0:
                raise ValueError(f"GPTConfig.{name} must be positive, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


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


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, cache=None, pos: int = 0, counter: AttentionCounter | None = None):
        """x: [batch, t, n_embd] for positions pos .. pos + t - 1. Returns [batch, t, n_embd]."""
        batch, t, n_embd = x.shape
        q, k, v = self.qkv(x).split(n_embd, dim=-1)
        # [batch, t, n_embd] -> [batch, n_head, t, head_dim]
        q, k, v = (z.view(batch, t, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k, v = cache.update(self.layer, k, v, pos)  # now [batch, n_head, pos + t, head_dim]
        if counter is not None and self.layer == 0:
            counter.record(t, k.shape[-2])
        y = causal_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(batch, t, n_embd))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Return softmax(q kᵀ / √d + causal mask) v.

    q: [batch, heads, n_q, d]; k, v: [batch, heads, n_k, d] with n_k ≥ n_q. The queries are
    the last n_q of the n_k positions, so query i may look at keys 0 .. n_k - n_q + i.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if n_q > 1:
        allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
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

    def forward(self, x, cache=None, pos=0, counter=None):
        x = x + self.attn(self.ln_1(x), cache, pos, counter)
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
        idx: torch.Tensor,
        cache=None,
        pos: int = 0,
        last_only: bool = False,
    ) -> torch.Tensor:
        """idx: [batch, t] token ids at positions pos .. pos + t - 1.

        Returns logits [batch, t, vocab] (or [batch, 1, vocab] with `last_only`, which skips
        the output projection for every position but the last, as decoding needs).
        """
        t = idx.shape[1]
        if pos + t > self.config.n_positions:
            raise ValueError(
                f"positions {pos}..{pos + t - 1} exceed n_positions={self.config.n_positions}; "
                "generate fewer tokens or use a model with a longer context"
            )
        positions = torch.arange(pos, pos + t, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x, cache, pos, self.counter)
        x = self.ln_f(x)
        if last_only:
            x = x[:, -1:, :]
        return x @ self.wte.weight.T  # tied embeddings


def num_parameters(model: nn.Module) -> int:
    """Return the number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def load_hf_gpt2(hf_model) -> GPT:
    """Return a `GPT` holding the weights of a Hugging Face `GPT2LMHeadModel`.

    HF's GPT-2 stores its linear layers as `Conv1D` with weight [in, out]; ours are
    `nn.Linear` with weight [out, in], hence the transposes.
    """
    hf = hf_model.config
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
