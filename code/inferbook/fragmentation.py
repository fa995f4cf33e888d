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
Each policy is one small object in ``SCHEMES`` (admit, grow, release); ``simulate`` runs the same
step loop for all of them.

This is a memory study, not the serving loop (`steploop.run`), and it answers another question:
how much of a pool each *allocation policy* fills with token states, with the scheduler held
fixed and as simple as possible (first come first served, every running sequence one token per
step, no token budget), so that the policies differ only in how they allocate. The contiguous
policies have no block books for `steploop.Scheduler` to ask; the paged policy here is the
vLLM-paper baseline (admission with a 1 % watermark of free blocks). What the book's scheduler
does with a paged pool, step by step, is `steploop`'s (checked against vLLM's own scheduler).

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
from .blocks import BlockAllocator, OutOfBlocksError

SHAREGPT_MEAN_PROMPT = 161.31  # tokens; Kwon et al. 2023, Fig. 11
SHAREGPT_MEAN_OUTPUT = 337.99
POLICIES = ("reserve_max", "pow2", "exact", "paged")


@dataclass(frozen=True)
class Requests:
    """prompt_lens, output_lens: int arrays [n]; every prompt + output ≤ max_len."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    max_len: int

    def __post_init__(self):
        max_len = validate.integer("max_len", self.max_len, minimum=2)
        lens = []
        for name in ("prompt_lens", "output_lens"):
            value = np.asarray(getattr(self, name))
            if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
                raise ValueError(f"{name} must be a 1-D integer array; got {value.dtype} of "
                                 f"shape {value.shape}")
            if value.size and value.min() < 1:
                raise ValueError(f"{name} must be >= 1 everywhere; got {int(value.min())}")
            lens.append(value)
        if len(lens[0]) != len(lens[1]):
            raise ValueError(f"prompt_lens ({len(lens[0])}) and output_lens ({len(lens[1])}) "
                             f"must have one entry per request")
        if len(lens[0]) and int((lens[0] + lens[1]).max()) > max_len:
            raise ValueError(f"every prompt + output must be <= max_len ({max_len})")

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
    seed = validate.non_negative_int("seed", seed)
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


class _Scheme:
    """One allocation scheme: how a request is admitted, grows and is released.

    `admit` reserves memory for request i (None if it does not fit now; then
    `blocked_external` says whether enough slots were free, in holes too small), `needs_memory`
    says whether a running sequence must grow before its next token, `grow` adds that memory
    (only when `has_free_memory()`), `release` frees it. `reserved` is the slots held now.
    """

    grows = False                # does a running sequence ever need more memory?

    def __init__(self, requests: Requests, capacity_tokens: int, block_size: int, allocator):
        self.prompts = requests.prompt_lens.tolist()
        self.outputs = requests.output_lens.tolist()
        self.max_len = requests.max_len
        self.capacity = capacity_tokens
        self.reserved = 0
        self.blocked_external = False

    def admit(self, i: int, length: int, n_running: int):
        raise NotImplementedError

    def needs_memory(self, state: list) -> bool:
        return False

    def has_free_memory(self) -> bool:
        return True

    def grow(self, i: int, state: list) -> None:
        raise NotImplementedError

    def release(self, i: int, handle) -> None:
        raise NotImplementedError

    def free_slots(self) -> int:
        """Free slots, counted as external fragmentation when the queue head fit in no hole."""
        return 0


class _ReserveMax(_Scheme):
    """Every request reserves max_len slots; the pool holds capacity // max_len of them."""

    def admit(self, i, length, n_running):
        if n_running >= self.capacity // self.max_len:
            return None
        self.reserved += self.max_len
        return True

    def release(self, i, handle):
        self.reserved -= self.max_len


class _Contiguous(_Scheme):
    """prompt + output slots (rounded by `_round`), first fit in one contiguous pool."""

    def __init__(self, *args):
        super().__init__(*args)
        self.pool = _FirstFit(self.capacity)

    def _round(self, n: int) -> int:
        return n

    def size(self, i: int) -> int:
        return self._round(self.prompts[i] + self.outputs[i])

    def admit(self, i, length, n_running):
        start = self.pool.alloc(self.size(i))
        if start is None:
            self.blocked_external = self.pool.free_total >= self.size(i)
            return None
        self.reserved += self.size(i)
        return start

    def release(self, i, handle):
        self.pool.free(handle, self.size(i))
        self.reserved -= self.size(i)

    def free_slots(self):
        return self.pool.free_total


class _Pow2(_Contiguous):
    """prompt + output rounded up to a power of two (at most max_len)."""

    def _round(self, n):
        return min(self.max_len, 1 << (n - 1).bit_length())


class _Paged(_Scheme):
    """Blocks from a free list, one more when the last is full; 1% of the blocks kept free."""

    grows = True

    def __init__(self, requests, capacity_tokens, block_size, allocator):
        super().__init__(requests, capacity_tokens, block_size, allocator)
        self.block_size = block_size
        self.allocator = allocator or BlockAllocator(capacity_tokens // block_size, block_size)
        self.watermark = max(1, (capacity_tokens // block_size) // 100)  # as vLLM does
        self.tables: dict[int, list[int]] = {}

    def admit(self, i, length, n_running):
        n_blocks = ceil_div(length + 1, self.block_size)  # the context and the next token's KV
        if self.allocator.num_free_blocks - n_blocks < self.watermark:
            return None
        self.tables[i] = [self.allocator.allocate() for _ in range(n_blocks)]
        self.reserved += n_blocks * self.block_size
        return n_blocks

    def needs_memory(self, state):
        return state[0] + 1 > state[2] * self.block_size

    def has_free_memory(self):
        return self.allocator.num_free_blocks > 0

    def grow(self, i, state):
        self.tables[i].append(self.allocator.allocate())
        state[2] += 1
        self.reserved += self.block_size

    def release(self, i, handle):
        for b in reversed(self.tables.pop(i)):
            self.allocator.free(b)
        self.reserved -= handle * self.block_size


SCHEMES = {"reserve_max": _ReserveMax, "pow2": _Pow2, "exact": _Contiguous, "paged": _Paged}


def simulate(
    requests: Requests,
    policy: str,
    capacity_tokens: int = 32768,
    block_size: int = 16,
    allocator=None,
    max_steps: int = 1_000_000,
) -> SimResult:
    """Serve every request with one allocation policy; return memory statistics (see module doc)."""
    if not isinstance(requests, Requests):
        raise TypeError(f"requests must be a Requests (from sharegpt_like); got {type(requests).__name__}")
    validate.one_of("policy", policy, POLICIES)
    capacity_tokens = validate.positive_int("capacity_tokens", capacity_tokens)
    block_size = validate.positive_int("block_size", block_size)
    max_steps = validate.positive_int("max_steps", max_steps)
    max_len = requests.max_len
    if capacity_tokens < max_len:
        raise ValueError(f"capacity_tokens={capacity_tokens} must hold one sequence of max_len={max_len}")
    if policy == "paged" and allocator is None and capacity_tokens // block_size < 2:
        raise ValueError(f"block_size={block_size} leaves fewer than 2 blocks in "
                         f"capacity_tokens={capacity_tokens}")
    scheme = SCHEMES[policy](requests, capacity_tokens, block_size, allocator)
    outputs = scheme.outputs
    waiting = deque(range(len(outputs)))
    generated = [0] * len(outputs)  # survives preemption
    # running: id -> [length, generated, handle]; dicts keep admission order (newest last)
    running: dict[int, list] = {}
    tl = {k: [] for k in ("held", "reserved", "running", "waiting")}
    totals = dict(held=0, reserved=0, capacity=0, external=0)
    max_concurrent = preemptions = steps = completed = recomputed_tokens = 0
    admitted_before: set[int] = set()

    while waiting or running:
        if steps >= max_steps:
            raise RuntimeError(f"simulation did not finish in {max_steps} steps (policy {policy})")
        # 1. admit from the head of the queue while the scheme finds memory (FCFS, no skipping)
        scheme.blocked_external = False
        while waiting:
            i = waiting[0]
            length = scheme.prompts[i] + generated[i]  # > prompt only after a preemption
            handle = scheme.admit(i, length, len(running))
            if handle is None:
                break
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
            if scheme.needs_memory(state):
                while not scheme.has_free_memory():  # preempt the newest other sequence
                    victim = next(j for j in reversed(running) if j != i) if len(running) > 1 else None
                    if victim is None:
                        raise OutOfBlocksError(1, 0, f"sequence {i} alone")
                    scheme.release(victim, running.pop(victim)[2])
                    waiting.appendleft(victim)
                    preemptions += 1
                scheme.grow(i, state)
            state[0] += 1
            state[1] += 1
            generated[i] += 1
        held_now = sum(s[0] for s in running.values())
        steps += 1
        max_concurrent = max(max_concurrent, len(running))
        tl["held"].append(held_now)
        tl["reserved"].append(scheme.reserved)
        tl["running"].append(len(running))
        tl["waiting"].append(len(waiting))
        if waiting:  # the pool is the bottleneck: count this step
            totals["held"] += held_now
            totals["reserved"] += scheme.reserved
            totals["capacity"] += capacity_tokens
            if scheme.blocked_external:
                totals["external"] += scheme.free_slots()
        # 3. finished sequences free their memory
        for i in [i for i, s in running.items() if s[1] >= outputs[i]]:
            scheme.release(i, running.pop(i)[2])
            completed += 1
    if totals["capacity"] == 0:
        raise ValueError("no request ever waited: the pool is larger than the workload needs; "
                         "use a smaller capacity_tokens or more requests")
    timeline = {k: np.asarray(v) for k, v in tl.items()}
    return SimResult(policy, capacity_tokens, steps, max_concurrent, preemptions=preemptions,
                     completed=completed, recomputed_tokens=recomputed_tokens, timeline=timeline,
                     **totals)
