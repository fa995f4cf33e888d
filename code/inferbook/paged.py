"""A paged KV cache: fixed-size blocks in one pool, a block table per sequence (PagedAttention).

Kwon et al. (2023) store the KV cache the way an operating system stores a process's memory:
in fixed-size *blocks* (pages) taken from one shared pool, mapped by a per-sequence *block
table* from logical block i (tokens i·B .. i·B + B − 1) to a physical block. A sequence only
ever wastes the unused tail of its last block, and blocks can be shared between sequences
(parallel sampling, beam search, prefix caching) with reference counts and copy-on-write.

Public API (stable; the serving engine builds on it):

The books (``BlockAllocator``, ``BlockManager``, ``OutOfBlocksError``, ``blocks_for``,
``check_invariants``) live in `blocks`, torch-free; import them from there.

``PagedKVCache(allocator, n_layers, n_kv_heads, head_dim, dtype=torch.float32, device="cpu")``
    Storage ``k_pool[layer]``, ``v_pool[layer]``: ``[num_blocks, block_size, n_kv_heads, head_dim]``.
    The books are ``cache.blocks``, a `blocks.BlockManager`: sequences by id (any hashable) are
    added, forked, freed and measured there (``cache.blocks.add_sequence(seq_id)``,
    ``.fork``, ``.free_sequence``, ``.block_table``, ``.num_tokens``, ``.can_admit``,
    ``.copies``, ...). What touches the tensors is here: ``reserve(seq_id, n)`` (reserve n more
    token slots and make the copy-on-write copies the books ask for; what a scheduler's
    executor calls), ``append_slots(seq_id, n) -> slots`` (the same, returning the flat slot
    indices ``block * block_size + offset``, a LongTensor [n]; a new block only when the last
    one is full), ``slots(seq_id, start, stop)``, ``write(layer, slots, k, v)``,
    ``gather(layer, seq_id)``, ``view(seq_id) -> SequenceCacheView``.

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

``decode_backend(device, dtype)``
    Which decode attention `PagedContext.attend` runs: on a CUDA device with Triton installed,
    the Triton kernel of `triton_paged_decode` (split-KV through the block tables); otherwise
    (the CPU) the gather + SDPA above.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Hashable, Sequence

import torch
import torch.nn.functional as F

from . import validate
from .arith import ceil_div
from .blocks import BlockAllocator, BlockManager, OutOfBlocksError, PoolTooSmallError
from .masks import causal_mask, position_mask


class PagedKVCache:
    """Paged K/V storage for many sequences sharing one `BlockAllocator`.

    k_pool[layer], v_pool[layer]: [num_blocks, block_size, n_kv_heads, head_dim]. Token t of a
    sequence lives in block `block_table[t // block_size]` at offset `t % block_size`. The books
    (block tables, lengths, copy-on-write decisions) are kept by `self.blocks`, a torch-free
    `blocks.BlockManager`, which callers ask directly (``cache.blocks.add_sequence(seq_id)``);
    this class stores the tensors and makes the block copies the books ask for.
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
        validate.torch_dtype("dtype", dtype)
        device = validate.device("device", device)
        validate.tensor_elements("n_layers x num_blocks x block_size x n_kv_heads x head_dim", (
            2 * n_layers, allocator.num_blocks, allocator.block_size, n_kv_heads, head_dim))
        self.blocks = BlockManager(allocator)
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        shape = (allocator.num_blocks, allocator.block_size, n_kv_heads, head_dim)
        self.k_pool = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v_pool = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]

    @classmethod
    def for_model(cls, config, num_blocks: int, block_size: int = 16, dtype=torch.float32, device="cpu"):
        """Return a cache (with its own allocator) shaped for a `gpt.GPTConfig` (MHA: kv heads = heads)."""
        validate.has_attributes("config", config, ("n_layer", "n_head", "head_dim"), "a gpt.GPTConfig")
        return cls(BlockAllocator(num_blocks, block_size), config.n_layer, config.n_head,
                   config.head_dim, dtype, device)

    # --- slots: the books are `self.blocks` (add, fork, free, measure a sequence there) -------
    def append_slots(self, seq_id: Hashable, n: int) -> torch.Tensor:
        """Reserve slots for `n` more tokens; return their flat slot indices (LongTensor [n]).

        All or nothing: raises `OutOfBlocksError` (cache unchanged) if the blocks are not free.
        """
        length = self.reserve(seq_id, n)
        return self.slots(seq_id, length, length + n)

    def reserve(self, seq_id: Hashable, n: int) -> int:
        """Reserve slots for `n` more tokens (as `append_slots`); return the old length."""
        length = self.blocks.num_tokens(seq_id)
        for src, dst in self.blocks.reserve(seq_id, n):  # copy-on-write of a shared last block
            for pool in (*self.k_pool, *self.v_pool):
                pool[dst].copy_(pool[src])
        return length

    def slots(self, seq_id: Hashable, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Return the flat slot indices of tokens start .. stop − 1 of the sequence."""
        return torch.tensor(self.blocks.slots(seq_id, start, stop), dtype=torch.long,
                            device=self.k_pool[0].device)

    # --- data ------------------------------------------------------------------------------
    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v ([n, n_kv_heads, head_dim]) at flat `slots` ([n]) of `layer`."""
        validate.integer("layer", layer, 0, self.n_layers - 1)
        if isinstance(slots, torch.Tensor) and slots.dim() != 1:
            raise ValueError(f"slots must be a 1-D tensor of slot indices, got shape {tuple(slots.shape)}")
        empty = isinstance(slots, torch.Tensor) and slots.numel() == 0
        if not (empty and not slots.dtype.is_floating_point and slots.dtype != torch.bool):
            # (the empty slots that append_slots(seq_id, 0) returns are accepted: nothing to store)
            validate.int_tensor("slots", slots, 0, self.allocator.num_blocks * self.block_size,
                                "slot indices")
        want = (slots.numel(), self.n_kv_heads, self.head_dim)
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if not t.dtype.is_floating_point:
                raise validate.ArgumentTypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if want[0] and torch.unique(slots).numel() != want[0]:
            raise ValueError("slots must be distinct: two rows written to one slot would overwrite each other")
        if k.shape != want or v.shape != want:
            raise ValueError(f"k and v must both be {list(want)}, got {tuple(k.shape)} and {tuple(v.shape)}")
        if want[0]:
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
        return (f"PagedKVCache({len(self.blocks.sequences)} sequences, {self.allocator.num_used_blocks}/"
                f"{self.allocator.num_blocks} blocks used, block_size={self.block_size})")


class _Group:
    """Padded attention inputs for the sequences of one kind in a step (all decodes, or all prefills).

    `key_slots` [n_seq, L]: the flat slot of each sequence's keys 0 .. L − 1 (its context read
    through its block table; past its own length padded with slot 0 and masked), so one
    `index_select` per layer gathers the whole group's keys, and the values likewise.
    """

    def __init__(self, members, offsets, tables, starts, lengths, block_size: int):
        q_max = max(lengths[b] for b in members)
        width = max(starts[b] + lengths[b] for b in members)  # the longest context: keys per row
        self.token_index = torch.tensor([offsets[b] + i for b in members for i in range(lengths[b])])
        rows = [j * q_max + i for j, b in enumerate(members) for i in range(lengths[b])]
        query_pos = torch.full((len(members) * q_max,), -1, dtype=torch.long)
        query_pos[rows] = torch.tensor([starts[b] + i for b in members for i in range(lengths[b])])
        query_pos = query_pos.view(len(members), q_max)
        allowed = position_mask(query_pos, width)  # causal: key j iff j <= position
        allowed[:, :, 0] |= query_pos < 0  # padded query rows attend somewhere harmless (discarded)
        self.rows = torch.tensor(rows)  # [T_g] rows of the group's tokens in the padded queries
        # slot of key t: block_table[t // bs] * bs + t % bs; rows padded with slot 0 (masked above)
        self.key_slots = torch.tensor([[tables[b][t // block_size] * block_size + t % block_size
                                        for t in range(starts[b] + lengths[b])]
                                       + [0] * (width - starts[b] - lengths[b]) for b in members])
        self.mask = allowed[:, None]  # [n_seq, 1, q_max, width]
        self.n_seq, self.q_max, self.width = len(members), q_max, width
        # every row the same length and one query each (a decode step of equal lengths): no mask
        self.unmasked = q_max == 1 and all(starts[b] + 1 == width for b in members)
        # the same books for a paged decode kernel (`decode_backend`): tables and context lengths
        self.block_tables = [tables[b] for b in members]
        self.context_lens = [starts[b] + lengths[b] for b in members]


GROUP_ROWS = 8  # sequences per padded attention call (see PagedContext)


class PagedContext:
    """The attention context of one step through a `PagedKVCache` (the model's seam; see `gpt`).

    steps: ``(seq_id, start, n)`` per sequence: it computes its tokens start .. start + n − 1,
    whose slots are already reserved (``start + n ≤ cache.blocks.num_tokens(seq_id)``). Built once per
    step, from the cache's public API: `slot_mapping` [T] (where each new token's keys/values
    go), `positions`, and per group (decodes apart from prefill chunks, as engines use a decode
    and a prefill kernel) block tables padded to the longest and causal masks. Packed layout:
    tokens [1, T] in the order of `steps` (`positions` [1, T]); `rectangular`: tokens
    [len(steps), n], every sequence at the same start and n (`positions` [n]).
    `last_index` [len(steps)]: each sequence's last token in the packed order.
    """

    def __init__(self, cache: PagedKVCache, steps, rectangular: bool = False):
        if not isinstance(cache, PagedKVCache):
            raise validate.ArgumentTypeError(f"cache must be a paged.PagedKVCache, got {type(cache).__name__}")
        steps = validate.items("steps", steps)
        validate.flag("rectangular", rectangular)
        if not steps:
            raise ValueError("steps must list at least one (seq_id, start, n)")
        for i, step in enumerate(steps):
            if isinstance(step, (str, bytes)) or not hasattr(step, "__len__") or len(step) != 3:
                raise ValueError(f"steps[{i}] must be a (seq_id, start, n) triple, got {step!r}")
        bs = cache.block_size
        tables, starts, lengths = [], [], []
        for i, (seq_id, start, n) in enumerate(steps):
            tables.append(cache.blocks.block_table(seq_id))
            starts.append(validate.non_negative_int(f"steps[{i}] start", start))
            lengths.append(validate.positive_int(f"steps[{i}] n", n))
            if start + n > cache.blocks.num_tokens(seq_id):
                raise ValueError(f"steps[{i}]: tokens {start}..{start + n - 1} of {seq_id!r} have no "
                                 f"slots ({cache.blocks.num_tokens(seq_id)} reserved); reserve them first")
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
        # Decodes apart from prefill chunks; within each kind, sequences sorted by context length
        # and cut into groups of GROUP_ROWS, so each group pads its keys only to its own longest.
        self.groups = []
        for decode in (True, False):
            kind = sorted((b for b, n in enumerate(lengths) if (n == 1) == decode),
                          key=lambda b: starts[b] + lengths[b])
            self.groups += [_Group(kind[i:i + GROUP_ROWS], offsets, tables, starts, lengths, bs)
                            for i in range(0, len(kind), GROUP_ROWS)]
        device = cache.k_pool[0].device
        if device.type != "cpu":  # built on the CPU (a few dozen integers), used where the cache is
            self.slot_mapping, self.positions, self.last_index = (
                t.to(device) for t in (self.slot_mapping, self.positions, self.last_index))
            for g in self.groups:
                g.token_index, g.rows, g.mask, g.key_slots = (
                    t.to(device) for t in (g.token_index, g.rows, g.mask, g.key_slots))

    def _check(self, layer, q, k, v) -> None:
        """Raise unless q, k, v are [rows, t, heads, d] tensors of this step's tokens and cache."""
        validate.integer("layer", layer, 0, self.cache.n_layers - 1)
        c, tokens = self.cache, self.slot_mapping.numel()
        for name, t, heads in (("q", q, None), ("k", k, c.n_kv_heads), ("v", v, c.n_kv_heads)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise validate.ArgumentTypeError(f"{name} must be a 4-axis tensor [rows, t, heads, d], "
                                                 f"got {getattr(t, 'shape', type(t).__name__)}")
            if t.shape[0] * t.shape[1] != tokens or t.shape[3] != c.head_dim or (heads and t.shape[2] != heads):
                raise ValueError(f"{name} must be [rows, t, {heads or 'heads'}, {c.head_dim}] with rows x t = "
                                 f"{tokens} tokens of this step, got {tuple(t.shape)}")
        if q.shape[2] % c.n_kv_heads:
            raise ValueError(f"q's heads ({q.shape[2]}) must be a multiple of the cache's KV heads ({c.n_kv_heads})")

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [rows, t, heads, d] (packed: rows = 1); store k, v; return attention, q's shape."""
        self._check(layer, q, k, v)
        shape, d = q.shape, q.shape[-1]
        q, k, v = q.reshape(-1, shape[-2], d), k.reshape(-1, k.shape[-2], d), v.reshape(-1, v.shape[-2], d)
        cache = self.cache
        cache._write(layer, self.slot_mapping, k, v)
        heads, kv_heads = q.shape[1], k.shape[1]
        k_flat = cache.k_pool[layer].view(-1, kv_heads, d)  # [num_blocks * block_size, H_kv, d]
        v_flat = cache.v_pool[layer].view(-1, kv_heads, d)
        in_order = len(self.groups) == 1 and self.groups[0].q_max == 1 and bool(
            (self.groups[0].token_index == torch.arange(q.shape[0], device=q.device)).all())
        y = None if in_order else torch.empty_like(q)
        for g in self.groups:
            if g.q_max == 1 and decode_backend(q.device, q.dtype) == "triton":
                # on a GPU: the Triton paged decode kernel reads the pages itself
                from .triton_paged_decode import paged_decode
                q_g = q.index_select(0, g.token_index)[:, :, None]  # [B, H, 1, d]
                out, _ = paged_decode(q_g, cache.k_pool[layer], cache.v_pool[layer],
                                      g.block_tables, g.context_lens)
                out = out[:, :, 0]  # [B, H, d]
                if y is None:
                    return out.view(shape)
                y[g.token_index] = out
                continue
            # The group's keys and values through the block tables: one gather by flat slot.
            slots = g.key_slots.view(-1)
            k_all = k_flat.index_select(0, slots).view(g.n_seq, g.width, kv_heads, d).transpose(1, 2)
            v_all = v_flat.index_select(0, slots).view(g.n_seq, g.width, kv_heads, d).transpose(1, 2)
            if heads != kv_heads:  # GQA: each KV head serves heads / kv_heads query heads
                k_all = k_all.repeat_interleave(heads // kv_heads, 1)
                v_all = v_all.repeat_interleave(heads // kv_heads, 1)
            if g.q_max == 1:  # one query per sequence (decodes): no padding of the queries
                q_g = q.index_select(0, g.token_index)[:, :, None]  # [B, H, 1, d]
            else:
                q_g = q.new_zeros(g.n_seq * g.q_max, heads, d)
                q_g[g.rows] = q[g.token_index]
                q_g = q_g.view(g.n_seq, g.q_max, heads, d).transpose(1, 2)  # [B, H, Q, d]
            out = F.scaled_dot_product_attention(q_g, k_all, v_all,
                                                 attn_mask=None if g.unmasked else g.mask)
            out = out.transpose(1, 2).reshape(-1, heads, d)  # [B * Q, H, d]
            if y is None:  # the step is this one group, in order: its output is the step's
                return out.view(shape)
            y[g.token_index] = out if g.q_max == 1 else out[g.rows]
        return y.view(shape)


@functools.lru_cache(maxsize=None)
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


# the dtypes the Triton kernel takes (its SUPPORTED_DTYPES; tests/test_triton_paged_decode.py)
TRITON_DECODE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def decode_backend(device: torch.device | str, dtype: torch.dtype = torch.float32) -> str:
    """Return the decode attention `PagedContext.attend` runs for tensors on `device`.

    "triton" (`triton_paged_decode.paged_decode`, split-KV through the block tables) on a CUDA
    device where Triton is installed, for the dtypes it takes; "torch" (gather the pages, then
    SDPA) everywhere else, so the CPU path is unchanged and never imports Triton.
    """
    device = torch.device(device)
    return ("triton" if device.type == "cuda" and dtype in TRITON_DECODE_DTYPES
            and _triton_installed() else "torch")


def _begin_append(cache: PagedKVCache, seq_ids: list, pos: int, n: int) -> PagedContext:
    """Reserve n slots on every sequence (all of length pos), all or nothing; return the context."""
    pos, n = validate.non_negative_int("pos", pos), validate.positive_int("n", n)
    for s in seq_ids:
        if cache.blocks.num_tokens(s) != pos:
            raise ValueError(f"paged cache appends only: got pos={pos} but sequence {s!r} holds "
                             f"{cache.blocks.num_tokens(s)} tokens")
    needed = sum(cache.blocks.blocks_needed(s, n) for s in seq_ids)
    held = {b for s in seq_ids for b in cache.blocks.block_table(s)}  # forked sequences share blocks
    if needed + len(held) > cache.allocator.num_blocks:
        raise PoolTooSmallError(needed, cache.allocator.num_free_blocks,
                                f"n={n}: appending {n} token(s) to {seq_ids} (more blocks than the whole "
                                f"pool of {cache.allocator.num_blocks}: they could never fit)")
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
        cache.blocks.num_tokens(seq_id)  # raises for an unknown sequence
        self.cache, self.seq_id = cache, seq_id

    @property
    def length(self) -> int:
        return self.cache.blocks.num_tokens(self.seq_id)

    def begin_step(self, pos: int, n: int) -> PagedContext:
        return _begin_append(self.cache, [self.seq_id], pos, n)

    def end_step(self, ctx: PagedContext) -> None:
        """Nothing to close: the slots were reserved by `begin_step`."""
        if not isinstance(ctx, PagedContext) or ctx.cache is not self.cache:
            raise validate.ArgumentTypeError(f"ctx must be a PagedContext of this cache (from begin_step), "
                                             f"got {type(ctx).__name__}")


class BatchCacheView:
    """Several sequences of a `PagedKVCache`, all of the same length, run as one batch.

    Row b of the batch is sequence `seq_ids[b]`; each row appends and reads through its own block
    table (shared blocks are copied on write as usual).
    """

    def __init__(self, cache: PagedKVCache, seq_ids: Sequence[Hashable]):
        if not isinstance(cache, PagedKVCache):
            raise validate.ArgumentTypeError(f"cache must be a paged.PagedKVCache, got {type(cache).__name__}")
        seq_ids = validate.items("seq_ids", seq_ids)
        if not seq_ids:
            raise ValueError("BatchCacheView needs at least one sequence")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"seq_ids must be distinct, got {seq_ids}")
        lengths = {cache.blocks.num_tokens(s) for s in seq_ids}
        if len(lengths) != 1:
            raise ValueError(f"BatchCacheView needs sequences of equal length, got lengths {sorted(lengths)}")
        self.cache, self.seq_ids, self.batch = cache, seq_ids, len(seq_ids)

    @property
    def length(self) -> int:
        return self.cache.blocks.num_tokens(self.seq_ids[0])

    def begin_step(self, pos: int, n: int) -> PagedContext:
        return _begin_append(self.cache, self.seq_ids, pos, n)

    def end_step(self, ctx: PagedContext) -> None:
        """Nothing to close: the slots were reserved by `begin_step`."""
        if not isinstance(ctx, PagedContext) or ctx.cache is not self.cache:
            raise validate.ArgumentTypeError(f"ctx must be a PagedContext of this cache (from begin_step), "
                                             f"got {type(ctx).__name__}")


def _check_attention_inputs(q, n_heads, k_pool, v_pool):
    for name, t in (("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if k_pool.shape != v_pool.shape or k_pool.dim() != 4:
        raise ValueError(f"k_pool and v_pool must both be [num_blocks, block_size, n_kv_heads, head_dim], "
                         f"got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    n_kv = k_pool.shape[2]
    if not (q.dtype == k_pool.dtype == v_pool.dtype) or not q.dtype.is_floating_point:
        raise validate.ArgumentTypeError(f"q, k_pool and v_pool must share one floating-point dtype, got "
                                         f"{q.dtype}, {k_pool.dtype} and {v_pool.dtype}")
    if not (q.device == k_pool.device == v_pool.device):
        raise ValueError(f"q, k_pool and v_pool must be on one device, got {q.device}, {k_pool.device}, {v_pool.device}")
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
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor [n_heads, n_q, head_dim], got {type(q).__name__}")
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
    allowed = causal_mask(n_q, context_len, device=q.device)  # bottom-right aligned
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
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor [batch, n_heads, head_dim], got {type(q).__name__}")
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
