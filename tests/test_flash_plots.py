"""Tests for inferbook.flash_plots: every chapter-3 figure is drawn for the book's column (at
most COLUMN_WIDTH_IN wide, no text below MIN_TEXT_PT) on small sample data, and bad input is
refused with a clear error."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from inferbook import flash, io_model  # noqa: E402
from inferbook import flash_plots as fp  # noqa: E402
from inferbook.notebook import PLOT_RC, figure_text_problems  # noqa: E402
from paths import ROOT  # noqa: E402


@pytest.fixture(autouse=True)
def book_defaults():
    with matplotlib.rc_context(PLOT_RC):
        yield
    plt.close("all")


@pytest.fixture(scope="module")
def steps():
    rng = np.random.default_rng(8)
    q, k, v = (rng.normal(size=(1, 1, 12, 4)) for _ in range(3))
    out = []
    flash.flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=4, on_tile=out.append)
    return out


def sample_bench():
    """A FIXTURE shaped like outputs/benchmarks/flash_numpy.json; its numbers are made up."""
    rows = [dict(n=n, peak_bytes=dict(naive=n * n * 16, tiled=n * 300),
                 median_seconds=dict(naive=n * 1e-5, tiled=n * 5e-6),
                 memory_ratio_naive_over_tiled=n / 20, time_ratio_tiled_over_naive=0.5)
            for n in (256, 512)]
    return dict(what="plain vs tiled, a fixture", block_q=64, block_k=64, date="1970-01-01",
                machine=dict(processor="FIXTURE-CPU", cpu_count=2, blas_threads=1),
                versions=dict(numpy="0"), rows=rows)


NS = [512, 1024, 2048]


def figures(steps):
    std = [io_model.standard_attention_io(n, 64, 2**15).total for n in NS]
    fa = [io_model.flash_attention_io(n, 64, 2**15).total for n in NS]
    yield "tiling", fp.tiling_diagram()
    yield "tile_error", fp.tile_error_figure([1, 16, 1024], [[3, 1.2, 1.0], [2.5, 1.1, 0.9]])
    yield "memory", fp.memory_figure(NS, [4, 16, 64], [0.4, 0.5, 0.8], head_dim=64)
    yield "io_n", fp.io_vs_n_figure(NS, std, fa, 64, 2**15)
    yield "io_m", fp.io_vs_sram_figure([2**13, 2**15, 2**17], [9e7, 8e7, 7e7], [9e7, 2e7, 6e6], 4096)
    yield "io_c", fp.io_constant_figure(NS, [5.1, 5.3, 5.5], [16, 14, 13])
    yield "intensity", fp.intensity_figure(NS, [28, 30, 31], [256, 512, 1024],
                                           {"T4": [64, 73, 79], "H100 SXM": [170, 204, 256]},
                                           {"T4": 200, "H100 SXM": 295}, 64)
    yield "step", fp.stepper_step_figure(steps, 2)
    yield "summary", fp.stepper_summary_figure(steps)
    yield "bench_memory", fp.bench_figure(sample_bench(), "memory")
    yield "bench_time", fp.bench_figure(sample_bench(), "time")


def test_every_figure_is_drawn_for_the_column(steps):
    seen = []
    for name, fig in figures(steps):
        assert figure_text_problems(fig) == [], name
        seen.append(name)
    assert len(seen) == 11


def test_stepper_summary_numbers_the_visited_tiles(steps):
    fig = fp.stepper_summary_figure(steps)
    numbers = sorted(t.get_text() for t in fig.axes[0].texts)
    assert numbers == [str(i) for i in range(1, len(steps) + 1)] and len(steps) == 6
    # one line per query row in each of the three state panels, ending at the final state
    for ax in fig.axes[1:4]:
        assert len(ax.get_lines()) == 12
    assert all(line.get_ydata()[-1] == 0 for line in fig.axes[3].get_lines())


def test_bench_table_reads_the_json():
    text = fp.bench_table(sample_bench())
    assert "FIXTURE-CPU" in text and "1970-01-01" in text
    assert len([line for line in text.splitlines() if line.strip().startswith(("256", "512"))]) == 2
    committed = json.loads((ROOT / "outputs" / "benchmarks" / "flash_numpy.json").read_text())
    assert f"{committed['rows'][0]['n']:>6}" in fp.bench_table(committed)


@pytest.mark.parametrize("call, words", [
    (lambda s: fp.tile_error_figure([1, 4], [[1, 2, 3]]), "ratios must be"),
    (lambda s: fp.tile_error_figure([0, 4], [[1, 2]]), "finite positive"),
    (lambda s: fp.memory_figure([256, 512], [1.0], [0.5, 0.6], 64), "expected 2"),
    (lambda s: fp.memory_figure("abc", [1.0], [0.5], 64), "sequence of numbers"),
    (lambda s: fp.io_vs_n_figure([], [], [], 64, 2**15), "non-empty"),
    (lambda s: fp.intensity_figure([1, 2], [1, 1], [1, 2], {"T4": [1, 2]}, {}, 64), "same GPU"),
    (lambda s: fp.stepper_step_figure(s, 99), "step must be"),
    (lambda s: fp.stepper_summary_figure([]), "TileState"),
    (lambda s: fp.bench_figure({"rows": []}, "memory"), "flash_numpy.json"),
    (lambda s: fp.bench_figure(sample_bench(), "speed"), "'memory' or 'time'"),
    (lambda s: fp.bench_table({"rows": [{"n": 1}]}), "missing keys"),
])
def test_bad_input_is_refused_clearly(steps, call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call(steps)
