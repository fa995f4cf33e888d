"""The serving loop, written once: requests, the scheduler, and the step loop (torch-free).

A serving engine repeats one step: admit the requests that have arrived, let the scheduler pick
how many tokens each sequence computes (iteration-level scheduling, Orca), execute the step,
apply its results. `run(scheduler, requests, executor)` is that loop; what differs between the
book's engine and its simulator is only the *step executor*:

* `engine.ModelExecutor` runs the model over the scheduled tokens and reads a clock;
* `simulate.CostExecutor` charges the cost model's time for the step on a simulated clock.

So the engine and the simulator take identical scheduling steps by construction.

* `Request` (prompt, max_new_tokens, arrival time) becomes a `Sequence` that the loop owns.
* `Scheduler.schedule(now)` picks, at every step, how many tokens each sequence computes, with
  vLLM V1's rules (checked step by step against vLLM 0.32.0's own `Scheduler` in
  `tests/test_vllm_scheduler.py`): first the running sequences, oldest first (one decode token,
  or the next prefill chunk), then waiting requests in arrival order while `max_num_seqs`,
  `max_num_batched_tokens` and free KV blocks allow. The scheduler touches only the block books
  (`blocks.BlockManager`): it asks them what a request costs (`can_admit`, `can_append`) and
  hands the copy-on-write block copies they ask for to the executor with the step
  (`ScheduledStep.copies`), as nano-vllm's scheduler never touches a tensor. When a running
  sequence needs a block and none is free, the most recently admitted sequence is preempted:
  its blocks are freed and it is re-queued at the front, to be recomputed later (preemption by
  recompute); a step that preempted admits nobody. Three rules of vLLM's, of which one is an
  option and two are built in (paths below are in vLLM 0.32.0's wheel, `vllm/...`):
  - `reserve_full_prompt` (an option, on by default as in vLLM): admit a prompt only when blocks
    for all of it are free (`scheduler_reserve_full_isl`, `config/scheduler.py` line 190, passed
    as `full_sequence_must_fit` in `v1/core/sched/scheduler.py` line 1270);
  - built in, with a prefix cache: every block is indexed as soon as the step that fills it is
    scheduled (vLLM hashes at allocation: `allocate_slots` calls `cache_blocks`,
    `v1/core/kv_cache_manager.py` line 616), so a request admitted later in the *same* step hits
    it;
  - built in, with a prefix cache: a preempted request resumes on its own cached blocks. vLLM's
    `_preempt_request` frees them into the evictable pool with their hashes and sets
    `num_computed_tokens = 0` (`v1/core/sched/scheduler.py` line 1593); when the request is
    scheduled again, `get_computed_blocks` (same file, line 566) finds the blocks that were not
    evicted meanwhile, and only the rest is recomputed.

  `policy="static"` admits only into an empty batch and waits for the whole batch to finish.
* `ScriptedExecutor` is a step executor without a model: it counts steps and returns scripted
  tokens, so the scheduler's decisions can be shown (and compared with vLLM's) on their own.
* `run` returns an `EngineResult`: outputs, per-request `metrics.RequestMetrics` (TTFT, TPOT,
  ITL, end-to-end latency) and a per-step timeline (`StepRecord`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np

from . import validate
from .arith import ceil_div
from .blocks import BlockManager
from .metrics import RequestMetrics, percentile, summary


@dataclass(frozen=True)
class Request:
    """A generation request: `prompt` token ids, `max_new_tokens`, `arrival_time` (s, or steps)."""

    request_id: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_time: float = 0.0

    def __post_init__(self) -> None:
        validate.integer("request_id", self.request_id)
        if not isinstance(self.prompt, (str, bytes)) and np.ndim(self.prompt) > 1:
            raise ValueError(f"prompt must be one sequence of token ids, got {np.ndim(self.prompt)} axes")
        prompt = tuple(validate.int_list("prompt", self.prompt, minimum=0))
        if not prompt:
            raise ValueError(f"request {self.request_id}: the prompt needs at least one token")
        object.__setattr__(self, "prompt", prompt)
        validate.positive_int("max_new_tokens", self.max_new_tokens)
        validate.finite_float("arrival_time", self.arrival_time, minimum=0.0)


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """A request inside the engine. `tokens` = prompt + generated; the cache holds `num_computed` of them."""

    request: Request
    tokens: list[int]
    status: Status = Status.WAITING
    num_computed: int = 0
    num_preemptions: int = 0
    done: bool = False  # all tokens generated, but still holding a slot of a static batch
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)

    @classmethod
    def from_request(cls, request: Request) -> "Sequence":
        if not isinstance(request, Request):
            raise TypeError(f"request must be a steploop.Request, got {type(request).__name__}")
        return cls(request, list(request.prompt))

    @property
    def seq_id(self) -> int:
        return self.request.request_id

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.request.prompt):]

    @property
    def num_to_compute(self) -> int:
        """Tokens whose keys/values are not in the cache yet (the last one gives the next logits)."""
        return len(self.tokens) - self.num_computed


class ScheduledStep(list):
    """One step's schedule: a list of (sequence, tokens to compute) rows, in vLLM's order (running
    sequences first, then admitted ones), with what the executor needs besides the rows.

    `copies`: the copy-on-write block copies, (src, dst), the executor makes before the step runs
    (the scheduler keeps only the books; the tensors are the executor's). `preempted`: ids of
    the sequences this step preempted, in order.
    """

    def __init__(self, rows=(), copies=(), preempted=()):
        super().__init__(rows)
        self.copies: list[tuple[int, int]] = list(copies)
        self.preempted: list = list(preempted)


class Scheduler:
    """Decides, each step, which sequences run and how many tokens each computes.

    `cache`: the block books, a `blocks.BlockManager` (an engine passes its paged cache's books,
    `PagedKVCache.blocks`, and applies the step's copies to its tensors).
    `max_num_seqs`: most sequences in the running batch (vLLM's `max_num_seqs`).
    `max_num_batched_tokens`: most tokens computed in one step (vLLM's `max_num_batched_tokens`).
    `policy`: "continuous" (admit whenever there is room; a finished sequence leaves at once) or
    "static" (admit only into an empty batch; a finished sequence keeps its row, computed and
    discarded like a padding row, and its blocks until the whole batch is done, as in a padded
    `generate()` call). `chunked_prefill`: split a prompt that does not fit the step's token budget.
    `prefix_cache`: a `prefix_cache.PrefixCache` on the same allocator (or None).
    `reserve_full_prompt`: admit a request only when blocks for all its tokens are free, not
    only for its first chunk (vLLM's `scheduler_reserve_full_isl`, on by default; it keeps chunked
    prefill from admitting prompts that would preempt each other half-way).
    """

    def __init__(self, cache, max_num_seqs: int = 16, max_num_batched_tokens: int = 512,
                 policy: str = "continuous", chunked_prefill: bool = False, prefix_cache=None,
                 reserve_full_prompt: bool = True):
        if not isinstance(cache, BlockManager):
            hint = (" (pass its books, cache.blocks, and apply each step's copies to the tensors)"
                    if isinstance(getattr(cache, "blocks", None), BlockManager) else "")
            raise validate.ArgumentTypeError(f"cache must be a blocks.BlockManager, got "
                                             f"{type(cache).__name__}{hint}")
        validate.one_of("policy", policy, ("continuous", "static"))
        validate.positive_int("max_num_seqs", max_num_seqs)
        validate.positive_int("max_num_batched_tokens", max_num_batched_tokens)
        for name, flag in (("chunked_prefill", chunked_prefill),
                           ("reserve_full_prompt", reserve_full_prompt)):
            if type(flag) is not bool:
                raise validate.ArgumentTypeError(f"{name} must be True or False, got {flag!r}")
        if prefix_cache is not None and getattr(prefix_cache, "allocator", None) is not cache.allocator:
            raise ValueError("prefix_cache must index the blocks of this cache's allocator")
        self.cache, self.prefix_cache = cache, prefix_cache
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.policy, self.chunked_prefill = policy, chunked_prefill
        self.reserve_full_prompt = reserve_full_prompt
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._ids: set = set()  # ids of the sequences waiting or running
        self.num_preemptions = 0

    def check(self, request: Request) -> None:
        """Refuse a request this scheduler could never finish (instead of looping on it)."""
        if not isinstance(request, Request):
            raise TypeError(f"requests must be Request objects, got {type(request).__name__}")
        pool = self.cache.allocator.num_blocks
        blocks = ceil_div(len(request.prompt) + request.max_new_tokens - 1, self.cache.block_size)
        if blocks > pool:
            raise ValueError(f"request {request.request_id} needs {blocks} KV blocks, the pool has "
                             f"{pool}; it could never run")
        if len(request.prompt) > self.max_num_batched_tokens and not self.chunked_prefill:
            raise ValueError(f"request {request.request_id}: prompt of {len(request.prompt)} tokens exceeds "
                             f"max_num_batched_tokens={self.max_num_batched_tokens}; "
                             "enable chunked_prefill or raise the budget")

    def add(self, seq: Sequence) -> None:
        """Queue `seq` (status WAITING, nothing computed yet)."""
        if not isinstance(seq, Sequence):
            raise TypeError(f"seq must be a steploop.Sequence, got {type(seq).__name__}")
        if seq.status is not Status.WAITING or seq.num_computed:
            raise ValueError(f"sequence {seq.seq_id} is {seq.status.value} with {seq.num_computed} "
                             "tokens computed; only a fresh sequence can be queued")
        if seq.seq_id in self._ids:
            raise ValueError(f"seq: sequence {seq.seq_id} is already queued or running in this scheduler")
        self._ids.add(seq.seq_id)
        self.waiting.append(seq)

    def preempt(self, seq: Sequence) -> None:
        """Free `seq`'s blocks and put it first in line; it will be recomputed from its tokens
        (from its own blocks, where a prefix cache still holds them)."""
        self._check_running(seq)
        self.cache.free_sequence(seq.seq_id)
        self.running.remove(seq)
        seq.status, seq.num_computed = Status.WAITING, 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self, now: float) -> ScheduledStep:
        """Return the step's rows [(sequence, tokens to compute)], with their KV slots reserved.

        vLLM V1's order (vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`): running
        sequences first, each preempting the newest running sequence while its slots do not fit;
        then, only if nobody was preempted, waiting requests in order until one does not fit.
        """
        now = validate.finite_float("now", now)
        budget = self.max_num_batched_tokens
        step = ScheduledStep()
        # 1. Running sequences first (oldest first): one decode token, or the next prefill chunk.
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if seq.done:  # static batching: a finished row still runs, as padding, until the batch ends
                step.append((seq, 0))
                budget -= 1
                i += 1
                continue
            n = min(seq.num_to_compute, budget)
            while not self.cache.can_append(seq.seq_id, n):
                victim = self.running[-1]  # the most recently admitted sequence
                if victim.done:  # a finished row of a static batch can simply leave
                    victim.finish_time = now
                    self.finish(victim)
                    continue
                self.preempt(victim)
                step.preempted.append(victim.seq_id)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                break  # it preempted itself: everyone after it is preempted too
            self._reserve(step, seq, n)
            budget -= n
            i += 1
        # 2. Admit waiting requests that have arrived, in order, while there is room.
        if step.preempted or (self.policy == "static" and self.running):
            return step
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.request.arrival_time > now:
                break
            hit = self._cached_prefix(seq)
            cached = len(hit) * self.cache.block_size
            need = len(seq.tokens) - cached
            n = min(need, budget) if self.chunked_prefill else need
            if n > budget and step:  # (alone in a step, a long recomputation may exceed it)
                break
            # The block manager prices the request: all of it, or only this step's chunk.
            if not self.cache.can_admit(len(seq.tokens) if self.reserve_full_prompt else cached + n, hit):
                break
            self.waiting.popleft()
            blocks_hit = self.prefix_cache.match(seq.tokens) if self.prefix_cache else []
            self.cache.add_sequence(seq.seq_id, blocks_hit)
            seq.num_computed = len(blocks_hit) * self.cache.block_size
            seq.status = Status.RUNNING
            self.running.append(seq)
            self._reserve(step, seq, n)
            budget -= n
        return step

    def _reserve(self, step: ScheduledStep, seq: Sequence, n: int) -> None:
        """Reserve `seq`'s slots for `n` tokens, add its row, and index the blocks this step fills.

        Indexing at allocation, as vLLM does (vllm/v1/core/kv_cache_manager.py:612-616): the
        step will write them, so a request admitted later in this step can already hit them, and
        a preempted sequence finds its own blocks again when it resumes.
        """
        step.copies.extend(self.cache.reserve(seq.seq_id, n))
        step.append((seq, n))
        filled = min(seq.num_computed + n, len(seq.tokens))
        # (the blocks before num_computed were indexed by the steps that filled them, or are hits)
        bs = self.cache.block_size
        if self.prefix_cache is not None and filled // bs > seq.num_computed // bs:
            self.prefix_cache.insert(seq.tokens[:filled], self.cache.block_table(seq.seq_id),
                                     start_block=seq.num_computed // bs)

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        if self.prefix_cache is None:
            return []
        return self.prefix_cache.lookup(seq.tokens, max_tokens=len(seq.tokens) - 1)

    def _check_running(self, seq) -> None:
        if not isinstance(seq, Sequence):
            raise validate.ArgumentTypeError(f"seq must be a steploop.Sequence, got {type(seq).__name__}")
        if not any(s is seq for s in self.running):
            raise ValueError(f"seq {seq.seq_id} is not running in this scheduler (it is {seq.status.value})")

    def finish(self, seq: Sequence) -> None:
        """Remove a finished sequence and free its blocks (the indexed ones stay cached)."""
        self._check_running(seq)
        self.cache.free_sequence(seq.seq_id)
        self.running.remove(seq)
        self._ids.discard(seq.seq_id)
        seq.status = Status.FINISHED

    def complete(self, scheduled: list[tuple[Sequence, int]], next_tokens: list[int],
                 t_done: float) -> tuple[int, int]:
        """Apply one step's results and return (prefill tokens, padding rows) of the step.

        Each row advances by the tokens it computed; a row that reached the end of its tokens
        appends the step's next token (a prefill chunk short of the end appends nothing); a
        sequence with all its `max_new_tokens` finishes, or, under static batching, is marked
        done and keeps its row until `end_static_batch`.
        """
        next_tokens = validate.int_list("next_tokens", next_tokens, minimum=None)
        if len(next_tokens) != len(scheduled):
            raise ValueError(f"next_tokens must hold one token per scheduled row ({len(scheduled)}), "
                             f"got {len(next_tokens)}")
        t_done = validate.finite_float("t_done", t_done)
        prefill = sum(n for s, n in scheduled if n > 1 or (n == 1 and len(s.output) == 0))
        padding = sum(1 for _, n in scheduled if n == 0)
        for (seq, n), next_token in zip(scheduled, next_tokens):
            if n == 0:
                continue
            seq.num_computed += n
            if seq.num_computed < len(seq.tokens):
                continue  # a prefill chunk: no token yet
            seq.tokens.append(next_token)
            seq.token_times.append(t_done)
            if seq.first_token_time is None:
                seq.first_token_time = t_done
            if len(seq.output) >= seq.request.max_new_tokens:
                if self.policy == "static":
                    seq.done = True  # keeps its row until the batch ends
                else:
                    seq.finish_time = t_done
                    self.finish(seq)
        return prefill, padding

    def end_static_batch(self, t_done: float) -> None:
        """Finish a static batch whose every sequence is done (no-op otherwise)."""
        t_done = validate.finite_float("t_done", t_done)
        if self.running and all(s.done for s in self.running):
            for seq in list(self.running):
                seq.finish_time = t_done
                self.finish(seq)


@dataclass
class StepRecord:
    """One engine step: when it ended, sequences in the batch (incl. padding rows), queue length,
    tokens computed (prefill, decode, and wasted padding rows), KV blocks in use."""

    time: float
    running: int
    waiting: int
    prefill_tokens: int
    decode_tokens: int
    blocks_used: int
    padding_rows: int = 0

    def __post_init__(self) -> None:
        validate.finite_float("time", self.time)
        for name in ("running", "waiting", "prefill_tokens", "decode_tokens", "blocks_used", "padding_rows"):
            validate.non_negative_int(name, getattr(self, name))


@dataclass
class EngineResult:
    """What a run returns: outputs by request id, per-request metrics, the step timeline."""

    outputs: dict[int, list[int]]
    metrics: list[RequestMetrics]
    timeline: list[StepRecord]
    makespan: float
    preemptions: int
    prefix_hit_rate: float = 0.0

    @property
    def output_tokens(self) -> int:
        return sum(m.output_tokens for m in self.metrics)

    @property
    def throughput(self) -> float:
        """Output tokens per clock unit over the whole run."""
        if not self.makespan > 0:
            raise ValueError(f"makespan is {self.makespan}: a run that took no time has no throughput")
        return self.output_tokens / self.makespan

    @property
    def steps(self) -> int:
        return len(self.timeline)

    def percentile(self, name: str, q: float) -> float:
        """Return the q-th percentile (0–100) of a per-request metric ("ttft", "tpot", "itl",
        "e2e"), as `metrics.percentile` defines it (vLLM's: TPOT over requests of > 1 token)."""
        return percentile(self.metrics, name, q)

    def summary(self, slo=None) -> dict[str, float]:
        """Return `metrics.summary` of the run over its makespan (a benchmark's JSON fields)."""
        return summary(self.metrics, self.makespan, slo)


def run_result(seqs: dict[int, Sequence], requests: list[Request], timeline: list[StepRecord],
               num_preemptions: int, prefix_hit_rate: float) -> EngineResult:
    """Return the `EngineResult` of finished sequences: outputs, per-request metrics, timeline."""
    metrics = [RequestMetrics.from_times(s.seq_id, len(s.request.prompt), s.request.arrival_time,
                                         s.token_times, s.finish_time, s.num_preemptions)
               for s in sorted(seqs.values(), key=lambda s: s.seq_id)]
    makespan = max(s.finish_time for s in seqs.values()) - min(r.arrival_time for r in requests)
    return EngineResult({s.seq_id: s.output for s in seqs.values()}, metrics, timeline, makespan,
                        num_preemptions, prefix_hit_rate)


class StepExecutor(Protocol):
    """What `run` needs from an engine: a clock, a way to wait, and a way to execute a step."""

    def check(self, request: Request) -> None:
        """Refuse a request this executor cannot serve (e.g. tokens outside the vocabulary)."""

    def now(self) -> float:
        """Return the current time in the run's clock units."""

    def wait(self, now: float, next_arrival: float) -> None:
        """Nothing could be scheduled at `now`: let time pass towards `next_arrival`."""

    def execute(self, scheduled: ScheduledStep) -> list[int]:
        """Run one step over the scheduled rows (n = 0: a static batch's padding row, which costs
        one decode row), after making the step's block copies (`scheduled.copies`), if it keeps
        tensors; return each row's next token; the clock moves by the step's time."""


class ScriptedExecutor:
    """A step executor without a model: the clock counts steps, the tokens come from a script.

    `outputs`: request id -> the tokens that request generates, in order (at least its
    `max_new_tokens` of them); without it every token is 0. `log` holds one entry per executed
    step: the rows as (seq_id, start, tokens) with start = tokens already in the cache, and the
    ids the step preempted. This is what the scheduler decided, to compare with vLLM's.
    """

    def __init__(self, outputs: dict | None = None):
        if outputs is not None and not isinstance(outputs, dict):
            raise validate.ArgumentTypeError(f"outputs must be a dict of request id -> token ids, "
                                             f"got {type(outputs).__name__}")
        self.outputs = {k: validate.int_list(f"outputs[{k!r}]", v, minimum=0)
                        for k, v in (outputs or {}).items()}
        self.log: list[dict] = []
        self._step = 0

    def check(self, request: Request) -> None:
        """Refuse a request whose script is shorter than its `max_new_tokens`."""
        script = self.outputs.get(request.request_id)
        if self.outputs and (script is None or len(script) < request.max_new_tokens):
            have = "none" if script is None else len(script)
            raise ValueError(f"request {request.request_id}: outputs holds {have} scripted tokens, "
                             f"it needs max_new_tokens={request.max_new_tokens}")

    def now(self) -> float:
        return float(self._step)

    def wait(self, now: float, next_arrival: float) -> None:
        validate.finite_float("now", now), validate.finite_float("next_arrival", next_arrival)
        self._step += 1

    def execute(self, scheduled: list[tuple[Sequence, int]]) -> list[int]:
        self.log.append({"t": self._step, "rows": [(s.seq_id, s.num_computed, n) for s, n in scheduled],
                         "preempted": list(getattr(scheduled, "preempted", []))})
        self._step += 1
        return [self._next(s) for s, _ in scheduled]

    def _next(self, seq: Sequence) -> int:
        script = self.outputs.get(seq.seq_id, ())
        return script[len(seq.output)] if len(seq.output) < len(script) else 0


def check_requests(requests, scheduler: Scheduler, executor: StepExecutor) -> list[Request]:
    """Return `requests` as a list once every one passes the scheduler's and the executor's checks
    and the ids are unique; raise (changing nothing) otherwise."""
    if isinstance(requests, Request):
        raise TypeError("requests must be a list of Request objects, got a single Request")
    if not isinstance(scheduler, Scheduler):
        raise validate.ArgumentTypeError(f"scheduler must be a steploop.Scheduler, got {type(scheduler).__name__}")
    for method in ("check", "now", "wait", "execute"):
        if not callable(getattr(executor, method, None)):
            raise validate.ArgumentTypeError(f"executor must be a step executor (with check, now, wait and "
                                             f"execute), got {type(executor).__name__}")
    requests = validate.items("requests", requests)
    if not requests:
        raise ValueError("requests must hold at least one Request")
    for r in requests:
        scheduler.check(r)
        executor.check(r)
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("request_ids must be unique")
    return requests


def run(scheduler: Scheduler, requests, executor: StepExecutor) -> EngineResult:
    """Serve every request to completion: the step loop of the engine and of the simulator.

    Each iteration admits the requests that have arrived, asks the scheduler for the step's rows,
    lets the executor run them (or wait for the next arrival when there is nothing to run),
    applies the results and records the step.
    """
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"scheduler must be a steploop.Scheduler, got {type(scheduler).__name__}")
    if scheduler.waiting or scheduler.running:
        raise ValueError("scheduler must be idle (no waiting or running sequences) before a run")
    requests = check_requests(requests, scheduler, executor)
    preempted_before = scheduler.num_preemptions  # a scheduler may serve several runs
    pending = deque(sorted((Sequence.from_request(r) for r in requests),
                           key=lambda s: s.request.arrival_time))
    seqs: dict[int, Sequence] = {}
    timeline: list[StepRecord] = []
    while pending or scheduler.waiting or scheduler.running:
        t = executor.now()
        while pending and pending[0].request.arrival_time <= t:
            seq = pending.popleft()
            seqs[seq.seq_id] = seq
            scheduler.add(seq)
        scheduled = scheduler.schedule(t)
        if not scheduled:  # idle (or a step that only preempted): let time pass
            if not pending and not scheduled.preempted:
                raise RuntimeError("the scheduler admits nothing and no request is left to arrive")
            executor.wait(t, pending[0].request.arrival_time if pending else t)
            continue
        next_tokens = executor.execute(scheduled)
        t_done = executor.now()
        prefill, padding = scheduler.complete(scheduled, next_tokens, t_done)
        timeline.append(StepRecord(t_done, len(scheduler.running),
                                   len(scheduler.waiting) + len(pending), prefill,
                                   sum(n for _, n in scheduled) - prefill,
                                   scheduler.cache.allocator.num_used_blocks, padding))
        scheduler.end_static_batch(t_done)
    hit_rate = scheduler.prefix_cache.hit_rate if scheduler.prefix_cache else 0.0
    return run_result(seqs, requests, timeline, scheduler.num_preemptions - preempted_before,
                      hit_rate)
