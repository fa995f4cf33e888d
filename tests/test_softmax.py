"""Softmax three ways and the lesson's one-query tiled attention, against float64 references."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inferbook.softmax import (
    naive_softmax,
    online_softmax,
    online_update,
    safe_softmax,
    tiled_softmax_dot,
)


def exact_softmax(x):
    """Softmax of each row with Python's math.fsum in float64 (a reference that shares no code)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        total = math.fsum(e)
        out[idx] = [v / total for v in e]
    return out


finite_rows = hnp.arrays(
    np.float64,
    st.tuples(st.integers(1, 3), st.integers(1, 40)),
    elements=st.floats(-1e4, 1e4, allow_nan=False),
)


def test_naive_softmax_overflows_where_safe_does_not():
    logits = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = naive_softmax(logits)
    assert np.isnan(naive).all()  # exp(1000) = inf, inf / inf = NaN
    np.testing.assert_allclose(safe_softmax(logits), exact_softmax(logits), rtol=1e-6)
    np.testing.assert_allclose(online_softmax(logits, block=2), exact_softmax(logits), rtol=1e-6)


def test_naive_softmax_is_right_for_small_logits():
    x = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(naive_softmax(x), exact_softmax(x), rtol=1e-14)


@settings(max_examples=60, deadline=None)
@given(x=finite_rows, block=st.integers(1, 50))
def test_safe_and_online_match_exact(x, block):
    ref = exact_softmax(x)
    np.testing.assert_allclose(safe_softmax(x), ref, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(online_softmax(x, block=block), ref, rtol=1e-12, atol=1e-300)


@settings(max_examples=40, deadline=None)
@given(x=finite_rows, shift=st.floats(-1e3, 1e3), block=st.integers(1, 8))
def test_softmax_is_shift_invariant_and_sums_to_one(x, shift, block):
    p = online_softmax(x, block=block)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(online_softmax(x + shift, block=block), p, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(x=finite_rows, cuts=st.lists(st.integers(1, 39), max_size=5))
def test_online_update_over_any_split_gives_max_and_rescaled_sum(x, cuts):
    """The rescaling identity: however the row is split, (m, l) = (max x, sum exp(x - max x))."""
    n = x.shape[-1]
    edges = sorted({0, n, *[c for c in cuts if c < n]})
    m = np.full(x.shape[:-1], -np.inf)
    l = np.zeros(x.shape[:-1])
    for a, b in zip(edges, edges[1:]):
        m, l, _, _ = online_update(m, l, x[..., a:b])
    np.testing.assert_array_equal(m, x.max(axis=-1))
    expected = np.array([math.fsum(np.exp(r - r.max())) for r in x.reshape(-1, n)])
    np.testing.assert_allclose(l, expected.reshape(l.shape), rtol=1e-12)


def test_fully_masked_row_is_zero_not_nan():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 0.0]])
    for p in (safe_softmax(x), online_softmax(x, block=2)):
        np.testing.assert_array_equal(p, [[0.0, 0.0, 0.0], [0.5, 0.0, 0.5]])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 9),
    d_v=st.integers(1, 5),
    tile=st.integers(1, 50),
    seed=st.integers(0, 2**16),
    spread=st.sampled_from([1.0, 30.0]),
)
def test_tiled_softmax_dot_matches_one_shot(n, d, d_v, tile, seed, spread):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d) * spread
    K, V = rng.standard_normal((n, d)), rng.standard_normal((n, d_v))
    expected = exact_softmax(K @ q) @ V
    np.testing.assert_allclose(tiled_softmax_dot(q, K, V, tile=tile), expected, rtol=1e-10, atol=1e-12)


def test_tiled_softmax_dot_accepts_the_lessons_lists_and_huge_scores():
    q = [30.0, -20.0]
    K = [[10.0, 0.0], [0.0, -10.0], [12.0, 1.0], [-5.0, 5.0], [11.0, 0.5]]
    V = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [3.0, -1.0], [0.5, 0.5]]
    out = tiled_softmax_dot(q, K, V, tile=2)  # scores up to 340: exp(340) overflows float32
    expected = exact_softmax(np.array(K) @ np.array(q)) @ np.array(V)
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_tiled_softmax_dot_is_not_bit_identical_in_general():
    """Tiling reorders floating-point additions; the lesson's "bit-level identical" is false."""
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(50):
        q, K, V = rng.standard_normal(16), rng.standard_normal((64, 16)), rng.standard_normal((64, 8))
        one_shot = safe_softmax(K @ q) @ V
        tiled = tiled_softmax_dot(q, K, V, tile=4)
        np.testing.assert_allclose(tiled, one_shot, rtol=1e-12, atol=1e-14)
        differs += not np.array_equal(tiled, one_shot)
    assert differs > 25


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.ones(3), np.ones((4, 2)), np.ones((4, 2))), "shapes do not match"),
        ((np.ones(2), np.ones((4, 2)), np.ones((3, 2))), "shapes do not match"),
        ((np.ones(2), np.ones((0, 2)), np.ones((0, 2))), "shapes do not match"),
        ((np.ones((1, 2)), np.ones((4, 2)), np.ones((4, 2))), "expected q"),
        ((np.array(["a", "b"]), np.ones((4, 2)), np.ones((4, 2))), "real numbers"),
    ],
)
def test_tiled_softmax_dot_rejects_bad_shapes(args, message):
    with pytest.raises(ValueError, match=message):
        tiled_softmax_dot(*args)


@pytest.mark.parametrize("tile", [0, -1, 1.5, True, None])
def test_bad_tile_sizes_are_rejected(tile):
    with pytest.raises(ValueError, match="positive integer"):
        tiled_softmax_dot(np.ones(2), np.ones((3, 2)), np.ones((3, 2)), tile=tile)
    with pytest.raises(ValueError, match="positive integer"):
        online_softmax(np.ones(3), block=tile)


def test_scalar_input_is_rejected():
    with pytest.raises(ValueError, match="at least one axis"):
        safe_softmax(3.0)


def test_p_cast_error_orders_the_formats_and_rejects_bad_input():
    from inferbook.softmax import p_cast_error

    errs = {dt: p_cast_error(dt, 3.0, n_keys=256, rows=16) for dt in
            ("float32", "float16", "bfloat16", "float8_e4m3fn")}
    assert errs["float32"] < errs["float16"] < errs["bfloat16"] < errs["float8_e4m3fn"]
    # three fewer mantissa bits: about 8x the error (unit roundoff 2^-11 vs 2^-8)
    assert 3 < errs["bfloat16"] / errs["float16"] < 20
    assert errs["float16"] < 2.0**-11                     # below rounding O itself to fp16
    with pytest.raises(ValueError, match="dtype"):
        p_cast_error("int8", 1.0)
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="score_std"):
            p_cast_error("float16", bad)
    with pytest.raises(ValueError, match="n_keys"):
        p_cast_error("float16", 1.0, n_keys=0)


def test_o_cast_error_is_the_yardstick_for_rounding_p():
    from inferbook.softmax import o_cast_error, p_cast_error

    for dt, u in (("float16", 2.0**-11), ("bfloat16", 2.0**-8), ("float8_e4m3fn", 2.0**-4)):
        o = o_cast_error(dt, 1.0, n_keys=256, rows=16)
        # rounding O once: a relative error below the format's unit roundoff, but not tiny
        assert u / 4 < o < u, dt
        # with flat rows rounding P costs about as much; with peaked rows less
        p_flat = p_cast_error(dt, 1.0, n_keys=256, rows=16)
        assert 0.7 < p_flat / o < 1.05, dt
        assert p_cast_error(dt, 10.0, n_keys=256, rows=16) < 0.6 * o_cast_error(dt, 10.0, n_keys=256, rows=16)
    with pytest.raises(ValueError, match="dtype"):
        o_cast_error("int8", 1.0)
    with pytest.raises(ValueError, match="score_std"):
        o_cast_error("float16", 0.0)
