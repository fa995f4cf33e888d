"""Tests for inferbook.blocks: the torch-free block books (BlockManager) and the planner's
torch-free imports."""

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.blocks import BlockAllocator, BlockManager, OutOfBlocksError, blocks_for, check_invariants
from inferbook.prefix_cache import PrefixCache


def books(num_blocks=8, block_size=4):
    return BlockManager(BlockAllocator(num_blocks, block_size))


def test_reserve_takes_a_block_only_at_a_boundary_and_slots_follow_the_table():
    b = books()
    b.add_sequence("s")
    assert b.reserve("s", 3) == [] and len(b.block_table("s")) == 1
    b.reserve("s", 2)
    table = b.block_table("s")
    assert len(table) == 2 and b.num_tokens("s") == 5
    assert b.slots("s") == [table[0] * 4 + i for i in range(4)] + [table[1] * 4]
    assert b.slots("s", 3, 5) == [table[0] * 4 + 3, table[1] * 4]
    check_invariants(b)


def test_fork_then_write_returns_the_copy_on_write_as_src_dst():
    b = books()
    b.add_sequence("p")
    b.reserve("p", 6)  # blocks: one full, one half full
    b.fork("p", "c")
    shared_tail = b.block_table("p")[-1]
    assert b.blocks_needed("c", 1) == 1  # the copy
    copies = b.reserve("c", 1)
    assert len(copies) == 1 and copies[0][0] == shared_tail
    assert b.block_table("c")[-1] == copies[0][1] != shared_tail
    assert b.block_table("c")[0] == b.block_table("p")[0]  # the full block stays shared
    assert b.copies == 1 and b.allocator.ref_count(shared_tail) == 1
    check_invariants(b)


def test_fork_at_a_block_boundary_copies_nothing():
    b = books()
    b.add_sequence("p")
    b.reserve("p", 8)
    b.fork("p", "c")
    assert b.reserve("c", 1) == [] and b.copies == 0


def test_admission_cost_counts_new_blocks_and_reclaimed_cached_hits():
    b = books(num_blocks=6)
    prefix = PrefixCache(b.allocator)
    tokens = list(range(10))
    b.add_sequence("a")
    b.reserve("a", 10)
    prefix.insert(tokens, b.block_table("a"))  # two full blocks indexed
    hits_live = prefix.lookup(tokens + [99], max_tokens=10)
    assert len(hits_live) == 2
    # while "a" holds them, a hit costs nothing: 11 tokens -> 3 blocks, 2 shared
    assert b.admission_cost(11, hits_live) == 1
    b.free_sequence("a")
    # now the hits sit free (cached): reusing them takes them off the free list
    assert b.admission_cost(11, hits_live) == 3
    assert b.admission_cost(11) == 3 and b.admission_cost(0) == 0
    assert b.can_admit(24) and not b.can_admit(25)


def test_out_of_blocks_changes_nothing():
    b = books(num_blocks=2)
    b.add_sequence("s")
    b.reserve("s", 5)
    before = (b.block_table("s"), b.num_tokens("s"), b.allocator.free_blocks())
    with pytest.raises(OutOfBlocksError):
        b.reserve("s", 4)
    assert (b.block_table("s"), b.num_tokens("s"), b.allocator.free_blocks()) == before


@pytest.mark.parametrize("call, match", [
    (lambda b: b.reserve("nope", 1), "unknown sequence"),
    (lambda b: b.reserve("s", -1), "n must be"),
    (lambda b: b.reserve("s", 1.5), "n must be"),
    (lambda b: b.add_sequence("s"), "already exists"),
    (lambda b: b.add_sequence(["x"]), "hashable"),
    (lambda b: b.add_sequence("t", [0, 0]), "more than once"),
    (lambda b: b.add_sequence("t", [7]), "is free"),
    (lambda b: b.admission_cost(-1), "num_tokens"),
    (lambda b: b.admission_cost(4, [1, 2]), "hit_blocks"),
    (lambda b: b.admission_cost(4, [99]), "hit_blocks"),
    (lambda b: b.slots("s", 0, 99), "outside"),
    (lambda b: b.fork("s", "s"), "already exists"),
    (lambda b: BlockManager("pool"), "allocator"),
])
def test_bad_calls_are_refused_and_change_nothing(call, match):
    b = books()
    b.add_sequence("s")
    b.reserve("s", 5)
    before = ({k: b.block_table(k) for k in b.sequences}, {k: b.num_tokens(k) for k in b.sequences},
              b.allocator.free_blocks(), list(b.allocator._ref), b.copies)
    with pytest.raises((TypeError, ValueError), match=match):
        call(b)
    assert before == ({k: b.block_table(k) for k in b.sequences}, {k: b.num_tokens(k) for k in b.sequences},
                      b.allocator.free_blocks(), list(b.allocator._ref), b.copies)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "grow", "fork", "free"]), st.integers(0, 9),
                          st.integers(0, 7)), max_size=40))
def test_random_histories_keep_the_books_consistent(ops):
    b = books(num_blocks=10, block_size=4)
    for i, (op, pick, n) in enumerate(ops):
        live = b.sequences
        if op == "add":
            b.add_sequence(i)
        elif op == "grow" and live:
            seq = live[pick % len(live)]
            if b.can_append(seq, n):
                need = b.blocks_needed(seq, n)
                free = b.allocator.num_free_blocks
                b.reserve(seq, n)
                assert b.allocator.num_free_blocks == free - need
            else:
                with pytest.raises(OutOfBlocksError):
                    b.reserve(seq, n)
        elif op == "fork" and live:
            b.fork(live[pick % len(live)], i)
        elif op == "free" and live:
            b.free_sequence(live[pick % len(live)])
        check_invariants(b)


def test_blocks_for_rounds_up_and_the_books_are_imported_from_here():
    assert blocks_for(17, 16) == 2 and blocks_for(16, 16) == 1 and blocks_for(0, 16) == 0
    from inferbook import paged
    assert not hasattr(paged, "blocks_for") and not hasattr(paged, "check_invariants")
    cache = paged.PagedKVCache(BlockAllocator(4, 4), 1, 1, 1)
    assert isinstance(cache.blocks, BlockManager)
    forwarded = [m for m in ("add_sequence", "fork", "free_sequence", "block_table", "num_tokens",
                             "blocks_needed", "can_append", "admission_cost", "can_admit",
                             "sequences", "copies") if hasattr(cache, m)]
    assert not forwarded, f"PagedKVCache forwards {forwarded}: ask cache.blocks"


PLANNER = ["simulate", "sizing", "models", "hardware", "blocks", "steploop", "workload", "metrics",
           "prefix_cache", "sched_trace", "fragmentation", "recommend", "rules"]


def test_the_planner_and_the_simulator_import_no_torch():
    code = ("import sys\n" + "".join(f"import inferbook.{m}\n" for m in PLANNER)
            + "loaded = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            + "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
