"""Tests for inferbook.triton_launch: tile and launch choices per GPU, without Triton.

The arithmetic of a launch (tiles sized to each generation's shared memory, the GQA decode
packing, the autotuner's pruning) is plain Python: this file never imports Triton, and one test
imports the module with `import triton` blocked. The compiled kernels' real shared memory is
checked against these estimates in test_triton_aot.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from inferbook import triton_launch as launch

ARCHS = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0)]

BLOCK_TRITON = textwrap.dedent("""
    import importlib.abc, sys

    class NoTriton(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, NoTriton())
    from inferbook import triton_launch as launch
    import torch
    assert "triton" not in sys.modules
    print(launch.launch_config(128, torch.float16, (9, 0)), launch.launch_plan(1, 32, 8, 1, 128).grid)
""")


def test_imports_and_computes_without_triton():
    out = subprocess.run([sys.executable, "-c", BLOCK_TRITON], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(128,", "64,", "8,", "3)", "(1,", "8)"]


@pytest.mark.parametrize("n, want", [(1, 1), (2, 2), (3, 4), (16, 16), (17, 32), (80, 128)])
def test_next_power_of_2(n, want):
    assert launch.next_power_of_2(n) == want


def test_parse_capability():
    assert launch.parse_capability(80) == launch.parse_capability("sm80") == (8, 0)
    assert launch.parse_capability((10, 0)) == (10, 0)
    for bad in ("hopper", 0, True, (8,), 8.0):
        with pytest.raises(ValueError, match="capability"):
            launch.parse_capability(bad)


def test_smem_limits_come_from_the_gpu_presets():
    from inferbook.hardware import GPUS

    assert set(launch.TUNED_CAPABILITIES) == set(ARCHS)
    for g in GPUS.values():
        assert launch.smem_limit_bytes(g.compute_capability) <= g.smem_bytes_per_block
    assert [launch.smem_limit_bytes(cc) // 1024 for cc in ARCHS] == [64, 163, 99, 99, 227, 227]
    assert (launch.smem_limit_bytes(80) == launch.smem_limit_bytes("sm80")
            == launch.smem_limit_bytes((8, 0)))
    assert launch.smem_limit_bytes((8, 7)) == launch.smem_limit_bytes((8, 6))   # nearest below


@pytest.mark.parametrize("cc", ARCHS)
def test_launch_config_per_architecture(cc):
    for head_dim in (16, 24, 32, 64, 80, 96, 128, 256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            if dtype == torch.bfloat16 and cc < (8, 0):
                with pytest.raises(ValueError, match="bfloat16 needs"):
                    launch.launch_config(head_dim, dtype, cc)
                continue
            bm, bn, warps, stages = config = launch.launch_config(head_dim, dtype, cc)
            assert bm >= 16 and bn >= 16 and warps in (4, 8) and stages >= 1
            limit = launch.smem_limit_bytes(cc)
            assert launch.smem_estimate_bytes(head_dim, dtype, *config) <= limit
            tuned = launch.autotune_configs(head_dim, dtype, cc)
            assert tuned[0] == config and len(tuned) == len(set(tuned)) <= 7
            assert all(launch.smem_estimate_bytes(head_dim, dtype, *c) <= limit for c in tuned)
    # more shared memory, larger tiles: an H100's K/V tiles are at least an A10's
    h100, a10 = (launch.launch_config(64, torch.float16, cc) for cc in ((9, 0), (8, 6)))
    assert h100[1] >= a10[1]


def test_launch_config_rejects_what_it_cannot_serve():
    with pytest.raises(ValueError, match="head_dim"):
        launch.launch_config(512, torch.float16, (9, 0))
    with pytest.raises(ValueError, match="7.5 or newer"):
        launch.launch_config(64, torch.float16, (7, 0))
    with pytest.raises(ValueError, match="capability"):
        launch.launch_config(64, torch.float16, "hopper")
    with pytest.raises(ValueError, match="allowed"):
        launch.launch_config(64, torch.float64, (9, 0))
    fallback = launch.launch_config(64, torch.float16, (12, 0))   # no preset: the T4's choice
    assert fallback == launch.launch_config(64, torch.float16, (7, 5))


def test_autotune_pruner_keeps_only_configs_that_fit():
    # the pruner reads what triton.Config carries (kwargs, num_warps, num_stages): stand-ins
    configs = [SimpleNamespace(kwargs={"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bm in (32, 64, 128) for bn in (16, 32, 64, 128) for w in (4, 8)
               for s in (1, 2, 3, 4)]
    q = torch.empty(1, 1, 1, 128, dtype=torch.float16)
    for cc in ((7, 5), (9, 0)):
        kept = launch.autotune_pruner(cc)(configs, {"Q": q}, HEAD_DIM=128)
        as_tuples = [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                     for c in kept]
        assert set(as_tuples) <= set(launch.autotune_configs(128, torch.float16, cc))
        assert launch.launch_config(128, torch.float16, cc) in as_tuples


def test_decode_packs_a_gqa_group_into_one_tile():
    # Llama-3.1-8B at batch 1: 32 query heads, 8 KV heads -> 8 programs, each one KV head
    plan = launch.launch_plan(batch=1, heads=32, kv_heads=8, n_q=1, block_m=128)
    assert plan.packed and plan.grid == (1, 8) and plan.n_q == 4 and plan.block_m == 16
    assert plan.heads == 8 and plan.group_size == 1
    # prefill, or MHA decode, keeps the (Q tiles, batch x heads) grid
    prefill = launch.launch_plan(batch=2, heads=32, kv_heads=8, n_q=300, block_m=128)
    assert not prefill.packed and prefill.grid == (3, 64)
    assert not launch.launch_plan(1, 32, 32, 1, 128).packed


def test_packed_strides_walk_heads_as_rows():
    q = torch.empty(2, 8, 1, 64)
    plan = launch.launch_plan(2, 8, 2, 1, 32)
    assert launch.kernel_strides(q, plan) == (q.stride(0), 4 * q.stride(1), q.stride(1))
    prefill = launch.launch_plan(2, 8, 2, 5, 32)
    assert launch.kernel_strides(torch.empty(2, 8, 5, 64), prefill) == (8 * 5 * 64, 5 * 64, 64)


@pytest.mark.parametrize("call, words", [
    (lambda: launch.launch_plan(1, 6, 4, 1, 16), "kv_heads"),
    (lambda: launch.launch_plan(1, 4, 0, 1, 16), "kv_heads"),
    (lambda: launch.smem_estimate_bytes(64, torch.float16, 64, 0, 4, 2), "block_n"),
    (lambda: launch.next_power_of_2(0), "n"),
])
def test_bad_input_names_the_argument(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()
