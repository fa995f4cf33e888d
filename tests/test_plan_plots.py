"""Tests for inferbook.plan_plots: chapter 8's figures fit the book's column and refuse bad data.

Each function is drawn on small sample data and checked with `notebook.figure_text_problems`
(at most `COLUMN_WIDTH_IN` wide, no text below `MIN_TEXT_PT`), and its legend is checked to sit
outside the axes, so it never covers data.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from inferbook import plan_plots, validate  # noqa: E402
from inferbook.notebook import COLUMN_WIDTH_IN, apply_plot_defaults, figure_text_problems  # noqa: E402

SEGMENTS = [("weights", 35.3, "weights"), ("activations", 2.0, "activations"),
            ("CUDA graphs", 0.7, "CUDA graphs"), ("non-torch", 2.1, "non-torch"),
            ("KV cache", 38.1, "KV cache"), ("not requested (1 − u)", 6.8, "not requested")]
PARTS = ["weights", "runtime: activations, graphs, non-torch", "KV held", "KV left",
         "not requested (1 − u)"]
SCHEDULE = [(1, 60, 4), (61, 72, 3), (73, 98, 2), (99, 147, 1), (148, 1024, 0)]


@pytest.fixture(autouse=True)
def _defaults():
    apply_plot_defaults()
    yield
    plt.close("all")


def _legend_outside(fig):
    """Return whether every legend of `fig` lies outside its axes (none over the data)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends, "the figure has no legend"
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    return all(not leg.get_window_extent(renderer).overlaps(box)
               for leg in legends for box in boxes)


def test_budget_figure_fits_the_column():
    fig = plan_plots.budget_figure(SEGMENTS, 85.0, "GB of one H100")
    assert figure_text_problems(fig) == []
    assert fig.get_size_inches()[0] <= COLUMN_WIDTH_IN
    assert _legend_outside(fig)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[0] == "weights: 35.3 GB" and len(texts) == len(SEGMENTS)


def test_budget_figure_refuses_bad_segments():
    with pytest.raises(ValueError, match="more than total_gb"):
        plan_plots.budget_figure(SEGMENTS, 50.0, "GB")
    with pytest.raises(ValueError, match="must not be empty"):
        plan_plots.budget_figure([], 85.0, "GB")
    with pytest.raises(ValueError, match=r"segments\[0\]"):
        plan_plots.budget_figure([("weights", 3.0)], 85.0, "GB")
    with pytest.raises(ValueError, match=r"segments\[0\] GB must be ≥ 0"):
        plan_plots.budget_figure([("weights", -1.0, "weights")], 85.0, "GB")
    with pytest.raises(validate.ArgumentTypeError):
        plan_plots.budget_figure("weights", 85.0, "GB")


def test_plans_memory_figure_fits_the_column():
    names = ["7B chat, Colab T4", "70B, 4×H100, 32K", "DeepSeek-V3, 8×H200"]
    rows = [[8.0, 1.0, 3.0, 2.0, 1.0], [35.3, 4.8, 10.0, 28.1, 6.8],
            [102.5, 3.0, 20.0, 12.0, 12.0]]
    fig = plan_plots.plans_memory_figure(names, rows, PARTS)
    assert figure_text_problems(fig) == []
    assert _legend_outside(fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == names


def test_plans_memory_figure_refuses_ragged_data():
    with pytest.raises(ValueError, match="one row per plan"):
        plan_plots.plans_memory_figure(["a", "b"], [[1, 2, 3, 4, 5]], PARTS)
    with pytest.raises(ValueError, match="5 values"):
        plan_plots.plans_memory_figure(["a"], [[1, 2, 3]], PARTS)
    with pytest.raises(ValueError, match="names"):
        plan_plots.plans_memory_figure([""], [[1, 2, 3, 4, 5]], PARTS)
    with pytest.raises(ValueError, match=r"parts\[0\]\[2\] must be a finite number"):
        plan_plots.plans_memory_figure(["a"], [[1, 2, float("nan"), 4, 5]], PARTS)


def test_spec_schedule_figure_fits_the_column():
    curves = [("Llama-3.1-8B on H100, bf16 (T* = 295 tokens)", SCHEDULE),
              ("DeepSeek-V3 on H200, fp8 (T* = 1846 tokens)", [(1, 900, 4), (901, 1024, 1)])]
    fig = plan_plots.spec_schedule_figure(curves)
    assert figure_text_problems(fig) == []
    assert _legend_outside(fig)
    assert fig.axes[0].get_xlim()[1] == 1024


def test_spec_schedule_figure_refuses_a_broken_schedule():
    with pytest.raises(ValueError, match="contiguous"):
        plan_plots.spec_schedule_figure([("gap", [(1, 10, 4), (12, 20, 0)])])
    with pytest.raises(ValueError, match="contiguous"):
        plan_plots.spec_schedule_figure([("late start", [(2, 10, 4)])])
    with pytest.raises(ValueError, match="empty schedule"):
        plan_plots.spec_schedule_figure([("none", [])])
    with pytest.raises(ValueError, match="must not be empty"):
        plan_plots.spec_schedule_figure([])
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        plan_plots.spec_schedule_figure([("negative k", [(1, 10, -1)])])


def test_recommender_widget_prints_the_plan_and_refuses_unknown_choices():
    pytest.importorskip("ipywidgets")
    box = plan_plots.recommender_widget("Llama-3.1-8B", "H100 SXM", n_gpus=1, context=8192)
    dropdowns = [w for row in box.children[:2] for w in row.children]
    assert [d.value for d in dropdowns] == ["Llama-3.1-8B", "H100 SXM", 1, 8192, "chat"]
    with pytest.raises(ValueError, match="model must be one of"):
        plan_plots.recommender_widget("GPT-5")
    with pytest.raises(ValueError, match="n_gpus must be one of"):
        plan_plots.recommender_widget(n_gpus=3)
    with pytest.raises(ValueError, match="kind must be one of"):
        plan_plots.recommender_widget(kind="poetry")
