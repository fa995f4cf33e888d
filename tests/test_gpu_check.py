"""tools/gpu_check.py: the kernel's GPU targets are derived from the roofline, and the verdicts
read a benchmark JSON. Runs without a GPU (the fixtures stand in for a run)."""

import importlib.util

import pytest

from paths import ROOT


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(cc, vs, ratios):
    rows = [dict(seq_len=4096, head_dim=d, causal=False, vs=vs, ours_over_other_tflops=r)
            for d, r in ratios]
    return {"machine": {"capability": cc}, "ratios": rows}


def test_t4_target_is_below_one_and_derived_from_fma():
    gc = _gpu_check()
    baseline, ceiling, target = gc.target_for("75", 4096, 64)
    assert baseline == "sdpa_math"
    # 8.1 TFLOP/s FMA against SDPA-math's HBM-bound 4096*64/(2*4160) FLOP/B x 320 GB/s
    assert ceiling == pytest.approx(8.1e12 / (4096 * 64 / (2 * 4160) * 320e9), rel=1e-9)
    assert 0.5 < ceiling < 1 and target == pytest.approx(0.5 * ceiling)


def test_tensor_core_generations_share_the_flash_target():
    gc = _gpu_check()
    for cc in ("80", "86", "89", "90", "100"):
        assert gc.target_for(cc, 8192, 128) == ("sdpa_flash", 1.0, 0.9)
    assert gc.target_for("70", 4096, 64) is None


def test_verdicts_from_fixtures():
    targets = _gpu_check().targets
    assert "met (worst 0.95x" in targets(run("90", "sdpa_flash", [(64, 0.95), (128, 1.1)]))[0]
    assert "NOT met" in targets(run("90", "sdpa_flash", [(64, 0.5), (128, 1.1)]))[0]
    assert "NOT met" in targets(run("86", "sdpa_flash", [(64, 0.8)]))[0]
    assert "met (worst 0.45x" in targets(run("75", "sdpa_math", [(64, 0.45)]))[0]
    assert "NOT met" in targets(run("75", "sdpa_math", [(64, 0.3)]))[0]
    assert "no comparable" in targets(run("75", "sdpa_flash", [(64, 1.0)]))[0]
    assert "no target" in targets(run("70", "sdpa_math", [(64, 1.0)]))[0]
