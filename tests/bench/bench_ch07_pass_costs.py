"""Benchmark: CPU cost of one cached forward pass of the tiny target (1–9 new tokens) and draft.

The speculative-decoding chapter predicts its speedup from these costs. One timing of each is
noisy on a shared machine (a 9-token pass can come out cheaper than a 6-token one), so this
script measures them in `--rounds` interleaved rounds, each pass size in a shuffled order per
round, each round the median of `--reps` passes, and keeps every round. The chapter takes the
median over rounds, shows the spread, and fits t(n) = a + b·n by least squares.

    .venv/bin/python tests/bench/bench_ch07_pass_costs.py [--rounds 9] [--reps 60] [--threads 1]

Writes outputs/benchmarks/ch07_pass_costs.json (CPU seconds of this process, one torch thread).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import statistics
import time
from pathlib import Path

import torch

from inferbook import tiny_lm
from inferbook.kv_cache import KVCache

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 48  # tokens already cached before the timed pass (as in bench_serving.py)


def pass_seconds(model, new_tokens: int, reps: int) -> float:
    """Return the median CPU seconds of one cached pass adding `new_tokens` after CONTEXT."""
    cache = KVCache.for_model(model.config, 1, CONTEXT + new_tokens)
    x = torch.randint(0, model.config.vocab_size, (1, CONTEXT + new_tokens))
    times = []
    with torch.inference_mode():
        model(x[:, :CONTEXT], cache=cache, pos=0)
        for _ in range(reps):
            start = time.process_time()
            model(x[:, CONTEXT:], cache=cache, pos=CONTEXT)
            times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "ch07_pass_costs.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    target, draft = tiny_lm.load("target"), tiny_lm.load("draft")
    sizes = list(range(1, args.max_tokens + 1))
    order = random.Random(0)
    target_rounds = {n: [] for n in sizes}
    draft_rounds = []
    for _ in range(args.rounds):
        jobs = [("target", n) for n in sizes] + [("draft", 1)]
        order.shuffle(jobs)
        for name, n in jobs:
            if name == "target":
                target_rounds[n].append(pass_seconds(target, n, args.reps))
            else:
                draft_rounds.append(pass_seconds(draft, 1, args.reps))
    print(f"{'tokens':>6}{'median ms':>11}{'min':>8}{'max':>8}")
    for n in sizes:
        t = target_rounds[n]
        print(f"{n:>6}{1e3 * statistics.median(t):>11.3f}{1e3 * min(t):>8.3f}{1e3 * max(t):>8.3f}")
    print(f"{'draft':>6}{1e3 * statistics.median(draft_rounds):>11.3f}"
          f"{1e3 * min(draft_rounds):>8.3f}{1e3 * max(draft_rounds):>8.3f}")
    result = {
        "benchmark": "ch07_pass_costs",
        "machine": {"platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(),
                    "torch_threads": args.threads},
        "python": platform.python_version(), "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "clock": "cpu", "context_tokens": CONTEXT, "rounds": args.rounds, "reps_per_round": args.reps,
        "target_pass_cpu_s": {str(n): target_rounds[n] for n in sizes},
        "draft_pass_cpu_s": draft_rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
