"""capacity.decide_capacity's `gpu_memory_utilization`: validated, passed to vLLM's budget
(each replica's KV pool), vLLM's default reproduces the plans made before it existed, and a
lower utilization never raises the capacity per GPU."""

from __future__ import annotations

import inspect
import math

import pytest

from inferbook import capacity, recommend, simulate, vllm_memory
from inferbook.decision import Decision
from inferbook.hardware import gpu
from inferbook.models import model

SPEC, H100 = model("Llama-3.1-8B"), gpu("H100 SXM")
# 20 requests/s of 1024 + 128 tokens on one H100 (TP 1): one replica at vLLM's default; at a
# quarter of the memory the KV pool holds a handful of requests and more replicas are needed
KW = dict(request_rate=20.0, prompt_tokens=1024, output_tokens=128, ttft_p90_s=1.0,
          tpot_p90_s=0.05, max_gpus=1, n_requests=32)
# the plan decide_capacity gave for KW before it took a utilization (commit 0038607)
BEFORE = {"tensor_parallel_size": 1, "replicas": 1, "max_num_seqs": 256,
          "p90_ttft_s": 0.1222972140819577, "p90_tpot_s": 0.016547024091040207}


def test_the_default_is_vllms_and_reproduces_the_plan_made_before():
    default = inspect.signature(capacity.decide_capacity).parameters["gpu_memory_utilization"]
    assert default.default == vllm_memory.DEFAULT_UTILIZATION == 0.92   # vLLM 0.33.0's
    assert simulate.Deployment(SPEC, H100).gpu_memory_utilization == vllm_memory.DEFAULT_UTILIZATION
    d = capacity.decide_capacity(SPEC, H100, **KW)
    assert d.value == BEFORE and d.extra == {"tried": [(1, 256, 1)]}
    assert "--gpu-memory-utilization" not in d.reason   # the default is not restated


def test_a_lower_utilization_never_raises_capacity_per_gpu():
    gpus = []
    for util in (vllm_memory.DEFAULT_UTILIZATION, 0.24, 0.22):
        d = capacity.decide_capacity("Llama-3.1-8B", "H100 SXM", gpu_memory_utilization=util, **KW)
        n = math.inf if d.value is None else d.value["replicas"] * d.value["tensor_parallel_size"]
        gpus.append(n)   # capacity per GPU = request_rate / n
        if util != vllm_memory.DEFAULT_UTILIZATION:
            assert f"--gpu-memory-utilization {util:g}" in d.reason
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0], gpus


@pytest.mark.parametrize("tp,seqs", [(1, 256), (2, 64), (4, 32)])
def test_the_kv_pool_shrinks_with_the_utilization(tp, seqs):
    """What the capacity search reads: each replica's blocks (vLLM's budget at the utilization)."""
    spec = model("Llama-3.1-70B") if tp > 1 else SPEC
    blocks = [simulate.Deployment(spec, H100, tp, seqs, gpu_memory_utilization=u).num_blocks()
              for u in (1.0, 0.92, 0.9, 0.6, 0.3, 0.05)]
    assert blocks == sorted(blocks, reverse=True) and blocks[0] > blocks[-1] == 0
    dep = simulate.Deployment(spec, H100, tp, seqs, gpu_memory_utilization=0.6)
    budget = vllm_memory.layout_budget(vllm_memory.EngineLayout(
        spec, H100, tp, 1, "fp16", dep.max_num_batched_tokens, seqs, 0.6))
    assert dep.num_blocks() == vllm_memory.vllm_kv_cache(
        spec, tp, available_bytes=max(0, budget.available_kv_bytes),
        max_model_len=spec.max_position_embeddings, kv_dtype="fp16",
        max_num_batched_tokens=dep.max_num_batched_tokens).num_blocks


@pytest.mark.parametrize("bad,error", [(0, ValueError), (0.0, ValueError), (1.5, ValueError),
                                       (-0.5, ValueError), (math.nan, ValueError),
                                       (math.inf, ValueError), ("0.9", TypeError),
                                       (True, TypeError), (None, TypeError)])
def test_a_bad_utilization_is_refused_by_name_before_any_simulation(bad, error):
    with pytest.raises(error, match="gpu_memory_utilization"):
        capacity.decide_capacity(SPEC, H100, gpu_memory_utilization=bad, **KW)
    with pytest.raises(error, match="gpu_memory_utilization"):
        simulate.Deployment(SPEC, H100, gpu_memory_utilization=bad)


def test_recommend_hands_its_utilization_to_the_capacity_search(monkeypatch):
    seen = {}

    def fake(spec, g, **kw):
        seen.update(kw, spec=spec, gpu=g)
        return Decision(None, "none meets the targets", "ch 9")

    monkeypatch.setattr(recommend, "decide_capacity", fake)
    out = recommend.recommend("Llama-3.1-8B", "H100", recommend.Workload("chat", output_tokens=128),
                              gpu_memory_utilization=0.8, request_rate=5.0, ttft_p90_s=1.0,
                              tpot_p90_s=0.05)
    assert isinstance(out, recommend.Refusal)
    assert seen["gpu_memory_utilization"] == 0.8
    assert seen["spec"] is SPEC and seen["gpu"] is H100   # resolved once, by recommend
