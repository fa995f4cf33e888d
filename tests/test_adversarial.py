"""Adversarial calls on the public API (issue 26 item 4): every bad argument is refused with a
ValueError/TypeError that names it, a rejected call changes nothing, NumPy integers count as
integers, and sizes that could never finish (2**63 blocks, requests, steps) are refused instead
of hanging or overflowing.

Each spec below is a function, a valid call, and the kind of each argument; the probes are the
kind's bad values (wrong type, None, bool, NaN, ±inf, 0, negatives, 2**63), generated here.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from inferbook import (
    arith,
    blocks,
    capacity,
    cost_model,
    decode,
    io_model,
    kv_cache,
    main,
    metrics,
    paged,
    prefix_cache,
    roofline,
    softmax,
    speculation_math,
    speculative,
    steploop,
    tiny_lm,
    workload,
)
from inferbook import simulate as sim
from inferbook.gpt import GPT, GPTConfig
from inferbook.hardware import gpu
from inferbook.models import model as model_preset
from inferbook.hardware import gpu as gpu_preset

torch.manual_seed(0)
CFG = GPTConfig(vocab_size=64, n_positions=64, n_embd=16, n_layer=2, n_head=2)
MODEL = GPT(CFG).eval()
H100 = gpu("H100 SXM")
LLAMA8 = model_preset("Llama-3.1-8B")   # the inner functions take resolved objects, never names
R = steploop.Request
HUGE = 2**63

BAD = {
    "int+": ["x", None, True, 1.5, -1, 0, math.nan, math.inf, []],
    "int0": ["x", None, True, 1.5, -1, math.nan, math.inf, []],
    "float+": ["x", None, True, math.nan, math.inf, -math.inf, -1.0, 0.0, []],
    "float0": ["x", None, True, math.nan, math.inf, -1.0, []],
    "frac": ["x", None, True, math.nan, math.inf, -1.0, 0.0, 1.5, []],   # in (0, 1]
    "float": ["x", None, True, math.nan, math.inf, -math.inf, []],
    "opt+": ["x", True, math.nan, math.inf, -1.0, 0.0, []],  # None means "the default" here
    "opt": ["x", 1, 2.5, []],
    "running_max": ["x", None, math.nan, math.inf, [[1.0]]],
    "bool": ["x", None, 1, 0.0],
    "list": ["x", None, 1, 2.5],
    "tensor": ["x", None, 1, [[1.0]]],
}


def requests():
    return [R(i, (1, 2, 3, 4), 3, 0.0) for i in range(3)]


def rmetrics():
    return [metrics.RequestMetrics(i, 4, 3, 0.1 * (i + 1), 0.01, 0.5) for i in range(3)]


def books():
    m = blocks.BlockManager(blocks.BlockAllocator(8, 4))
    m.add_sequence(0)
    m.reserve(0, 5)
    return m


def pcache():
    c = paged.PagedKVCache(blocks.BlockAllocator(8, 4), 2, 2, 8)
    c.blocks.add_sequence(0)
    c.append_slots(0, 5)
    return c


def sram():
    s = io_model.Sram(100)
    s.alloc(20)
    return s


def method_of(name, obj):
    """Return (obj's method `name`, [obj]): the call to probe and the state to compare."""
    return getattr(obj, name), [obj]


def sched():
    return steploop.Scheduler(sim.bookkeeping_cache(16, 4), 4, 32)


CM = cost_model.CostModel.for_gpu(model_preset("Llama-3.1-8B"), gpu_preset("H100 SXM"))
DEP = sim.Deployment("Llama-3.1-8B", "H100 SXM", 1, 8, 512)
P_TARGET = torch.softmax(torch.randn(3, 64), -1)
Q_DRAFT = torch.softmax(torch.randn(3, 64), -1)

# (name, make() -> (callable, state objects), valid kwargs, {arg: kind})
SPECS = [
    ("ceil_div", lambda: (arith.ceil_div, []), {"n": 7, "d": 2}, {"n": "float0", "d": "float+"}),
    ("forward_cost", lambda: (roofline.forward_cost, []),
     {"n_params": 1e9, "n_layer": 2, "d_attn": 64, "kv_dim": 64, "batch": 2, "new_tokens": 3, "past_tokens": 4},
     {"n_params": "float+", "n_layer": "int+", "d_attn": "int+", "kv_dim": "int+", "batch": "int+",
      "new_tokens": "int+", "past_tokens": "float0"}),
    ("attainable_flops", lambda: (roofline.attainable_flops, []), {"gpu": H100, "intensity": 10.0},
     {"intensity": "float0", "gpu": "opt"}),
    ("bound", lambda: (roofline.bound, []), {"gpu": H100, "intensity": 10.0}, {"intensity": "float0"}),
    ("ForwardCost", lambda: (roofline.ForwardCost, []), {"flops": 1e9, "bytes_moved": 1e6},
     {"flops": "float0", "bytes_moved": "float0"}),
    ("time_bound", lambda: (roofline.time_bound, []), {"gpu": H100, "flops": 1e9, "bytes_moved": 1e6, "peak_flops": 1e12},
     {"flops": "float0", "bytes_moved": "float0", "peak_flops": "opt+"}),
    ("TimeBound", lambda: (roofline.TimeBound, []), {"compute_s": 1.0, "memory_s": 2.0},
     {"compute_s": "float0", "memory_s": "float0"}),
    ("num_kv_splits", lambda: (roofline.num_kv_splits, []),
     {"batch": 1, "kv_heads": 8, "context": 4096, "num_sms": 132, "min_tokens_per_split": 256},
     {"batch": "int+", "kv_heads": "int+", "context": "int+", "num_sms": "int+"}),
    ("critical_tokens", lambda: (roofline.critical_tokens, []), {"gpu": H100, "flops_per_token": 2e9, "weight_bytes": 2e9},
     {"flops_per_token": "float+", "weight_bytes": "float+"}),
    ("smem_bytes_per_s", lambda: (roofline.smem_bytes_per_s, []), {"gpu": H100, "clock_hz": 1.5e9, "bytes_per_clock": 128},
     {"clock_hz": "opt+", "bytes_per_clock": "int+"}),
    ("attention_ceiling_flops", lambda: (roofline.attention_ceiling_flops, []),
     {"gpu": H100, "n": 1024, "d": 64, "algorithm": "flash", "peak_flops": 1e12}, {"peak_flops": "opt+"}),
    ("IOCount", lambda: (io_model.IOCount, []), {"reads": 1, "writes": 1, "flops": 1, "peak_sram": 1},
     {"reads": "int0", "writes": "int0", "flops": "int0", "peak_sram": "int0"}),
    ("Sram", lambda: (io_model.Sram, []), {"capacity": 100}, {"capacity": "int+"}),
    *[(f"Sram.{m}", lambda m=m: method_of(m, sram()), {"n": 10}, {"n": "int0"})
      for m in ("load", "alloc", "store", "free")],
    ("standard_attention_io", lambda: (io_model.standard_attention_io, []), {"n": 64, "d": 16, "sram_elems": 4096},
     {"n": "int+", "d": "int+", "sram_elems": "int+"}),
    ("flash_attention_io", lambda: (io_model.flash_attention_io, []), {"n": 64, "d": 16, "sram_elems": 4096, "causal": False},
     {"n": "int+", "d": "int+", "sram_elems": "int+", "causal": "bool"}),
    ("theorem2_flash_bound", lambda: (io_model.theorem2_flash_bound, []), {"n": 64, "d": 16, "sram_elems": 4096},
     {"n": "int+", "d": "int+", "sram_elems": "int+"}),
    ("theorem2_standard_bound", lambda: (io_model.theorem2_standard_bound, []), {"n": 64, "d": 16},
     {"n": "int+", "d": "int+"}),
    ("kv_passes", lambda: (io_model.kv_passes, []), {"n": 64, "d": 16, "sram_elems": 4096, "rows_divisor": 6},
     {"n": "int+", "d": "int+", "rows_divisor": "int+"}),
    ("standard_attention_intensity", lambda: (io_model.standard_attention_intensity, []),
     {"n": 64, "d": 16, "bytes_per_element": 2}, {"n": "int+", "bytes_per_element": "float+"}),
    ("attention_intensity", lambda: (io_model.attention_intensity, []),
     {"count": io_model.IOCount(10, 10, 100, 5), "bytes_per_element": 2}, {"bytes_per_element": "float+"}),
    ("expected_tokens_per_pass", lambda: (speculation_math.expected_tokens_per_pass, []), {"alpha": 0.7, "k": 4},
     {"alpha": "float0", "k": "int0"}),
    ("online_update", lambda: (softmax.online_update, []), {"m": -np.inf, "l": 0.0, "scores": np.arange(5.0)},
     {"m": "running_max", "l": "running_max", "scores": "list"}),
    ("BlockAllocator", lambda: (blocks.BlockAllocator, []), {"num_blocks": 8, "block_size": 4},
     {"num_blocks": "int+", "block_size": "int+"}),
    ("blocks_for", lambda: (blocks.blocks_for, []), {"num_tokens": 9, "block_size": 4},
     {"num_tokens": "int0", "block_size": "int+"}),
    ("OutOfBlocksError", lambda: (blocks.OutOfBlocksError, []), {"needed": 3, "free": 1}, {"needed": "int0", "free": "int0"}),
    ("BlockManager.reserve", lambda: method_of("reserve", books()), {"seq_id": 0, "n": 3}, {"n": "int0"}),
    ("BlockManager.slots", lambda: method_of("slots", books()), {"seq_id": 0, "start": 0, "stop": 3},
     {"start": "int0"}),
    ("BlockManager.admission_cost", lambda: method_of("admission_cost", books()),
     {"num_tokens": 5, "hit_blocks": ()}, {"num_tokens": "int0", "hit_blocks": "list"}),
    ("PagedKVCache", lambda: (paged.PagedKVCache, []),
     {"allocator": blocks.BlockAllocator(8, 4), "n_layers": 2, "n_kv_heads": 2, "head_dim": 8, "dtype": torch.float32, "device": "cpu"},
     {"n_layers": "int+", "n_kv_heads": "int+", "head_dim": "int+", "dtype": "list", "device": "list"}),
    ("PagedKVCache.for_model", lambda: (paged.PagedKVCache.for_model, []), {"config": CFG, "num_blocks": 8, "block_size": 4},
     {"config": "list", "num_blocks": "int+", "block_size": "int+"}),
    ("PagedKVCache.append_slots", lambda: method_of("append_slots", pcache()), {"seq_id": 0, "n": 3},
     {"n": "int0"}),
    ("PagedKVCache.write", lambda: method_of("write", pcache()),
     {"layer": 0, "slots": torch.tensor([0, 1]), "k": torch.ones(2, 2, 8), "v": torch.ones(2, 2, 8)},
     {"layer": "int0", "slots": "tensor", "k": "tensor", "v": "tensor"}),
    ("PagedKVCache.gather", lambda: method_of("gather", pcache()), {"layer": 0, "seq_id": 0, "stop": 3},
     {"layer": "int0"}),
    ("BatchCacheView", lambda: (paged.BatchCacheView, []), {"cache": pcache(), "seq_ids": [0]},
     {"cache": "list", "seq_ids": "list"}),
    ("hash_block", lambda: (prefix_cache.hash_block, []), {"parent_hash": 0, "block_tokens": [1, 2, 3, 4]},
     {"parent_hash": "int0", "block_tokens": "list"}),
    ("block_hashes", lambda: (prefix_cache.block_hashes, []), {"tokens": list(range(9)), "block_size": 4},
     {"tokens": "list", "block_size": "int+"}),
    ("replay", lambda: (prefix_cache.replay, []),
     {"requests": [(list(range(10)), [1, 2]), (list(range(10)), [3])], "num_blocks": 16, "block_size": 4},
     {"requests": "list", "num_blocks": "int+", "block_size": "int+"}),
    ("score_forked", lambda: (prefix_cache.score_forked, []),
     {"model": MODEL, "prompt": [1, 2, 3, 4, 5], "completions": [[1, 2], [3]], "block_size": 4},
     {"model": "list", "prompt": "list", "completions": "list"}),
    ("RequestMetrics", lambda: (metrics.RequestMetrics, []),
     {"request_id": 0, "prompt_tokens": 4, "output_tokens": 3, "ttft": 0.1, "tpot": 0.01, "e2e": 0.5, "itl": (0.01, 0.01)},
     {"prompt_tokens": "int0", "ttft": "float0", "tpot": "float0", "e2e": "float0", "itl": "list"}),
    ("RequestMetrics.from_times", lambda: (metrics.RequestMetrics.from_times, []),
     {"request_id": 0, "prompt_tokens": 4, "arrival": 0.0, "token_times": [0.1, 0.2], "finish": 0.3},
     {"token_times": "list"}),
    ("SLO", lambda: (metrics.SLO, []), {"ttft": 1.0, "tpot": 0.1}, {"ttft": "opt+", "tpot": "opt+"}),
    ("percentile", lambda: (metrics.percentile, []), {"metrics": rmetrics(), "name": "ttft", "q": 50.0},
     {"metrics": "list", "q": "float0"}),
    ("goodput", lambda: (metrics.goodput, []), {"metrics": rmetrics(), "slo": metrics.SLO(ttft=1.0), "duration": 2.0},
     {"duration": "float+"}),
    ("summary", lambda: (metrics.summary, []), {"metrics": rmetrics(), "duration": 2.0, "percentiles": (50.0, 90.0)},
     {"duration": "float+", "percentiles": "list"}),
    ("mixed_workload", lambda: (workload.mixed_workload, []), {"n_requests": 4, "vocab": 64, "max_output": 96, "seed": 0},
     {"n_requests": "int0", "max_output": "int+", "seed": "int0"}),
    ("fixed_workload", lambda: (workload.fixed_workload, []), {"n_requests": 4, "prompt_tokens": 8, "output_tokens": 4, "rate": 1.0},
     {"n_requests": "int+", "prompt_tokens": "int+", "output_tokens": "int+", "rate": "opt+"}),
    ("poisson_arrivals", lambda: (workload.poisson_arrivals, []), {"requests": requests(), "rate": 2.0},
     {"requests": "list", "rate": "float+"}),
    ("agent_workload", lambda: (workload.agent_workload, []),
     {"n_conversations": 2, "turns": 2, "system_tokens": 10, "tools_tokens": 10, "user_tokens": (2, 5), "reply_tokens": (2, 5), "vocab": 100},
     {"n_conversations": "int0", "turns": "int0", "system_tokens": "int0", "vocab": "int+"}),
    ("Request", lambda: (steploop.Request, []), {"request_id": 0, "prompt": (1, 2), "max_new_tokens": 2, "arrival_time": 0.0},
     {"prompt": "list", "max_new_tokens": "int+", "arrival_time": "float0"}),
    ("Scheduler", lambda: (steploop.Scheduler, []), {"cache": sim.bookkeeping_cache(16, 4), "max_num_seqs": 4,
                                                         "max_num_batched_tokens": 32, "chunked_prefill": False},
     {"cache": "list", "max_num_seqs": "int+", "max_num_batched_tokens": "int+", "chunked_prefill": "bool"}),
    ("Scheduler.end_static_batch", lambda: method_of("end_static_batch", sched()), {"t_done": 1.0},
     {"t_done": "float"}),
    ("StepRecord", lambda: (steploop.StepRecord, []),
     {"time": 1.0, "running": 1, "waiting": 0, "prefill_tokens": 1, "decode_tokens": 1, "blocks_used": 1},
     {"running": "int0", "waiting": "int0", "blocks_used": "int0"}),
    ("check_requests", lambda: (steploop.check_requests, []),
     {"requests": requests(), "scheduler": sched(), "executor": sim.CostExecutor(CM)},
     {"requests": "list", "scheduler": "list", "executor": "list"}),
    ("Efficiency", lambda: (cost_model.Efficiency, []), {"flops_efficiency": 0.5, "step_overhead_s": 0.0},
     {"flops_efficiency": "float+", "step_overhead_s": "float0"}),
    ("StepCost", lambda: (cost_model.StepCost, []), {"compute_s": 1.0, "memory_s": 1.0, "comm_s": 0.0, "overhead_s": 0.0},
     {"compute_s": "float0", "memory_s": "float0", "comm_s": "float0", "overhead_s": "float0"}),
    ("CostModel.for_gpu", lambda: (cost_model.CostModel.for_gpu, []), {"spec": LLAMA8, "gpu": H100, "tp": 1},
     {"tp": "int+", "gpu": "list", "spec": "list", "eff": "opt", "kv_dtype": "list", "weight_dtype": "list"}),
    ("CostModel.step_time", lambda: (CM.step_time, [CM]), {"shapes": [(1, 10), (5, 0)]}, {"shapes": "list"}),
    ("CostExecutor.wait", lambda: method_of("wait", sim.CostExecutor(CM)), {"now": 0.0, "next_arrival": 1.0},
     {"now": "float", "next_arrival": "float"}),
    ("serve_simulated", lambda: (sim.serve_simulated, []), {"requests": requests(), "cost": CM, "num_blocks": 16, "block_size": 4},
     {"requests": "list", "num_blocks": "int+", "block_size": "int+"}),
    ("kv_blocks", lambda: (sim.kv_blocks, []), {"spec": LLAMA8, "gpu": H100, "tp": 1},
     {"tp": "int+", "block_size": "int+", "kv_dtype": "list", "weight_dtype": "list", "gpu": "list",
      "gpu_memory_utilization": "frac"}),
    ("FittedGPUModel", lambda: (cost_model.FittedGPUModel, []), {"eff": cost_model.Efficiency(), "n_fit": 3, "held_out_errors": (0.1,)},
     {"eff": "opt", "n_fit": "int0", "held_out_errors": "list"}),
    ("decode_step_time", lambda: (cost_model.decode_step_time, []),
     {"spec": LLAMA8, "gpu": H100, "tp": 1, "batch": 4, "context": 100},
     {"tp": "int+", "batch": "int+", "context": "int+", "eff": "opt", "kv_dtype": "list"}),
    ("decode_tokens_per_s", lambda: (cost_model.decode_tokens_per_s, []),
     {"spec": LLAMA8, "gpu": H100, "tp": 1, "batch": 4, "context": 100}, {"batch": "int+", "weight_dtype": "list"}),
    ("Deployment", lambda: (sim.Deployment, []), {"spec": "Llama-3.1-8B", "gpu": "H100 SXM", "tp": 1, "max_num_seqs": 8},
     {"tp": "int+", "max_num_seqs": "int+", "kv_dtype": "list", "chunked_prefill": "bool",
      "gpu_memory_utilization": "frac"}),
    ("split_round_robin", lambda: (sim.split_round_robin, []), {"requests": requests(), "replicas": 2},
     {"requests": "list", "replicas": "int+"}),
    ("run_replicas", lambda: (sim.run_replicas, []), {"dep": DEP, "requests": requests(), "replicas": 2},
     {"dep": "list", "requests": "list", "replicas": "int+"}),
    ("disaggregated", lambda: (sim.disaggregated, []),
     {"dep_prefill": DEP, "dep_decode": DEP, "requests": requests(), "n_prefill": 1, "n_decode": 1},
     {"requests": "list", "n_prefill": "int+", "n_decode": "int+", "link_bytes_per_s": "opt+"}),
    ("decide_capacity", lambda: (capacity.decide_capacity, []),
     {"spec": "Llama-3.1-8B", "gpu_name": "H100 SXM", "request_rate": 1.0, "prompt_tokens": 64, "output_tokens": 8,
          "ttft_p90_s": 1.0, "tpot_p90_s": 0.1, "max_gpus": 1, "n_requests": 20},
     {"request_rate": "float+", "prompt_tokens": "int+", "output_tokens": "int+", "ttft_p90_s": "float+",
      "tpot_p90_s": "float+", "max_gpus": "int+", "n_requests": "int+", "kv_dtype": "list",
      "gpu_memory_utilization": "frac"}),
    ("KVCache", lambda: (kv_cache.KVCache, []), {"n_layers": 2, "batch": 1, "n_heads": 2, "max_len": 16, "head_dim": 8},
     {"n_layers": "int+", "batch": "int+", "max_len": "int+", "dtype": "list", "device": "list"}),
    ("KVCache.for_model", lambda: (kv_cache.KVCache.for_model, []), {"config": CFG, "batch": 1, "max_len": 16},
     {"config": "list", "batch": "int+"}),
    ("KVCache.update", lambda: method_of("update", kv_cache.KVCache(2, 1, 2, 16, 8)),
     {"layer": 0, "k_new": torch.ones(1, 2, 3, 8), "v_new": torch.ones(1, 2, 3, 8), "pos": 0},
     {"layer": "int0", "k_new": "tensor", "v_new": "tensor", "pos": "int0"}),
    ("ConcatKVCache.begin_step", lambda: method_of("begin_step", kv_cache.ConcatKVCache(2)), {"pos": 0, "n": 3},
     {"n": "int+"}),
    ("generate_cached", lambda: (decode.generate_cached, []), {"model": MODEL, "prompt": torch.tensor([[1, 2, 3]]), "new_tokens": 3},
     {"model": "list", "prompt": "tensor", "new_tokens": "int+"}),
    ("naive_counts", lambda: (decode.naive_counts, []), {"prompt_len": 3, "new_tokens": 3},
     {"prompt_len": "int+", "new_tokens": "int+"}),
    ("probabilities", lambda: (speculative.probabilities, []), {"logits": torch.randn(3, 64), "temperature": 1.0},
     {"logits": "tensor", "temperature": "float0"}),
    ("residual", lambda: (speculative.residual, []), {"p": P_TARGET, "q": Q_DRAFT}, {"p": "tensor", "q": "tensor"}),
    ("acceptance_probability", lambda: (speculative.acceptance_probability, []), {"p": P_TARGET, "q": Q_DRAFT},
     {"p": "tensor", "q": "tensor"}),
    ("sample_generate", lambda: (speculative.sample_generate, []),
     {"model": MODEL, "prompt": torch.tensor([[1, 2, 3]]), "new_tokens": 4, "temperature": 1.0},
     {"model": "list", "new_tokens": "int+", "temperature": "float0"}),
    ("prompt_windows", lambda: (tiny_lm.prompt_windows, []), {"n": 2, "length": 8}, {"n": "int0", "length": "int+"}),
    ("tiny_lm.train", lambda: (tiny_lm.train, []),
     {"config": CFG, "tokens": torch.randint(0, 64, (200,)), "steps": 1, "batch": 2, "seq_len": 8, "log_every": 0},
     {"config": "list", "tokens": "tensor", "steps": "int+", "batch": "int+", "seq_len": "int+", "lr": "float+",
      "log_every": "int0"}),
    ("decoding_report", lambda: (main.decoding_report, []), {"tokens": 3, "seed": 0}, {"tokens": "int+", "seed": "int0"}),
    ("softmax_report", lambda: (main.softmax_report, []), {"seed": 0}, {"seed": "int0"}),
]

SLOW = {"decide_capacity", "disaggregated", "run_replicas", "tiny_lm.train", "decoding_report",
        "generate_cached", "sample_generate", "score_forked"}


def snapshot(x, depth=0):
    """A comparable picture of an object's state (tensors by value, objects by their fields)."""
    if depth > 6:
        return type(x).__name__
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.detach().flatten()[:4096].tolist())
    if isinstance(x, dict):
        return [(snapshot(k, depth + 1), snapshot(v, depth + 1)) for k, v in x.items()]
    if isinstance(x, (list, tuple)) or type(x).__name__ == "deque":
        return [snapshot(v, depth + 1) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted(repr(v) for v in x)
    if isinstance(x, (int, float, str, bool, type(None))) or callable(x):
        return repr(x)
    if hasattr(x, "__dict__"):
        return (type(x).__name__, snapshot(vars(x), depth + 1))
    return repr(x)


def _probes():
    for name, make, kwargs, kinds in SPECS:
        for arg, kind in kinds.items():
            for bad in BAD[kind]:
                if name in SLOW and bad not in (None, "x", HUGE, -1, math.nan):
                    continue  # the slow calls get the main probes only
                marks = []
                yield pytest.param(make, kwargs, arg, bad, id=f"{name}-{arg}={bad!r}"[:80], marks=marks)


@pytest.mark.parametrize("make, kwargs, arg, bad", list(_probes()))
def test_bad_argument_is_refused_by_name_and_changes_nothing(make, kwargs, arg, bad):
    fn, state = make()
    before = snapshot(state)
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**{**kwargs, arg: bad})
    assert not type(info.value).__module__.startswith("torch"), f"a raw torch error: {info.value}"
    assert arg.lower() in str(info.value).lower(), f"the message does not name {arg}: {info.value}"
    assert snapshot(state) == before, "a rejected call changed the object"


@pytest.mark.parametrize("name, make, kwargs, kinds",
                         [pytest.param(*s, id=s[0]) for s in SPECS if s[0] not in SLOW])
def test_numpy_integers_are_integers(name, make, kwargs, kinds):
    ints = {a: np.int64(kwargs[a]) for a, k in kinds.items() if k in ("int+", "int0") and a in kwargs}
    if not ints:
        pytest.skip("no integer arguments")
    fn, _ = make()
    fn(**{**kwargs, **ints})  # accepted, like the plain ints


# --- calls in the wrong state or beyond what could ever run ------------------------------------------

def test_a_request_longer_than_the_whole_pool_is_a_value_error_and_changes_nothing():
    b = books()
    before = snapshot(b)
    with pytest.raises(ValueError, match="n=100"):
        b.reserve(0, 100)
    with pytest.raises(blocks.OutOfBlocksError):  # still an OutOfBlocksError for a scheduler
        b.reserve(0, 100)
    assert snapshot(b) == before


def test_preempting_or_finishing_a_sequence_that_is_not_running_frees_nothing():
    s = sched()
    seq = steploop.Sequence.from_request(requests()[0])
    s.add(seq)
    s.schedule(0.0)
    stranger = steploop.Sequence.from_request(R(7, (1, 2), 2))
    before = snapshot(s)
    for call in (s.preempt, s.finish):
        with pytest.raises(ValueError, match="not running"):
            call(stranger)
    assert snapshot(s) == before


def test_empty_request_lists_are_refused():
    with pytest.raises(ValueError, match="requests"):
        sim.serve_simulated([], CM, num_blocks=16, block_size=4)
    with pytest.raises(ValueError, match="requests"):
        sim.run_replicas(DEP, [], 2)
    with pytest.raises(ValueError, match="requests"):
        sim.split_round_robin([], 2)


def test_empty_slots_from_append_slots_are_written_as_nothing():
    c = pcache()
    slots = c.append_slots(0, 0)
    before = snapshot(c)
    c.write(0, slots, torch.ones(0, 2, 8), torch.ones(0, 2, 8))
    assert snapshot(c) == before
    with pytest.raises(ValueError, match="slots"):
        c.write(0, torch.tensor([0, 0]), torch.ones(2, 2, 8), torch.ones(2, 2, 8))


def test_counting_models_refuse_sizes_they_could_not_step_through():
    with pytest.raises(ValueError, match="n="):
        io_model.standard_attention_io(2**20, 64, 3)
    with pytest.raises(ValueError, match="n="):
        io_model.flash_attention_io(2**40, 16, 4096)
    assert decode.naive_counts(2**40, 2**40)[0] > 0  # closed form: instant


def test_intensity_of_nothing_moved_is_refused():
    with pytest.raises(ValueError, match="bytes_moved"):
        _ = roofline.ForwardCost(1.0, 0.0).intensity
    with pytest.raises(ValueError, match="count"):
        io_model.attention_intensity(io_model.IOCount())


def test_sram_refuses_to_free_or_store_what_it_does_not_hold():
    s = sram()
    before = snapshot(s)
    for call in (s.free, s.store):
        with pytest.raises(ValueError, match="n=30"):
            call(30)
    assert snapshot(s) == before


def test_goodput_fraction_two_limit_form_names_slo():
    with pytest.raises(TypeError, match="slo"):
        metrics.goodput_fraction(rmetrics(), metrics.SLO(ttft=1.0), tpot=0.1)
    with pytest.raises(ValueError, match="slo"):
        metrics.goodput_fraction(rmetrics(), -1.0, tpot=0.1)


@pytest.mark.parametrize("argv", [["--tokens", "0"], ["--tokens", "99999"], ["--seed", "-1"],
                                  ["--tokens", "x"], ["--bogus"]])
def test_main_cli_refuses_bad_flags_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main.main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--target-steps", "-5"], ["--draft-steps", "0"], ["--batch", "0"],
                                  ["--only", "nope"]])
def test_tiny_lm_cli_refuses_bad_flags_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        tiny_lm.main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_a_rejected_simulator_call_changes_no_argument():
    reqs = requests()
    dep, before = copy.deepcopy(DEP), snapshot(reqs)
    for call in (lambda: sim.run_replicas(DEP, reqs, 0), lambda: sim.disaggregated(DEP, DEP, reqs, 1, HUGE),
                 lambda: DEP.run(reqs, num_blocks=0)):
        with pytest.raises((ValueError, TypeError)):
            call()
    assert snapshot(reqs) == before and DEP == dep


# --- sizes that could never finish: refused at once, not a hang, an overflow or a raw error --------

HUGE_CALLS = [
    ("BlockAllocator", lambda: blocks.BlockAllocator(HUGE, 4), "num_blocks"),
    ("bookkeeping_cache", lambda: sim.bookkeeping_cache(HUGE), "num_blocks"),
    ("PagedKVCache", lambda: paged.PagedKVCache(blocks.BlockAllocator(8, 4), HUGE, 2, 8), "n_layers"),
    ("KVCache", lambda: kv_cache.KVCache(2, 1, 2, HUGE, 8), "max_len"),
    ("ConcatKVCache", lambda: kv_cache.ConcatKVCache(HUGE), "n_layers"),
    ("ConcatKVCache.begin_step", lambda: kv_cache.ConcatKVCache(2).begin_step(0, HUGE), "n"),
    ("BlockManager.reserve", lambda: books().reserve(0, HUGE), "n"),
    ("PagedKVCache.append_slots", lambda: pcache().append_slots(0, HUGE), "n"),
    ("standard_attention_io", lambda: io_model.standard_attention_io(HUGE, 64, 4096), "n"),
    ("flash_attention_io", lambda: io_model.flash_attention_io(64, 16, HUGE // 2 + 1) and
     io_model.flash_attention_io(HUGE, 16, 4096), "n"),
    ("mixed_workload", lambda: workload.mixed_workload(HUGE, vocab=64), "n_requests"),
    ("fixed_workload", lambda: workload.fixed_workload(HUGE, 8, 4), "n_requests"),
    ("fixed_workload prompt", lambda: workload.fixed_workload(2, HUGE, 4), "prompt_tokens"),
    ("agent_workload", lambda: workload.agent_workload(n_conversations=HUGE), "n_conversations"),
    ("agent_workload turns", lambda: workload.agent_workload(n_conversations=10**4, turns=10**4), "turns"),
    ("split_round_robin", lambda: sim.split_round_robin(requests(), HUGE), "replicas"),
    ("run_replicas", lambda: sim.run_replicas(DEP, requests(), HUGE), "replicas"),
    ("disaggregated", lambda: sim.disaggregated(DEP, DEP, requests(), HUGE, 1), "n_prefill"),
    ("decode_step_time", lambda: cost_model.decode_step_time(model_preset("Llama-3.1-8B"), gpu_preset("H100 SXM"), 1, HUGE, 100), "batch"),
    ("decide_capacity max_gpus", lambda: capacity.decide_capacity(
        "Llama-3.1-8B", "H100 SXM", request_rate=1.0, prompt_tokens=64, output_tokens=8, ttft_p90_s=1.0,
        tpot_p90_s=0.1, max_gpus=HUGE), "max_gpus"),
    ("decide_capacity n_requests", lambda: capacity.decide_capacity(
        "Llama-3.1-8B", "H100 SXM", request_rate=1.0, prompt_tokens=64, output_tokens=8, ttft_p90_s=1.0,
        tpot_p90_s=0.1, n_requests=HUGE), "n_requests"),
    ("prompt_windows", lambda: tiny_lm.prompt_windows(HUGE, 8), "n"),
    ("tiny_lm.train", lambda: tiny_lm.train(CFG, torch.randint(0, 64, (200,)), HUGE, 2, 8), "steps"),
    ("decoding_report", lambda: main.decoding_report(HUGE, 0), "tokens"),
    ("replay", lambda: prefix_cache.replay([([1, 2], [3])], HUGE), "num_blocks"),
]


@pytest.mark.parametrize("call, arg", [pytest.param(c, a, id=n) for n, c, a in HUGE_CALLS])
def test_a_size_that_could_never_finish_is_refused_by_name(call, arg):
    with pytest.raises(ValueError) as info:
        call()
    assert arg in str(info.value), str(info.value)


def test_ceil_div_accepts_what_it_did_and_refuses_a_zero_divisor():
    assert arith.ceil_div(7, 2) == arith.ceil_div(np.int64(7), np.int32(2)) == 4
    assert arith.ceil_div(7.5, 2) == 4.0  # real numbers, as before (sizing passes none, callers may)
    with pytest.raises(ValueError, match="d must be > 0"):
        arith.ceil_div(7, 0)


def test_rates_of_nothing_are_refused_not_a_zero_division():
    with pytest.raises(ValueError, match="prompt_tokens"):
        _ = prefix_cache.ReplayStats(0, 0, 0, 0, 0).hit_rate
    with pytest.raises(ValueError, match="hit_tokens"):
        prefix_cache.ReplayStats(1, 5, 9, 0, 0)
    with pytest.raises(ValueError, match="rounds"):
        speculative.SpeculativeResult(torch.tensor([[1]])).tokens_per_target_pass()

    class Instant:
        name = "instant"

        def step_time(self, shapes):
            return 0.0

    result = sim.serve_simulated([R(0, (1, 2), 2)], Instant(), num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="makespan"):
        _ = result.throughput


def test_a_sequence_cannot_be_queued_twice():
    s = sched()
    seq = steploop.Sequence.from_request(R(0, (1,), 1))
    s.add(seq)
    before = snapshot(s)
    with pytest.raises(ValueError, match="already queued"):
        s.add(seq)
    with pytest.raises(ValueError, match="already queued"):
        s.add(steploop.Sequence.from_request(R(0, (5, 6), 1)))
    assert snapshot(s) == before


def test_duplicate_request_ids_are_refused_before_anything_runs():
    twins = [R(0, (1, 2), 2), R(0, (3, 4), 2)]
    for call in (lambda: sim.run_replicas(DEP, twins, 2), lambda: sim.disaggregated(DEP, DEP, twins, 1, 1),
                 lambda: sim.serve_simulated(twins, CM, num_blocks=16, block_size=4)):
        with pytest.raises(ValueError, match="request_ids"):
            call()


def test_paged_attention_refuses_mixed_dtypes_and_bad_step_tensors():
    kp, vp, q = torch.randn(8, 4, 2, 8), torch.randn(8, 4, 2, 8), torch.randn(2, 1, 8)
    for args in ((q.double(), kp, vp), (q, kp, vp.double()), (q.long(), kp.long(), vp.long())):
        with pytest.raises(TypeError, match="dtype"):
            paged.paged_attention(*args, [0, 1], 6)
    c = pcache()
    view = c.view(0)
    ctx = view.begin_step(5, 1)
    ok = torch.randn(1, 1, 2, 8)
    before = snapshot(c)
    for layer, q, k, name in ((5, ok, ok, "layer"), (0, "x", ok, "q"), (0, ok, torch.randn(1, 2, 2, 8), "k"),
                              (0, ok, torch.randn(1, 1, 3, 8), "k")):
        with pytest.raises((TypeError, ValueError), match=name):
            ctx.attend(layer, q, k, ok)
    with pytest.raises(TypeError, match="ctx"):
        view.end_step(None)
    assert snapshot(c) == before
    assert ctx.attend(0, ok, ok, ok).shape == ok.shape


def test_views_refuse_more_tokens_than_the_whole_pool_as_a_value_error():
    c = pcache()
    before = snapshot(c)
    with pytest.raises(ValueError, match="n="):
        c.view(0).begin_step(5, HUGE)
    assert snapshot(c) == before


@pytest.mark.parametrize("bad", ["x", None, 1.0, torch.ones(1, 2, 3), torch.ones(1, 2, 3, 8, dtype=torch.long)])
def test_concat_cache_update_checks_its_tensors(bad):
    c = kv_cache.ConcatKVCache(2)
    with pytest.raises((TypeError, ValueError), match="k_new"):
        c.update(0, bad, torch.ones(1, 2, 3, 8), 0)
    assert c.k[0] is None


def test_a_two_axis_prompt_is_refused_not_flattened():
    for prompt in ([[1, 2]], torch.tensor([[1, 2]]), np.ones((1, 2), dtype=int)):
        with pytest.raises(ValueError, match="prompt"):
            R(0, prompt, 2)
    assert R(0, torch.tensor([1, 2]), 2).prompt == (1, 2)


def test_prefix_cache_refuses_to_index_free_blocks():
    a = blocks.BlockAllocator(4, 4)
    pc = prefix_cache.PrefixCache(a)
    before = snapshot(pc)
    with pytest.raises(ValueError, match="free block"):
        pc.insert([1, 2, 3, 4], [2])
    assert snapshot(pc) == before


def test_capacity_plan_never_rests_on_a_burst_the_gpus_could_not_sustain():
    kw = dict(prompt_tokens=64, output_tokens=8, ttft_p90_s=1.0, tpot_p90_s=0.1, max_gpus=1, n_requests=20)
    huge = capacity.decide_capacity("Llama-3.1-8B", "H100 SXM", request_rate=1e300, **kw)
    assert huge.value is None and "no configuration" in huge.reason
    plan = capacity.decide_capacity("Llama-3.1-8B", "H100 SXM", request_rate=1e4, **kw).value
    dep = sim.Deployment("Llama-3.1-8B", "H100 SXM", 1, plan["max_num_seqs"])
    per_request = dep.cost_model().cost([(64 + 8 - 1, 0)]).compute_s
    assert 1e4 / plan["replicas"] * per_request <= 1  # the replicas' FLOP/s cover the rate


@pytest.mark.parametrize("call", [lambda r: workload.fixed_workload(3, 8, 4, rate=r),
                                  lambda r: workload.poisson_arrivals(requests(), r),
                                  lambda r: capacity.decide_capacity("Llama-3.1-8B", "H100 SXM", request_rate=r,
                                                                prompt_tokens=64, output_tokens=8, ttft_p90_s=1.0,
                                                                tpot_p90_s=0.1, max_gpus=1, n_requests=20)])
def test_a_rate_so_small_that_arrival_times_overflow_is_named(call):
    with pytest.raises(ValueError, match="rate"):
        call(1e-320)
