"""Chapter 7's figures (speculative decoding), drawn for the book's column.

Each function takes the numbers the chapter computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT`; legends sit outside
the axes, below them, so they never cover data. Nothing here computes a number the chapter
reports: the notebook computes, this module draws.

- `speculative_rounds(prefix, drafts, rounds)`: the schematic of one round, twice.
- `tv_against_samples(sizes, curves, noise)`: total-variation distance against sample count.
- `tokens_per_pass(ks, measured, band_low, band_high, grid, formula, alpha)`: measured tokens
  per target pass against the draft length, beside the formula.
- `pass_costs(n_tokens, median_ms, low_ms, high_ms, fit_n, fit_ms, draft_ms, rounds)`: the cost
  of one target pass against the tokens it adds.
- `speedup_by_draft_length(by_temperature)`: measured and predicted speedups against k.
- `speedup_by_batch(curves)`: the roofline model's speedup against the batch size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import validate
from .notebook import legend_below, plain_log_ticks
from .validate import finite_floats

__all__ = ["speculative_rounds", "tv_against_samples", "tokens_per_pass", "pass_costs",
           "speedup_by_draft_length", "speedup_by_batch"]

WIDTH_IN = 5.6   # notebook.COLUMN_WIDTH_IN (not imported: notebook pulls in IPython's world)

# The schematic's colours: light fills, so black text reads on every box.
COLOURS = {"prefix": "#d9d9d9", "draft": "#9ecae1", "accept": "#74c476", "reject": "#fb6a4a",
           "target": "#fdae6b", "skip": "#f0f0f0"}


def speculative_rounds(prefix: Sequence[str], drafts: Sequence[str],
                       rounds: Sequence[tuple[str, int, str]]):
    """Return the schematic of speculative rounds after one context, one row per round.

    `rounds` holds (title, drafts accepted, the token the target samples): the accepted drafts
    are green with a tick, the first rejected one red with a cross, the drafts after it
    discarded (hatched); the target's own token (orange) replaces the rejected draft, sampled
    from the residual, or follows the last draft as a bonus when all are accepted. Beside each
    row: how many tokens the one target pass emits.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Rectangle

    prefix, drafts = [str(t) for t in prefix], [str(t) for t in drafts]
    if not prefix or not drafts or not rounds:
        raise ValueError("speculative_rounds needs a context, drafts and at least one round")
    k = len(drafts)
    for title, accepted, _ in rounds:
        validate.integer(f"drafts accepted in {title!r}", accepted, 0, k)

    def box(ax, x, y, text, kind, mark=""):
        ax.add_patch(FancyBboxPatch((x + 0.05, y), 0.9, 0.8, boxstyle="round,pad=0.02",
                                    facecolor=COLOURS[kind], edgecolor="#333333",
                                    hatch="//" if kind == "skip" else None))
        ax.text(x + 0.5, y + 0.4, text, ha="center", va="center", color="black")
        if mark:
            ax.text(x + 0.5, y + 1.0, mark, ha="center", va="center", color="black")

    row_h = 3.3
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.6 * len(rounds) + 0.9), layout="constrained")
    x0 = len(prefix)
    for r, (title, accepted, token) in enumerate(rounds):
        y = (len(rounds) - 1 - r) * row_h
        ax.text(0, y + 1.55, title, color="black", weight="bold")
        for i, t in enumerate(prefix):
            box(ax, i, y, t, "prefix")
        for i, t in enumerate(drafts):
            kind, mark = (("accept", "✓") if i < accepted else ("reject", "✗")
                          if i == accepted else ("skip", ""))
            box(ax, x0 + i, y, t, kind, mark)
        if accepted == k:
            box(ax, x0 + k, y, token, "target", "bonus")
        else:
            x = x0 + accepted
            box(ax, x, y - 1.05, token, "target")
            ax.annotate("", xy=(x + 0.5, y - 0.22), xytext=(x + 0.5, y + 0.02),
                        arrowprops=dict(arrowstyle="<-", color="#333333"))
            ax.text(x - 0.05, y - 0.65, "residual", ha="right", va="center", color="black")
        ax.text(x0 + k + 1.1, y + 0.4, f"{accepted + 1} tokens\nper pass", ha="left",
                va="center", color="black")
    ax.set_xlim(-0.1, x0 + k + 3.0)
    ax.set_ylim(-1.2, (len(rounds) - 1) * row_h + 1.9)
    ax.axis("off")
    kinds = ("prefix", "accept", "reject", "skip", "target")
    labels = ("context", "draft accepted", "draft rejected", "discarded draft",
              "sampled by the target")
    handles = [Rectangle((0, 0), 1, 1, facecolor=COLOURS[c], edgecolor="#333333",
                         hatch="//" if c == "skip" else None) for c in kinds]
    fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
    return fig


def tv_against_samples(sizes: Sequence[int], curves: Mapping[str, Sequence[float]],
                       noise: Sequence[float]):
    """Return total-variation distance to the exact distribution against the sample count N
    (log-log): one line per rule in `curves`, and `noise`, the distance of N i.i.d. samples
    drawn from the exact distribution itself (the floor sampling noise sets), dashed."""
    import matplotlib.pyplot as plt

    sizes = finite_floats("sizes", sizes, positive=True)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.6), layout="constrained")
    for name, tvs in curves.items():
        tv = finite_floats(f"curves[{name!r}]", tvs, length=len(sizes), positive=True)
        ax.loglog(sizes, tv, "o-", label=name)
    ax.loglog(sizes, finite_floats("noise", noise, length=len(sizes), positive=True), "k--",
              label="exact i.i.d. samples (noise floor)")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("samples N")
    ax.set_ylabel("TV distance to the target")
    legend_below(fig, ax, ncol=1)
    return fig


def tokens_per_pass(ks: Sequence[int], measured: Sequence[float], band_low: Sequence[float],
                    band_high: Sequence[float], grid: Sequence[int], formula: Sequence[float],
                    alpha: float):
    """Return tokens emitted per target pass against the draft length k: the measured means
    (dots), the formula with one `alpha` over `grid` (line), a band around the formula with
    each k's own alpha (`band_low`..`band_high`), and k + 1, every draft accepted (dotted)."""
    import matplotlib.pyplot as plt

    ks = finite_floats("ks", ks)
    grid = finite_floats("grid", grid)
    alpha = validate.finite_float("alpha", alpha, 0.0, 1.0)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.8), layout="constrained")
    ax.plot(ks, finite_floats("measured", measured, length=len(ks)), "o",
            label="measured (mean over rounds)")
    ax.plot(grid, finite_floats("formula", formula, length=len(grid)), "-",
            label=f"formula, alpha = {alpha:.2f}")
    ax.fill_between(ks, finite_floats("band_low", band_low, length=len(ks)),
                    finite_floats("band_high", band_high, length=len(ks)), alpha=0.2,
                    label="formula with each k's alpha, ±10%")
    ax.plot(grid, [g + 1 for g in grid], ":", color="gray", label="k + 1 (every draft accepted)")
    ax.set_ylim(0, 5)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("tokens per target pass")
    legend_below(fig, ax, ncol=1)
    return fig


def pass_costs(n_tokens: Sequence[int], median_ms: Sequence[float], low_ms: Sequence[float],
               high_ms: Sequence[float], fit_n: Sequence[float], fit_ms: Sequence[float],
               draft_ms: float, rounds: int):
    """Return the cost of one cached target pass against the tokens it adds: the median over
    `rounds` rounds with bars from `low_ms` to `high_ms`, the fitted line (`fit_n`, `fit_ms`,
    dashed) and the draft's one-token pass, `draft_ms` (dotted)."""
    import matplotlib.pyplot as plt

    n_tokens = finite_floats("n_tokens", n_tokens)
    median_ms = finite_floats("median_ms", median_ms, length=len(n_tokens))
    low = finite_floats("low_ms", low_ms, length=len(n_tokens))
    high = finite_floats("high_ms", high_ms, length=len(n_tokens))
    if any(lo > m or m > hi for lo, m, hi in zip(low, median_ms, high)):
        raise ValueError("every median must lie between its low_ms and high_ms")
    fit_n = finite_floats("fit_n", fit_n)
    rounds = validate.positive_int("rounds", rounds)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.6), layout="constrained")
    ax.errorbar(n_tokens, median_ms, fmt="o", color="C0", capsize=3,
                yerr=[[m - lo for m, lo in zip(median_ms, low)],
                      [hi - m for m, hi in zip(median_ms, high)]],
                label=f"median of {rounds} rounds (bars: min to max)")
    ax.plot(fit_n, finite_floats("fit_ms", fit_ms, length=len(fit_n)), "--", color="C1",
            label="least-squares line, n >= 2")
    ax.axhline(validate.finite_float("draft_ms", draft_ms, 0.0), color="C2", ls=":",
               label="draft, 1 token")
    ax.set_xlabel("tokens in the target's pass (n)")
    ax.set_ylabel("CPU ms per pass")
    ax.set_ylim(0, None)
    legend_below(fig, ax, ncol=1)
    return fig


def speedup_by_draft_length(by_temperature: Mapping[str, tuple]):
    """Return the speedup of speculative decoding over target-only decoding against the draft
    length k, per temperature: `by_temperature` maps a temperature's label to
    (ks, measured speedups, predicted speedups); measured solid, predicted dashed in the same
    colour; the line at 1 is no gain."""
    import matplotlib.pyplot as plt

    if not by_temperature:
        raise ValueError("by_temperature is empty: nothing to draw")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.8), layout="constrained")
    for temperature, series in by_temperature.items():
        if len(series) != 3:
            raise ValueError(f"by_temperature[{temperature!r}] must be (ks, measured, "
                             "predicted)")
        ks = finite_floats(f"ks at T = {temperature}", series[0])
        measured = finite_floats(f"measured at T = {temperature}", series[1], length=len(ks))
        (line,) = ax.plot(ks, measured,
                          "o-", label=f"measured, T = {temperature}")
        predicted = finite_floats(f"predicted at T = {temperature}", series[2], length=len(ks))
        ax.plot(ks, predicted, "--",
                color=line.get_color(), label=f"predicted, T = {temperature}")
    ax.axhline(1, color="gray", lw=1)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup over target only")
    legend_below(fig, ax, ncol=2)
    return fig


def speedup_by_batch(curves: Mapping[str, tuple]):
    """Return the modelled speedup of speculative decoding against the batch size (log x):
    `curves` maps a line's label to (batches, speedups), each line stopping where the batch
    no longer fits; the line at 1 is no gain."""
    import matplotlib.pyplot as plt

    if not curves:
        raise ValueError("curves is empty: nothing to draw")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.8), layout="constrained")
    styles = ("o-", "s-", "^-", "s--", "D-", "v-")
    for i, (label, series) in enumerate(curves.items()):
        if len(series) != 2:
            raise ValueError(f"curves[{label!r}] must be (batches, speedups)")
        batches = finite_floats(f"batches of {label!r}", series[0], positive=True)
        speedups = finite_floats(f"speedups of {label!r}", series[1], length=len(batches))
        ax.semilogx(batches, speedups,
                    styles[i % len(styles)], label=label)
    ax.axhline(1, color="gray", lw=1)
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("batch size (sequences decoding together)")
    ax.set_ylabel("modelled speedup")
    legend_below(fig, ax, ncol=2)
    return fig
