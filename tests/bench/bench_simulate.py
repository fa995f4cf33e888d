"""Benchmark: the simulated clock against the CPU engine, and against published GPU runs.

    .venv/bin/python tests/bench/bench_simulate.py [--part cpu|published|all] [--repeats 3]

cpu: calibrate `cost_model.fit_cpu` on the CPU engine's measured steps (offline runs, CPU-time
clock, tiny target model of chapter 6), then sweep Poisson arrival rates: the engine measured
(median of `--repeats` runs) against the same scheduler on the simulated clock; throughput and
p50/p90 TTFT and TPOT (`inferbook.metrics`) with the relative error, reported apart: latency at
every rate, throughput where the engine saturates (below that it equals the offered load and
says nothing about the model), the per-step fit error and the worst cases.
Writes outputs/benchmarks/simulate_cpu.json.

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
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from inferbook import cost_model, sizing, tiny_lm, workload
from inferbook import simulate as sim
from inferbook.engine import serve
from inferbook.hardware import gpu
from inferbook.models import model
from inferbook.workload import mixed_workload

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "outputs" / "benchmarks"
WORKLOAD = dict(prompt_len=(8, 32), mean_output=24.0, max_output=96)
ENGINE = dict(num_blocks=160, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024)
RATES = [50.0, 100.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0]
METRICS = [("ttft", 50), ("ttft", 90), ("tpot", 50), ("tpot", 90)]
SATURATED = 0.9   # a rate saturates the engine when it serves < 90 % of the offered tokens/s
GOAL = 0.10       # goal: p50 latency (TTFT, TPOT) error <= 10 % at every rate of the sweep


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__, "torch_threads": 1,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def summary(result) -> dict:
    """Return a run's `inferbook.metrics` summary (vLLM bench-serve fields) plus the legacy keys
    (throughput_tok_s, <m>_p<q>_s) the sweep compares, steps and preemptions."""
    out = {k: v for k, v in result.summary().items() if isinstance(v, (int, float))}
    out.update(throughput_tok_s=result.throughput, steps=result.steps,
               preemptions=result.preemptions)
    for m, q in METRICS:
        out[f"{m}_p{q}_s"] = result.percentile(m, q)
    return out


CALIBRATION = ((1, 4, False), (2, 16, False), (3, 32, True))  # (seed, max_num_seqs, chunked)


def calibration_run(target, prompts, i: int) -> tuple[list, list, dict]:
    """Run offline calibration workload i (all requests at t = 0, a batch limit of its own);
    return its step shapes, measured step CPU seconds and a record of the run."""
    seed, max_seqs, chunked = CALIBRATION[i % len(CALIBRATION)]
    cfg = dict(ENGINE, max_num_seqs=max_seqs, chunked_prefill=chunked)
    if chunked:
        cfg["max_num_batched_tokens"] = 64
    reqs = mixed_workload(96, prompts=prompts, seed=seed, **WORKLOAD)
    result = serve(target, reqs, clock="cpu", **cfg)
    steps = sim.step_shapes(reqs, **cfg)
    if len(steps) != result.steps:
        raise RuntimeError(f"engine took {result.steps} steps, the simulated scheduler {len(steps)}")
    times = np.diff([0.0] + [s.time for s in result.timeline]).tolist()
    return steps, times, {"seed": seed, "max_num_seqs": max_seqs, "chunked_prefill": chunked,
                          "steps": result.steps, "same_steps": True}


def fit_steps(target, shapes, seconds, runs) -> tuple[cost_model.CostModel, dict]:
    """Fit the CPU constants on the calibration runs' steps; return the model and the fit record."""
    cost = cost_model.fit_cpu(shapes, seconds, target.config)
    predicted = np.array([cost.step_time(s) for s in shapes])
    measured = np.array(seconds)
    fit = {"runs": runs, "n_steps": len(shapes),
           "step_overhead_s": cost.eff.step_overhead_s, "seq_overhead_s": cost.eff.seq_overhead_s,
           "achieved_flops": cost.achieved_flops,
           "step_time_median_abs_rel_error": float(np.median(np.abs(predicted / measured - 1))),
           "step_time_p90_abs_rel_error": float(np.percentile(np.abs(predicted / measured - 1), 90)),
           "total_time_rel_error": float(predicted.sum() / measured.sum() - 1)}
    return cost, fit


def bench_cpu(repeats: int, n_requests: int) -> dict:
    torch.set_num_threads(1)
    target = tiny_lm.load("target")
    prompts = tiny_lm.prompt_windows(64, 64, seed=0)
    start = time.perf_counter()
    # Calibration runs are interleaved with the sweep (one before each rate), so that both see
    # the same machine load: CPU time per step inflates with the neighbours' cache pressure.
    shapes, seconds, cal_runs, measured_runs = [], [], [], {}
    for i, rate in enumerate(RATES):
        steps, times, record = calibration_run(target, prompts, i)
        shapes, seconds = shapes + steps, seconds + times
        cal_runs.append(record)
        reqs = mixed_workload(n_requests, prompts=prompts, seed=0, rate=rate, **WORKLOAD)
        measured_runs[rate] = [summary(serve(target, reqs, clock="cpu", **ENGINE))
                               for _ in range(repeats)]
    cost, fit = fit_steps(target, shapes, seconds, cal_runs)
    print(f"fit on {fit['n_steps']} engine steps: overhead {fit['step_overhead_s'] * 1e3:.3f} ms/step + "
          f"{fit['seq_overhead_s'] * 1e6:.1f} µs/seq + FLOPs / {fit['achieved_flops'] / 1e9:.2f} GFLOP/s; "
          f"median step error {fit['step_time_median_abs_rel_error']:.1%}")
    compared = ["throughput_tok_s"] + [f"{m}_p{q}_s" for m, q in METRICS]
    rows = []
    print(f"\n{'rate':>6}{'':>4}{'tok/s':>8}" + "".join(f"{m.upper()} p{q:<6}" for m, q in METRICS))
    for rate in RATES:
        reqs = mixed_workload(n_requests, prompts=prompts, seed=0, rate=rate, **WORKLOAD)
        runs = measured_runs[rate]
        measured = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        spread = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in runs[0]}
        simulated = summary(sim.serve_simulated(reqs, cost, **ENGINE))
        error = {k: simulated[k] / measured[k] - 1 for k in compared}
        # the error against each measured run: how much of the error is the runs' own spread
        error_range = {k: [min(simulated[k] / r[k] - 1 for r in runs),
                           max(simulated[k] / r[k] - 1 for r in runs)] for k in compared}
        # offered load: the output tokens over the arrival window (a run also drains its queue
        # after the last arrival, so even an idle engine serves a little less than this)
        offered = sum(r.max_new_tokens for r in reqs) / reqs[-1].arrival_time
        rows.append({"rate_req_s": rate, "offered_tok_s": offered,
                     "saturated": measured["throughput_tok_s"] < SATURATED * offered,
                     "measured": measured, "measured_min_max": spread, "runs": runs,
                     "simulated": simulated, "relative_error": error,
                     "relative_error_min_max": error_range})
        for label, d in (("meas", measured), ("sim", simulated)):
            print(f"{rate:>6.0f}{label:>6}{d['throughput_tok_s']:>8.0f}"
                  + "".join(f"{d[f'{m}_p{q}_s'] * 1e3:>9.2f}ms" for m, q in METRICS))
        print(f"{'':>6}{'err':>6}{error['throughput_tok_s']:>+8.1%}"
              + "".join(f"{error[f'{m}_p{q}_s']:>+11.1%}" for m, q in METRICS)
              + ("  saturated" if rows[-1]["saturated"] else ""))

    def abs_errors(key, only=None):
        return [abs(r["relative_error"][key]) for r in rows if only is None or only(r)]

    def stats(errs):
        return {"median": float(np.median(errs)), "max": float(max(errs)), "n": len(errs)} if errs else None

    latency = {k: stats(abs_errors(k)) for k in compared[1:]}
    p50 = abs_errors("ttft_p50_s") + abs_errors("tpot_p50_s")
    worst = sorted(((abs(r["relative_error"][k]), r["rate_req_s"], k) for r in rows for k in compared),
                   reverse=True)[:3]
    summary_errors = {
        "latency_abs_error": latency,
        "latency_p50_abs_error_max": float(max(p50)),
        "goal_p50_latency_error_at_most": GOAL,
        "goal_met": bool(max(p50) <= GOAL),
        "throughput_abs_error_saturated": stats(abs_errors("throughput_tok_s", lambda r: r["saturated"])),
        "throughput_abs_error_unsaturated": stats(abs_errors("throughput_tok_s",
                                                             lambda r: not r["saturated"])),
        "worst": [{"abs_error": e, "rate_req_s": rate, "metric": k} for e, rate, k in worst],
        "steps_per_run": {"min": min(r["measured"]["steps"] for r in rows),
                          "max": max(r["measured"]["steps"] for r in rows)},
    }
    print(f"\np50 latency error: max {max(p50):.1%} (goal <= {GOAL:.0%}: "
          f"{'met' if max(p50) <= GOAL else 'NOT met'}); per-step fit error (median) "
          f"{fit['step_time_median_abs_rel_error']:.1%}; {time.perf_counter() - start:.0f} s")
    return {"benchmark": "simulate_cpu", "machine": machine(), "workload": {**WORKLOAD, "n_requests": n_requests,
            "arrivals": "Poisson, rate per CPU second"}, "engine": ENGINE, "repeats": repeats,
            "clock": "cpu (time.process_time, one torch thread)", "fit": fit, "rows": rows,
            "saturated_below_offered_fraction": SATURATED,
            "goal_text": "p50 TTFT and TPOT error <= 10 % at every rate of the sweep", **summary_errors}


# ---------------------------------------------------------------------------------------------
# published GPU runs

DATA = ROOT / "code" / "inferbook" / "data" / "published_runs.json"
KV_FRACTION = 0.95   # trtllm-bench: KV cache takes 0.95 of the memory left after the weights
PRIOR = cost_model.Efficiency(link_efficiency=0.7, allreduce_latency_s=10e-6)  # not fitted (see JSON)


def trtllm_bench_limits(num_blocks: int, block_size: int, isl: int, osl: int) -> tuple[int, int]:
    """Return (max batch size, max num tokens) as trtllm-bench's `finetune_setting` picks them:
    requests that fit the KV pool at ISL + OSL (cap 4096), rounded up; tokens = batch · (1 + ISL/OSL),
    cap 32768, rounded up (tensorrt_llm/bench/build/tuning.py)."""
    raw_bs = min(num_blocks * block_size / (isl + osl), 4096)
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * -(-raw_bs // 32))
    elif raw_bs < 1024:
        bs = 128 * -(-raw_bs // 128)
    else:
        bs = 256 * -(-raw_bs // 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * -(-raw_tok // 256))
    elif raw_tok < 8192:
        tok = 512 * -(-raw_tok // 512)
    else:
        tok = 1024 * -(-raw_tok // 1024)
    return int(bs), int(tok)


def scale_factor(max_seqs: int, min_seqs: int = 24) -> int:
    """Return the largest power of two k with max_seqs / k ≥ min_seqs (at least 1)."""
    k = 1
    while max_seqs / (2 * k) >= min_seqs:
        k *= 2
    return k


def unit_costs(run: dict, k: int | None = None) -> dict:
    """Simulate a published run's offline schedule once; return per-step terms at efficiency 1.

    A cheaper path with the same schedule: with fixed lengths and every request queued at t = 0,
    k identical copies of a run with 1/k of the requests, batch limit, token budget and KV pool
    take the steps of the whole run. So the scheduler runs on 1/k of everything and each step
    is costed with its shapes repeated k times (`tests/test_simulate.py` checks the equivalence).
    """
    spec = model(run["model"])
    block_size = 16
    # the published engines' pool (trtllm-bench, SGLang, MLPerf), not vLLM's start-up budget: the
    # memory after a reserve and the weights, in one-block sequences (sizing.max_batch)
    num_blocks = sizing.max_batch(spec, gpu(run["gpu"]), run["tp"], ctx_tokens=block_size,
                                  kv_dtype=run["kv_dtype"], weight_dtype=run["weight_dtype"],
                                  reserve_fraction=run.get("reserve_fraction", 1 - KV_FRACTION))
    max_seqs, max_tokens = trtllm_bench_limits(num_blocks, block_size, run["prompt_tokens"], run["output_tokens"])
    # runs that state their own limits (SGLang, MLPerf) use them instead of trtllm-bench's
    if "max_num_seqs" in run:
        # capped at what the KV pool holds at full length: TensorRT-LLM's default admission
        # (guaranteed no eviction) and SGLang's reservation of output tokens admit no more, while
        # this book's scheduler would admit them and preempt
        max_seqs = min(run["max_num_seqs"],
                       num_blocks // -(-(run["prompt_tokens"] + run["output_tokens"]) // block_size))
    max_tokens = run.get("max_num_batched_tokens", max_tokens)
    replicas = run.get("replicas", 1)   # identical replicas, requests split evenly: one simulated
    k = k or scale_factor(max_seqs)
    n = -(-run["num_requests"] // (k * replicas))
    reqs = workload.fixed_workload(n, run["prompt_tokens"], run["output_tokens"], seed=0)
    shapes = sim.step_shapes(reqs, num_blocks=num_blocks // k, block_size=block_size,
                             max_num_seqs=max_seqs // k, max_num_batched_tokens=max_tokens // k,
                             chunked_prefill=True)
    unit = cost_model.CostModel.for_gpu(spec, gpu(run["gpu"]), run["tp"], cost_model.Efficiency(1.0, 1.0, 1.0, 0.0, 0.0, 0.0),
                                 run["kv_dtype"], run["weight_dtype"])
    terms = np.array([[c.compute_s, c.memory_s, c.comm_s] for c in (unit.cost(s * k) for s in shapes)])
    latency_steps = 2 * spec.num_hidden_layers * (run["tp"] > 1)
    return {"terms": terms, "allreduces_per_step": latency_steps,
            "output_tokens": replicas * n * k * run["output_tokens"],
            "n_requests": replicas * n * k, "scale_k": k, "replicas": replicas, "max_num_seqs": max_seqs, "max_num_batched_tokens": max_tokens,
            "num_blocks": num_blocks, "steps": len(shapes),
            "mean_batch": float(np.mean([len(s) * k for s in shapes]))}


def predict(u: dict, eff: cost_model.Efficiency) -> tuple[float, dict]:
    """Return output tokens/s of a recorded schedule at efficiency `eff`, and the time shares."""
    c, m, k = u["terms"].T
    compute, memory = c / eff.flops_efficiency, m / eff.bandwidth_efficiency
    comm = k / eff.link_efficiency + u["allreduces_per_step"] * eff.allreduce_latency_s
    step = eff.step_overhead_s + np.maximum(compute, memory) + comm
    total = step.sum()
    shares = {"compute-bound steps": float(step[compute >= memory].sum() / total),
              "memory-bound steps": float(step[compute < memory].sum() / total),
              "all-reduce": float(comm.sum() / total)}
    return u["output_tokens"] / total, shares


def bench_published() -> dict:
    data = json.loads(DATA.read_text())
    start = time.perf_counter()
    units = {}
    for run in data["runs"]:
        units[run["id"]] = unit_costs(run)
        print(f"recorded {run['id']}: {units[run['id']]['steps']} steps, mean batch "
              f"{units[run['id']]['mean_batch']:.0f} ({time.perf_counter() - start:.0f} s)")
    fit_runs = [r for r in data["runs"] if r["role"] == "fit"]
    grid = np.round(np.arange(0.20, 1.0001, 0.01), 2)
    best = None
    for fe in grid:   # least squares in log throughput over the fit runs
        for be in grid:
            eff = replace(PRIOR, flops_efficiency=float(fe), bandwidth_efficiency=float(be))
            err = sum(np.log(predict(units[r["id"]], eff)[0] / r["output_tok_s"]) ** 2 for r in fit_runs)
            if best is None or err < best[0]:
                best = (err, eff)
    eff = best[1]
    print(f"\nfitted on {len(fit_runs)} runs: flops_efficiency {eff.flops_efficiency:.2f}, "
          f"bandwidth_efficiency {eff.bandwidth_efficiency:.2f} (prior: link {eff.link_efficiency}, "
          f"all-reduce latency {eff.allreduce_latency_s * 1e6:.0f} µs, step overhead 0)")
    points = []
    print(f"\n{'run':<28}{'role':<10}{'published':>10}{'predicted':>10}{'error':>8}  main term")
    for run in data["runs"]:
        u = units[run["id"]]
        tput, shares = predict(u, eff)
        err = tput / run["output_tok_s"] - 1
        main = max(shares, key=shares.get)
        band = None
        if "assumed" in run:   # the assumed prompt length halved and doubled
            band = [predict(unit_costs(dict(run, prompt_tokens=max(1, round(run["prompt_tokens"] * f)))),
                            eff)[0] for f in (0.5, 2.0)]
        points.append({**run, "predicted_tok_s": tput, "relative_error": err, "time_shares": shares,
                       "predicted_band_prompt_x0.5_x2": band,
                       **{k: u[k] for k in ("n_requests", "scale_k", "max_num_seqs", "max_num_batched_tokens",
                                            "num_blocks", "steps", "mean_batch", "replicas")}})
        print(f"{run['id']:<28}{run['role']:<10}{run['output_tok_s']:>10,.0f}{tput:>10,.0f}{err:>+8.1%}  "
              f"{main} {shares[main]:.0%}" + (f"  (prompt x0.5..x2: {band[0]:,.0f}..{band[1]:,.0f})"
                                               if band else ""))
    held = [abs(p["relative_error"]) for p in points if p["role"] == "held-out"]
    print(f"held-out abs error: median {np.median(held):.1%}, max {max(held):.1%}; "
          f"{time.perf_counter() - start:.0f} s")
    return {"benchmark": "simulate_published", "machine": machine(), "data": str(DATA.relative_to(ROOT)),
            "fitted_efficiency": asdict(eff), "fit_grid": [float(grid[0]), float(grid[-1]), 0.01],
            "kv_fraction": KV_FRACTION, "points": points,
            "held_out_abs_error_median": float(np.median(held)), "held_out_abs_error_max": float(max(held))}


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
        # cost_model.FITTED loads the package's copy (an installed package has no outputs/)
        for folder in (OUT, ROOT / "code" / "inferbook" / "data"):
            (folder / "simulate_published.json").write_text(json.dumps(result, indent=2))
            print(f"wrote {folder / 'simulate_published.json'}")


if __name__ == "__main__":
    main()
