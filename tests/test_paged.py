"""Tests for inferbook.paged: allocator, block tables, copy-on-write, paged attention, GPT decoding."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from inferbook.blocks import BlockAllocator, OutOfBlocksError, blocks_for, check_invariants
from inferbook.decode import generate_cached
from inferbook.gpt import GPT, GPTConfig, causal_attention
from inferbook.paged import (
    BatchCacheView,
    PagedKVCache,
    SequenceCacheView,
    paged_attention,
    paged_decode_attention,
)


# --- allocator ---------------------------------------------------------------------------------
def test_allocator_hands_out_every_block_once_then_signals_out_of_blocks():
    a = BlockAllocator(4, block_size=16)
    got = [a.allocate() for _ in range(4)]
    assert sorted(got) == [0, 1, 2, 3] and a.num_free_blocks == 0
    assert not a.can_allocate(1) and a.can_allocate(0)
    with pytest.raises(OutOfBlocksError) as err:
        a.allocate()
    assert isinstance(err.value, RuntimeError) and err.value.needed == 1 and err.value.free == 0
    for b in got:
        a.free(b)
    assert a.num_free_blocks == 4


def test_double_free_and_bad_arguments_raise_value_error():
    a = BlockAllocator(2)
    b = a.allocate()
    a.free(b)
    with pytest.raises(ValueError, match="already free"):
        a.free(b)
    with pytest.raises(ValueError, match="block must be"):
        a.free(7)
    for bad in [(0, 16), (4, 0), (-1, 16), (2.5, 16)]:
        with pytest.raises(ValueError):
            BlockAllocator(*bad)


def test_ref_counts_keep_a_shared_block_until_its_last_owner_frees_it():
    a = BlockAllocator(3)
    b = a.allocate()
    a.incref(b)
    assert a.ref_count(b) == 2
    a.free(b)
    assert a.ref_count(b) == 1 and b not in a.free_blocks()
    a.free(b)
    assert a.ref_count(b) == 0 and b in a.free_blocks()


@pytest.mark.parametrize("n, blocks", [(0, 0), (1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)])
def test_blocks_for_is_the_ceiling(n, blocks):
    assert blocks_for(n, 16) == blocks


# --- sequences -----------------------------------------------------------------------------------
def small_cache(num_blocks=8, block_size=4, n_layers=2, n_kv_heads=2, head_dim=3):
    return PagedKVCache(BlockAllocator(num_blocks, block_size), n_layers, n_kv_heads, head_dim)


def test_a_new_block_only_when_the_last_one_is_full():
    c = small_cache(block_size=4)
    c.blocks.add_sequence("s")
    sizes = []
    for _ in range(9):
        c.append_slots("s", 1)
        sizes.append(len(c.blocks.block_table("s")))
    assert sizes == [1, 1, 1, 1, 2, 2, 2, 2, 3]
    slots = c.slots("s")
    table = c.blocks.block_table("s")
    assert slots.tolist() == [table[t // 4] * 4 + t % 4 for t in range(9)]
    check_invariants(c)


def test_finished_sequence_cannot_be_used_or_freed_twice():
    c = small_cache()
    c.blocks.add_sequence("s")
    c.append_slots("s", 5)
    c.blocks.free_sequence("s")
    assert c.allocator.num_free_blocks == 8
    with pytest.raises(ValueError, match="finished"):
        c.append_slots("s", 1)
    with pytest.raises(ValueError, match="finished"):
        c.blocks.free_sequence("s")
    with pytest.raises(ValueError, match="unknown"):
        c.append_slots("never", 1)


def test_out_of_blocks_leaves_the_cache_unchanged():
    c = small_cache(num_blocks=3, block_size=4)
    c.blocks.add_sequence("a")
    c.append_slots("a", 10)  # 3 blocks
    before = (c.blocks.block_table("a"), c.blocks.num_tokens("a"), c.allocator.num_free_blocks)
    assert not c.blocks.can_append("a", 3) and c.blocks.can_append("a", 2)
    with pytest.raises(OutOfBlocksError) as err:
        c.append_slots("a", 3)
    assert err.value.needed == 1 and err.value.free == 0
    assert (c.blocks.block_table("a"), c.blocks.num_tokens("a"), c.allocator.num_free_blocks) == before
    check_invariants(c)


def test_fork_shares_blocks_and_copy_on_write_protects_the_parent():
    c = small_cache(num_blocks=8, block_size=4, n_layers=2, n_kv_heads=1, head_dim=1)
    c.blocks.add_sequence("p")
    slots = c.append_slots("p", 6)  # one full block, one block with 2 of 4 slots used
    for layer in range(2):
        vals = torch.arange(6.0).view(6, 1, 1) + 100 * layer
        c.write(layer, slots, vals, -vals)
    c.blocks.fork("p", "c")
    assert c.blocks.block_table("c") == c.blocks.block_table("p")
    assert all(c.allocator.ref_count(b) == 2 for b in c.blocks.block_table("p"))
    assert c.blocks.blocks_needed("c", 1) == 1  # the copy of the shared partial block
    new = c.append_slots("c", 1)
    c.write(0, new, torch.full((1, 1, 1), 42.0), torch.full((1, 1, 1), 42.0))
    tp, tc = c.blocks.block_table("p"), c.blocks.block_table("c")
    assert tp[0] == tc[0] and tp[1] != tc[1] and c.blocks.copies == 1  # full block still shared
    k_p, _ = c.gather(0, "p")
    k_c, v_c = c.gather(0, "c")
    assert k_p.flatten().tolist() == [0, 1, 2, 3, 4, 5]
    assert k_c.flatten().tolist() == [0, 1, 2, 3, 4, 5, 42]
    assert c.gather(1, "c")[0].flatten().tolist()[:6] == [100, 101, 102, 103, 104, 105]
    # The parent's next write goes into its own block, now private: no copy.
    c.append_slots("p", 1)
    assert c.blocks.copies == 1
    check_invariants(c)
    c.blocks.free_sequence("p")
    c.blocks.free_sequence("c")
    assert c.allocator.num_free_blocks == 8


def test_fork_at_a_block_boundary_copies_nothing():
    c = small_cache(block_size=4)
    c.blocks.add_sequence("p")
    c.append_slots("p", 8)
    c.blocks.fork("p", "c")
    assert c.blocks.blocks_needed("c", 1) == 1
    c.append_slots("c", 1)
    assert c.blocks.copies == 0 and c.blocks.block_table("c")[:2] == c.blocks.block_table("p")


def test_add_sequence_validates_blocks():
    c = small_cache(block_size=4)
    with pytest.raises(ValueError, match="free"):
        c.blocks.add_sequence("x", [0])
    b = c.allocator.allocate()
    with pytest.raises(ValueError, match="need 2 blocks"):
        c.blocks.add_sequence("x", [b], num_tokens=5)
    c.blocks.add_sequence("x", [b])
    assert c.blocks.num_tokens("x") == 4
    with pytest.raises(ValueError, match="already exists"):
        c.blocks.add_sequence("x")


# --- hypothesis: invariants under random operations ---------------------------------------------
class PagedMachine(RuleBasedStateMachine):
    """Random add/append/fork/free; a shadow list of each sequence's token values checks the data."""

    def __init__(self):
        super().__init__()
        self.cache = PagedKVCache(BlockAllocator(12, block_size=4), 1, 1, 1)
        self.shadow: dict[int, list[float]] = {}
        self.next_id = 0
        self.next_value = 1.0

    @rule()
    def add(self):
        self.cache.blocks.add_sequence(self.next_id)
        self.shadow[self.next_id] = []
        self.next_id += 1

    @precondition(lambda self: self.shadow)
    @rule(data=st.data(), n=st.integers(1, 9))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        if not self.cache.blocks.can_append(seq, n):
            with pytest.raises(OutOfBlocksError):
                self.cache.append_slots(seq, n)
            return
        slots = self.cache.append_slots(seq, n)
        vals = [self.next_value + i for i in range(n)]
        self.next_value += n
        t = torch.tensor(vals).view(n, 1, 1)
        self.cache.write(0, slots, t, t)
        self.shadow[seq] += vals

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.shadow)))
        self.cache.blocks.fork(parent, self.next_id)
        self.shadow[self.next_id] = list(self.shadow[parent])
        self.next_id += 1

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        self.cache.blocks.free_sequence(seq)
        del self.shadow[seq]
        with pytest.raises(ValueError):
            self.cache.blocks.free_sequence(seq)

    @invariant()
    def counts_and_contents_agree(self):
        check_invariants(self.cache)  # no block owned twice, refs ≥ 0 and = holders, tables cover tokens
        for seq, vals in self.shadow.items():
            assert self.cache.blocks.num_tokens(seq) == len(vals)
            assert self.cache.gather(0, seq)[0].flatten().tolist() == vals

    def teardown(self):
        for seq in list(self.shadow):
            self.cache.blocks.free_sequence(seq)
        assert self.cache.allocator.num_free_blocks == 12  # every block came back


PagedMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestPagedMachine = PagedMachine.TestCase


# --- paged attention --------------------------------------------------------------------------------
def scatter_into_pool(k, v, block_size, num_blocks, generator):
    """Put k, v ([L, kv_heads, d]) into a pool at a random permutation of blocks; return pools, table."""
    L, h, d = k.shape
    need = blocks_for(L, block_size)
    table = torch.randperm(num_blocks, generator=generator)[:need].tolist()
    k_pool = torch.randn(num_blocks, block_size, h, d, generator=generator, dtype=k.dtype)  # garbage elsewhere
    v_pool = torch.randn(num_blocks, block_size, h, d, generator=generator, dtype=k.dtype)
    for i, b in enumerate(table):
        chunk = slice(i * block_size, min(L, (i + 1) * block_size))
        n = chunk.stop - chunk.start
        k_pool[b, :n], v_pool[b, :n] = k[chunk], v[chunk]
    return k_pool, v_pool, table


def dense(q, k, v):
    """Reference: q [H, n_q, d], k/v [L, kv_heads, d] -> causal attention via gpt.causal_attention."""
    group = q.shape[0] // k.shape[1]
    kk = k.transpose(0, 1).repeat_interleave(group, 0)
    vv = v.transpose(0, 1).repeat_interleave(group, 0)
    return causal_attention(q[None], kk[None], vv[None])[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 70), n_q=st.integers(1, 5), block_size=st.sampled_from([1, 4, 16]),
       kv_heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 3]), seed=st.integers(0, 10_000))
def test_paged_attention_matches_dense_attention(L, n_q, block_size, kv_heads, group, seed):
    n_q = min(n_q, L)
    g = torch.Generator().manual_seed(seed)
    d = 8
    q = torch.randn(kv_heads * group, n_q, d, generator=g)
    k = torch.randn(L, kv_heads, d, generator=g)
    v = torch.randn(L, kv_heads, d, generator=g)
    k_pool, v_pool, table = scatter_into_pool(k, v, block_size, blocks_for(L, block_size) + 3, g)
    got = paged_attention(q, k_pool, v_pool, table, L)
    ref64 = dense(q.double(), k.double(), v.double())
    plain_err = (dense(q, k, v).double() - ref64).abs().max().item()
    our_err = (got.double() - ref64).abs().max().item()
    assert our_err <= 2 * plain_err + 1e-6  # flash-attention's rule, with a floor for exact zeros


def test_paged_decode_attention_matches_per_sequence_attention_on_ragged_batch():
    g = torch.Generator().manual_seed(0)
    block_size, num_blocks, kv_heads, heads, d = 4, 40, 2, 4, 8
    k_pool = torch.randn(num_blocks, block_size, kv_heads, d, generator=g)
    v_pool = torch.randn(num_blocks, block_size, kv_heads, d, generator=g)
    lens = [1, 4, 5, 13, 30]
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables, start = [], 0
    for n in lens:
        tables.append(perm[start:start + blocks_for(n, block_size)])
        start += len(tables[-1])
    q = torch.randn(len(lens), heads, d, generator=g)
    got = paged_decode_attention(q, k_pool, v_pool, tables, lens)
    for b, n in enumerate(lens):
        ref = paged_attention(q[b][:, None, :], k_pool, v_pool, tables[b], n)[:, 0]
        torch.testing.assert_close(got[b], ref, rtol=1e-5, atol=1e-6)


def test_paged_attention_rejects_bad_shapes():
    k_pool = torch.zeros(4, 4, 2, 8)
    with pytest.raises(ValueError, match="multiple of KV heads"):
        paged_attention(torch.zeros(3, 1, 8), k_pool, k_pool, [0], 1)
    with pytest.raises(ValueError, match="block table"):
        paged_attention(torch.zeros(2, 1, 8), k_pool, k_pool, [0], 5)
    with pytest.raises(ValueError, match="head_dim"):
        paged_attention(torch.zeros(2, 1, 4), k_pool, k_pool, [0], 1)


# --- a real model ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=300, n_positions=128, n_embd=64, n_layer=2, n_head=4)).eval()


def greedy_paged(model, prompt, new_tokens, cache, seq_id):
    view = cache.view(seq_id)
    tokens = prompt
    with torch.inference_mode():
        logits = model(prompt, cache=view, pos=view.length, last_only=True)
        for i in range(new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if i + 1 < new_tokens:
                logits = model(nxt, cache=view, pos=view.length, last_only=True)
    return tokens


@pytest.mark.parametrize("prompt_len", [1, 15, 16, 17, 33])
def test_greedy_decoding_through_the_paged_cache_equals_the_contiguous_cache(model, prompt_len):
    prompt = torch.randint(0, 300, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    cache = PagedKVCache.for_model(model.config, num_blocks=16, block_size=16)
    cache.blocks.add_sequence(0)
    got = greedy_paged(model, prompt, 40, cache, 0)
    assert torch.equal(got, generate_cached(model, prompt, 40).tokens)
    assert len(cache.blocks.block_table(0)) == blocks_for(prompt_len + 39, 16)


def test_forked_completions_equal_independent_runs(model):
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 300, (1, 21), generator=g)
    firsts = [torch.tensor([[t]]) for t in (5, 77, 150)]
    cache = PagedKVCache.for_model(model.config, num_blocks=16, block_size=8)
    cache.blocks.add_sequence("P")
    with torch.inference_mode():
        model(prompt, cache=cache.view("P"), pos=0)
        for i, first in enumerate(firsts):
            cache.blocks.fork("P", i)
            got = greedy_paged(model, first, 10, cache, i)
            ref = generate_cached(model, torch.cat([prompt, first], 1), 10).tokens[:, 21:]
            assert torch.equal(got, ref)
    assert cache.blocks.copies == 3  # 21 = 2·8 + 5: each child copied the shared partial block
    check_invariants(cache)


def test_view_refuses_rewrites_and_batches(model):
    cache = PagedKVCache.for_model(model.config, num_blocks=4, block_size=16)
    cache.blocks.add_sequence(0)
    view = SequenceCacheView(cache, 0)
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3]]), cache=view, pos=0)
        with pytest.raises(ValueError, match="appends only"):
            model(torch.tensor([[1]]), cache=view, pos=1)
        with pytest.raises(ValueError, match="batch"):
            model(torch.tensor([[1], [2]]), cache=view, pos=3)
    assert view.length == 3 and cache.blocks.block_table(0) == [cache.blocks.block_table(0)[0]]


def test_batch_view_runs_forks_together_like_one_at_a_time(model):
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 300, (1, 19), generator=g)
    conts = torch.randint(0, 300, (3, 6), generator=g)
    cache = PagedKVCache.for_model(model.config, num_blocks=16, block_size=8)
    cache.blocks.add_sequence("P")
    with torch.inference_mode():
        model(prompt, cache=cache.view("P"), pos=0)
        for i in range(3):
            cache.blocks.fork("P", i)
        batched = model(conts, cache=BatchCacheView(cache, [0, 1, 2]), pos=19)
        for i in range(3):
            ref = model(torch.cat([prompt, conts[i:i + 1]], 1))[0, 19:]
            torch.testing.assert_close(batched[i], ref, rtol=1e-5, atol=1e-5)
    assert cache.blocks.copies == 3
    check_invariants(cache)
    cache.append_slots(0, 1)
    with pytest.raises(ValueError, match="equal length"):
        BatchCacheView(cache, [0, 1])


def test_write_accepts_the_empty_slots_of_append_slots_zero():
    c = small_cache()
    c.blocks.add_sequence("s")
    slots = c.append_slots("s", 0)
    assert slots.numel() == 0
    before = [p.clone() for p in c.k_pool]
    c.write(0, slots, torch.zeros(0, 2, 3), torch.zeros(0, 2, 3))
    assert all(torch.equal(a, b) for a, b in zip(before, c.k_pool))
    with pytest.raises(ValueError, match="k and v"):
        c.write(0, slots, torch.zeros(1, 2, 3), torch.zeros(1, 2, 3))
    with pytest.raises(TypeError, match="slots"):
        c.write(0, torch.zeros(0), torch.zeros(0, 2, 3), torch.zeros(0, 2, 3))


def test_the_cache_keeps_its_books_in_a_block_manager():
    from inferbook.blocks import BlockManager
    c = small_cache(block_size=4)
    assert isinstance(c.blocks, BlockManager) and c.blocks.allocator is c.allocator
    c.blocks.add_sequence("p")
    c.append_slots("p", 6)
    c.blocks.fork("p", "c")
    assert c.blocks.admission_cost(9) == 3 and c.blocks.can_admit(9)
    c.write(0, c.slots("p"), torch.ones(6, 2, 3), torch.ones(6, 2, 3))
    c.append_slots("c", 1)  # copy-on-write of the half-full shared block: tensors copied too
    k_c, _ = c.gather(0, "c")
    assert torch.equal(k_c[:6], torch.ones(6, 2, 3)) and c.blocks.copies == 1
    check_invariants(c)


@pytest.mark.parametrize("call, match", [
    (lambda c: c.write(0, torch.tensor([[0]]), torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)), "1-D"),
    (lambda c: paged_attention([1.0], c.k_pool[0], c.v_pool[0], [0], 1), "q must be"),
    (lambda c: paged_decode_attention(torch.zeros(1, 2, 3), [0], c.v_pool[0], [[0]], [1]), "k_pool"),
])
def test_wrong_kinds_of_tensor_arguments_are_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call(small_cache())
