"""The figures of chapter 3 (FlashAttention in NumPy), drawn for the book's column.

Each function takes the numbers the chapter computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT`; nothing the prose
quotes is computed here. Panels stack in rows; legends sit below the axes.

- `tiling_diagram()`: where Q, K, V, O and one Q tile's running state live during the forward.
- `tile_error_figure(block_ks, ratios)`: tiled / plain error against the K/V tile size.
- `memory_figure(ns, plain_mib, tiled_mib, head_dim)`: measured peak memory against N.
- `io_vs_n_figure`, `io_vs_sram_figure`, `io_constant_figure`: the counted HBM traffic.
- `intensity_figure(ns, standard, each_once, flash, ridges, head_dim)`: FLOP per byte against N.
- `stepper_step_figure`, `stepper_summary_figure`, `stepper_widget`: the tile stepper.
- `bench_table(bench)`, `bench_figure(bench, what)`: the committed NumPy benchmark.
"""

from __future__ import annotations

import textwrap

import numpy as np

from .notebook import COLUMN_WIDTH_IN, legend_below

__all__ = [
    "tiling_diagram",
    "tile_error_figure",
    "memory_figure",
    "io_vs_n_figure",
    "io_vs_sram_figure",
    "io_constant_figure",
    "intensity_figure",
    "stepper_step_figure",
    "stepper_summary_figure",
    "stepper_widget",
    "bench_table",
    "bench_figure",
]

WIDTH = COLUMN_WIDTH_IN
BLUE, ORANGE, GREEN, GREY = "#7aa6d6", "#e8a060", "#6cbf84", "#d9d9d9"


# ---------------------------------------------------------------------------------- checks
def _positive(name: str, values, length: int | None = None) -> np.ndarray:
    """`values` as a 1-D float array of finite positive numbers (of `length`, if given)."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers; got {values!r:.60}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence; got shape {arr.shape}")
    if length is not None and arr.size != length:
        raise ValueError(f"{name} has {arr.size} values, expected {length} (one per N)")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must hold finite positive numbers; got {arr.tolist()}")
    return arr


def _figure(height: float, **kw):
    import matplotlib.pyplot as plt

    return plt.figure(figsize=(WIDTH, height), layout="constrained", **kw)


def _log_ticks(ax, xs) -> None:
    ax.set_xticks(list(xs), [str(int(x)) for x in xs])
    ax.minorticks_off()


# ---------------------------------------------------------------------------------- diagram
def tiling_diagram():
    """Return the schematic of one step of the FlashAttention-2 forward.

    Top: HBM with Q, K, V and O as four stacks of row tiles (the current tiles coloured).
    Bottom: the SRAM of one thread block, holding the Q tile Q_i, the streamed K/V tiles K_j
    and V_j, the score tile S_ij and the running state m_i, l_i, A_i of the Q tile's rows.
    Arrows: Q_i is loaded once, K_j and V_j stream past, O_i = A_i / l_i is written once.
    """
    from matplotlib.patches import FancyArrowPatch, Rectangle

    import matplotlib.pyplot as plt

    # a little narrower than the column: the saved PNG adds a margin around the drawing
    fig = plt.figure(figsize=(WIDTH - 0.2, 5.1))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set(xlim=(0, 14), ylim=(0, 13.25))
    ax.axis("off")

    def box(x, y, w, h, colour, text=None, **kw):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="0.3", lw=0.8, **kw))
        if text:
            ax.text(x + w / 2, y + h / 2, text, ha="center", va="center")

    def arrow(start, end, rad=0.0):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14,
                                     color="0.2", lw=1.3,
                                     connectionstyle=f"arc3,rad={rad}"))

    for y0, h, title, ty in [(7.3, 5.8, "HBM (large, slow)", 12.55),
                             (0.15, 5.7, "SRAM of one thread block (small, fast)", 0.7)]:
        ax.add_patch(Rectangle((0.15, y0), 13.7, h, facecolor="none", edgecolor="0.4", ls="--"))
        ax.text(7.0, ty, title, ha="center", va="center")
    # HBM: four matrices of four row tiles; the current tile of each coloured
    tops = {}
    for x, name, hot, colour in [(0.9, "Q", 1, BLUE), (4.3, "K", 2, ORANGE),
                                 (7.7, "V", 2, ORANGE), (11.1, "O", 1, GREEN)]:
        for t in range(4):
            box(x, 11.2 - (t + 1) * 0.85, 1.5, 0.85, colour if t == hot else GREY)
        ax.text(x + 0.75, 11.65, name, ha="center", va="center")
        tops[name] = (x + 0.75, 11.2 - (hot + 1) * 0.85)
    # SRAM, first row under the matrices: Q_i; K_j and V_j; the state m_i, l_i, A_i
    box(0.6, 3.6, 2.1, 1.5, BLUE, "$Q_i$")
    box(4.0, 3.6, 2.1, 1.5, ORANGE, "$K_j$")
    box(7.4, 3.6, 2.1, 1.5, ORANGE, "$V_j$")
    box(10.3, 3.6, 0.9, 1.5, GREEN, "$m_i$")
    box(11.3, 3.6, 0.9, 1.5, GREEN, "$\\ell_i$")
    box(12.3, 3.6, 1.2, 1.5, GREEN, "$A_i$")
    # second row: the score tile, folded into the state
    box(2.2, 1.4, 6.2, 1.5, "#f2f2f2", "$S_{ij} = \\tau\\, Q_i K_j^{T}$")
    arrow((8.4, 2.15), (11.8, 3.6), rad=0.25)
    ax.text(10.9, 2.0, "fold in", ha="center", va="center")
    white = dict(facecolor="white", edgecolor="none", pad=1.5)
    arrow(tops["Q"], (1.65, 5.1))
    ax.text(1.65, 6.3, "load\nonce", ha="center", va="center", bbox=white)
    arrow(tops["K"], (5.05, 5.1))
    arrow(tops["V"], (8.45, 5.1))
    ax.text(6.75, 6.4, "stream\nj = 1, 2, …", ha="center", va="center", bbox=white)
    arrow((12.9, 5.1), tops["O"])
    ax.text(12.9, 6.3, "write\nonce", ha="center", va="center", bbox=white)
    return fig


# ---------------------------------------------------------------------------------- accuracy
def tile_error_figure(block_ks, ratios, rule: float = 2.0):
    """Return the tiled forward's error over the plain computation's against `block_k`.

    `ratios[seed, j]` is one random problem's ratio at `block_ks[j]`; the figure draws the
    median over the problems, the band from the smallest to the largest ratio, the plain
    computation (1) and flash-attention's test bound (`rule` x plain).
    """
    block_ks = _positive("block_ks", block_ks)
    ratios = np.asarray(ratios, dtype=float)
    if ratios.ndim != 2 or ratios.shape[1] != block_ks.size:
        raise ValueError(f"ratios must be [problems, {block_ks.size}]; got {ratios.shape}")
    fig = _figure(4.8)
    ax = fig.add_subplot()
    ax.semilogx(block_ks, np.median(ratios, axis=0), "o-",
                label=f"median of {ratios.shape[0]} problems")
    ax.fill_between(block_ks, ratios.min(axis=0), ratios.max(axis=0), alpha=0.25, lw=0,
                    label="smallest to largest")
    ax.axhline(1, color="k", ls="--", lw=1, label="plain float32")
    ax.axhline(rule, color="tab:red", ls=":", label=f"{rule:g} × plain (the test's bound)")
    ax.set_xticks(list(block_ks), [f"{b // 1024:.0f}k" if b >= 1024 else f"{b:.0f}"
                                   for b in block_ks])
    ax.minorticks_off()
    ax.set(xlabel="block_k (keys per K/V tile; 1k = 1024)", ylabel="tiled / plain max error")
    legend_below(fig, ax, ncol=2, frameon=True)
    return fig


# ---------------------------------------------------------------------------------- memory
def memory_figure(ns, plain_mib, tiled_mib, head_dim: int):
    """Return measured peak memory (MiB) of the plain and the tiled forward against N (log-log).

    Two guides: 4 N^2 float32 values (S and P, stored and copied) and N d float32 values
    (the output, `head_dim` = d).
    """
    ns = _positive("ns", ns)
    plain = _positive("plain_mib", plain_mib, ns.size)
    tiled = _positive("tiled_mib", tiled_mib, ns.size)
    fig = _figure(4.9)
    ax = fig.add_subplot()
    ax.loglog(ns, plain, "o-", label="plain: S and P stored")
    ax.loglog(ns, tiled, "s-", label="tiled")
    ax.loglog(ns, 16 * ns**2 / 2**20, "k:", lw=1, label="4 N² float32")
    ax.loglog(ns, 4 * head_dim * ns / 2**20, "k--", lw=1, label="N d float32 (output)")
    _log_ticks(ax, ns)
    ax.set(xlabel="sequence length N", ylabel="peak memory (MiB)")
    legend_below(fig, ax, ncol=2, frameon=True)
    return fig


# ---------------------------------------------------------------------------------- IO
def io_vs_n_figure(ns, standard, flash, head_dim: int, sram: int):
    """Return HBM accesses (elements) of standard attention and FlashAttention against N.

    `standard`, `flash`: the counted totals at each N. Dotted and dashed: the shapes of
    Theorem 2's bounds, N d + N^2 and N^2 d^2 / M, scaled to meet the count at the largest N.
    """
    ns = _positive("ns", ns)
    std = _positive("standard", standard, ns.size)
    fa = _positive("flash", flash, ns.size)
    shape_std = ns * head_dim + ns**2
    shape_fa = ns**2 * head_dim**2 / sram
    fig = _figure(4.9)
    ax = fig.add_subplot()
    ax.loglog(ns, std, "o-", label="standard (counted)")
    ax.loglog(ns, fa, "s-", label="FlashAttention (counted)")
    ax.loglog(ns, shape_std * std[-1] / shape_std[-1], "k:", label="∝ Nd + N²")
    ax.loglog(ns, shape_fa * fa[-1] / shape_fa[-1], "k--", label="∝ N²d²/M")
    _log_ticks(ax, ns)
    ax.set(xlabel="N", ylabel="HBM accesses (elements)",
           title=f"d = {head_dim}, M = {sram:,}")
    legend_below(fig, ax, ncol=2, frameon=True)
    return fig


def io_vs_sram_figure(sram_sizes, standard, flash, n: int):
    """Return HBM accesses against the SRAM size M at sequence length `n`, with a 1/M guide
    through FlashAttention's middle point."""
    ms = _positive("sram_sizes", sram_sizes)
    std = _positive("standard", standard, ms.size)
    fa = _positive("flash", flash, ms.size)
    mid = ms.size // 2
    fig = _figure(4.5)
    ax = fig.add_subplot()
    ax.loglog(ms, std, "o-", label="standard")
    ax.loglog(ms, fa, "s-", label="FlashAttention")
    ax.loglog(ms, fa[mid] * ms[mid] / ms, "k--", label="∝ 1/M")
    ax.set(xlabel="SRAM size M (elements)", ylabel="HBM accesses (elements)", title=f"N = {n}")
    legend_below(fig, ax, ncol=3, frameon=True)
    return fig


def io_constant_figure(ns, standard_ratio, flash_ratio):
    """Return each count divided by its Theorem 2 bound against N (a flat line: the bound
    describes the count up to a constant)."""
    ns = _positive("ns", ns)
    std = _positive("standard_ratio", standard_ratio, ns.size)
    fa = _positive("flash_ratio", flash_ratio, ns.size)
    fig = _figure(4.0)
    ax = fig.add_subplot()
    ax.semilogx(ns, std, "o-", label="standard / (Nd + N²)")
    ax.semilogx(ns, fa, "s-", label="flash / (N²d²/M)")
    ax.set(xlabel="N", ylabel="count ÷ Theorem 2 bound", ylim=(0, None))
    _log_ticks(ax, ns)
    legend_below(fig, ax, ncol=2, frameon=True)
    return fig


# ---------------------------------------------------------------------------------- roofline
def intensity_figure(ns, standard, each_once, flash: dict, ridges: dict, head_dim: int):
    """Return arithmetic intensity (FLOP per HBM byte) against N, log-log.

    `standard`: standard attention; `each_once`: FlashAttention if every tensor crossed HBM
    once; `flash[gpu]`: Theorem 2's count with that GPU's SRAM; `ridges[gpu]`: its ridge point
    (dotted, same colour).
    """
    ns = _positive("ns", ns)
    std = _positive("standard", standard, ns.size)
    once = _positive("each_once", each_once, ns.size)
    if not isinstance(flash, dict) or set(flash) != set(ridges):
        raise ValueError("flash and ridges must be dicts with the same GPU names as keys")
    fig = _figure(5.6)
    ax = fig.add_subplot()
    ax.loglog(ns, std, "o-", color="k", label="standard")
    ax.loglog(ns, once, "k--", label="flash, each tensor once")
    for name, colour in zip(flash, ["tab:blue", "tab:orange", "tab:green", "tab:purple"]):
        ax.loglog(ns, _positive(f"flash[{name!r}]", flash[name], ns.size), "s-",
                  color=colour, label=f"flash, {name}")
        ax.axhline(ridges[name], color=colour, ls=":", lw=1.2)
    _log_ticks(ax, ns[::2] if ns.size > 4 else ns)
    ax.set(xlabel="N", ylabel="FLOP per HBM byte (fp16)", title=f"d = {head_dim}")
    legend_below(fig, ax, ncol=2, frameon=True)
    return fig


# ---------------------------------------------------------------------------------- stepper
def _check_steps(steps):
    steps = list(steps) if steps is not None else []
    if not steps or not all(hasattr(s, "q_start") and hasattr(s, "acc") for s in steps):
        raise ValueError("steps must be a non-empty list of flash.TileState "
                         "(from flash_attention_forward(..., on_tile=steps.append))")
    return steps


def _finals(steps):
    """Per query row: m, l and the output after the last tile that updated the row."""
    n = max(s.q_end for s in steps)
    m, l = np.full(n, np.nan), np.full(n, np.nan)
    out = np.full((n, steps[0].acc.shape[-1]), np.nan)
    for s in steps:
        rows = slice(s.q_start, s.q_end)
        m[rows], l[rows] = s.m[0, 0], s.l[0, 0]
        out[rows] = s.acc[0, 0] / s.l[0, 0][:, None]
    return m, l, out


def _state(step, finals):
    """(rows, m, l rescaled to the final max over the final l, |output so far - final|)."""
    m_f, l_f, out_f = finals
    rows = np.arange(step.q_start, step.q_end)
    m, l, acc = step.m[0, 0], step.l[0, 0], step.acc[0, 0]
    err = np.linalg.norm(acc / l[:, None] - out_f[rows], axis=1)
    return rows, m, l * np.exp(m - m_f[rows]) / l_f[rows], err


def _tile_map(ax, steps, current=None, numbers=False):
    from matplotlib.patches import Rectangle

    n = max(max(s.q_end for s in steps), max(s.k_end for s in steps))
    bq, bk = steps[0].q_end - steps[0].q_start, steps[0].k_end - steps[0].k_start
    order = {(s.q_start, s.k_start): i for i, s in enumerate(steps)}
    for qi in range(0, n, bq):
        for kj in range(0, n, bk):
            i = order.get((qi, kj))
            colour = ("0.95" if i is None else "tab:orange" if i == current
                      else "0.75" if current is not None and i < current else "white")
            ax.add_patch(Rectangle((kj, qi), bk, bq, facecolor=colour, edgecolor="k",
                                   hatch="//" if i is None else None))
            if numbers and i is not None:
                ax.text(kj + 0.3 * bk, qi + 0.7 * bq, str(i + 1), ha="center", va="center")
    ax.plot([0, n], [0, n], "k", lw=0.6)
    ax.set(xlim=(0, n), ylim=(n, 0), aspect="equal", xticks=range(0, n + 1, bk),
           yticks=range(0, n + 1, bq), xlabel="keys", ylabel="queries")
    ax.grid(False)


def stepper_step_figure(steps, step: int):
    """Return one step of the causal forward's tile loop, four panels in two rows.

    Top left: the tile map (current tile orange, done grey, never visited hatched). The other
    panels, for the rows of the current Q tile: the running max m, the running sum l rescaled
    to the final max as a fraction of its final value, and |output so far - final output|.
    `steps`: the `flash.TileState`s the forward reported through `on_tile`, one head.
    """
    steps = _check_steps(steps)
    if not isinstance(step, (int, np.integer)) or not 0 <= step < len(steps):
        raise ValueError(f"step must be an int in [0, {len(steps) - 1}]; got {step!r}")
    import matplotlib.pyplot as plt

    finals = _finals(steps)
    rows, m, l_frac, err = _state(steps[step], finals)
    err_max = max(max(_state(s, finals)[3].max() for s in steps), 1e-9)
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 5.4), layout="constrained")
    st = steps[step]
    _tile_map(axes[0, 0], steps, current=step)
    axes[0, 0].set_title(f"step {step + 1}: Q {st.q_start}–{st.q_end - 1}, "
                        f"K/V {st.k_start}–{st.k_end - 1}")
    axes[0, 1].bar(rows, m, color="tab:blue")
    axes[0, 1].plot(rows, finals[0][rows], "k_", ms=14, mew=2)
    axes[0, 1].set_title("m (—: final)")
    axes[1, 0].bar(rows, l_frac, color="tab:green")
    axes[1, 0].axhline(1, color="k", lw=0.8)
    axes[1, 0].set(ylim=(0, 1.05), title="ℓ / final ℓ")
    axes[1, 1].bar(rows, err, color="tab:red")
    axes[1, 1].set(ylim=(0, 1.1 * err_max), title="|output − final|")
    for ax in (axes[0, 1], axes[1, 0], axes[1, 1]):
        ax.set_xticks(rows)
        ax.set_xlabel("query row")
    return fig


def stepper_summary_figure(steps):
    """Return every step of the causal forward at once, four panels in two rows.

    Top left: the tile map with each visited tile numbered by its step (hatched: never
    visited). The other panels: for every query row, after each step that updates it, m minus
    its final value, l (rescaled to the final max) over its final value, and
    |output so far - final output|; one colour per Q tile.
    """
    steps = _check_steps(steps)
    import matplotlib.pyplot as plt

    finals = _finals(steps)
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 5.6), layout="constrained")
    _tile_map(axes[0, 0], steps, numbers=True)
    axes[0, 0].set_title("step of each tile")
    panels = [(axes[0, 1], "m − final m"), (axes[1, 0], "ℓ / final ℓ"),
              (axes[1, 1], "|output − final|")]
    q_starts = sorted({s.q_start for s in steps})
    colours = dict(zip(q_starts, ["tab:blue", "tab:orange", "tab:green", "tab:red",
                                  "tab:purple", "tab:brown"] * len(q_starts)))
    for qs in q_starts:
        mine = [(i + 1, _state(s, finals)) for i, s in enumerate(steps) if s.q_start == qs]
        x = [i for i, _ in mine]
        rows = mine[0][1][0]
        for k, (ax, _) in enumerate(panels):
            vals = np.array([st[1] - finals[0][st[0]] if k == 0 else st[k + 1]
                             for _, st in mine])
            ax.plot(x, vals, "o-", color=colours[qs], lw=1, ms=4,
                    label=f"Q rows {rows[0]}–{rows[-1]}")
    for ax, title in panels:
        ax.set(title=title, xlabel="step", xticks=range(1, len(steps) + 1))
    axes[1, 0].set_ylim(0, 1.05)
    handles, labels = axes[0, 1].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.legend(seen.values(), seen.keys(), loc="outside lower center", ncol=len(seen))
    return fig


def stepper_widget(steps):
    """Return an ipywidgets slider that shows `stepper_step_figure(steps, step)` (needs a
    running kernel)."""
    steps = _check_steps(steps)
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    def show(step=0):
        stepper_step_figure(steps, step)
        plt.show()

    return widgets.interactive(
        show, step=widgets.IntSlider(0, 0, len(steps) - 1, description="step"))


# ---------------------------------------------------------------------------------- benchmark
_BENCH_KEYS = ("n", "peak_bytes", "median_seconds", "memory_ratio_naive_over_tiled",
               "time_ratio_tiled_over_naive")


def _check_bench(bench):
    if not isinstance(bench, dict) or not bench.get("rows"):
        raise ValueError("bench must be the parsed outputs/benchmarks/flash_numpy.json "
                         "(a dict with non-empty 'rows')")
    for r in bench["rows"]:
        missing = [k for k in _BENCH_KEYS if k not in r]
        if missing:
            raise ValueError(f"benchmark row {r.get('n', '?')}: missing keys {missing}")
    return bench


def bench_table(bench) -> str:
    """Return the benchmark as text: what was run, on what machine, and one line per N
    (peak memory in MiB, median time in seconds, and their ratios)."""
    bench = _check_bench(bench)
    m = bench["machine"]
    lines = textwrap.wrap(bench["what"], 78) + [
        f"tiles {bench['block_q']} x {bench['block_k']}; {m['processor']}, ",
        f"{m['cpu_count']} cores, {m['blas_threads']} BLAS thread; ",
        f"numpy {bench['versions']['numpy']}; {bench['date']}",
        f"{'N':>6}{'plain MiB':>11}{'tiled MiB':>11}{'mem ratio':>11}"
        f"{'plain s':>9}{'tiled s':>9}{'time ratio':>12}",
    ]
    for r in bench["rows"]:
        peak, secs = r["peak_bytes"], r["median_seconds"]
        lines.append(
            f"{r['n']:>6}{peak['naive'] / 2**20:>11.1f}{peak['tiled'] / 2**20:>11.2f}"
            f"{r['memory_ratio_naive_over_tiled']:>11.1f}"
            f"{secs['naive']:>9.3f}{secs['tiled']:>9.3f}"
            f"{r['time_ratio_tiled_over_naive']:>12.2f}")
    return "\n".join(lines)


def bench_figure(bench, what: str):
    """Return a bar chart of the benchmark against N: `what` = "memory" (plain / tiled peak
    memory, log scale) or "time" (tiled / plain time, with 1 marked)."""
    bench = _check_bench(bench)
    if what not in ("memory", "time"):
        raise ValueError(f"what must be 'memory' or 'time'; got {what!r}")
    rows = bench["rows"]
    fig = _figure(3.6)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    if what == "memory":
        ax.bar(x, [r["memory_ratio_naive_over_tiled"] for r in rows], 0.5)
        ax.set(yscale="log", ylabel="plain / tiled peak memory")
    else:
        ax.bar(x, [r["time_ratio_tiled_over_naive"] for r in rows], 0.5, color="tab:green")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(ylabel="tiled / plain time")
    ax.set(xticks=x, xlabel="N")
    ax.set_xticklabels([str(r["n"]) for r in rows])
    return fig

