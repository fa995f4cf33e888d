"""Naive and cached greedy decoding: same tokens, op counts as derived, HF generate() agrees."""

import pytest
import torch

from inferbook.decode import cached_counts, generate_cached, generate_naive, naive_counts
from inferbook.gpt import GPT, GPTConfig, load_hf_gpt2
from inferbook.kv_cache import ConcatKVCache, KVCache

SMALL = GPTConfig(vocab_size=211, n_positions=128, n_embd=48, n_layer=3, n_head=4)


def model(seed=0, config=SMALL, std=None):
    torch.manual_seed(seed)
    m = GPT(config).eval()
    if std is not None:  # larger weights give less repetitive greedy outputs
        with torch.no_grad():
            for p in m.parameters():
                if p.dim() > 1:
                    p.normal_(0, std)
    return m


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("batch,prompt_len,new", [(1, 1, 40), (2, 7, 25), (3, 13, 9)])
def test_naive_and_cached_agree(seed, batch, prompt_len, new):
    m = model(seed, std=0.3)
    prompt = torch.randint(0, SMALL.vocab_size, (batch, prompt_len))
    naive = generate_naive(m, prompt, new)
    pre = generate_cached(m, prompt, new, KVCache)
    cat = generate_cached(m, prompt, new, ConcatKVCache)
    assert naive.tokens.shape == (batch, prompt_len + new)
    assert torch.equal(naive.tokens[:, :prompt_len], prompt)
    assert torch.equal(naive.tokens, pre.tokens)
    assert torch.equal(naive.tokens, cat.tokens)
    # the outputs are not trivially constant, so agreement means something
    assert len(set(naive.tokens[0, prompt_len:].tolist())) > 1 or new < 5


def test_cached_logits_match_full_forward():
    m = model(1)
    x = torch.randint(0, SMALL.vocab_size, (2, 20))
    full = m(x)
    cache = KVCache.for_model(SMALL, 2, 20)
    parts = [m(x[:, :8], cache=cache, pos=0), m(x[:, 8:9], cache=cache, pos=8),
             m(x[:, 9:20], cache=cache, pos=9)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prompt_len,new", [(1, 100), (5, 30), (16, 1)])
def test_op_counts_measured_equal_closed_form(prompt_len, new):
    m = model(2)
    prompt = torch.randint(0, SMALL.vocab_size, (1, prompt_len))
    naive = generate_naive(m, prompt, new)
    cached = generate_cached(m, prompt, new)
    assert (naive.query_rows, naive.dot_products) == naive_counts(prompt_len, new)
    assert (cached.query_rows, cached.dot_products) == cached_counts(prompt_len, new)
    assert naive.forward_passes == new and cached.forward_passes == max(1, new)


def test_lessons_100_token_counts():
    # 100 tokens from a 1-token prompt: 1 + 2 + ... + 100 = 5050 query rows naive, 100 cached;
    # but the cached decoder still does 5050 query-key dot products, naive does 171700.
    assert naive_counts(1, 100) == (5050, 171700)
    assert cached_counts(1, 100) == (100, 5050)
    # the blog's 4950 = 100·99/2: pairs of a token with a strictly earlier one
    assert cached_counts(1, 100)[1] - 100 == 4950


@pytest.mark.parametrize("seed", range(3))
def test_matches_hugging_face_generate(seed):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=301, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0, initializer_range=0.2)
    hf = transformers.GPT2LMHeadModel(config).eval()
    ours = load_hf_gpt2(hf)
    prompt = torch.randint(1, config.vocab_size, (2, 6))
    with torch.inference_mode():
        logits_hf = hf(prompt).logits
        expected = hf.generate(prompt, max_new_tokens=40, min_new_tokens=40, do_sample=False,
                               use_cache=True, attention_mask=torch.ones_like(prompt),
                               pad_token_id=0, eos_token_id=None)
    torch.testing.assert_close(ours(prompt), logits_hf, rtol=1e-4, atol=1e-4)
    got = generate_cached(ours, prompt, 40).tokens
    assert torch.equal(got, expected)


def test_bad_inputs_raise_value_error():
    m = model()
    with pytest.raises(ValueError, match="new_tokens"):
        generate_cached(m, torch.zeros(1, 3, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="n_positions"):
        generate_naive(m, torch.zeros(1, 120, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="prompt"):
        generate_cached(m, torch.zeros(4, dtype=torch.long), 3)
