import pytest

from inferbook.hardware import GPUS, gpu
from inferbook.roofline import attainable_flops, bound, forward_cost

LLAMA2_7B = dict(n_params=6.74e9, n_layer=32, d_attn=4096, kv_dim=4096)


def test_decode_is_memory_bound_and_prefill_compute_bound_on_every_gpu():
    for g in GPUS.values():
        if g.fp16_tensor_flops is None:
            continue
        decode = forward_cost(**LLAMA2_7B, batch=1, new_tokens=1, past_tokens=512)
        prefill = forward_cost(**LLAMA2_7B, batch=1, new_tokens=4096, past_tokens=0)
        assert bound(g, decode.intensity) == "memory-bound"
        assert bound(g, prefill.intensity) == "compute-bound", g.name


def test_intensity_is_about_batch_at_short_context():
    # 2 FLOP per weight per token, 2 bytes per weight: intensity ≈ tokens per pass
    c = forward_cost(**LLAMA2_7B, batch=8, new_tokens=1, past_tokens=0)
    assert 7.9 < c.intensity < 8.1


def test_attainable_is_min_of_roofs():
    h100 = gpu("h100 sxm")
    assert attainable_flops(h100, 1.0) == pytest.approx(3.35e12)
    assert attainable_flops(h100, 1e6) == h100.fp16_tensor_flops


def test_errors():
    with pytest.raises(ValueError, match="batch"):
        forward_cost(**LLAMA2_7B, batch=0, new_tokens=1, past_tokens=0)
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu("Z100")
    with pytest.raises(ValueError, match="A10G"):
        attainable_flops(gpu("A10G"), 10)


def test_step_seconds_and_critical_tokens():
    from inferbook.roofline import ForwardCost, critical_tokens, step_seconds
    h100 = gpu("H100 SXM")
    memory_bound = ForwardCost(flops=2 * 8e9, bytes_moved=16e9)
    assert step_seconds(h100, memory_bound) == 16e9 / h100.hbm_bytes_per_s
    compute_bound = ForwardCost(flops=2 * 8e9 * 10_000, bytes_moved=16e9)
    assert step_seconds(h100, compute_bound) == 2 * 8e9 * 10_000 / h100.fp16_tensor_flops
    t = critical_tokens(h100, 2 * 8e9, 16e9)
    assert abs(t - h100.ridge_flops_per_byte) < 1e-9          # 2 bytes per parameter: T = ridge
    assert critical_tokens(gpu("A10G"), 1.0, 1.0) is None


# ---- time bounds and split-KV ----------------------------------------------------------------
def test_time_bound_is_the_larger_of_compute_and_memory():
    from inferbook.roofline import FP32_FMA_FLOPS, time_bound

    h = gpu("H100 SXM")
    t = time_bound(h, flops=989e12, bytes_moved=3.35e12 * 2)
    assert t.compute_s == pytest.approx(1) and t.memory_s == pytest.approx(2)
    assert t.seconds == pytest.approx(2) and t.bound == "memory-bound"
    t4 = gpu("T4")
    fma = time_bound(t4, 8.1e12, 0, peak_flops=FP32_FMA_FLOPS["T4"])
    assert fma.seconds == pytest.approx(1) and fma.bound == "compute-bound"
    for bad in (-1, float("nan"), True):
        with pytest.raises(ValueError, match="flops"):
            time_bound(h, bad, 1)
    with pytest.raises(ValueError, match="peak"):
        time_bound(gpu("A10G"), 1, 1)


def test_num_kv_splits_fills_the_sms_but_keeps_chunks_long():
    from inferbook.roofline import num_kv_splits

    assert num_kv_splits(1, 8, 32768, 132) == 16          # 8 x 16 = 128 <= 132 < 8 x 17
    assert num_kv_splits(2, 8, 32768, 132) == 8
    assert num_kv_splits(1, 8, 1024, 132) == 4            # 1024 / 256: chunks stay >= 256
    assert num_kv_splits(64, 8, 32768, 132) == 1          # the batch already fills the GPU
    assert num_kv_splits(1, 8, 100, 132) == 1
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match="batch"):
            num_kv_splits(bad, 8, 1024, 132)


def test_smem_bandwidth_matches_the_flashattention_papers_a100_estimate():
    from inferbook.roofline import smem_bytes_per_s

    assert smem_bytes_per_s(gpu("A100 80GB")) == pytest.approx(19.5e12, rel=0.01)
    assert smem_bytes_per_s(gpu("H100 SXM")) == pytest.approx(33.45e12, rel=0.01)
    with pytest.raises(ValueError, match="clock"):
        smem_bytes_per_s(gpu("T4"))
    with pytest.raises(ValueError, match="clock_hz"):
        smem_bytes_per_s(gpu("H100 SXM"), clock_hz=-1.0)


def test_attention_ceiling_t4_fma_kernel_cannot_double_sdpa_math():
    from inferbook.roofline import FP32_FMA_FLOPS, attention_ceiling_flops

    t4 = gpu("T4")
    math_ceiling = attention_ceiling_flops(t4, 4096, 64, "standard")
    ours = attention_ceiling_flops(t4, 4096, 64, "flash", peak_flops=FP32_FMA_FLOPS["T4"])
    assert ours == FP32_FMA_FLOPS["T4"]                    # FMA-bound, not memory-bound
    assert math_ceiling == pytest.approx(4096 * 64 / (2 * 4160) * t4.hbm_bytes_per_s)
    assert ours / math_ceiling < 1 < 2                     # 2x SDPA-math is out of reach
    h100 = gpu("H100 SXM")
    assert attention_ceiling_flops(h100, 8192, 64, "flash") > attention_ceiling_flops(
        h100, 8192, 64, "standard")
    with pytest.raises(ValueError, match="algorithm"):
        attention_ceiling_flops(h100, 1024, 64, "paged")


# ---- the third ceiling: exponentials ---------------------------------------------------------
def test_time_bound_counts_exponentials_as_a_third_ceiling():
    from inferbook.roofline import time_bound

    h = gpu("H100 SXM")
    t = time_bound(h, flops=989e12, bytes_moved=3.35e12, exps=2 * 3.9e12)
    assert (t.compute_s, t.memory_s) == (pytest.approx(1), pytest.approx(1))
    assert t.exp_s == pytest.approx(2) and t.seconds == pytest.approx(2) and t.bound == "exp-bound"
    assert t.serial_seconds == pytest.approx(4)
    assert time_bound(h, 1, 1).exp_s == 0  # no exponentials counted: the old two ceilings
    for bad in (-1, float("nan"), True):
        with pytest.raises(ValueError, match="exps"):
            time_bound(h, 1, 1, exps=bad)
    with pytest.raises(ValueError, match="exponential"):
        time_bound(gpu("A10G"), 1, 1, peak_flops=1e12, exps=1)


def test_softmax_exp_over_matmul_is_f_over_4dE():
    from inferbook.roofline import softmax_exp_over_matmul

    # FA4's point: on a B200 at d = 128 the exponentials take as long as both matmuls
    assert softmax_exp_over_matmul(gpu("B200"), 128) == pytest.approx(1.0)
    h = gpu("H100 SXM")
    assert softmax_exp_over_matmul(h, 128) == pytest.approx(989e12 / (4 * 128 * 3.9e12))
    assert softmax_exp_over_matmul(h, 64) == pytest.approx(2 * softmax_exp_over_matmul(h, 128))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="head_dim"):
            softmax_exp_over_matmul(h, bad)


def test_recompute_over_move_counts_the_exponentials():
    from inferbook.roofline import recompute_over_move

    h = gpu("H100 SXM")
    matmul_only = 128 / (2 * h.ridge_flops_per_byte)
    exp_only = h.hbm_bytes_per_s / (2 * 2 * h.exp_per_s)
    serial = recompute_over_move(h, 128)
    assert serial == pytest.approx(matmul_only + exp_only)
    assert 0.42 < serial < 0.44  # about 43 %, not the 22 % of the matmul alone
    assert recompute_over_move(h, 128, overlap=True) == pytest.approx(max(matmul_only, exp_only))
    assert recompute_over_move(gpu("A100 80GB"), 128) > 0.5 > recompute_over_move(gpu("T4"), 128)
    with pytest.raises(ValueError, match="overlap"):
        recompute_over_move(h, 128, overlap="yes")
    with pytest.raises(ValueError, match="bytes_per_element"):
        recompute_over_move(h, 128, bytes_per_element=0)


def test_attention_ceiling_with_the_exponential_roof():
    from inferbook.roofline import attention_ceiling_flops

    # B200 at d = 128: the exponentials cap the rate at 4 d E = the tensor peak exactly
    b = gpu("B200")
    assert attention_ceiling_flops(b, 8192, 128, "flash", exp_ceiling=True) == pytest.approx(
        min(attention_ceiling_flops(b, 8192, 128, "flash"), 4 * 128 * b.exp_per_s))
    # at d = 64 the exponential roof is half the tensor peak and binds the flash kernel
    assert attention_ceiling_flops(b, 16384, 64, "flash", exp_ceiling=True) == pytest.approx(
        4 * 64 * b.exp_per_s)
    # standard attention stays bandwidth-bound: the third roof changes nothing there
    h = gpu("H100 SXM")
    assert attention_ceiling_flops(h, 4096, 64, "standard", exp_ceiling=True) == \
        attention_ceiling_flops(h, 4096, 64, "standard")
    with pytest.raises(ValueError, match="exp_ceiling"):
        attention_ceiling_flops(h, 4096, 64, "flash", exp_ceiling=1)
    with pytest.raises(ValueError, match="exponential"):
        attention_ceiling_flops(gpu("A10G"), 4096, 64, "standard", peak_flops=1e14, exp_ceiling=True)
