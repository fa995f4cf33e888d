"""Chapter 9's figures (serving at scale), drawn for the book's column.

Each function takes what the chapter read from the committed benchmark JSON or computed with
the simulator, and returns a matplotlib Figure at most `notebook.COLUMN_WIDTH_IN` wide with no
text below `notebook.MIN_TEXT_PT`. Panels stack in rows; legends sit below the axes, outside
them, so they never cover data. Nothing here computes a number the chapter reports: the
notebook computes, this module draws.

- `cpu_check(rows)`: the CPU engine measured beside the simulated clock
  (`outputs/benchmarks/simulate_cpu.json`'s rows).
- `vllm_serve_check(rows, fit_rates)`: `vllm serve` beside the simulator
  (`outputs/benchmarks/vllm_serve.json`'s rows).
- `stall_by_prompt(lengths, itl_p99_ms)`: the worst inter-token gap against the prompt length.
- `latency_knee(rates, curves)`: p90 TTFT against throughput and p90 TPOT against the rate.
- `disaggregation_schematic()`: colocated and disaggregated layouts of two GPUs.
- `slo_attainment(rates, attainment)`: the share of requests meeting the SLO per layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import validate
from .notebook import legend_below, plain_log_ticks
from .validate import finite_floats

__all__ = ["cpu_check", "vllm_serve_check", "stall_by_prompt", "latency_knee",
           "disaggregation_schematic", "slo_attainment"]

WIDTH_IN = 5.6   # notebook.COLUMN_WIDTH_IN (not imported: notebook pulls in IPython's world)
MEASURED, SIMULATED = "C0", "C1"


def _rows(name: str, rows, keys: Sequence[str]) -> list[Mapping]:
    """Return the benchmark rows, refusing none or a row without one of `keys`."""
    rows = list(rows)
    if not rows:
        raise ValueError(f"{name} is empty: nothing to draw")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise validate.ArgumentTypeError(f"{name}[{i}] must be a mapping (a row of the "
                                             f"benchmark JSON); got {type(row).__name__}")
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"{name}[{i}] has no {missing}: not a row of the benchmark JSON")
    return rows


def cpu_check(rows: Sequence[Mapping]):
    """Return three panels against the arrival rate, stacked: output throughput, TTFT and
    TPOT, the CPU engine measured (blue: median of runs, band from minimum to maximum) and
    the simulated clock (orange), p50 solid and p90 dashed (throughput: one solid line).

    `rows`: `simulate_cpu.json`'s "rows", each with "rate_req_s" and "measured",
    "measured_min_max" and "simulated" keyed by "throughput_tok_s", "ttft_p50_s", ....
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = _rows("rows", rows, ("rate_req_s", "measured", "measured_min_max", "simulated"))
    rates = finite_floats("rate_req_s", [r["rate_req_s"] for r in rows])
    fig, axes = plt.subplots(3, 1, figsize=(WIDTH_IN, 8.6), sharex=True, layout="constrained")
    panels = [("throughput_tok_s", "tokens / CPU s", 1, (None,)),
              ("ttft", "TTFT (ms)", 1e3, (50, 90)), ("tpot", "TPOT (ms)", 1e3, (50, 90))]
    for ax, (key, label, scale, quantiles) in zip(axes, panels):
        for q in quantiles:
            k = key if q is None else f"{key}_p{q}_s"
            style = "-" if q in (None, 50) else "--"
            tag = "" if q is None else f" p{q}"
            lo = [r["measured_min_max"][k][0] * scale for r in rows]
            hi = [r["measured_min_max"][k][1] * scale for r in rows]
            ax.plot(rates, [r["measured"][k] * scale for r in rows], "o" + style,
                    color=MEASURED, label="measured" + tag)
            ax.fill_between(rates, lo, hi, color=MEASURED, alpha=0.2)
            ax.plot(rates, [r["simulated"][k] * scale for r in rows], "s" + style,
                    color=SIMULATED, label="simulated" + tag)
        ax.set_ylabel(label)
    axes[-1].set_xlabel("arrival rate (requests per CPU second)")
    handles, labels = axes[1].get_legend_handles_labels()
    handles.append(Patch(color=MEASURED, alpha=0.2))
    labels.append("measured, min to max")
    fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
    return fig


def vllm_serve_check(rows: Sequence[Mapping], fit_rates: Sequence[float]):
    """Return two panels against the request rate, stacked, log y: TTFT and TPOT as
    `vllm bench serve` measured them (blue: median of repeats, band from minimum to maximum)
    and as the simulator predicts them (orange), p50 solid and p90 dashed; dotted vertical
    lines mark `fit_rates`, the rates the constants were fitted on.

    `rows`: `vllm_serve.json`'s "rows", each with "rate" and "ttft_p50_s", ... holding
    "measured" {"median", "min", "max"} and "predicted" {"median"} in seconds.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    keys = [f"{m}_p{q}_s" for m in ("ttft", "tpot") for q in (50, 90)]
    rows = _rows("rows", rows, ["rate", *keys])
    x = finite_floats("rate", [r["rate"] for r in rows])
    fit_rates = finite_floats("fit_rates", fit_rates)
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH_IN, 6.8), sharex=True, layout="constrained")
    for ax, m in zip(axes, ("ttft", "tpot")):
        for q, style in ((50, "-"), (90, "--")):
            k = f"{m}_p{q}_s"
            med = [1e3 * r[k]["measured"]["median"] for r in rows]
            lo = [1e3 * r[k]["measured"]["min"] for r in rows]
            hi = [1e3 * r[k]["measured"]["max"] for r in rows]
            ax.plot(x, med, "o" + style, color=MEASURED, label=f"vLLM p{q}")
            ax.fill_between(x, lo, hi, color=MEASURED, alpha=0.2)
            ax.plot(x, [1e3 * r[k]["predicted"]["median"] for r in rows], "s" + style,
                    color=SIMULATED, label=f"simulated p{q}")
        for rate in fit_rates:
            ax.axvline(rate, color="0.6", lw=0.8, ls=":")
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.set_ylabel(f"{m.upper()} (ms)")
    axes[-1].set_xlabel("request rate (requests/s)")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Patch(color=MEASURED, alpha=0.2), Line2D([], [], color="0.6", lw=0.8, ls=":")]
    labels += ["vLLM, min to max", "rates fitted on"]
    fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
    return fig


def stall_by_prompt(lengths: Sequence[int], itl_p99_ms: Mapping[str, Sequence[float]]):
    """Return the p99 inter-token latency (ms) against the prompt length (log2 x), one line
    per configuration in `itl_p99_ms` (label -> one value per length)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    lengths = finite_floats("lengths", lengths, positive=True)
    if not itl_p99_ms:
        raise ValueError("itl_p99_ms is empty: nothing to draw")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.4), layout="constrained")
    for label, values in itl_p99_ms.items():
        p99 = finite_floats(f"itl_p99_ms[{label!r}]", values, length=len(lengths))
        ax.plot(lengths, p99, "o-",
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{n:,.0f}" for n in lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("ITL p99 (ms)")
    legend_below(fig, ax, ncol=1)
    return fig


def latency_knee(rates: Sequence[float], curves: Mapping[str, tuple]):
    """Return two panels, stacked: p90 TTFT (s, log y) against output throughput as the
    arrival rate grows (top) and p90 TPOT (ms) against the arrival rate (bottom), one line
    per policy. `curves` maps a policy to (output tokens/s, p90 TTFT s, p90 TPOT ms), one
    value per rate."""
    import matplotlib.pyplot as plt

    rates = finite_floats("rates", rates)
    if not curves:
        raise ValueError("curves is empty: nothing to draw")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(WIDTH_IN, 7.0), layout="constrained")
    for name, series in curves.items():
        if len(series) != 3:
            raise ValueError(f"curves[{name!r}] must be (throughput, p90 TTFT, p90 TPOT)")
        tput = finite_floats(f"throughput of {name!r}", series[0], length=len(rates))
        ttft = finite_floats(f"p90 TTFT of {name!r}", series[1], length=len(rates), positive=True)
        top.plot(tput, ttft, "o-",
                 label=name)
        tpot = finite_floats(f"p90 TPOT of {name!r}", series[2], length=len(rates))
        bottom.plot(rates, tpot, "o-",
                    label=name)
    top.set_xlabel("output tokens / s")
    top.set_ylabel("p90 TTFT (s)")
    top.set_yscale("log")
    plain_log_ticks(top.yaxis)
    bottom.set_xlabel("arrival rate (requests / s)")
    bottom.set_ylabel("p90 TPOT (ms)")
    legend_below(fig, top, ncol=len(curves) if len(curves) <= 2 else 2)
    return fig


def disaggregation_schematic():
    """Return the schematic of two layouts for two GPUs, one above the other: colocated (a
    router sends whole requests to either GPU, each computing prompts and decoding) and
    disaggregated (one GPU computes prompts and hands each KV cache to the other, which
    decodes)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.2), layout="constrained")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 7.2)
    ax.axis("off")

    def box(x, y, w, text, color):
        ax.add_patch(plt.Rectangle((x, y), w, 0.9, facecolor=color, edgecolor="black"))
        ax.text(x + w / 2, y + 0.45, text, ha="center", va="center")

    def arrow(x0, y0, x1, y1):
        ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->"))

    ax.text(0.1, 6.75, "colocated", weight="bold", va="center")
    box(0.1, 4.75, 1.7, "router", "#dddddd")
    box(3.2, 5.45, 4.6, "GPU 1: prefill + decode", "#9ecae1")
    box(3.2, 4.05, 4.6, "GPU 2: prefill + decode", "#9ecae1")
    arrow(1.8, 5.2, 3.2, 5.9)
    arrow(1.8, 5.2, 3.2, 4.5)
    ax.text(0.1, 2.75, "disaggregated", weight="bold", va="center")
    box(0.1, 0.9, 1.7, "router", "#dddddd")
    box(2.5, 0.9, 2.9, "GPU 1: prefill", "#fdae6b")
    box(7.0, 0.9, 2.9, "GPU 2: decode", "#a1d99b")
    arrow(1.8, 1.35, 2.5, 1.35)
    arrow(5.4, 1.35, 7.0, 1.35)
    ax.text(6.2, 1.95, "KV cache", ha="center")
    return fig


def slo_attainment(rates: Sequence[float], attainment: Mapping[str, Sequence[float]],
                   threshold: float = 0.9):
    """Return the share of requests meeting the SLO (%) against the arrival rate, one line
    per layout in `attainment` (fractions in [0, 1], one per rate), and a dotted line at
    `threshold`, the attainment that defines the knee."""
    import matplotlib.pyplot as plt

    rates = finite_floats("rates", rates)
    threshold = validate.finite_float("threshold", threshold, 0.0, 1.0)
    if not attainment:
        raise ValueError("attainment is empty: nothing to draw")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.4), layout="constrained")
    for name, fractions in attainment.items():
        values = finite_floats(f"attainment[{name!r}]", fractions, length=len(rates))
        if min(values) < 0 or max(values) > 1:
            raise ValueError(f"attainment[{name!r}] must be fractions in [0, 1]")
        ax.plot(rates, [100 * v for v in values], "o-", label=name)
    ax.axhline(100 * threshold, color="gray", ls=":")
    ax.set_xlabel("arrival rate (requests / s)")
    ax.set_ylabel("requests meeting the SLO (%)")
    legend_below(fig, ax, ncol=len(attainment) if len(attainment) <= 4 else 2)
    return fig
