"""FlashAttention forward and backward in NumPy, against float64 references and PyTorch.

Precision rule (flash-attention's own tests): with fp32 or fp16 inputs, the error of our output
against the float64 reference computed from the *same* (rounded) inputs must be at most twice
the error of the plain, non-tiled computation in that precision.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.flash import (
    attention_flops,
    attention_reference,
    flash_attention_backward,
    flash_attention_forward,
)


def make_qkv(rng, batch, heads, kv_heads, n_q, n_k, d, d_v=None, dtype=np.float64, spread=1.0):
    d_v = d if d_v is None else d_v
    q = (rng.standard_normal((batch, heads, n_q, d)) * spread).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, n_k, d)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, n_k, d_v)).astype(dtype)
    return q, k, v


def causal_mask(n_q, n_k):
    """Bottom-right aligned: query i sees key j iff j <= i + n_k - n_q."""
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)


def brute_force(q, k, v, causal, scale=None):
    """Float64 attention with explicit Python loops over rows: shares no code with the package."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = np.zeros((batch, heads, n_q, v.shape[3]))
    lse = np.full((batch, heads, n_q), -np.inf)
    mask = causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)
    for b in range(batch):
        for h in range(heads):
            kh = h // (heads // kv_heads)
            for i in range(n_q):
                cols = np.flatnonzero(mask[i])
                if cols.size == 0:
                    continue
                s = scale * (k[b, kh, cols].astype(np.float64) @ q[b, h, i].astype(np.float64))
                m = s.max()
                w = np.exp(s - m)
                o[b, h, i] = (w / w.sum()) @ v[b, kh, cols].astype(np.float64)
                lse[b, h, i] = m + math.log(w.sum())
    return o, lse


shapes = st.fixed_dictionaries(
    {
        "batch": st.integers(1, 2),
        "kv_heads": st.integers(1, 2),
        "group": st.integers(1, 3),
        "n_q": st.integers(1, 40),
        "n_k": st.integers(1, 40),
        "d": st.integers(1, 17),
        "d_v": st.integers(1, 9),
        "block_q": st.integers(1, 48),
        "block_k": st.integers(1, 48),
        "causal": st.booleans(),
        "seed": st.integers(0, 2**16),
    }
)


@settings(max_examples=60, deadline=None)
@given(shape=shapes)
def test_forward_is_exact_in_float64_for_any_shape_and_tile(shape):
    """Tile 1, tiles larger than N, N = 1, ragged N, GQA, causal with n_q != n_k."""
    rng = np.random.default_rng(shape["seed"])
    heads = shape["kv_heads"] * shape["group"]
    q, k, v = make_qkv(
        rng, shape["batch"], heads, shape["kv_heads"], shape["n_q"], shape["n_k"], shape["d"], shape["d_v"]
    )
    o, lse = flash_attention_forward(
        q, k, v, causal=shape["causal"], block_q=shape["block_q"], block_k=shape["block_k"]
    )
    o_ref, lse_ref = brute_force(q, k, v, shape["causal"])
    assert o.shape == o_ref.shape and o.dtype == np.float64
    np.testing.assert_allclose(o, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    finite = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[finite], lse_ref[finite], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k", [(64, 64), (37, 100), (1, 50), (100, 37)])
def test_forward_matches_torch_sdpa_float64(causal, n_q, n_k):
    rng = np.random.default_rng(1)
    q, k, v = make_qkv(rng, 2, 6, 2, n_q, n_k, 16)
    o, _ = flash_attention_forward(q, k, v, causal=causal, block_q=16, block_k=32)
    mask = torch.from_numpy(causal_mask(n_q, n_k)) if causal else None
    kt, vt = (torch.from_numpy(x).repeat_interleave(3, dim=1) for x in (k, v))
    o_torch = torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), kt, vt, attn_mask=mask)
    visible = ~np.zeros((n_q,), bool) if not causal else causal_mask(n_q, n_k).any(axis=1)
    # torch's math backend returns NaN for a fully masked row; we define it as 0 (tested below).
    np.testing.assert_allclose(o[:, :, visible], o_torch.numpy()[:, :, visible], rtol=1e-12, atol=1e-13)


PRECISION_CASES = [
    # batch, heads, kv_heads, n_q, n_k, d, block_q, block_k, causal
    (2, 4, 2, 256, 256, 64, 64, 64, False),
    (2, 4, 2, 256, 256, 64, 64, 64, True),
    (1, 4, 1, 200, 333, 32, 128, 32, True),
    (1, 8, 8, 1, 500, 64, 16, 128, False),  # one decoding query
    (2, 2, 1, 127, 129, 128, 50, 70, False),  # ragged: no tile size divides N
    (1, 2, 2, 100, 100, 64, 512, 512, True),  # one tile larger than N
    (1, 2, 2, 96, 96, 16, 1, 1, False),  # tile 1
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", PRECISION_CASES)
@pytest.mark.parametrize("spread", [1.0, 8.0])
def test_forward_error_at_most_twice_the_plain_computation(dtype, case, spread):
    batch, heads, kv_heads, n_q, n_k, d, block_q, block_k, causal = case
    rng = np.random.default_rng(hash(case) % 2**32)
    q, k, v = make_qkv(rng, batch, heads, kv_heads, n_q, n_k, d, dtype=dtype, spread=spread)
    o_ref, lse_ref = attention_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=causal)
    o, lse = flash_attention_forward(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    o_plain, _ = attention_reference(q, k, v, causal=causal)
    assert o.dtype == dtype and o_plain.dtype == dtype
    ours = np.abs(o.astype(np.float64) - o_ref).max()
    plain = np.abs(o_plain.astype(np.float64) - o_ref).max()
    assert ours <= 2 * plain, f"our error {ours:.3g} > 2 x plain {dtype.__name__} error {plain:.3g}"
    finite = np.isfinite(lse_ref)
    # lse is kept in float32: a few float32 ulps of the largest score
    atol = 1e-5 * max(1.0, np.abs(lse_ref[finite]).max())
    np.testing.assert_allclose(lse[finite], lse_ref[finite], rtol=1e-5, atol=atol)


@settings(max_examples=40, deadline=None)
@given(shape=shapes)
def test_fp16_error_rule_over_random_shapes_and_tiles(shape):
    """fp16 inputs, fp32 accumulators: never worse than 2x plain fp16 plus the output rounding."""
    rng = np.random.default_rng(shape["seed"])
    heads = shape["kv_heads"] * shape["group"]
    q, k, v = make_qkv(
        rng, shape["batch"], heads, shape["kv_heads"], shape["n_q"], shape["n_k"], shape["d"],
        shape["d_v"], dtype=np.float16,
    )
    kw = dict(causal=shape["causal"])
    o_ref, _ = attention_reference(*(x.astype(np.float64) for x in (q, k, v)), **kw)
    o, _ = flash_attention_forward(q, k, v, block_q=shape["block_q"], block_k=shape["block_k"], **kw)
    o_plain, _ = attention_reference(q, k, v, **kw)
    ours = np.abs(o.astype(np.float64) - o_ref).max()
    plain = np.abs(o_plain.astype(np.float64) - o_ref).max()
    # Rounding the exact answer to fp16 is an error no fp16 output can avoid; on tiny tensors the
    # plain computation can be luckily closer than that, so it is allowed on top of the 2x rule.
    representation = np.abs(o_ref.astype(np.float16).astype(np.float64) - o_ref).max()
    assert ours <= 2 * plain + representation


def test_results_are_close_but_not_bit_identical():
    rng = np.random.default_rng(0)
    q, k, v = make_qkv(rng, 1, 4, 4, 128, 128, 64, dtype=np.float32)
    o_plain, _ = attention_reference(q, k, v)
    o, _ = flash_attention_forward(q, k, v, block_q=32, block_k=32)
    assert not np.array_equal(o, o_plain)
    np.testing.assert_allclose(o, o_plain, rtol=1e-4, atol=1e-5)


def test_huge_logits_do_not_overflow():
    rng = np.random.default_rng(2)
    q, k, v = make_qkv(rng, 1, 2, 2, 33, 47, 8, dtype=np.float32, spread=300.0)
    o, lse = flash_attention_forward(q, k, v, block_q=8, block_k=8)
    o_ref, lse_ref = brute_force(q, k, v, causal=False)
    assert np.isfinite(o).all() and lse.max() > 100
    np.testing.assert_allclose(o, o_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-5)


def test_fully_masked_rows_give_zero_output_minus_inf_lse_and_zero_gradients():
    rng = np.random.default_rng(3)
    n_q, n_k = 10, 4  # causal, bottom-right: the first n_q - n_k = 6 queries see no key
    q, k, v = make_qkv(rng, 1, 2, 1, n_q, n_k, 8)
    o, lse = flash_attention_forward(q, k, v, causal=True, block_q=3, block_k=2)
    assert not np.isnan(o).any()
    np.testing.assert_array_equal(o[:, :, :6], 0.0)
    assert np.isneginf(lse[:, :, :6]).all() and np.isfinite(lse[:, :, 6:]).all()
    do = rng.standard_normal(o.shape)
    dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, causal=True, block_q=3, block_k=2)
    assert not any(np.isnan(g).any() for g in (dq, dk, dv))
    np.testing.assert_array_equal(dq[:, :, :6], 0.0)
    # dk, dv only see the visible rows: the same as running on those rows alone
    _, dk_vis, dv_vis = flash_attention_backward(
        q[:, :, 6:], k, v, o[:, :, 6:], lse[:, :, 6:], do[:, :, 6:], causal=True
    )
    np.testing.assert_allclose(dk, dk_vis, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dv, dv_vis, rtol=1e-12, atol=1e-14)


def test_no_keys_at_all():
    q = np.ones((1, 1, 3, 4))
    k = np.ones((1, 1, 0, 4))
    o, lse = flash_attention_forward(q, k, k)
    np.testing.assert_array_equal(o, 0.0)
    assert np.isneginf(lse).all()


def test_gqa_equals_repeating_kv_heads():
    rng = np.random.default_rng(4)
    q, k, v = make_qkv(rng, 2, 8, 2, 20, 30, 16)
    o, lse = flash_attention_forward(q, k, v, causal=True, block_q=8, block_k=8)
    o_rep, lse_rep = flash_attention_forward(
        q, np.repeat(k, 4, axis=1), np.repeat(v, 4, axis=1), causal=True, block_q=8, block_k=8
    )
    np.testing.assert_array_equal(o, o_rep)
    np.testing.assert_array_equal(lse, lse_rep)


@pytest.mark.parametrize("n_q, n_k", [(256, 256), (64, 256), (200, 300)])
def test_causal_skips_every_tile_above_the_diagonal(n_q, n_k):
    rng = np.random.default_rng(5)
    q, k, v = make_qkv(rng, 1, 1, 1, n_q, n_k, 4)
    visited = []
    flash_attention_forward(q, k, v, causal=True, block_q=32, block_k=32, on_tile=visited.append)
    mask = causal_mask(n_q, n_k)
    expected = {
        (qs, ks)
        for qs in range(0, n_q, 32)
        for ks in range(0, n_k, 32)
        if mask[qs : qs + 32, ks : ks + 32].any()
    }
    assert {(t.q_start, t.k_start) for t in visited} == expected
    full = len(range(0, n_q, 32)) * len(range(0, n_k, 32))
    assert len(visited) < full


def test_tile_states_end_in_the_output():
    rng = np.random.default_rng(6)
    q, k, v = make_qkv(rng, 1, 2, 2, 12, 12, 4)
    states = []
    o, lse = flash_attention_forward(q, k, v, block_q=4, block_k=4, on_tile=states.append)
    assert len(states) == 9
    last_of_each_q_tile = [s for s in states if s.k_end == 12]
    for s in last_of_each_q_tile:
        np.testing.assert_allclose(s.acc / s.l[..., None], o[:, :, s.q_start : s.q_end], rtol=1e-13)
        np.testing.assert_allclose(s.m + np.log(s.l), lse[:, :, s.q_start : s.q_end], rtol=1e-13)


def torch_grads(q, k, v, do, causal):
    group = q.shape[1] // k.shape[1]
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    mask = torch.from_numpy(causal_mask(q.shape[2], k.shape[2])) if causal else None
    o = torch.nn.functional.scaled_dot_product_attention(
        qt, kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1), attn_mask=mask
    )
    o.backward(torch.from_numpy(do))
    return o.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "shape, blocks",
    [
        ((2, 4, 2, 50, 50, 16), (16, 16)),
        ((1, 6, 3, 33, 71, 8), (7, 13)),
        ((1, 2, 1, 1, 40, 32), (1, 1)),
        ((2, 2, 2, 64, 64, 64), (128, 128)),
    ],
)
def test_backward_matches_torch_autograd_float64(causal, shape, blocks):
    rng = np.random.default_rng(7)
    batch, heads, kv_heads, n_q, n_k, d = shape
    q, k, v = make_qkv(rng, batch, heads, kv_heads, n_q, n_k, d)
    do = rng.standard_normal((batch, heads, n_q, d))
    o, lse = flash_attention_forward(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
    dq, dk, dv = flash_attention_backward(
        q, k, v, o, lse, do, causal=causal, block_q=blocks[0], block_k=blocks[1]
    )
    o_t, dq_t, dk_t, dv_t = torch_grads(q, k, v, do, causal)
    np.testing.assert_allclose(o, o_t, rtol=1e-11, atol=1e-12)
    for ours, theirs in ((dq, dq_t), (dk, dk_t), (dv, dv_t)):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_float32_error_at_most_twice_torch_float32(causal):
    rng = np.random.default_rng(8)
    q, k, v = make_qkv(rng, 2, 4, 2, 128, 128, 64, dtype=np.float32)
    do = rng.standard_normal(q.shape).astype(np.float32)
    _, *ref = torch_grads(*(x.astype(np.float64) for x in (q, k, v, do)), causal)
    _, *plain = torch_grads(q, k, v, do, causal)
    o, lse = flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=32)
    ours = flash_attention_backward(q, k, v, o, lse, do, causal=causal, block_q=32, block_k=32)
    for name, g, g_plain, g_ref in zip(("dq", "dk", "dv"), ours, plain, ref):
        assert g.dtype == np.float32
        err, err_plain = np.abs(g - g_ref).max(), np.abs(g_plain - g_ref).max()
        assert err <= 2 * err_plain, f"{name}: {err:.3g} > 2 x torch fp32 {err_plain:.3g}"


def test_flop_count_is_4_n2_d_and_about_half_when_causal():
    assert attention_flops(1024, 1024, 64) == 4 * 1024 * 1024 * 64
    assert attention_flops(1024, 1024, 64, causal=True) == 4 * 64 * 1024 * 1025 // 2
    assert attention_flops(4, 2, 1, causal=True) == 4 * (0 + 0 + 1 + 2)
    assert attention_flops(8, 8, 16, batch_heads=6) == 6 * 4 * 64 * 16


def _bad(**over):
    args = dict(q=np.zeros((1, 4, 5, 8)), k=np.zeros((1, 2, 6, 8)), v=np.zeros((1, 2, 6, 8)))
    args.update(over)
    return args


@pytest.mark.parametrize(
    "args, kw, message",
    [
        (_bad(q=np.zeros((4, 5, 8))), {}, "must be 4-D"),
        (_bad(q=np.zeros((1, 4, 5, 8), dtype=np.int64)), {}, "float16, float32 or float64"),
        (_bad(k=np.zeros((1, 3, 6, 8)), v=np.zeros((1, 3, 6, 8))), {}, "multiple of kv_heads"),
        (_bad(k=np.zeros((1, 2, 6, 7)), v=np.zeros((1, 2, 6, 7))), {}, "same head_dim"),
        (_bad(v=np.zeros((1, 2, 5, 8))), {}, "must agree"),
        (_bad(v=np.zeros((2, 2, 6, 8))), {}, "batch sizes differ"),
        (_bad(), {"block_q": 0}, "block_q must be a positive integer"),
        (_bad(), {"block_k": 2.0}, "block_k must be a positive integer"),
        (_bad(), {"scale": float("nan")}, "scale must be a finite number"),
    ],
)
def test_invalid_inputs_raise_value_error(args, kw, message):
    with pytest.raises(ValueError, match=message):
        flash_attention_forward(**args, **kw)


def test_backward_rejects_mismatched_saved_tensors():
    q, k, v = _bad().values()
    with pytest.raises(ValueError, match="lse must have shape"):
        flash_attention_backward(q, k, v, np.zeros((1, 4, 5, 8)), np.zeros((1, 4)), np.zeros((1, 4, 5, 8)))
    with pytest.raises(ValueError, match="o and do must have shape"):
        flash_attention_backward(q, k, v, np.zeros((1, 4, 5, 7)), np.zeros((1, 4, 5)), np.zeros((1, 4, 5, 7)))


def test_scale_must_be_a_finite_number_not_a_bool():
    q = np.ones((1, 1, 4, 8))
    for bad in (True, float("nan"), float("inf"), "0.5"):
        with pytest.raises((ValueError, TypeError), match="scale"):
            flash_attention_forward(q, q, q, scale=bad)
