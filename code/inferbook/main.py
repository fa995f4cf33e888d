"""The lesson's demo as a command: naive vs cached decoding, the tiled softmax, a KV-sizing table.

    python code/inferbook/main.py [--tokens 100] [--seed 0]      (or: python -m inferbook.main)

Prints a short report. Every number is computed here; nothing is typed in.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from inferbook import sizing, validate
from inferbook.decode import cached_counts, generate_cached, generate_naive, naive_counts
from inferbook.gpt import GPT, GPTConfig
from inferbook.models import model as model_preset
from inferbook.softmax import tiled_softmax_dot

SIZING_PRESETS = ["Llama-2-7B", "Llama-3.1-8B", "Llama-3.1-70B", "Mistral-7B-v0.1", "DeepSeek-V3"]


MAX_TOKENS = 4096  # the naive decoder is quadratic: more is a long wait, not a demo


def decoding_report(tokens: int, seed: int) -> list[str]:
    """Return report lines: naive and cached greedy decoding of a small random GPT."""
    tokens = validate.integer("tokens", tokens, 1, MAX_TOKENS)
    seed = validate.integer("seed", seed, 0, 2**32 - 1)
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=1000, n_positions=max(256, tokens + 1), n_embd=64, n_layer=2, n_head=4)
    model = GPT(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 1))
    t0 = time.perf_counter()
    naive = generate_naive(model, prompt, tokens)
    t1 = time.perf_counter()
    cached = generate_cached(model, prompt, tokens)
    t2 = time.perf_counter()
    same = torch.equal(naive.tokens, cached.tokens)
    if (naive.query_rows, naive.dot_products) != naive_counts(1, tokens) or (
        cached.query_rows, cached.dot_products) != cached_counts(1, tokens):
        raise RuntimeError("measured attention work differs from the closed forms")
    return [
        f"1. Greedy decoding of {tokens} tokens from a 1-token prompt (random GPT, {config.n_layer} layers)",
        f"   identical tokens: {same}",
        "   attention work per layer and head   query rows   q·k dot products",
        f"   naive (recompute the prefix)       {naive.query_rows:>11,}   {naive.dot_products:>16,}",
        f"   KV cache                           {cached.query_rows:>11,}   {cached.dot_products:>16,}",
        f"   wall time on this machine: naive {t1 - t0:.3f} s, cached {t2 - t1:.3f} s "
        f"({(t1 - t0) / (t2 - t1):.1f}x; machine-dependent)",
    ]


def softmax_report(seed: int) -> list[str]:
    """Return report lines: the tiled softmax(qK)V against the one-shot formula."""
    seed = validate.integer("seed", seed, 0, 2**32 - 1)
    rng = np.random.default_rng(seed)
    n, d = 1000, 64
    q, K, V = rng.standard_normal(d) / np.sqrt(d), rng.standard_normal((n, d)), rng.standard_normal((n, d))
    scores = K @ q
    weights = np.exp(scores - scores.max())
    direct = (weights / weights.sum()) @ V
    lines = [f"2. Tiled softmax(qK)V, one query, N={n}, d={d} (float64)",
             "   tile   max |tiled - direct|   bit-identical"]
    for tile in [1, 4, 64, 1000]:
        tiled = tiled_softmax_dot(q, K, V, tile=tile)
        lines.append(f"   {tile:>4}   {np.abs(tiled - direct).max():>20.1e}   {np.array_equal(tiled, direct)}")
    return lines


def sizing_report() -> list[str]:
    """Return report lines: KV-cache bytes for a few real models (bf16)."""
    lines = ["3. KV cache, bf16 (see chapter 2)",
             "   model              bytes/token/layer   KiB/token   GiB at 32K tokens"]
    for name in SIZING_PRESETS:
        spec = model_preset(name)
        per_token = sizing.kv_bytes_per_token(spec, "bf16")
        per_layer = per_token // spec.num_hidden_layers
        at_32k = sizing.kv_bytes(spec, 32768, 1, "bf16")
        lines.append(f"   {spec.name:<18} {per_layer:>17,}   {per_token / 1024:>9.0f}   {at_32k / 2**30:>17.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The lesson's demo: KV cache, tiled softmax, KV sizing.")
    ap.add_argument("--tokens", type=int, default=100, help="tokens to generate (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 1 <= args.tokens <= MAX_TOKENS:
        ap.error(f"--tokens must be in [1, {MAX_TOKENS}], got {args.tokens}")
    if not 0 <= args.seed < 2**32:
        ap.error(f"--seed must be in [0, 2**32), got {args.seed}")
    for block in (decoding_report(args.tokens, args.seed), softmax_report(args.seed), sizing_report()):
        print("\n".join(block))
        print()


if __name__ == "__main__":
    main()
