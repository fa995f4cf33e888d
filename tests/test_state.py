"""A rejected call changes nothing: snapshot the allocator, caches, prefix cache and scheduler,
feed an invalid call, and compare.

Hypothesis builds a random valid history (sequences added, grown, forked, freed, indexed by the
prefix cache; a scheduler admitting requests), then throws calls drawn from the kinds of bad
input the package must refuse: non-finite scales/temperatures/times, non-integer counts,
duplicate or negative block ids, negative positions, token ids outside the vocabulary, a cache
broadcast over a bigger batch, booleans as counts, requests that could never finish.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook import capacity, cost_model, metrics
from inferbook import simulate as sim
from inferbook.blocks import BlockAllocator, BlockManager, check_invariants
from inferbook.engine import Engine
from inferbook.gpt import GPT, GPTConfig
from inferbook.kv_cache import KVCache
from inferbook.metrics import SLO
from inferbook.models import model as model_preset
from inferbook.paged import PagedKVCache
from inferbook.prefix_cache import PrefixCache
from inferbook.steploop import Request, Scheduler, Sequence
from inferbook.workload import fixed_workload

LLAMA8 = model_preset("Llama-3.1-8B")
DEP = sim.Deployment(LLAMA8, "H100 SXM", max_num_seqs=8)

CFG = GPTConfig(vocab_size=20, n_positions=32, n_embd=8, n_layer=2, n_head=2)
BS = 4  # block size
NAN, INF = math.nan, math.inf


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(CFG).eval()


class World:
    """Everything a bad call could corrupt."""

    def __init__(self, model):
        self.model = model
        self.cache = PagedKVCache.for_model(CFG, num_blocks=12, block_size=BS)
        self.alloc = self.cache.allocator
        self.prefix = PrefixCache(self.alloc)
        self.kv = KVCache.for_model(CFG, batch=1, max_len=16)
        self.sched = Scheduler(BlockManager(BlockAllocator(6, BS)), max_num_seqs=3,
                               max_num_batched_tokens=8)
        self.engine = Engine(model, num_blocks=6, block_size=BS, clock="steps")
        self.tokens: dict = {}  # seq_id -> its tokens (for the prefix cache)
        # the torch-free side: block books, a scheduler on them, the simulator's inputs
        self.books = BlockManager(BlockAllocator(10, BS))
        self.sim_sched = Scheduler(BlockManager(BlockAllocator(6, BS)), max_num_seqs=3,
                                   max_num_batched_tokens=8)
        self.requests = fixed_workload(6, 8, 3, rate=2.0, seed=1)
        self.dep = DEP

    def snapshot(self):
        c, a, p, s = self.cache, self.alloc, self.prefix, self.sched
        seqs = [*s.waiting, *s.running]
        return (
            list(a._ref), a.free_blocks(),
            {k: c.blocks.block_table(k) for k in c.blocks.sequences}, {k: c.blocks.num_tokens(k) for k in c.blocks.sequences}, set(c.blocks._finished),
            c.blocks.copies,
            [t.numpy().tobytes() for t in (*c.k_pool, *c.v_pool)],
            {h: list(b) for h, b in p._blocks_of.items()}, dict(p._hash_of), p.query_tokens, p.hit_tokens, p.evictions,
            self.kv.length, self.kv.k.numpy().tobytes(), self.kv.v.numpy().tobytes(),
            [q.seq_id for q in s.waiting], [q.seq_id for q in s.running], s.num_preemptions,
            [(q.status, q.num_computed, list(q.tokens)) for q in seqs],
            s.cache.allocator.free_blocks(), {k: s.cache.block_table(k) for k in s.cache.sequences},
            self.engine.cache.allocator.free_blocks(), {k: self.engine.cache.blocks.num_tokens(k) for k in self.engine.cache.blocks.sequences},
            self.model.counter.calls,
            {k: self.books.block_table(k) for k in self.books.sequences}, {k: self.books.num_tokens(k) for k in self.books.sequences},
            set(self.books._finished), self.books.copies, list(self.books.allocator._ref),
            self.books.allocator.free_blocks(),
            [q.seq_id for q in self.sim_sched.waiting], [q.seq_id for q in self.sim_sched.running],
            [(q.status, q.num_computed, list(q.tokens)) for q in (*self.sim_sched.waiting,
                                                                 *self.sim_sched.running)],
            self.sim_sched.cache.allocator.free_blocks(), tuple(self.requests), self.dep,
            cost_model.FITTED,
        )


# --- valid history ---------------------------------------------------------------------------
def valid_history(world: World, data) -> None:
    w = world
    for i in range(data.draw(st.integers(1, 6), label="ops")):
        op = data.draw(st.sampled_from(["add", "grow", "fork", "free", "index", "kv", "admit",
                                        "books", "sim admit"]))
        live = w.cache.blocks.sequences
        if op == "add":
            w.cache.blocks.add_sequence(f"s{i}")
            w.tokens[f"s{i}"] = []
        elif op == "grow" and live:
            seq = data.draw(st.sampled_from(live))
            n = data.draw(st.integers(1, 5))
            if w.cache.blocks.can_append(seq, n):
                tokens = data.draw(st.lists(st.integers(0, CFG.vocab_size - 1), min_size=n, max_size=n))
                pos = w.cache.blocks.num_tokens(seq)
                with torch.inference_mode():
                    w.model(torch.tensor([tokens]), cache=w.cache.view(seq), pos=pos)
                w.tokens[seq] += tokens
        elif op == "fork" and live and w.alloc.num_free_blocks > 2:
            parent = data.draw(st.sampled_from(live))
            w.cache.blocks.fork(parent, f"s{i}")
            w.tokens[f"s{i}"] = list(w.tokens[parent])
        elif op == "free" and live:
            w.cache.blocks.free_sequence(data.draw(st.sampled_from(live)))
        elif op == "index" and live:
            seq = data.draw(st.sampled_from(live))
            table = w.cache.blocks.block_table(seq)
            if not any(w.prefix.is_cached(b) for b in table):
                w.prefix.insert(w.tokens[seq], table)
        elif op == "kv" and w.kv.length < 12:
            n = data.draw(st.integers(1, 4))
            with torch.inference_mode():
                w.model(torch.randint(0, CFG.vocab_size, (1, n)), cache=w.kv, pos=w.kv.length)
        elif op == "books":
            books, live_books = w.books, w.books.sequences
            kind = data.draw(st.sampled_from(["add", "grow", "fork", "free"]))
            if kind == "add" or not live_books:
                books.add_sequence(f"b{i}")
            else:
                seq = data.draw(st.sampled_from(live_books))
                n = data.draw(st.integers(0, 6))
                if kind == "grow" and books.can_append(seq, n):
                    books.reserve(seq, n)
                elif kind == "fork" and books.allocator.num_free_blocks > 2:
                    books.fork(seq, f"b{i}")
                elif kind == "free":
                    books.free_sequence(seq)
        elif op == "sim admit":
            seq = Sequence.from_request(Request(200 + i, tuple(range(1, data.draw(st.integers(2, 9)))), 3))
            w.sim_sched.add(seq)
            for s, n in w.sim_sched.schedule(0.0):
                s.num_computed += n
        elif op == "admit":
            seq = Sequence.from_request(Request(100 + i, tuple(range(1, data.draw(st.integers(2, 9)))), 3))
            w.sched.add(seq)
            for s, n in w.sched.schedule(0.0):
                s.num_computed += n
    check_invariants(w.cache)


# --- invalid calls ---------------------------------------------------------------------------
def invalid_calls(w: World, data):
    """Return (name, thunk) pairs, every one of which must raise ValueError or TypeError."""
    live = w.cache.blocks.sequences
    seq = live[0] if live else None
    free_block = w.alloc.free_blocks()[0] if w.alloc.num_free_blocks else None
    used = [b for b in range(w.alloc.num_blocks) if w.alloc.ref_count(b) > 0]
    big = torch.tensor([[CFG.vocab_size]])
    calls = [
        ("free negative block", lambda: w.alloc.free(-1)),
        ("free bool block", lambda: w.alloc.free(True)),
        ("incref float block", lambda: w.alloc.incref(1.0)),
        ("incref past the pool", lambda: w.alloc.incref(w.alloc.num_blocks)),
        ("add duplicate blocks", lambda: w.cache.blocks.add_sequence("new", [0, 0], num_tokens=2 * BS)),
        ("add negative block", lambda: w.cache.blocks.add_sequence("new", [-1], num_tokens=1)),
        ("add float num_tokens", lambda: w.cache.blocks.add_sequence("new", [], num_tokens=0.0)),
        ("add negative num_tokens", lambda: w.cache.blocks.add_sequence("new", [], num_tokens=-1)),
        ("prefix insert duplicates", lambda: w.prefix.insert([1] * (2 * BS), [5, 5])),
        ("prefix insert negative", lambda: w.prefix.insert([1] * BS, [-1])),
        ("prefix match bad token", lambda: w.prefix.match([1, -3, 2])),
        ("prefix match float token", lambda: w.prefix.match([1, 2.0])),
        ("kv out-of-vocab token", lambda: w.model(big, cache=w.kv, pos=w.kv.length)),
        ("kv batch broadcast", lambda: w.model(torch.tensor([[1], [2]]), cache=w.kv, pos=w.kv.length)),
        ("kv negative pos", lambda: w.model(torch.tensor([[1]]), cache=w.kv, pos=-1)),
        ("kv float pos", lambda: w.model(torch.tensor([[1]]), cache=w.kv, pos=float(w.kv.length))),
        ("kv gap", lambda: w.model(torch.tensor([[1]]), cache=w.kv, pos=w.kv.length + 1)),
        ("kv past max_len", lambda: w.model(torch.ones(1, 17, dtype=torch.long), cache=w.kv, pos=0)),
        ("model float tokens", lambda: w.model(torch.tensor([[1.0]]))),
        ("schedule at NaN", lambda: w.sched.schedule(NAN)),
        ("schedule at inf", lambda: w.sched.schedule(INF)),
        ("request NaN arrival", lambda: Request(7, (1,), 2, arrival_time=NAN)),
        ("request float max_new_tokens", lambda: Request(7, (1,), 2.5)),
        ("request bool max_new_tokens", lambda: Request(7, (1,), True)),
        ("engine out-of-vocab prompt", lambda: w.engine.run([Request(1, (1, CFG.vocab_size), 2)])),
        ("engine never-finishing request", lambda: w.engine.run([Request(1, (1,) * 30, 30)])),
        ("engine more blocks than exist", lambda: w.engine.run([Request(1, (1,) * 20, 8)])),
        ("engine bad one among good", lambda: w.engine.run([Request(1, (1, 2), 2), Request(2, (-1,), 2)])),
    ]
    books, reqs, dep = w.books, w.requests, w.dep
    book_seq = books.sequences[0] if books.sequences else None
    calls += [
        ("books add duplicate blocks", lambda: books.add_sequence("new", [0, 0], num_tokens=2 * BS)),
        ("books reserve unknown", lambda: books.reserve("nope", 1)),
        ("books admission cost negative", lambda: books.admission_cost(-1)),
        ("books admission cost too many hits", lambda: books.admission_cost(1, [0, 1])),
        ("sim scheduler at NaN", lambda: w.sim_sched.schedule(NAN)),
        ("sim inf rate", lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=INF,
                                                     prompt_tokens=8, output_tokens=8,
                                                     ttft_p90_s=1.0, tpot_p90_s=1.0)),
        ("sim zero replicas", lambda: sim.run_replicas(dep, reqs, 0)),
        ("sim zero decode replicas", lambda: sim.disaggregated(dep, dep, reqs, 1, 0)),
        ("sim no blocks", lambda: sim.serve_simulated(reqs, dep.cost_model(), num_blocks=0)),
        ("sim never-finishing request", lambda: sim.serve_simulated(
            reqs + [Request(99, (1,) * 40, 4)], dep.cost_model(), num_blocks=2, block_size=BS)),
        ("sim duplicate ids", lambda: sim.serve_simulated(reqs + reqs[:1], dep.cost_model(), num_blocks=50)),
        ("sim bad shapes", lambda: dep.cost_model().cost([(0, 1)])),
        ("sim bad efficiency", lambda: cost_model.Efficiency(flops_efficiency=NAN)),
        ("sim bad goodput slo", lambda: metrics.goodput_fraction([], 1.0, 1.0)),
        ("sim bad SLO", lambda: SLO(ttft=-1.0)),
        ("workload inf rate", lambda: fixed_workload(3, 4, 4, rate=INF)),
    ]
    if book_seq is not None:
        calls += [
            ("books reserve float", lambda: books.reserve(book_seq, 1.5)),
            ("books fork onto itself", lambda: books.fork(book_seq, book_seq)),
            ("books slots past the end", lambda: books.slots(book_seq, 0, 10**6)),
        ]
    if free_block is not None:
        calls.append(("double free", lambda: w.alloc.free(free_block)))
        calls.append(("add a free block", lambda: w.cache.blocks.add_sequence("new", [free_block], num_tokens=1)))
    if used:
        calls.append(("prefix insert of an unfreeable mix",
                      lambda: w.prefix.insert([3] * (2 * BS), [used[0], used[0]])))
    if w.sched.running:
        calls.append(("re-add a running sequence", lambda: w.sched.add(w.sched.running[0])))
    if seq is not None:
        n = w.cache.blocks.num_tokens(seq)
        view = w.cache.view(seq)
        calls += [
            ("append float", lambda: w.cache.append_slots(seq, 1.5)),
            ("append negative", lambda: w.cache.append_slots(seq, -1)),
            ("append bool", lambda: w.cache.append_slots(seq, True)),
            ("reserve float", lambda: w.cache.reserve(seq, 2.0)),
            ("fork onto existing", lambda: w.cache.blocks.fork(seq, seq)),
            ("slots negative start", lambda: w.cache.slots(seq, -1)),
            ("write negative slot", lambda: w.cache.write(0, torch.tensor([-1]), torch.zeros(1, 2, 4),
                                                          torch.zeros(1, 2, 4))),
            ("write bool layer", lambda: w.cache.write(True, torch.tensor([0]), torch.zeros(1, 2, 4),
                                                       torch.zeros(1, 2, 4))),
            ("view out-of-vocab token", lambda: w.model(big, cache=view, pos=n)),
            ("view batch broadcast", lambda: w.model(torch.tensor([[1], [2]]), cache=view, pos=n)),
            ("view rewrite", lambda: w.model(torch.tensor([[1]]), cache=view, pos=max(n - 1, 0) if n else 1)),
            ("view negative pos", lambda: w.model(torch.tensor([[1]]), cache=view, pos=-1)),
            ("view past n_positions", lambda: w.model(torch.ones(1, CFG.n_positions, dtype=torch.long),
                                                      cache=view, pos=n + 1)),
        ]
    return calls


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_rejected_calls_leave_every_object_as_it_was(model, data):
    world = World(model)
    valid_history(world, data)
    calls = invalid_calls(world, data)
    for _ in range(data.draw(st.integers(1, 6), label="bad calls")):
        name, call = data.draw(st.sampled_from(calls), label="bad call")
        before = world.snapshot()
        with pytest.raises((ValueError, TypeError)):
            with torch.inference_mode():
                call()
        assert world.snapshot() == before, f"{name} changed the state"
    check_invariants(world.cache)
    check_invariants(world.books)
    # and the objects still work
    assert sim.run_replicas(world.dep, world.requests, 2)
    out = world.engine.run([Request(1, (1, 2, 3), 2)])
    assert len(out.outputs[1]) == 2
