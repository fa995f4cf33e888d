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
