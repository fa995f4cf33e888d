"""Tests for inferbook.batching_plots: chapter 6's figures fit the book's column, its tables
read the committed benchmark JSON, and bad input is refused with a clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from inferbook import batching_plots as plots
from inferbook.notebook import apply_plot_defaults, figure_text_problems, repo_root

BENCH = repo_root() / "outputs" / "benchmarks"


@pytest.fixture(autouse=True)
def _book_defaults():
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    apply_plot_defaults()
    yield
    plt.close("all")


def readable(fig):
    assert figure_text_problems(fig) == []
    return fig


STEPS = [[("A", 1, "decode"), ("B", 1, "decode"), ("E", 28, "prefill")],
         [("A", 1, "decode"), ("E", 12, "prefill"), ("F", 16, "prefill")]]


def test_scheduler_step_diagram_labels_narrow_runs_together():
    fig = readable(plots.scheduler_step_diagram(STEPS, 32, ["a note", "a longer note " * 6]))
    words = [t.get_text() for t in fig.axes[0].texts]
    assert "A–B" in words and "E: 28" in words and "A" in words      # A alone in step 2
    assert "budget: 32 tokens" in words
    readable(plots.scheduler_step_diagram(STEPS, 32))                 # notes are optional


class _Step:
    def __init__(self, running, padding_rows, blocks_used):
        self.running, self.padding_rows, self.blocks_used = running, padding_rows, blocks_used


class _Run:
    def __init__(self, rows):
        self.timeline = [_Step(*r) for r in rows]


def test_histogram_and_occupancy_figures_are_readable():
    fig = readable(plots.output_length_histogram(np.array([1, 5, 9, 30, 96])))
    assert sum(p.get_height() for p in fig.axes[0].patches) == 5
    runs = {"static": _Run([(4, 0, 8), (4, 2, 8)]), "continuous": _Run([(4, 0, 8)])}
    fig = readable(plots.occupancy_figure(runs))
    assert len(fig.axes) == 2
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [4, 2]     # padding rows excluded


def test_reports_read_the_committed_benchmarks():
    ref = json.loads((BENCH / "vllm_scheduler.json").read_text())
    text = plots.vllm_steps_report(ref, "first_chunk_admission")
    assert text.splitlines()[0].startswith("first_chunk_admission (vLLM ")
    bench = json.loads((BENCH / "ch06_scheduling.json").read_text())
    wall = json.loads((BENCH / "serving.json").read_text())["serving"]
    assert "continuous / static, per pair" in plots.static_vs_continuous_report(bench, wall)
    table = plots.chunked_prefill_report(bench["chunked_prefill"], bench["repeats"])
    assert len(table.splitlines()) == 2 + len(bench["chunked_prefill"]["configs"])
    peer = json.loads((BENCH / "peer_engine.json").read_text())
    assert "book_engine" in plots.peer_report(peer)
    same = json.loads((BENCH / "vllm_engine_tokens.json").read_text())
    assert "identical requests" in plots.vllm_tokens_report(same)
    race = json.loads((BENCH / "vllm_engine_throughput.json").read_text())
    assert "book_engine" in plots.vllm_throughput_report(race)


@pytest.mark.parametrize("call, words", [
    (lambda: plots.scheduler_step_diagram(STEPS, 0), "budget"),
    (lambda: plots.scheduler_step_diagram(STEPS, 16), "more than the 16-token budget"),
    (lambda: plots.scheduler_step_diagram([[("A", 1, "sample")]], 8), "'decode' or"),
    (lambda: plots.scheduler_step_diagram(STEPS, 32, ["one note"]), "one note per step"),
    (lambda: plots.output_length_histogram([]), "non-empty"),
    (lambda: plots.occupancy_figure({}), "policy names"),
    (lambda: plots.occupancy_figure({"static": 3}), "timeline"),
    (lambda: plots.vllm_steps_report({"examples": {}}, "missing"), "no example"),
])
def test_bad_input_is_refused_clearly(call, words):
    with pytest.raises((ValueError, TypeError, KeyError), match=words):
        call()
