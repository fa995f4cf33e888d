"""The book's scheduler is vLLM's: the same (request, start, tokens) at every step, the same
preemptions, on seeded traces, against vLLM 0.32.0's own V1 `Scheduler` driven without a model.

`tools/vllm_ref/drive_scheduler.py` runs vLLM's `Scheduler` (in `.venv-vllm`) on each trace,
with a fake model output that samples the trace's scripted tokens; here `steploop.run` serves
the same trace with a `steploop.ScriptedExecutor` over the same tokens. The random traces cover
chunked prefill, tight pools with preemption (and resumption on the preempted request's own
cached blocks), prefix caching with shared system prompts, exact repeats admitted in one step
and multi-turn chats whose next prompt carries the last reply, `max_num_seqs`,
`max_num_batched_tokens`, and admission with and without `scheduler_reserve_full_isl`. The
named EXAMPLES are the small traces chapters 5 and 6 teach the rules with; their vLLM steps are
committed in outputs/benchmarks/vllm_scheduler.json (`python tests/test_vllm_scheduler.py`
rewrites it), which the chapters read, and a test checks that the JSON is this run's.

Without `.venv-vllm` the comparison FAILS with one line (INFERBOOK_SKIP_VLLM=1 skips it).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import pytest
from inferbook.sched_trace import schedule_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_ref import run_vllm_script

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "outputs" / "benchmarks" / "vllm_scheduler.json"
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


book_steps = schedule_trace  # the steps the book's step loop takes on a trace


def config(num_blocks, budget, chunked, prefix, full=True, max_num_seqs=4, block_size=4):
    return {"num_blocks": num_blocks, "block_size": block_size, "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": budget, "enable_chunked_prefill": chunked,
            "enable_prefix_caching": prefix, "scheduler_reserve_full_isl": full,
            "max_model_len": 4096 if chunked else budget}


def request(rid, prompt, outputs, arrival=0):
    return {"request_id": rid, "prompt": list(prompt), "outputs": list(outputs), "arrival": arrival}


# The chapters' examples (worked by hand in tests/test_steploop.py; block size 4).
EXAMPLES = {
    # ch6: A (12-token prompt) prefills in two chunks of a 4-block pool; B (8 tokens) waits for
    # blocks for its whole prompt, or, without the rule, is admitted and preempted at once.
    "full_prompt_admission": {"config": config(4, 8, chunked=True, prefix=False),
                              "requests": [request(0, [1] * 12, [31, 32]), request(1, [2] * 8, [33])]},
    "first_chunk_admission": {"config": config(4, 8, chunked=True, prefix=False, full=False),
                              "requests": [request(0, [1] * 12, [31, 32]), request(1, [2] * 8, [33])]},
    # ch5: three requests with one 9-token prompt, admitted in one step, hit the first's blocks.
    "same_step_hit": {"config": config(8, 16, chunked=False, prefix=True),
                      "requests": [request(i, range(9), [40 + i]) for i in range(3)]},
    # ch6: B is preempted after its first generated token filled its first block; it resumes
    # on that block.
    "resume_on_own_blocks": {"config": config(4, 16, chunked=False, prefix=True),
                             "requests": [request(0, [5] * 4, range(50, 59)),
                                          request(1, [6] * 3, range(60, 66))]},
}

TRACES = [make_trace(seed, chunked, prefix, full) for seed in SEEDS
          for chunked in (True, False) for prefix in (True, False) for full in (True, False)]


def digest(steps) -> str:
    return hashlib.sha256(json.dumps(steps, sort_keys=True).encode()).hexdigest()


def vllm_answer() -> dict:
    """Return vLLM's steps on the random traces and the examples, and a summary of them."""
    names = list(EXAMPLES)
    answer = run_vllm_script("drive_scheduler", {"traces": TRACES + [EXAMPLES[n] for n in names]},
                             timeout=900.0)
    steps = [t["steps"] for t in answer["traces"]]
    random_steps = steps[:len(TRACES)]
    return {
        "vllm": answer["vllm"],
        "random": {"traces": len(TRACES), "steps": sum(map(len, random_steps)),
                   "traces_with_preemptions": sum(any(s["preempted"] for s in t) for t in random_steps),
                   "preemptions": sum(len(s["preempted"]) for t in random_steps for s in t),
                   "steps_sha256": digest(random_steps)},
        "examples": {n: {"trace": EXAMPLES[n], "vllm_steps": st}
                     for n, st in zip(names, steps[len(TRACES):])},
        "random_steps": random_steps,
    }


@pytest.fixture(scope="module")
def vllm():
    return vllm_answer()


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


def test_every_step_matches_vllm(vllm):
    """Same rows (request, start position, tokens) in the same order and the same preemptions,
    step for step, on every trace and every example."""
    assert vllm["vllm"].startswith("0.32.0")
    pairs = [(f"trace {i}", t, theirs) for i, (t, theirs) in enumerate(zip(TRACES, vllm["random_steps"]))]
    pairs += [(name, e["trace"], e["vllm_steps"]) for name, e in vllm["examples"].items()]
    compared = 0
    for name, trace, theirs in pairs:
        ours = book_steps(trace)
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert a == b, f"{name} ({trace['config']}): step {k} differs:\n book {a}\n vLLM {b}"
        assert len(ours) == len(theirs), f"{name}: {len(ours)} steps in the book, {len(theirs)} in vLLM"
        compared += len(ours)
    print(f"{len(pairs)} traces, {compared} steps compared, all equal")
    assert vllm["random"]["steps"] > 1000


def test_the_examples_show_their_rules(vllm):
    ex = {n: e["vllm_steps"] for n, e in vllm["examples"].items()}
    assert not any(s["preempted"] for s in ex["full_prompt_admission"])
    assert any(s["preempted"] for s in ex["first_chunk_admission"])
    assert [row[1] for row in ex["same_step_hit"][0]["rows"]] == [0, 8, 8]
    resumed = [row for s in ex["resume_on_own_blocks"][6:] for row in s["rows"] if row[0] == 1]
    assert resumed[0][1] == 4


def test_the_committed_json_is_this_run(vllm):
    committed = json.loads(COMMITTED.read_text())
    assert committed["random"] == vllm["random"]
    assert committed["examples"] == vllm["examples"]
    assert committed["vllm"] == vllm["vllm"]


if __name__ == "__main__":  # rerun vLLM's scheduler on every trace and write the committed JSON
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_util

    result = vllm_answer()
    del result["random_steps"]
    result = {"benchmark": "vllm_scheduler",
              "question": "Does the book's step loop schedule exactly what vLLM's V1 scheduler does?",
              **result, "versions": bench_util.versions(vllm=result["vllm"])}
    path = bench_util.write_result(COMMITTED, result)
    print(f"wrote {path}: {result['random']['traces']} traces, {result['random']['steps']} steps")
