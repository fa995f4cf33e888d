"""Tests for inferbook.fp8_attention: e4m3's limits, scaling, the Hadamard rotation, FP8 error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferbook import flash
from inferbook import fp8_attention as f8


def test_limits_are_the_formats_and_torch_agrees():
    lim = f8.e4m3_limits()
    assert lim["smallest_subnormal"] == 2.0**-9 and lim["flush_at_or_below"] == 2.0**-10
    fi = torch.finfo(torch.float8_e4m3fn)
    assert lim["max"] == fi.max and lim["smallest_normal"] == fi.smallest_normal
    # torch's CPU e4m3 rounding: 2^-10 (a tie) and below flush, just above rounds up to 2^-9
    x = torch.tensor([2.0**-9, 2.0**-10, 2.0**-10 * 1.01, 2.0**-11, 500.0])
    y = x.to(torch.float8_e4m3fn).double().tolist()
    assert y[:4] == [2.0**-9, 0.0, 2.0**-9, 0.0] and y[4] == 448.0   # saturates at max


def test_quantize_scales_per_tensor_and_per_block():
    x = np.ones((4, 8))
    x[0, 0] = 1000.0                                   # one outlier in the first block
    per_tensor, per_block = f8.quantize(x), f8.quantize(x, block_rows=2)
    assert per_tensor[0, 0] == pytest.approx(1000.0)   # the amax maps to 448 exactly
    # the outlier's scale coarsens every 1 in the tensor, but only its own block per block
    assert np.abs(per_block[2:] - 1).max() == 0.0
    assert np.abs(per_tensor[2:] - 1).max() > 0.0


def test_random_hadamard_is_orthogonal_and_keeps_scores():
    m = f8.random_hadamard(64, seed=3)
    assert np.allclose(m @ m.T, np.eye(64), atol=1e-12)
    q, k, _ = f8.attention_inputs(16, 64, "channels", seed=1)
    assert np.allclose((q @ m) @ (k @ m).T, q @ k.T, atol=1e-10)
    with pytest.raises(ValueError, match="power of two"):
        f8.random_hadamard(48)


def rmse_vs_float64(kind, block_rows, rotate, seeds=3):
    errs = []
    for seed in range(seeds):
        q, k, v = f8.attention_inputs(512, 64, kind, seed)
        ref = flash.attention_reference(q[None, None], k[None, None], v[None, None])[0][0, 0]
        errs.append(np.sqrt(np.mean((f8.fp8_attention(q, k, v, block_rows, rotate, seed) - ref) ** 2)))
    return float(np.median(errs))


def test_block_scales_and_rotation_lower_the_error_with_outliers():
    for kind in ("entries", "channels"):
        tensor = rmse_vs_float64(kind, None, False)
        block = rmse_vs_float64(kind, 64, False)
        rotated = rmse_vs_float64(kind, 64, True)
        assert rotated < block < tensor, (kind, tensor, block, rotated)
    # without outliers there is little to gain, and fp8 costs far more than fp16 would
    plain = rmse_vs_float64("none", None, False)
    assert 1e-3 < plain < 1e-2


@pytest.mark.parametrize("call, words", [
    (lambda: f8.quantize(np.ones(4)), "rows, d"),
    (lambda: f8.quantize(np.ones((2, 2)), block_rows=0), "block_rows"),
    (lambda: f8.fp8_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((2, 4))), "q"),
    (lambda: f8.fp8_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 4)), rotate=1), "rotate"),
    (lambda: f8.attention_inputs(8, 8, "spikes"), "outliers"),
])
def test_bad_input_names_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()
