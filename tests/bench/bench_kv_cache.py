"""Benchmark: naive vs KV-cached greedy decoding, preallocated vs concat cache, ours vs HF generate().

Runs on the CPU with a randomly initialised GPT-2-small-shaped model (no download), one torch
thread, timed in CPU seconds of the process (`time.process_time`: on a shared machine the wall
clock measures the neighbours too), prints a table of ratios measured side by side in one run,
and writes outputs/benchmarks/kv_cache.json. It also times chapter 1's mini model (the
`mini` section: naive and cached, `--mini-repeats` alternated runs, the time of every step of
every run), which the chapter's time-per-token figure reads.

    .venv/bin/python tests/bench/bench_kv_cache.py [--new-tokens 256] [--prompt 16] [--repeats 3]
                                                   [--mini-new-tokens 96] [--mini-repeats 5]
    .venv/bin/python tests/bench/bench_kv_cache.py --mini-only   # re-time only the mini model

`--mini-only` replaces the `mini` section of the existing JSON (which then records its own date
and command) and keeps the GPT-2-small measurements as they are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from bench_util import timed, utc_now, versions, write_result  # noqa: E402

from inferbook import decode
from inferbook.decode import generate_cached, generate_naive
from inferbook.gpt import GPT, GPTConfig, load_hf_gpt2, num_parameters
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


def mini_model() -> GPT:
    """Return chapter 1's mini model: GPT-2's vocabulary and context, 4 layers of width 256,
    weights drawn with std 0.1 (seed 0) so that greedy outputs vary."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_embd=256, n_layer=4, n_head=4)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.1)
    return model


def mini_section(prompt_tokens: int, new_tokens: int, repeats: int) -> dict:
    """Time the mini model's naive and cached decoders, alternated, `repeats` times each.

    Returns the CPU seconds of every whole run, their median ratio naive/cached, and the CPU
    seconds of every step of every run (`step_seconds`, [repeat][step]) for the figure: the
    decoders' step clock (`time.perf_counter` in `inferbook.decode`) reads the process's CPU
    time here, as the whole runs do, so a busy neighbour does not stretch a step."""
    model = mini_model()
    prompt = torch.randint(0, model.config.vocab_size, (1, prompt_tokens),
                           generator=torch.Generator().manual_seed(16))
    generate_cached(model, prompt, 8)  # warm-up
    seconds: dict[str, list[float]] = {"naive": [], "cached": []}
    steps: dict[str, list[list[float]]] = {"naive": [], "cached": []}
    same = True
    for _ in range(repeats):
        with mock.patch.object(decode.time, "perf_counter", time.process_time):
            slow = timed(lambda: generate_naive(model, prompt, new_tokens))
            fast = timed(lambda: generate_cached(model, prompt, new_tokens))
        same &= bool(torch.equal(slow.result.tokens, fast.result.tokens))
        for name, t in [("naive", slow), ("cached", fast)]:
            seconds[name].append(t.cpu_seconds)
            steps[name].append(t.result.step_seconds)
    ratios = [a / b for a, b in zip(seconds["naive"], seconds["cached"])]
    return {
        "model": f"chapter 1's mini GPT, {num_parameters(model):,} parameters, fp32",
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "tokens_identical": same,
        "cpu_seconds": seconds,
        "naive_over_cached": {"median": statistics.median(ratios), "min": min(ratios),
                              "max": max(ratios)},
        "step_seconds": steps,
        "step_clock": "cpu (time.process_time of the process, one torch thread)",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mini-new-tokens", type=int, default=96)
    ap.add_argument("--mini-repeats", type=int, default=5)
    ap.add_argument("--mini-only", action="store_true",
                    help="time only the mini model and replace the mini section of --out")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: on a shared machine, spinning OpenMP "
                         "threads that get descheduled make every small op slow)")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "kv_cache.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.mini_only:
        out = Path(args.out)
        if not out.is_file():
            ap.error(f"--mini-only updates an existing result, but --out {out} does not exist")
        result = json.loads(out.read_text())
        mini = mini_section(args.prompt, args.mini_new_tokens, args.mini_repeats)
        mini.update(date=utc_now(), command=" ".join(
            ["python", "tests/bench/bench_kv_cache.py", *sys.argv[1:]]))
        result["mini"] = mini
        write_result(out, result)
        m = mini["naive_over_cached"]
        print(f"mini model: naive/cached median {m['median']:.2f}x (min {m['min']:.2f}, "
              f"max {m['max']:.2f}); wrote {out}")
        return
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
    mini = mini_section(args.prompt, args.mini_new_tokens, args.mini_repeats)
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
        "mini": mini,
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
    m = mini["naive_over_cached"]
    print(f"mini model, {mini['new_tokens']} tokens, {mini['repeats']} runs: naive/cached median "
          f"{m['median']:.2f}x (min {m['min']:.2f}, max {m['max']:.2f}), identical {mini['tokens_identical']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
