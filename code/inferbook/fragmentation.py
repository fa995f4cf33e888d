"""How much KV-cache memory holds tokens? Three allocation policies on one simulated chat workload.

A fixed pool of `capacity_tokens` KV slots serves a queue of chat completions, one decoding step
at a time (every running sequence gains one token per step; a sequence is freed when it has
produced all its output tokens). Requests wait first-come-first-served. The policies:

``"reserve_max"``  contiguous, each request reserves `max_len` slots up front (the longest
                   sequence the model allows), as systems did before vLLM (FasterTransformer,
                   Orca (Max) in the vLLM paper).
``"pow2"``         contiguous, prompt + output rounded up to a power of two (Orca (Pow2)),
                   first-fit in the 1-D pool.
``"exact"``        contiguous, each request reserves exactly prompt + output slots (an oracle that
                   knows the output length, Orca (Oracle)), first-fit in the 1-D pool. Freed
                   holes between live reservations cause *external* fragmentation.
``"paged"``        16-token blocks from a free list, a new block only when the last one is full
                   (PagedAttention). When a sequence needs a block and none is free, the most
                   recently admitted sequence is preempted: its blocks are freed and it goes
                   back to the head of the queue; readmitted, it recomputes its prompt and the
                   tokens it had generated (vLLM's recompute preemption).

Public API: ``sharegpt_like(n, seed, max_len)`` → ``Requests``; ``simulate(requests, policy,
capacity_tokens, block_size=16, max_len=2048, allocator=None)`` → ``SimResult`` with
``utilisation`` (token states / pool), ``waste`` (1 − token states / reserved), ``max_concurrent``,
``steps`` and per-step ``timeline`` arrays. `allocator` lets the paged policy run on any object
with ``allocate()``, ``free(block)`` and ``num_free_blocks`` (e.g. an exercise's own free list).

The workload's lengths are log-normal with the means the vLLM paper reports for ShareGPT
(Kwon et al. 2023, Fig. 11: 161.31 input and 337.99 output tokens on average).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from . import validate
from .arith import ceil_div
from .paged import BlockAllocator, OutOfBlocksError

SHAREGPT_MEAN_PROMPT = 161.31  # tokens; Kwon et al. 2023, Fig. 11
SHAREGPT_MEAN_OUTPUT = 337.99
POLICIES = ("reserve_max", "pow2", "exact", "paged")


@dataclass(frozen=True)
class Requests:
    """prompt_lens, output_lens: int arrays [n]; every prompt + output ≤ max_len."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    max_len: int

    def __len__(self) -> int:
        return len(self.prompt_lens)


def sharegpt_like(
    n: int = 1000,
    seed: int = 0,
    max_len: int = 2048,
    mean_prompt: float = SHAREGPT_MEAN_PROMPT,
    mean_output: float = SHAREGPT_MEAN_OUTPUT,
    sigma_prompt: float = 1.0,
    sigma_output: float = 0.8,
) -> Requests:
    """Return `n` seeded requests with log-normal prompt and output lengths.

    The log-normals have the given means (ShareGPT's, by default) and log-space standard
    deviations `sigma_*` (our choice: a long right tail like the paper's histograms).
    Lengths are at least 1 and a request never exceeds `max_len` (outputs are cut).
    """
    n = validate.positive_int("n", n)
    max_len = validate.integer("max_len", max_len, minimum=2)
    for name, value in (("mean_prompt", mean_prompt), ("mean_output", mean_output)):
        validate.finite_float(name, value, minimum=1.0)
    for name, value in (("sigma_prompt", sigma_prompt), ("sigma_output", sigma_output)):
        validate.finite_float(name, value, minimum=0.0)
    rng = np.random.default_rng(seed)

    def lognormal(mean, sigma):
        mu = np.log(mean) - sigma**2 / 2  # E[exp(N(mu, sigma²))] = exp(mu + sigma²/2) = mean
        return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)

    prompt = np.minimum(lognormal(mean_prompt, sigma_prompt), max_len - 1)
    output = np.minimum(lognormal(mean_output, sigma_output), max_len - prompt)
    return Requests(prompt, output, max_len)


@dataclass
class SimResult:
    """Totals over the steps in which requests were waiting (the pool was the bottleneck).

    held: Σ token states in the KV cache; reserved: Σ slots allocated to sequences; capacity:
    Σ pool size — each summed over those steps (token·steps). `timeline` holds per-step arrays
    over the whole run: held, reserved, running, waiting.
    """

    policy: str
    capacity_tokens: int
    steps: int
    max_concurrent: int
    held: int
    reserved: int
    capacity: int
    external: int  # free slots while the queue head did not fit in any hole (contiguous policies)
    preemptions: int
    completed: int = 0  # requests that produced all their output tokens
    # token states a readmitted (preempted) request had to prefill again: its prompt plus the
    # tokens it had generated, once per readmission. Decode steps do not show this work.
    recomputed_tokens: int = 0
    timeline: dict = field(repr=False, default_factory=dict)

    @property
    def utilisation(self) -> float:
        """Fraction of the pool holding token states while requests wait."""
        return self.held / self.capacity

    @property
    def waste(self) -> float:
        """Fraction of the memory reserved for sequences that holds no token state."""
        return 1 - self.held / self.reserved

    @property
    def mean_concurrent(self) -> float:
        return float(np.mean(self.timeline["running"]))


class _FirstFit:
    """Contiguous allocator over [0, capacity): sorted free holes, first fit, merge on free."""

    def __init__(self, capacity: int):
        self.starts, self.sizes = [0], [capacity]

    def alloc(self, n: int) -> int | None:
        for i, size in enumerate(self.sizes):
            if size >= n:
                start = self.starts[i]
                if size == n:
                    del self.starts[i], self.sizes[i]
                else:
                    self.starts[i] += n
                    self.sizes[i] -= n
                return start
        return None

    def free(self, start: int, n: int) -> None:
        i = bisect.bisect(self.starts, start)
        self.starts.insert(i, start)
        self.sizes.insert(i, n)
        if i + 1 < len(self.starts) and start + n == self.starts[i + 1]:  # merge right
            self.sizes[i] += self.sizes.pop(i + 1)
            self.starts.pop(i + 1)
        if i > 0 and self.starts[i - 1] + self.sizes[i - 1] == start:  # merge left
            self.sizes[i - 1] += self.sizes.pop(i)
            self.starts.pop(i)

    @property
    def free_total(self) -> int:
        return sum(self.sizes)


def simulate(
    requests: Requests,
    policy: str,
    capacity_tokens: int = 32768,
    block_size: int = 16,
    allocator=None,
    max_steps: int = 1_000_000,
) -> SimResult:
    """Serve every request with one allocation policy; return memory statistics (see module doc)."""
    validate.one_of("policy", policy, POLICIES)
    capacity_tokens = validate.positive_int("capacity_tokens", capacity_tokens)
    block_size = validate.positive_int("block_size", block_size)
    max_steps = validate.positive_int("max_steps", max_steps)
    max_len = requests.max_len
    if capacity_tokens < max_len:
        raise ValueError(f"capacity_tokens={capacity_tokens} must hold one sequence of max_len={max_len}")
    prompts, outputs = requests.prompt_lens.tolist(), requests.output_lens.tolist()
    waiting = deque(range(len(prompts)))
    generated = [0] * len(prompts)  # survives preemption
    # running: id -> [length, generated, handle]; dicts keep admission order (newest last)
    running: dict[int, list] = {}
    if policy == "paged":
        if allocator is None:
            allocator = BlockAllocator(capacity_tokens // block_size, block_size)
        watermark = max(1, (capacity_tokens // block_size) // 100)  # keep 1% free, as vLLM does
        tables: dict[int, list[int]] = {}
    elif policy in ("exact", "pow2"):
        pool = _FirstFit(capacity_tokens)
    size = {"exact": lambda i: prompts[i] + outputs[i],
            "pow2": lambda i: min(max_len, 1 << (prompts[i] + outputs[i] - 1).bit_length())}.get(policy)
    slots_max = capacity_tokens // max_len
    reserved_now = 0
    tl = {k: [] for k in ("held", "reserved", "running", "waiting")}
    totals = dict(held=0, reserved=0, capacity=0, external=0)
    max_concurrent = preemptions = steps = completed = recomputed_tokens = 0
    admitted_before: set[int] = set()

    def release(i):
        nonlocal reserved_now
        length, _, handle = running.pop(i)
        if policy == "paged":
            for b in reversed(tables.pop(i)):
                allocator.free(b)
            reserved_now -= handle * block_size
        elif size is not None:
            pool.free(handle, size(i))
            reserved_now -= size(i)
        else:
            reserved_now -= max_len

    while waiting or running:
        if steps >= max_steps:
            raise RuntimeError(f"simulation did not finish in {max_steps} steps (policy {policy})")
        # 1. admit from the head of the queue while the policy finds memory (FCFS, no skipping)
        blocked_external = False
        while waiting:
            i = waiting[0]
            length = prompts[i] + generated[i]  # > prompt only after a preemption
            if policy == "reserve_max":
                if len(running) >= slots_max:
                    break
                handle, reserved_now = None, reserved_now + max_len
            elif size is not None:
                start = pool.alloc(size(i))
                if start is None:
                    blocked_external = pool.free_total >= size(i)
                    break
                handle, reserved_now = start, reserved_now + size(i)
            else:
                n_blocks = ceil_div(length + 1, block_size)  # the context plus the next token's KV
                if allocator.num_free_blocks - n_blocks < watermark:
                    break
                tables[i] = [allocator.allocate() for _ in range(n_blocks)]
                handle, reserved_now = n_blocks, reserved_now + n_blocks * block_size
            waiting.popleft()
            if i in admitted_before:  # readmission after a preemption: its KV is recomputed
                recomputed_tokens += length
            admitted_before.add(i)
            running[i] = [length, generated[i], handle]
        # 2. one decoding step: every running sequence stores one more token
        for i in list(running):
            if i not in running:  # preempted during this step
                continue
            state = running[i]
            if policy == "paged" and state[0] + 1 > state[2] * block_size:
                while allocator.num_free_blocks == 0:  # preempt the newest other sequence
                    victim = next(j for j in reversed(running) if j != i) if len(running) > 1 else None
                    if victim is None:
                        raise OutOfBlocksError(1, 0, f"sequence {i} alone")
                    release(victim)
                    waiting.appendleft(victim)
                    preemptions += 1
                tables[i].append(allocator.allocate())
                state[2] += 1
                reserved_now += block_size
            state[0] += 1
            state[1] += 1
            generated[i] += 1
        held_now = sum(s[0] for s in running.values())
        steps += 1
        max_concurrent = max(max_concurrent, len(running))
        tl["held"].append(held_now)
        tl["reserved"].append(reserved_now)
        tl["running"].append(len(running))
        tl["waiting"].append(len(waiting))
        if waiting:  # the pool is the bottleneck: count this step
            totals["held"] += held_now
            totals["reserved"] += reserved_now
            totals["capacity"] += capacity_tokens
            if blocked_external:
                totals["external"] += pool.free_total
        # 3. finished sequences free their memory
        for i in [i for i, s in running.items() if s[1] >= outputs[i]]:
            release(i)
            completed += 1
    if totals["capacity"] == 0:
        raise ValueError("no request ever waited: the pool is larger than the workload needs; "
                         "use a smaller capacity_tokens or more requests")
    timeline = {k: np.asarray(v) for k, v in tl.items()}
    return SimResult(policy, capacity_tokens, steps, max_concurrent, preemptions=preemptions,
                     completed=completed, recomputed_tokens=recomputed_tokens, timeline=timeline,
                     **totals)
