"""Benchmark: naive vs KV-cached greedy decoding, preallocated vs concat cache, ours vs HF generate().

Runs on the CPU with a randomly initialised GPT-2-small-shaped model (no download), one torch
thread, timed in CPU seconds of the process (`time.process_time`: on a shared machine the wall
clock measures the neighbours too), prints a table of ratios measured side by side in one run,
and writes outputs/benchmarks/kv_cache.json.

    .venv/bin/python tests/bench/bench_kv_cache.py [--new-tokens 256] [--prompt 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from bench_util import timed, versions, write_result  # noqa: E402

from inferbook.decode import generate_cached, generate_naive
from inferbook.gpt import load_hf_gpt2, num_parameters
from inferbook.kv_cache import ConcatKVCache, KVCache

def cache_update_seconds(cache_type, config, n_tokens: int) -> float:
    """Return the time to append n_tokens positions, one at a time, to every layer of a cache.

    Isolates the cache's own cost from the model's: `ConcatKVCache` copies the whole cache at
    every step (O(n²) bytes in total), `KVCache` writes one slot in place.
    """
    cache = cache_type.for_model(config, 1, n_tokens)
    k = torch.randn(1, config.n_head, 1, config.head_dim)
    start = time.process_time()
    for pos in range(n_tokens):
        step = cache.begin_step(pos, 1)
        for layer in range(config.n_layer):
            cache.update(layer, k, k, pos)
        cache.end_step(step)
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: on a shared machine, spinning OpenMP "
                         "threads that get descheduled make every small op slow)")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "kv_cache.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config()).eval()  # GPT-2 small shape, random weights
    ours = load_hf_gpt2(hf)
    prompt = torch.randint(0, hf.config.vocab_size, (1, args.prompt))
    n = args.new_tokens

    def hf_generate():
        with torch.inference_mode():
            return hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               use_cache=True, attention_mask=torch.ones_like(prompt),
                               pad_token_id=0, eos_token_id=None)

    runs = {
        "cached_prealloc": lambda: generate_cached(ours, prompt, n, KVCache).tokens,
        "cached_concat": lambda: generate_cached(ours, prompt, n, ConcatKVCache).tokens,
        "hf_generate": hf_generate,
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    outputs = {}
    # Interleave the fast variants so machine noise hits them alike; naive (slow) runs once, in the middle.
    for r in range(args.repeats):
        for name, fn in runs.items():
            t = timed(fn)
            times[name].append(t.cpu_seconds)
            outputs[name] = t.result
        if r == args.repeats // 2:
            t = timed(lambda: generate_naive(ours, prompt, n))
            times["naive"], res = [t.cpu_seconds], t.result
            outputs["naive"] = res.tokens
            per_step_naive = res.step_seconds
    per_step_cached = generate_cached(ours, prompt, n).step_seconds

    n_ctx = ours.config.n_positions
    cache_only = {
        "tokens": n_ctx,
        "prealloc_seconds": statistics.median(cache_update_seconds(KVCache, ours.config, n_ctx) for _ in range(3)),
        "concat_seconds": statistics.median(cache_update_seconds(ConcatKVCache, ours.config, n_ctx) for _ in range(3)),
        "concat_bytes_copied": sum(t * 2 * ours.config.n_layer * ours.config.n_embd * 4 for t in range(1, n_ctx + 1)),
    }
    same = {k: bool(torch.equal(v, outputs["naive"])) for k, v in outputs.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    tok_s = {k: n / v for k, v in median.items()}
    ratios = {
        "cached_over_naive": tok_s["cached_prealloc"] / tok_s["naive"],
        "prealloc_over_concat": tok_s["cached_prealloc"] / tok_s["cached_concat"],
        "ours_over_hf": tok_s["cached_prealloc"] / tok_s["hf_generate"],
        "cache_only_concat_over_prealloc": cache_only["concat_seconds"] / cache_only["prealloc_seconds"],
    }
    result = {
        "benchmark": "kv_cache",
        "model": f"GPT-2 small shape, random weights, {num_parameters(ours):,} parameters, fp32",
        "prompt_tokens": args.prompt,
        "new_tokens": n,
        "repeats": args.repeats,
        "clock": "cpu (time.process_time of the process, one torch thread)",
        "tokens_identical_to_naive": same,
        "median_seconds": median,
        "tokens_per_second": tok_s,
        "ratios": ratios,
        "cache_only": cache_only,
        "per_step_seconds": {"naive": per_step_naive, "cached": per_step_cached},
        "versions": versions(transformers=transformers.__version__),
    }
    write_result(args.out, result)
    print(f"{'variant':<18}{'median s':>10}{'tok/s':>10}  identical")
    for k in ["naive", "cached_prealloc", "cached_concat", "hf_generate"]:
        print(f"{k:<18}{median[k]:>10.2f}{tok_s[k]:>10.1f}  {same[k]}")
    print(f"cache alone, {n_ctx} tokens x {ours.config.n_layer} layers: preallocated "
          f"{cache_only['prealloc_seconds']:.3f} s, concat {cache_only['concat_seconds']:.3f} s "
          f"({cache_only['concat_bytes_copied'] / 1e9:.1f} GB copied)")
    for k, v in ratios.items():
        print(f"{k:<22}{v:>8.2f}x")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
