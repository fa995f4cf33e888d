"""Chapter 4's figures and tables, drawn for the book's column, and its benchmark results.

The notebook computes; these functions draw what it computed (`inferbook.notebook`'s figure
rules: at most `COLUMN_WIDTH_IN` wide, no text under `MIN_TEXT_PT`, panels in rows).

- `gpu_memory_table(gpus)`, `plot_sram_vs_hbm(names, sram, hbm)`: the memory hierarchy.
- `plot_tile_diagram()`: where one program's tiles and running state live.
- `plot_tile_schedule(grid, block_m, block_n)`: the causal schedule of (Q tile, K/V tile) pairs.
- `source_block(src, start, end)`: an excerpt of a kernel's source, between two markers.
- `occupancy_table(fwd, pd)`, `paged_decode_table(rows)`, `versions_text(versions)`: tables.
- `plot_decode_roofline(gpus, points, on)`: decode and prefill on the roofline.
- `plot_split_error(splits, errors)`, `plot_split_programs(splits, kv_heads, gpus)`: split-KV.
- `decode_sliders(report, gpu_names)`: the decode-roofline widget (needs a running kernel).
- `benchmark_flops(...)`, `load_benchmark_results(folder)`, `benchmark_label(run)`,
  `plot_benchmark_results(run, ...)`: the GPU benchmark's JSON (tests/bench/bench_triton_flash.py
  writes it; no Triton needed to read or plot it).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from . import validate
from .masks import causal_flag
from .notebook import COLUMN_WIDTH_IN, html_table

__all__ = ["gpu_memory_table", "plot_sram_vs_hbm", "plot_tile_diagram", "plot_tile_schedule",
           "source_block", "occupancy_table", "paged_decode_table", "versions_text",
           "plot_decode_roofline", "plot_split_error", "plot_split_programs", "decode_sliders",
           "benchmark_flops", "load_benchmark_results", "benchmark_label",
           "plot_benchmark_results"]

HBM_COLOR, SRAM_COLOR, DONE_COLOR, HOT_COLOR = "#dfe7f2", "#fbe8c8", "#7fa7d9", "#c8553d"
STATE_COLOR, SCORE_COLOR = "#81b29a", "#f2cc8f"
SCHEDULE_COLORS = ("#eeeeee", "#f4a261", "#2a9d8f")  # skipped, masked, full


def _same_length(**columns) -> int:
    """Return the common length of the named sequences; raise naming them when they differ."""
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"expected sequences of one length; got {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError(f"expected at least one value in {', '.join(lengths)}")
    return n


# -- the memory hierarchy ------------------------------------------------------------------------

def gpu_memory_table(gpus):
    """Return an HTML table of the GPU presets' memories: HBM size and bandwidth, SMs, shared
    memory per SM and per block, how many times HBM holds all SMs' shared memory, the fp16
    tensor-core peak and the exponentials per second, each row with its source's key."""
    header = ["GPU", "arch", "HBM GB", "TB/s", "SMs", "KiB/SM", "KiB/block", "HBM/SRAM",
              "TFLOP/s", "exp T/s", "source"]
    rows = [[g.name, g.sm_arch, f"{g.hbm_bytes / 1e9:.0f}", f"{g.hbm_bytes_per_s / 1e12:.2f}",
             g.num_sms, f"{g.smem_bytes_per_sm / 1024:.0f}",
             f"{g.smem_bytes_per_block / 1024:.0f}",
             f"{g.hbm_bytes / (g.num_sms * g.smem_bytes_per_sm):,.0f}",
             f"{g.fp16_tensor_flops / 1e12:.0f}", f"{g.exp_per_s / 1e12:.2f}", g.cite]
            for g in gpus]
    return html_table(header, rows)


def plot_sram_vs_hbm(names, sram_bytes, hbm_bytes):
    """Return a bar chart (log scale) of on-chip shared memory summed over all SMs against HBM
    capacity per GPU, with the HBM/SRAM ratio written above each pair of bars."""
    import matplotlib.pyplot as plt

    n = _same_length(names=names, sram_bytes=sram_bytes, hbm_bytes=hbm_bytes)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.0))
    x = range(n)
    ax.bar([i - 0.2 for i in x], sram_bytes, 0.4, label="SRAM (all SMs)")
    ax.bar([i + 0.2 for i in x], hbm_bytes, 0.4, label="HBM")
    for i, s, h in zip(x, sram_bytes, hbm_bytes):
        ax.text(i, h * 1.6, f"{h / s:,.0f}×", ha="center")
    ax.set_yscale("log")
    ax.set_ylim(1e6, 1e14)
    ax.set_xticks(list(x), [name.replace(" ", "\n", 1) for name in names])
    ax.set_ylabel("bytes")
    ax.grid(False, axis="x")
    ax.legend(loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


def _box(ax, x, y, w, h, color, label="", text_color="black"):
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="#333333", lw=1))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", color=text_color)


def _arrow(ax, start, end, text="", at=None):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3,
                                 color="#333333"))
    if text:
        ax.text(*at, text, ha="center", va="center",
                bbox=dict(facecolor="white", edgecolor="none", pad=1))


def plot_tile_diagram():
    """Return the schematic of one program of the kernel: Q, K, V and O in HBM as columns of
    row tiles (blue: K/V tiles already folded in, red: the current ones); below, the program's
    SRAM with the Q tile (loaded once), the current K and V tiles, the score tile S and the
    running state m, ℓ and acc; arrows for what moves and when (O written once, at the end)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 6.2))
    ax.set_xlim(0, 5.6)
    ax.set_ylim(0, 6.2)
    ax.axis("off")
    # HBM: Q, K, V on the left, O on the right, each a column of five row tiles
    _box(ax, 0.1, 3.95, 5.4, 2.2, HBM_COLOR)
    ax.text(3.65, 5.05, "HBM", ha="center", va="center", weight="bold", fontsize=13)
    columns = {"Q": 0.35, "K": 1.35, "V": 2.35, "O": 4.55}
    for name, x0 in columns.items():
        ax.text(x0 + 0.3, 5.92, name, ha="center", va="center")
        for r in range(5):
            hot = r == 2 if name in "QO" else r == 3
            done = name in "KV" and r < 3
            color = HOT_COLOR if hot else (DONE_COLOR if done else "white")
            sub = "i" if name in "QO" else "j"
            _box(ax, x0, 5.45 - 0.34 * (r + 1) + 0.34, 0.6, 0.3, color,
                 f"${name}_{sub}$" if hot else "", "white")
    # SRAM of one program
    _box(ax, 0.1, 0.1, 5.4, 3.15, SRAM_COLOR)
    ax.text(2.8, 0.4, "SRAM of one program (one SM)", ha="center", va="center",
            weight="bold")
    _box(ax, 0.3, 1.55, 0.7, 1.2, HOT_COLOR, "$Q_i$", "white")
    _box(ax, 1.2, 2.2, 1.6, 0.55, HOT_COLOR, "$K_j^\\top$", "white")
    _box(ax, 1.2, 1.55, 1.6, 0.55, SCORE_COLOR, "$S = \\tau\\, Q_i K_j^\\top$")
    _box(ax, 3.0, 1.55, 0.7, 1.2, HOT_COLOR, "$V_j$", "white")
    _box(ax, 0.3, 0.8, 0.6, 0.5, STATE_COLOR, "$m$")
    _box(ax, 1.05, 0.8, 0.6, 0.5, STATE_COLOR, "$\\ell$")
    _box(ax, 1.8, 0.8, 1.9, 0.5, STATE_COLOR, "acc")
    _arrow(ax, (0.65, 3.95), (0.65, 2.75), "once", at=(0.65, 3.55))
    _arrow(ax, (1.65, 3.95), (1.95, 2.75), "tile j", at=(1.75, 3.55))
    _arrow(ax, (2.65, 3.95), (3.35, 2.75), "tile j", at=(2.95, 3.3))
    _arrow(ax, (3.7, 1.05), (4.85, 3.95), "at the end", at=(4.65, 2.4))
    # the picture fills its axes: a margin keeps the saved (tight, padded) PNG in the column
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.98)
    return fig


def plot_tile_schedule(grid, block_m: int, block_n: int):
    """Return the causal tile schedule as a picture: rows are Q tiles, columns K/V tiles;
    green (2) goes through the unmasked loop, orange (1) the masked one, grey (0) is never
    loaded. `grid` is the 2-D array of those codes that the notebook computed."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    validate.positive_int("block_m", block_m)
    validate.positive_int("block_n", block_n)
    if getattr(grid, "ndim", None) != 2 or not set(grid.ravel().tolist()) <= {0, 1, 2}:
        raise ValueError("grid must be a 2-D array of the codes 0 (skipped), 1 (masked) "
                         "and 2 (full)")
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.2))
    ax.imshow(grid, cmap=ListedColormap(SCHEDULE_COLORS), vmin=0, vmax=2)
    ax.set_xlabel(f"K/V tile j (BLOCK_N = {block_n})")
    ax.set_ylabel(f"Q tile i (BLOCK_M = {block_m})")
    ax.grid(False)
    kinds = [Patch(facecolor=c, edgecolor="#999999", label=k)
             for c, k in zip(SCHEDULE_COLORS[::-1], ("full", "masked", "skipped"))]
    ax.legend(handles=kinds, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def source_block(src: str, start_marker: str, end_marker: str | None = None) -> str:
    """Return the lines of `src` from the line holding `start_marker` up to (without) the next
    line holding `end_marker`, or to the end."""
    lines = src.splitlines()
    starts = [n for n, line in enumerate(lines) if start_marker in line]
    if not starts:
        raise ValueError(f"start_marker {start_marker!r} is not in the source")
    i = starts[0]
    ends = [n for n, line in enumerate(lines) if end_marker and end_marker in line and n > i]
    return "\n".join(lines[i:ends[0] if ends else len(lines)])


# -- tables of the compiled kernels --------------------------------------------------------------

def occupancy_table(fwd_rows: dict, pd_rows: dict, capabilities=None):
    """Return an HTML table, one row per GPU generation, of the prefill kernel's registers per
    thread, shared memory, programs per SM allowed by registers / shared memory / warps and
    resident, beside the decode kernel's registers, shared memory and resident programs.

    `fwd_rows` maps a capability ("sm90") to a row of flash_forward_aot.json, `pd_rows` to one
    of paged_decode_aot.json (the committed tables)."""
    capabilities = list(capabilities or fwd_rows)
    missing = [cc for cc in capabilities if cc not in fwd_rows or cc not in pd_rows]
    if missing:
        raise ValueError(f"no row for {missing} in both tables")
    header = ["arch", "prefill regs", "KiB", "per SM by regs/smem/warps", "per SM",
              "decode regs", "KiB", "per SM"]
    rows = []
    for cc in capabilities:
        f, p = fwd_rows[cc], pd_rows[cc]
        by = f["resident_per_sm"]
        rows.append([cc, f["registers"], f"{f['shared_bytes'] / 1024:.0f}",
                     f"{by['registers']} / {by['shared']} / {by['warps']}", by["resident"],
                     p["registers"], f"{p['shared_bytes'] / 1024:.0f}",
                     p["resident_per_sm"]["resident"]])
    return html_table(header, rows)


def paged_decode_table(rows):
    """Return an HTML table of the compiled paged-decode kernel per generation: shared memory
    against the per-block limit, registers per thread, spilled bytes, resident programs."""
    header = ["arch", "shared KiB", "limit KiB", "regs", "spills", "per SM"]
    return html_table(header, [[r["capability"], f"{r['shared_bytes'] / 1024:.1f}",
                                f"{r['smem_limit_bytes'] / 1024:.0f}", r["registers"],
                                r["spill_bytes"], r["resident_per_sm"]["resident"]]
                               for r in rows])


def versions_text(versions, width: int = 78) -> str:
    """Return the FlashAttention versions as text: per version its year and source key, then
    the hardware it targets, what changed, the speedup its paper reports, and its backward."""
    validate.positive_int("width", width)
    out = []
    for v in versions:
        major, minor = v.min_compute_capability
        out.append(f"{v.name} ({v.year}) [{v.cite}]")
        for label, text in (("hardware:", f"{v.hardware} (sm{major}{minor}+)"),
                            ("changed:", v.what_changed), ("reported:", v.reported_speedup),
                            ("backward:", "yes" if v.has_backward else "no")):
            out.append(textwrap.fill(text, width, initial_indent=f"  {label:<10}",
                                     subsequent_indent=" " * 12))
    return "\n".join(out)


# -- decoding ------------------------------------------------------------------------------------

def plot_decode_roofline(gpus, points: dict, on, intensities=None):
    """Return a log-log roofline: each GPU's attainable TFLOP/s against arithmetic intensity
    (`roofline.attainable_flops`, the model's roof), and the `points` ({label: FLOP/byte}) the
    notebook computed, placed on the roof of the GPU `on`."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .roofline import attainable_flops

    if not points:
        raise ValueError("points must name at least one {label: FLOP/byte}")
    xs = np.logspace(-1, 4, 200) if intensities is None else np.asarray(intensities)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.4))
    for g in gpus:
        ax.plot(xs, [attainable_flops(g, x) / 1e12 for x in xs], label=g.name)
    for (label, i), marker in zip(points.items(), "os^Dv"):
        y = attainable_flops(on, i) / 1e12
        ax.scatter([i], [y], marker=marker, zorder=3, s=60, color="black")
        right = i > (xs[0] * xs[-1]) ** 0.5  # in the right half: label to the left
        ax.annotate(label, (i, y), xytext=(-8 if right else 8, -6), textcoords="offset points",
                    ha="right" if right else "left", va="top",
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"attainable TFLOP/s (points: {on.name})")
    ax.legend(loc="lower right", title="roof of")
    fig.tight_layout()
    return fig


def plot_split_error(split_counts, errors):
    """Return the maximum error of float32 split-KV attention against the float64 reference
    for each number of splits S (log-log)."""
    import matplotlib.pyplot as plt

    _same_length(split_counts=split_counts, errors=errors)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.8))
    ax.plot(split_counts, errors, marker="o")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(1e-9, 1e-5)
    ax.set_xlabel("splits S")
    ax.set_ylabel("max |error| vs float64")
    fig.tight_layout()
    return fig


def plot_split_programs(split_counts, kv_heads: int, gpus):
    """Return the number of programs in a decode step's grid, `kv_heads` × S, against the
    number of splits S, with a dashed line at each GPU's number of SMs (GPUs with the same
    count share a line)."""
    import matplotlib.pyplot as plt

    validate.positive_int("kv_heads", kv_heads)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.2))
    ax.plot(split_counts, [kv_heads * s for s in split_counts], marker="o",
            label=f"{kv_heads} KV heads × S")
    by_sms: dict[int, list[str]] = {}
    for g in gpus:
        by_sms.setdefault(g.num_sms, []).append(g.name)
    counts = sorted(by_sms)
    for k, sms in enumerate(counts):
        ax.axhline(sms, ls="--", lw=1, color="gray")
        # neighbouring lines: the lower one's label goes under it, the others' above
        below = k + 1 < len(counts) and counts[k + 1] < 1.6 * sms
        ax.text(split_counts[0], sms * (0.93 if below else 1.07),
                f"{' / '.join(by_sms[sms])}: {sms} SMs", va="top" if below else "bottom")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("splits S")
    ax.set_ylabel("programs in the grid")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def decode_sliders(report, gpu_names, context=32_768, group=4, gpu_name="H100 SXM"):
    """Return ipywidgets sliders that call `report(context_tokens, group, gpu_name,
    cache_bytes)` on every change: context 1K–128K tokens, GQA group 1–16, a GPU of
    `gpu_names`, an fp16 or fp8 cache. Needs a running kernel to respond."""
    import ipywidgets as widgets

    if not callable(report):
        raise validate.ArgumentTypeError("report must be a function of (context_tokens, "
                                         "group, gpu_name, cache_bytes)")
    return widgets.interactive(
        report,
        context_tokens=widgets.IntSlider(context, 1_024, 131_072, 1_024),
        group=widgets.IntSlider(group, 1, 16),
        gpu_name=widgets.Dropdown(options=list(gpu_names), value=gpu_name),
        cache_bytes=widgets.Dropdown(options=[("fp16", 2), ("fp8", 1)], value=2),
    )


# -- the GPU benchmark's results -----------------------------------------------------------------

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
    """Return a figure of one benchmark run, two panels stacked: forward TFLOP/s (top) and
    peak extra memory (bottom) against N, one line per method; rows that did not run are left
    out; the title is the run's provenance (`benchmark_label`)."""
    import matplotlib.pyplot as plt

    causal = causal_flag(causal)
    rows = [r for r in run["results"] if r.get("causal") == causal and r.get("status") == "ok"]
    dims = sorted({r["head_dim"] for r in rows})
    if head_dim is None and dims:
        head_dim = dims[0]
    rows = [r for r in rows if r["head_dim"] == head_dim]
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH_IN, 7.4), sharex=True)
    for method in sorted({r["method"] for r in rows}):
        pts = sorted((r["seq_len"], r["tflops"], r["peak_mem_bytes"]) for r in rows
                     if r["method"] == method)
        ns = [p[0] for p in pts]
        ax_t.plot(ns, [p[1] for p in pts], marker="o", label=method)
        ax_m.plot(ns, [p[2] / 2**20 for p in pts], marker="o", label=method)
    ax_m.set_xscale("log", base=2)
    ax_m.set_xlabel("sequence length N")
    ax_t.set_ylabel("forward TFLOP/s")
    ax_m.set_ylabel("peak extra memory (MiB)")
    ax_m.set_yscale("log")
    title = textwrap.fill(benchmark_label(run), 56)
    fig.suptitle(f"{title}\nhead_dim = {head_dim}, causal = {causal}", fontsize=11)
    handles, labels = ax_t.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.02 + 0.032 * ((len(labels) + 1) // 2), 1, 1))
    return fig
