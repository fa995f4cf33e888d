"""The book's scheduler is vLLM's: the same (request, start, tokens) at every step, the same
preemptions, on seeded traces, against vLLM 0.32.0's own V1 `Scheduler` driven without a model.

`tools/vllm_ref/drive_scheduler.py` runs vLLM's `Scheduler` (in `.venv-vllm`) on each trace,
with a fake model output that samples the trace's scripted tokens; here `steploop.run` serves
the same trace with a `steploop.ScriptedExecutor` over the same tokens. The traces cover
chunked prefill, tight pools with preemption (and resumption on the preempted request's own
cached blocks), prefix caching with shared system prompts, exact repeats admitted in one step
and multi-turn chats whose next prompt carries the last reply, `max_num_seqs`,
`max_num_batched_tokens`, and admission with and without `scheduler_reserve_full_isl`.
"""

from __future__ import annotations

import random

import pytest

from inferbook.blocks import BlockAllocator, BlockManager
from inferbook.prefix_cache import PrefixCache
from inferbook.steploop import Request, Scheduler, ScriptedExecutor, run

from vllm_ref import run_vllm_script

SEEDS = range(6)


def make_trace(seed: int, chunked: bool, prefix: bool, reserve_full: bool) -> dict:
    """Return a seeded trace: a scheduler config and requests with scripted outputs."""
    rng = random.Random(seed * 8 + 4 * chunked + 2 * prefix + reserve_full)
    block_size = rng.choice([4, 8, 16])
    max_num_seqs = rng.choice([2, 3, 4, 8])
    systems = [[rng.randrange(1, 900) for _ in range(rng.randrange(1, 4) * block_size + rng.randrange(3))]
               for _ in range(2)]
    requests, t, last = [], 0, None
    for i in range(rng.randrange(8, 16)):
        kind = rng.random()
        if prefix and last is not None and kind < 0.15:
            prompt = list(last["prompt"])  # an exact repeat, often in the same step
        elif prefix and last is not None and kind < 0.3:
            prompt = last["prompt"] + last["outputs"] + [rng.randrange(1, 900)
                                                         for _ in range(rng.randrange(1, 9))]
        else:
            head = rng.choice(systems) if prefix and kind < 0.75 else []
            prompt = head + [rng.randrange(1, 900) for _ in range(rng.randrange(1, 3 * block_size + 8))]
        outputs = [rng.randrange(1, 900) for _ in range(rng.randrange(1, 3 * block_size))]
        t += rng.choice([0, 0, 1, 1, 2, 5])
        last = {"request_id": i, "prompt": prompt, "outputs": outputs, "arrival": t}
        requests.append(last)
    longest = max(len(r["prompt"]) + len(r["outputs"]) for r in requests)
    if chunked:
        budget = rng.choice([max_num_seqs, 16, 32, 64])
        budget = max(budget, max_num_seqs)
        max_model_len = 4096
    else:  # vLLM needs max_model_len <= max_num_batched_tokens without chunked prefill
        budget = max_model_len = longest + rng.choice([0, 8, 40])
    need = -(-(longest - 1) // block_size)  # the longest request alone
    num_blocks = need + rng.choice([0, 1, 2, 4, need])  # tight: preemptions
    return {"config": {"num_blocks": num_blocks, "block_size": block_size,
                       "max_num_seqs": max_num_seqs, "max_num_batched_tokens": budget,
                       "enable_chunked_prefill": chunked, "enable_prefix_caching": prefix,
                       "scheduler_reserve_full_isl": reserve_full, "max_model_len": max_model_len},
            "requests": requests}


def book_steps(trace: dict) -> list[dict]:
    """Return the steps the book's step loop takes on `trace`."""
    cfg = trace["config"]
    books = BlockManager(BlockAllocator(cfg["num_blocks"], cfg["block_size"]))
    prefix = PrefixCache(books.allocator) if cfg["enable_prefix_caching"] else None
    sched = Scheduler(books, cfg["max_num_seqs"], cfg["max_num_batched_tokens"],
                      chunked_prefill=cfg["enable_chunked_prefill"], prefix_cache=prefix,
                      reserve_full_prompt=cfg["scheduler_reserve_full_isl"])
    requests = [Request(r["request_id"], tuple(r["prompt"]), len(r["outputs"]), r["arrival"])
                for r in trace["requests"]]
    executor = ScriptedExecutor({r["request_id"]: r["outputs"] for r in trace["requests"]})
    result = run(sched, requests, executor)
    for r in trace["requests"]:
        assert result.outputs[r["request_id"]] == r["outputs"]
    return [{"t": e["t"], "rows": [list(row) for row in e["rows"]], "preempted": sorted(e["preempted"])}
            for e in executor.log]


TRACES = [make_trace(seed, chunked, prefix, full) for seed in SEEDS
          for chunked in (True, False) for prefix in (True, False) for full in (True, False)]


@pytest.fixture(scope="module")
def vllm_steps():
    answer = run_vllm_script("drive_scheduler", {"traces": TRACES}, timeout=900.0)
    assert answer["vllm"].startswith("0.32.0")
    return [t["steps"] for t in answer["traces"]]


def test_the_traces_exercise_every_rule():
    """The traces are not trivially easy: they preempt, chunk, hit the prefix cache."""
    steps = [book_steps(t) for t in TRACES]
    assert sum(any(s["preempted"] for s in trace) for trace in steps) >= 8
    chunked = [s for t, trace in zip(TRACES, steps) if t["config"]["enable_chunked_prefill"] for s in trace]
    assert any(start > 0 and n > 1 for s in chunked for _, start, n in s["rows"])  # a later chunk
    cached = [(t, trace) for t, trace in zip(TRACES, steps) if t["config"]["enable_prefix_caching"]]
    first_starts = [next(start for s in trace for rid, start, _ in s["rows"] if rid == r["request_id"])
                    for t, trace in cached for r in t["requests"]]
    assert sum(start > 0 for start in first_starts) >= 20  # admitted on a prefix hit


def test_every_step_matches_vllm(vllm_steps):
    """Same rows (request, start position, tokens) in the same order and the same preemptions,
    step for step, on every trace."""
    compared = 0
    for i, (trace, theirs) in enumerate(zip(TRACES, vllm_steps)):
        ours = book_steps(trace)
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert a == b, (f"trace {i} ({trace['config']}): step {k} differs:\n book {a}\n vLLM {b}")
        assert len(ours) == len(theirs), f"trace {i}: {len(ours)} steps in the book, {len(theirs)} in vLLM"
        compared += len(ours)
    print(f"{len(TRACES)} traces, {compared} steps compared, all equal")
    assert compared > 1000
