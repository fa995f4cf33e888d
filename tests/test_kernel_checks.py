"""Tests for inferbook.kernel_checks: NaN-padded inputs, the error rule, the own-kernel test and the
ahead-of-time compile of a kernel defined outside the package (here: in this file)."""

from __future__ import annotations

import os

import torch

import inferbook.triton_device  # noqa: F401  (before triton: the interpreter without a GPU)

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from inferbook import kernel_checks as kc  # noqa: E402
from inferbook.grading import ExerciseCheckFailed  # noqa: E402


@triton.jit
def _copy_rows(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * SCALE, mask=offs < n)


SCALE = tl.constexpr(2.0)
PLAIN_SCALE = 2.0


@triton.jit
def _uses_a_python_global(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * PLAIN_SCALE, mask=offs < n)


def test_inputs_hold_nan_past_the_sequence():
    q, k, v = kc.attention_inputs(2, 4, 2, 5, 7, 16, pad=3)
    assert q.shape == (2, 4, 5, 16) and k.shape == v.shape == (2, 2, 7, 16)
    assert torch.isfinite(k).all()
    storage = torch.as_strided(k, (2, 2, 10, 16), k.stride())
    assert torch.isnan(storage[:, :, 7:]).all()
    with pytest.raises(ValueError, match="kv_heads"):
        kc.attention_inputs(1, 3, 2, 4, 4, 16)
    with pytest.raises(ValueError, match="n_q"):
        kc.attention_inputs(1, 2, 2, 0, 4, 16)


def test_fresh_generators_differ():
    a, b = (torch.randn(4, generator=kc.fresh_generator()) for _ in range(2))
    assert not torch.equal(a, b)


def _plain_attention(q, k, v, causal):
    from inferbook import flash

    o, lse = flash.attention_reference(*(t.double().numpy() for t in (q, k, v)), causal)
    return torch.from_numpy(o).to(q.dtype), torch.from_numpy(lse).float()


def test_error_rule_passes_the_reference_and_fails_a_perturbation():
    q, k, v = kc.attention_inputs(1, 2, 1, 9, 13, 16)
    o, lse = _plain_attention(q, k, v, True)
    kc.check_attention("exact", o, lse, q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match=r"\[bad\]: O has an error of .* query row 3"):
        bad = o.clone()
        bad[0, 1, 3, 2] += 1e-3
        kc.check_attention("bad", bad, lse, q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match="logsumexp has NaN"):
        kc.check_attention("nan", o, torch.full_like(lse, float("nan")), q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match="shape"):
        kc.check_attention("shape", o[:, :, :3], lse, q, k, v, True)


def test_package_kernels_are_detected():
    from inferbook import triton_flash

    assert kc.package_references(triton_flash._attend_kv_tiles)
    with pytest.raises(ExerciseCheckFailed, match="own"):
        kc.check_own_kernel("own", triton_flash.flash_forward_kernel)
    with pytest.raises(ExerciseCheckFailed, match="@triton.jit"):
        kc.check_own_kernel("own", lambda: None)


def test_compile_kernel_for_gpus_that_are_absent():
    sig = {"X": "*fp32", "Y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    jobs = [dict(cc=80, num_warps=4, num_stages=1), dict(cc=90, num_warps=4, num_stages=1)]
    good = kc.compile_kernel(_copy_rows, sig, dict(BLOCK=128), jobs, aligned=("X", "Y"))
    assert [sorted(r) for r in good] == [["shared"], ["shared"]], good
    bad = kc.compile_kernel(_uses_a_python_global, sig, dict(BLOCK=128), jobs[:1])
    assert "PLAIN_SCALE" in bad[0]["error"], bad


def test_kernel_source_carries_constexpr_globals():
    source, name = kc.kernel_module_source(_copy_rows)
    assert name == "_copy_rows" and "SCALE = tl.constexpr(2.0)" in source
    assert "TRITON_INTERPRET" not in os.environ or kc.package_references(_copy_rows) == []


def test_clones_keep_layout_and_padding_and_protect_the_originals():
    """The learner's kernel gets clones: the same strides and NaN past the view (an unmasked
    read still shows), and a store through their pointers leaves the check cell's originals."""
    q, k, v = kc.attention_inputs(1, 2, 2, 5, 7, 4, v_row_pad=3)
    before = [t.clone() for t in (q, k, v)]
    cq, ck, cv = kc.clones(q, k, v)
    for original, copy in zip((q, k, v), (cq, ck, cv)):
        assert copy.stride() == original.stride() and copy.storage_offset() == original.storage_offset()
        assert torch.equal(copy, original)
        assert copy.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    past = torch.as_strided(cv, (1, 2, 7, 7), cv.stride())[0, 0, 0, 4:]   # V's row padding
    assert torch.isnan(past).all()
    ck.zero_()
    cv.untyped_storage().fill_(0)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), before))
    with pytest.raises(TypeError, match=r"tensors\[1\] must be a torch.Tensor"):
        kc.clones(q, [1.0])
