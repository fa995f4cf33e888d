"""Tests for inferbook.spec_plots: chapter 7's figures are drawn for the book's column and
refuse data they cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from inferbook import spec_plots as plots  # noqa: E402
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


SIZES = [1_000, 10_000, 100_000]
FIGURES = {
    "rounds": lambda: plots.speculative_rounds(
        ["for", "i", "in"], ["range", "(", "n", ")"],
        [("two accepted", 2, "len"), ("all accepted", 4, ":")]),
    "tv": lambda: plots.tv_against_samples(
        SIZES, {"package verify": [0.1, 0.03, 0.01], "bug": [0.2, 0.1, 0.09]},
        [0.1, 0.03, 0.01]),
    "tokens": lambda: plots.tokens_per_pass(
        [1, 2, 3], [1.7, 2.1, 2.5], [1.5, 1.9, 2.2], [1.9, 2.4, 2.8], [0, 1, 2, 3],
        [1.0, 1.7, 2.2, 2.5], 0.7),
    "pass costs": lambda: plots.pass_costs(
        [1, 2, 3], [0.5, 0.6, 0.62], [0.48, 0.59, 0.6], [0.8, 0.63, 0.7], [2, 3],
        [0.6, 0.62], 0.15, 9),
    "speedup by k": lambda: plots.speedup_by_draft_length(
        {"1.0": ([1, 2], [0.9, 0.95], [1.1, 1.05]), "0.0": ([1, 2], [1.0, 1.2], [1.2, 1.4])}),
    "speedup by batch": lambda: plots.speedup_by_batch(
        {"k = 2": ([1, 8, 64], [2.0, 1.9, 0.8]), "k = 4": ([1, 8], [2.4, 2.3])}),
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


def test_the_schematic_marks_each_round():
    fig = FIGURES["rounds"]()
    words = {t.get_text() for t in fig.axes[0].texts}
    assert {"3 tokens\nper pass", "5 tokens\nper pass", "residual", "bonus"} <= words


@pytest.mark.parametrize("call, words", [
    (lambda: plots.speculative_rounds(["a"], ["b", "c"], [("too many", 3, "x")]),
     "drafts accepted"),
    (lambda: plots.speculative_rounds([], ["b"], [("t", 0, "x")]), "context"),
    (lambda: plots.tv_against_samples([1, 10], {"rule": [0.1]}, [0.1, 0.05]), "rule"),
    (lambda: plots.tv_against_samples([1, 10], {"rule": [0.1, 0.0]}, [0.1, 0.05]), "log"),
    (lambda: plots.tokens_per_pass([1], [1.5], [1.4], [1.6], [0, 1], [1.0, 1.5], 1.5),
     "alpha"),
    (lambda: plots.pass_costs([1], [0.5], [0.6], [0.7], [2], [0.6], 0.1, 3), "between"),
    (lambda: plots.pass_costs([1], [0.5], [0.4], [0.7], [2], [0.6], 0.1, 0), "rounds"),
    (lambda: plots.speedup_by_draft_length({}), "empty"),
    (lambda: plots.speedup_by_draft_length({"1.0": ([1], [1.0])}), "predicted"),
    (lambda: plots.speedup_by_batch({"k": ([1, 2], [1.0, float("nan")])}), "speedups"),
    (lambda: plots.speedup_by_batch({"k": ("ab", [1.0, 1.0])}), "batches"),
])
def test_bad_input_is_refused_with_the_argument_named(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()
