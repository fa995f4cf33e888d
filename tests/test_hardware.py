"""GPU presets against the vendor datasheets (numbers typed again here, per GPU, dense)."""

import re
from pathlib import Path

import pytest

from inferbook.hardware import GPUS, gpu

GB, TB = 1e9, 1e12
# name: (memory GB, bandwidth GB/s, dense FP16 tensor TFLOPS or None, compute capability, SMs)
DATASHEET = {
    "T4": (16, 320, 65, (7, 5), 40),
    "L4": (24, 300, 121, (8, 9), 58),
    "A10G": (24, 600, None, (8, 6), 80),
    "RTX 4090": (24, 1008, 165.2, (8, 9), 128),
    "A100 40GB": (40, 1555, 312, (8, 0), 108),
    "A100 80GB": (80, 2039, 312, (8, 0), 108),
    "H100 SXM": (80, 3350, 989, (9, 0), 132),
    "H200": (141, 4800, 989, (9, 0), 132),
    "B200": (180, 8000, 2250, (10, 0), None),
    "L40S": (48, 864, 362, (8, 9), 142),
}

# What torch.cuda.mem_get_info() reports (GiB, two decimals, as the cited logs print it); typed
# again here from the logs named in inferbook.hardware.CUDA_TOTAL.
CUDA_GIB = {"T4": 14.58, "L4": 22.03, "A10G": 22.18, "RTX 4090": 23.68, "A100 40GB": 39.38,
            "A100 80GB": 79.15, "H100 SXM": 79.18, "H200": 139.81, "B200": 178.35, "L40S": 44.42}


def test_the_issue_gpus_are_all_there():
    assert set(GPUS) == set(DATASHEET)


@pytest.mark.parametrize("name", DATASHEET)
def test_datasheet_numbers(name):
    g = GPUS[name]
    mem, bw, tflops, cc, sms = DATASHEET[name]
    assert g.hbm_bytes == mem * GB
    assert g.hbm_bytes_per_s == pytest.approx(bw * GB)
    assert g.fp16_tensor_flops == (None if tflops is None else pytest.approx(tflops * 1e12))
    assert g.compute_capability == cc and g.num_sms == sms
    assert g.sm_arch == f"sm{cc[0]}{cc[1]}"


@pytest.mark.parametrize("name", DATASHEET)
def test_cuda_reported_memory_is_what_budgets_use(name):
    g = GPUS[name]
    assert g.cuda_total_bytes == round(CUDA_GIB[name] * 1024) * 2**20 == g.memory_bytes
    assert g.marketing_bytes == g.hbm_bytes and g.cuda_total_source
    assert abs(g.memory_bytes / g.hbm_bytes - 1) < 0.10   # binary GiB less the driver's share


def test_h100_reports_about_85e9_bytes_not_80e9():
    assert gpu("H100").memory_bytes == pytest.approx(85.0e9, rel=2e-3)
    assert gpu("T4").memory_bytes < 16e9 < gpu("T4").hbm_bytes + 1


def test_bad_gpu_objects_are_refused():
    from dataclasses import replace
    with pytest.raises(ValueError, match="cuda_total_bytes"):
        replace(GPUS["T4"], cuda_total_bytes=-1)
    with pytest.raises(ValueError, match="hbm_bytes"):
        replace(GPUS["T4"], hbm_bytes=16.0e9)
    with pytest.raises(ValueError, match="name: unknown GPU preset"):
        gpu("V100")


def test_every_cite_key_is_in_the_bibliography():
    bib = (Path(__file__).resolve().parent.parent / "book" / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    assert {g.cite for g in GPUS.values()} <= keys


def test_ridge_point_and_errors():
    assert gpu("h100 sxm").ridge_flops_per_byte == pytest.approx(989e12 / 3.35e12)
    with pytest.raises(ValueError, match="no published"):
        gpu("A10G").ridge_flops_per_byte
    with pytest.raises(ValueError, match="known presets: T4"):
        gpu("V100")


@pytest.mark.parametrize("alias, preset", [
    ("H100", "H100 SXM"), ("h100 sxm", "H100 SXM"), ("H100-SXM", "H100 SXM"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("A100", "A100 80GB"), ("a100-sxm4-40gb", "A100 40GB"),
    ("Tesla T4", "T4"), ("4090", "RTX 4090"), ("rtx4090", "RTX 4090"), ("l4", "L4")])
def test_gpu_names_and_aliases(alias, preset):
    assert gpu(alias) is GPUS[preset]


def test_same_aliases_in_sizing_and_recommend():
    from inferbook import sizing
    from inferbook.recommend import resolve_gpus
    assert sizing.fits("Llama-3.1-8B", "H100") == sizing.fits("Llama-3.1-8B", "H100 SXM")
    assert resolve_gpus("4xH100")[0] is resolve_gpus(("h100 sxm", 4))[0] is GPUS["H100 SXM"]
    with pytest.raises(TypeError):
        gpu(80)


# ---- the third ceiling: exponentials per second ----------------------------------------------
# name: (SMs, boost clock MHz) for the derived figures, typed again from the datasheets
BOOST_MHZ = {"T4": (40, 1590), "L4": (58, 2040), "RTX 4090": (128, 2520),
             "A100 40GB": (108, 1410), "A100 80GB": (108, 1410), "L40S": (142, 2520)}


def test_exp_throughput_is_sourced_and_matches_16_per_clock_per_sm():
    for name, (sms, mhz) in BOOST_MHZ.items():
        g = gpu(name)
        assert g.exp_per_s == pytest.approx(sms * 16 * mhz * 1e6), name
        assert g.exp_source.startswith("derived") and "16/clock" in g.exp_source
    h100 = gpu("H100 SXM")
    assert h100.exp_per_s == 3.9e12 and h100.exp_source.startswith("quoted: FlashAttention-3")
    # FA3's quoted 3.9 TFLOPS is 132 SMs x 16 x the 1830 MHz at which 989 TFLOPS is rated
    assert h100.exp_per_s == pytest.approx(132 * 16 * 1.83e9, rel=0.02)
    assert gpu("H200").exp_per_s == h100.exp_per_s
    b200 = gpu("B200")
    assert b200.exp_per_s == pytest.approx(2250e12 * 16 / 8192) and "FlashAttention-4" in b200.exp_source
    assert gpu("A10G").exp_per_s is None and gpu("A10G").exp_source == ""
    # the tensor cores outgrew the exponential units: tensor/exp ratio T4 < A100 < H100 < B200
    ratio = [gpu(n).fp16_tensor_flops / gpu(n).exp_per_s for n in ("T4", "A100 80GB", "H100 SXM", "B200")]
    assert ratio == sorted(ratio) and ratio[-1] == pytest.approx(512)


def test_bad_exp_throughput_is_refused():
    from dataclasses import replace

    for bad in (0, -1.0, float("nan"), float("inf"), True, "3.9e12"):
        with pytest.raises(ValueError, match="exp_per_s"):
            replace(gpu("H100 SXM"), exp_per_s=bad)
