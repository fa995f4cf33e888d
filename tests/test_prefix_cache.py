"""Tests for inferbook.prefix_cache: chained block hashes, longest-prefix lookup, LRU eviction."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.blocks import BlockAllocator, blocks_for, check_invariants
from inferbook.gpt import GPT, GPTConfig
from inferbook.paged import PagedKVCache
from inferbook.prefix_cache import (
    PrefixCache,
    block_hashes,
    hash_block,
    replay,
    score_forked,
    score_reencoded,
)
from inferbook.workload import agent_workload


def test_only_full_blocks_get_a_hash():
    assert len(block_hashes(range(15), 16)) == 0
    assert len(block_hashes(range(16), 16)) == 1
    assert len(block_hashes(range(47), 16)) == 2
    assert block_hashes(range(40), 16) == block_hashes(range(32), 16)


def test_hashes_are_chained_to_the_parent():
    a = [1] * 16 + [7] * 16
    b = [2] * 16 + [7] * 16  # same second block, different first block
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert ha[0] != hb[0] and ha[1] != hb[1]
    assert ha[1] == hash_block(ha[0], [7] * 16)
    assert block_hashes([7] * 16, 16)[0] != ha[1]  # same tokens at another position


def cache_with_prefix_cache(num_blocks=8, block_size=4):
    alloc = BlockAllocator(num_blocks, block_size)
    return PagedKVCache(alloc, 1, 1, 1), PrefixCache(alloc)


def run_request(cache, prefix, seq_id, tokens, keep=False):
    """Admit a request the way an engine does; store each token's id as its K value."""
    blocks = prefix.match(tokens)
    cache.blocks.add_sequence(seq_id, blocks)
    start = cache.blocks.num_tokens(seq_id)
    slots = cache.append_slots(seq_id, len(tokens) - start)
    vals = torch.tensor(tokens[start:], dtype=torch.float32).view(-1, 1, 1)
    cache.write(0, slots, vals, vals)
    prefix.insert(tokens, cache.blocks.block_table(seq_id))
    if not keep:
        cache.blocks.free_sequence(seq_id)
    return len(blocks)


def test_longest_prefix_is_reused_and_the_last_token_always_computed():
    cache, prefix = cache_with_prefix_cache(num_blocks=8, block_size=4)
    p = list(range(100, 112))  # 3 full blocks
    assert run_request(cache, prefix, "a", p) == 0
    assert run_request(cache, prefix, "b", p + [1, 2]) == 3
    assert run_request(cache, prefix, "c", p) == 2  # 12 tokens: reuse 8, compute the last block
    assert run_request(cache, prefix, "d", p[:4] + [0] * 8) == 1  # diverges in block 2
    assert prefix.lookup(p) == prefix.lookup(p + [5])[:3]


def test_freed_cached_blocks_are_kept_and_evicted_least_recently_used_first():
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    a, b = [1] * 8, [2] * 8  # two blocks each
    run_request(cache, prefix, "a", a)
    run_request(cache, prefix, "b", b)  # freed after a: more recently used
    assert prefix.num_cached_blocks == 4 and cache.allocator.num_free_blocks == 4
    cache.blocks.add_sequence("x")
    cache.append_slots("x", 8)  # needs 2 blocks: a's are the oldest
    assert prefix.evictions == 2
    assert prefix.lookup(a) == [] and len(prefix.lookup(b)) == 2


def test_plain_free_blocks_are_used_before_cached_ones():
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    run_request(cache, prefix, "a", [1] * 8)  # 2 cached blocks, 2 never used
    cache.blocks.add_sequence("x")
    cache.append_slots("x", 8)
    assert prefix.evictions == 0 and len(prefix.lookup([1] * 8)) == 2


def test_a_freed_partial_block_is_reused_before_any_cached_block():
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    run_request(cache, prefix, "a", [1] * 8)  # 2 cached blocks
    run_request(cache, prefix, "b", [2] * 6)  # 1 cached block + 1 partial block (not cached)
    cache.blocks.add_sequence("x")
    cache.append_slots("x", 4)  # takes the freed partial block
    assert prefix.evictions == 0 and prefix.num_cached_blocks == 3


def test_a_hit_on_a_free_cached_block_takes_it_off_the_free_list():
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    run_request(cache, prefix, "a", [3] * 9)
    free_before = cache.allocator.num_free_blocks
    run_request(cache, prefix, "b", [3] * 9, keep=True)
    assert cache.allocator.num_free_blocks == free_before - 3  # 2 hits + 1 new block in use
    check_invariants(cache)


def test_hit_blocks_hold_the_prefix_tokens_and_the_model_agrees():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=200, n_positions=96, n_embd=32, n_layer=2, n_head=2)
    model = GPT(cfg).eval()
    cache = PagedKVCache.for_model(cfg, num_blocks=12, block_size=8)
    prefix = PrefixCache(cache.allocator)
    system = torch.randint(0, 200, (20,)).tolist()
    with torch.inference_mode():
        for i, tail in enumerate(([5, 6, 7], [9, 9, 9, 9, 9])):
            tokens = system + tail
            blocks = prefix.match(tokens)
            cache.blocks.add_sequence(i, blocks)
            start = cache.blocks.num_tokens(i)
            logits = model(torch.tensor([tokens[start:]]), cache=cache.view(i), pos=start)
            full = model(torch.tensor([tokens]))
            torch.testing.assert_close(logits[0], full[0, start:], rtol=1e-5, atol=1e-5)
            prefix.insert(tokens, cache.blocks.block_table(i))
            assert start == (0 if i == 0 else 16)
            cache.blocks.free_sequence(i)


@settings(max_examples=40, deadline=None)
@given(requests=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1, max_size=14)),
                         min_size=1, max_size=12),
       num_blocks=st.integers(4, 10))
def test_random_requests_keep_the_invariants_and_hits_return_the_right_tokens(requests, num_blocks):
    cache, prefix = cache_with_prefix_cache(num_blocks=num_blocks, block_size=4)
    systems = [[10] * 6, [11] * 9, []]
    live = []
    for i, (s, tail) in enumerate(requests):
        tokens = systems[s] + tail
        hits = prefix.lookup(tokens, max_tokens=len(tokens) - 1)
        need = blocks_for(len(tokens), 4) - len(hits)
        # Blocks a hit takes off the free list are no longer allocatable.
        free_hits = sum(cache.allocator.ref_count(b) == 0 for b in hits)
        if not cache.allocator.can_allocate(need + free_hits):
            for seq in live:
                cache.blocks.free_sequence(seq)
            live = []
            if not cache.allocator.can_allocate(need + sum(cache.allocator.ref_count(b) == 0 for b in hits)):
                continue
        run_request(cache, prefix, i, tokens, keep=True)
        live.append(i)
        assert cache.gather(0, i)[0].flatten().tolist() == tokens  # reused blocks held these tokens
        check_invariants(cache)
    for seq in live:
        cache.blocks.free_sequence(seq)
    assert cache.allocator.num_free_blocks == num_blocks


def test_agent_workload_replay_saves_most_prefill():
    requests = agent_workload(n_conversations=6, turns=3, seed=1)
    on = replay(requests, num_blocks=2000)
    off = replay(requests, num_blocks=2000, caching=False)
    assert off.hit_tokens == 0 and off.prefill_tokens == off.prompt_tokens
    assert on.prompt_tokens == off.prompt_tokens
    assert on.hit_rate > 0.8 and on.evictions == 0
    assert on.prefill_tokens + on.hit_tokens == on.prompt_tokens
    small = replay(requests, num_blocks=150)  # too small to keep everything: evicts, hits less
    assert small.evictions > 0 and small.hit_tokens < on.hit_tokens


def test_one_prefix_cache_per_allocator():
    alloc = BlockAllocator(2)
    PrefixCache(alloc)
    with pytest.raises(ValueError, match="already has"):
        PrefixCache(alloc)


def test_forked_scoring_equals_reencoding_one_by_one_and_batched():
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2)).eval()
    prompt = torch.randint(0, 100, (21,)).tolist()
    same_len = [torch.randint(0, 100, (5,)).tolist() for _ in range(3)]
    ragged = same_len[:2] + [[1, 2]]
    ref = score_reencoded(model, prompt, same_len)
    for got in (score_forked(model, prompt, same_len), score_forked(model, prompt, same_len, batch=True),
                score_reencoded(model, prompt, same_len, batch=True)):
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(score_forked(model, prompt, ragged), score_reencoded(model, prompt, ragged)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="equal length"):
        score_forked(model, prompt, ragged, batch=True)
    with pytest.raises(ValueError):
        score_forked(model, [], same_len)


@pytest.mark.parametrize("call, match", [
    (lambda p: p.lookup([1, 2], max_tokens=-1), "max_tokens"),
    (lambda p: p.evict(0), "not cached"),
    (lambda p: p.is_cached("0"), "block"),
    (lambda p: replay([], 4), "at least one"),
    (lambda p: replay([([1], [2])], 4, caching="yes"), "caching"),
    (lambda p: replay([(1, 2)], 4), "prompt"),
    (lambda p: replay([([1] * 40, [2])], 2, block_size=4), "num_blocks"),
    (lambda p: replay("ab", 4), "requests"),
])
def test_bad_calls_name_the_argument(call, match):
    p = PrefixCache(BlockAllocator(4, 4))
    with pytest.raises((TypeError, ValueError), match=match):
        call(p)


def test_a_duplicate_block_is_indexed_behind_the_first_and_serves_once_it_is_evicted():
    """As vLLM (block_pool.py, BlockHashToBlockMap): two requests that filled a block with the
    same prefix each keep theirs indexed; a lookup returns the oldest; evicting it leaves the other."""
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    for seq_id in ("a", "b"):  # both computed before either was indexed
        cache.blocks.add_sequence(seq_id)
        cache.append_slots(seq_id, 4)
    a, b = cache.blocks.block_table("a")[0], cache.blocks.block_table("b")[0]
    assert prefix.insert([1] * 4, [a]) == 1 and prefix.insert([1] * 4, [b]) == 1
    assert prefix.insert([1] * 4, [a]) == 0  # already indexed under that hash: skipped
    assert prefix.num_cached_blocks == 2 and prefix.lookup([1] * 5) == [a]
    cache.blocks.free_sequence("a")
    prefix.evict(a)
    assert prefix.lookup([1] * 5) == [b]
    prefix.evict(b)
    assert prefix.lookup([1] * 5) == []


def test_insert_from_a_start_block_chains_from_the_indexed_block_before_it():
    cache, prefix = cache_with_prefix_cache(num_blocks=4, block_size=4)
    tokens = list(range(1, 13))  # 3 full blocks
    cache.blocks.add_sequence("s")
    cache.append_slots("s", 12)
    table = cache.blocks.block_table("s")
    with pytest.raises(ValueError, match="start_block=1: block .* not indexed"):
        prefix.insert(tokens, table, start_block=1)
    assert prefix.num_cached_blocks == 0  # refused: nothing indexed
    assert prefix.insert(tokens[:4], table) == 1
    assert prefix.insert(tokens, table, start_block=1) == 2
    assert prefix.lookup(tokens + [0]) == table  # the same hashes as indexing all at once
    with pytest.raises(ValueError, match="start_block"):
        prefix.insert(tokens, table, start_block=4)
