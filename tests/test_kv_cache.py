import pytest
import torch

from inferbook.gpt import GPT, GPTConfig
from inferbook.kv_cache import ConcatKVCache, KVCache


def test_prealloc_writes_in_place_and_returns_prefix():
    cache = KVCache(n_layers=2, batch=1, n_heads=2, max_len=8, head_dim=4)
    k = torch.randn(1, 2, 3, 4)
    v = torch.randn(1, 2, 3, 4)
    step = cache.begin_step(0, 3)
    for layer in range(2):
        ko, vo = cache.update(layer, k, v, 0)
    assert cache.length == 0  # a step ends explicitly, not at the last layer
    cache.end_step(step)
    assert cache.length == 3 and ko.shape == (1, 2, 3, 4)
    assert torch.equal(ko, k) and torch.equal(vo, v)
    k2 = torch.randn(1, 2, 1, 4)
    ko, _ = cache.update(0, k2, k2, 3)
    assert torch.equal(ko[:, :, 3:], k2) and ko.data_ptr() == cache.k[0].data_ptr()


def test_step_attends_like_the_model_without_cache():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    x = torch.randint(0, 50, (2, 9))
    cache = KVCache.for_model(model.config, batch=2, max_len=9)
    parts = []
    for pos, n in [(0, 4), (4, 1), (5, 4)]:
        ctx = cache.begin_step(pos, n)
        parts.append(model(x[:, pos:pos + n], ctx=ctx))
        cache.end_step(ctx)
    torch.testing.assert_close(torch.cat(parts, 1), model(x), rtol=1e-5, atol=1e-5)


def test_prealloc_errors():
    cache = KVCache(1, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="max_len"):
        cache.begin_step(0, 5)
    with pytest.raises(ValueError, match="max_len"):
        cache.update(0, torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2), 0)
    with pytest.raises(ValueError, match="gap"):
        cache.begin_step(2, 1)
    with pytest.raises(ValueError, match="n_layers must be a positive integer"):
        KVCache(0, 1, 1, 4, 2)
    with pytest.raises(TypeError, match="n_layers must be an integer"):
        KVCache(True, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="batch"):
        cache.update(0, torch.zeros(2, 1, 1, 2), torch.zeros(2, 1, 1, 2), 0)


def test_concat_append_only_and_nbytes():
    cache = ConcatKVCache(1)
    step = cache.begin_step(0, 2)
    cache.update(0, torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0)
    cache.end_step(step)
    assert cache.length == 2
    with pytest.raises(ValueError, match="append"):
        cache.update(0, torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 5)
    with pytest.raises(ValueError, match="append"):
        cache.begin_step(5, 1)
    config = GPTConfig()
    assert KVCache.for_model(config, 1, 1024).nbytes == 2 * 12 * 12 * 1024 * 64 * 4
