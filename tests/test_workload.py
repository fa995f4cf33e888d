"""Tests for inferbook.workload: the serving chapters' request generators, in one module."""

import numpy as np
import pytest

from inferbook import workload as W
from inferbook.steploop import Request


def test_mixed_workload_lengths_and_offline_arrivals():
    reqs = W.mixed_workload(200, vocab=50, prompt_len=(4, 9), mean_output=5, max_output=12, seed=1)
    assert [r.request_id for r in reqs] == list(range(200))
    assert all(4 <= len(r.prompt) <= 9 and 1 <= r.max_new_tokens <= 12 for r in reqs)
    assert all(r.arrival_time == 0 for r in reqs)
    assert all(0 <= t < 50 for r in reqs for t in r.prompt)
    assert 3 < np.mean([r.max_new_tokens for r in reqs]) < 7
    assert reqs == W.mixed_workload(200, vocab=50, prompt_len=(4, 9), mean_output=5, max_output=12, seed=1)


def test_mixed_workload_slices_given_prompts_and_poisson_arrivals():
    text = list(range(100))
    reqs = W.mixed_workload(300, prompts=[text], prompt_len=(5, 5), rate=10.0, seed=2)
    for r in reqs:
        start = r.prompt[0]
        assert list(r.prompt) == text[start:start + 5]
    gaps = np.diff([0.0] + [r.arrival_time for r in reqs])
    assert (gaps >= 0).all() and 0.08 < gaps.mean() < 0.12


def test_mixed_workload_draws_the_documented_distribution():
    # Geometric on {1, 2, ...} (not 1 + a geometric from 1): the smallest reply is 1 token, the
    # mean before the cap is mean_output, and the capped mean is capped_geometric_mean's.
    reqs = W.mixed_workload(40_000, vocab=50, mean_output=24, max_output=96, seed=3)
    lens = np.array([r.max_new_tokens for r in reqs])
    assert lens.min() == 1 and lens.max() == 96
    capped = W.capped_geometric_mean(24, 96)
    se = lens.std() / np.sqrt(lens.size)
    assert abs(lens.mean() - capped) < 4 * se
    assert abs(lens.mean() - 24.0) > 4 * se  # the cap moves the mean measurably
    # P(L = 1) = p, as NumPy's geometric counts the trial of the first success
    assert abs(np.mean(lens == 1) - 1 / 24) < 4 * np.sqrt((1 / 24) * (23 / 24) / lens.size)


def test_capped_geometric_mean_closed_form():
    # the chapter's workload: 24 * (1 - (23/24)^96), about 23.6 tokens
    assert W.capped_geometric_mean(24, 96) == pytest.approx(24 * (1 - (23 / 24) ** 96), rel=1e-15)
    assert round(W.capped_geometric_mean(24, 96), 1) == 23.6
    # exact against the sum of the truncated distribution
    p, m = 1 / 5, 7
    exact = sum(j * p * (1 - p) ** (j - 1) for j in range(1, m)) + m * (1 - p) ** (m - 1)
    assert W.capped_geometric_mean(5, 7) == pytest.approx(exact, rel=1e-12)
    assert W.capped_geometric_mean(1, 10) == 1.0  # p = 1: every reply is one token
    assert W.capped_geometric_mean(24, 1) == pytest.approx(1.0, rel=1e-14)  # a cap of 1


def test_fixed_workload_exact_lengths_shared_prefix_and_no_accidental_hits():
    reqs = W.fixed_workload(50, 32, 7, rate=4.0, seed=0, shared_prefix_tokens=16)
    assert all(len(r.prompt) == 32 and r.max_new_tokens == 7 for r in reqs)
    assert len({r.prompt[:16] for r in reqs}) == 1
    assert len({r.prompt[16] for r in reqs}) == 50
    times = [r.arrival_time for r in reqs]
    assert times == sorted(times) and times[0] > 0


def test_poisson_arrivals_retimes_the_same_requests():
    reqs = W.fixed_workload(400, 4, 2)
    timed = W.poisson_arrivals(reqs, rate=2.0, seed=3)
    assert [r.prompt for r in timed] == [r.prompt for r in reqs]
    assert np.mean(np.diff([r.arrival_time for r in timed])) == pytest.approx(0.5, rel=0.15)


def test_agent_workload_turns_extend_the_conversation():
    reqs = W.agent_workload(n_conversations=3, turns=2, system_tokens=10, tools_tokens=5, seed=0)
    assert len(reqs) == 6
    first, later = reqs[0], reqs[3]  # conversation 0, turns 1 and 2
    assert later[0][:len(first[0]) + len(first[1])] == first[0] + first[1]
    assert all(p[:15] == reqs[0][0][:15] for p, _ in reqs)


def test_the_simulator_does_not_pass_the_generators_through():
    """Chapter 9 imports the generators from here: `simulate` and `capacity` re-export none."""
    from inferbook import capacity, simulate
    for name in ("fixed_workload", "poisson_arrivals", "mixed_workload"):
        assert not hasattr(simulate, name), name
    assert capacity.fixed_workload is W.fixed_workload  # what the capacity search draws


@pytest.mark.parametrize("call, match", [
    (lambda: W.mixed_workload(3), "exactly one"),
    (lambda: W.mixed_workload(3, vocab=10, prompts=[[1]]), "exactly one"),
    (lambda: W.mixed_workload(-1, vocab=10), "n_requests"),
    (lambda: W.mixed_workload(3, vocab=10, prompt_len=(5, 2)), "prompt_len"),
    (lambda: W.mixed_workload(3, vocab=10, prompt_len=5), "prompt_len"),
    (lambda: W.mixed_workload(3, vocab=10, rate=0), "rate"),
    (lambda: W.mixed_workload(3, vocab=10, rate=float("inf")), "rate"),
    (lambda: W.mixed_workload(3, prompts=[]), "prompts"),
    (lambda: W.mixed_workload(3, vocab=10, seed=-1), "seed"),
    (lambda: W.fixed_workload(0, 4, 4), "n_requests"),
    (lambda: W.fixed_workload(2, 4, 0), "output_tokens"),
    (lambda: W.fixed_workload(2, 4, 4, shared_prefix_tokens=5), "shared_prefix_tokens"),
    (lambda: W.fixed_workload(2, 4, 4, rate=-1.0), "rate"),
    (lambda: W.fixed_workload(2, 4.0, 4), "prompt_tokens"),
    (lambda: W.poisson_arrivals([Request(0, (1,), 1)], rate=None), "rate"),
    (lambda: W.poisson_arrivals([(1,)], rate=1.0), r"requests\[0\]"),
    (lambda: W.agent_workload(user_tokens=(5, 1)), "user_tokens"),
    (lambda: W.agent_workload(vocab=0), "vocab"),
    (lambda: W.capped_geometric_mean(0.5, 96), "mean_output"),
    (lambda: W.capped_geometric_mean(float("nan"), 96), "mean_output"),
    (lambda: W.capped_geometric_mean(24, 0), "max_output"),
    (lambda: W.capped_geometric_mean(24, 9.5), "max_output"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
