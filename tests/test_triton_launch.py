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


# ---------------------------------------------------------------------------------------
# occupancy, waves and causal load balance
# ---------------------------------------------------------------------------------------
def naive_by_registers(registers, num_warps):
    return 65536 // (registers * 32 * num_warps)


def test_occupancy_rounds_registers_per_warp_and_per_sub_partition():
    # 95 registers: 3040 per warp -> 3072; 16384 // 3072 = 5 warps per sub-partition,
    # 20 per SM: five 4-warp programs (the paged decode kernel on an H100)
    by = launch.occupancy((9, 0), 95, 12288, 4)
    assert by == dict(registers=5, shared=17, warps=16, blocks=32, resident=5)
    # 33 registers: 1056 per warp -> 1280 (the 256-register unit); 12 warps per
    # sub-partition -> 12 programs of 4 warps, not the 15 that 65536 / (33 x 128) gives
    assert launch.occupancy((8, 0), 33, 0, 4)["registers"] == 12
    assert naive_by_registers(33, 4) == 15
    # 192 registers, one warp: 6144 per warp, 2 per sub-partition -> 8 programs, not 10
    assert launch.occupancy((8, 0), 192, 0, 1)["registers"] == 8
    assert naive_by_registers(192, 1) == 10
    # 255 registers x 8 warps: 8160 -> 8192 per warp x 8 = 65536 fits; 2 per partition -> 1
    assert launch.occupancy((9, 0), 255, 0, 8)["registers"] == 1


def test_occupancy_rounds_shared_memory_and_adds_the_reservation():
    # sm80: 41,000 B + 1 KiB reserved -> 42,112 (128-byte units); 164 KiB // that = 3, not 4
    assert launch.occupancy((8, 0), 32, 41_000, 4)["shared"] == 3
    assert 164 * 1024 // 41_000 == 4
    # 48 KiB + 1 KiB: 3 in an A100's 164 KiB; the T4 reserves nothing, 256-byte units
    assert launch.occupancy((8, 0), 128, 48 * 1024, 4) == dict(
        registers=4, shared=3, warps=16, blocks=32, resident=3)
    assert launch.occupancy((7, 5), 32, 16 * 1024, 4)["shared"] == 4
    assert launch.occupancy((7, 5), 32, 16 * 1024 + 1, 4)["shared"] == 3
    assert launch.occupancy((7, 5), 32, 0, 8)["warps"] == 4      # a T4 holds 32 warps per SM
    # no shared memory: the block cap (16 on sm86) is what is left
    assert launch.occupancy((8, 6), 16, 0, 1)["resident"] == 16


def test_sm_limits_per_generation():
    want = {(7, 5): (16, 32, 64), (8, 0): (32, 64, 164), (8, 6): (16, 48, 100),
            (8, 9): (24, 48, 100), (9, 0): (32, 64, 228), (10, 0): (32, 64, 228)}
    for cc, (blocks, warps, smem_kib) in want.items():
        lim = launch.sm_limits(cc)
        assert (lim.max_blocks, lim.max_warps) == (blocks, warps)
        assert launch.smem_per_sm_bytes(cc) == smem_kib * 1024
        # the per-block limit is what the SM has less the runtime's reservation
        assert launch.smem_limit_bytes(cc) == smem_kib * 1024 - lim.reserved_smem_bytes
    with pytest.raises(ValueError, match="sm70"):
        launch.sm_limits((7, 0))


def test_occupancy_refuses_what_no_launch_has():
    for args, words in [(((9, 0), 0, 0, 4), "registers"), (((9, 0), 256, 0, 4), "registers"),
                        (((9, 0), 32, -1, 4), "shared_bytes"), (((9, 0), 32, 0, 0), "num_warps"),
                        (((6, 1), 32, 0, 4), "sm61")]:
        with pytest.raises(ValueError, match=words):
            launch.occupancy(*args)


def test_waves_count_every_resident_program():
    # SM + 1 programs: two rounds with one program per SM, one with five
    assert launch.waves(133, 132, 1) == 2
    assert launch.waves(133, 132, 5) == 1
    assert launch.waves(132 * 5 + 1, 132, 5) == 2
    assert launch.wave_efficiency(133, 132) == pytest.approx(133 / 264)
    assert launch.wave_efficiency(96, 108) == pytest.approx(96 / 108)
    with pytest.raises(ValueError, match="programs"):
        launch.waves(0, 132, 1)


def test_causal_tile_work_matches_the_kernel_schedule():
    import os

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    tf = pytest.importorskip("inferbook.triton_flash")
    for n, bm, bn in [(1000, 128, 64), (300, 64, 32), (4096, 128, 128), (100, 32, 32)]:
        work = launch.causal_tile_work(n, bm, bn)
        for i, w in enumerate(work):
            full, masked = tf.kv_tile_schedule(i, n, n, bm, bn, causal=True)
            assert w == -(-masked // bn), (n, bm, bn, i)
    assert launch.causal_tile_work(1024, 128, 64) == [2 * (i + 1) for i in range(8)]


def test_longest_first_shortens_a_causal_launch():
    work = launch.causal_tile_work(4096, 128, 64)        # 32 Q tiles: 2, 4, ..., 64
    assert launch.makespan(work, 1) == sum(work)
    assert launch.makespan(work, len(work)) == max(work)
    in_order, longest_first = launch.makespan(work, 8), launch.makespan(work[::-1], 8)
    assert longest_first < in_order
    assert longest_first >= sum(work) / 8                 # never below perfect balance
    assert launch.makespan([3, 3, 2, 2, 2], 2) == 7       # longest first is not always best:
    assert launch.makespan([3, 2, 2, 3, 2], 2) == 6       # this order reaches the optimum
    with pytest.raises(ValueError):
        launch.makespan([], 4)
    with pytest.raises(ValueError):
        launch.makespan([1, -1], 4)
