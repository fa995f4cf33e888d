"""Tests for inferbook.engine: batching never changes greedy outputs; the scheduler keeps its limits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.blocks import check_invariants
from inferbook.decode import generate_cached
from inferbook.engine import Engine, forward_batch, serve
from inferbook.gpt import GPT, GPTConfig
from inferbook.paged import PagedKVCache
from inferbook.steploop import Request
from inferbook.workload import mixed_workload

VOCAB = 50


@pytest.fixture(scope="module")
def model() -> GPT:
    """A random float64 GPT with weights scaled up so its argmax is not near-uniform noise."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=4))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(10)
    return m.double().eval()


def reference(model, requests):
    return {r.request_id: generate_cached(model, torch.tensor([r.prompt]), r.max_new_tokens)
            .tokens[0, len(r.prompt):].tolist() for r in requests}


@pytest.fixture(scope="module")
def workload(model):
    requests = mixed_workload(12, vocab=VOCAB, prompt_len=(4, 40), mean_output=12, max_output=40, seed=1)
    return requests, reference(model, requests)


CONFIGS = {
    "continuous": dict(),
    "static": dict(policy="static"),
    "one_at_a_time": dict(max_num_seqs=1),
    "tight_pool_preempts": dict(num_blocks=12, block_size=8),
    "chunked_prefill": dict(chunked_prefill=True, max_num_batched_tokens=16),
    "prefix_caching": dict(prefix_caching=True, block_size=4),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_outputs_equal_single_request_decoding(model, workload, name):
    requests, expected = workload
    kwargs = dict(num_blocks=64, block_size=16, clock="steps") | CONFIGS[name]
    engine = Engine(model, **kwargs)
    result = engine.run(requests)
    assert result.outputs == expected
    assert all(len(result.outputs[r.request_id]) == r.max_new_tokens for r in requests)
    # every block is back on the free list (cached prefix blocks stay indexed but free)
    assert engine.cache.allocator.num_free_blocks == engine.cache.allocator.num_blocks
    check_invariants(engine.cache)
    if name == "tight_pool_preempts":
        assert result.preemptions > 0
        assert max(s.blocks_used for s in result.timeline) <= 12


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), max_num_seqs=st.integers(1, 6), num_blocks=st.integers(10, 40),
       chunked=st.booleans(), policy=st.sampled_from(["continuous", "static"]))
def test_any_batching_gives_the_same_tokens(model, seed, max_num_seqs, num_blocks, chunked, policy):
    requests = mixed_workload(5, vocab=VOCAB, prompt_len=(1, 20), mean_output=6, max_output=20,
                              rate=0.5, seed=seed)
    budget = 8 if chunked else 24  # chunked: prompts (up to 20 tokens) are split into chunks
    result = serve(model, requests, num_blocks=num_blocks, block_size=4, max_num_seqs=max_num_seqs,
                   max_num_batched_tokens=budget, chunked_prefill=chunked, policy=policy, clock="steps")
    assert result.outputs == reference(model, requests)
    assert max(s.running for s in result.timeline) <= max_num_seqs
    if chunked:
        assert max(s.prefill_tokens + s.decode_tokens for s in result.timeline) <= budget


def test_shared_prefix_is_reused_and_outputs_unchanged(model):
    shared = list(range(1, 25))
    requests = [Request(i, tuple(shared + [30 + i, 31, 32]), 5, arrival_time=2.0 * i) for i in range(4)]
    result = serve(model, requests, num_blocks=40, block_size=4, prefix_caching=True, clock="steps")
    assert result.outputs == reference(model, requests)
    assert result.prefix_hit_rate > 0.5  # 24 of 27 prompt tokens cached for requests 1..3


def test_static_batching_admits_only_into_an_empty_batch(model, workload):
    requests, _ = workload
    result = serve(model, requests, num_blocks=64, max_num_seqs=4, policy="static", clock="steps")
    running = [s.running for s in result.timeline]
    for before, after in zip(running, running[1:]):
        assert after <= before or before == 0
    assert sum(s.padding_rows for s in result.timeline) > 0  # finished rows kept as padding
    ends = {m.e2e for m in result.metrics}
    assert len(ends) == 3  # 12 requests, 4 per batch: three batches, each returned at its end
    continuous = serve(model, requests, num_blocks=64, max_num_seqs=4, clock="steps")
    assert sum(s.padding_rows for s in continuous.timeline) == 0
    assert continuous.steps < result.steps
    assert continuous.throughput > result.throughput


def test_forward_batch_matches_the_model_on_ragged_chunks(model):
    """Three sequences: a fresh prompt, a chunk starting mid-sequence, a one-token decode."""
    torch.manual_seed(1)
    seqs = [torch.randint(0, VOCAB, (n,)).tolist() for n in (7, 19, 12)]
    cache = PagedKVCache.for_model(model.config, num_blocks=20, block_size=4, dtype=torch.float64)
    done = [0, 11, 11]  # tokens already in the cache for each sequence
    for i, (toks, d) in enumerate(zip(seqs, done)):
        cache.blocks.add_sequence(i)
        if d:
            cache.append_slots(i, d)
            forward_batch(model, cache, [(i, toks[:d], 0)])
        cache.append_slots(i, len(toks) - d)
    logits = forward_batch(model, cache, [(i, toks[d:], d) for i, (toks, d) in enumerate(zip(seqs, done))])
    with torch.inference_mode():
        expected = torch.stack([model(torch.tensor([t]))[0, -1] for t in seqs])
    torch.testing.assert_close(logits, expected, rtol=1e-10, atol=1e-10)


def test_metrics_in_steps_for_a_single_request(model):
    result = serve(model, [Request(0, (1, 2, 3), 5, arrival_time=3)], num_blocks=8, clock="steps")
    m = result.metrics[0]
    # idle steps 0..2, prefill at step 3 ends at 4 (first token), 4 decodes end at step 8
    assert (m.ttft, m.e2e, m.tpot, m.output_tokens) == (1, 5, 1, 5)
    assert result.makespan == 5 and result.throughput == 1


def test_invalid_configuration_and_requests_raise(model):
    with pytest.raises(ValueError, match="policy"):
        Engine(model, num_blocks=8, policy="fifo")
    with pytest.raises(ValueError, match="clock"):
        Engine(model, num_blocks=8, clock="gpu")
    with pytest.raises(ValueError, match="at least one token"):
        Request(0, (), 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        Request(0, (1,), 0)
    with pytest.raises(ValueError, match="n_positions"):
        serve(model, [Request(0, (1,) * 100, 40)], num_blocks=64)
    with pytest.raises(ValueError, match="KV blocks"):
        serve(model, [Request(0, (1,) * 40, 10)], num_blocks=2, block_size=4)
    with pytest.raises(ValueError, match="unique"):
        serve(model, [Request(0, (1,), 2), Request(0, (2,), 2)], num_blocks=8)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        serve(model, [Request(0, (1,) * 40, 2)], num_blocks=8, max_num_batched_tokens=16)


def test_metrics_carry_itl_and_a_summary(model):
    reqs = [Request(i, (1, 2, 3), 4, arrival_time=float(i)) for i in range(3)]
    result = serve(model, reqs, num_blocks=16, clock="steps")
    for m in result.metrics:
        assert len(m.itl) == m.output_tokens - 1 and all(g >= 1 for g in m.itl)
        assert m.tpot == pytest.approx(sum(m.itl) / len(m.itl))
    s = result.summary()
    assert s["completed"] == 3 and s["total_output_tokens"] == 12
    assert s["output_throughput"] == pytest.approx(result.throughput)
    assert s["p90_ttft"] == result.percentile("ttft", 90)


def test_bad_requests_and_cache_are_refused(model):
    with pytest.raises(TypeError, match="Request"):
        serve(model, [(0, (1,), 2)], num_blocks=8)
    with pytest.raises(TypeError, match="single Request"):
        serve(model, Request(0, (1,), 2), num_blocks=8)
    with pytest.raises(ValueError, match="vocabulary"):
        serve(model, [Request(0, (VOCAB,), 2)], num_blocks=8)
    with pytest.raises(TypeError, match="cache"):
        from inferbook.steploop import Scheduler
        Scheduler("cache")
    with pytest.raises(TypeError, match="model"):
        Engine("gpt2", num_blocks=8)


def test_a_second_run_of_one_engine_counts_only_its_own_preemptions(model):
    eng = Engine(model, num_blocks=5, block_size=4, max_num_seqs=4, clock="steps")
    reqs = [Request(i, (1, 2, 3, 4, 5), 8) for i in range(4)]
    first = eng.run(reqs)
    second = eng.run(reqs)
    assert first.preemptions > 0 and second.preemptions == first.preemptions
    assert second.outputs == first.outputs
