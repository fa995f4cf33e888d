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
* `forward_batch` runs the model once over all scheduled tokens of all sequences (a flat,
  variable-length batch; keys/values read and written through `paged.PagedKVCache`).
* `Engine.run(requests)` loops until every request is done and returns per-request metrics
  (TTFT, TPOT, end-to-end latency) and a per-step timeline.

Greedy outputs do not depend on the batching: each sequence's logits are computed from its own
tokens only, so the engine reproduces single-request greedy decoding token for token (exactly
in float64; float32 agrees up to rounding of the batched matrix products).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch
import torch.nn.functional as F

from .gpt import GPT
from .paged import PagedKVCache
from .prefix_cache import PrefixCache


class EnginePagedKVCache(PagedKVCache):
    """`paged.PagedKVCache` with slot indices built from a Python list (one tensor op, not six).

    The engine reserves slots for every running sequence at every step; on a CPU the handful
    of tiny tensor ops per reservation costs more than the model's decode step for that
    sequence. Same bookkeeping, same results; only `_slots` is faster.
    """

    def _slots(self, table: list[int], start: int, stop: int) -> torch.Tensor:
        bs = self.block_size
        return torch.tensor([table[t // bs] * bs + t % bs for t in range(start, stop)], dtype=torch.long)


@dataclass(frozen=True)
class Request:
    """A generation request: `prompt` token ids, `max_new_tokens`, `arrival_time` (s, or steps)."""

    request_id: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_time: float = 0.0

    def __post_init__(self) -> None:
        if len(self.prompt) == 0:
            raise ValueError(f"request {self.request_id}: the prompt needs at least one token")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.request_id}: max_new_tokens must be ≥ 1, got {self.max_new_tokens}")
        if self.arrival_time < 0:
            raise ValueError(f"request {self.request_id}: arrival_time must be ≥ 0, got {self.arrival_time}")


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
        if policy not in ("continuous", "static"):
            raise ValueError(f"policy must be 'continuous' or 'static', got {policy!r}")
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(f"need max_num_seqs ≥ 1 and max_num_batched_tokens ≥ 1, got "
                             f"{max_num_seqs}, {max_num_batched_tokens}")
        self.cache, self.prefix_cache = cache, prefix_cache
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.policy, self.chunked_prefill = policy, chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
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
            self.cache.append_slots(seq.seq_id, n)
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
            blocks = self.cache.allocator.blocks_for(len(hit) * self.cache.block_size + n) - len(hit)
            reclaimed = sum(self.cache.allocator.ref_count(b) == 0 for b in hit)  # cached but free
            if not self.cache.allocator.can_allocate(blocks + reclaimed):
                break
            self.waiting.popleft()
            blocks_hit = self.prefix_cache.match(seq.tokens) if self.prefix_cache else []
            self.cache.add_sequence(seq.seq_id, blocks_hit)
            seq.num_computed = len(blocks_hit) * self.cache.block_size
            self.cache.append_slots(seq.seq_id, n)
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


@dataclass
class _AttentionGroup:
    """Padded attention inputs for a group of sequences (all decodes, or all prefill chunks)."""

    token_index: torch.Tensor  # [T_g] positions of the group's tokens in the flat batch
    rows: torch.Tensor  # [T_g] their rows in the padded [n_seq * q_max] query matrix
    tables: torch.Tensor  # [n_seq, width] block tables, padded with block 0
    mask: torch.Tensor  # [n_seq, 1, q_max, width * block_size] True where attention is allowed
    n_seq: int
    q_max: int


def _group(members, offsets, tables, starts, lengths, block_size) -> _AttentionGroup:
    q_max = max(lengths[b] for b in members)
    width = max(-(-(starts[b] + lengths[b]) // block_size) for b in members)
    token_index = [offsets[b] + i for b in members for i in range(lengths[b])]
    rows = [j * q_max + i for j, b in enumerate(members) for i in range(lengths[b])]
    query_pos = torch.full((len(members) * q_max,), -1, dtype=torch.long)
    query_pos[rows] = torch.tensor([starts[b] + i for b in members for i in range(lengths[b])])
    query_pos = query_pos.view(len(members), q_max)
    allowed = torch.arange(width * block_size)[None, None, :] <= query_pos[:, :, None]  # causal
    allowed[:, :, 0] |= query_pos < 0  # padded query rows attend somewhere harmless (discarded)
    padded = torch.tensor([tables[b][:width] + [0] * (width - len(tables[b][:width])) for b in members])
    return _AttentionGroup(torch.tensor(token_index), torch.tensor(rows), padded, allowed[:, None],
                           len(members), q_max)


@torch.inference_mode()
def forward_batch(model: GPT, cache: PagedKVCache, batch: list[tuple[int, list[int], int]]) -> torch.Tensor:
    """Return next-token logits [len(batch), vocab]: one forward pass over every sequence's new tokens.

    batch: (seq_id, new token ids, start position) per sequence; the new tokens' KV slots must
    already be reserved in `cache` (positions start .. start + n − 1). Linear layers run on the
    flat [total_tokens, n_embd] matrix (no padding). Attention runs per group, decodes (one
    query each) apart from prefill chunks, as engines use a decode kernel and a prefill kernel:
    within a group, queries are padded to the longest chunk and keys to the longest context and
    the padding is masked, so each sequence sees only its own earlier tokens.
    """
    cfg = model.config
    n_head, head_dim = cfg.n_head, cfg.head_dim
    lengths = [len(toks) for _, toks, _ in batch]
    if not batch or min(lengths) < 1:
        raise ValueError(f"every sequence in the batch needs ≥ 1 new token, got lengths {lengths}")
    starts = [start for _, _, start in batch]
    if max(s + n for s, n in zip(starts, lengths)) > cfg.n_positions:
        raise ValueError(f"a context of {max(s + n for s, n in zip(starts, lengths))} tokens exceeds "
                         f"n_positions={cfg.n_positions}")
    bs = cache.block_size
    tables = [cache.block_table(sid) for sid, _, _ in batch]
    # Slot of token t: block_table[t // bs] * bs + t % bs (plain Python: a few dozen integers
    # per step; building them as tensors per sequence would cost more than the model).
    new_slots = torch.tensor([table[t // bs] * bs + t % bs
                              for table, s, n in zip(tables, starts, lengths) for t in range(s, s + n)])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    decodes = [b for b, n in enumerate(lengths) if n == 1]
    prefills = [b for b, n in enumerate(lengths) if n > 1]
    groups = [_group(m, offsets, tables, starts, lengths, bs) for m in (decodes, prefills) if m]
    tokens = torch.tensor([t for _, toks, _ in batch for t in toks])
    positions = torch.tensor([p for s, n in zip(starts, lengths) for p in range(s, s + n)])

    x = model.wte(tokens) + model.wpe(positions)  # [T, n_embd]
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv(block.ln_1(x)).split(cfg.n_embd, dim=-1)
        q, k, v = (z.view(-1, n_head, head_dim) for z in (q, k, v))  # [T, heads, d]
        cache.write(layer, new_slots, k, v)
        y = torch.empty_like(q)
        for g in groups:
            # Each sequence's blocks in logical order: [B, width, bs, H, d] -> [B, H, width * bs, d]
            k_all = cache.k_pool[layer][g.tables].flatten(1, 2).transpose(1, 2)
            v_all = cache.v_pool[layer][g.tables].flatten(1, 2).transpose(1, 2)
            q_pad = q.new_zeros(g.n_seq * g.q_max, n_head, head_dim)
            q_pad[g.rows] = q[g.token_index]
            q_pad = q_pad.view(g.n_seq, g.q_max, n_head, head_dim).transpose(1, 2)  # [B, H, Q, d]
            out = F.scaled_dot_product_attention(q_pad, k_all, v_all, attn_mask=g.mask)
            y[g.token_index] = out.transpose(1, 2).reshape(-1, n_head, head_dim)[g.rows]
        x = x + block.attn.proj(y.view(-1, cfg.n_embd))
        x = x + block.mlp(block.ln_2(x))
    last = torch.tensor(offsets[1:]) - 1
    return model.ln_f(x[last]) @ model.wte.weight.T


@dataclass
class RequestMetrics:
    """Per-request latencies in the engine's clock units (seconds, or steps with clock="steps").

    ttft: arrival → first token; tpot: mean gap between its later tokens; e2e: arrival → the
    request leaves the engine (with static batching, when its whole batch is done).
    """

    request_id: int
    prompt_tokens: int
    output_tokens: int
    ttft: float
    tpot: float
    e2e: float
    preemptions: int


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
        """Return the q-th percentile (0–100) of a per-request metric ("ttft", "tpot", "e2e")."""
        return float(np.percentile([getattr(m, name) for m in self.metrics], q))


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
        if clock not in ("wall", "cpu", "steps"):
            raise ValueError(f"clock must be 'wall', 'cpu' or 'steps', got {clock!r}")
        self.model = model.eval()
        dtype = next(model.parameters()).dtype
        self.cache = EnginePagedKVCache.for_model(model.config, num_blocks, block_size, dtype=dtype)
        self.prefix_cache = PrefixCache(self.cache.allocator) if prefix_caching else None
        self.scheduler = Scheduler(self.cache, max_num_seqs, max_num_batched_tokens, policy,
                                   chunked_prefill, self.prefix_cache)
        self.clock = clock

    def _check(self, request: Request) -> None:
        total = len(request.prompt) + request.max_new_tokens
        if total - 1 > self.model.config.n_positions:
            raise ValueError(f"request {request.request_id}: prompt + max_new_tokens − 1 = {total - 1} "
                             f"exceeds n_positions={self.model.config.n_positions}")
        blocks = self.cache.allocator.blocks_for(total - 1)
        if blocks > self.cache.allocator.num_blocks:
            raise ValueError(f"request {request.request_id} needs {blocks} KV blocks, the pool has "
                             f"{self.cache.allocator.num_blocks}; it could never run")
        if len(request.prompt) > self.scheduler.max_num_batched_tokens and not self.scheduler.chunked_prefill:
            raise ValueError(f"request {request.request_id}: prompt of {len(request.prompt)} tokens exceeds "
                             f"max_num_batched_tokens={self.scheduler.max_num_batched_tokens}; "
                             "enable chunked_prefill or raise the budget")

    def run(self, requests: list[Request]) -> EngineResult:
        """Serve every request to completion; return outputs, metrics and the per-step timeline."""
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request_ids must be unique")
        for r in requests:
            self._check(r)
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
            prefill = sum(n for s, n in scheduled if n > 1 or (n == 1 and len(s.output) == 0))
            padding = sum(1 for _, n in scheduled if n == 0)
            for (seq, n), next_token in zip(scheduled, logits.argmax(-1).tolist()):
                if n == 0:
                    continue
                seq.num_computed += n
                if seq.num_computed < len(seq.tokens):
                    continue  # a prefill chunk: no token yet
                if n > 1:
                    sched.cache_prefix(seq)
                seq.tokens.append(next_token)
                seq.token_times.append(t_done)
                if seq.first_token_time is None:
                    seq.first_token_time = t_done
                if len(seq.output) >= seq.request.max_new_tokens:
                    if sched.policy == "static":
                        seq.done = True  # keeps its row until the batch ends
                    else:
                        seq.finish_time = t_done
                        sched.finish(seq)
            timeline.append(StepRecord(t_done, len(sched.running), len(sched.waiting) + len(pending),
                                       prefill, sum(n for _, n in scheduled) - prefill,
                                       self.cache.allocator.num_used_blocks, padding))
            if sched.running and all(s.done for s in sched.running):  # a static batch ends
                for seq in list(sched.running):
                    seq.finish_time = t_done
                    sched.finish(seq)
        metrics = []
        for seq in sorted(seqs.values(), key=lambda s: s.seq_id):
            r, n_out = seq.request, len(seq.output)
            tpot = (seq.token_times[-1] - seq.first_token_time) / (n_out - 1) if n_out > 1 else 0.0
            metrics.append(RequestMetrics(r.request_id, len(r.prompt), n_out, seq.first_token_time - r.arrival_time,
                                          tpot, seq.finish_time - r.arrival_time, seq.num_preemptions))
        makespan = max(s.finish_time for s in seqs.values()) - min(r.arrival_time for r in requests)
        return EngineResult({s.seq_id: s.output for s in seqs.values()}, metrics, timeline, makespan,
                            sched.num_preemptions,
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
