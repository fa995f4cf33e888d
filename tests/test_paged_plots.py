"""Tests for inferbook.paged_plots: chapter 5's figures fit the book's column and refuse bad
input with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from inferbook import paged_plots as plots
from inferbook.blocks import BlockAllocator
from inferbook.fragmentation import sharegpt_like, simulate
from inferbook.notebook import apply_plot_defaults, figure_text_problems
from inferbook.paged import PagedKVCache


@pytest.fixture(autouse=True)
def _book_defaults():
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    apply_plot_defaults()
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def results():
    requests = sharegpt_like(40, seed=0, max_len=256)
    return {p: simulate(requests, p, capacity_tokens=2048, block_size=16)
            for p in ("reserve_max", "exact", "paged")}


def readable(fig):
    assert figure_text_problems(fig) == []
    return fig


def test_block_table_diagram_counts_references_and_lists_the_free_blocks():
    fig = readable(plots.block_table_diagram({"A": [3, 6, 0, 1], "B": [3, 6, 4]}, 8))
    words = [t.get_text() for t in fig.axes[0].texts]
    assert "free list: 2, 5, 7" in words
    assert words.count("2") >= 3             # blocks 3 and 6 are held twice; block 2 is free
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "shared", "A only", "B only", "free"]


def test_pool_figure_colours_each_token_slot_by_its_sequence():
    cache = PagedKVCache(BlockAllocator(6, 4), n_layers=1, n_kv_heads=1, head_dim=1)
    for seq, n in (("A", 3), ("B", 6)):
        cache.blocks.add_sequence(seq)
        cache.append_slots(seq, n)
    fig = readable(plots.pool_figure(cache.blocks, "a small pool"))
    owner = fig.axes[0].images[1].get_array()
    assert np.isfinite(owner).sum() == 9     # one coloured slot per token
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [f"A: {cache.blocks.block_table('A')}",
                      f"B: {cache.blocks.block_table('B')}"]


def test_workload_and_simulation_figures_are_readable(results):
    requests = sharegpt_like(40, seed=0, max_len=256)
    fig = readable(plots.length_histograms(requests.prompt_lens, requests.output_lens, 256))
    assert len(fig.axes) == 2 and fig.get_size_inches()[1] > fig.get_size_inches()[0] * 0.8
    fig = readable(plots.pool_use_bars(results))
    assert len(fig.axes[0].patches) == 4 * len(results)
    fig = readable(plots.running_over_time(results))
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == list(results)
    waste = {bs: 10.0 * i for i, bs in enumerate((1, 16, 64))}
    fig = readable(plots.waste_by_block_size(waste, exact_pct=40.0))
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [0.0, 10.0, 20.0]


def test_fork_and_prefix_cache_figures_are_readable():
    points = [{"completion_tokens": c, "ratio": r} for c, r in ((32, 4.4), (1, 6.4), (8, 4.7))]
    fig = readable(plots.fork_speedup(points, lambda c: 8 * (512 + c) / (512 + 8 * c), 512, 8))
    measured = fig.axes[0].get_lines()[1]
    assert list(measured.get_xdata()) == [1, 8, 32]          # sorted by completion length
    fig = readable(plots.prefix_hit_rate([200, 400, 4000], [80.0, 90.0, 95.0]))
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [80.0, 90.0, 95.0]


def test_fragmentation_explorer_builds_its_widget():
    pytest.importorskip("ipywidgets")
    widget = plots.fragmentation_explorer(sharegpt_like(20, seed=0, max_len=128))
    assert [c.description for c in widget.children[:2]] == ["block_size", "pool (K tokens)"]


@pytest.mark.parametrize("call, words", [
    (lambda: plots.block_table_diagram({"A": [3, 9]}, 8), "table 'A'"),
    (lambda: plots.block_table_diagram({}, 8), "1 to 4"),
    (lambda: plots.block_table_diagram({"A": [0]}, 0), "num_blocks"),
    (lambda: plots.pool_figure([1, 2]), "BlockManager"),
    (lambda: plots.length_histograms([], [1], 16), "prompt lengths"),
    (lambda: plots.pool_use_bars({"paged": object()}), "SimResult"),
    (lambda: plots.running_over_time({}), "policy names"),
    (lambda: plots.waste_by_block_size({0: 1.0}, 5.0), "block size"),
    (lambda: plots.fork_speedup([{"ratio": 2}], lambda c: c, 10, 2), "completion_tokens"),
    (lambda: plots.fork_speedup([{"completion_tokens": 1, "ratio": 2}], 3, 10, 2),
     "positions_ratio"),
    (lambda: plots.prefix_hit_rate([1, 2], [50.0]), "as long"),
])
def test_bad_input_is_refused_clearly(call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call()
