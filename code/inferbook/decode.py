"""Greedy decoding three ways: recompute the whole prefix (naive), or keep a KV cache.

All return the same tokens; `GenerationResult` also carries the per-step wall times and the
attention work counted in layer 0, head 0 (see `gpt.AttentionCounter`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import validate
from .gpt import GPT
from .kv_cache import ConcatKVCache, KVCache


@dataclass
class GenerationResult:
    """tokens: [batch, prompt_len + new_tokens]; step_seconds[i]: time to produce new token i."""

    tokens: torch.Tensor
    step_seconds: list[float] = field(default_factory=list)
    query_rows: int = 0
    dot_products: int = 0
    forward_passes: int = 0

    @property
    def new_tokens(self) -> int:
        return len(self.step_seconds)


def _check(prompt: torch.Tensor, new_tokens: int, model: GPT) -> int:
    validate.instance_of("model", model, GPT)
    validate.token_tensor("prompt", prompt, model.config.vocab_size)
    new_tokens = validate.positive_int("new_tokens", new_tokens)
    if prompt.shape[1] + new_tokens > model.config.n_positions:
        raise ValueError(
            f"prompt ({prompt.shape[1]}) + new_tokens ({new_tokens}) exceeds the model's "
            f"n_positions={model.config.n_positions}"
        )
    return new_tokens


def _result(model: GPT, tokens, times) -> GenerationResult:
    c = model.counter
    return GenerationResult(tokens, times, c.query_rows, c.dot_products, c.calls)


@torch.inference_mode()
def generate_naive(model: GPT, prompt: torch.Tensor, new_tokens: int) -> GenerationResult:
    """Greedy decoding that runs the model over the whole sequence at every step (no cache)."""
    new_tokens = _check(prompt, new_tokens, model)
    model.counter.reset()
    tokens, times = prompt, []
    for _ in range(new_tokens):
        start = time.perf_counter()
        logits = model(tokens, last_only=True)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        times.append(time.perf_counter() - start)
    return _result(model, tokens, times)


@torch.inference_mode()
def generate_cached(
    model: GPT, prompt: torch.Tensor, new_tokens: int, cache_type: type = KVCache
) -> GenerationResult:
    """Greedy decoding with a KV cache: one prefill pass, then one position per step.

    `cache_type` is `KVCache` (preallocated, the default) or `ConcatKVCache`.
    """
    validate.one_of("cache_type", cache_type, (KVCache, ConcatKVCache))
    new_tokens = _check(prompt, new_tokens, model)
    model.counter.reset()
    batch, prompt_len = prompt.shape
    param = next(model.parameters())
    cache = cache_type.for_model(
        model.config, batch, prompt_len + new_tokens, dtype=param.dtype, device=param.device
    )
    out = torch.empty(batch, prompt_len + new_tokens, dtype=prompt.dtype, device=prompt.device)
    out[:, :prompt_len] = prompt
    times = []
    start = time.perf_counter()
    logits = model(prompt, cache=cache, pos=0, last_only=True)  # prefill
    for i in range(new_tokens):
        pos = prompt_len + i
        out[:, pos] = logits[:, -1].argmax(dim=-1)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        if i + 1 < new_tokens:  # the last token needs no forward pass of its own
            logits = model(out[:, pos:pos + 1], cache=cache, pos=pos, last_only=True)
    return _result(model, out, times)


def naive_counts(prompt_len: int, new_tokens: int) -> tuple[int, int]:
    """Return (query_rows, dot_products) the naive decoder does, per layer and head, in closed form.

    Step s (s = 0 .. new_tokens - 1) runs over n = prompt_len + s positions: n query rows and
    n(n+1)/2 causal dot products.
    """
    prompt_len = validate.positive_int("prompt_len", prompt_len)
    new_tokens = validate.positive_int("new_tokens", new_tokens)
    stop = prompt_len + new_tokens  # sums over n in [prompt_len, stop), in closed form

    def tetrahedral(m: int) -> int:  # Σ_{n=1..m} n(n+1)/2
        return m * (m + 1) * (m + 2) // 6

    return (prompt_len + stop - 1) * new_tokens // 2, tetrahedral(stop - 1) - tetrahedral(prompt_len - 1)


def cached_counts(prompt_len: int, new_tokens: int) -> tuple[int, int]:
    """Return (query_rows, dot_products) the cached decoder does, per layer and head.

    Prefill: prompt_len rows, prompt_len(prompt_len+1)/2 dot products; then one row per new
    position, which sees every earlier key and itself. The final token needs no pass.
    """
    prompt_len = validate.positive_int("prompt_len", prompt_len)
    new_tokens = validate.positive_int("new_tokens", new_tokens)
    total = prompt_len + new_tokens - 1  # positions that ever pass through the model
    return total, total * (total + 1) // 2
