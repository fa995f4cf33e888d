"""Bad input is refused at the public boundary with a message that names the argument and the rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inferbook import validate
from inferbook.blocks import BlockAllocator, BlockManager, blocks_for
from inferbook.decode import generate_cached, generate_naive
from inferbook.engine import Engine, serve
from inferbook.fragmentation import sharegpt_like, simulate
from inferbook.gpt import GPT, GPTConfig
from inferbook.kv_cache import ConcatKVCache, KVCache
from inferbook.paged import PagedKVCache, paged_attention, paged_decode_attention
from inferbook.prefix_cache import PrefixCache, block_hashes, score_forked, score_reencoded
from inferbook.speculation_math import expected_tokens_per_pass
from inferbook.speculative import probabilities, sample_generate, speculative_generate, verify
from inferbook.steploop import Request, Scheduler
from inferbook.workload import mixed_workload

CFG = GPTConfig(vocab_size=20, n_positions=32, n_embd=8, n_layer=2, n_head=2)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(CFG).eval()


# --- the helpers -------------------------------------------------------------------------------
def test_helpers_accept_good_values_and_normalise_them():
    assert validate.positive_int("n", np.int64(3)) == 3 and type(validate.positive_int("n", np.int64(3))) is int
    assert validate.non_negative_int("n", 0) == 0
    assert validate.finite_float("t", 1) == 1.0
    assert validate.int_list("ids", torch.tensor([1, 2])) == [1, 2]
    assert validate.block_table("table", (3, 1), 4) == [3, 1]


@pytest.mark.parametrize("call, error, words", [
    (lambda: validate.positive_int("n_layer", True), TypeError, "n_layer must be an integer"),
    (lambda: validate.positive_int("count", 2.0), TypeError, "count must be an integer"),
    (lambda: validate.positive_int("count", 0), ValueError, "count must be a positive integer"),
    (lambda: validate.finite_float("temperature", math.nan), ValueError, "temperature must be a finite number"),
    (lambda: validate.finite_float("scale", math.inf), ValueError, "scale must be a finite number"),
    (lambda: validate.finite_float("scale", "1"), TypeError, "scale must be a real number"),
    (lambda: validate.int_list("ids", [1, True]), TypeError, "ids must hold integers"),
    (lambda: validate.int_list("ids", [1, 2.5]), TypeError, "ids must hold integers"),
    (lambda: validate.token_ids("prompt", [1, 20], 20), ValueError, r"prompt\[1\] = 20 is outside the vocabulary"),
    (lambda: validate.block_table("table", [1, 1], 4), ValueError, "table holds block"),
    (lambda: validate.block_table("table", [-1], 4), ValueError, r"table\[0\] must be in"),
])
def test_helpers_name_the_argument_and_the_rule(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_type_errors_are_also_value_errors():
    """Callers that caught ValueError before the checks moved here keep working."""
    with pytest.raises(ValueError):
        validate.positive_int("n", 1.5)


# --- one test per kind of bad input ------------------------------------------------------------
def test_non_finite_temperatures_and_probabilities(model):
    prompt = torch.tensor([[1, 2, 3]])
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="temperature"):
            probabilities(torch.zeros(3), bad)
        with pytest.raises(ValueError, match="temperature"):
            sample_generate(model, prompt, 2, bad)
        with pytest.raises(ValueError, match="temperature"):
            speculative_generate(model, model, prompt, 2, 1, bad)
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_pass(math.nan, 2)


def test_non_integer_counts(model):
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(TypeError, match="new_tokens"):
        generate_cached(model, prompt, 2.5)
    with pytest.raises(TypeError, match="new_tokens"):
        generate_naive(model, prompt, True)
    with pytest.raises(TypeError, match="max_new_tokens"):
        Request(0, (1, 2), 2.5)
    with pytest.raises(TypeError, match="k must be an integer"):
        speculative_generate(model, model, prompt, 2, 1.0)
    cache = PagedKVCache(BlockAllocator(4, 4), 1, 1, 2)
    cache.blocks.add_sequence("a")
    with pytest.raises(TypeError, match="n must be an integer"):
        cache.append_slots("a", 1.5)
    with pytest.raises(TypeError, match="num_tokens"):
        cache.blocks.add_sequence("b", [], num_tokens=0.0)
    with pytest.raises(TypeError, match="num_tokens"):
        blocks_for(3.0, 16)
    assert cache.blocks.num_tokens("a") == 0 and "b" not in cache.blocks.sequences


def test_duplicate_and_negative_block_ids():
    alloc = BlockAllocator(4, 4)
    cache = PagedKVCache(alloc, 1, 1, 2)
    b = alloc.allocate()
    with pytest.raises(ValueError, match="more than once"):
        cache.blocks.add_sequence("s", [b, b], num_tokens=8)
    with pytest.raises(ValueError, match=r"blocks\[0\]"):
        cache.blocks.add_sequence("s", [-1])
    with pytest.raises(ValueError, match="block must be ≥ 0"):
        alloc.free(-1)
    pool = torch.zeros(4, 4, 1, 2)
    with pytest.raises(ValueError, match="block_table holds"):
        paged_attention(torch.zeros(1, 1, 2), pool, pool, [0, 0], 5)
    with pytest.raises(ValueError, match=r"block_table\[0\]"):
        paged_attention(torch.zeros(1, 1, 2), pool, pool, [-1], 1)  # would read the last block
    with pytest.raises(ValueError, match=r"block_tables\[1\]"):
        paged_decode_attention(torch.zeros(2, 1, 2), pool, pool, [[0], [-1]], [1, 1])
    prefix = PrefixCache(alloc)
    with pytest.raises(ValueError, match="block_table holds"):
        prefix.insert([1] * 8, [b, b])
    assert alloc.ref_count(b) == 1 and cache.blocks.sequences == [] and prefix.num_cached_blocks == 0


def test_negative_positions(model):
    cache = KVCache.for_model(CFG, 1, 8)
    with pytest.raises(ValueError, match="pos must be a non-negative integer"):
        model(torch.tensor([[1]]), cache=cache, pos=-1)
    with pytest.raises(ValueError, match="positions"):
        model(torch.tensor([[1, 2]]), torch.tensor([-1, 0]))
    paged = PagedKVCache(BlockAllocator(2, 4), 1, 1, 2)
    paged.blocks.add_sequence("s")
    paged.append_slots("s", 3)
    with pytest.raises(ValueError, match="token range start=-1..stop=3"):
        paged.slots("s", -1)


def test_nan_arrival_times_are_refused_not_looped_on(model):
    with pytest.raises(ValueError, match="arrival_time must be a finite number"):
        Request(0, (1, 2), 3, arrival_time=math.nan)
    with pytest.raises(ValueError, match="arrival_time must be a finite number"):
        Request(0, (1, 2), 3, arrival_time=math.inf)
    with pytest.raises(ValueError, match="rate"):
        mixed_workload(3, vocab=20, rate=math.nan)


def test_token_ids_outside_the_vocabulary(model):
    with pytest.raises(ValueError, match=r"tokens must be token ids in \[0, 20\)"):
        model(torch.tensor([[1, 20]]))
    with pytest.raises(ValueError, match="prompt"):
        generate_cached(model, torch.tensor([[-1]]), 2)
    with pytest.raises(ValueError, match=r"prompt\[0\]"):
        serve(model, [Request(0, (25,), 2)], num_blocks=8)
    with pytest.raises(ValueError, match=r"completions\[0\]"):
        score_reencoded(model, [1, 2], [[99]])
    with pytest.raises(ValueError, match=r"prompt\[1\]"):
        score_forked(model, [1, 20], [[1]])
    with pytest.raises(ValueError, match="draft"):
        verify(torch.full((1, 2, 3), 1 / 3), torch.full((1, 1, 3), 1 / 3), torch.tensor([[3]]))
    with pytest.raises(ValueError, match="tokens"):
        block_hashes([1, -2], 4)


def test_a_cache_is_never_broadcast_over_a_bigger_batch(model):
    one = KVCache.for_model(CFG, batch=1, max_len=8)
    two = KVCache.for_model(CFG, batch=2, max_len=8)
    with pytest.raises(ValueError, match="cache's batch"):
        model(torch.tensor([[1], [2]]), cache=one, pos=0)
    with pytest.raises(ValueError, match="cache's batch"):
        model(torch.tensor([[1]]), cache=two, pos=0)
    assert one.length == two.length == 0
    paged = PagedKVCache.for_model(CFG, num_blocks=4, block_size=4)
    paged.blocks.add_sequence(0)
    with pytest.raises(ValueError, match="batch"):
        model(torch.tensor([[1], [2]]), cache=paged.view(0), pos=0)
    assert paged.blocks.num_tokens(0) == 0


def test_bools_are_not_layer_counts():
    with pytest.raises(TypeError, match="n_layer"):
        GPTConfig(n_layer=True)
    with pytest.raises(TypeError, match="n_layers"):
        KVCache(True, 1, 1, 4, 2)
    with pytest.raises(TypeError, match="n_layers"):
        ConcatKVCache(True)
    with pytest.raises(TypeError, match="n_layers"):
        PagedKVCache(BlockAllocator(2), True, 1, 2)
    with pytest.raises(TypeError, match="num_blocks"):
        BlockAllocator(True)


def test_the_engine_refuses_requests_it_could_never_finish(model):
    with pytest.raises(ValueError, match="n_positions"):
        serve(model, [Request(0, (1,) * 20, 20)], num_blocks=64, block_size=4)
    with pytest.raises(ValueError, match="KV blocks"):
        serve(model, [Request(0, (1,) * 10, 10)], num_blocks=2, block_size=4)
    with pytest.raises(ValueError, match="now must be a finite number"):
        Scheduler(BlockManager(BlockAllocator(4))).schedule(math.nan)
    with pytest.raises(ValueError, match="policy"):
        Engine(model, num_blocks=8, policy="lifo")
    with pytest.raises(TypeError, match="max_num_seqs"):
        Engine(model, num_blocks=8, max_num_seqs=2.0)


def test_fragmentation_arguments():
    with pytest.raises(TypeError, match="block_size"):
        simulate(sharegpt_like(10, max_len=64), "paged", 4096, block_size=1.5)
    with pytest.raises(ValueError, match="mean_output"):
        sharegpt_like(10, mean_output=math.nan)


def test_a_free_that_would_fail_half_way_changes_nothing():
    alloc = BlockAllocator(4, 2)
    cache = PagedKVCache(alloc, 1, 1, 1)
    cache.blocks.add_sequence("s")
    cache.append_slots("s", 5)  # three blocks
    table = cache.blocks.block_table("s")
    alloc.free(table[1])  # freed behind the table's back
    refs, free = [alloc.ref_count(b) for b in range(4)], alloc.free_blocks()
    with pytest.raises(ValueError, match="already free"):
        cache.blocks.free_sequence("s")
    assert [alloc.ref_count(b) for b in range(4)] == refs and alloc.free_blocks() == free
    assert cache.blocks.block_table("s") == table


def test_prefix_insert_that_would_fail_half_way_changes_nothing():
    alloc = BlockAllocator(6, 2)
    prefix = PrefixCache(alloc)
    assert [alloc.allocate(), alloc.allocate()] == [0, 1]  # only blocks in use can be indexed
    prefix.insert([1, 2], [0])
    with pytest.raises(ValueError, match="already cached"):
        prefix.insert([3, 4, 5, 6], [1, 0])  # block 1 would be indexed before block 0 fails
    assert prefix.num_cached_blocks == 1 and not prefix.is_cached(1)


def test_finite_floats_refuses_each_bad_series_by_name():
    from inferbook.validate import finite_floats

    assert finite_floats("x", (1, 2.5)) == [1.0, 2.5]
    assert finite_floats("x", [3], length=1, minimum=0, positive=True) == [3.0]
    for values, kwargs, words in [("12", {}, "sequence"), ([], {}, "empty"), ([1, 2], {"length": 3}, "expected 3"),
                                  ([1, 0], {"positive": True}, "positive"), ([1, float("nan")], {}, r"x\[1\]"),
                                  ([-1], {"minimum": 0}, r"x\[0\]"), ([True], {}, "real number")]:
        with pytest.raises((TypeError, ValueError), match=words):
            finite_floats("x", values, **kwargs)
