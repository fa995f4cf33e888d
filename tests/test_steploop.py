"""Tests for inferbook.steploop: vLLM's three scheduling rules on hand-worked examples, the
copy-on-write hand-off to the executor, the scripted executor, and bad input.

Each example's expected rows are worked out by hand in its docstring (block size 4); the
step-for-step comparison with vLLM's own scheduler on random traces is
tests/test_vllm_scheduler.py.
"""

import pytest
import torch
from inferbook import validate
from inferbook.blocks import BlockAllocator, BlockManager, check_invariants
from inferbook.engine import copy_blocks
from inferbook.paged import PagedKVCache
from inferbook.prefix_cache import PrefixCache
from inferbook.sched_trace import schedule_trace
from inferbook.steploop import (
    Request,
    ScheduledStep,
    Scheduler,
    ScriptedExecutor,
    Sequence,
    run,
)


def serve(requests, num_blocks, budget=16, chunked=False, prefix=False, **kw):
    """Serve `requests` on fresh books; return (result, executor log, prefix cache)."""
    books = BlockManager(BlockAllocator(num_blocks, 4))
    cache = PrefixCache(books.allocator) if prefix else None
    sched = Scheduler(books, 4, budget, chunked_prefill=chunked, prefix_cache=cache, **kw)
    executor = ScriptedExecutor()
    result = run(sched, requests, executor)
    check_invariants(books)
    return result, executor.log, cache


def first_row(log, rid):
    """Return (step index, row) of request `rid`'s first row after its last preemption."""
    last_preempt = max([k for k, e in enumerate(log) if rid in e["preempted"]], default=-1)
    return next((k, row) for k, e in enumerate(log) if k > last_preempt for row in e["rows"] if row[0] == rid)


def test_a_prompt_is_admitted_only_when_blocks_for_all_of_it_are_free():
    """Pool of 4 blocks, chunked prefill, 8 tokens a step. A (12-token prompt, 2 new tokens)
    prefills 8 then 4 tokens, taking 3 blocks. At step 1, B (8 tokens: 2 blocks) finds 1 free
    block. With the rule (vLLM's default) B waits until A has finished (step 3) and nobody is
    preempted. Without it, B's first chunk (4 tokens, 1 block) is admitted, and at step 2 A's
    first decode needs that block: B, the newest, is preempted and starts over at step 3."""
    reqs = [Request(0, (1,) * 12, 2), Request(1, (2,) * 8, 1)]
    result, log, _ = serve(reqs, 4, budget=8, chunked=True)
    assert result.preemptions == 0
    assert first_row(log, 1) == (3, (1, 0, 8))
    result, log, _ = serve(reqs, 4, budget=8, chunked=True, reserve_full_prompt=False)
    assert log[1]["rows"] == [(0, 8, 4), (1, 0, 4)]
    assert result.preemptions == 1 and log[2]["preempted"] == [1]
    assert log[2]["rows"] == [(0, 12, 1)]  # a step that preempts admits nobody
    assert first_row(log, 1) == (3, (1, 0, 8))


def test_a_prefix_hit_on_blocks_allocated_earlier_in_the_same_step():
    """A and B have the same 9-token prompt (2 full blocks + 1 token) and arrive together.
    A's 2 full blocks are indexed when A's prefill is scheduled, so B, admitted next in the
    same step, reuses them and computes only its last token."""
    reqs = [Request(0, tuple(range(9)), 1), Request(1, tuple(range(9)), 1)]
    _, log, cache = serve(reqs, 8, prefix=True)
    assert log[0]["rows"] == [(0, 0, 9), (1, 8, 1)]
    assert cache.hit_tokens == 8


def test_a_preempted_request_resumes_on_its_own_cached_blocks():
    """Pool of 4 blocks. A (4-token prompt, 9 new) and B (3-token prompt, 6 new) start together.
    B's first block fills at step 1 with its first generated token and is indexed then. At step
    5 A needs a third block: B is preempted (8 tokens known, 7 computed). When A has finished,
    B resumes on its own first block (4 tokens) and recomputes only the other 4."""
    reqs = [Request(0, (5,) * 4, 9), Request(1, (6,) * 3, 6)]
    result, log, _ = serve(reqs, 4, prefix=True)
    assert log[5]["preempted"] == [1] and result.preemptions == 1
    assert first_row(log, 1) == (9, (1, 4, 4))
    _, log, _ = serve(reqs, 4, prefix=False)
    assert first_row(log, 1) == (9, (1, 0, 8))  # without a prefix cache: everything again


def test_copy_on_write_copies_go_out_with_the_step_and_the_executor_makes_them():
    """A sequence whose partly filled last block is shared (forked behind the scheduler's back)
    gets a private copy when it next writes: the scheduler only reports (src, dst)."""
    books = BlockManager(BlockAllocator(8, 4))
    sched = Scheduler(books, 4, 16)
    seq = Sequence.from_request(Request(0, (1, 2, 3, 4, 5, 6), 3))
    sched.add(seq)
    step = sched.schedule(0.0)
    assert step == [(seq, 6)] and step.copies == []
    sched.complete(step, [7], 1.0)
    books.fork(0, "sibling")  # shares both blocks, the second one holds 2 of 4 tokens
    shared = books.block_table(0)[1]
    step = sched.schedule(1.0)
    assert isinstance(step, ScheduledStep) and step == [(seq, 1)]
    assert len(step.copies) == 1 and step.copies[0][0] == shared
    dst = step.copies[0][1]
    assert books.block_table(0)[1] == dst and books.block_table("sibling")[1] == shared
    cache = PagedKVCache(BlockAllocator(8, 4), 2, 1, 2)
    for pool in (*cache.k_pool, *cache.v_pool):
        pool[shared] = torch.randn(4, 1, 2)
    copy_blocks(cache, step.copies)
    for pool in (*cache.k_pool, *cache.v_pool):
        assert torch.equal(pool[dst], pool[shared])


def test_the_scripted_executor_returns_the_script_and_logs_each_step():
    reqs = [Request(0, (1, 2, 3), 2, 0.0), Request(1, (4,), 3, 2.0)]
    books = BlockManager(BlockAllocator(8, 4))
    executor = ScriptedExecutor({0: [9, 8], 1: [7, 6, 5]})
    result = run(Scheduler(books, 4, 16), reqs, executor)
    assert result.outputs == {0: [9, 8], 1: [7, 6, 5]}
    # step 0: request 0's prompt; step 1: its decode (it finishes); step 2: request 1 arrives
    assert [e["rows"] for e in executor.log] == [[(0, 0, 3)], [(0, 3, 1)], [(1, 0, 1)], [(1, 1, 1)],
                                                 [(1, 2, 1)]]


def test_the_scheduler_takes_block_books_only():
    paged = PagedKVCache(BlockAllocator(4, 4), 1, 1, 1)
    with pytest.raises(validate.ArgumentTypeError, match="cache.blocks"):
        Scheduler(paged)
    with pytest.raises(TypeError, match="BlockManager"):
        Scheduler("books")


@pytest.mark.parametrize("kwargs, match", [
    ({"reserve_full_prompt": "yes"}, "reserve_full_prompt"),
    ({"reserve_full_prompt": 1}, "reserve_full_prompt"),
    ({"chunked_prefill": None}, "chunked_prefill"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
])
def test_bad_scheduler_options_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Scheduler(BlockManager(BlockAllocator(4, 4)), **kwargs)


@pytest.mark.parametrize("outputs, match", [
    ([1, 2], "outputs must be a dict"),
    ({0: [1, -2]}, "outputs"),
    ({0: "ab"}, "outputs"),
])
def test_bad_scripts_are_refused(outputs, match):
    with pytest.raises(ValueError, match=match):
        ScriptedExecutor(outputs)


def test_a_script_shorter_than_a_request_is_refused_before_anything_runs():
    books = BlockManager(BlockAllocator(8, 4))
    sched = Scheduler(books, 4, 16)
    executor = ScriptedExecutor({0: [1, 2], 1: [3]})
    reqs = [Request(0, (1,), 2), Request(1, (2,), 2)]
    with pytest.raises(ValueError, match="request 1: outputs holds 1 scripted tokens"):
        run(sched, reqs, executor)
    with pytest.raises(ValueError, match="request 2: outputs holds none"):
        run(sched, [Request(2, (1,), 1)], executor)
    assert executor.log == [] and executor.now() == 0.0
    assert not sched.waiting and not sched.running and books.allocator.num_used_blocks == 0


TRACE = {"config": {"num_blocks": 8, "block_size": 4, "max_num_seqs": 2, "max_num_batched_tokens": 8,
                    "enable_chunked_prefill": True, "enable_prefix_caching": True,
                    "scheduler_reserve_full_isl": True},
         "requests": [{"request_id": 0, "prompt": [1] * 9, "outputs": [7, 8], "arrival": 0},
                      {"request_id": 1, "prompt": [1] * 9, "outputs": [9], "arrival": 1}]}


def test_schedule_trace_serves_a_trace_written_in_vllms_terms():
    """Request 0 prefills 8 + 1 tokens (chunked); request 1 arrives at step 1 and reuses its two
    full blocks (indexed when step 0 was scheduled)."""
    steps = schedule_trace(TRACE)
    assert steps[0] == {"t": 0, "rows": [[0, 0, 8]], "preempted": []}
    assert steps[1] == {"t": 1, "rows": [[0, 8, 1], [1, 8, 1]], "preempted": []}
    assert steps[2] == {"t": 2, "rows": [[0, 9, 1]], "preempted": []}
    assert len(steps) == 3


@pytest.mark.parametrize("trace, match", [
    ([], "trace must be a dict"),
    ({"config": {"num_blocks": 8}, "requests": []}, "config lacks block_size"),
    ({**TRACE, "requests": "abc"}, "trace requests must be a list"),
    ({**TRACE, "requests": [{"request_id": 0, "prompt": [1]}]}, r"requests\[0\] must be a dict with keys"),
    ({**TRACE, "requests": [{"request_id": 0, "prompt": [1], "outputs": [], "arrival": 0}]}, "outputs"),
])
def test_bad_traces_are_refused_by_name(trace, match):
    with pytest.raises(ValueError, match=match):
        schedule_trace(trace)


def test_the_engine_gives_the_same_tokens_with_same_step_hits_chunks_and_resumed_requests():
    """The engine can follow the rules: a row may read blocks another row writes in the same
    step (a same-step hit), a resumed request reads its own cached blocks; greedy tokens stay
    those of a run without prefix caching (float64)."""
    from inferbook.engine import serve
    from inferbook.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_positions=128, n_embd=16, n_layer=2, n_head=2)).double().eval()
    p = tuple(range(1, 21))
    reqs = [Request(i, p + (i,) * (i % 3), 6) for i in range(5)] + [Request(9, p, 5, 2.0)]
    kw = dict(num_blocks=30, block_size=4, max_num_seqs=8, max_num_batched_tokens=64, clock="steps")
    plain = serve(model, reqs, prefix_caching=False, **kw)
    cached = serve(model, reqs, prefix_caching=True, **kw)
    tight = serve(model, reqs, prefix_caching=True, chunked_prefill=True,
                  **{**kw, "num_blocks": 9, "max_num_batched_tokens": 12})
    assert cached.prefix_hit_rate > 0.5 and tight.preemptions > 0 and tight.prefix_hit_rate > 0.5
    assert cached.outputs == plain.outputs and tight.outputs == plain.outputs


@pytest.mark.parametrize("copies, match", [
    ("ab", "copies must be a list"),
    ([(1, 2, 3)], r"copies\[0\] must be a \(src, dst\) pair"),
    ([(0, 1), (1, 8)], r"copies\[1\]"),
    ([(0, -1)], r"copies\[0\]"),
])
def test_bad_block_copies_are_refused_before_any_is_made(copies, match):
    cache = PagedKVCache(BlockAllocator(8, 4), 1, 1, 2)
    cache.k_pool[0][0] = 1.0
    with pytest.raises(ValueError, match=match):
        copy_blocks(cache, copies)
    assert not cache.k_pool[0][1].any()  # the valid first pair was not copied either


WHEEL = (__import__("pathlib").Path(__file__).resolve().parents[1] / ".venv-vllm" / "lib"
         / "python3.11" / "site-packages" / "vllm")
# steploop's docstring cites these lines of vLLM 0.32.0's wheel for the three rules; each must
# hold the name the docstring says it holds.
CITED = [("config/scheduler.py", 190, "scheduler_reserve_full_isl: bool = True"),
         ("v1/core/sched/scheduler.py", 1270, "full_sequence_must_fit=self.scheduler_reserve_full_isl"),
         ("v1/core/kv_cache_manager.py", 616, "self.coordinator.cache_blocks(request"),
         ("v1/core/sched/scheduler.py", 1593, "request.num_computed_tokens = 0"),
         ("v1/core/sched/scheduler.py", 566, "self.kv_cache_manager.get_computed_blocks(request)")]


def test_the_docstring_says_which_rules_are_options_and_cites_each_one():
    import inferbook.steploop as steploop

    doc = " ".join(steploop.__doc__.split())
    assert "one is an option and two are built in" in doc
    assert "each an option" not in doc
    for path, line, _ in CITED:
        assert f"`{path}` line {line}" in doc or f"same file, line {line}" in doc, (path, line)


@pytest.mark.skipif(not WHEEL.exists(), reason="no vLLM environment (.venv-vllm): run `make vllm`")
@pytest.mark.parametrize("path,line,text", CITED)
def test_the_cited_wheel_lines_hold_what_the_docstring_says(path, line, text):
    assert text in (WHEEL / path).read_text().splitlines()[line - 1]
