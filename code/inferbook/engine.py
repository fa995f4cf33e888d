"""A small serving engine: continuous batching over a paged KV cache, on the CPU.

The loop of vLLM / nano-vllm, for a `gpt.GPT`. The requests, the scheduler and the step loop
are `steploop`'s (written once, torch-free, shared with the simulator); this module adds what
is specific to running a model:

* `forward_batch` builds the step's `paged.PagedContext` (slot mapping and block tables, once)
  and runs the model once over all scheduled tokens of all sequences (a flat, variable-length
  batch): the same `gpt.GPT.forward` as every other cache, through ``ctx.attend``.
* `ModelExecutor` is the step executor of `steploop.run`: it makes the step's copy-on-write
  block copies (the scheduler keeps only the books and hands them over with the step), runs
  `forward_batch` on the scheduled rows, takes the greedy next tokens, and reads a clock (wall,
  CPU or steps).
* `Engine.run(requests)` loops until every request is done and returns per-request metrics
  (`metrics.RequestMetrics`: TTFT, TPOT, ITL, end-to-end latency) and a per-step timeline.

The requests and the scheduler (`Request`, `Scheduler`, `EngineResult`) are `steploop`'s, the
metrics `metrics`' and the workloads `workload`'s: import them from there.

Greedy outputs do not depend on the batching: each sequence's logits are computed from its own
tokens only, so the engine reproduces single-request greedy decoding token for token (exactly
in float64; float32 agrees up to rounding of the batched matrix products).
"""

from __future__ import annotations

import time

import torch

from . import validate
from .blocks import BlockAllocator
from .gpt import GPT
from .llama import Llama
from .paged import PagedContext, PagedKVCache
from .prefix_cache import PrefixCache
from .steploop import EngineResult, Request, Scheduler, run


@torch.inference_mode()
def forward_batch(model: GPT | Llama, cache: PagedKVCache, batch: list[tuple[int, list[int], int]]) -> torch.Tensor:
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
    hidden = model.hidden_states(torch.tensor([tokens], device=ctx.slot_mapping.device),
                                 ctx=ctx)  # [1, T, n_embd]
    return model.head(hidden[0, ctx.last_index])


def copy_blocks(cache: PagedKVCache, copies) -> None:
    """Copy each (src, dst) block's keys and values, in every layer (copy-on-write).

    `copies`: (src, dst) block pairs, as a step's schedule carries them (`ScheduledStep.copies`);
    all are checked before any is made.
    """
    if not isinstance(cache, PagedKVCache):
        raise validate.ArgumentTypeError(f"cache must be a paged.PagedKVCache, got {type(cache).__name__}")
    pairs = validate.items("copies", copies)
    for i, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise ValueError(f"copies[{i}] must be a (src, dst) pair of blocks, got {pair!r}")
        validate.int_list(f"copies[{i}]", pair, 0, cache.allocator.num_blocks - 1)
    for src, dst in pairs:
        for pool in (*cache.k_pool, *cache.v_pool):
            pool[dst].copy_(pool[src])


class ModelExecutor:
    """The step executor of `steploop.run` that runs a `GPT` over the scheduled rows.

    `clock="wall"` measures seconds (time.perf_counter); `clock="cpu"` measures this process's
    CPU seconds (time.process_time: with one torch thread, what the wall clock would read on an
    otherwise idle machine, and far steadier on a shared one; idle time jumps to the next
    arrival); `clock="steps"` counts engine steps, which makes every metric deterministic.
    """

    def __init__(self, model: GPT | Llama, cache: PagedKVCache, clock: str = "wall"):
        if not isinstance(model, (GPT, Llama)):
            raise TypeError(f"model must be a gpt.GPT or llama.Llama, got {type(model).__name__}")
        if not isinstance(cache, PagedKVCache):
            raise TypeError(f"cache must be a paged.PagedKVCache, got {type(cache).__name__}")
        self.model, self.cache = model, cache
        self.clock = validate.one_of("clock", clock, ("wall", "cpu", "steps"))
        self._timer = time.process_time if clock == "cpu" else time.perf_counter
        self._start: float | None = None  # set by the first now(): the run's t = 0
        self._step = 0

    def check(self, request: Request) -> None:
        """Refuse tokens outside the vocabulary and requests longer than the model's positions."""
        validate.token_ids("prompt", request.prompt, self.model.config.vocab_size)
        total = len(request.prompt) + request.max_new_tokens
        if total - 1 > self.model.config.n_positions:
            raise ValueError(f"request {request.request_id}: prompt + max_new_tokens − 1 = {total - 1} "
                             f"exceeds n_positions={self.model.config.n_positions}")

    def now(self) -> float:
        if self._start is None:
            self._start = self._timer()
        return float(self._step) if self.clock == "steps" else self._timer() - self._start

    def wait(self, now: float, next_arrival: float) -> None:
        now, next_arrival = validate.finite_float("now", now), validate.finite_float("next_arrival", next_arrival)
        if self.clock == "wall":
            time.sleep(max(0.0, min(1e-3, next_arrival - now)))
        elif self.clock == "cpu":  # CPU time does not pass while idle: jump
            self._start -= next_arrival - now
        else:
            self._step += 1

    def execute(self, scheduled) -> list[int]:
        """Make the step's block copies (`scheduled.copies`), run its rows, return the greedy tokens."""
        copy_blocks(self.cache, getattr(scheduled, "copies", ()))
        # A padding row (n = 0) recomputes the sequence's last cached position: same cost as a
        # decode row, result discarded.
        rows = [(s.seq_id, s.tokens[s.num_computed:s.num_computed + n], s.num_computed) if n
                else (s.seq_id, s.tokens[s.num_computed - 1:s.num_computed], s.num_computed - 1)
                for s, n in scheduled]
        logits = forward_batch(self.model, self.cache, rows)
        self._step += 1
        return logits.argmax(-1).tolist()


class Engine:
    """Serves `Request`s with a `GPT` (or a `llama.Llama`) on a paged KV cache of `num_blocks` blocks.

    `clock`: "wall", "cpu" or "steps" (see `ModelExecutor`; with "steps" arrival times are in
    steps too).
    Decoding is greedy (the request's length is `max_new_tokens`; there is no end-of-sequence).
    """

    def __init__(self, model: GPT | Llama, num_blocks: int, block_size: int = 16, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, policy: str = "continuous",
                 chunked_prefill: bool = False, prefix_caching: bool = False, clock: str = "wall"):
        if not isinstance(model, (GPT, Llama)):
            raise TypeError(f"model must be a gpt.GPT or llama.Llama, got {type(model).__name__}")
        validate.one_of("clock", clock, ("wall", "cpu", "steps"))
        if type(prefix_caching) is not bool:
            raise TypeError(f"prefix_caching must be True or False, got {prefix_caching!r}")
        self.model = model.eval()
        weight = next(model.parameters())  # the cache lives where the model does (a GPU: the
        cfg = model.config                 # Triton decode kernel, `paged.decode_backend`)
        # GQA: the cache holds n_kv_head heads (GPT-2: all of them)
        self.cache = PagedKVCache(BlockAllocator(num_blocks, block_size), cfg.n_layer, cfg.n_kv_head,
                                  cfg.head_dim, weight.dtype, weight.device)
        self.prefix_cache = PrefixCache(self.cache.allocator) if prefix_caching else None
        self.scheduler = Scheduler(self.cache.blocks, max_num_seqs, max_num_batched_tokens, policy,
                                   chunked_prefill, self.prefix_cache)
        self.clock = clock

    def run(self, requests: list[Request]) -> EngineResult:
        """Serve every request to completion; return outputs, metrics and the per-step timeline."""
        return run(self.scheduler, requests, ModelExecutor(self.model, self.cache, self.clock))


def serve(model: GPT, requests: list[Request], **engine_kwargs) -> EngineResult:
    """Return `Engine(model, **engine_kwargs).run(requests)` (a fresh engine per call)."""
    return Engine(model, **engine_kwargs).run(requests)
