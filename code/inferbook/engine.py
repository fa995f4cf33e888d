"""A small serving engine: continuous batching over a paged KV cache, on the CPU.

The loop of vLLM / nano-vllm in one file, for a `gpt.GPT`:

* `Request` (prompt, max_new_tokens, arrival time) becomes a `Sequence` that the engine owns.
* `Scheduler.schedule(now)` picks, at every step (iteration-level scheduling, Orca), how many
  tokens each sequence computes: one per running sequence (decode), then whole prompts (or
  chunks of them with chunked prefill) of waiting requests while `max_num_seqs`,
  `max_num_batched_tokens` and free KV blocks allow. When a running sequence needs a block and
  none is free, the most recently admitted sequence is preempted: its blocks are freed and it
  is re-queued at the front, to be recomputed from its tokens later (preemption by recompute).
  `policy="static"` admits only into an empty batch and waits for the whole batch to finish.
* `forward_batch` builds the step's `paged.PagedContext` (slot mapping and block tables, once)
  and runs the model once over all scheduled tokens of all sequences (a flat, variable-length
  batch): the same `gpt.GPT.forward` as every other cache, through ``ctx.attend``.
* `Engine.run(requests)` loops until every request is done and returns per-request metrics
  (`metrics.RequestMetrics`: TTFT, TPOT, ITL, end-to-end latency) and a per-step timeline.

Greedy outputs do not depend on the batching: each sequence's logits are computed from its own
tokens only, so the engine reproduces single-request greedy decoding token for token (exactly
in float64; float32 agrees up to rounding of the batched matrix products).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch

from . import validate
from .arith import ceil_div
from .gpt import GPT
from .metrics import RequestMetrics, percentile, summary
from .paged import PagedContext, PagedKVCache
from .prefix_cache import PrefixCache


@dataclass(frozen=True)
class Request:
    """A generation request: `prompt` token ids, `max_new_tokens`, `arrival_time` (s, or steps)."""

    request_id: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_time: float = 0.0

    def __post_init__(self) -> None:
        validate.integer("request_id", self.request_id)
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


class Scheduler:
    """Decides, each step, which sequences run and how many tokens each computes.

    `max_num_seqs`: most sequences in the running batch (vLLM's `max_num_seqs`).
    `max_num_batched_tokens`: most tokens computed in one step (vLLM's `max_num_batched_tokens`).
    `policy`: "continuous" (admit whenever there is room; a finished sequence leaves at once) or
    "static" (admit only into an empty batch; a finished sequence keeps its row, computed and
    discarded like a padding row, and its blocks until the whole batch is done, as in a padded
    `generate()` call). `chunked_prefill`: split a prompt that does not fit the step's token budget.
    """

    def __init__(self, cache: PagedKVCache, max_num_seqs: int = 16, max_num_batched_tokens: int = 512,
                 policy: str = "continuous", chunked_prefill: bool = False,
                 prefix_cache: PrefixCache | None = None):
        if not isinstance(cache, PagedKVCache):
            raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
        validate.one_of("policy", policy, ("continuous", "static"))
        validate.positive_int("max_num_seqs", max_num_seqs)
        validate.positive_int("max_num_batched_tokens", max_num_batched_tokens)
        validate.one_of("chunked_prefill", chunked_prefill, (True, False))
        if prefix_cache is not None and prefix_cache.allocator is not cache.allocator:
            raise ValueError("prefix_cache must index the blocks of this cache's allocator")
        self.cache, self.prefix_cache = cache, prefix_cache
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.policy, self.chunked_prefill = policy, chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue `seq` (status WAITING, nothing computed yet)."""
        if not isinstance(seq, Sequence):
            raise TypeError(f"seq must be an engine.Sequence, got {type(seq).__name__}")
        if seq.status is not Status.WAITING or seq.num_computed:
            raise ValueError(f"sequence {seq.seq_id} is {seq.status.value} with {seq.num_computed} "
                             "tokens computed; only a fresh sequence can be queued")
        self.waiting.append(seq)

    def preempt(self, seq: Sequence) -> None:
        """Free `seq`'s blocks and put it first in line; it will be recomputed from its tokens."""
        self.cache.free_sequence(seq.seq_id)
        self.running.remove(seq)
        seq.status, seq.num_computed = Status.WAITING, 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self, now: float) -> list[tuple[Sequence, int]]:
        """Return [(sequence, tokens to compute this step)], with their KV slots reserved."""
        now = validate.finite_float("now", now)
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        # 1. Running sequences first (oldest first): one decode token, or the next prefill chunk.
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or budget == 0:
                continue
            if seq.done:  # static batching: a finished row still runs, as padding, until the batch ends
                scheduled.append((seq, 0))
                budget -= 1
                continue
            n = min(seq.num_to_compute, budget)
            while not self.cache.can_append(seq.seq_id, n):
                victim = self.running[-1]  # the most recently admitted sequence
                if victim.done:  # a finished row of a static batch can simply leave
                    victim.finish_time = now
                    self.finish(victim)
                    continue
                self.preempt(victim)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            self.cache.reserve(seq.seq_id, n)
            scheduled.append((seq, n))
            budget -= n
        # 2. Admit waiting requests that have arrived, in order, while there is room.
        if self.policy == "static" and self.running:
            return scheduled
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.request.arrival_time > now:
                break
            hit = self._cached_prefix(seq)
            need = len(seq.tokens) - len(hit) * self.cache.block_size
            n = min(need, budget) if self.chunked_prefill else need
            if n > budget and scheduled:  # (alone in a step, a long recomputation may exceed it)
                break
            blocks = ceil_div(len(hit) * self.cache.block_size + n, self.cache.block_size) - len(hit)
            reclaimed = sum(self.cache.allocator.ref_count(b) == 0 for b in hit)  # cached but free
            if not self.cache.allocator.can_allocate(blocks + reclaimed):
                break
            self.waiting.popleft()
            blocks_hit = self.prefix_cache.match(seq.tokens) if self.prefix_cache else []
            self.cache.add_sequence(seq.seq_id, blocks_hit)
            seq.num_computed = len(blocks_hit) * self.cache.block_size
            self.cache.reserve(seq.seq_id, n)
            seq.status = Status.RUNNING
            self.running.append(seq)
            scheduled.append((seq, n))
            budget -= n
        return scheduled

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        if self.prefix_cache is None:
            return []
        return self.prefix_cache.lookup(seq.tokens, max_tokens=len(seq.tokens) - 1)

    def cache_prefix(self, seq: Sequence) -> None:
        """Index the full blocks `seq` has computed, so later requests with the same prefix reuse them."""
        if self.prefix_cache is not None:
            self.prefix_cache.insert(seq.tokens[:seq.num_computed], self.cache.block_table(seq.seq_id))

    def finish(self, seq: Sequence) -> None:
        """Remove a finished sequence; index its full blocks for later prefix hits; free its blocks."""
        self.cache_prefix(seq)
        self.cache.free_sequence(seq.seq_id)
        self.running.remove(seq)
        seq.status = Status.FINISHED

    def complete(self, scheduled: list[tuple[Sequence, int]], next_tokens: list[int],
                 t_done: float) -> tuple[int, int]:
        """Apply one step's results and return (prefill tokens, padding rows) of the step.

        Each row advances by the tokens it computed; a row that reached the end of its tokens
        appends the step's next token (a prefill chunk short of the end appends nothing); a
        sequence with all its `max_new_tokens` finishes, or, under static batching, is marked
        done and keeps its row until `end_static_batch`. Used by the engine (tokens from the
        model) and by the simulator (placeholder tokens), so both keep the same books.
        """
        prefill = sum(n for s, n in scheduled if n > 1 or (n == 1 and len(s.output) == 0))
        padding = sum(1 for _, n in scheduled if n == 0)
        for (seq, n), next_token in zip(scheduled, next_tokens):
            if n == 0:
                continue
            seq.num_computed += n
            if seq.num_computed < len(seq.tokens):
                continue  # a prefill chunk: no token yet
            if n > 1:
                self.cache_prefix(seq)
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
        if self.running and all(s.done for s in self.running):
            for seq in list(self.running):
                seq.finish_time = t_done
                self.finish(seq)


def engine_result(seqs: dict[int, Sequence], requests: list[Request],
                  timeline: list[StepRecord], num_preemptions: int,
                  prefix_hit_rate: float) -> EngineResult:
    """Return the `EngineResult` of finished sequences: outputs, per-request metrics, timeline."""
    metrics = [RequestMetrics.from_times(s.seq_id, len(s.request.prompt), s.request.arrival_time,
                                         s.token_times, s.finish_time, s.num_preemptions)
               for s in sorted(seqs.values(), key=lambda s: s.seq_id)]
    makespan = max(s.finish_time for s in seqs.values()) - min(r.arrival_time for r in requests)
    return EngineResult({s.seq_id: s.output for s in seqs.values()}, metrics, timeline, makespan,
                        num_preemptions, prefix_hit_rate)


@torch.inference_mode()
def forward_batch(model: GPT, cache: PagedKVCache, batch: list[tuple[int, list[int], int]]) -> torch.Tensor:
    """Return next-token logits [len(batch), vocab]: one forward pass over every sequence's new tokens.

    batch: (seq_id, new token ids, start position) per sequence; the new tokens' KV slots must
    already be reserved in `cache` (positions start .. start + n − 1). The step's
    `paged.PagedContext` (slot mapping, block tables, masks) is built once; the model runs on the
    packed [1, total_tokens] batch (no padding in the linear layers) and each sequence's last
    position gives its logits.
    """
    if not batch:
        raise ValueError("batch must hold at least one (seq_id, tokens, start)")
    tokens = [t for _, toks, _ in batch for t in toks]
    ctx = PagedContext(cache, [(sid, start, len(toks)) for sid, toks, start in batch])
    hidden = model.hidden_states(torch.tensor([tokens]), ctx=ctx)  # [1, T, n_embd]
    return model.head(hidden[0, ctx.last_index])


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


@dataclass
class EngineResult:
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


class Engine:
    """Serves `Request`s with a `GPT` on a paged KV cache of `num_blocks` blocks.

    `clock="wall"` measures seconds (time.perf_counter); `clock="cpu"` measures this process's
    CPU seconds (time.process_time: with one torch thread, what the wall clock would read on an
    otherwise idle machine, and far steadier on a shared one); `clock="steps"` counts engine
    steps, which makes every metric deterministic (arrival times are then in steps too).
    Decoding is greedy (the request's length is `max_new_tokens`; there is no end-of-sequence).
    """

    def __init__(self, model: GPT, num_blocks: int, block_size: int = 16, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, policy: str = "continuous",
                 chunked_prefill: bool = False, prefix_caching: bool = False, clock: str = "wall"):
        if not isinstance(model, GPT):
            raise TypeError(f"model must be a gpt.GPT, got {type(model).__name__}")
        validate.one_of("clock", clock, ("wall", "cpu", "steps"))
        validate.one_of("prefix_caching", prefix_caching, (True, False))
        self.model = model.eval()
        dtype = next(model.parameters()).dtype
        self.cache = PagedKVCache.for_model(model.config, num_blocks, block_size, dtype=dtype)
        self.prefix_cache = PrefixCache(self.cache.allocator) if prefix_caching else None
        self.scheduler = Scheduler(self.cache, max_num_seqs, max_num_batched_tokens, policy,
                                   chunked_prefill, self.prefix_cache)
        self.clock = clock

    def _check(self, request: Request) -> None:
        """Refuse a request this engine could never finish (instead of looping on it)."""
        if not isinstance(request, Request):
            raise TypeError(f"requests must be engine.Request objects, got {type(request).__name__}")
        validate.token_ids("prompt", request.prompt, self.model.config.vocab_size)
        total = len(request.prompt) + request.max_new_tokens
        if total - 1 > self.model.config.n_positions:
            raise ValueError(f"request {request.request_id}: prompt + max_new_tokens − 1 = {total - 1} "
                             f"exceeds n_positions={self.model.config.n_positions}")
        blocks = ceil_div(total - 1, self.cache.block_size)
        if blocks > self.cache.allocator.num_blocks:
            raise ValueError(f"request {request.request_id} needs {blocks} KV blocks, the pool has "
                             f"{self.cache.allocator.num_blocks}; it could never run")
        if len(request.prompt) > self.scheduler.max_num_batched_tokens and not self.scheduler.chunked_prefill:
            raise ValueError(f"request {request.request_id}: prompt of {len(request.prompt)} tokens exceeds "
                             f"max_num_batched_tokens={self.scheduler.max_num_batched_tokens}; "
                             "enable chunked_prefill or raise the budget")

    def run(self, requests: list[Request]) -> EngineResult:
        """Serve every request to completion; return outputs, metrics and the per-step timeline."""
        requests = list(requests)
        if not requests:
            raise ValueError("requests must hold at least one Request")
        for r in requests:
            self._check(r)
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request_ids must be unique")
        pending = deque(sorted((Sequence.from_request(r) for r in requests),
                               key=lambda s: s.request.arrival_time))
        sched, seqs = self.scheduler, {}
        timeline: list[StepRecord] = []
        timer = time.process_time if self.clock == "cpu" else time.perf_counter
        start, step = timer(), 0

        def now() -> float:
            return float(step) if self.clock == "steps" else timer() - start

        while pending or sched.waiting or sched.running:
            t = now()
            while pending and pending[0].request.arrival_time <= t:
                seq = pending.popleft()
                seqs[seq.seq_id] = seq
                sched.add(seq)
            scheduled = sched.schedule(t)
            if not scheduled:  # idle until the next arrival
                if self.clock == "wall":
                    time.sleep(max(0.0, min(1e-3, pending[0].request.arrival_time - t)) if pending else 0)
                elif self.clock == "cpu" and pending:  # CPU time does not pass while idle: jump
                    start -= pending[0].request.arrival_time - t
                else:
                    step += 1
                continue
            # A padding row (n = 0) recomputes the sequence's last cached position: same cost as
            # a decode row, result discarded.
            logits = forward_batch(self.model, self.cache,
                                   [(s.seq_id, s.tokens[s.num_computed:s.num_computed + n], s.num_computed)
                                    if n else (s.seq_id, s.tokens[s.num_computed - 1:s.num_computed],
                                               s.num_computed - 1)
                                    for s, n in scheduled])
            step += 1
            t_done = now()
            prefill, padding = sched.complete(scheduled, logits.argmax(-1).tolist(), t_done)
            timeline.append(StepRecord(t_done, len(sched.running), len(sched.waiting) + len(pending),
                                       prefill, sum(n for _, n in scheduled) - prefill,
                                       self.cache.allocator.num_used_blocks, padding))
            sched.end_static_batch(t_done)
        return engine_result(seqs, requests, timeline, sched.num_preemptions,
                             self.prefix_cache.hit_rate if self.prefix_cache else 0.0)


def serve(model: GPT, requests: list[Request], **engine_kwargs) -> EngineResult:
    """Return `Engine(model, **engine_kwargs).run(requests)` (a fresh engine per call)."""
    return Engine(model, **engine_kwargs).run(requests)


def mixed_workload(n_requests: int, vocab: int | None = None, prompts: list[list[int]] | None = None,
                   prompt_len: tuple[int, int] = (8, 32), mean_output: float = 24.0,
                   max_output: int = 96, rate: float | None = None, seed: int = 0) -> list[Request]:
    """Return requests with mixed lengths: the workload of the continuous-batching chapter.

    Prompt length ~ Uniform{prompt_len}; prompts are slices of `prompts` texts (or random ids
    below `vocab`). Output length ~ 1 + Geometric(1 / mean_output), capped at `max_output`: most
    replies are short, a few are long, as in chat traces. Arrivals: all at 0 (offline), or a
    Poisson process of `rate` requests per clock unit.
    """
    if (vocab is None) == (prompts is None):
        raise ValueError("give exactly one of vocab (random prompts) or prompts (token lists to slice)")
    validate.non_negative_int("n_requests", n_requests)
    if vocab is not None:
        validate.positive_int("vocab", vocab)
    low, high = (validate.positive_int(f"prompt_len[{i}]", v) for i, v in enumerate(prompt_len))
    if low > high:
        raise ValueError(f"prompt_len must be (low, high) with low ≤ high, got {prompt_len}")
    validate.finite_float("mean_output", mean_output, minimum=1.0)
    validate.positive_int("max_output", max_output)
    if rate is not None and validate.finite_float("rate", rate) <= 0:
        raise ValueError(f"rate must be > 0 requests per clock unit, got {rate}")
    rng = np.random.default_rng(seed)
    t, requests = 0.0, []
    for i in range(n_requests):
        length = int(rng.integers(prompt_len[0], prompt_len[1] + 1))
        if prompts is None:
            prompt = rng.integers(0, vocab, length).tolist()
        else:
            text = prompts[int(rng.integers(len(prompts)))]
            s = int(rng.integers(0, max(1, len(text) - length)))
            prompt = list(text[s:s + length])
        out = int(min(max_output, rng.geometric(1.0 / mean_output)))
        if rate is not None:
            t += float(rng.exponential(1.0 / rate))
        requests.append(Request(i, tuple(prompt), out, t if rate is not None else 0.0))
    return requests
