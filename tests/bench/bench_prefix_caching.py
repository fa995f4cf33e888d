"""Benchmark: prefill a shared prompt once and fork, vs re-encode it per completion; paged vs contiguous decode.

Runs on the CPU with a randomly initialised GPT-2-small-shaped model (no download), prints a
table of ratios measured side by side in one run, and writes outputs/benchmarks/prefix_caching.json.

    .venv/bin/python tests/bench/bench_prefix_caching.py [--prompt 512] [--completions 8]
        [--completion-tokens 32] [--sweep 1 8 32 128] [--repeats 3] [--threads 1]

Times are the process's CPU seconds with one torch thread (the book's build machine is shared,
so wall time there measures the neighbours); wall seconds are recorded too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from bench_util import timed, write_result  # noqa: E402

from inferbook.arith import ceil_div  # noqa: E402
from inferbook.decode import generate_cached
from inferbook.gpt import GPT, GPTConfig, num_parameters
from inferbook.paged import PagedKVCache
from inferbook.prefix_cache import score_forked, score_reencoded

def greedy_paged(model, prompt, new_tokens, block_size=16):
    """Greedy decoding through a `PagedKVCache` (the chapter's loop); returns tokens [1, P + new]."""
    cache = PagedKVCache.for_model(model.config, ceil_div(prompt.shape[1] + new_tokens, block_size),
                                   block_size)
    cache.blocks.add_sequence(0)
    view, tokens = cache.view(0), prompt
    with torch.inference_mode():
        logits = model(prompt, cache=view, pos=0, last_only=True)
        for i in range(new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], 1)
            if i + 1 < new_tokens:
                logits = model(nxt, cache=view, pos=view.length, last_only=True)
    return tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--completion-tokens", type=int, default=32)
    ap.add_argument("--sweep", type=int, nargs="*", default=[1, 8, 128])
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "prefix_caching.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    model = GPT(GPTConfig()).eval()  # GPT-2 small shape, random weights
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (args.prompt,)).tolist()
    n = args.completions

    def make_completions(length):
        return [torch.randint(0, vocab, (length,)).tolist() for _ in range(n)]

    completions = make_completions(args.completion_tokens)

    def prefill_prompt():
        with torch.inference_mode():
            return model(torch.tensor([prompt]), last_only=True)

    runs = {
        "prompt_prefill_once": prefill_prompt,
        "forked": lambda: score_forked(model, prompt, completions),
        "reencoded": lambda: score_reencoded(model, prompt, completions),
        "paged_decode": lambda: greedy_paged(model, torch.tensor([prompt[:16]]), args.decode_tokens),
        "contiguous_decode": lambda: generate_cached(model, torch.tensor([prompt[:16]]), args.decode_tokens).tokens,
    }
    cpu = {k: [] for k in runs}
    wall = {k: [] for k in runs}
    last = {}
    for _ in range(args.repeats):  # interleaved, so noise hits all variants alike
        for name, fn in runs.items():
            t = timed(fn)
            cpu[name].append(t.cpu_seconds)
            wall[name].append(t.seconds)
            last[name] = t.result
    max_abs_diff = max((x - y).abs().max().item() for x, y in zip(last["forked"], last["reencoded"]))
    same_tokens = bool(torch.equal(last["paged_decode"], last["contiguous_decode"]))
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    med_wall = {k: statistics.median(v) for k, v in wall.items()}

    def token_ratio(c):
        return n * (args.prompt + c) / (args.prompt + n * c)

    sweep = []
    for length in args.sweep:  # one run each: how the end-to-end ratio depends on completion length
        comps = make_completions(length)
        c_fork = timed(lambda: score_forked(model, prompt, comps)).cpu_seconds
        c_re = timed(lambda: score_reencoded(model, prompt, comps)).cpu_seconds
        sweep.append({"completion_tokens": length, "forked_cpu_s": c_fork, "reencoded_cpu_s": c_re,
                      "ratio": c_re / c_fork, "token_ratio": token_ratio(length)})
    ratios = {
        "reencoded_over_forked_cpu": med_cpu["reencoded"] / med_cpu["forked"],
        "reencoded_over_forked_wall": med_wall["reencoded"] / med_wall["forked"],
        "tokens_reencoded_over_forked": token_ratio(args.completion_tokens),
        "prompt_prefills_reencoded_over_forked": float(n),
        "paged_over_contiguous_decode_cpu": med_cpu["paged_decode"] / med_cpu["contiguous_decode"],
    }
    result = {
        "benchmark": "prefix_caching",
        "model": f"GPT-2 small shape, random weights, {num_parameters(model):,} parameters, fp32",
        "prompt_tokens": args.prompt,
        "completions": n,
        "completion_tokens": args.completion_tokens,
        "decode_tokens": args.decode_tokens,
        "repeats": args.repeats,
        "tokens_through_model": {"forked": args.prompt + n * args.completion_tokens,
                                 "reencoded": n * (args.prompt + args.completion_tokens)},
        "max_abs_logit_diff_forked_vs_reencoded": max_abs_diff,
        "paged_decode_tokens_identical": same_tokens,
        "median_cpu_seconds": med_cpu,
        "median_wall_seconds": med_wall,
        "ratios": ratios,
        "completion_length_sweep": sweep,
    }
    write_result(args.out, result)
    print(f"{'variant':<22}{'median CPU s':>14}{'median wall s':>15}")
    for k in runs:
        print(f"{k:<22}{med_cpu[k]:>14.2f}{med_wall[k]:>15.2f}")
    for k, v in ratios.items():
        print(f"{k:<40}{v:>8.2f}x")
    print(f"{'completion tokens':<20}{'re-encoded/forked':>18}{'token ratio':>13}")
    for row in sweep:
        print(f"{row['completion_tokens']:<20}{row['ratio']:>18.2f}{row['token_ratio']:>13.2f}")
    print(f"max |logit diff| forked vs re-encoded: {max_abs_diff:.2e}; paged decode identical: {same_tokens}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
