import pytest
import torch

from inferbook.gpt import GPTConfig
from inferbook.kv_cache import ConcatKVCache, KVCache


def test_prealloc_writes_in_place_and_returns_prefix():
    cache = KVCache(n_layers=2, batch=1, n_heads=2, max_len=8, head_dim=4)
    k = torch.randn(1, 2, 3, 4)
    v = torch.randn(1, 2, 3, 4)
    for layer in range(2):
        ko, vo = cache.update(layer, k, v, 0)
    assert cache.length == 3 and ko.shape == (1, 2, 3, 4)
    assert torch.equal(ko, k) and torch.equal(vo, v)
    k2 = torch.randn(1, 2, 1, 4)
    ko, _ = cache.update(0, k2, k2, 3)
    assert torch.equal(ko[:, :, 3:], k2) and ko.data_ptr() == cache.k[0].data_ptr()


def test_prealloc_errors():
    cache = KVCache(1, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="max_len"):
        cache.update(0, torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2), 0)
    with pytest.raises(ValueError, match="gap"):
        cache.update(0, torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 2)
    with pytest.raises(ValueError, match="positive"):
        KVCache(0, 1, 1, 4, 2)


def test_concat_append_only_and_nbytes():
    cache = ConcatKVCache(1)
    cache.update(0, torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0)
    assert cache.length == 2
    with pytest.raises(ValueError, match="append"):
        cache.update(0, torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 5)
    config = GPTConfig()
    assert KVCache.for_model(config, 1, 1024).nbytes == 2 * 12 * 12 * 1024 * 64 * 4
