"""Benchmark: continuous vs static batching, and speculative vs plain decoding, side by side.

Runs on the CPU with the tiny trained character-level models of `inferbook.tiny_lm` (target:
4 layers, draft: 1 layer), prints two tables and writes outputs/benchmarks/serving.json.

    .venv/bin/python tests/bench/bench_serving.py [--requests 128] [--repeats 3] [--threads 1]

Serving: the same seeded mixed-length workload (all requests at t = 0) through the same engine
with `policy="static"` and `policy="continuous"`, alternated `--repeats` times; throughput is
output tokens per wall-clock second, and per CPU second of this process (with one torch thread
that is what the wall clock reads on an idle machine; on a shared machine it is far steadier). Speculative: for each draft length k, the same prompts
decoded by `speculative_generate` and by `sample_generate` (target alone), alternated; the
speedup is the ratio of their total wall (and CPU) times. Temperature 1 (sampling) and 0 (greedy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from bench_util import repeat, versions, write_result  # noqa: E402

from inferbook import tiny_lm
from inferbook.engine import serve
from inferbook.kv_cache import KVCache
from inferbook.speculation_math import expected_tokens_per_pass
from inferbook.speculative import sample_generate, speculative_generate
from inferbook.workload import mixed_workload

WORKLOAD = dict(prompt_len=(8, 32), mean_output=24.0, max_output=96, seed=0)
ENGINE = dict(num_blocks=160, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024)


def corpus_prompts(n: int = 64, length: int = 64) -> list[list[int]]:
    """Return `n` windows of `tiny_lm.PROMPT_TEXT` (the workload slices its prompts from them)."""
    return tiny_lm.prompt_windows(n, length, seed=0)


def pass_seconds(model, new_tokens: int, context: int = 48, reps: int = 200) -> float:
    """Return the median CPU seconds of one cached forward pass adding `new_tokens` after `context`."""
    cache = KVCache.for_model(model.config, 1, context + new_tokens)
    x = torch.randint(0, model.config.vocab_size, (1, context + new_tokens))
    times = []
    with torch.inference_mode():
        model(x[:, :context], cache=cache, pos=0)
        for _ in range(reps):
            start = time.process_time()
            model(x[:, context:], cache=cache, pos=context)
            times.append(time.process_time() - start)
    return statistics.median(times)


def bench_serving(target, n_requests: int, repeats: int) -> dict:
    requests = mixed_workload(n_requests, prompts=corpus_prompts(), **WORKLOAD)
    runs = {"static": [], "continuous": []}
    cpu_runs = {"static": [], "continuous": []}
    outputs = {}
    for _ in range(repeats):
        for policy in runs:  # alternate so drifts in machine load hit both alike
            result = serve(target, requests, policy=policy, **ENGINE)
            runs[policy].append(result)
            outputs[policy] = result.outputs
            cpu_runs[policy].append(serve(target, requests, policy=policy, clock="cpu", **ENGINE))
    steps = {p: serve(target, requests, policy=p, clock="steps", **ENGINE) for p in runs}
    out = {"workload": {**WORKLOAD, "n_requests": n_requests, "arrivals": "all at t=0",
                        "output_tokens": sum(r.max_new_tokens for r in requests)},
           "engine": ENGINE, "same_outputs": outputs["static"] == outputs["continuous"]}
    for policy, results in runs.items():
        best = max(results, key=lambda r: r.throughput)
        out[policy] = {
            "throughput_tok_s": [r.throughput for r in results],
            "throughput_tok_s_median": statistics.median(r.throughput for r in results),
            "throughput_tok_cpu_s_median": statistics.median(r.throughput for r in cpu_runs[policy]),
            "makespan_s_median": statistics.median(r.makespan for r in results),
            "steps": steps[policy].steps,
            "throughput_tok_per_step": steps[policy].throughput,
            **{f"{m}_p{q}_s": best.percentile(m, q) for m in ("ttft", "tpot", "e2e") for q in (50, 90)},
        }
    out["ratio_throughput_wall"] = (out["continuous"]["throughput_tok_s_median"]
                                    / out["static"]["throughput_tok_s_median"])
    out["ratio_throughput_cpu"] = (out["continuous"]["throughput_tok_cpu_s_median"]
                                   / out["static"]["throughput_tok_cpu_s_median"])
    out["ratio_throughput_steps"] = (out["continuous"]["throughput_tok_per_step"]
                                     / out["static"]["throughput_tok_per_step"])
    return out


def bench_speculative(target, draft, ks, n_prompts: int, new_tokens: int, repeats: int) -> dict:
    prompts = [torch.tensor([p]) for p in tiny_lm.prompt_windows(n_prompts, 16, seed=1)]
    draft_pass = pass_seconds(draft, 1)
    target_pass = {n: pass_seconds(target, n) for n in range(1, max(ks) + 2)}
    out = {"n_prompts": n_prompts, "prompt_tokens": 16, "new_tokens": new_tokens,
           "draft_pass_cpu_s": draft_pass, "target_pass_cpu_s": target_pass,
           "cost_ratio_c": draft_pass / target_pass[1], "by_temperature": {}}
    for temperature in (1.0, 0.0):
        rows = []
        base = repeat(lambda: [sample_generate(target, p, new_tokens, temperature,
                                               torch.Generator().manual_seed(i))
                               for i, p in enumerate(prompts)], repeats)
        base_times, base_cpu = base.seconds, [t.cpu_seconds for t in base.timings]
        for k in ks:
            runs = repeat(lambda: [speculative_generate(target, draft, p, new_tokens, k, temperature,
                                                        torch.Generator().manual_seed(i))
                                   for i, p in enumerate(prompts)], repeats)
            times, cpu_times = runs.seconds, [t.cpu_seconds for t in runs.timings]
            results = runs.result
            rounds = [r for res in results for r in res.rounds]
            full = [n + 1 for kk, n in rounds if kk == k]
            betas = [b for res in results for b in res.betas]
            alpha = float(np.mean(betas))
            accepted = sum(n for _, n in rounds)
            tested = sum(min(n + 1, kk) for kk, n in rounds)
            measured = float(np.mean(full))
            predicted = expected_tokens_per_pass(alpha, k)
            # Speedup if the only costs were the passes: E[tokens] target-pass-times per round,
            # against one (k+1)-token target pass and k draft passes.
            round_cost = target_pass[k + 1] + k * draft_pass
            predicted_speedup = measured * target_pass[1] / round_cost
            rows.append({"k": k, "alpha_mean_beta": alpha, "acceptance_rate": accepted / tested,
                         "tokens_per_target_pass": measured, "predicted_tokens_per_pass": predicted,
                         "relative_error": measured / predicted - 1,
                         "target_passes": sum(r.target_passes for r in results),
                         "draft_passes": sum(r.draft_passes for r in results),
                         "seconds_median": statistics.median(times),
                         "speedup": statistics.median(base_times) / statistics.median(times),
                         "cpu_seconds_median": statistics.median(cpu_times),
                         "speedup_cpu": statistics.median(base_cpu) / statistics.median(cpu_times),
                         "predicted_speedup_pass_costs": predicted_speedup})
        out["by_temperature"][str(temperature)] = {"baseline_seconds_median": statistics.median(base_times),
                                                   "baseline_cpu_seconds_median": statistics.median(base_cpu),
                                                   "rows": rows}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ks", default="1,2,3,4,6,8")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "serving.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = tiny_lm.load("target"), tiny_lm.load("draft")

    serving = bench_serving(target, args.requests, args.repeats)
    print(f"\nServing {args.requests} mixed-length requests (tiny target, {args.threads} thread(s))")
    print(f"{'policy':<12}{'tok/s':>9}{'tok/step':>10}{'steps':>7}{'TTFT p50':>10}{'TPOT p50':>10}{'e2e p90':>9}")
    for policy in ("static", "continuous"):
        s = serving[policy]
        print(f"{policy:<12}{s['throughput_tok_s_median']:>9.0f}{s['throughput_tok_per_step']:>10.2f}"
              f"{s['steps']:>7}{s['ttft_p50_s']:>10.3f}{s['tpot_p50_s']:>10.4f}{s['e2e_p90_s']:>9.3f}")
    print(f"continuous / static throughput: {serving['ratio_throughput_wall']:.2f}x wall-clock, "
          f"{serving['ratio_throughput_cpu']:.2f}x CPU time, "
          f"{serving['ratio_throughput_steps']:.2f}x per step; same outputs: {serving['same_outputs']}")

    ks = [int(k) for k in args.ks.split(",")]
    spec = bench_speculative(target, draft, ks, args.prompts, args.new_tokens, args.repeats)
    print(f"\ncost of a draft pass / a target pass (CPU time): c = {spec['cost_ratio_c']:.2f}")
    for temperature, block in spec["by_temperature"].items():
        print(f"\nSpeculative decoding, temperature {temperature} ({args.prompts} prompts x {args.new_tokens} tokens)")
        print(f"{'k':>3}{'alpha':>8}{'tok/pass':>10}{'predicted':>11}{'rel.err':>9}{'speedup':>9}{'(cpu)':>7}"
              f"{'model':>7}")
        for r in block["rows"]:
            print(f"{r['k']:>3}{r['alpha_mean_beta']:>8.3f}{r['tokens_per_target_pass']:>10.3f}"
                  f"{r['predicted_tokens_per_pass']:>11.3f}{r['relative_error']:>+9.1%}{r['speedup']:>9.2f}"
                  f"{r['speedup_cpu']:>7.2f}{r['predicted_speedup_pass_costs']:>7.2f}")

    v = versions()
    result = {
        "benchmark": "serving",
        "python": v["python"], "torch": v["torch"],  # kept at the top level: chapter 6 reads them
        "models": {"target": tiny_lm.TARGET_CONFIG.__dict__, "draft": tiny_lm.DRAFT_CONFIG.__dict__},
        "serving": serving, "speculative": spec,
    }
    write_result(args.out, result)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
