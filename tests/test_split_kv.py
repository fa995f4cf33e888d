"""Tests for inferbook.split_kv: split-KV decoding and the exact merge (PyTorch only, no Triton).

Correct against the book's float64 reference for every split count and GQA; q is checked
against k/v (batch, heads, head_dim, dtype, device) with errors naming the argument, nothing is
broadcast silently, and a rejected call changes nothing.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from inferbook import flash
from inferbook.split_kv import merge_partials, split_kv_attention


def qkv(batch=2, heads=4, kv_heads=2, n_q=1, n_kv=37, d=16, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, n_q, d, generator=gen, dtype=dtype),
            torch.randn(batch, kv_heads, n_kv, d, generator=gen, dtype=dtype),
            torch.randn(batch, kv_heads, n_kv, d, generator=gen, dtype=dtype))


def test_imports_no_triton():
    assert "inferbook.split_kv" in sys.modules
    import subprocess
    code = "import sys, inferbook.split_kv; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("splits", [1, 2, 5, 37])
@pytest.mark.parametrize("n_q", [1, 3])
def test_matches_the_reference(splits, n_q):
    q, k, v = qkv(n_q=n_q)
    o, lse = split_kv_attention(q, k, v, splits)
    ref_o, ref_lse = flash.attention_reference(q.numpy(), k.numpy(), v.numpy(), causal=False)
    np.testing.assert_allclose(o.numpy(), ref_o, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=1e-12)


def test_merge_of_two_halves_is_exact():
    q, k, v = qkv(heads=2, kv_heads=2, n_kv=20)
    halves = [split_kv_attention(q, k[:, :, a:b], v[:, :, a:b], 1) for a, b in ((0, 8), (8, 20))]
    o, lse = merge_partials(torch.stack([h[0] for h in halves]), torch.stack([h[1] for h in halves]))
    whole = split_kv_attention(q, k, v, 1)
    assert torch.allclose(o, whole[0], atol=1e-12) and torch.allclose(lse, whole[1], atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(n_kv=st.integers(1, 200), splits=st.integers(1, 16), group=st.sampled_from([1, 4]),
       n_q=st.sampled_from([1, 3]), seed=st.integers(0, 2**16))
def test_split_kv_merge_is_exact(n_kv, splits, group, n_q, seed):
    splits = min(splits, n_kv)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 2 * group, n_q, 16, generator=gen, dtype=torch.float64) * 3
    k = torch.randn(2, 2, n_kv, 16, generator=gen, dtype=torch.float64) * 3
    v = torch.randn(2, 2, n_kv, 16, generator=gen, dtype=torch.float64)
    o, lse = split_kv_attention(q, k, v, splits)
    ref_o, ref_lse = flash.attention_reference(q.numpy(), k.numpy(), v.numpy(), causal=False)
    assert np.abs(o.numpy() - ref_o).max() < 1e-12
    assert np.abs(lse.numpy() - ref_lse).max() < 1e-12


def test_merge_is_associative_and_ignores_empty_splits():
    gen = torch.Generator().manual_seed(0)
    outs = torch.randn(4, 3, 8, generator=gen, dtype=torch.float64)
    lses = torch.randn(4, 3, generator=gen, dtype=torch.float64) * 5
    all_at_once = merge_partials(outs, lses)
    left = merge_partials(outs[:2], lses[:2])
    right = merge_partials(outs[2:], lses[2:])
    nested = merge_partials(torch.stack([left[0], right[0]]), torch.stack([left[1], right[1]]))
    assert torch.allclose(all_at_once[0], nested[0], atol=1e-14)
    assert torch.allclose(all_at_once[1], nested[1], atol=1e-14)
    minus_inf = torch.full((1, 3), float("-inf"), dtype=torch.float64)
    empty_o = torch.full((1, 3, 8), 123.0, dtype=torch.float64)   # garbage output, lse = -inf
    with_empty = merge_partials(torch.cat([outs, empty_o]), torch.cat([lses, minus_inf]))
    assert torch.allclose(with_empty[0], all_at_once[0], atol=1e-14)
    none_o, none_lse = merge_partials(empty_o, minus_inf)
    assert torch.all(none_o == 0) and torch.all(torch.isneginf(none_lse))


def _bad(name):
    q, k, v = qkv()
    cases = {
        "batch": (q, k[:1], v[:1]),                                    # would broadcast silently
        "heads": (q[:, :3], k, v),
        "head_dim": (q[..., :8], k, v),
        "dtype": (q, k.float(), v.float()),
        "same shape": (q, k, v[:, :, :5]),
        "4-D": (q[0], k, v),
        "tensor": (q.numpy(), k, v),
        "empty": (q[:, :, :0], k, v),
        "device": (q, k.to("meta"), v.to("meta")),
    }
    return cases[name]


@pytest.mark.parametrize("case, words", [
    ("batch", "batch"), ("heads", "heads"), ("head_dim", "head_dim"), ("dtype", "k.dtype"),
    ("same shape", "k and v"), ("4-D", "q must be 4-D"), ("tensor", "q must be a torch.Tensor"),
    ("empty", "every size of q"), ("device", "device"),
])
def test_q_is_checked_against_k_and_v(case, words):
    q, k, v = _bad(case)
    keep = [t.clone() if isinstance(t, torch.Tensor) and t.device.type != "meta" else t for t in (q, k, v)]
    with pytest.raises((TypeError, ValueError), match=words):
        split_kv_attention(q, k, v, 2)
    for before, after in zip(keep, (q, k, v)):            # a rejected call changes nothing
        if isinstance(before, torch.Tensor) and before.device.type != "meta":
            assert torch.equal(before, after)


@pytest.mark.parametrize("splits, words", [(0, "num_splits"), (True, "num_splits"), (2.0, "num_splits"),
                                           (38, "num_splits"), ("2", "num_splits")])
def test_num_splits(splits, words):
    q, k, v = qkv()
    with pytest.raises((TypeError, ValueError), match=words):
        split_kv_attention(q, k, v, splits)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.1", True])
def test_scale(scale):
    q, k, v = qkv()
    with pytest.raises((TypeError, ValueError), match="scale"):
        split_kv_attention(q, k, v, 2, scale=scale)


def test_merge_partials_checks():
    o, lse = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="lses"):
        merge_partials(o, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="at least one split"):
        merge_partials(o[:0], lse[:0])
    with pytest.raises(TypeError, match="outputs"):
        merge_partials(o.tolist(), lse)
    with pytest.raises(TypeError, match="lses.dtype"):
        merge_partials(o, lse.long())


# ---------------------------------------------------------------------------------------
# flash-attn's split counts
# ---------------------------------------------------------------------------------------
from inferbook import split_kv  # noqa: E402


def test_fa2_heuristic_the_example_in_its_comment():
    # flash_api.cpp: "batch * n_heads = 48 and we have 108 SMs, having 2 splits
    # (efficiency = 0.89) is better than having 3 splits (efficiency = 0.67)"
    assert split_kv.fa2_num_splits_heuristic(48, 108, 64, 128) == 2


def reference_fa2(bnm, sms, n_blocks, max_splits):
    """The same rule written from its description, in exact fractions."""
    from fractions import Fraction

    if bnm >= 0.8 * sms:
        return 1
    top = min(max_splits, sms, n_blocks)
    ok = [s for s in range(1, top + 1)
          if s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))]
    eff = {s: Fraction(bnm * s, sms) / -(-(bnm * s) // sms) for s in ok}
    best = max(eff.values())
    return next(s for s in ok if eff[s] >= Fraction(85, 100) * best)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), st.integers(1, 128))
def test_fa2_heuristic_is_its_rule(bnm, sms, n_blocks, max_splits):
    # float32 vs exact fractions can only differ at an efficiency exactly on 85 %
    assert split_kv.fa2_num_splits_heuristic(bnm, sms, n_blocks, max_splits) == reference_fa2(
        bnm, sms, n_blocks, max_splits)


def test_fa2_num_splits_llama_decode():
    # Llama-3.1-8B decode at batch 1 on an H100 (132 SMs): the GQA swap makes 8 programs
    # (KV heads) of 4 rows; 256 key blocks of 128; 2 x 132 slots. The smallest S with
    # 8 S / 264 >= 0.85 is 29 (its blocks per split, 9, differ from 28's, 10).
    assert split_kv.fa2_num_splits(1, 32, 8, 1, 32_768, 128, 132) == 29
    # 2K context: 16 key blocks; only S in {1, 2, 3, 4, 6, 8, 16} change the blocks per split
    assert split_kv.fa2_num_splits(1, 32, 8, 1, 2048, 128, 132) == 16
    # batch 64: 512 programs >= 0.8 x 264: no split
    assert split_kv.fa2_num_splits(64, 32, 8, 1, 32_768, 128, 132) == 1
    # head_dim 64 -> key blocks of 256; head_dim 256 -> of 64
    assert split_kv.fa2_num_splits(1, 8, 8, 1, 512, 64, 132) == 2      # 2 key blocks
    assert split_kv.fa2_num_splits(1, 8, 8, 1, 512, 256, 132) == 8     # 8 key blocks
    with pytest.raises(ValueError, match="kv_heads"):
        split_kv.fa2_num_splits(1, 30, 8, 1, 512, 128, 132)
    with pytest.raises(ValueError, match="head_dim"):
        split_kv.fa2_num_splits(1, 8, 8, 1, 512, 512, 132)


def test_fa4_splits_only_when_asked():
    assert split_kv.fa4_num_splits(8, 256, 132) == 1                     # default: no split
    assert split_kv.fa4_num_splits(8, 256, 132, num_splits=3) == 3      # as passed
    assert split_kv.fa4_num_splits(8, 256, 132, num_splits=0) == 16     # 132 // 8
    assert split_kv.fa4_num_splits(8, 4, 132, num_splits=0) == 1        # <= 4 key blocks
    assert split_kv.fa4_num_splits_heuristic(200, 132, 256) == 0        # as the code returns
    assert split_kv.fa4_num_splits(200, 256, 132, num_splits=0) == 1    # and runs unsplit
    assert split_kv.fa4_num_splits_heuristic(1, 132, 256) == 128        # max_splits
