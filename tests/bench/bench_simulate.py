"""Benchmark: the simulated clock against the CPU engine, and against published GPU runs.

    .venv/bin/python tests/bench/bench_simulate.py [--part cpu|published|all] [--repeats 3]

cpu: calibrate `simulate.fit_cpu` on the CPU engine's measured steps (offline runs, CPU-time
clock, tiny target model of chapter 6), then sweep Poisson arrival rates: the engine measured
(median of `--repeats` runs) against the same scheduler on the simulated clock; throughput and
p50/p90 TTFT and TPOT with the relative error. Writes outputs/benchmarks/simulate_cpu.json.

published: fit the GPU efficiency factors on two published runs (one decode-bound, one
prefill-bound), then predict held-out published runs (code/inferbook/data/published_runs.json)
and print predicted vs published throughput. Writes outputs/benchmarks/simulate_published.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from inferbook import simulate as sim
from inferbook import tiny_lm
from inferbook.engine import mixed_workload, serve
from inferbook.models import model

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "outputs" / "benchmarks"
WORKLOAD = dict(prompt_len=(8, 32), mean_output=24.0, max_output=96)
ENGINE = dict(num_blocks=160, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024)
RATES = [50.0, 100.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0]
METRICS = [("ttft", 50), ("ttft", 90), ("tpot", 50), ("tpot", 90)]


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__, "torch_threads": 1,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def summary(result) -> dict:
    out = {"throughput_tok_s": result.throughput, "steps": result.steps,
           "preemptions": result.preemptions}
    for m, q in METRICS:
        out[f"{m}_p{q}_s"] = result.percentile(m, q)
    return out


def calibrate(target, prompts) -> tuple[sim.CostModel, dict]:
    """Fit the CPU constants on offline runs (all requests at t = 0) at three batch limits."""
    shapes, seconds, runs = [], [], []
    for seed, max_seqs, chunked in ((1, 4, False), (2, 16, False), (3, 32, True)):
        cfg = dict(ENGINE, max_num_seqs=max_seqs, chunked_prefill=chunked)
        if chunked:
            cfg["max_num_batched_tokens"] = 64
        reqs = mixed_workload(96, prompts=prompts, seed=seed, **WORKLOAD)
        result = serve(target, reqs, clock="cpu", **cfg)
        steps = sim.step_shapes(reqs, **cfg)
        if len(steps) != result.steps:
            raise RuntimeError(f"engine took {result.steps} steps, the simulated scheduler {len(steps)}")
        times = np.diff([0.0] + [s.time for s in result.timeline]).tolist()
        shapes += steps
        seconds += times
        runs.append({"seed": seed, "max_num_seqs": max_seqs, "chunked_prefill": chunked,
                     "steps": result.steps, "same_steps": True})
    cost = sim.fit_cpu(shapes, seconds, target.config)
    predicted = np.array([cost.step_time(s) for s in shapes])
    measured = np.array(seconds)
    fit = {"runs": runs, "n_steps": len(shapes),
           "step_overhead_s": cost.eff.step_overhead_s, "seq_overhead_s": cost.eff.seq_overhead_s,
           "achieved_flops": cost.achieved_flops,
           "step_time_median_abs_rel_error": float(np.median(np.abs(predicted / measured - 1))),
           "total_time_rel_error": float(predicted.sum() / measured.sum() - 1)}
    return cost, fit


def bench_cpu(repeats: int, n_requests: int) -> dict:
    torch.set_num_threads(1)
    target = tiny_lm.load("target")
    prompts = tiny_lm.prompt_windows(64, 64, seed=0)
    start = time.perf_counter()
    cost, fit = calibrate(target, prompts)
    print(f"fit on {fit['n_steps']} engine steps: overhead {fit['step_overhead_s'] * 1e3:.3f} ms/step + "
          f"{fit['seq_overhead_s'] * 1e6:.1f} µs/seq + FLOPs / {fit['achieved_flops'] / 1e9:.2f} GFLOP/s; "
          f"median step error {fit['step_time_median_abs_rel_error']:.1%}")
    rows = []
    print(f"\n{'rate':>6}{'':>4}{'tok/s':>8}" + "".join(f"{m.upper()} p{q:<6}" for m, q in METRICS))
    for rate in RATES:
        reqs = mixed_workload(n_requests, prompts=prompts, seed=0, rate=rate, **WORKLOAD)
        runs = [summary(serve(target, reqs, clock="cpu", **ENGINE)) for _ in range(repeats)]
        measured = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        spread = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in runs[0]}
        simulated = summary(sim.simulate(reqs, cost, **ENGINE))
        error = {k: simulated[k] / measured[k] - 1 for k in measured if k not in ("steps", "preemptions")}
        rows.append({"rate_req_s": rate, "measured": measured, "measured_min_max": spread,
                     "simulated": simulated, "relative_error": error})
        for label, d in (("meas", measured), ("sim", simulated)):
            print(f"{rate:>6.0f}{label:>6}{d['throughput_tok_s']:>8.0f}"
                  + "".join(f"{d[f'{m}_p{q}_s'] * 1e3:>9.2f}ms" for m, q in METRICS))
        print(f"{'':>6}{'err':>6}{error['throughput_tok_s']:>+8.1%}"
              + "".join(f"{error[f'{m}_p{q}_s']:>+11.1%}" for m, q in METRICS))
    errors = [abs(e) for r in rows for e in r["relative_error"].values()]
    print(f"\nabs relative error over the sweep: median {np.median(errors):.1%}, max {max(errors):.1%}; "
          f"{time.perf_counter() - start:.0f} s")
    return {"benchmark": "simulate_cpu", "machine": machine(), "workload": {**WORKLOAD, "n_requests": n_requests,
            "arrivals": "Poisson, rate per CPU second"}, "engine": ENGINE, "repeats": repeats,
            "clock": "cpu (time.process_time, one torch thread)", "fit": fit, "rows": rows,
            "abs_rel_error_median": float(np.median(errors)), "abs_rel_error_max": float(max(errors))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["cpu", "published", "all"], default="all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=128)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.part in ("cpu", "all"):
        result = bench_cpu(args.repeats, args.requests)
        (OUT / "simulate_cpu.json").write_text(json.dumps(result, indent=2))
        print(f"wrote {OUT / 'simulate_cpu.json'}")
    if args.part in ("published", "all"):
        result = bench_published()
        (OUT / "simulate_published.json").write_text(json.dumps(result, indent=2))
        print(f"wrote {OUT / 'simulate_published.json'}")


if __name__ == "__main__":
    main()
