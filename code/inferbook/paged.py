"""A paged KV cache: fixed-size blocks in one pool, a block table per sequence (PagedAttention).

Kwon et al. (2023) store the KV cache the way an operating system stores a process's memory:
in fixed-size *blocks* (pages) taken from one shared pool, mapped by a per-sequence *block
table* from logical block i (tokens i·B .. i·B + B − 1) to a physical block. A sequence only
ever wastes the unused tail of its last block, and blocks can be shared between sequences
(parallel sampling, beam search, prefix caching) with reference counts and copy-on-write.

Public API (stable; the serving engine builds on it):

``BlockAllocator(num_blocks, block_size=16)``
    The free list and reference counts. ``allocate() -> int`` (ref count 1; raises
    ``OutOfBlocksError`` when the free list is empty), ``free(block)`` (drops one reference;
    the block returns to the free list at 0; freeing a free block raises ``ValueError``),
    ``incref(block)``, ``ref_count(block)``, ``num_free_blocks``, ``can_allocate(n)``; the
    module function ``blocks_for(num_tokens, block_size)`` = ⌈num_tokens / block_size⌉. The
    free list is ordered: blocks a
    prefix cache still indexes go to its tail and are evicted least-recently-used (see
    `prefix_cache.PrefixCache`, which plugs in through ``allocator.hook``).

``OutOfBlocksError(RuntimeError)``
    The scheduler's signal: not enough free blocks; nothing was changed. Carries ``needed``
    and ``free``. Check first with ``can_allocate(n)`` / ``PagedKVCache.can_append(seq, n)``.

``PagedKVCache(allocator, n_layers, n_kv_heads, head_dim, dtype=torch.float32, device="cpu")``
    Storage ``k_pool[layer]``, ``v_pool[layer]``: ``[num_blocks, block_size, n_kv_heads, head_dim]``.
    Sequences by id (any hashable): ``add_sequence(seq_id, blocks=(), num_tokens=0)`` (start
    empty, or on blocks the caller already holds a reference to, e.g. from a prefix-cache hit),
    ``reserve(seq_id, n)`` (reserve n more token slots; what a scheduler calls),
    ``append_slots(seq_id, n) -> slots`` (reserve n more token slots; a new block only when
    the last one is full; copy-on-write of a shared partly-filled last block; returns the flat
    slot indices ``block * block_size + offset``, a LongTensor [n]), ``can_append(seq_id, n)``,
    ``blocks_needed(seq_id, n)``, ``write(layer, slots, k, v)``, ``gather(layer, seq_id)``,
    ``fork(parent_id, child_id)`` (share every block), ``free_sequence(seq_id)`` (drop the
    sequence's references; a second call raises ``ValueError``), ``block_table(seq_id) ->
    list[int]``, ``num_tokens(seq_id)``, ``sequences``, ``view(seq_id) -> SequenceCacheView``.

``PagedContext(cache, steps)``
    The model's attention context (see `gpt`) for one step through the pages: `steps` lists
    ``(seq_id, start, n)``, the tokens start .. start + n − 1 each sequence computes (their slots
    already reserved). Built once per step from the public API above (block tables, lengths):
    the slot mapping, padded block tables and masks, as nano-vllm's ``prepare_prefill`` /
    ``prepare_decode`` do, but passed explicitly to ``GPT.forward(tokens, ctx.positions, ctx)``.
    Tokens are packed (``[1, total]``, the engine's variable-length batch) or, with
    ``rectangular=True``, one row per sequence (``[len(steps), n]``).

``SequenceCacheView(cache, seq_id)``, ``BatchCacheView(cache, seq_ids)``
    One sequence (batch 1), or several of equal length run as one batch, behind the contiguous
    caches' step protocol: ``begin_step(pos, n)`` reserves the slots (pos must be the current
    length) and returns a `PagedContext`; ``end_step(ctx)``. So
    ``GPT.forward(idx, cache=view, pos=view.length)`` runs through the pages.

``paged_attention(q, k_pool, v_pool, block_table, context_len)``
    Causal attention for one sequence reading keys/values through its block table.
    ``paged_decode_attention(q, k_pool, v_pool, block_tables, context_lens)``: one query per
    sequence, a batch of sequences of different lengths (the decode step of a serving engine).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Hashable, Sequence

import torch
import torch.nn.functional as F

from . import validate
from .arith import ceil_div


class OutOfBlocksError(RuntimeError):
    """Not enough free KV blocks for the request; the cache was left unchanged.

    `needed`: blocks the operation needed; `free`: blocks that were free. A scheduler catches
    this (or asks `can_allocate` first) and preempts or queues a sequence.
    """

    def __init__(self, needed: int, free: int, what: str = "allocation"):
        self.needed, self.free = needed, free
        super().__init__(
            f"out of KV blocks: {what} needs {needed} block(s) but only {free} are free; "
            "free a sequence (or preempt one) and retry"
        )


class BlockAllocator:
    """A pool of `num_blocks` blocks of `block_size` token slots: free list + reference counts.

    Invariant: a block is on the free list exactly when its reference count is 0.
    """

    def __init__(self, num_blocks: int, block_size: int = 16):
        self.num_blocks = validate.positive_int("num_blocks", num_blocks)
        self.block_size = validate.positive_int("block_size", block_size)
        self._ref = [0] * num_blocks
        # Ordered free list: allocate() takes from the front. Plain freed blocks go to the front
        # (reused first); blocks a prefix cache still indexes go to the back (evicted last, LRU).
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        # Optional prefix cache: `hook.is_cached(block) -> bool`, `hook.evict(block)`.
        self.hook = None

    @property
    def num_free_blocks(self) -> int:
        """Blocks with reference count 0 (including cached blocks that may be evicted)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def can_allocate(self, n: int) -> bool:
        """Return whether `n` blocks can be allocated now."""
        return validate.non_negative_int("n", n) <= len(self._free)

    def _check(self, block: int) -> int:
        return validate.integer("block", block, 0, self.num_blocks - 1)

    def allocate(self) -> int:
        """Return a free block with reference count 1; raise `OutOfBlocksError` if none is free."""
        if not self._free:
            raise OutOfBlocksError(1, 0)
        block, _ = self._free.popitem(last=False)
        if self.hook is not None and self.hook.is_cached(block):
            self.hook.evict(block)  # the least recently used cached block loses its contents
        self._ref[block] = 1
        return block

    def incref(self, block: int) -> None:
        """Add a reference to `block`; a free (cached) block is taken off the free list."""
        block = self._check(block)
        if self._ref[block] == 0:
            del self._free[block]
        self._ref[block] += 1

    def free(self, block: int) -> None:
        """Drop one reference to `block`; at zero it returns to the free list."""
        block = self._check(block)
        if self._ref[block] == 0:
            raise ValueError(f"block {block} is already free (double free)")
        self._ref[block] -= 1
        if self._ref[block] == 0:
            self._free[block] = None  # back of the list: evicted last
            if self.hook is None or not self.hook.is_cached(block):
                self._free.move_to_end(block, last=False)  # nothing to keep: reuse first

    def ref_count(self, block: int) -> int:
        return self._ref[self._check(block)]

    def free_blocks(self) -> list[int]:
        """Return the free list in allocation order (a copy)."""
        return list(self._free)

    def __repr__(self) -> str:
        return (f"BlockAllocator(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={self.num_free_blocks})")


class PagedKVCache:
    """Paged K/V storage for many sequences sharing one `BlockAllocator`.

    k_pool[layer], v_pool[layer]: [num_blocks, block_size, n_kv_heads, head_dim]. Token t of a
    sequence lives in block `block_table[t // block_size]` at offset `t % block_size`.
    """

    def __init__(
        self,
        allocator: BlockAllocator,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        if not isinstance(allocator, BlockAllocator):
            raise TypeError(f"allocator must be a BlockAllocator, got {type(allocator).__name__}")
        for name, value in [("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)]:
            validate.positive_int(name, value)
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        shape = (allocator.num_blocks, allocator.block_size, n_kv_heads, head_dim)
        self.k_pool = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v_pool = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self._tables: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}
        self._finished: set[Hashable] = set()
        self.copies = 0  # copy-on-write block copies made so far

    @classmethod
    def for_model(cls, config, num_blocks: int, block_size: int = 16, dtype=torch.float32, device="cpu"):
        """Return a cache (with its own allocator) shaped for a `gpt.GPTConfig` (MHA: kv heads = heads)."""
        return cls(BlockAllocator(num_blocks, block_size), config.n_layer, config.n_head,
                   config.head_dim, dtype, device)

    # --- sequences -------------------------------------------------------------------------
    @property
    def sequences(self) -> list[Hashable]:
        return list(self._tables)

    def _seq(self, seq_id: Hashable) -> list[int]:
        if seq_id in self._tables:
            return self._tables[seq_id]
        if seq_id in self._finished:
            raise ValueError(f"sequence {seq_id!r} is finished (freed); it cannot be used again")
        raise ValueError(f"unknown sequence {seq_id!r}; known: {self.sequences}")

    def add_sequence(self, seq_id: Hashable, blocks: Sequence[int] = (), num_tokens: int | None = None) -> None:
        """Register a sequence; optionally on `blocks` the caller already holds one reference to.

        `num_tokens` defaults to `len(blocks) * block_size` (full blocks, as a prefix-cache hit gives).
        """
        self._check_new(seq_id)
        blocks = validate.block_table("blocks", blocks, self.allocator.num_blocks)
        if num_tokens is None:
            num_tokens = len(blocks) * self.block_size
        num_tokens = validate.non_negative_int("num_tokens", num_tokens)
        if ceil_div(num_tokens, self.block_size) != len(blocks):
            raise ValueError(f"{num_tokens} tokens need {ceil_div(num_tokens, self.block_size)} "
                             f"blocks of {self.block_size}, got {len(blocks)} blocks")
        for b in blocks:
            if self.allocator.ref_count(b) < 1:
                raise ValueError(f"block {b} is free; take a reference (allocate/incref) before adding it")
        self._finished.discard(seq_id)
        self._tables[seq_id] = blocks
        self._lengths[seq_id] = num_tokens

    def _check_new(self, seq_id: Hashable) -> None:
        try:
            hash(seq_id)
        except TypeError:
            raise TypeError(f"seq_id must be hashable, got {type(seq_id).__name__}") from None
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")

    def block_table(self, seq_id: Hashable) -> list[int]:
        """Return the sequence's physical blocks in logical order (a copy)."""
        return list(self._seq(seq_id))

    def num_tokens(self, seq_id: Hashable) -> int:
        self._seq(seq_id)
        return self._lengths[seq_id]

    def blocks_needed(self, seq_id: Hashable, n: int) -> int:
        """Return the new blocks `append_slots(seq_id, n)` would take (incl. a copy-on-write)."""
        table = self._seq(seq_id)
        n = validate.non_negative_int("n", n)
        length = self._lengths[seq_id]
        needed = ceil_div(length + n, self.block_size) - len(table)
        if n > 0 and length % self.block_size and self.allocator._ref[table[-1]] > 1:
            needed += 1  # the shared, partly filled last block must be copied before writing
        return needed

    def can_append(self, seq_id: Hashable, n: int = 1) -> bool:
        return self.allocator.can_allocate(self.blocks_needed(seq_id, n))

    def append_slots(self, seq_id: Hashable, n: int) -> torch.Tensor:
        """Reserve slots for `n` more tokens; return their flat slot indices (LongTensor [n]).

        All or nothing: raises `OutOfBlocksError` (cache unchanged) if the blocks are not free.
        """
        length = self.reserve(seq_id, n)
        return self._slots(self._tables[seq_id], length, length + n)

    def reserve(self, seq_id: Hashable, n: int) -> int:
        """Reserve slots for `n` more tokens (as `append_slots`); return the old length."""
        needed = self.blocks_needed(seq_id, n)  # checks seq_id and n
        if not self.allocator.can_allocate(needed):
            raise OutOfBlocksError(needed, self.allocator.num_free_blocks, f"appending {n} token(s) to {seq_id!r}")
        table, length = self._tables[seq_id], self._lengths[seq_id]
        if n > 0 and length % self.block_size and self.allocator._ref[table[-1]] > 1:
            table[-1] = self._copy_on_write(table[-1])
        while len(table) < ceil_div(length + n, self.block_size):
            table.append(self.allocator.allocate())
        self._lengths[seq_id] = length + n
        return length

    def _copy_on_write(self, block: int) -> int:
        """Return a private copy of the shared `block` (all layers); drop our reference to it."""
        new = self.allocator.allocate()
        for pool in (*self.k_pool, *self.v_pool):
            pool[new].copy_(pool[block])
        self.allocator.free(block)
        self.copies += 1
        return new

    def _slots(self, table: list[int], start: int, stop: int) -> torch.Tensor:
        device = self.k_pool[0].device
        t = torch.arange(start, stop, device=device)
        blocks = torch.tensor(table, dtype=torch.long, device=device)[t // self.block_size]
        return blocks * self.block_size + t % self.block_size

    def slots(self, seq_id: Hashable, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Return the flat slot indices of tokens start .. stop − 1 of the sequence."""
        table = self._seq(seq_id)
        stop = self._lengths[seq_id] if stop is None else validate.integer("stop", stop)
        start = validate.integer("start", start)
        if not 0 <= start <= stop <= self._lengths[seq_id]:
            raise ValueError(f"token range {start}..{stop} outside 0..{self._lengths[seq_id]}")
        return self._slots(table, start, stop)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Make `child_id` share every block of `parent_id` (copy-on-write on the next divergent write)."""
        table = self._seq(parent_id)
        self._check_new(child_id)
        for b in table:
            self.allocator.incref(b)
        self._finished.discard(child_id)
        self._tables[child_id] = list(table)
        self._lengths[child_id] = self._lengths[parent_id]

    def free_sequence(self, seq_id: Hashable) -> None:
        """Drop the sequence's block references (last block first, so it is evicted first)."""
        table = self._seq(seq_id)
        lost = [b for b in table if self.allocator.ref_count(b) < 1]
        if lost:  # someone freed them behind the table's back: refuse before changing anything
            raise ValueError(f"sequence {seq_id!r} holds block(s) {lost} that are already free")
        for b in reversed(table):
            self.allocator.free(b)
        del self._tables[seq_id], self._lengths[seq_id]
        self._finished.add(seq_id)

    # --- data ------------------------------------------------------------------------------
    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v ([n, n_kv_heads, head_dim]) at flat `slots` ([n]) of `layer`."""
        validate.integer("layer", layer, 0, self.n_layers - 1)
        validate.int_tensor("slots", slots, 0, self.allocator.num_blocks * self.block_size, "slot indices")
        want = (slots.numel(), self.n_kv_heads, self.head_dim)
        if k.shape != want or v.shape != want:
            raise ValueError(f"k and v must both be {list(want)}, got {tuple(k.shape)} and {tuple(v.shape)}")
        self._write(layer, slots, k, v)

    def _write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        kp = self.k_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        vp = self.v_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        kp[slots] = k.to(kp.dtype)
        vp[slots] = v.to(vp.dtype)

    def gather(self, layer: int, seq_id: Hashable, stop: int | None = None):
        """Return the sequence's keys and values, each [num_tokens, n_kv_heads, head_dim]."""
        validate.integer("layer", layer, 0, self.n_layers - 1)
        slots = self.slots(seq_id, 0, stop)
        kp = self.k_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        vp = self.v_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        return kp[slots], vp[slots]

    def view(self, seq_id: Hashable) -> "SequenceCacheView":
        """Return the sequence behind the model's cache protocol (``GPT.forward(..., cache=view)``)."""
        return SequenceCacheView(self, seq_id)

    def __repr__(self) -> str:
        return (f"PagedKVCache({len(self._tables)} sequences, {self.allocator.num_used_blocks}/"
                f"{self.allocator.num_blocks} blocks used, block_size={self.block_size})")


class _Group:
    """Padded attention inputs for the sequences of one kind in a step (all decodes, or all prefills)."""

    def __init__(self, members, offsets, tables, starts, lengths, block_size: int):
        q_max = max(lengths[b] for b in members)
        width = max(ceil_div(starts[b] + lengths[b], block_size) for b in members)
        self.token_index = torch.tensor([offsets[b] + i for b in members for i in range(lengths[b])])
        rows = [j * q_max + i for j, b in enumerate(members) for i in range(lengths[b])]
        query_pos = torch.full((len(members) * q_max,), -1, dtype=torch.long)
        query_pos[rows] = torch.tensor([starts[b] + i for b in members for i in range(lengths[b])])
        query_pos = query_pos.view(len(members), q_max)
        allowed = torch.arange(width * block_size)[None, None, :] <= query_pos[:, :, None]  # causal
        allowed[:, :, 0] |= query_pos < 0  # padded query rows attend somewhere harmless (discarded)
        self.rows = torch.tensor(rows)  # [T_g] rows of the group's tokens in the padded queries
        self.tables = torch.tensor([tables[b][:width] + [0] * (width - len(tables[b][:width]))
                                    for b in members])  # [n_seq, width], padded with block 0
        self.mask = allowed[:, None]  # [n_seq, 1, q_max, width * block_size]
        self.n_seq, self.q_max = len(members), q_max


class PagedContext:
    """The attention context of one step through a `PagedKVCache` (the model's seam; see `gpt`).

    steps: ``(seq_id, start, n)`` per sequence: it computes its tokens start .. start + n − 1,
    whose slots are already reserved (``start + n ≤ cache.num_tokens(seq_id)``). Built once per
    step, from the cache's public API: `slot_mapping` [T] (where each new token's keys/values
    go), `positions`, and per group (decodes apart from prefill chunks, as engines use a decode
    and a prefill kernel) block tables padded to the longest and causal masks. Packed layout:
    tokens [1, T] in the order of `steps` (`positions` [1, T]); `rectangular`: tokens
    [len(steps), n], every sequence at the same start and n (`positions` [n]).
    `last_index` [len(steps)]: each sequence's last token in the packed order.
    """

    def __init__(self, cache: PagedKVCache, steps, rectangular: bool = False):
        steps = list(steps)
        if not steps:
            raise ValueError("steps must list at least one (seq_id, start, n)")
        bs = cache.block_size
        tables, starts, lengths = [], [], []
        for i, (seq_id, start, n) in enumerate(steps):
            tables.append(cache.block_table(seq_id))
            starts.append(validate.non_negative_int(f"steps[{i}] start", start))
            lengths.append(validate.positive_int(f"steps[{i}] n", n))
            if start + n > cache.num_tokens(seq_id):
                raise ValueError(f"steps[{i}]: tokens {start}..{start + n - 1} of {seq_id!r} have no "
                                 f"slots ({cache.num_tokens(seq_id)} reserved); reserve them first")
        if rectangular and len(set(zip(starts, lengths))) != 1:
            raise ValueError("rectangular=True needs every sequence at the same start and n")
        self.cache, self.rectangular = cache, rectangular
        self.batch = len(steps) if rectangular else 1
        # Slot of token t: block_table[t // bs] * bs + t % bs (plain Python: a few dozen integers
        # per step; building them as tensors per sequence would cost more than the model).
        self.slot_mapping = torch.tensor([table[t // bs] * bs + t % bs for table, s, n
                                          in zip(tables, starts, lengths) for t in range(s, s + n)])
        if rectangular:
            self.positions = torch.arange(starts[0], starts[0] + lengths[0])
        else:
            self.positions = torch.tensor([[p for s, n in zip(starts, lengths) for p in range(s, s + n)]])
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        self.last_index = torch.tensor(offsets[1:]) - 1
        decodes = [b for b, n in enumerate(lengths) if n == 1]
        prefills = [b for b, n in enumerate(lengths) if n > 1]
        self.groups = [_Group(m, offsets, tables, starts, lengths, bs) for m in (decodes, prefills) if m]
        if self.slot_mapping.device != cache.k_pool[0].device:
            self.slot_mapping = self.slot_mapping.to(cache.k_pool[0].device)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [rows, t, heads, d] (packed: rows = 1); store k, v; return attention, q's shape."""
        shape, d = q.shape, q.shape[-1]
        q, k, v = q.reshape(-1, shape[-2], d), k.reshape(-1, k.shape[-2], d), v.reshape(-1, v.shape[-2], d)
        self.cache._write(layer, self.slot_mapping, k, v)
        group = q.shape[1] // k.shape[1]  # query heads per KV head (GQA)
        y = torch.empty_like(q)
        for g in self.groups:
            # Each sequence's blocks in logical order: [B, width, bs, H, d] -> [B, H, width * bs, d]
            k_all = self.cache.k_pool[layer][g.tables].flatten(1, 2).transpose(1, 2)
            v_all = self.cache.v_pool[layer][g.tables].flatten(1, 2).transpose(1, 2)
            if group > 1:
                k_all, v_all = k_all.repeat_interleave(group, 1), v_all.repeat_interleave(group, 1)
            q_pad = q.new_zeros(g.n_seq * g.q_max, q.shape[1], d)
            q_pad[g.rows] = q[g.token_index]
            q_pad = q_pad.view(g.n_seq, g.q_max, q.shape[1], d).transpose(1, 2)  # [B, H, Q, d]
            out = F.scaled_dot_product_attention(q_pad, k_all, v_all, attn_mask=g.mask)
            y[g.token_index] = out.transpose(1, 2).reshape(-1, q.shape[1], d)[g.rows]
        return y.view(shape)


def _begin_append(cache: PagedKVCache, seq_ids: list, pos: int, n: int) -> PagedContext:
    """Reserve n slots on every sequence (all of length pos), all or nothing; return the context."""
    pos, n = validate.non_negative_int("pos", pos), validate.positive_int("n", n)
    for s in seq_ids:
        if cache.num_tokens(s) != pos:
            raise ValueError(f"paged cache appends only: got pos={pos} but sequence {s!r} holds "
                             f"{cache.num_tokens(s)} tokens")
    needed = sum(cache.blocks_needed(s, n) for s in seq_ids)
    if not cache.allocator.can_allocate(needed):
        raise OutOfBlocksError(needed, cache.allocator.num_free_blocks, f"appending {n} token(s) to {seq_ids}")
    for s in seq_ids:
        cache.reserve(s, n)
    return PagedContext(cache, [(s, pos, n) for s in seq_ids], rectangular=True)


class SequenceCacheView:
    """One sequence of a `PagedKVCache` behind the contiguous caches' step protocol (batch 1).

    Decoding appends: a step at positions pos .. pos + n − 1 must start at the sequence's
    current length; `begin_step` reserves the slots (taking a block only at a boundary) and
    returns the step's `PagedContext`. Rewriting earlier positions is refused: they may live
    in shared blocks.
    """

    batch = 1

    def __init__(self, cache: PagedKVCache, seq_id: Hashable):
        cache.num_tokens(seq_id)  # raises for an unknown sequence
        self.cache, self.seq_id = cache, seq_id

    @property
    def length(self) -> int:
        return self.cache.num_tokens(self.seq_id)

    def begin_step(self, pos: int, n: int) -> PagedContext:
        return _begin_append(self.cache, [self.seq_id], pos, n)

    def end_step(self, ctx: PagedContext) -> None:
        """Nothing to close: the slots were reserved by `begin_step`."""


class BatchCacheView:
    """Several sequences of a `PagedKVCache`, all of the same length, run as one batch.

    Row b of the batch is sequence `seq_ids[b]`; each row appends and reads through its own block
    table (shared blocks are copied on write as usual).
    """

    def __init__(self, cache: PagedKVCache, seq_ids: Sequence[Hashable]):
        seq_ids = list(seq_ids)
        if not seq_ids:
            raise ValueError("BatchCacheView needs at least one sequence")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"seq_ids must be distinct, got {seq_ids}")
        lengths = {cache.num_tokens(s) for s in seq_ids}
        if len(lengths) != 1:
            raise ValueError(f"BatchCacheView needs sequences of equal length, got lengths {sorted(lengths)}")
        self.cache, self.seq_ids, self.batch = cache, seq_ids, len(seq_ids)

    @property
    def length(self) -> int:
        return self.cache.num_tokens(self.seq_ids[0])

    def begin_step(self, pos: int, n: int) -> PagedContext:
        return _begin_append(self.cache, self.seq_ids, pos, n)

    def end_step(self, ctx: PagedContext) -> None:
        """Nothing to close: the slots were reserved by `begin_step`."""


def _check_attention_inputs(q, n_heads, k_pool, v_pool):
    if k_pool.shape != v_pool.shape or k_pool.dim() != 4:
        raise ValueError(f"k_pool and v_pool must both be [num_blocks, block_size, n_kv_heads, head_dim], "
                         f"got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    n_kv = k_pool.shape[2]
    if q.shape[-1] != k_pool.shape[-1]:
        raise ValueError(f"q head_dim {q.shape[-1]} != pool head_dim {k_pool.shape[-1]}")
    if n_heads % n_kv:
        raise ValueError(f"query heads ({n_heads}) must be a multiple of KV heads ({n_kv})")
    return n_heads // n_kv


def paged_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_table: Sequence[int] | torch.Tensor,
    context_len: int,
) -> torch.Tensor:
    """Return causal attention [n_heads, n_q, head_dim] for one sequence, read through its block table.

    q: [n_heads, n_q, head_dim], the queries of the last n_q of `context_len` positions;
    k_pool, v_pool: [num_blocks, block_size, n_kv_heads, head_dim]; block_table: the sequence's
    physical blocks (at least ⌈context_len / block_size⌉). Query heads are grouped onto KV heads
    (GQA) when n_heads is a multiple of n_kv_heads.
    """
    if q.dim() != 3:
        raise ValueError(f"q must be [n_heads, n_q, head_dim], got {tuple(q.shape)}")
    group = _check_attention_inputs(q, q.shape[0], k_pool, v_pool)
    block_size = k_pool.shape[1]
    table = validate.block_table("block_table", block_table, k_pool.shape[0])
    context_len = validate.positive_int("context_len", context_len)
    table = torch.tensor(table, dtype=torch.long, device=k_pool.device)
    n_blocks = ceil_div(context_len, block_size)
    if context_len < q.shape[1] or n_blocks > len(table):
        raise ValueError(f"context_len={context_len} needs ≥ {q.shape[1]} (n_q) and ≤ "
                         f"{len(table) * block_size} (block table of {len(table)} blocks)")
    # Read the sequence's blocks in logical order and drop the unused tail of the last one.
    k = k_pool[table[:n_blocks]].flatten(0, 1)[:context_len]  # [context_len, n_kv_heads, d]
    v = v_pool[table[:n_blocks]].flatten(0, 1)[:context_len]
    k = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [n_heads, context_len, d]
    v = v.transpose(0, 1).repeat_interleave(group, dim=0)
    n_q = q.shape[1]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = torch.ones(n_q, context_len, dtype=torch.bool, device=q.device).tril(context_len - n_q)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def paged_decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: Sequence[Sequence[int]],
    context_lens: Sequence[int],
) -> torch.Tensor:
    """Return attention [batch, n_heads, head_dim] of one query per sequence over its whole context.

    q: [batch, n_heads, head_dim]; sequence b attends to its `context_lens[b]` tokens through
    `block_tables[b]`. Tables are padded to the longest and positions past each length masked,
    as a batched decode kernel does.
    """
    if q.dim() != 3 or q.shape[0] != len(block_tables) or len(block_tables) != len(context_lens):
        raise ValueError(f"q must be [batch, n_heads, head_dim] with batch = len(block_tables) = "
                         f"len(context_lens); got q {tuple(q.shape)}, {len(block_tables)} tables, "
                         f"{len(context_lens)} lengths")
    group = _check_attention_inputs(q, q.shape[1], k_pool, v_pool)
    block_size = k_pool.shape[1]
    block_tables = [validate.block_table(f"block_tables[{b}]", t, k_pool.shape[0])
                    for b, t in enumerate(block_tables)]
    lens = torch.tensor(validate.int_list("context_lens", context_lens, minimum=1), dtype=torch.long)
    width = max(ceil_div(int(n), block_size) for n in lens)
    padded = torch.zeros(len(block_tables), width, dtype=torch.long)  # pad with block 0, masked below
    for b, (table, n) in enumerate(zip(block_tables, lens.tolist())):
        need = ceil_div(n, block_size)
        if len(table) < need:
            raise ValueError(f"sequence {b}: context_len {n} needs {need} blocks, table has {len(table)}")
        padded[b, :need] = torch.as_tensor(list(table[:need]), dtype=torch.long)
    padded, lens = padded.to(k_pool.device), lens.to(k_pool.device)
    k = k_pool[padded].flatten(1, 2)  # [batch, width * block_size, n_kv_heads, d]
    v = v_pool[padded].flatten(1, 2)
    k = k.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)  # [batch, n_heads, L, d]
    v = v.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    scores = (k @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])  # [batch, n_heads, L]
    valid = torch.arange(k.shape[2], device=k.device) < lens[:, None]  # [batch, L]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    return (torch.softmax(scores, dim=-1).unsqueeze(-2) @ v).squeeze(-2)


def blocks_for(num_tokens: int, block_size: int = 16) -> int:
    """Return ⌈num_tokens / block_size⌉, the blocks that hold `num_tokens` tokens (0 for 0)."""
    return ceil_div(validate.non_negative_int("num_tokens", num_tokens),
                    validate.positive_int("block_size", block_size))


def check_invariants(cache: PagedKVCache) -> None:
    """Raise AssertionError unless the allocator's counts agree with the block tables.

    Every block's reference count equals the number of tables holding it (a prefix cache holds
    no references), a block is free exactly when its count is 0, no table
    holds a block twice, and each table has exactly ⌈num_tokens / block_size⌉ blocks.
    """
    alloc = cache.allocator
    holders = [0] * alloc.num_blocks
    for seq, table in cache._tables.items():
        assert len(set(table)) == len(table), f"sequence {seq!r} holds a block twice: {table}"
        assert len(table) == ceil_div(cache._lengths[seq], alloc.block_size), \
            f"sequence {seq!r}: {len(table)} blocks for {cache._lengths[seq]} tokens"
        for b in table:
            holders[b] += 1
    free = set(alloc.free_blocks())
    for b in range(alloc.num_blocks):
        assert alloc._ref[b] >= 0, f"block {b} has negative ref count {alloc._ref[b]}"
        assert alloc._ref[b] == holders[b], f"block {b}: ref count {alloc._ref[b]} but {holders[b]} holders"
        assert (b in free) == (alloc._ref[b] == 0), f"block {b}: free-list membership disagrees with ref count"
