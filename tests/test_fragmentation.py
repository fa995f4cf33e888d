"""Tests for inferbook.fragmentation: the workload, the contiguous allocator, the three policies."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.blocks import BlockAllocator
from inferbook.fragmentation import (
    POLICIES,
    SHAREGPT_MEAN_OUTPUT,
    SHAREGPT_MEAN_PROMPT,
    Requests,
    _FirstFit,
    sharegpt_like,
    simulate,
)


def test_workload_is_seeded_bounded_and_has_the_stated_means():
    a, b = sharegpt_like(300, seed=3), sharegpt_like(300, seed=3)
    assert np.array_equal(a.prompt_lens, b.prompt_lens) and np.array_equal(a.output_lens, b.output_lens)
    assert not np.array_equal(a.prompt_lens, sharegpt_like(300, seed=4).prompt_lens)
    big = sharegpt_like(200_000, seed=0, max_len=100_000)  # no cut: the means are the targets
    assert abs(big.prompt_lens.mean() / SHAREGPT_MEAN_PROMPT - 1) < 0.03
    assert abs(big.output_lens.mean() / SHAREGPT_MEAN_OUTPUT - 1) < 0.03
    r = sharegpt_like(5000, seed=1, max_len=512)
    assert r.prompt_lens.min() >= 1 and r.output_lens.min() >= 1
    assert (r.prompt_lens + r.output_lens).max() <= 512


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=40))
def test_first_fit_matches_a_brute_force_bitmap(ops):
    capacity = 40
    ff, used, live = _FirstFit(capacity), np.zeros(capacity, bool), []
    for is_alloc, n in ops:
        if is_alloc or not live:
            start = ff.alloc(n)
            # brute force: the lowest start with n free slots in a row
            expect = next((s for s in range(capacity - n + 1) if not used[s:s + n].any()), None)
            assert start == expect
            if start is not None:
                used[start:start + n] = True
                live.append((start, n))
        else:
            start, size = live.pop(n % len(live))
            ff.free(start, size)
            used[start:start + size] = False
        assert ff.free_total == (~used).sum()
        assert all(ff.starts[i] + ff.sizes[i] < ff.starts[i + 1] for i in range(len(ff.starts) - 1))  # merged


def test_a_hand_computed_reserve_max_run():
    r = Requests(np.array([2, 1]), np.array([3, 1]), max_len=8)
    s = simulate(r, "reserve_max", capacity_tokens=8)
    # request 1 waits while request 0 grows 2 -> 3, 4, 5 tokens in its 8-slot reservation
    assert (s.held, s.reserved, s.capacity, s.steps, s.completed) == (12, 24, 24, 4, 2)
    assert s.timeline["held"].tolist() == [3, 4, 5, 2]
    assert s.waste == pytest.approx(0.5)


def test_a_hand_computed_paged_run():
    r = Requests(np.array([3, 1]), np.array([3, 1]), max_len=6)
    s = simulate(r, "paged", capacity_tokens=8, block_size=4)  # 2 blocks; watermark 1 block
    # request 0 needs ⌈(3+1)/4⌉ = 1 block; request 1 must leave 1 block free, so it waits.
    assert s.timeline["reserved"].tolist()[:3] == [4, 8, 8]
    assert s.timeline["held"].tolist()[:3] == [4, 5, 6]


@pytest.fixture(scope="module")
def results():
    requests = sharegpt_like(400, seed=0)
    return {p: simulate(requests, p, capacity_tokens=16384) for p in POLICIES}


def test_every_request_finishes_and_memory_is_consistent(results):
    for s in results.values():
        assert s.completed == 400
        t = s.timeline
        assert (t["held"] <= t["reserved"]).all() and (t["reserved"] <= s.capacity_tokens).all()
        assert t["running"].max() == s.max_concurrent
        assert 0 < s.utilisation <= 1 and 0 <= s.waste < 1


def test_paging_wastes_under_four_percent_and_runs_the_most_sequences(results):
    waste = {p: s.waste for p, s in results.items()}
    assert waste["paged"] < 0.04
    assert waste["reserve_max"] > waste["pow2"] > waste["exact"] > waste["paged"]
    assert results["reserve_max"].max_concurrent == 16384 // 2048
    assert results["paged"].max_concurrent > results["exact"].max_concurrent > results["reserve_max"].max_concurrent
    assert results["paged"].steps < results["exact"].steps < results["reserve_max"].steps
    assert results["exact"].external > 0 and results["paged"].external == 0


def test_paged_policy_returns_every_block_of_a_given_allocator():
    alloc = BlockAllocator(512, 16)
    s = simulate(sharegpt_like(100, seed=2), "paged", capacity_tokens=512 * 16, allocator=alloc)
    assert s.completed == 100 and alloc.num_free_blocks == 512


def test_bad_arguments():
    r = sharegpt_like(10)
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate(r, "buddy")
    with pytest.raises(ValueError, match="max_len"):
        simulate(r, "paged", capacity_tokens=100)
    with pytest.raises(ValueError):
        sharegpt_like(0)


def test_recomputed_tokens_count_readmissions():
    from inferbook.fragmentation import sharegpt_like, simulate

    requests = sharegpt_like(300, seed=1)
    for policy in ("reserve_max", "exact", "paged"):
        r = simulate(requests, policy, capacity_tokens=8192, block_size=16)
        if r.preemptions == 0:
            assert r.recomputed_tokens == 0
        else:  # each readmission re-prefills at least its whole prompt
            assert r.recomputed_tokens >= r.preemptions * int(requests.prompt_lens.min())
    paged = simulate(requests, "paged", capacity_tokens=8192, block_size=16)
    assert paged.preemptions > 0 and paged.recomputed_tokens > 0


# Numbers of the if-per-policy simulator before the policy objects (commit ab96a28), on one
# workload: the refactor must keep every total. sharegpt_like(200, seed=3), 8192 tokens, blocks of 16.
PINNED = {
    "reserve_max": dict(steps=17029, held=30123894, reserved=134430720, capacity=134430720, external=0,
                        preemptions=0, recomputed_tokens=0, max_concurrent=4),
    "pow2": dict(steps=9966, held=29591693, reserved=68664320, capacity=76627968, external=4592128,
                 preemptions=0, recomputed_tokens=0, max_concurrent=15),
    "exact": dict(steps=7937, held=29386192, reserved=48540695, capacity=59637760, external=10459352,
                  preemptions=0, recomputed_tokens=0, max_concurrent=20),
    "paged": dict(steps=4056, held=27388316, reserved=27856384, capacity=28459008, external=0,
                  preemptions=259, recomputed_tokens=50643, max_concurrent=54),
}


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_objects_keep_the_results(policy):
    from inferbook.fragmentation import SCHEMES

    assert set(SCHEMES) == set(POLICIES)
    r = simulate(sharegpt_like(200, seed=3), policy, capacity_tokens=8192, block_size=16)
    assert {k: getattr(r, k) for k in PINNED[policy]} == PINNED[policy]
    assert r.completed == 200


@pytest.mark.parametrize("call, name", [
    (lambda: sharegpt_like(10, seed=-1), "seed"),
    (lambda: sharegpt_like(10, seed="a"), "seed"),
    (lambda: sharegpt_like(10, max_len=1), "max_len"),
    (lambda: simulate("requests", "paged"), "requests"),
    (lambda: simulate(sharegpt_like(10, max_len=64), "paged", capacity_tokens=64, block_size=64), "block_size"),
    (lambda: simulate(sharegpt_like(10), "exact", capacity_tokens=True), "capacity_tokens"),
    (lambda: simulate(sharegpt_like(10), "exact", max_steps=0), "max_steps"),
    (lambda: Requests(np.array([1, 2]), np.array([1]), max_len=8), "prompt_lens"),
    (lambda: Requests(np.array([1.5]), np.array([1]), max_len=8), "prompt_lens"),
    (lambda: Requests(np.array([0]), np.array([1]), max_len=8), "prompt_lens"),
    (lambda: Requests(np.array([5]), np.array([4]), max_len=8), "max_len"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises((TypeError, ValueError), match=name):
        call()


def test_a_rejected_call_leaves_the_allocator_unchanged():
    alloc = BlockAllocator(64, 16)
    before = alloc.num_free_blocks
    with pytest.raises(ValueError):
        simulate(sharegpt_like(10), "paged", capacity_tokens=100, allocator=alloc)
    assert alloc.num_free_blocks == before
