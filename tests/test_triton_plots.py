"""Tests for inferbook.triton_plots: the FLOP convention, reading and plotting benchmark JSON."""

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
