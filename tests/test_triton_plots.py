"""Tests for inferbook.triton_plots: the FLOP convention, the benchmark JSON, and chapter 4's
figures and tables (drawn for the column, refusing bad input)."""

from __future__ import annotations

import json

import pytest

from inferbook import flash
from inferbook import triton_plots as plots


def test_benchmark_flops_convention():
    assert plots.benchmark_flops(2, 3, 1024, 64, False) == 4 * 2 * 3 * 1024**2 * 64
    assert plots.benchmark_flops(2, 3, 1024, 64, True) == 2 * 2 * 3 * 1024**2 * 64
    exact = flash.attention_flops(1024, 1024, 64, causal=True, batch_heads=6)
    assert exact / plots.benchmark_flops(2, 3, 1024, 64, True) == pytest.approx(1025 / 1024)


def synthetic_run():
    """A FIXTURE shaped like the benchmark's JSON. Its numbers are made up; it is never
    written under outputs/."""
    rows = []
    for method, speed in (("sdpa_flash", 1.0), ("ours_triton", 0.5)):
        for n in (512, 1024):
            rows.append(dict(method=method, seq_len=n, head_dim=64, causal=False, status="ok",
                             tflops=speed * n / 1024, peak_mem_bytes=n * 1000))
    rows.append(dict(method="sdpa_cudnn", seq_len=512, head_dim=64, causal=False,
                     status="unsupported: sm75", tflops=None, peak_mem_bytes=None))
    machine = dict(gpu="FIXTURE-GPU", capability="75", driver="0.0", torch="0", triton="0",
                   flash_attn=None, date="1970-01-01")
    return {"machine": machine, "results": rows}


def test_load_and_plot_benchmark_results_from_a_fixture(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    (tmp_path / "flash_triton_fixture.json").write_text(json.dumps(synthetic_run()))
    (tmp_path / "unrelated.json").write_text("{}")
    runs = plots.load_benchmark_results(tmp_path)
    assert [r["path"] for r in runs] == ["flash_triton_fixture.json"]
    label = plots.benchmark_label(runs[0])
    assert "FIXTURE-GPU" in label and "1970-01-01" in label
    fig = plots.plot_benchmark_results(runs[0])
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"sdpa_flash", "ours_triton"}         # unsupported rows are not plotted
    assert list(lines["ours_triton"].get_ydata()) == [0.25, 0.5]
    assert plots.load_benchmark_results(tmp_path / "missing") == []
    (tmp_path / "flash_triton_bad.json").write_text("{}")
    with pytest.raises(ValueError, match="missing keys"):
        plots.load_benchmark_results(tmp_path)


@pytest.mark.parametrize("call, words", [
    (lambda: plots.benchmark_flops(1, 1, 0, 64, False), "seq_len"),
    (lambda: plots.benchmark_flops(1, 2, 128, 64.5, False), "head_dim"),
    (lambda: plots.benchmark_flops(1, 2, 128, 64, "no"), "causal"),
    (lambda: plots.load_benchmark_results(None), "folder"),
])
def test_bad_input_names_the_argument(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()


# -- the chapter's figures and tables: drawn for the column, refusing bad input ------------------

def _agg():
    import matplotlib

    matplotlib.use("Agg")
    from inferbook.notebook import apply_plot_defaults

    apply_plot_defaults()


def _sample_gpus():
    from inferbook.hardware import gpu

    return [gpu(n) for n in ("T4", "A100 80GB", "H100 SXM", "H200")]


def _schedule_grid():
    import numpy as np

    return np.array([[1, 0, 0], [2, 1, 0], [2, 2, 1]])


def _figures():
    gpus = _sample_gpus()
    splits = [1, 2, 4, 8, 16]
    return {
        "sram_vs_hbm": lambda: plots.plot_sram_vs_hbm(
            [g.name for g in gpus], [g.num_sms * g.smem_bytes_per_sm for g in gpus],
            [g.hbm_bytes for g in gpus]),
        "tile_diagram": plots.plot_tile_diagram,
        "tile_schedule": lambda: plots.plot_tile_schedule(_schedule_grid(), 64, 32),
        "decode_roofline": lambda: plots.plot_decode_roofline(
            gpus, {"decode": 1.0, "prefill": 1024.0}, on=gpus[2]),
        "split_error": lambda: plots.plot_split_error(splits, [1e-7] * len(splits)),
        "split_programs": lambda: plots.plot_split_programs(splits, 8, gpus),
        "benchmark": lambda: plots.plot_benchmark_results(synthetic_run()),
    }


@pytest.mark.parametrize("name", sorted(_figures()))
def test_every_figure_is_drawn_for_the_column(name):
    import matplotlib.pyplot as plt

    from inferbook.notebook import figure_text_problems

    _agg()
    fig = _figures()[name]()
    try:
        assert figure_text_problems(fig) == [], name
    finally:
        plt.close(fig)


def test_tables_and_text_carry_their_rows():
    from inferbook import attention_backends

    gpus = _sample_gpus()
    assert all(g.name in plots.gpu_memory_table(gpus).data for g in gpus)
    fwd = {"sm90": dict(registers=255, shared_bytes=160 * 1024,
                        resident_per_sm=dict(registers=1, shared=1, warps=8, resident=1))}
    pd = {"sm90": dict(registers=90, shared_bytes=9 * 1024,
                       resident_per_sm=dict(registers=5, shared=20, warps=16, resident=5))}
    html = plots.occupancy_table(fwd, pd).data
    assert "sm90" in html and "1 / 1 / 8" in html
    with pytest.raises(ValueError, match="sm80"):
        plots.occupancy_table(fwd, pd, ["sm80"])
    row = dict(capability="sm90", shared_bytes=9 * 1024, smem_limit_bytes=227 * 1024,
               registers=90, spill_bytes=0, resident_per_sm=dict(resident=5))
    assert "227" in plots.paged_decode_table([row]).data
    text = plots.versions_text(attention_backends.FLASH_ATTENTION_VERSIONS)
    assert all(v.name in text for v in attention_backends.FLASH_ATTENTION_VERSIONS)
    assert max(len(line) for line in text.splitlines()) <= 78


def test_source_block_cuts_between_markers():
    src = "a\n# -- one\nx = 1\n# -- two\ny = 2"
    assert plots.source_block(src, "# -- one", "# -- two") == "# -- one\nx = 1"
    assert plots.source_block(src, "# -- two") == "# -- two\ny = 2"
    with pytest.raises(ValueError, match="start_marker"):
        plots.source_block(src, "# -- three")


def test_decode_sliders_call_the_report():
    pytest.importorskip("ipywidgets")
    seen = []
    sliders = plots.decode_sliders(lambda **kw: seen.append(kw), ["T4", "H100 SXM"])
    sliders.children[0].value = 2048
    assert seen[-1]["context_tokens"] == 2048 and seen[-1]["gpu_name"] == "H100 SXM"


@pytest.mark.parametrize("call, words", [
    (lambda: plots.plot_sram_vs_hbm(["T4"], [1, 2], [3]), "one length"),
    (lambda: plots.plot_sram_vs_hbm([], [], []), "at least one"),
    (lambda: plots.plot_tile_schedule([[0, 1]], 64, 32), "2-D array"),
    (lambda: plots.plot_tile_schedule(_schedule_grid() * 3, 64, 32), "codes"),
    (lambda: plots.plot_tile_schedule(_schedule_grid(), 0, 32), "block_m"),
    (lambda: plots.plot_decode_roofline(_sample_gpus(), {}, on=_sample_gpus()[0]), "points"),
    (lambda: plots.plot_split_error([1, 2], [1e-7]), "one length"),
    (lambda: plots.plot_split_programs([1, 2], 0, _sample_gpus()), "kv_heads"),
    (lambda: plots.decode_sliders("report", ["T4"]), "report"),
    (lambda: plots.versions_text([], width=0), "width"),
    (lambda: plots.plot_benchmark_results(synthetic_run(), causal="no"), "causal"),
])
def test_figures_refuse_bad_input(call, words):
    _agg()
    with pytest.raises((TypeError, ValueError), match=words):
        call()
