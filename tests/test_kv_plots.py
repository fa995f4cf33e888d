"""Tests for inferbook.kv_plots: every figure of chapters 1 and 2 is drawn for the book's column
(`notebook.figure_text_problems` finds nothing) on small sample data, and bad input is refused
naming the argument."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from inferbook import kv_plots as kp  # noqa: E402
from inferbook.hardware import gpu  # noqa: E402
from inferbook.notebook import apply_plot_defaults, figure_text_problems  # noqa: E402


@pytest.fixture(autouse=True)
def book_defaults():
    apply_plot_defaults()
    yield
    plt.close("all")


def sample_figures():
    """One call of each function on small made-up data (not the chapters' numbers)."""
    h100 = gpu("H100 SXM")
    return {
        "roofline": lambda: kp.roofline_figure(
            [gpu("T4"), h100], [("decode", 1.0, 3.3e12), ("prefill", 1000.0, 989e12)]),
        "cache_layout": lambda: kp.cache_layout_figure(),
        "step_time": lambda: kp.step_time_figure(
            [4, 5, 6], {"naive": [[1, 2, 3], [1.5, 2.5, 3.5]], "cached": [[1, 1, 1], [1, 1, 2]]},
            repeats=2, labels={"cached": "KV cache"}),
        "bench_step": lambda: kp.bench_step_figure({"naive": [1, 2, 4], "cached": [1, 1, 1]}),
        "head_sharing": lambda: kp.head_sharing_figure(8, 2),
        "variants": lambda: kp.variants_figure(["MHA", "GQA", "MQA"], [8.0, 1.0, 0.125]),
        "kv_vs_context": lambda: kp.kv_vs_context_figure(
            [("A (MHA)", [512, 1024, 2048], [0.25, 0.5, 1.0]), ("B (GQA)", [512, 4096], [0.1, 0.8])],
            [("all of one L4", 24.0)]),
        "crossover": lambda: kp.crossover_figure(["small", "big (4K)"], [3.5, 1200.0]),
        "tp_grid": lambda: kp.tp_grid_figure(["m1", "m2"], ["L4", "H100 SXM"],
                                             [[1, 2], [math.nan, 8]]),
    }


@pytest.mark.parametrize("name", list(sample_figures()))
def test_each_figure_fits_the_column(name):
    fig = sample_figures()[name]()
    assert isinstance(fig, matplotlib.figure.Figure)
    assert figure_text_problems(fig) == []
    assert fig.get_size_inches()[0] <= kp.COLUMN_WIDTH_IN + 1e-9


def test_the_figures_draw_the_data_they_are_given():
    fig = kp.variants_figure(["MHA", "GQA"], [8.0, 1.0])
    widths = sorted(p.get_width() for p in fig.axes[0].patches)
    assert widths == [1.0, 8.0]
    fig = kp.step_time_figure([4, 5], {"naive": [[1, 3], [3, 5]]}, repeats=2)
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [2.0, 4.0]  # the median per step
    fig = kp.cache_layout_figure(n_layers=1, n_heads=2, max_len=4, prompt=2, steps=1)
    assert len([p for p in fig.axes[0].patches]) == 2 * 2 * 4  # K and V, heads x positions


@pytest.mark.parametrize("call, words", [
    (lambda: kp.roofline_figure([], [("a", 1.0, 1e12)]), "gpus"),
    (lambda: kp.roofline_figure([gpu("H100 SXM")], [], intensity_range=(10, 1)), "intensity_range"),
    (lambda: kp.cache_layout_figure(prompt=9, steps=2, max_len=10), "max_len"),
    (lambda: kp.cache_layout_figure(steps=4), "steps"),
    (lambda: kp.cache_layout_figure(n_heads=0), "n_heads"),
    (lambda: kp.step_time_figure([1, 2], {"naive": [[1, 2, 3]]}, repeats=1), "step_ms"),
    (lambda: kp.step_time_figure([1, 2], {}, repeats=1), "step_ms"),
    (lambda: kp.bench_step_figure({"naive": [1, 2], "cached": [1]}), "same number"),
    (lambda: kp.head_sharing_figure(8, 3), "divide"),
    (lambda: kp.head_sharing_figure(8, 8), "n_kv_gqa"),
    (lambda: kp.variants_figure(["a"], [1.0, 2.0]), "labels"),
    (lambda: kp.variants_figure(["a"], [math.inf]), "gb"),
    (lambda: kp.kv_vs_context_figure([("a", [1, 2], [1.0])]), "curves"),
    (lambda: kp.kv_vs_context_figure([]), "curves"),
    (lambda: kp.crossover_figure(["a"], [0.0]), "sequences"),
    (lambda: kp.tp_grid_figure(["m"], ["g1", "g2"], [[1]]), "tp"),
    (lambda: kp.tp_grid_figure(["m"], ["g"], [[0]]), "tp"),
    (lambda: kp.variants_figure("ab", [1.0, 2.0]), "labels"),
])
def test_bad_input_names_the_argument(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()
