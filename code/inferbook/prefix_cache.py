"""Automatic prefix caching: reuse the KV blocks of a prompt prefix computed by an earlier request.

As in vLLM's automatic prefix caching, every *full* block of a sequence gets a hash that covers
its own tokens **and its parent block's hash**, so a hash names the whole prefix up to the end
of the block, not just 16 tokens: the same 16 tokens after a different history hash differently.
A new request walks its prompt block by block and reuses blocks while the chained hash is known.

Cached blocks hold no reference of their own. When the last sequence using one finishes, the
block goes back to the allocator's free list *with its contents and hash kept*; it can still be
hit, until the allocator hands it out again — blocks are taken from the front of the free list
and cached blocks are put at the back in the order they were freed, so eviction is
least-recently-used (vLLM v1 keeps the same single queue of free blocks).

Public API (stable):

``block_hashes(tokens, block_size=16) -> list[int]``
    Chained hashes of the full blocks of `tokens` (a partial last block gets none).
``hash_block(parent_hash, block_tokens) -> int``
    One link of the chain (SHA-256 of the parent hash and the tokens, truncated to 64 bits).
``PrefixCache(allocator)``
    Plugs into a `blocks.BlockAllocator` (``allocator.hook``). ``lookup(tokens, max_tokens=None)
    -> list[int]`` (blocks of the longest cached prefix; no references taken),
    ``match(tokens) -> list[int]`` (the same, at most ``len(tokens) - 1`` tokens so the last
    prompt token is always computed, with one reference taken per block: pass them to
    ``BlockManager.add_sequence(seq_id, blocks)``), ``insert(tokens, block_table)`` (index the
    full blocks of a sequence whose KV has been computed), ``is_cached(block)``, ``evict(block)``,
    counters ``query_tokens``, ``hit_tokens``, ``hit_rate``, ``evictions``, ``num_cached_blocks``.
``score_forked(model, prompt, completions, block_size=16, batch=False)`` and ``score_reencoded(model, prompt, completions, batch=False)``
    Prefix sharing inside one request (the lesson's exercise 2): the logits of several completions
    of one prompt, by prefilling the prompt once and forking its paged cache per completion
    (copy-on-write), or by re-encoding prompt + completion each time. Same logits, less work.
``replay(requests, num_blocks, block_size)``
    A workload (e.g. `workload.agent_workload`: a shared system prompt and tool schema,
    multi-turn chats) replayed through an allocator with a prefix cache: hit rate and prefill
    tokens saved.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import validate
from .arith import ceil_div
from .blocks import BlockAllocator, BlockManager
from .steploop import Request, Scheduler, ScriptedExecutor, run

ROOT_HASH = 0  # the "parent" of the first block


def hash_block(parent_hash: int, block_tokens: Sequence[int]) -> int:
    """Return the hash of a block given its parent's hash: covers the whole prefix so far."""
    parent_hash = validate.integer("parent_hash", parent_hash, 0, 2**64 - 1)
    tokens = validate.int_list("block_tokens", block_tokens, minimum=None)
    if not tokens:
        raise ValueError("block_tokens must hold at least one token (a block is never empty)")
    return _chain(parent_hash, np.asarray(tokens, dtype=np.int64).tobytes())


def _chain(parent_hash: int, block_bytes: bytes) -> int:
    """SHA-256 of the parent's hash (8 bytes) and the block's tokens (int64), cut to 64 bits."""
    h = hashlib.sha256(parent_hash.to_bytes(8, "little"))
    h.update(block_bytes)
    return int.from_bytes(h.digest()[:8], "little")


def block_hashes(tokens: Sequence[int], block_size: int = 16) -> list[int]:
    """Return the chained hashes of the full blocks of `tokens` (len(tokens) // block_size of them)."""
    block_size = validate.positive_int("block_size", block_size)
    return _chained(ROOT_HASH, validate.int_list("tokens", tokens, minimum=0), block_size)


def _chained(parent: int, tokens: list[int], block_size: int) -> list[int]:
    """Return the chained hashes of the full blocks of checked `tokens`, after `parent`."""
    data = np.asarray(tokens, dtype=np.int64).tobytes()  # (converted once, sliced per block)
    width = 8 * block_size
    hashes = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = _chain(parent, data[8 * start:8 * start + width])
        hashes.append(parent)
    return hashes


class PrefixCache:
    """Index of full KV blocks by chained hash, evicted least-recently-used through the allocator."""

    def __init__(self, allocator: BlockAllocator):
        if not isinstance(allocator, BlockAllocator):
            raise TypeError(f"allocator must be a blocks.BlockAllocator, got {type(allocator).__name__}")
        if allocator.hook is not None:
            raise ValueError("this allocator already has a prefix cache")
        self.allocator = allocator
        self.block_size = allocator.block_size
        allocator.hook = self
        # hash -> its blocks, oldest first: like vLLM, the index keeps duplicates (two requests
        # that filled a block with the same prefix each keep theirs), and a lookup returns the
        # oldest (vllm/v1/core/block_pool.py:48 and :69 in vLLM 0.32.0).
        self._blocks_of: dict[int, dict[int, None]] = {}
        self._hash_of: dict[int, int] = {}  # block -> hash
        self.query_tokens = 0
        self.hit_tokens = 0
        self.evictions = 0

    # --- hooks the allocator calls ---------------------------------------------------------
    def is_cached(self, block: int) -> bool:
        """Return whether `block` holds an indexed prefix (hashed tokens that may be hit)."""
        return validate.integer("block", block, 0, self.allocator.num_blocks - 1) in self._hash_of

    def evict(self, block: int) -> None:
        """Forget `block` (the allocator is about to reuse it for other tokens)."""
        if not self.is_cached(block):
            raise ValueError(f"block {block} is not cached; only a cached block can be evicted")
        h = self._hash_of.pop(block)
        del self._blocks_of[h][block]
        if not self._blocks_of[h]:
            del self._blocks_of[h]
        self.evictions += 1

    # --- queries ---------------------------------------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        return len(self._hash_of)

    @property
    def hit_rate(self) -> float:
        """Fraction of looked-up prompt tokens that were found in the cache."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def lookup(self, tokens: Sequence[int], max_tokens: int | None = None) -> list[int]:
        """Return the blocks of the longest cached prefix of `tokens` (≤ max_tokens tokens); no refs taken."""
        tokens = validate.int_list("tokens", tokens, minimum=0)
        limit = len(tokens) if max_tokens is None else min(
            validate.non_negative_int("max_tokens", max_tokens), len(tokens))
        blocks = []
        for h in block_hashes(tokens[: max(0, limit - limit % self.block_size)], self.block_size):
            same = self._blocks_of.get(h)
            if not same:
                break
            blocks.append(next(iter(same)))
        return blocks

    def match(self, tokens: Sequence[int]) -> list[int]:
        """Return the cached prefix's blocks with one reference taken on each, and count the hit.

        At most len(tokens) − 1 tokens are reused: the last prompt token must run through the
        model to give the logits of the first new token.
        """
        tokens = validate.int_list("tokens", tokens, minimum=0)
        blocks = self.lookup(tokens, max_tokens=max(0, len(tokens) - 1))
        for b in blocks:
            self.allocator.incref(b)  # a free cached block leaves the free list
        self.query_tokens += len(tokens)
        self.hit_tokens += len(blocks) * self.block_size
        return blocks

    def insert(self, tokens: Sequence[int], block_table: Sequence[int], start_block: int = 0) -> int:
        """Index the full blocks of a sequence holding `tokens` in `block_table`; return how many are new.

        A block already indexed under its hash is skipped (a prefix hit, or indexed earlier). A
        second block with the same hash (another request filled one with the same prefix) is
        indexed too, behind the first, as vLLM does: block tables stay append-only, and the
        duplicate still serves hits once the first is evicted. `start_block`: index only the
        blocks from that one on, chaining from the hash of the indexed block before it (a
        growing sequence hashes each block once, as vLLM's requests keep their block hashes).
        """
        bs = self.block_size
        block_table = validate.block_table("block_table", block_table, self.allocator.num_blocks)
        start = validate.integer("start_block", start_block, 0, len(block_table))
        parent = ROOT_HASH if start == 0 else self._hash_of.get(block_table[start - 1])
        if parent is None:
            raise ValueError(f"start_block={start}: block {block_table[start - 1]} before it is not "
                             "indexed, so there is no hash to chain the later blocks to")
        rest = validate.int_list("tokens", tokens[start * bs:] if start else tokens, minimum=0)
        hashes = _chained(parent, rest, bs)
        if len(block_table) < start + len(hashes):
            raise ValueError(f"{start * bs + len(rest)} tokens fill {start + len(hashes)} blocks but the "
                             f"table has {len(block_table)}")
        fresh = [(h, b) for h, b in zip(hashes, block_table[start:]) if self._hash_of.get(b) != h]
        taken = [b for _, b in fresh if b in self._hash_of]
        if taken:  # refuse before indexing anything
            raise ValueError(f"block(s) {taken} are already cached under another prefix")
        free = [b for _, b in fresh if self.allocator.ref_count(b) == 0]
        if free:
            raise ValueError(f"block_table holds free block(s) {free}: only blocks that hold a sequence's "
                             "keys and values can be indexed")
        for h, b in fresh:
            self._blocks_of.setdefault(h, {})[b] = None
            self._hash_of[b] = h
        return len(fresh)


# --- fork after prefill ------------------------------------------------------------------------
def score_forked(model, prompt: Sequence[int], completions: Sequence[Sequence[int]], block_size: int = 16,
                 batch: bool = False):
    """Return each completion's logits [len(c), vocab], computed on a fork of the prompt's cache.

    The prompt runs through the model once; every completion continues from a fork of its
    paged cache (the prompt's blocks are shared; the partly filled last block is copied on the
    first write). Logit row j predicts the token after completion token j. With `batch` (all
    completions of one length), the forks run as one batch, as a serving engine would.
    """
    import torch

    from .paged import BatchCacheView, PagedKVCache

    prompt, completions = _check_scoring(model, prompt, completions, batch)
    block_size = validate.positive_int("block_size", block_size)
    cfg = model.config
    shared = len(prompt) // block_size  # full prompt blocks, never copied
    per_fork = ceil_div(len(prompt) + max(len(c) for c in completions), block_size) - shared
    num_blocks = ceil_div(len(prompt), block_size) + (len(completions) if batch else 1) * per_fork
    cache = PagedKVCache.for_model(cfg, num_blocks, block_size, dtype=next(model.parameters()).dtype)
    cache.blocks.add_sequence("prompt")
    with torch.inference_mode():
        model(torch.tensor([prompt]), cache=cache.view("prompt"), pos=0, last_only=True)
        if batch:
            for i in range(len(completions)):
                cache.blocks.fork("prompt", i)
            view = BatchCacheView(cache, list(range(len(completions))))
            logits = model(torch.tensor(completions), cache=view, pos=len(prompt))
            return list(logits)
        out = []
        for i, c in enumerate(completions):
            cache.blocks.fork("prompt", i)
            logits = model(torch.tensor([c]), cache=cache.view(i), pos=len(prompt))
            out.append(logits[0])
            cache.blocks.free_sequence(i)
    return out


def score_reencoded(model, prompt: Sequence[int], completions: Sequence[Sequence[int]], batch: bool = False):
    """Return each completion's logits [len(c), vocab] by running prompt + completion from scratch.

    Only the completion's positions go through the output projection, as in `score_forked`, so
    the two differ only in the prompt's prefill (`GPT.hidden_states` runs every position,
    `GPT.head` projects the tail). With `batch` (completions of one length) all
    prompt + completion sequences run as one batch.
    """
    import torch

    prompt, completions = _check_scoring(model, prompt, completions, batch)
    groups = [completions] if batch else [[c] for c in completions]
    out = []
    with torch.inference_mode():
        for group in groups:
            idx = torch.tensor([prompt + c for c in group])
            out.extend(model.head(model.hidden_states(idx)[:, len(prompt):]))
    return out


def _check_scoring(model, prompt, completions, batch: bool):
    """Return (prompt, completions) as lists of token ids, checked against the model."""
    validate.has_attributes("model", model, ("config", "head", "hidden_states"),
                            "an inferbook.gpt.GPT model")
    completions = validate.items("completions", completions)
    vocab, limit = model.config.vocab_size, model.config.n_positions
    prompt = validate.token_ids("prompt", prompt, vocab)
    completions = [validate.token_ids(f"completions[{i}]", c, vocab) for i, c in enumerate(completions)]
    if not prompt or not completions or any(not c for c in completions):
        raise ValueError("need a non-empty prompt and at least one non-empty completion")
    if batch and len({len(c) for c in completions}) != 1:
        raise ValueError("batch=True needs completions of equal length")
    if len(prompt) + max(map(len, completions)) > limit:
        raise ValueError(f"prompt + completion of {len(prompt) + max(map(len, completions))} tokens "
                         f"exceeds n_positions={limit}")
    return prompt, completions


# --- a simulated agent workload --------------------------------------------------------------
@dataclass
class ReplayStats:
    requests: int
    prompt_tokens: int
    hit_tokens: int  # prompt tokens whose KV was reused
    prefill_tokens: int  # prompt tokens actually computed
    evictions: int

    def __post_init__(self) -> None:
        for name in ("requests", "prompt_tokens", "hit_tokens", "prefill_tokens", "evictions"):
            validate.non_negative_int(name, getattr(self, name))
        for name in ("hit_tokens", "prefill_tokens"):
            if getattr(self, name) > self.prompt_tokens:
                raise ValueError(f"{name} ({getattr(self, name)}) cannot exceed prompt_tokens ({self.prompt_tokens})")

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self._prompt_tokens()

    @property
    def prefill_saved(self) -> float:
        """Fraction of prompt tokens that needed no prefill."""
        return 1 - self.prefill_tokens / self._prompt_tokens()

    def _prompt_tokens(self) -> int:
        if self.prompt_tokens == 0:
            raise ValueError("prompt_tokens is 0: no prompt was replayed, so there is no rate")
        return self.prompt_tokens


def _check_replay(requests, num_blocks: int, block_size: int) -> list[tuple[list[int], list[int]]]:
    """Return `requests` as (prompt, reply) token lists; raise unless each fits the pool alone."""
    requests = validate.items("requests", requests)
    out = []
    for i, pair in enumerate(requests):
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise ValueError(f"requests[{i}] must be a (prompt tokens, reply tokens) pair, got {pair!r}")
        prompt = validate.int_list(f"requests[{i}] prompt", pair[0], minimum=0)
        reply = validate.int_list(f"requests[{i}] reply", pair[1], minimum=0)
        if not prompt or not reply:
            raise ValueError(f"requests[{i}]: the prompt and the reply need at least one token each "
                             f"(got {len(prompt)} and {len(reply)})")
        if ceil_div(len(prompt) + len(reply) - 1, block_size) > num_blocks:
            raise ValueError(f"requests[{i}] needs {ceil_div(len(prompt) + len(reply) - 1, block_size)} "
                             f"blocks; the pool has num_blocks={num_blocks}")
        out.append((prompt, reply))
    if not out:
        raise ValueError("requests must hold at least one (prompt, reply) pair")
    return out


def replay(requests, num_blocks: int, block_size: int = 16, caching: bool = True) -> ReplayStats:
    """Serve `requests` one at a time through the book's step loop, with (or without) prefix caching.

    `requests`: (prompt tokens, reply tokens) pairs, in arrival order. They are served by
    `steploop.run` with a `steploop.Scheduler` on block books (one sequence at a time, a whole
    prompt per step) and a `steploop.ScriptedExecutor` that "generates" each reply: each request
    reuses its cached prefix, computes the rest of its prompt and its reply, and every block is
    indexed as it fills, so the next turn's prompt finds the reply cached too. Only block
    bookkeeping runs (no model): the counts of reused and computed prompt tokens are exact.
    """
    allocator = BlockAllocator(num_blocks, block_size)
    if type(caching) is not bool:
        raise TypeError(f"caching must be True or False, got {caching!r}")
    requests = _check_replay(requests, num_blocks, block_size)
    books = BlockManager(allocator)
    prefix = PrefixCache(allocator) if caching else None
    longest = max(len(p) for p, _ in requests)
    scheduler = Scheduler(books, max_num_seqs=1, max_num_batched_tokens=longest, prefix_cache=prefix)
    served = [Request(i, tuple(p), len(r)) for i, (p, r) in enumerate(requests)]
    run(scheduler, served, ScriptedExecutor({i: r for i, (_, r) in enumerate(requests)}))
    prompt_total = sum(len(p) for p, _ in requests)
    hit = prefix.hit_tokens if prefix else 0
    return ReplayStats(len(requests), prompt_total, hit, prompt_total - hit,
                       prefix.evictions if prefix else 0)
