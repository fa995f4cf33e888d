"""Tests for inferbook.triton_paged_decode: the paged split-KV decode kernel.

Without a GPU the kernel runs under Triton's interpreter (`inferbook.triton_device`, imported
before Triton, sets TRITON_INTERPRET=1). Each case reads K/V through a shuffled block table from
a pool whose unused pages, and the unused tail of each last page, hold NaN: a load the kernel
should not make shows up in the output.

Correctness rule (flash-attention's): against a float64 reference (the sequence's keys gathered
through its table, then `flash.attention_reference`, causal bottom-right), our max error is at
most twice the max error of the plain computation in the inputs' dtype (the package's
`paged.paged_attention`), plus FLOOR (a few float32 ulps: the kernel's exp2 with log2(e) folded
into the scale rounds differently from the plain softmax, as in test_triton_flash.py).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import inferbook.triton_device  # noqa: F401  (before triton: the interpreter without a GPU)
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from inferbook import flash, paged
from inferbook import triton_paged_decode as pd
from inferbook.triton_device import DEVICE

FLOOR = {torch.float32: 1e-6, torch.float16: 0.0, torch.bfloat16: 0.0}


def make_case(batch_lens, heads, kv_heads, n_q, page, head_dim, dtype, seed=0, spare=3,
              fill=float("nan")):
    """Return (q, k_pool, v_pool, tables, lens): shuffled pages, `fill` wherever nothing is stored."""
    gen = torch.Generator().manual_seed(seed)
    needs = [-(-n // page) for n in batch_lens]
    num_blocks = sum(needs) + spare
    k_pool = torch.full((num_blocks, page, kv_heads, head_dim), fill)
    v_pool = torch.full_like(k_pool, fill)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables, used = [], 0
    for n, need in zip(batch_lens, needs):
        table = order[used: used + need]
        used += need
        keys = torch.randn(n, kv_heads, head_dim, generator=gen) * 2
        values = torch.randn(n, kv_heads, head_dim, generator=gen)
        for t in range(n):
            k_pool[table[t // page], t % page] = keys[t]
            v_pool[table[t // page], t % page] = values[t]
        tables.append(table)
    q = torch.randn(len(batch_lens), heads, n_q, head_dim, generator=gen)
    return (q.to(DEVICE, dtype), k_pool.to(DEVICE, dtype), v_pool.to(DEVICE, dtype), tables,
            list(batch_lens))


def reference64(q, k_pool, v_pool, tables, lens):
    """Return (o, lse) float64 [batch, heads, n_q, (d)]: gather each sequence, then the book's
    float64 reference with the causal mask aligned bottom-right."""
    outs, lses = [], []
    for b, (table, n) in enumerate(zip(tables, lens)):
        slots = [table[t // k_pool.shape[1]] * k_pool.shape[1] + t % k_pool.shape[1]
                 for t in range(n)]
        flat = (-1, k_pool.shape[2], k_pool.shape[3])
        k = k_pool.reshape(flat)[slots].double().cpu().numpy().transpose(1, 0, 2)[None]
        v = v_pool.reshape(flat)[slots].double().cpu().numpy().transpose(1, 0, 2)[None]
        o, lse = flash.attention_reference(q[b:b + 1].double().cpu().numpy(), k, v, causal=True)
        outs.append(o[0])
        lses.append(lse[0])
    return np.stack(outs), np.stack(lses)


def baseline(q, k_pool, v_pool, tables, lens):
    """The plain computation in the inputs' dtype: the package's paged_attention, per sequence."""
    return torch.stack([paged.paged_attention(q[b].cpu(), k_pool.cpu(), v_pool.cpu(), t, n)
                        for b, (t, n) in enumerate(zip(tables, lens))])


def max_err(x, ref):
    return float(np.abs(x.detach().double().cpu().numpy() - ref).max())


def check(q, k_pool, v_pool, tables, lens, num_splits):
    dtype = q.dtype
    o, lse = pd.paged_decode(q, k_pool, v_pool, tables, lens, num_splits=num_splits)
    assert o.shape == q.shape and o.dtype == dtype and lse.dtype == torch.float32
    ref_o, ref_lse = reference64(q, k_pool, v_pool, tables, lens)
    err, base = max_err(o, ref_o), max_err(baseline(q, k_pool, v_pool, tables, lens), ref_o)
    assert np.isfinite(err), "NaN: the kernel read a slot nothing was stored in"
    assert err <= 2 * base + FLOOR[dtype], f"error {err:.3g} > 2 x plain {dtype} {base:.3g}"
    assert max_err(lse, ref_lse) < (1e-5 if dtype == torch.float32 else 2e-3)
    return err, base


@pytest.mark.parametrize("lens, heads, kv_heads, n_q, page, head_dim, dtype, splits", [
    ([37, 16, 1], 8, 2, 1, 16, 32, torch.float32, 2),     # GQA 4, partial last page, length 1
    ([37, 16, 1], 8, 2, 1, 16, 32, torch.float16, 3),
    ([50, 9], 2, 2, 1, 8, 24, torch.float32, 4),           # MHA, page < 16, head_dim 24
    ([45, 20], 6, 1, 3, 12, 16, torch.float32, 2),         # MQA, 3 queries causal, page 12
    ([33], 4, 2, 5, 16, 64, torch.float16, 1),             # 5 queries, one split
    ([30, 3], 2, 1, 2, 16, 8, torch.bfloat16, 2),          # bf16, head_dim 8
])
def test_matches_float64_reference_by_the_2x_rule(lens, heads, kv_heads, n_q, page, head_dim,
                                                  dtype, splits):
    check(*make_case(lens, heads, kv_heads, n_q, page, head_dim, dtype), splits)


@settings(max_examples=8, deadline=None)
@given(lens=st.lists(st.integers(1, 40), min_size=1, max_size=3), kv_heads=st.sampled_from([1, 2]),
       group=st.sampled_from([1, 3, 4]), page=st.sampled_from([4, 16]),
       head_dim=st.sampled_from([16, 32]), splits=st.integers(1, 4), n_q=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**16))
def test_random_shapes(lens, kv_heads, group, page, head_dim, splits, n_q, seed):
    lens = [max(n, n_q) for n in lens]
    case = make_case(lens, kv_heads * group, kv_heads, n_q, page, head_dim, torch.float32, seed)
    width = max(-(-n // page) for n in lens)
    check(*case, min(splits, width))


def test_padded_tensor_tables_and_the_merge():
    q, k_pool, v_pool, tables, lens = make_case([40, 7, 23], 4, 2, 1, 8, 16, torch.float32, seed=3)
    width = max(len(t) for t in tables) + 2
    padded = torch.tensor([t + [len(k_pool) - 1] * (width - len(t)) for t in tables])  # padding
    o_list, lse_list = pd.paged_decode(q, k_pool, v_pool, tables, lens, num_splits=1)
    o_pad, lse_pad = pd.paged_decode(q, k_pool, v_pool, padded, lens, num_splits=1)
    assert torch.equal(o_list, o_pad) and torch.equal(lse_list, lse_pad)
    # the partials: a split past a short sequence is empty (lse = -inf, o = 0); merged they
    # give the one-split result
    o_part, lse_part = pd.paged_decode_partials(q, k_pool, v_pool, tables, lens, num_splits=5)
    assert o_part.shape[3] == 5 and torch.isneginf(lse_part[1, :, :, 1:]).all()
    assert (o_part[1, :, :, 1:] == 0).all()
    o, lse = pd.paged_decode(q, k_pool, v_pool, tables, lens, num_splits=5)
    assert torch.allclose(o, o_list, atol=1e-6) and torch.allclose(lse, lse_list, atol=1e-6)


def test_agrees_with_the_packages_paged_attention_and_decode():
    q, k_pool, v_pool, tables, lens = make_case([25, 64, 2], 4, 2, 1, 16, 32, torch.float32, seed=5,
                                                 fill=0.0)  # paged_decode_attention reads padding
    o, _ = pd.paged_decode(q, k_pool, v_pool, tables, lens, num_splits=2)
    ref = paged.paged_decode_attention(q[:, :, 0].cpu(), k_pool.cpu(), v_pool.cpu(), tables, lens)
    assert torch.allclose(o[:, :, 0].cpu(), ref, atol=2e-6)


def test_decode_rows_pack_the_gqa_group():
    assert pd.decode_rows(4, 1) == 16 and pd.decode_rows(8, 3) == 32
    assert pd.decode_rows(32, 4) == pd.MAX_ROWS      # more rows: more Q tiles per KV head


def test_engine_dispatch_chooses_triton_only_on_a_gpu():
    # the choice, made without a GPU: CUDA tensors (and Triton installed) take the kernel
    has_triton = importlib.util.find_spec("triton") is not None
    assert paged.decode_backend(torch.device("cpu")) == "torch"
    assert paged.decode_backend("cpu", torch.float16) == "torch"
    assert paged.decode_backend(torch.device("cuda", 0)) == ("triton" if has_triton else "torch")
    assert paged.decode_backend("cuda", torch.float64) == "torch"   # a dtype the kernel lacks
    assert paged.TRITON_DECODE_DTYPES == pd.SUPPORTED_DTYPES


def test_cpu_decode_step_never_imports_the_kernel():
    # the engine's attention on the CPU: a decode step through PagedContext, in a fresh process
    code = ("import sys, torch; from inferbook import paged; from inferbook.blocks import BlockAllocator;"
            "cache = paged.PagedKVCache(BlockAllocator(8, 4), 1, 2, 16);"
            "cache.blocks.add_sequence(0); cache.reserve(0, 5);"
            "ctx = paged.PagedContext(cache, [(0, 4, 1)]);"
            "q, k, v = (torch.randn(1, 1, h, 16) for h in (4, 2, 2));"
            "assert ctx.attend(0, q, k, v).shape == q.shape;"
            "print('triton' in sys.modules, 'inferbook.triton_paged_decode' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False", "False"]


# --- bad input: a named error, nothing launched ----------------------------------------------
def _case():
    return make_case([20, 5], 4, 2, 1, 8, 16, torch.float32)


def _bad(what):
    q, k, v, tables, lens = _case()
    cases = {
        "q 3-D": (q[:, :, 0], k, v, tables, lens),
        "q dtype": (q.double(), k, v, tables, lens),
        "int pool": (q, k.long(), v.long(), tables, lens),
        "mixed dtypes": (q, k.half(), v.half(), tables, lens),
        "pool shapes": (q, k, v[:, :4], tables, lens),
        "head_dim": (q[..., :8], k, v, tables, lens),
        "heads": (q[:, :3], k, v, tables, lens),
        "table out of range": (q, k, v, [tables[0][:-1] + [len(k)], tables[1]], lens),
        "negative page": (q, k, v, [tables[0], [-1]], lens),
        "repeated page": (q, k, v, [[tables[0][0]] * 3, tables[1]], lens),
        "context past table": (q, k, v, tables, [lens[0] + 8, lens[1]]),
        "negative length": (q, k, v, tables, [lens[0], -1]),
        "zero length": (q, k, v, tables, [0, lens[1]]),
        "context < n_q": (q.expand(-1, -1, 3, -1), k, v, tables, [2, 5]),
        "lengths count": (q, k, v, tables, lens[:1]),
        "tables count": (q, k, v, tables[:1], lens),
        "float table": (q, k, v, torch.tensor([tables[0], tables[1] + [0, 0]], dtype=torch.float32), lens),
        "float length": (q, k, v, tables, [20.0, 5]),
        "not a tensor": (q.numpy(), k, v, tables, lens),
    }
    return cases[what]


@pytest.mark.parametrize("what, words", [
    ("q 3-D", "q must be"), ("q dtype", "q.dtype"), ("int pool", "k_pool.dtype"),
    ("mixed dtypes", "share a dtype"), ("pool shapes", "k_pool and v_pool"),
    ("head_dim", "head_dim"), ("heads", "multiple"), ("table out of range", r"block_tables\[0\]"),
    ("negative page", r"block_tables\[1\]"), ("repeated page", "more than once"),
    ("context past table", "needs 4 pages"), ("negative length", "context_lens"),
    ("zero length", "context_lens"), ("context < n_q", "context_lens"),
    ("lengths count", "one length per sequence"), ("tables count", "one table per sequence"),
    ("float table", "integer page ids"), ("float length", "context_lens"),
    ("not a tensor", "q must be a torch.Tensor"),
])
def test_bad_input_raises_a_named_value_error_and_launches_nothing(what, words, monkeypatch):
    launched = []
    monkeypatch.setattr(pd, "paged_decode_kernel", _Recorder(launched))
    with pytest.raises(ValueError, match=words):
        pd.paged_decode(*_bad(what), num_splits=1)
    assert launched == []


@pytest.mark.parametrize("splits, scale, words", [(0, None, "num_splits"), (9, None, "num_splits"),
                                                  (1.5, None, "num_splits"),
                                                  (1, float("nan"), "scale")])
def test_bad_splits_and_scale(splits, scale, words, monkeypatch):
    launched = []
    monkeypatch.setattr(pd, "paged_decode_kernel", _Recorder(launched))
    with pytest.raises(ValueError, match=words):
        pd.paged_decode(*_case(), num_splits=splits, scale=scale)
    assert launched == []


class _Recorder:
    """Stands in for the kernel: records a launch instead of running one."""

    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(grid)


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU message; on a GPU it benchmarks")
def test_benchmark_refuses_cleanly_without_a_gpu(tmp_path, capsys):
    from pathlib import Path

    path = Path(__file__).resolve().parent / "bench" / "bench_paged_decode.py"
    spec = importlib.util.spec_from_file_location("bench_paged_decode", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path)]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
