"""Benchmark: static vs continuous batching, and chunked prefill one knob at a time, in CPU time.

1. Static vs continuous: the continuous-batching chapter's workload (128 requests, prompts of
   8–32 tokens, all at t = 0) through both policies, alternated `--repeats` times; per run,
   throughput (output tokens per CPU second) and TPOT p50/p90. Every run is kept, so the chapter
   shows the median ratio with its spread.

2. Chunked prefill: the chapter's long-prompt workload (48 requests, prompts of 32–64
tokens, at most 60 output tokens, seed 3) through `inferbook.engine` with the tiny trained target,
in four configurations that differ from the one before by one knob:

    A  max_num_batched_tokens=1024, chunked_prefill=False   (the chapter's engine)
    B  max_num_batched_tokens=64,   chunked_prefill=False   (only the budget changes)
    C  max_num_batched_tokens=64,   chunked_prefill=True    (only chunking changes)
    D  max_num_batched_tokens=32,   chunked_prefill=True    (only the budget changes)

Each configuration runs `--repeats` times, interleaved, timed in CPU seconds of this process
(`clock="cpu"`, one torch thread). Per run it records TPOT (per request: mean gap between its
output tokens) p50/p90, the duration of steps that carry decode tokens (the inter-token gap every
running sequence sees) p50/p90/max, TTFT p50/p90 and throughput, and the run's
`inferbook.metrics` summary (TTFT, TPOT, ITL, E2E: mean, median, p90, p99, as vLLM's
`vllm bench serve` defines them). The JSON keeps every run, so the chapter shows medians with
their spread.

    .venv/bin/python tests/bench/bench_ch06_scheduling.py [--repeats 7] [--threads 1]

Writes outputs/benchmarks/ch06_scheduling.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
from pathlib import Path

import numpy as np
import torch

from inferbook import tiny_lm
from inferbook.engine import serve
from inferbook.workload import mixed_workload

ROOT = Path(__file__).resolve().parents[2]
SERVING = dict(n_requests=128, prompt_len=(8, 32), mean_output=24.0, max_output=96, seed=0)
SERVING_ENGINE = dict(num_blocks=160, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024)
WORKLOAD = dict(n_requests=48, prompt_len=(32, 64), max_output=60, seed=3)
ENGINE = dict(num_blocks=160, block_size=16, max_num_seqs=16)
CONFIGS = {
    "A": dict(max_num_batched_tokens=1024, chunked_prefill=False),
    "B": dict(max_num_batched_tokens=64, chunked_prefill=False),
    "C": dict(max_num_batched_tokens=64, chunked_prefill=True),
    "D": dict(max_num_batched_tokens=32, chunked_prefill=True),
}


def workload():
    """Return the chapter's long-prompt requests (same call as the notebook)."""
    n = WORKLOAD["n_requests"]
    prompts = tiny_lm.prompt_windows(64, 64, seed=WORKLOAD["seed"])
    return mixed_workload(n, prompts=prompts, prompt_len=WORKLOAD["prompt_len"],
                          max_output=WORKLOAD["max_output"], seed=WORKLOAD["seed"])


def serving_workload():
    """Return the chapter's main workload (same call as the notebook and bench_serving.py)."""
    kw = {k: v for k, v in SERVING.items() if k != "n_requests"}
    return mixed_workload(SERVING["n_requests"], prompts=tiny_lm.prompt_windows(64, 64, seed=0), **kw)


def static_vs_continuous(target, repeats: int) -> dict:
    """Alternate both policies `repeats` times (CPU clock); keep every run's numbers."""
    requests = serving_workload()
    runs = {"static": [], "continuous": []}
    outputs = {}
    for _ in range(repeats):
        for policy in runs:
            r = serve(target, requests, policy=policy, clock="cpu", **SERVING_ENGINE)
            outputs[policy] = r.outputs
            runs[policy].append({"throughput_tok_cpu_s": r.throughput,
                                 "tpot_p50_s": r.percentile("tpot", 50),
                                 "tpot_p90_s": r.percentile("tpot", 90),
                                 "ttft_p50_s": r.percentile("ttft", 50),
                                 "metrics": r.summary()})
    out = {"workload": SERVING, "engine": SERVING_ENGINE,
           "same_outputs": outputs["static"] == outputs["continuous"]}
    for policy, rs in runs.items():
        out[policy] = {"runs": rs, "median": {k: statistics.median(r[k] for r in rs)
                                              for k in rs[0] if k != "metrics"}}
    # ratio per alternated pair, so each ratio compares runs made under the same load
    out["throughput_ratio_per_pair"] = [c["throughput_tok_cpu_s"] / s["throughput_tok_cpu_s"]
                                        for s, c in zip(runs["static"], runs["continuous"])]
    out["tpot_p50_ratio_per_pair"] = [c["tpot_p50_s"] / s["tpot_p50_s"]
                                      for s, c in zip(runs["static"], runs["continuous"])]
    return out


def one_run(target, requests, config: dict) -> dict:
    """Serve once with CPU-time clock; return the run's latency statistics (seconds)."""
    result = serve(target, requests, clock="cpu", **ENGINE, **config)
    times = np.array([0.0] + [s.time for s in result.timeline])
    durations = np.diff(times)
    decode_steps = np.array([s.decode_tokens > 0 for s in result.timeline])
    gaps = durations[decode_steps]
    return {
        "steps": result.steps,
        "max_tokens_in_step": max(s.prefill_tokens + s.decode_tokens for s in result.timeline),
        "tpot_p50_s": result.percentile("tpot", 50),
        "tpot_p90_s": result.percentile("tpot", 90),
        "decode_step_p50_s": float(np.percentile(gaps, 50)),
        "decode_step_p90_s": float(np.percentile(gaps, 90)),
        "decode_step_max_s": float(gaps.max()),
        "ttft_p50_s": result.percentile("ttft", 50),
        "ttft_p90_s": result.percentile("ttft", 90),
        "throughput_tok_cpu_s": result.throughput,
        "metrics": result.summary(),  # inferbook.metrics (vLLM bench-serve fields), CPU seconds
        "outputs": result.outputs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "ch06_scheduling.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = tiny_lm.load("target")
    serving = static_vs_continuous(target, args.repeats)
    ratios = serving["throughput_ratio_per_pair"]
    print(f"continuous / static throughput (CPU time), per pair: "
          f"{', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}")
    tp = serving["tpot_p50_ratio_per_pair"]
    print(f"continuous / static TPOT p50, per pair: {', '.join(f'{x:.2f}' for x in tp)}")
    requests = workload()
    runs = {name: [] for name in CONFIGS}
    for _ in range(args.repeats):
        for name, config in CONFIGS.items():  # interleaved: load drifts hit every config alike
            runs[name].append(one_run(target, requests, config))
    reference = runs["A"][0]["outputs"]
    same = all(r["outputs"] == reference for rs in runs.values() for r in rs)
    configs = {}
    for name, rs in runs.items():
        keys = [k for k in rs[0] if k != "outputs"]
        configs[name] = {**CONFIGS[name],
                         "runs": [{k: r[k] for k in keys} for r in rs],
                         "median": {k: statistics.median(r[k] for r in rs)
                                    for k in keys if k != "metrics"}}
    print(f"{'':3}{'budget':>7}{'chunk':>6}{'steps':>6}{'TPOT p50 ms':>12}{'p90':>7}"
          f"{'decode step p90':>16}{'max':>7}{'TTFT p50 ms':>12}")
    for name, c in configs.items():
        m = c["median"]
        print(f"{name:3}{c['max_num_batched_tokens']:>7}{c['chunked_prefill']!s:>6}{m['steps']:>6.0f}"
              f"{1e3 * m['tpot_p50_s']:>12.2f}{1e3 * m['tpot_p90_s']:>7.2f}"
              f"{1e3 * m['decode_step_p90_s']:>16.2f}{1e3 * m['decode_step_max_s']:>7.2f}"
              f"{1e3 * m['ttft_p50_s']:>12.1f}")
    print(f"identical outputs in every run: {same}")
    result = {
        "benchmark": "ch06_scheduling",
        "machine": {"platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(),
                    "torch_threads": args.threads},
        "python": platform.python_version(), "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "clock": "cpu", "repeats": args.repeats,
        "static_vs_continuous": serving,
        "chunked_prefill": {"workload": WORKLOAD, "engine": ENGINE, "same_outputs": same,
                            "configs": configs},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
