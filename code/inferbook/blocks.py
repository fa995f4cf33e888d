"""The books of a paged KV cache, without the tensors: blocks, block tables, reference counts.

PagedAttention (Kwon et al., 2023) keeps the KV cache in fixed-size blocks from one pool and a
block table per sequence. All of the arithmetic of that scheme lives here, torch-free, as in
nano-vllm's ``block_manager.py``: the scheduler asks the `BlockManager` what a request costs
(`admission_cost`, `can_admit`, `can_append`) and the simulator keeps its books with it, while
`paged.PagedKVCache` stores the K/V tensors and delegates every bookkeeping call here.

``BlockAllocator(num_blocks, block_size=16)``
    The free list and reference counts: ``allocate()``, ``free(block)``, ``incref(block)``,
    ``ref_count(block)``, ``can_allocate(n)``, ``num_free_blocks``, ``num_used_blocks``,
    ``free_blocks()``. A prefix cache plugs in through ``allocator.hook``.
``OutOfBlocksError(RuntimeError)``
    Not enough free blocks; nothing was changed.
``BlockManager(allocator)``
    Per-sequence block tables and lengths: ``add_sequence``, ``reserve(seq_id, n) -> copies``
    (the copy-on-write block copies to make, as ``(src, dst)`` pairs), ``blocks_needed``,
    ``can_append``, ``admission_cost(num_tokens, hit_blocks)``, ``can_admit``, ``fork``,
    ``free_sequence``, ``block_table``, ``num_tokens``, ``slots``, ``sequences``.
``blocks_for(num_tokens, block_size)``, ``check_invariants(books)``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

from . import validate
from .arith import ceil_div


MAX_BLOCKS = 2**26  # a pool (or a block) larger than this is a mistake, and would not fit in memory


class OutOfBlocksError(RuntimeError):
    """Not enough free KV blocks for the request; the cache was left unchanged.

    `needed`: blocks the operation needed; `free`: blocks that were free. A scheduler catches
    this (or asks `can_allocate` first) and preempts or queues a sequence.
    """

    def __init__(self, needed: int, free: int, what: str = "allocation"):
        needed, free = validate.non_negative_int("needed", needed), validate.non_negative_int("free", free)
        if not isinstance(what, str):
            raise validate.ArgumentTypeError(f"what must be a string, got {type(what).__name__}")
        self.needed, self.free = needed, free
        super().__init__(
            f"out of KV blocks: {what} needs {needed} block(s) but only {free} are free; "
            "free a sequence (or preempt one) and retry"
        )


class PoolTooSmallError(OutOfBlocksError, ValueError):
    """More blocks than the whole pool holds: no amount of freeing helps (also a ValueError)."""


class BlockAllocator:
    """A pool of `num_blocks` blocks of `block_size` token slots: free list + reference counts.

    Invariant: a block is on the free list exactly when its reference count is 0.
    """

    def __init__(self, num_blocks: int, block_size: int = 16):
        self.num_blocks = validate.integer("num_blocks", num_blocks, 1, MAX_BLOCKS)
        self.block_size = validate.integer("block_size", block_size, 1, MAX_BLOCKS)
        num_blocks = self.num_blocks
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


def blocks_for(num_tokens: int, block_size: int = 16) -> int:
    """Return ⌈num_tokens / block_size⌉, the blocks that hold `num_tokens` tokens (0 for 0)."""
    return ceil_div(validate.non_negative_int("num_tokens", num_tokens),
                    validate.positive_int("block_size", block_size))


class BlockManager:
    """Block tables and lengths of many sequences on one `BlockAllocator` (no tensors).

    Token t of a sequence lives in block ``block_table[t // block_size]`` at offset
    ``t % block_size``: its flat slot is ``block * block_size + offset``. Every method checks
    its arguments first and changes nothing when it refuses.
    """

    def __init__(self, allocator: BlockAllocator):
        if not isinstance(allocator, BlockAllocator):
            raise TypeError(f"allocator must be a BlockAllocator, got {type(allocator).__name__}")
        self.allocator = allocator
        self.block_size = allocator.block_size
        self._tables: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}
        self._finished: set[Hashable] = set()
        self.copies = 0  # copy-on-write block copies made so far

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

    def _check_new(self, seq_id: Hashable) -> None:
        try:
            hash(seq_id)
        except TypeError:
            raise TypeError(f"seq_id must be hashable, got {type(seq_id).__name__}") from None
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")

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

    def block_table(self, seq_id: Hashable) -> list[int]:
        """Return the sequence's physical blocks in logical order (a copy)."""
        return list(self._seq(seq_id))

    def num_tokens(self, seq_id: Hashable) -> int:
        self._seq(seq_id)
        return self._lengths[seq_id]

    # --- costs -----------------------------------------------------------------------------
    def _shared_tail(self, table: list[int], length: int, n: int) -> bool:
        """Whether appending n > 0 tokens writes into a shared, partly filled last block."""
        return n > 0 and length % self.block_size != 0 and self.allocator._ref[table[-1]] > 1

    def blocks_needed(self, seq_id: Hashable, n: int) -> int:
        """Return the new blocks `reserve(seq_id, n)` would take (incl. a copy-on-write)."""
        table = self._seq(seq_id)
        n = validate.non_negative_int("n", n)
        length = self._lengths[seq_id]
        return ceil_div(length + n, self.block_size) - len(table) + self._shared_tail(table, length, n)

    def can_append(self, seq_id: Hashable, n: int = 1) -> bool:
        """Return whether `n` more tokens of `seq_id` fit in the free blocks now."""
        return self.allocator.can_allocate(self.blocks_needed(seq_id, n))

    def admission_cost(self, num_tokens: int, hit_blocks: Sequence[int] = ()) -> int:
        """Return the free blocks that admitting a sequence of `num_tokens` tokens takes, when its
        first `len(hit_blocks)` blocks are prefix-cache hits: the blocks for the rest, plus the
        hits that sit free on the free list (cached, no reference) and leave it when reused."""
        num_tokens = validate.non_negative_int("num_tokens", num_tokens)
        hits = validate.block_table("hit_blocks", hit_blocks, self.allocator.num_blocks)
        if len(hits) * self.block_size > num_tokens:
            raise ValueError(f"hit_blocks covers {len(hits) * self.block_size} tokens, more than "
                             f"num_tokens={num_tokens}")
        reclaimed = sum(self.allocator._ref[b] == 0 for b in hits)
        return ceil_div(num_tokens, self.block_size) - len(hits) + reclaimed

    def can_admit(self, num_tokens: int, hit_blocks: Sequence[int] = ()) -> bool:
        """Return whether `admission_cost(num_tokens, hit_blocks)` blocks are free now."""
        return self.allocator.can_allocate(self.admission_cost(num_tokens, hit_blocks))

    # --- changes ---------------------------------------------------------------------------
    def reserve(self, seq_id: Hashable, n: int) -> list[tuple[int, int]]:
        """Reserve slots for `n` more tokens; return the block copies to make, as (src, dst).

        A new block only when the last one is full; a shared, partly filled last block is first
        replaced by a private copy (copy-on-write: the caller copies src's contents to dst). All
        or nothing: raises `OutOfBlocksError` (nothing changed) if the blocks are not free.
        """
        needed = self.blocks_needed(seq_id, n)  # checks seq_id and n
        if len(self._tables[seq_id]) + needed > self.allocator.num_blocks:
            raise PoolTooSmallError(needed, self.allocator.num_free_blocks,
                                    f"n={n}: appending {n} token(s) to {seq_id!r} (more blocks than the "
                                    f"whole pool of {self.allocator.num_blocks}: they could never fit)")
        if not self.allocator.can_allocate(needed):
            raise OutOfBlocksError(needed, self.allocator.num_free_blocks,
                                   f"appending {n} token(s) to {seq_id!r}")
        table, length = self._tables[seq_id], self._lengths[seq_id]
        copies = []
        if self._shared_tail(table, length, n):
            new = self.allocator.allocate()
            copies.append((table[-1], new))
            self.allocator.free(table[-1])  # still held by its other owners: contents stay
            table[-1] = new
            self.copies += 1
        while len(table) < ceil_div(length + n, self.block_size):
            table.append(self.allocator.allocate())
        self._lengths[seq_id] = length + n
        return copies

    def slots(self, seq_id: Hashable, start: int = 0, stop: int | None = None) -> list[int]:
        """Return the flat slot indices of tokens start .. stop − 1 of the sequence."""
        table = self._seq(seq_id)
        stop = self._lengths[seq_id] if stop is None else validate.integer("stop", stop)
        start = validate.integer("start", start)
        if not 0 <= start <= stop <= self._lengths[seq_id]:
            raise ValueError(f"token range start={start}..stop={stop} outside 0..{self._lengths[seq_id]}"
                             " (0 ≤ start ≤ stop ≤ the sequence's length)")
        bs = self.block_size
        return [table[t // bs] * bs + t % bs for t in range(start, stop)]

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

    def __repr__(self) -> str:
        return (f"BlockManager({len(self._tables)} sequences, {self.allocator.num_used_blocks}/"
                f"{self.allocator.num_blocks} blocks used, block_size={self.block_size})")


def check_invariants(books) -> None:
    """Raise AssertionError unless the allocator's counts agree with the block tables.

    `books`: a `BlockManager` or a `paged.PagedKVCache` (which keeps its books in one). Every
    block's reference count equals the number of tables holding it (a prefix cache holds no
    references), a block is free exactly when its count is 0, no table holds a block twice, and
    each table has exactly ⌈num_tokens / block_size⌉ blocks.
    """
    books = getattr(books, "blocks", books)
    if not isinstance(books, BlockManager):
        raise TypeError(f"books must be a BlockManager or a PagedKVCache, got {type(books).__name__}")
    alloc = books.allocator
    holders = [0] * alloc.num_blocks
    for seq, table in books._tables.items():
        assert len(set(table)) == len(table), f"sequence {seq!r} holds a block twice: {table}"
        assert len(table) == ceil_div(books._lengths[seq], alloc.block_size), \
            f"sequence {seq!r}: {len(table)} blocks for {books._lengths[seq]} tokens"
        for b in table:
            holders[b] += 1
    free = set(alloc.free_blocks())
    for b in range(alloc.num_blocks):
        assert alloc._ref[b] >= 0, f"block {b} has negative ref count {alloc._ref[b]}"
        assert alloc._ref[b] == holders[b], f"block {b}: ref count {alloc._ref[b]} but {holders[b]} holders"
        assert (b in free) == (alloc._ref[b] == 0), f"block {b}: free-list membership disagrees with ref count"
