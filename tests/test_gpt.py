"""Tests for inferbook.gpt's attention: the causal mask (from inferbook.masks) and its checks."""

from __future__ import annotations

import pytest
import torch

from inferbook.gpt import causal_attention


def test_matches_sdpa_square_and_with_a_cache():
    q, k, v = (torch.randn(2, 3, 7, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(causal_attention(q, k, v), ref, atol=1e-6)
    # the last 3 queries of 7 positions: bottom-right alignment
    assert torch.allclose(causal_attention(q[:, :, 4:], k, v), ref[:, :, 4:], atol=1e-6)
    one = causal_attention(q[:, :, -1:], k, v)          # decode: the newest query sees every key
    assert torch.allclose(one, ref[:, :, -1:], atol=1e-6)


@pytest.mark.parametrize("q_shape, k_shape, v_shape, name", [
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 6, 8), "k and v"),
    ((2, 3, 4, 8), (1, 3, 5, 8), (1, 3, 5, 8), "k and v"),      # no silent broadcast over batch
    ((2, 3, 4, 8), (2, 3, 5, 4), (2, 3, 5, 4), "k and v"),
    ((2, 3, 6, 8), (2, 3, 5, 8), (2, 3, 5, 8), "n_q"),
    ((2, 3, 8), (2, 3, 5, 8), (2, 3, 5, 8), "q"),
])
def test_bad_shapes_are_refused(q_shape, k_shape, v_shape, name):
    q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    with pytest.raises(ValueError, match=name):
        causal_attention(q, k, v)


def test_other_public_functions_refuse_the_wrong_kind():
    from inferbook.gpt import GPT, GPTConfig, load_hf_gpt2, num_parameters

    with pytest.raises(TypeError, match="model"):
        num_parameters("gpt2")
    with pytest.raises(TypeError, match="hf_model"):
        load_hf_gpt2(GPT(GPTConfig(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2)))


def test_hf_weights_load_and_agree():
    transformers = pytest.importorskip("transformers")
    from inferbook.gpt import load_hf_gpt2

    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    ours = load_hf_gpt2(hf)
    tokens = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        assert torch.allclose(ours(tokens), hf(tokens).logits, atol=1e-4)
