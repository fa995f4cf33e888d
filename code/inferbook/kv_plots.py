"""Figures of chapters 1 and 2 (the KV cache and its arithmetic), drawn for the book's column.

Every function takes the data its chapter computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT` (the notebook glues
it and closes it). Nothing here computes a number the prose states; the two diagrams draw a
fixed layout from their shape arguments.

Chapter 1:
- `roofline_figure(gpus, points)` -> attainable FLOP/s against intensity, one roof per GPU.
- `cache_layout_figure(...)` -> the layout of `KVCache` for one sequence (a diagram).
- `step_time_figure(positions, step_ms, repeats)` -> time per token, median and min-max band.
- `bench_step_figure(per_step_ms)` -> per-token time of the GPT-2 small benchmark (log scale).

Chapter 2:
- `head_sharing_figure(n_q, n_kv_gqa)` -> what MHA, GQA, MQA and MLA cache (a diagram).
- `variants_figure(labels, gb)` -> one sequence's cache under several attention variants.
- `kv_vs_context_figure(curves, gpu_lines)` -> cache of one sequence against its length.
- `crossover_figure(labels, sequences)` -> sequences whose cache weighs as much as the weights.
- `tp_grid_figure(models, gpus, tp)` -> fewest GPUs per model and GPU type (a heat map).
"""

from __future__ import annotations

import math

from . import validate
from .notebook import COLUMN_WIDTH_IN
from .validate import finite_floats

__all__ = [
    "roofline_figure", "cache_layout_figure", "step_time_figure", "bench_step_figure",
    "head_sharing_figure", "variants_figure", "kv_vs_context_figure", "crossover_figure",
    "tp_grid_figure",
]

W = COLUMN_WIDTH_IN


def _labels(name: str, labels, n: int) -> list[str]:
    """Return `labels` as a list of n strings; raise naming the argument otherwise."""
    labels = validate.items(name, labels)
    if len(labels) != n or not all(isinstance(s, str) for s in labels):
        raise ValueError(f"{name} must be {n} strings (one per value), got {labels!r}")
    return labels


# --- chapter 1 ------------------------------------------------------------------------------

def roofline_figure(gpus, points, title: str = "Llama-2-7B passes on the H100 roof",
                    intensity_range: tuple[float, float] = (10**-0.5, 1e4)):
    """Return the roofline of `gpus` (min(peak, intensity x bandwidth) on log-log axes), with
    `points` marked on it.

    gpus: `hardware.GPU`s with a published FP16 tensor peak, one roof each.
    points: (label, intensity in FLOP/byte, attainable FLOP/s) tuples, as the chapter computed
    them with `roofline.attainable_flops`; drawn as black markers with their labels.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from .hardware import GPU
    from .roofline import attainable_flops

    gpus = validate.items("gpus", gpus)
    if not gpus or not all(isinstance(g, GPU) and g.fp16_tensor_flops for g in gpus):
        raise ValueError("gpus must be hardware.GPU presets with a published FP16 tensor peak")
    points = validate.items("points", points)
    lo, hi = finite_floats("intensity_range", intensity_range, minimum=1e-12)
    if not lo < hi:
        raise ValueError(f"intensity_range must rise, got {intensity_range!r}")
    fig, ax = plt.subplots(figsize=(W, 4.2), layout="constrained")
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    for g in gpus:
        ax.loglog(x, [attainable_flops(g, i) / 1e12 for i in x], label=g.name)
    for marker, point in zip("os^Dv", points):
        label, intensity, flops = point
        ax.loglog(intensity, flops / 1e12, marker, color="k", ms=8)
        ax.annotate(label, (intensity, flops / 1e12), textcoords="offset points",
                    xytext=(7, -14))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable TFLOP/s (fp16/bf16)")
    ax.set_title(title)
    ax.legend(loc="upper left")  # the roofs start low at the left: the corner is empty
    return fig


def cache_layout_figure(n_layers: int = 3, n_heads: int = 4, max_len: int = 10, prompt: int = 4,
                        steps: int = 2):
    """Return a diagram of one batch row of `KVCache.k` and `.v`: for each layer a K block and a
    V block of heads (rows h0, h1, ...) x positions; a square is one head_dim-long vector.

    The first `prompt` positions are filled by the prefill, the next `steps` (at most 3) by one
    decode step each; the rest of `max_len` is preallocated and not yet written.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    for name, value in (("n_layers", n_layers), ("n_heads", n_heads), ("max_len", max_len),
                        ("prompt", prompt)):
        validate.positive_int(name, value)
    steps = validate.integer("steps", steps, minimum=0, maximum=3)
    if prompt + steps > max_len:
        raise ValueError(f"prompt + steps ({prompt + steps}) must be at most max_len ({max_len})")
    fill = ["#7aa6d6"] + ["#e8a060", "#6cbf84", "#c88fd0"][:steps]
    labels = [f"prefill (positions 0–{prompt - 1})"] + [
        f"decode step {s + 1} (pos. {prompt + s})" for s in range(steps)]
    gap, block = 1.8, max_len + 1.0
    height = n_layers * (n_heads + gap)
    drawn = height - gap + 0.4  # the last layer's bottom edge, and a little room
    fig, ax = plt.subplots(figsize=(W, 1.0 + 0.24 * (drawn + 3.0)), layout="constrained")
    for layer in range(n_layers):
        y0 = layer * (n_heads + gap)
        for b, name in enumerate(["K", "V"]):
            x0 = b * block
            for h in range(n_heads):
                for pos in range(max_len):
                    stage = 0 if pos < prompt else pos - prompt + 1
                    written = stage <= steps
                    ax.add_patch(Rectangle((x0 + pos, y0 + h), 1, 1,
                                           facecolor=fill[stage] if written else "white",
                                           edgecolor="0.45", lw=0.6, ls="-" if written else ":"))
            ax.text(x0 + max_len / 2, y0 - 0.2, f"layer {layer}: {name}", ha="center",
                    va="bottom", color="black")
        for h in range(n_heads):
            ax.text(-0.25, y0 + h + 0.5, f"h{h}", ha="right", va="center", color="black")
    ax.annotate("", xy=(max_len, -1.9), xytext=(0, -1.9),
                arrowprops=dict(arrowstyle="->", color="black"))
    ax.text(max_len / 2, -2.0, "position (max_len preallocated)", ha="center", va="bottom",
            color="black")
    handles = [Patch(facecolor=c, edgecolor="0.45", label=s) for c, s in zip(fill, labels)]
    handles.append(Patch(facecolor="white", edgecolor="0.45", ls=":", label="not yet written"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False,
               labelcolor="black")
    ax.set(xlim=(-1.6, block + max_len + 0.2), ylim=(drawn, -3.0))
    ax.axis("off")
    return fig


def step_time_figure(positions, step_ms: dict, repeats: int,
                     labels: dict | None = None):
    """Return the time per generated token against its position: for each decoder the median
    over runs (a line) and the band from the fastest to the slowest run.

    positions: the token positions (n values). step_ms: decoder name -> [run][step] times in
    ms (each run n steps). labels: decoder name -> legend label (default: the name).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    positions = finite_floats("positions", positions)
    validate.positive_int("repeats", repeats)
    if not isinstance(step_ms, dict) or not step_ms:
        raise ValueError("step_ms must be a non-empty dict: decoder -> [run][step] times in ms")
    labels = labels or {}
    fig, ax = plt.subplots(figsize=(W, 3.8), layout="constrained")
    for name, runs in step_ms.items():
        ms = np.asarray(runs, dtype=float)
        if ms.ndim != 2 or ms.shape[1] != len(positions) or not np.isfinite(ms).all():
            raise ValueError(f"step_ms[{name!r}] must be [run][step] finite times, "
                             f"{len(positions)} steps per run")
        (line,) = ax.plot(positions, np.median(ms, axis=0),
                          label=f"{labels.get(name, name)}, median")
        ax.fill_between(positions, ms.min(axis=0), ms.max(axis=0), color=line.get_color(),
                        alpha=0.25, lw=0)
    ax.set_xlabel("position of the generated token")
    ax.set_ylabel("CPU ms per token")
    ax.set_title(f"Mini GPT on a CPU: median of {repeats} runs")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig


def bench_step_figure(per_step_ms: dict, labels: dict | None = None,
                      title: str = "GPT-2 small's shape on a CPU, one run"):
    """Return the per-token time of each decoder in one benchmark run, on a log scale.

    per_step_ms: decoder name -> time of each generated token in ms (the same count for all).
    labels: decoder name -> legend label (default: the name).
    """
    import matplotlib.pyplot as plt

    if not isinstance(per_step_ms, dict) or not per_step_ms:
        raise ValueError("per_step_ms must be a non-empty dict: decoder -> ms per token")
    series = {k: finite_floats(f"per_step_ms[{k!r}]", v, minimum=1e-12)
              for k, v in per_step_ms.items()}
    if len({len(v) for v in series.values()}) != 1:
        raise ValueError("per_step_ms: every decoder must have the same number of tokens")
    labels = labels or {}
    fig, ax = plt.subplots(figsize=(W, 4.2), layout="constrained")
    for name, ms in series.items():
        ax.semilogy(range(1, len(ms) + 1), ms, label=labels.get(name, name))
    ax.set_xlabel("generated token")
    ax.set_ylabel("ms per token (log)")
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncol=2)  # the lines fill the axes
    return fig


# --- chapter 2 ------------------------------------------------------------------------------

def head_sharing_figure(n_q: int = 8, n_kv_gqa: int = 2):
    """Return a diagram of what each attention variant caches for a layer of `n_q` query heads:
    MHA one K/V head per query head, GQA `n_kv_gqa` shared K/V heads, MQA one, MLA one latent
    (plus a RoPE key) from which every head re-expands its keys and values."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    n_q = validate.integer("n_q", n_q, minimum=2, maximum=12)
    n_kv_gqa = validate.integer("n_kv_gqa", n_kv_gqa, minimum=2, maximum=n_q - 1)
    if n_q % n_kv_gqa:
        raise ValueError(f"n_kv_gqa ({n_kv_gqa}) must divide n_q ({n_q})")
    q_colour, kv_colour, latent_colour = "#7aa6d6", "#e8a060", "#6cbf84"
    rows = [("MHA", n_q, f"2 × {n_q} heads × d"), ("GQA", n_kv_gqa, f"2 × {n_kv_gqa} heads × d"),
            ("MQA", 1, "2 × 1 head × d"), ("MLA", 0, "$d_c + d_R$ (one latent)")]
    pitch = 4.3
    fig, ax = plt.subplots(figsize=(W, 6.6))
    ax.set_position([0.03, 0.01, 0.94, 0.98])  # the drawing fills the figure
    for r, (name, n_kv, cost) in enumerate(rows):
        y = -r * pitch
        ax.text(-0.1, y + 0.8, f"{name}: caches {cost} per token and layer", ha="left",
                va="bottom", color="black")
        for h in range(n_q):
            ax.add_patch(Rectangle((h, y), 0.8, 0.6, facecolor=q_colour, edgecolor="0.3"))
            ax.text(h + 0.4, y + 0.3, f"q{h}", ha="center", va="center", color="black")
        if n_kv:
            width = n_q / n_kv
            for g in range(n_kv):
                x = g * width + (width - 1) / 2  # centred under its query heads
                pad = 0.0 if n_kv == n_q else 0.1  # one box per head: leave the gaps
                ax.add_patch(Rectangle((x - pad, y - 2.2), 0.8 + 2 * pad, 0.6,
                                       facecolor=kv_colour, edgecolor="0.3"))
                ax.text(x + 0.4, y - 1.9, f"kv{g}" if n_kv > 1 else "kv", ha="center",
                        va="center", color="black")
                for h in range(int(g * width), int((g + 1) * width)):
                    ax.plot([h + 0.4, x + 0.4], [y, y - 1.6], color="0.35", lw=0.8)
        else:
            mid = (n_q - 1) / 2 + 0.4  # under the middle of the query heads
            ax.add_patch(Rectangle((mid - 2.2, y - 2.2), 4.4, 0.6, facecolor=latent_colour,
                                   edgecolor="0.3"))
            ax.text(mid, y - 1.9, "latent c + RoPE key", ha="center", va="center",
                    color="black")
            for h in range(n_q):
                ax.add_patch(FancyArrowPatch((mid, y - 1.6), (h + 0.4, y), arrowstyle="-|>",
                                             mutation_scale=8, color="0.35", lw=0.7, ls="--"))
    bottom = -(len(rows) - 1) * pitch - 2.2
    ax.text(n_q / 2, bottom - 0.5, "MLA: each head re-expands K and V from the latent",
            ha="center", va="top", color="black")
    ax.text(n_q / 2, 2.0, "lines: which cached K/V each query head reads", ha="center",
            va="bottom", color="black")
    ax.set(xlim=(-0.4, n_q + 0.2), ylim=(bottom - 1.6, 2.8))
    ax.axis("off")
    return fig


def variants_figure(labels, gb, title: str = "Llama-3.1-70B's shape, four attention variants",
                    xlabel: str = "KV cache of one 32K-token sequence, bf16 (GB)"):
    """Return horizontal bars: one sequence's cache (GB) under each attention variant, the first
    label at the top, each bar with its value."""
    import matplotlib.pyplot as plt

    gb = finite_floats("gb", gb, minimum=0.0)
    labels = _labels("labels", labels, len(gb))
    fig, ax = plt.subplots(figsize=(W, 3.2), layout="constrained")
    colours = ["tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:green", "tab:brown"]
    ax.barh(labels[::-1], gb[::-1], color=[colours[i % 6] for i in range(len(gb))][::-1])
    for y, val in enumerate(gb[::-1]):
        ax.text(val, y, f" {val:.2f}", va="center")
    fig.supxlabel(xlabel, fontsize="medium")  # centred on the figure, not on the axes
    fig.suptitle(title)
    ax.set_xlim(right=max(gb) * 1.25)
    ax.grid(axis="y", visible=False)
    return fig


def kv_vs_context_figure(curves, gpu_lines=(), title: str = "KV cache of one sequence"):
    """Return one sequence's cache against its length on log-log axes.

    curves: (label, context lengths, GB) tuples, one line each (styles cycle so that lines
    which overlap stay distinguishable). gpu_lines: (label, GB) tuples, dotted horizontal lines.
    """
    import matplotlib.pyplot as plt

    curves = validate.items("curves", curves)
    if not curves:
        raise ValueError("curves must not be empty")
    fig = plt.figure(figsize=(W, 6.4), layout="constrained")
    ax = fig.add_subplot()
    styles = ["-", "--", "-.", ":"]
    for i, (label, xs, ys) in enumerate(curves):
        xs = finite_floats(f"curves[{i}] contexts", xs, minimum=1e-12)
        ys = finite_floats(f"curves[{i}] GB", ys, minimum=1e-12)
        if len(xs) != len(ys):
            raise ValueError(f"curves[{i}]: {len(xs)} contexts but {len(ys)} sizes")
        ax.loglog(xs, ys, ls=styles[i % 4], color=f"C{i if i < 7 else i + 1}",  # C7 is grey
                  lw=2, label=label)
    x_text = min(min(finite_floats("x", c[1])) for c in curves) * 1.1
    for label, gb in gpu_lines:
        gb = validate.positive_float("gpu_lines GB", gb)
        ax.axhline(gb, color="grey", ls=":", lw=1)
        ax.text(x_text, gb * 1.1, label, color="dimgrey")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("KV cache, bf16 (GB)")
    ax.set_title(title)
    fig.legend(ncol=2, loc="outside lower center", handlelength=2.2, columnspacing=1.0)
    return fig


def crossover_figure(labels, sequences,
                     xlabel: str = "8K-token sequences whose cache\nweighs as much as the "
                                   "weights (bf16, log)",
                     title: str = "Where the KV cache overtakes the model"):
    """Return horizontal bars on a log axis: for each model (label), how many sequences make a
    cache as heavy as its weights, each bar with its value."""
    import matplotlib.pyplot as plt

    sequences = finite_floats("sequences", sequences, minimum=1e-12)
    labels = _labels("labels", labels, len(sequences))
    fig, ax = plt.subplots(figsize=(W, 1.6 + 0.32 * len(labels)), layout="constrained")
    ax.barh(labels, sequences, color="tab:blue")
    for y, n in enumerate(sequences):
        ax.text(n, y, f" {n:,.1f}", va="center")
    ax.set_xscale("log")
    ax.set_xlim(right=max(sequences) * 12)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="y", visible=False)
    return fig


def tp_grid_figure(models, gpus, tp, title: str = "GPUs for 8 × 32K-token sequences"):
    """Return a heat map of the fewest GPUs (`tp[i][j]`, NaN for "more than 8") that serve
    model i on GPU type j; colour by log2 of the count, the count written in each cell."""
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.asarray(tp, dtype=float)
    models = validate.items("models", models)
    gpus = validate.items("gpus", gpus)
    if grid.shape != (len(models), len(gpus)):
        raise ValueError(f"tp must be {len(models)} x {len(gpus)} (models x gpus), "
                         f"got shape {grid.shape}")
    if (grid[~np.isnan(grid)] < 1).any():
        raise ValueError("tp: GPU counts must be at least 1 (NaN for none that fits)")
    fig, ax = plt.subplots(figsize=(W, 1.9 + 0.36 * len(models)), layout="constrained")
    ax.imshow(np.log2(grid), cmap="viridis_r", vmin=0, vmax=3, aspect="auto")
    ax.set_xticks(range(len(gpus)), gpus, rotation=25, ha="right")
    ax.set_yticks(range(len(models)), models)
    for i in range(len(models)):
        for j in range(len(gpus)):
            val = grid[i, j]
            ax.text(j, i, "> 8" if np.isnan(val) else f"{val:.0f}", ha="center", va="center",
                    color="white" if val >= 4 else "black")
    ax.set_title(title)
    ax.grid(False)
    return fig
