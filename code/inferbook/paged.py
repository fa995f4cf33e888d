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
    ``incref(block)``, ``ref_count(block)``, ``num_free_blocks``, ``can_allocate(n)``,
    ``blocks_for(num_tokens)`` (= ⌈num_tokens / block_size⌉). The free list is ordered: blocks a
    prefix cache still indexes go to its tail and are evicted least-recently-used (see
    `prefix_cache.PrefixCache`, which plugs in through ``allocator.hook``).

``OutOfBlocksError(RuntimeError)``
    The scheduler's signal: not enough free blocks; nothing was changed. Carries ``needed``
    and ``free``. Check first with ``can_allocate(n)`` / ``PagedKVCache.can_append(seq, n)``.

``PagedKVCache(allocator, n_layers, n_kv_heads, head_dim, dtype=torch.float32, device="cpu")``
    Storage ``k_pool[layer]``, ``v_pool[layer]``: ``[num_blocks, block_size, n_kv_heads, head_dim]``.
    Sequences by id (any hashable): ``add_sequence(seq_id, blocks=(), num_tokens=0)`` (start
    empty, or on blocks the caller already holds a reference to, e.g. from a prefix-cache hit),
    ``append_slots(seq_id, n) -> slots`` (reserve n more token slots; a new block only when
    the last one is full; copy-on-write of a shared partly-filled last block; returns the flat
    slot indices ``block * block_size + offset``, a LongTensor [n]), ``can_append(seq_id, n)``,
    ``blocks_needed(seq_id, n)``, ``write(layer, slots, k, v)``, ``gather(layer, seq_id)``,
    ``fork(parent_id, child_id)`` (share every block), ``free_sequence(seq_id)`` (drop the
    sequence's references; a second call raises ``ValueError``), ``block_table(seq_id) ->
    list[int]``, ``num_tokens(seq_id)``, ``sequences``, ``view(seq_id) -> SequenceCacheView``.

``SequenceCacheView(cache, seq_id)``
    The cache protocol of `gpt.py`, ``update(layer, k_new, v_new, pos) -> (k, v)``, for one
    sequence (batch 1), so ``GPT.forward(idx, cache=view, pos=p)`` runs through the pages.

``BatchCacheView(cache, seq_ids)``
    The same protocol for several sequences of equal length run as one batch ([len(seq_ids), ...]),
    e.g. the forks of one prompt continued together.

``paged_attention(q, k_pool, v_pool, block_table, context_len)``
    Causal attention for one sequence reading keys/values through its block table.
    ``paged_decode_attention(q, k_pool, v_pool, block_tables, context_lens)``: one query per
    sequence, a batch of sequences of different lengths (the decode step of a serving engine).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Hashable, Iterable, Sequence

import torch


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
        if not isinstance(num_blocks, int) or num_blocks <= 0:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
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
        return n <= len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Return ⌈num_tokens / block_size⌉, the blocks that hold `num_tokens` tokens."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be ≥ 0, got {num_tokens}")
        return -(-num_tokens // self.block_size)

    def _check(self, block: int) -> None:
        if not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be an int in [0, {self.num_blocks}), got {block!r}")

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
        self._check(block)
        if self._ref[block] == 0:
            del self._free[block]
        self._ref[block] += 1

    def free(self, block: int) -> None:
        """Drop one reference to `block`; at zero it returns to the free list."""
        self._check(block)
        if self._ref[block] == 0:
            raise ValueError(f"block {block} is already free (double free)")
        self._ref[block] -= 1
        if self._ref[block] == 0:
            self._free[block] = None  # back of the list: evicted last
            if self.hook is None or not self.hook.is_cached(block):
                self._free.move_to_end(block, last=False)  # nothing to keep: reuse first

    def ref_count(self, block: int) -> int:
        self._check(block)
        return self._ref[block]

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
        for name, value in [("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)]:
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"PagedKVCache {name} must be a positive int, got {value!r}")
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
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        blocks = list(blocks)
        if num_tokens is None:
            num_tokens = len(blocks) * self.block_size
        if self.allocator.blocks_for(num_tokens) != len(blocks):
            raise ValueError(f"{num_tokens} tokens need {self.allocator.blocks_for(num_tokens)} "
                             f"blocks of {self.block_size}, got {len(blocks)} blocks")
        for b in blocks:
            if self.allocator.ref_count(b) < 1:
                raise ValueError(f"block {b} is free; take a reference (allocate/incref) before adding it")
        self._finished.discard(seq_id)
        self._tables[seq_id] = blocks
        self._lengths[seq_id] = num_tokens

    def block_table(self, seq_id: Hashable) -> list[int]:
        """Return the sequence's physical blocks in logical order (a copy)."""
        return list(self._seq(seq_id))

    def num_tokens(self, seq_id: Hashable) -> int:
        self._seq(seq_id)
        return self._lengths[seq_id]

    def blocks_needed(self, seq_id: Hashable, n: int) -> int:
        """Return the new blocks `append_slots(seq_id, n)` would take (incl. a copy-on-write)."""
        table = self._seq(seq_id)
        if n < 0:
            raise ValueError(f"n must be ≥ 0, got {n}")
        length = self._lengths[seq_id]
        needed = self.allocator.blocks_for(length + n) - len(table)
        if n > 0 and length % self.block_size and self.allocator.ref_count(table[-1]) > 1:
            needed += 1  # the shared, partly filled last block must be copied before writing
        return needed

    def can_append(self, seq_id: Hashable, n: int = 1) -> bool:
        return self.allocator.can_allocate(self.blocks_needed(seq_id, n))

    def append_slots(self, seq_id: Hashable, n: int) -> torch.Tensor:
        """Reserve slots for `n` more tokens; return their flat slot indices (LongTensor [n]).

        All or nothing: raises `OutOfBlocksError` (cache unchanged) if the blocks are not free.
        """
        table = self._seq(seq_id)
        needed = self.blocks_needed(seq_id, n)
        if not self.allocator.can_allocate(needed):
            raise OutOfBlocksError(needed, self.allocator.num_free_blocks, f"appending {n} token(s) to {seq_id!r}")
        length = self._lengths[seq_id]
        if n > 0 and length % self.block_size and self.allocator.ref_count(table[-1]) > 1:
            table[-1] = self._copy_on_write(table[-1])
        while len(table) < self.allocator.blocks_for(length + n):
            table.append(self.allocator.allocate())
        self._lengths[seq_id] = length + n
        return self._slots(table, length, length + n)

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
        stop = self._lengths[seq_id] if stop is None else stop
        if not 0 <= start <= stop <= self._lengths[seq_id]:
            raise ValueError(f"token range {start}..{stop} outside 0..{self._lengths[seq_id]}")
        return self._slots(table, start, stop)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Make `child_id` share every block of `parent_id` (copy-on-write on the next divergent write)."""
        table = self._seq(parent_id)
        if child_id in self._tables:
            raise ValueError(f"sequence {child_id!r} already exists")
        for b in table:
            self.allocator.incref(b)
        self._finished.discard(child_id)
        self._tables[child_id] = list(table)
        self._lengths[child_id] = self._lengths[parent_id]

    def free_sequence(self, seq_id: Hashable) -> None:
        """Drop the sequence's block references (last block first, so it is evicted first)."""
        table = self._seq(seq_id)
        for b in reversed(table):
            self.allocator.free(b)
        del self._tables[seq_id], self._lengths[seq_id]
        self._finished.add(seq_id)

    # --- data ------------------------------------------------------------------------------
    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v ([n, n_kv_heads, head_dim]) at flat `slots` ([n]) of `layer`."""
        kp = self.k_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        vp = self.v_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        kp[slots] = k.to(kp.dtype)
        vp[slots] = v.to(vp.dtype)

    def gather(self, layer: int, seq_id: Hashable, stop: int | None = None):
        """Return the sequence's keys and values, each [num_tokens, n_kv_heads, head_dim]."""
        slots = self.slots(seq_id, 0, stop)
        kp = self.k_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        vp = self.v_pool[layer].view(-1, self.n_kv_heads, self.head_dim)
        return kp[slots], vp[slots]

    def view(self, seq_id: Hashable) -> "SequenceCacheView":
        return SequenceCacheView(self, seq_id)

    def __repr__(self) -> str:
        return (f"PagedKVCache({len(self._tables)} sequences, {self.allocator.num_used_blocks}/"
                f"{self.allocator.num_blocks} blocks used, block_size={self.block_size})")


class SequenceCacheView:
    """One sequence of a `PagedKVCache` behind the `gpt.py` cache protocol (batch 1).

    Decoding appends: a forward pass at positions pos .. pos + t − 1 must start at the
    sequence's current length (pos == num_tokens) — layer 0 reserves the slots, later layers
    write into them. Rewriting earlier positions is refused: they may live in shared blocks.
    """

    def __init__(self, cache: PagedKVCache, seq_id: Hashable):
        cache._seq(seq_id)
        self.cache, self.seq_id = cache, seq_id
        self._slots: torch.Tensor | None = None
        self._pos = -1

    @property
    def length(self) -> int:
        return self.cache.num_tokens(self.seq_id)

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """Store k_new, v_new ([1, heads, t, d]) at positions pos..pos+t−1; return all keys/values
        ([1, heads, pos + t, d])."""
        if k_new.dim() != 4 or k_new.shape[0] != 1:
            raise ValueError(f"SequenceCacheView holds one sequence: k_new must be [1, heads, t, d], "
                             f"got {tuple(k_new.shape)}")
        t = k_new.shape[-2]
        if layer == 0:
            if pos != self.length:
                raise ValueError(f"paged cache appends only: got pos={pos} but sequence "
                                 f"{self.seq_id!r} holds {self.length} tokens")
            self._slots, self._pos = self.cache.append_slots(self.seq_id, t), pos
        elif pos != self._pos or self._slots is None or len(self._slots) != t:
            raise ValueError(f"layer {layer} writes positions {pos}..{pos + t - 1} but layer 0 "
                             f"reserved {self._pos}.. ({0 if self._slots is None else len(self._slots)} slots)")
        # [1, heads, t, d] -> [t, heads, d], the pool's token-major layout
        self.cache.write(layer, self._slots, k_new[0].transpose(0, 1), v_new[0].transpose(0, 1))
        k, v = self.cache.gather(layer, self.seq_id, pos + t)
        return k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)


class BatchCacheView:
    """Several sequences of a `PagedKVCache`, all of the same length, behind the `gpt.py` protocol.

    Row b of the batch is sequence `seq_ids[b]`; each row appends and reads through its own block
    table (shared blocks are copied on write as usual).
    """

    def __init__(self, cache: PagedKVCache, seq_ids: Sequence[Hashable]):
        if not seq_ids:
            raise ValueError("BatchCacheView needs at least one sequence")
        lengths = {cache.num_tokens(s) for s in seq_ids}
        if len(lengths) != 1:
            raise ValueError(f"BatchCacheView needs sequences of equal length, got lengths {sorted(lengths)}")
        self.views = [SequenceCacheView(cache, s) for s in seq_ids]

    @property
    def length(self) -> int:
        return self.views[0].length

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, pos: int):
        """k_new, v_new: [batch, heads, t, d] for positions pos..pos+t−1; returns [batch, heads, pos+t, d]."""
        if k_new.shape[0] != len(self.views):
            raise ValueError(f"batch of {k_new.shape[0]} rows for {len(self.views)} sequences")
        out = [view.update(layer, k_new[b:b + 1], v_new[b:b + 1], pos) for b, view in enumerate(self.views)]
        return torch.cat([k for k, _ in out]), torch.cat([v for _, v in out])


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
    table = torch.as_tensor(block_table, dtype=torch.long, device=k_pool.device)
    n_blocks = -(-context_len // block_size)
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
    lens = torch.as_tensor(list(context_lens), dtype=torch.long)
    if (lens < 1).any():
        raise ValueError(f"every context_len must be ≥ 1, got {lens.tolist()}")
    width = max(-(-int(n) // block_size) for n in lens)
    padded = torch.zeros(len(block_tables), width, dtype=torch.long)  # pad with block 0, masked below
    for b, (table, n) in enumerate(zip(block_tables, lens.tolist())):
        need = -(-n // block_size)
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
    """Return ⌈num_tokens / block_size⌉ (0 tokens need 0 blocks)."""
    if num_tokens < 0 or block_size <= 0:
        raise ValueError(f"need num_tokens ≥ 0 and block_size > 0, got {num_tokens}, {block_size}")
    return -(-num_tokens // block_size)


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
        assert len(table) == alloc.blocks_for(cache._lengths[seq]), \
            f"sequence {seq!r}: {len(table)} blocks for {cache._lengths[seq]} tokens"
        for b in table:
            holders[b] += 1
    free = set(alloc.free_blocks())
    for b in range(alloc.num_blocks):
        assert alloc._ref[b] >= 0, f"block {b} has negative ref count {alloc._ref[b]}"
        assert alloc._ref[b] == holders[b], f"block {b}: ref count {alloc._ref[b]} but {holders[b]} holders"
        assert (b in free) == (alloc._ref[b] == 0), f"block {b}: free-list membership disagrees with ref count"
