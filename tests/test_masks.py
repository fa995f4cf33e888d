"""Tests for inferbook.masks: the one causal (bottom-right) mask of the book."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from inferbook import masks


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.data())
def test_rule_and_tiles(n_q, n_k, data):
    full = masks.causal_mask(n_q, n_k)
    assert full.shape == (n_q, n_k) and full.dtype == torch.bool
    for i in range(n_q):
        for j in range(n_k):
            assert bool(full[i, j]) == (j <= i + n_k - n_q)
    qs = data.draw(st.integers(0, n_q))
    qe = data.draw(st.integers(qs, n_q))
    ks = data.draw(st.integers(0, n_k))
    ke = data.draw(st.integers(ks, n_k))
    tile = masks.causal_mask(n_q, n_k, qs, qe, ks, ke)
    assert torch.equal(tile, full[qs:qe, ks:ke])
    assert np.array_equal(masks.causal_mask_numpy(n_q, n_k, qs, qe, ks, ke), tile.numpy())


def test_square_is_lower_triangle_and_decode_sees_everything():
    assert torch.equal(masks.causal_mask(5, 5), torch.ones(5, 5, dtype=torch.bool).tril())
    assert masks.causal_mask(1, 9).all()
    assert not masks.causal_mask(4, 2)[:2].any()          # n_q > n_k: the first rows see nothing
    assert masks.causal_offset(3, 8) == 5


def test_matches_pytorch_is_causal():
    q, k, v = torch.randn(3, 2, 6, 8).unbind(0)
    by_mask = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=masks.causal_mask(6, 6))
    assert torch.allclose(by_mask, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                          atol=1e-6)


def test_position_mask():
    pos = torch.tensor([[3, 4], [0, 1]])
    m = masks.position_mask(pos, 6)
    assert m.shape == (2, 2, 6)
    assert m[0, 0].tolist() == [True] * 4 + [False] * 2 and m[1, 0].tolist() == [True] + [False] * 5
    with pytest.raises(TypeError, match="query_pos"):
        masks.position_mask(pos.float(), 6)
    with pytest.raises(ValueError, match="n_keys"):
        masks.position_mask(pos, -1)


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_q=-1, n_k=3), "n_q"), (dict(n_q=2, n_k=1.5), "n_k"), (dict(n_q=2, n_k=3, q_start=3), "q_start"),
    (dict(n_q=2, n_k=3, q_end=1, q_start=2), "q_end"), (dict(n_q=2, n_k=3, k_end=4), "k_end"),
    (dict(n_q=True, n_k=3), "n_q"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        masks.causal_mask(**kwargs)
    with pytest.raises((TypeError, ValueError), match=name):
        masks.causal_mask_numpy(**kwargs)
