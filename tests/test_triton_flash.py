"""Tests for inferbook.triton_flash: the Triton FlashAttention forward and its backward.

The launch arithmetic is tested in test_triton_launch.py (no Triton), the benchmark files in
test_triton_plots.py, split-KV and the merge in test_split_kv.py.

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
import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from inferbook import flash, split_kv  # noqa: E402
from inferbook import triton_flash as tf  # noqa: E402
from inferbook.triton_launch import launch_plan  # noqa: E402

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
# split-KV decoding (exactness and the merge: test_split_kv.py) against the kernel
# ---------------------------------------------------------------------------------------
def test_split_kv_agrees_with_the_kernel_on_a_decode_step():
    q, k, v = make_qkv(1, 4, 2, 1, 90, 32, torch.float32)
    o_split, lse_split = split_kv.split_kv_attention(q, k, v, num_splits=6)
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


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU message; on a GPU the script benchmarks")
def test_benchmark_script_refuses_cleanly_without_a_gpu(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_triton_flash",
                                                  ROOT / "tests/bench/bench_triton_flash.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path)]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_no_pass_through_names():
    # callers import the split modules directly: nothing of theirs is re-exported here
    for name in ("split_kv_attention", "merge_partials", "launch_config", "smem_limit_bytes",
                 "benchmark_flops", "plot_benchmark_results", "compile_forward",
                 "FLASH_ATTENTION_VERSIONS", "flash_versions_for"):
        assert not hasattr(tf, name), name


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
# decode: a GQA group's queries packed into one Q tile (the plan: test_triton_launch.py)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads, kv_heads, causal", [(8, 2, True), (8, 1, False), (12, 4, True)])
def test_packed_decode_matches_reference(heads, kv_heads, causal):
    q, k, v = make_qkv(2, heads, kv_heads, 1, 75, 32, torch.float32, seed=heads)
    assert launch_plan(2, heads, kv_heads, 1, 32).packed
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
    (lambda q, k, v: tf.kv_tile_schedule(5, 64, 64, 16, 16, True), "pid_m"),
    (lambda q, k, v: tf.kv_tile_schedule(0, 0, 64, 16, 16, True), "n_q"),
])
def test_bad_input_names_the_argument(call, words):
    q, k, v = make_qkv(2, 2, 2, 16, 16, 16, torch.float32)
    with pytest.raises((TypeError, ValueError), match=words):
        call(q, k, v)
