"""Benchmark: plain attention vs the tiled NumPy FlashAttention forward, time and peak memory.

Both run side by side in one process on the CPU, float32, batch = heads = 1, head_dim 64,
N = 1K ... 8K, one BLAS thread for both, timed in CPU seconds of the process (so a busy machine
does not punish one of them more).
Peak memory is tracemalloc's peak during the call (NumPy reports its array buffers to it): the
score matrices for the plain computation, one tile plus the output for the tiled one. Prints a
table of ratios and writes outputs/benchmarks/flash_numpy.json.

    .venv/bin/python tests/bench/bench_flash_numpy.py [--sizes 1024 2048 4096 8192] [--repeats 3]
"""

from __future__ import annotations

import os

# Before NumPy loads: one BLAS thread, the same for both sides.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from inferbook.flash import attention_reference, flash_attention_forward  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def peak_bytes(fn) -> int:
    """Return the peak bytes allocated (tracemalloc) while fn() runs, its result included."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def seconds(fn) -> float:
    """Return the CPU seconds of this process during fn() (one BLAS thread: what the wall clock
    would read on an idle machine, and far steadier on a shared one)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--block-q", type=int, default=256)
    ap.add_argument("--block-k", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "flash_numpy.json"))
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        q, k, v = (rng.standard_normal((1, 1, n, args.head_dim)).astype(np.float32) for _ in range(3))
        variants = {
            "naive": lambda: attention_reference(q, k, v),
            "tiled": lambda: flash_attention_forward(q, k, v, block_q=args.block_q, block_k=args.block_k),
        }
        peak = {name: peak_bytes(fn) for name, fn in variants.items()}
        times = {name: [] for name in variants}
        for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
            for name, fn in variants.items():
                times[name].append(seconds(fn))
        o_naive, _ = variants["naive"]()
        o_tiled, _ = variants["tiled"]()
        median = {name: statistics.median(t) for name, t in times.items()}
        rows.append(
            {
                "n": n,
                "peak_bytes": peak,
                "median_seconds": median,
                "memory_ratio_naive_over_tiled": peak["naive"] / peak["tiled"],
                "time_ratio_tiled_over_naive": median["tiled"] / median["naive"],
                "output_bytes": int(o_tiled.nbytes),
                "max_abs_difference": float(np.abs(o_naive - o_tiled).max()),
            }
        )
        r = rows[-1]
        print(
            f"N={n:>5}  peak MiB naive {peak['naive'] / 2**20:8.1f}  tiled {peak['tiled'] / 2**20:6.2f}  "
            f"({r['memory_ratio_naive_over_tiled']:6.1f}x less)   s naive {median['naive']:6.3f}  "
            f"tiled {median['tiled']:6.3f}  (tiled/naive {r['time_ratio_tiled_over_naive']:.2f})",
            flush=True,
        )

    goal_row = next((r for r in rows if r["n"] == 4096), None)
    goal = None
    if goal_row is not None:
        goal = {
            "n": 4096,
            "memory_ratio_at_least": 20.0,
            "time_ratio_at_most": 1.5,
            "met": goal_row["memory_ratio_naive_over_tiled"] >= 20.0
            and goal_row["time_ratio_tiled_over_naive"] <= 1.5,
        }
        print(f"goal at N=4096 (>= 20x less memory, <= 1.5x the time): {'met' if goal['met'] else 'NOT met'}")

    result = {
        "benchmark": "flash_numpy",
        "what": "plain attention (materialises N x N scores) vs tiled FlashAttention-2 forward, NumPy, "
        "float32, batch = heads = 1, non-causal",
        "head_dim": args.head_dim,
        "block_q": args.block_q,
        "block_k": args.block_k,
        "repeats": args.repeats,
        "clock": "cpu (time.process_time of the process, one BLAS thread)",
        "rows": rows,
        "goal": goal,
        "machine": {
            "device": "cpu",
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "blas_threads": 1,
        },
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": _torch_version()},
        "date": datetime.date.today().isoformat(),
        "command": "python tests/bench/bench_flash_numpy.py --sizes "
        + " ".join(map(str, args.sizes))
        + f" --head-dim {args.head_dim} --block-q {args.block_q} --block-k {args.block_k} --repeats {args.repeats}",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


if __name__ == "__main__":
    main()
