"""Tests for inferbook.triton_flash: the Triton FlashAttention forward, its backward, split-KV.

Without a GPU the kernel runs under Triton's interpreter (TRITON_INTERPRET=1, set below before
the module is imported: Triton reads it when `@triton.jit` decorates the kernel). With a GPU the
same tests run natively on CUDA tensors, and the bf16 test runs too.

Correctness rule (flash-attention's own tests): against the float64 reference (the book's one,
`inferbook.flash.attention_reference`; gradients from `flash.flash_attention_backward` in
float64), our max error must
be at most twice the max error of the plain computation (full score matrix) in the same
precision. In float32 we add an absolute slack of 1e-6 (about 8 float32 ulps at 1): the kernel
works in exp2 with the scale folded into log2(e), which costs a few ulps that the baseline,
rounding only once per step, does not pay.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import triton  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from inferbook import flash  # noqa: E402
from inferbook import triton_flash as tf  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parent.parent
FP32_SLACK = 1e-6

if DEVICE == "cpu" and not tf.INTERPRETED:  # imported earlier without the variable
    raise RuntimeError("inferbook.triton_flash was imported before TRITON_INTERPRET=1 was set")


def make_qkv(batch, heads, kv_heads, n_q, n_kv, head_dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, head_dim, generator=gen)
    k = torch.randn(batch, kv_heads, n_kv, head_dim, generator=gen)
    v = torch.randn(batch, kv_heads, n_kv, head_dim, generator=gen)
    return (t.to(DEVICE, dtype) for t in (q, k, v))


def reference(q, k, v, causal=False):
    """(o, lse) of the book's float64 reference (NumPy), as float64 tensors on the CPU."""
    arrays = (t.detach().double().cpu().numpy() for t in (q, k, v))
    return tuple(torch.from_numpy(x) for x in flash.attention_reference(*arrays, causal))


def reference_grads(q, k, v, do, causal=False):
    """(dq, dk, dv) in float64 from the NumPy backward, with one tile = the plain computation."""
    q64, k64, v64, do64 = (t.detach().double().cpu().numpy() for t in (q, k, v, do))
    o, lse = flash.attention_reference(q64, k64, v64, causal)
    n = max(q.shape[2], k.shape[2])
    grads = flash.flash_attention_backward(q64, k64, v64, o, lse, do64, causal,
                                           block_q=n, block_k=n)
    return tuple(torch.from_numpy(g) for g in grads)


def max_err(x, ref):
    """Max |x - ref| over finite reference entries, in float64."""
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    finite = torch.isfinite(ref)
    return (x[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0


def assert_within_rule(ours, baseline, ref, dtype, what):
    err, base = max_err(ours, ref), max_err(baseline, ref)
    slack = FP32_SLACK if dtype == torch.float32 else 0.0
    assert err <= 2 * base + slack, f"{what}: error {err:.3g} > 2 x baseline {base:.3g} + {slack}"


def check_forward(batch, heads, kv_heads, n_q, n_kv, head_dim, causal, dtype, block=16, seed=0):
    q, k, v = make_qkv(batch, heads, kv_heads, n_q, n_kv, head_dim, dtype, seed)
    o, lse = tf.flash_attention(q, k, v, causal, block_q=block, block_k=block)
    ref_o, ref_lse = reference(q, k, v, causal)
    base_o, _ = tf.attention_naive(q, k, v, causal)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert_within_rule(o, base_o, ref_o, dtype, "output")
    # lse is float32 whatever the inputs; it only sees the rounding of the scores
    assert torch.equal(torch.isneginf(lse).cpu(), torch.isneginf(ref_lse).cpu())
    assert max_err(lse, ref_lse) < 2e-5 * (1 + ref_lse[torch.isfinite(ref_lse)].abs().max().item())
    return o, lse


# ---------------------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "batch, heads, kv_heads, n_q, n_kv, head_dim, causal, dtype",
    [
        (1, 2, 2, 37, 37, 32, False, torch.float32),   # ragged: 37 = 2 tiles + 5
        (1, 2, 2, 37, 37, 32, True, torch.float32),
        (2, 2, 1, 33, 50, 24, True, torch.float32),    # MQA, head_dim not a power of 2, n_q < n_kv
        (1, 4, 2, 48, 48, 32, True, torch.float16),    # GQA groups of 2
        (1, 2, 2, 40, 23, 16, False, torch.float16),   # n_q > n_kv, not causal
        (1, 1, 1, 1, 70, 64, False, torch.float16),    # one decode row against a cache
    ],
)
def test_forward_matches_float64_reference(batch, heads, kv_heads, n_q, n_kv, head_dim, causal, dtype):
    check_forward(batch, heads, kv_heads, n_q, n_kv, head_dim, causal, dtype)


def test_head_dim_extremes_and_default_tiles():
    check_forward(1, 1, 1, 20, 20, 256, True, torch.float32, block=None)
    check_forward(1, 1, 1, 20, 20, 16, False, torch.float32, block=None)


@settings(max_examples=8, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_kv=st.integers(1, 40),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2]),
    head_dim=st.sampled_from([16, 20, 32]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_forward_random_shapes(n_q, n_kv, kv_heads, group, head_dim, causal, seed):
    check_forward(1, kv_heads * group, kv_heads, n_q, n_kv, head_dim, causal, torch.float32, seed=seed)


def test_fully_masked_rows_are_zero_with_lse_minus_inf():
    # causal, bottom-right aligned, n_q > n_kv: the first n_q - n_kv rows see no key at all
    q, k, v = make_qkv(1, 1, 1, 40, 10, 16, torch.float32)
    o, lse = tf.flash_attention(q, k, v, causal=True, block_q=16, block_k=16)
    assert torch.all(o[0, 0, :30] == 0) and torch.all(torch.isneginf(lse[0, 0, :30]))
    assert torch.all(torch.isfinite(lse[0, 0, 30:]))


def test_matches_the_numpy_chapter_and_is_not_bit_identical_to_it():
    q, k, v = make_qkv(1, 2, 1, 50, 50, 32, torch.float32)
    o, lse = tf.flash_attention(q, k, v, causal=True, block_q=16, block_k=16)
    o_np, lse_np = flash.flash_attention_forward(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(),
                                                 causal=True, block_q=16, block_k=16)
    assert torch.allclose(o.cpu(), torch.from_numpy(o_np), atol=2e-6)
    assert torch.allclose(lse.cpu(), torch.from_numpy(lse_np), atol=2e-6)


def test_strided_inputs_in_flash_attn_layout():
    # [batch, seq, heads, d] tensors viewed as [batch, heads, seq, d]: not contiguous, last stride 1
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 45, h, 32, generator=gen).to(DEVICE).transpose(1, 2) for h in (4, 2, 2))
    assert not q.is_contiguous()
    o, lse = tf.flash_attention(q, k, v, causal=True, block_q=16, block_k=16)
    ref_o, ref_lse = reference(q, k, v, causal=True)
    assert max_err(o, ref_o) < 2e-6 and max_err(lse, ref_lse) < 2e-6


@pytest.mark.skipif(DEVICE == "cuda", reason="tests the interpreter's bf16 workaround only")
def test_bfloat16_under_the_interpreter_is_upcast_not_garbage():
    # NOT a test of the kernel's bf16 arithmetic (that needs a GPU, see below): it checks that
    # the CPU path upcasts bf16 (the interpreter multiplies bf16 bit patterns) and casts back.
    q, k, v = make_qkv(1, 2, 1, 20, 20, 16, torch.bfloat16)
    o, _ = tf.flash_attention(q, k, v, causal=True, block_q=16, block_k=16)
    assert o.dtype == torch.bfloat16
    assert_within_rule(o, tf.attention_naive(q, k, v, True)[0], reference(q, k, v, True)[0],
                       torch.bfloat16, "bf16 output")


@pytest.mark.skipif(DEVICE == "cpu", reason="bf16 needs a GPU: Triton's interpreter computes "
                    "bfloat16 wrongly (triton issue 11584), so the CPU path upcasts bf16 to fp32")
def test_bfloat16_on_gpu():
    check_forward(2, 4, 2, 130, 130, 64, True, torch.bfloat16, block=None)
    check_forward(1, 2, 2, 77, 200, 128, False, torch.bfloat16, block=None)


# ---------------------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "heads, kv_heads, n_q, n_kv, head_dim, causal, dtype",
    [(2, 1, 37, 37, 32, True, torch.float32), (2, 1, 30, 45, 16, True, torch.float16),
     (2, 2, 20, 33, 16, False, torch.float16)],
)
def test_backward_matches_autograd_of_the_reference(heads, kv_heads, n_q, n_kv, head_dim, causal, dtype):
    q, k, v = make_qkv(1, heads, kv_heads, n_q, n_kv, head_dim, dtype)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, _ = tf.flash_attention(*leaves, causal, block_q=16, block_k=16)
    ours = torch.autograd.grad(o, leaves, do)
    base_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    base = torch.autograd.grad(tf.attention_naive(*base_leaves, causal)[0], base_leaves, do)
    ref = reference_grads(q, k, v, do, causal)
    for name, g, b, r in zip("qkv", ours, base, ref):
        assert g.dtype == dtype
        assert_within_rule(g, b, r, dtype, f"d{name}")


# ---------------------------------------------------------------------------------------
# split-KV decoding
# ---------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(n_kv=st.integers(1, 200), splits=st.integers(1, 16), group=st.sampled_from([1, 4]),
       n_q=st.sampled_from([1, 3]), seed=st.integers(0, 2**16))
def test_split_kv_merge_is_exact(n_kv, splits, group, n_q, seed):
    splits = min(splits, n_kv)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 2 * group, n_q, 16, generator=gen, dtype=torch.float64) * 3
    k = torch.randn(2, 2, n_kv, 16, generator=gen, dtype=torch.float64) * 3
    v = torch.randn(2, 2, n_kv, 16, generator=gen, dtype=torch.float64)
    o, lse = tf.split_kv_attention(q, k, v, splits)
    ref_o, ref_lse = reference(q, k, v)
    assert (o - ref_o).abs().max().item() < 1e-12
    assert (lse - ref_lse).abs().max().item() < 1e-12


def test_merge_is_associative_and_ignores_empty_splits():
    gen = torch.Generator().manual_seed(0)
    outs = torch.randn(4, 3, 8, generator=gen, dtype=torch.float64)
    lses = torch.randn(4, 3, generator=gen, dtype=torch.float64) * 5
    all_at_once = tf.merge_partials(outs, lses)
    left = tf.merge_partials(outs[:2], lses[:2])
    right = tf.merge_partials(outs[2:], lses[2:])
    nested = tf.merge_partials(torch.stack([left[0], right[0]]), torch.stack([left[1], right[1]]))
    assert torch.allclose(all_at_once[0], nested[0], atol=1e-14)
    assert torch.allclose(all_at_once[1], nested[1], atol=1e-14)
    empty_o = torch.full((1, 3, 8), 123.0, dtype=torch.float64)   # garbage output, lse = -inf
    with_empty = tf.merge_partials(torch.cat([outs, empty_o]),
                                   torch.cat([lses, torch.full((1, 3), float("-inf"), dtype=torch.float64)]))
    assert torch.allclose(with_empty[0], all_at_once[0], atol=1e-14)
    none_o, none_lse = tf.merge_partials(empty_o, torch.full((1, 3), float("-inf"), dtype=torch.float64))
    assert torch.all(none_o == 0) and torch.all(torch.isneginf(none_lse))


def test_split_kv_agrees_with_the_kernel_on_a_decode_step():
    q, k, v = make_qkv(1, 4, 2, 1, 90, 32, torch.float32)
    o_split, lse_split = tf.split_kv_attention(q, k, v, num_splits=6)
    o, lse = tf.flash_attention(q, k, v, causal=True, block_q=16, block_k=32)
    assert torch.allclose(o_split, o, atol=1e-5) and torch.allclose(lse_split, lse, atol=1e-5)


# ---------------------------------------------------------------------------------------
# errors, FLOPs, benchmark results
# ---------------------------------------------------------------------------------------
def test_invalid_inputs_raise_value_error():
    q, k, v = make_qkv(1, 4, 2, 8, 8, 16, torch.float32)
    cases = [
        ((q[0], k, v), "4-D"),
        ((q.double(), k.double(), v.double()), "allowed: float16"),
        ((q, k.half(), v), "share a dtype"),
        ((q, k[:, :1].repeat(1, 3, 1, 1), v[:, :1].repeat(1, 3, 1, 1)), "multiple"),
        ((q[..., :8], k[..., :8], v[..., :8]), r"head_dim must be in \[16, 256\]"),
        ((q, k, v[:, :, :4]), "same shape"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            tf.flash_attention(*args)
    with pytest.raises(ValueError, match="power of two"):
        tf.flash_attention(q, k, v, block_q=24)
    with pytest.raises(ValueError, match="num_splits"):
        tf.split_kv_attention(q, k, v, num_splits=9)
    with pytest.raises(ValueError, match="seq_len"):
        tf.benchmark_flops(1, 1, 0, 64, False)


def test_benchmark_flops_convention():
    assert tf.benchmark_flops(2, 3, 1024, 64, False) == 4 * 2 * 3 * 1024**2 * 64
    assert tf.benchmark_flops(2, 3, 1024, 64, True) == 2 * 2 * 3 * 1024**2 * 64
    exact = flash.attention_flops(1024, 1024, 64, causal=True, batch_heads=6)
    assert exact / tf.benchmark_flops(2, 3, 1024, 64, True) == pytest.approx(1025 / 1024)


def synthetic_run():
    """A FIXTURE shaped like the benchmark's JSON. Its numbers are made up; it is never
    written under outputs/."""
    rows = []
    for method, speed in (("sdpa_flash", 1.0), ("ours_triton", 0.5)):
        for n in (512, 1024):
            rows.append(dict(method=method, seq_len=n, head_dim=64, causal=False, status="ok",
                             tflops=speed * n / 1024, peak_mem_bytes=n * 1000))
    rows.append(dict(method="sdpa_cudnn", seq_len=512, head_dim=64, causal=False,
                     status="unsupported: sm75", tflops=None, peak_mem_bytes=None))
    machine = dict(gpu="FIXTURE-GPU", capability="75", driver="0.0", torch="0", triton="0",
                   flash_attn=None, date="1970-01-01")
    return {"machine": machine, "results": rows}


def test_load_and_plot_benchmark_results_from_a_fixture(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    (tmp_path / "flash_triton_fixture.json").write_text(json.dumps(synthetic_run()))
    (tmp_path / "unrelated.json").write_text("{}")
    runs = tf.load_benchmark_results(tmp_path)
    assert [r["path"] for r in runs] == ["flash_triton_fixture.json"]
    assert "FIXTURE-GPU" in tf.benchmark_label(runs[0]) and "1970-01-01" in tf.benchmark_label(runs[0])
    fig = tf.plot_benchmark_results(runs[0])
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"sdpa_flash", "ours_triton"}         # unsupported rows are not plotted
    assert list(lines["ours_triton"].get_ydata()) == [0.25, 0.5]
    assert tf.load_benchmark_results(tmp_path / "missing") == []
    (tmp_path / "flash_triton_bad.json").write_text("{}")
    with pytest.raises(ValueError, match="missing keys"):
        tf.load_benchmark_results(tmp_path)


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU message; on a GPU the script benchmarks")
def test_benchmark_script_refuses_cleanly_without_a_gpu(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_triton_flash",
                                                  ROOT / "tests/bench/bench_triton_flash.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path)]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_versions_table_is_re_exported_from_attention_backends():
    from inferbook import attention_backends

    assert tf.FLASH_ATTENTION_VERSIONS is attention_backends.FLASH_ATTENTION_VERSIONS
    assert tf.flash_versions_for is attention_backends.flash_versions_for


@settings(max_examples=40, deadline=None)
@given(n_q=st.integers(1, 200), n_kv=st.integers(1, 200), block_m=st.sampled_from([16, 32, 64]),
       block_n=st.sampled_from([16, 32, 64]), causal=st.booleans())
def test_kv_tile_schedule_splits_keys_correctly(n_q, n_kv, block_m, block_n, causal):
    offset = n_kv - n_q
    for pid_m in range((n_q + block_m - 1) // block_m):
        rows = range(pid_m * block_m, min((pid_m + 1) * block_m, n_q))
        full_end, masked_end = tf.kv_tile_schedule(pid_m, n_q, n_kv, block_m, block_n, causal)
        assert full_end % block_n == 0 and full_end <= max(masked_end, 0)
        visible = lambda i, j: (not causal) or j <= i + offset  # noqa: E731
        # the unmasked loop only touches keys every row of the tile may see
        assert all(visible(i, j) for i in rows for j in range(full_end))
        # nothing visible is left out, and nothing past masked_end is needed
        needed = [j for i in rows for j in range(n_kv) if visible(i, j)]
        assert not needed or max(needed) < masked_end


# ---------------------------------------------------------------------------------------
# launch choices (the ahead-of-time compile checks are in tests/test_triton_aot.py)
# ---------------------------------------------------------------------------------------
ARCHS = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0)]


def test_smem_limits_come_from_the_gpu_presets():
    from inferbook.hardware import GPUS

    assert set(tf.TUNED_CAPABILITIES) == set(ARCHS)
    for g in GPUS.values():
        assert tf.smem_limit_bytes(g.compute_capability) <= g.smem_bytes_per_block
    assert [tf.smem_limit_bytes(cc) // 1024 for cc in ARCHS] == [64, 163, 99, 99, 227, 227]
    assert tf.smem_limit_bytes(80) == tf.smem_limit_bytes("sm80") == tf.smem_limit_bytes((8, 0))
    assert tf.smem_limit_bytes((8, 7)) == tf.smem_limit_bytes((8, 6))   # nearest below


@pytest.mark.parametrize("cc", ARCHS)
def test_launch_config_per_architecture(cc):
    for head_dim in (16, 24, 32, 64, 80, 96, 128, 256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            if dtype == torch.bfloat16 and cc < (8, 0):
                with pytest.raises(ValueError, match="bfloat16 needs"):
                    tf.launch_config(head_dim, dtype, cc)
                continue
            bm, bn, warps, stages = config = tf.launch_config(head_dim, dtype, cc)
            assert bm >= 16 and bn >= 16 and warps in (4, 8) and stages >= 1
            assert tf.smem_estimate_bytes(head_dim, dtype, *config) <= tf.smem_limit_bytes(cc)
            tuned = tf.autotune_configs(head_dim, dtype, cc)
            assert tuned[0] == config and len(tuned) == len(set(tuned)) <= 7
            assert all(tf.smem_estimate_bytes(head_dim, dtype, *c) <= tf.smem_limit_bytes(cc)
                       for c in tuned)
    # more shared memory, larger tiles: an H100's K/V tiles are at least an A10's
    h100, a10 = (tf.launch_config(64, torch.float16, cc) for cc in ((9, 0), (8, 6)))
    assert h100[1] >= a10[1]


def test_launch_config_rejects_what_it_cannot_serve():
    with pytest.raises(ValueError, match="head_dim"):
        tf.launch_config(512, torch.float16, (9, 0))
    with pytest.raises(ValueError, match="7.5 or newer"):
        tf.launch_config(64, torch.float16, (7, 0))
    with pytest.raises(ValueError, match="capability"):
        tf.launch_config(64, torch.float16, "hopper")
    with pytest.raises(ValueError, match="allowed"):
        tf.launch_config(64, torch.float64, (9, 0))
    fallback = tf.launch_config(64, torch.float16, (12, 0))   # no preset: the T4's choice
    assert fallback == tf.launch_config(64, torch.float16, (7, 5))


def test_autotune_pruner_keeps_only_configs_that_fit():
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st_)
               for bm in (32, 64, 128) for bn in (16, 32, 64, 128) for w in (4, 8)
               for st_ in (1, 2, 3, 4)]
    q = torch.empty(1, 1, 1, 128, dtype=torch.float16)
    for cc in ((7, 5), (9, 0)):
        kept = tf._autotune_pruner(cc)(configs, {"Q": q}, HEAD_DIM=128)
        as_tuples = [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                     for c in kept]
        assert set(as_tuples) <= set(tf.autotune_configs(128, torch.float16, cc))
        assert tf.launch_config(128, torch.float16, cc) in as_tuples


# ---------------------------------------------------------------------------------------
# decode: a GQA group's queries packed into one Q tile
# ---------------------------------------------------------------------------------------
def test_decode_packs_a_gqa_group_into_one_tile():
    # Llama-3.1-8B at batch 1: 32 query heads, 8 KV heads -> 8 programs, each one KV head
    plan = tf.launch_plan(batch=1, heads=32, kv_heads=8, n_q=1, block_m=128)
    assert plan.packed and plan.grid == (1, 8) and plan.n_q == 4 and plan.block_m == 16
    assert plan.heads == 8 and plan.group_size == 1
    # prefill, or MHA decode, keeps the (Q tiles, batch x heads) grid
    prefill = tf.launch_plan(batch=2, heads=32, kv_heads=8, n_q=300, block_m=128)
    assert not prefill.packed and prefill.grid == (3, 64)
    assert not tf.launch_plan(1, 32, 32, 1, 128).packed


@pytest.mark.parametrize("heads, kv_heads, causal", [(8, 2, True), (8, 1, False), (12, 4, True)])
def test_packed_decode_matches_reference(heads, kv_heads, causal):
    q, k, v = make_qkv(2, heads, kv_heads, 1, 75, 32, torch.float32, seed=heads)
    assert tf.launch_plan(2, heads, kv_heads, 1, 32).packed
    o, lse = tf.flash_attention(q, k, v, causal)
    ref_o, ref_lse = reference(q, k, v, causal)
    assert max_err(o, ref_o) < 2e-6 and max_err(lse, ref_lse) < 2e-6
    # strided q (heads not adjacent in memory) packs by strides, without a copy
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    o2, _ = tf.flash_attention(q_strided, k, v, causal)
    assert max_err(o2, ref_o) < 2e-6


# ---------------------------------------------------------------------------------------
# make gpu-check (tools/gpu_check.py)
# ---------------------------------------------------------------------------------------
def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU message; on a GPU it benchmarks")
def test_gpu_check_refuses_cleanly_without_a_gpu(capsys):
    assert _gpu_check().main([]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


# (gpu_check's verdicts per target: tests/test_gpu_check.py)


# --- bad input: a clear error naming the argument, never a raw error or a silent result ---------------
@pytest.mark.parametrize("call, words", [
    (lambda q, k, v: tf.flash_attention(q, k, v, causal="yes"), "causal"),
    (lambda q, k, v: tf.flash_attention(q, k, v, block_q=32.0), "block_q"),
    (lambda q, k, v: tf.flash_attention(q, k, v, block_k=24), "block_k"),
    (lambda q, k, v: tf.flash_attention(q, k[:1], v[:1]), "batch"),
    (lambda q, k, v: tf.attention_naive(q, k, v, scale=float("nan")), "scale"),
    (lambda q, k, v: tf.attention_naive(q, k, v, causal=1), "causal"),
    (lambda q, k, v: tf.split_kv_attention(q, k[:1], v[:1], 2), "batch"),
    (lambda q, k, v: tf.kv_tile_schedule(5, 64, 64, 16, 16, True), "pid_m"),
    (lambda q, k, v: tf.kv_tile_schedule(0, 0, 64, 16, 16, True), "n_q"),
    (lambda q, k, v: tf.launch_plan(1, 6, 4, 1, 16), "kv_heads"),
    (lambda q, k, v: tf.launch_plan(1, 4, 0, 1, 16), "kv_heads"),
    (lambda q, k, v: tf.smem_estimate_bytes(64, torch.float16, 64, 0, 4, 2), "block_n"),
    (lambda q, k, v: tf.benchmark_flops(1, 2, 128, 64.5, False), "head_dim"),
    (lambda q, k, v: tf.benchmark_flops(1, 2, 128, 64, "no"), "causal"),
    (lambda q, k, v: tf.load_benchmark_results(None), "folder"),
])
def test_bad_input_names_the_argument(call, words):
    q, k, v = make_qkv(2, 2, 2, 16, 16, 16, torch.float32)
    with pytest.raises((TypeError, ValueError), match=words):
        call(q, k, v)
