"""Benchmark results of the FlashAttention kernel: the FLOP convention, reading and plotting.

- `benchmark_flops(batch, heads, seq_len, head_dim, causal)` -> FLOPs used for TFLOP/s.
- `load_benchmark_results(folder)` -> the parsed `flash_triton_*.json` runs.
- `benchmark_label(run)` -> one line of provenance; `plot_benchmark_results(run, ...)` -> a figure.

Written by tests/bench/bench_triton_flash.py; no Triton needed to read or plot them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import validate
from .masks import causal_flag

__all__ = ["benchmark_flops", "load_benchmark_results", "benchmark_label", "plot_benchmark_results"]


def benchmark_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool) -> float:
    """Return the FLOPs used to report attention TFLOP/s: 4·B·H·N²·d, halved when causal.

    Two matmuls (Q K^T and P V) of 2·N²·d FLOPs per head; halving for causal is the reporting
    convention of Triton's fused-attention tutorial and flash-attn's benchmarks. The exact
    count of visible (query, key) pairs, `inferbook.flash.attention_flops`, is (N+1)/(2N) of
    the full count: a little more than half.
    """
    for name, value in (("batch", batch), ("heads", heads), ("seq_len", seq_len),
                        ("head_dim", head_dim)):
        validate.positive_int(name, value)
    causal = causal_flag(causal)
    flops = 4.0 * batch * heads * seq_len * seq_len * head_dim
    return flops / 2 if causal else flops


def load_benchmark_results(folder: str | os.PathLike) -> list[dict]:
    """Return the parsed `flash_triton_*.json` files in `folder`, sorted by name ([] if none).

    Each must have the keys written by tests/bench/bench_triton_flash.py: "machine" (with
    "gpu", "driver", "torch", "triton", "date", ...) and "results" (a list of rows).
    """
    if not isinstance(folder, (str, os.PathLike)):
        raise validate.ArgumentTypeError(f"folder must be a path; got {type(folder).__name__}")
    runs = []
    for path in sorted(Path(folder).glob("flash_triton_*.json")):
        data = json.loads(path.read_text())
        missing = {"machine", "results"} - set(data)
        if missing:
            raise ValueError(f"{path.name}: missing keys {sorted(missing)}")
        data["path"] = path.name
        runs.append(data)
    return runs


def benchmark_label(run: dict) -> str:
    """Return the one-line provenance of a benchmark run: GPU, driver, versions, date."""
    m = run["machine"]
    return (f"{m['gpu']} (sm{m.get('capability', '?')}), driver {m.get('driver', '?')}, "
            f"torch {m.get('torch', '?')}, triton {m.get('triton', '?')}, "
            f"flash-attn {m.get('flash_attn') or 'not installed'}, {m.get('date', '?')}")


def plot_benchmark_results(run: dict, head_dim: int | None = None, causal: bool = False):
    """Return a matplotlib figure: TFLOP/s and peak memory vs N, one line per method."""
    import matplotlib.pyplot as plt

    rows = [r for r in run["results"] if r.get("causal") == causal and r.get("status") == "ok"]
    dims = sorted({r["head_dim"] for r in rows})
    if head_dim is None and dims:
        head_dim = dims[0]
    rows = [r for r in rows if r["head_dim"] == head_dim]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for method in sorted({r["method"] for r in rows}):
        pts = sorted((r["seq_len"], r["tflops"], r["peak_mem_bytes"]) for r in rows
                     if r["method"] == method)
        ns = [p[0] for p in pts]
        ax_t.plot(ns, [p[1] for p in pts], marker="o", label=method)
        ax_m.plot(ns, [p[2] / 2**20 for p in pts], marker="o", label=method)
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    ax_t.set_ylabel("forward TFLOP/s")
    ax_m.set_ylabel("peak extra memory (MiB)")
    ax_m.set_yscale("log")
    ax_t.legend(fontsize=8)
    fig.suptitle(f"{benchmark_label(run)}\nhead_dim={head_dim}, causal={causal}", fontsize=9)
    fig.tight_layout()
    return fig
