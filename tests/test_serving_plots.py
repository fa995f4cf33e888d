"""Tests for inferbook.serving_plots: chapter 9's figures are drawn for the book's column and
refuse data they cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from inferbook import serving_plots as plots  # noqa: E402
from inferbook.notebook import PLOT_RC, figure_text_problems  # noqa: E402


@pytest.fixture(autouse=True)
def book_defaults():
    """Draw with the book's rcParams (as `notebook.setup` sets them), then close everything."""
    with matplotlib.rc_context(PLOT_RC):
        yield
    plt.close("all")


def legends_outside_axes(fig) -> bool:
    """True when no legend's box overlaps an axes' box (legends never over data)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes if ax.axison]
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return all(not leg.get_window_extent(renderer).overlaps(box)
               for leg in legends for box in boxes)


def cpu_rows():
    """Rows shaped like simulate_cpu.json's (made-up numbers, never written anywhere)."""
    keys = ["throughput_tok_s"] + [f"{m}_p{q}_s" for m in ("ttft", "tpot") for q in (50, 90)]
    return [dict(rate_req_s=rate,
                 measured={k: 0.01 * rate for k in keys},
                 measured_min_max={k: [0.009 * rate, 0.011 * rate] for k in keys},
                 simulated={k: 0.012 * rate for k in keys}) for rate in (1.0, 2.0, 4.0)]


def vllm_rows():
    """Rows shaped like vllm_serve.json's (made-up numbers)."""
    def cell(v):
        return {"measured": {"median": v, "min": 0.8 * v, "max": 1.3 * v},
                "predicted": {"median": 1.1 * v}}
    keys = [f"{m}_p{q}_s" for m in ("ttft", "tpot") for q in (50, 90)]
    return [dict(rate=rate, **{k: cell(0.05 * rate) for k in keys}) for rate in (1, 2, 4)]


FIGURES = {
    "cpu": lambda: plots.cpu_check(cpu_rows()),
    "vllm": lambda: plots.vllm_serve_check(vllm_rows(), [1, 4]),
    "stall": lambda: plots.stall_by_prompt(
        [256, 1024, 4096], {"A: budget 8192": [30, 90, 300], "D: budget 512": [30, 32, 35]}),
    "knee": lambda: plots.latency_knee(
        [2, 4, 8], {"static": ([200, 400, 700], [1.0, 2.0, 9.0], [10, 11, 12]),
                    "continuous (A)": ([200, 400, 800], [0.1, 0.2, 0.9], [20, 25, 40]),
                    "continuous (D)": ([200, 400, 800], [0.2, 0.3, 0.5], [12, 14, 18])}),
    "schematic": plots.disaggregation_schematic,
    "goodput": lambda: plots.slo_attainment(
        [8, 16, 32], {lay: [1.0, 0.9, 0.2] for lay in ("colocated", "1P:3D", "2P:2D", "3P:1D")}),
}


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_is_drawn_for_the_column(name):
    fig = FIGURES[name]()
    assert figure_text_problems(fig) == []
    assert legends_outside_axes(fig)
    # no power-of-ten tick labels: their superscripts are set below the smallest text
    ticks = [t.get_text() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for t in axis.get_ticklabels(which="both")]
    assert not [t for t in ticks if "$" in t or "^" in t]


def test_panels_stack_in_rows():
    for name in ("cpu", "vllm", "knee"):
        fig = FIGURES[name]()
        lefts = {round(ax.get_position().x0, 2) for ax in fig.axes}
        assert len(fig.axes) > 1 and len(lefts) == 1, name


@pytest.mark.parametrize("call, words", [
    (lambda: plots.cpu_check([]), "empty"),
    (lambda: plots.cpu_check([{"rate_req_s": 1.0}]), "measured"),
    (lambda: plots.cpu_check(["row"]), "mapping"),
    (lambda: plots.vllm_serve_check(vllm_rows(), []), "fit_rates"),
    (lambda: plots.stall_by_prompt([256, 512], {"A": [1.0]}), "expected 2"),
    (lambda: plots.stall_by_prompt([0, 512], {"A": [1.0, 2.0]}), "log"),
    (lambda: plots.latency_knee([1, 2], {"A": ([1, 2], [1, 2])}), "throughput"),
    (lambda: plots.latency_knee([1, 2], {"A": ([1, 2], [0, 2], [1, 2])}), "TTFT"),
    (lambda: plots.slo_attainment([1, 2], {"A": [50, 90]}), "fractions"),
    (lambda: plots.slo_attainment([1, 2], {}), "empty"),
    (lambda: plots.slo_attainment([1, 2], {"A": [0.5, 0.9]}, threshold=90), "threshold"),
])
def test_bad_input_is_refused_with_the_argument_named(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()
