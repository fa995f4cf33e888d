"""The book's Llama (RMSNorm, RoPE, GQA, SwiGLU) computes what transformers' LlamaForCausalLM does,
in float64 and through the paged cache, and refuses what it does not implement."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from inferbook.engine import serve  # noqa: E402
from inferbook.llama import Llama, LlamaConfig, apply_rope, load_hf_llama, rope_cos_sin  # noqa: E402
from inferbook.steploop import Request  # noqa: E402


def _hf(seed=0, **over):
    torch.manual_seed(seed)
    shape = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                 initializer_range=0.2, rope_theta=500.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=False)
    shape.update(over)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape)).eval()


@pytest.mark.parametrize("kv_heads", [1, 2, 4])  # multi-query, grouped, multi-head
def test_logits_match_transformers_in_float64(kv_heads):
    hf = _hf(num_key_value_heads=kv_heads).double()
    ours = load_hf_llama(hf).double()
    assert ours.config.n_kv_head == kv_heads
    tokens = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, got = hf(tokens).logits, ours(tokens)
    assert torch.allclose(got, want, atol=1e-10, rtol=0)
    # and a model of other weights is far off: the comparison can fail
    with torch.no_grad():
        other = Llama(ours.config).double()(tokens)
    assert (other - want).abs().max() > 1e-2


def test_tied_embeddings_load_and_match():
    hf = _hf(tie_word_embeddings=True).double()
    ours = load_hf_llama(hf).double()
    assert ours.lm_head.weight is ours.embed_tokens.weight
    tokens = torch.randint(0, 97, (1, 17))
    with torch.no_grad():
        assert torch.allclose(ours(tokens), hf(tokens).logits, atol=1e-10, rtol=0)


def test_rope_is_a_rotation_that_depends_only_on_relative_position():
    d = 8
    q, k = torch.randn(1, 1, 1, d, dtype=torch.float64), torch.randn(1, 1, 1, d, dtype=torch.float64)

    def dot(pq, pk):
        cq, sq = rope_cos_sin(torch.tensor([[pq]]), d, 100.0)
        ck, sk = rope_cos_sin(torch.tensor([[pk]]), d, 100.0)
        return float((apply_rope(q, cq.double(), sq.double()) * apply_rope(k, ck.double(), sk.double())).sum())

    assert dot(7, 3) == pytest.approx(dot(14, 10), abs=1e-5)  # float32 angles
    assert dot(7, 3) != pytest.approx(dot(7, 5), abs=1e-3)
    c, s = rope_cos_sin(torch.tensor([[5]]), d, 100.0)
    assert torch.allclose(apply_rope(q.float(), c, s).norm(), q.float().norm())  # a rotation


def test_the_engine_serves_llama_as_single_request_decoding_does():
    hf = _hf()
    ours = load_hf_llama(hf)
    prompts = [[5, 17, 9, 33], list(range(1, 41)), [60] * 9]
    reqs = [Request(i, tuple(p), 5) for i, p in enumerate(prompts)]
    result = serve(ours, reqs, num_blocks=16, block_size=8, max_num_seqs=2,
                   max_num_batched_tokens=16, chunked_prefill=True, prefix_caching=True)
    with torch.inference_mode():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                               min_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
            assert list(result.outputs[i]) == want[0, len(p):].tolist()


@pytest.mark.parametrize("over, words", [
    (dict(n_embd=48, n_head=6, n_kv_head=4), "multiple of n_kv_head"),
    (dict(n_embd=30, n_head=4), "even head_dim"),
    (dict(n_kv_head=0), "n_kv_head"),
])
def test_bad_configs_name_the_field(over, words):
    base = dict(vocab_size=10, n_positions=16, n_embd=32, n_layer=1, n_head=4, n_kv_head=2,
                intermediate_size=8)
    base.update(over)
    with pytest.raises(ValueError, match=words):
        LlamaConfig(**base)


def test_load_refuses_what_it_does_not_implement():
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        load_hf_llama(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="attention_bias"):
        load_hf_llama(_hf(attention_bias=True))
