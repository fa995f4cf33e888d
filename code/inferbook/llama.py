"""A Llama-architecture decoder in plain PyTorch, on the same attention seam as `gpt`.

What changes from GPT-2 (Touvron et al., 2023), each one line of `forward` below:

* RMSNorm instead of LayerNorm: x / sqrt(mean(x²) + eps) · w, no mean subtracted, no bias;
* rotary position embeddings (RoPE, Su et al., 2021) instead of learned ones: query and key
  rotate, pair by pair, by an angle position · θ^(−2i/d); nothing is added to the embeddings,
  so the keys a cache stores are already rotated;
* grouped-query attention (GQA): `n_kv_head` key/value heads, each shared by
  n_head / n_kv_head query heads, which divides the KV cache by that factor;
* a SwiGLU MLP: down(silu(gate(x)) · up(x)); no biases anywhere; untied output head.

Attention goes through the same explicit context as `gpt.GPT` (``ctx.attend(layer, q, k, v)``
with k, v at `n_kv_head` heads), so the paged cache and the engine run it unchanged.
`load_hf_llama` copies a Hugging Face `LlamaForCausalLM`'s weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import validate
from .gpt import CausalContext


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-style model (field names as `gpt.GPTConfig` where they mean the same)."""

    vocab_size: int = 32000
    n_positions: int = 2048
    n_embd: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 8
    intermediate_size: int = 14336
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_kv_head",
                     "intermediate_size"):
            validate.positive_int(f"LlamaConfig.{name}", getattr(self, name))
        validate.finite_float("LlamaConfig.rope_theta", self.rope_theta, minimum=1.0)
        validate.finite_float("LlamaConfig.rms_norm_eps", self.rms_norm_eps, minimum=0.0)
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"n_embd={self.n_embd} must be n_head={self.n_head} × an even head_dim")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.n_kv_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # in float32 as Hugging Face does, then back to x's dtype
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """Return cos, sin [..., head_dim] of the rotary angles position · θ^(−2i/d) (halves repeated)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., head_dim / 2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [batch, t, heads, d] pairwise (i, i + d/2) by the angles of cos, sin [batch or 1, t, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cos, sin = cos[:, :, None, :].to(x.dtype), sin[:, :, None, :].to(x.dtype)
    return x * cos + rotated * sin


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig, layer: int):
        super().__init__()
        self.layer, self.n_head, self.n_kv_head = layer, config.n_head, config.n_kv_head
        self.head_dim = config.head_dim
        d, kv = config.n_embd, config.n_kv_head * config.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, ctx):
        """x: [batch, t, n_embd] -> [batch, t, n_embd]; k, v go through `ctx` at n_kv_head heads."""
        batch, t, d = x.shape
        q = self.q_proj(x).view(batch, t, self.n_head, self.head_dim)
        k = self.k_proj(x).view(batch, t, self.n_kv_head, self.head_dim)
        v = self.v_proj(x).view(batch, t, self.n_kv_head, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.o_proj(ctx.attend(self.layer, q, k, v).reshape(batch, t, d))


class LlamaMLP(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU


class LlamaBlock(nn.Module):
    def __init__(self, config: LlamaConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.n_embd, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.n_embd, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, cos, sin, ctx):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """Llama decoder. `forward(tokens, positions, ctx)` returns logits [batch, t, vocab]."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise validate.ArgumentTypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList(LlamaBlock(config, i) for i in range(config.n_layer))
        self.norm = RMSNorm(config.n_embd, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, tokens, positions=None, ctx=None):
        return self.head(self.hidden_states(tokens, positions, ctx))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Return logits [..., vocab] of final hidden states x [..., n_embd]."""
        return self.lm_head(x)

    def hidden_states(self, tokens, positions=None, ctx=None):
        """Return the final hidden states [batch, t, n_embd] (after `norm`).

        `positions`: [t] or [batch, t] (default: the context's, else 0 .. t − 1); `ctx`: the
        attention context (default `gpt.CausalContext`, no cache).
        """
        validate.token_tensor("tokens", tokens, self.config.vocab_size)
        batch, t = tokens.shape
        if ctx is None:
            positions = torch.arange(t) if positions is None else positions
            ctx = CausalContext(positions)
        elif not hasattr(ctx, "attend"):
            raise TypeError(f"ctx must be an attention context (with .attend), got {type(ctx).__name__}")
        positions = ctx.positions if positions is None else positions
        if not isinstance(positions, torch.Tensor) or positions.shape not in ((t,), (batch, t)):
            raise ValueError(f"positions must be a tensor of shape [{t}] or [{batch}, {t}], got "
                             f"{getattr(positions, 'shape', positions)!r}")
        validate.int_tensor("positions", positions, 0, self.config.n_positions,
                            f"positions below n_positions={self.config.n_positions}")
        cos, sin = rope_cos_sin(positions.reshape(-1, t), self.config.head_dim, self.config.rope_theta)
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, ctx)
        return self.norm(x)


def load_hf_llama(hf_model) -> Llama:
    """Return a `Llama` holding the weights of a Hugging Face `LlamaForCausalLM` (same names)."""
    hf = getattr(hf_model, "config", None)
    if getattr(hf, "model_type", None) != "llama" or not hasattr(hf_model, "model"):
        raise TypeError(f"hf_model must be a Hugging Face LlamaForCausalLM; got {type(hf_model).__name__}")
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    if head_dim * hf.num_attention_heads != hf.hidden_size:
        raise ValueError(f"head_dim={head_dim} × heads must equal hidden_size={hf.hidden_size}")
    for name in ("attention_bias", "mlp_bias"):
        if getattr(hf, name, False):
            raise ValueError(f"{name}=True is not the Llama this module implements (no biases)")
    rope = getattr(hf, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"only plain RoPE is implemented, got rope_type={rope.get('rope_type')!r}")
    theta = rope.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
    config = LlamaConfig(
        vocab_size=hf.vocab_size, n_positions=hf.max_position_embeddings, n_embd=hf.hidden_size,
        n_layer=hf.num_hidden_layers, n_head=hf.num_attention_heads,
        n_kv_head=hf.num_key_value_heads, intermediate_size=hf.intermediate_size,
        rope_theta=float(theta), rms_norm_eps=hf.rms_norm_eps,
        tie_word_embeddings=bool(hf.tie_word_embeddings),
    )
    model = Llama(config)
    state = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing or [u for u in unexpected if "rotary_emb" not in u]:
        raise ValueError(f"weights do not match: missing {missing}, unexpected {unexpected}")
    return model.eval()
