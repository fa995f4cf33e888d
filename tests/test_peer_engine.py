"""The book's engine and a real peer, transformers' continuous batching (`generate_batch`), give
identical greedy tokens on one random-weight GPT-2 (weights copied by `gpt.load_hf_gpt2`)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ContinuousBatchingConfig"):
    pytest.skip("this transformers has no continuous batching", allow_module_level=True)

from inferbook.engine import serve  # noqa: E402
from inferbook.gpt import load_hf_gpt2  # noqa: E402
from inferbook.steploop import Request  # noqa: E402


def _models(seed: int):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    return hf, load_hf_gpt2(hf)


def _hf_tokens(hf, prompts, new_tokens):
    gen = transformers.GenerationConfig(max_new_tokens=new_tokens, do_sample=False,
                                        eos_token_id=-1, use_cuda_graph=False)
    cb = transformers.ContinuousBatchingConfig(page_size=16, num_blocks=16, max_batch_tokens=64)
    with torch.inference_mode():
        out = hf.generate_batch(inputs=prompts, generation_config=gen,
                                continuous_batching_config=cb)
    return [list(out[f"req_{i}"].generated_tokens) for i in range(len(prompts))]


def _book_tokens(model, prompts, new_tokens, **limits):
    reqs = [Request(i, tuple(p), new_tokens) for i, p in enumerate(prompts)]
    result = serve(model, reqs, num_blocks=16, block_size=16, **limits)
    return [result.outputs[i] for i in range(len(prompts))]


def test_generate_batch_and_the_book_engine_give_identical_tokens():
    torch.set_num_threads(1)
    hf, book = _models(seed=0)
    prompts = [[5, 17, 99], [1, 2, 3, 4, 5, 6, 7], [100, 13], [42] * 12, [9] * 20]
    theirs = _hf_tokens(hf, prompts, 6)
    ours = _book_tokens(book, prompts, 6, max_num_seqs=3, max_num_batched_tokens=32,
                        chunked_prefill=True)
    assert ours == theirs
    # and the tokens are not trivially constant: the comparison can fail
    assert len({tuple(t) for t in ours}) > 1


def test_a_different_model_gives_different_tokens():
    """The check above is not vacuous: other weights in the book's engine disagree."""
    torch.set_num_threads(1)
    hf, _ = _models(seed=0)
    _, other = _models(seed=1)
    prompts = [[5, 17, 99], [1, 2, 3, 4, 5, 6, 7], [100, 13]]
    assert _book_tokens(other, prompts, 6, max_num_seqs=4, max_num_batched_tokens=64) \
        != _hf_tokens(hf, prompts, 6)
