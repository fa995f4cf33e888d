"""No two modules answer the same question differently: the recommender's KV and weight bytes
and its memory budget are `inferbook.sizing`'s, for every preset model x GPU x context."""

import itertools

import pytest

from inferbook import sizing, vllm_memory
from inferbook.hardware import gpu
from inferbook.models import MODELS
from inferbook.recommend import Workload, recommend

GPUS = [("T4", 1), ("L4", 1), ("A100 80GB", 2), ("H100 SXM", 4), ("H200", 8), ("B200", 8)]
CONTEXTS = [4096, 32768]
GRID = list(itertools.product(sorted(MODELS), GPUS, CONTEXTS))


@pytest.mark.parametrize("name, gpus, ctx", GRID)
def test_recommend_uses_sizings_bytes(name, gpus, ctx):
    spec = MODELS[name]
    ctx = min(ctx, spec.max_position_embeddings)
    p = recommend(name, gpus, Workload("chat", context_tokens=ctx, typical_tokens=ctx // 2))
    if not p.ok:
        return
    lay = p.decision("parallelism").value["layout"]
    if lay.ep > 1:   # DP attention + EP: weights are not a TP split (test_recommend checks them)
        return
    tp, pp, g = p.tensor_parallel, p.pipeline_parallel, gpu(p.gpu)   # a plan names its GPU
    assert p.weight_bytes_total == sizing.weight_bytes(spec, p.weight_dtype)
    assert p.memory.weight_bytes == sizing.weight_bytes_per_gpu(
        spec, tp, p.weight_dtype, pipeline_parallel=pp) + vllm_memory.vllm_replicated_bytes(spec, tp)
    assert p.kv_bytes_per_sequence == sizing.kv_bytes_per_gpu(
        spec, tp, ctx, 1, p.kv_dtype, pipeline_parallel=pp,
        window_extra_tokens=lay.window_extra_tokens, block_size=16)
    assert p.kv_bytes_per_token == sizing.kv_bytes_per_gpu(spec, tp, 1, 1, p.kv_dtype,
                                                           pipeline_parallel=pp)
    runtime = vllm_memory.vllm_runtime_memory(
        spec, tp, max_num_batched_tokens=p.max_num_batched_tokens, max_num_seqs=p.max_num_seqs,
        gpu=g)
    budget = vllm_memory.vllm_memory_budget(
        spec, g, tp, gpu_memory_utilization=p.gpu_memory_utilization,
        weight_dtype=p.weight_dtype, max_num_batched_tokens=p.max_num_batched_tokens,
        max_num_seqs=p.max_num_seqs, pipeline_parallel=pp)
    assert budget.runtime == runtime
    assert p.memory == budget
    assert p.seqs_at_typical == sizing.sequences_that_fit(
        budget.kv_budget_bytes, spec, tp, ctx // 2, p.kv_dtype, pipeline_parallel=pp,
        window_extra_tokens=lay.window_extra_tokens, block_size=16)
    if pp == 1 and sizing.get_dtype(p.kv_dtype).name == p.kv_dtype:
        # sizing's own fit check agrees once given the same budget terms
        report = sizing.fits(spec, p.gpu, tp, ctx, 1, p.kv_dtype, p.weight_dtype,
                             1 - p.gpu_memory_utilization, runtime=runtime)
        assert report.weight_bytes_per_gpu + vllm_memory.vllm_replicated_bytes(spec, tp) == \
            p.memory.weight_bytes
        assert report.kv_bytes_per_gpu == sizing.kv_bytes_per_gpu(spec, tp, ctx, 1, p.kv_dtype)
        if spec.sliding_window is None:
            assert report.fits
