"""One vLLM memory budget: the recommender's plan, the simulator's deployment, capacity and the
log check all read `vllm_memory`, and agree with `vllm_memory.vllm_startup` on a grid of
(model, GPU, TP, utilization, context).

The book's KV calculators read it too: `vllm_fit` (chapter 2's widget, and the oracle the static
page is compared with in tests/test_book.py) on `vllm_memory_budget` at `vllm serve`'s default
limits, and the static page from terms the exporter takes from `vllm_memory`; the tests here
check that `vllm_fit`'s budget is `vllm_startup`'s and that the page's presets carry vLLM's terms.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from inferbook import capacity, recommend, rules, simulate, sizing, vllm_logs, vllm_memory
from inferbook.hardware import GPUS
from inferbook.models import MODELS
from inferbook.hardware import gpu as gpu_preset
from inferbook.models import model as model_preset

ROOT = Path(__file__).resolve().parents[1]

# (model, GPU, TP): dense GQA, sliding-window (Gemma-2), MLA, MoE, small and large cards
LAYOUTS = [
    ("Llama-3.1-8B", "H100 SXM", 1),
    ("Llama-3.1-70B", "H100 SXM", 4),
    ("Llama-3.1-70B", "A100 80GB", 8),
    ("Gemma-2-9B", "L4", 1),
    ("Mistral-7B-v0.1", "A10G", 1),
    ("Qwen2.5-14B", "H200", 2),
    ("DeepSeek-V2-Lite", "H100 SXM", 1),
    ("Mixtral-8x7B", "H100 SXM", 2),
]
UTILIZATIONS = (0.9, 0.92)
CONTEXTS = (4096, 32768)
GRID = [(m, g, tp, u, ctx) for m, g, tp in LAYOUTS for u in UTILIZATIONS for ctx in CONTEXTS]
WEIGHTS, KV = "bf16", "bf16"


def _layout(model, gpu, tp, util):
    req = rules.PlanRequest(tp, KV, "throughput", None, util)
    return rules.layout(MODELS[model], gpu_preset(gpu), tp, 1, WEIGHTS, req)


def _startup(model, gpu, tp, util, ctx, caps):
    spec = MODELS[model]
    return vllm_memory.vllm_startup(
        spec, gpu_preset(gpu), tp, max_model_len=min(ctx, spec.max_position_embeddings),
        gpu_memory_utilization=util, kv_dtype=KV, weight_dtype=WEIGHTS,
        max_num_batched_tokens=caps["max_num_batched_tokens"], max_num_seqs=caps["max_num_seqs"])


@pytest.mark.parametrize("model,gpu,tp,util,ctx", GRID)
def test_plan_simulator_and_startup_agree(model, gpu, tp, util, ctx):
    lay = _layout(model, gpu, tp, util)
    caps = lay.batching.value
    st = _startup(model, gpu, tp, util, ctx, caps)
    # the recommender's layout holds vLLM's budget, term by term
    assert lay.budget == st.budget
    # the simulator's pool is the same blocks
    blocks = simulate.kv_blocks(MODELS[model], gpu_preset(gpu), tp, 16, KV, WEIGHTS,
                                max_num_seqs=caps["max_num_seqs"],
                                max_num_batched_tokens=caps["max_num_batched_tokens"],
                                gpu_memory_utilization=util)
    assert blocks == st.kv_cache.num_blocks > 0
    # the plan's "requests that fit" is vLLM's logged maximum concurrency, rounded down
    assert lay.sequences(MODELS[model], ctx) == math.floor(st.max_concurrency)


@pytest.mark.parametrize("model,gpu,tp,ctx", [(m, g, tp, c) for m, g, tp in LAYOUTS
                                              for c in CONTEXTS + (131072,)])
def test_capacity_screens_with_the_simulators_budget(model, gpu, tp, ctx):
    """capacity tries a layout exactly when vLLM (at its default utilization) would start with
    max_model_len = the request's tokens, i.e. its maximum concurrency is >= 1."""
    spec = MODELS[model]
    ctx = min(ctx, spec.max_position_embeddings)
    for seqs, tokens in ((256, 8192), (32, 16384)):
        dep = simulate.Deployment(spec, gpu, tp, seqs, tokens, True, KV, WEIGHTS)
        assert dep.num_blocks() == simulate.kv_blocks(spec, dep.gpu, tp, 16, KV, WEIGHTS,
                                                      max_num_seqs=seqs,
                                                      max_num_batched_tokens=tokens)
        try:
            st = vllm_memory.vllm_startup(
                spec, dep.gpu, tp, max_model_len=ctx, kv_dtype=KV, weight_dtype=WEIGHTS,
                max_num_batched_tokens=tokens, max_num_seqs=seqs,
                gpu_memory_utilization=vllm_memory.DEFAULT_UTILIZATION)
        except ValueError:      # no memory for the cache at all
            assert not capacity.holds_one_request(dep, ctx)
            continue
        assert capacity.request_blocks(dep, ctx) == st.kv_cache.blocks_per_request
        assert capacity.holds_one_request(dep, ctx) == (st.max_concurrency >= 1)


def test_capacity_refuses_a_layout_the_budget_cannot_hold():
    """Llama-3.1-70B in bf16 on one H100: the weights alone exceed vLLM's budget, so capacity
    never simulates TP 1 and its plan (if any) is on more GPUs."""
    dep = simulate.Deployment(MODELS["Llama-3.1-70B"], "H100 SXM", 1, 32, 8192, True, KV, WEIGHTS)
    assert dep.num_blocks() == 0 and not capacity.holds_one_request(dep, 1)
    dep8 = simulate.Deployment(MODELS["Llama-3.1-8B"], "H100 SXM", 1, 256, 8192, True, KV, WEIGHTS)
    assert capacity.holds_one_request(dep8, 4096)
    # the full 128K context of Llama-3.1-8B takes 8,192 blocks: held, but not by a tenth of the pool
    small = dep8.num_blocks() // 10
    assert capacity.request_blocks(dep8, 131072) == 8192 > small


def test_capacity_bad_input_is_named():
    dep = simulate.Deployment(MODELS["Llama-3.1-8B"], "H100 SXM")
    with pytest.raises(ValueError, match="ctx_tokens"):
        capacity.request_blocks(dep, 0)
    with pytest.raises(TypeError, match="dep"):
        capacity.request_blocks("Llama-3.1-8B", 4096)


def test_recommend_llama_8b_on_one_h100_reads_the_one_budget():
    plan = recommend.recommend("Llama-3.1-8B", "1xH100", "chat")
    assert isinstance(plan, recommend.Plan) and plan.tensor_parallel == 1
    st = vllm_memory.vllm_startup(
        model_preset("Llama-3.1-8B"), gpu_preset("H100 SXM"), 1, max_model_len=plan.max_model_len,
        gpu_memory_utilization=plan.gpu_memory_utilization, kv_dtype=plan.kv_dtype,
        weight_dtype=plan.weight_dtype, max_num_batched_tokens=plan.max_num_batched_tokens,
        max_num_seqs=plan.max_num_seqs)
    assert plan.memory == st.budget
    assert plan.seqs_at_full_context == math.floor(st.max_concurrency)
    blocks = simulate.kv_blocks(MODELS["Llama-3.1-8B"], gpu_preset("H100 SXM"), 1, 16, plan.kv_dtype,
                                plan.weight_dtype, max_num_seqs=plan.max_num_seqs,
                                max_num_batched_tokens=plan.max_num_batched_tokens,
                                gpu_memory_utilization=plan.gpu_memory_utilization)
    assert blocks == st.kv_cache.num_blocks


def _record(i, model, gpu, tp, util, ctx, caps):
    return {"id": f"grid-{i}", "url": f"https://example.invalid/grid/{i}.log",
            "vllm_version": vllm_memory.VLLM_PINNED, "model": model, "model_config": model,
            "gpu": gpu, "gpu_total_gib": None, "tensor_parallel_size": tp,
            "pipeline_parallel_size": 1, "multi_node": False, "dtype": KV,
            "kv_cache_dtype": "auto", "weight_dtype": WEIGHTS, "gpu_memory_utilization": util,
            "max_model_len": min(ctx, MODELS[model].max_position_embeddings),
            "max_num_batched_tokens": caps["max_num_batched_tokens"],
            "max_num_seqs": caps["max_num_seqs"], "block_size": 16, "enforce_eager": False,
            "flashinfer_sampler": None, "text_only": True, "exclude": None, "note": "",
            "logged": {"weights_gib": None, "activation_gib": None, "non_torch_gib": None,
                       "cuda_graph_gib": None, "available_kv_gib": None, "kv_tokens": 1,
                       "num_blocks": None, "max_concurrency": None},
            "excerpt": []}


def test_log_check_predicts_the_same_startup(tmp_path):
    """The log check's end-to-end prediction for a record of each grid point is the budget and
    the token count vllm_startup gives (the planner's and the simulator's budget)."""
    recs, expected = [], []
    for i, (m, g, tp, u, ctx) in enumerate(GRID):
        caps = _layout(m, g, tp, u).batching.value
        recs.append(_record(i, m, g, tp, u, ctx, caps))
        expected.append(_startup(m, g, tp, u, ctx, caps))
    path = tmp_path / "grid_logs.json"
    path.write_text(json.dumps({"records": recs}))
    rows = vllm_logs.vllm_log_table(path)
    assert len(rows) == len(GRID)
    for row, st in zip(rows, expected):
        assert row.predicted_available_gib * vllm_memory.GiB == pytest.approx(
            st.budget.available_kv_bytes, abs=1)
        assert row.tokens_end_to_end == st.kv_tokens
        assert row.concurrency_end_to_end == st.max_concurrency


def _export():
    spec = importlib.util.spec_from_file_location("export_presets", ROOT / "tools" / "export_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("model,gpu,tp,util,ctx", GRID)
def test_calculator_budget_is_the_one_budget(model, gpu, tp, util, ctx):
    """The static calculator's budget, computed as its JS does from the exported presets
    (ceil(total x u) - weights - replicated - runtime), and `vllm_fit`'s equal vLLM's start-up
    budget at `vllm serve`'s default limits."""
    from inferbook.vllm_fit import vllm_fit

    P = _export().presets()
    spec, g = MODELS[model], GPUS[gpu]
    tokens, seqs = vllm_memory.vllm_default_caps(g)
    st = vllm_memory.vllm_startup(spec, g, tp, max_model_len=min(ctx, spec.max_position_embeddings),
                                  gpu_memory_utilization=util, kv_dtype=KV, weight_dtype=WEIGHTS,
                                  max_num_batched_tokens=tokens, max_num_seqs=seqs)
    js_budget = (math.ceil(round(P["gpus"][gpu]["memory_bytes"] * util, 6))
                 - sizing.weight_bytes_per_gpu(spec, tp, WEIGHTS)
                 - P["vllm"]["replicated_bytes"][model][str(tp)]
                 - P["vllm"]["runtime_bytes"][model][gpu][str(tp)])
    fit = vllm_fit(spec, g, tp, ctx, 1, KV, WEIGHTS, util)
    assert js_budget == fit.kv_budget_bytes == st.budget.available_kv_bytes


def test_calculator_says_it_is_vllms_budget():
    """The page says which budget it computes, visibly, above its fields."""
    js = (ROOT / "book" / "calculators" / "kv_calculator.js").read_text()
    assert 'root.dataset.budget = "vllm"' in js and "start-up budget" in js
    assert 'el("p", {class: "ib-budget-note"}, [budgetNote(P)])' in js
    css = (ROOT / "book" / "calculators" / "calculators.css").read_text()
    assert ".ib-budget-note" in css and "display: none" not in css.split(".ib-budget-note", 1)[1].split("}")[0]


@pytest.mark.parametrize("model,gpu,tp,util,ctx", GRID[::4])
def test_calculator_presets_feed_the_same_inputs(model, gpu, tp, util, ctx):
    """What the calculator starts from is what the one budget starts from: the GPU's CUDA total,
    the model's weights at the dtype and its KV bytes per token."""
    P = _export().presets()
    spec, g = MODELS[model], GPUS[gpu]
    st = _startup(model, gpu, tp, util, ctx, _layout(model, gpu, tp, util).batching.value)
    assert P["gpus"][gpu]["memory_bytes"] == g.memory_bytes == st.budget.gpu_bytes
    assert st.budget.usable_bytes == math.ceil(round(P["gpus"][gpu]["memory_bytes"] * util, 6))
    m = P["models"][model]
    assert m["n_params"] == spec.n_params
    assert m["num_key_value_heads"] == spec.num_key_value_heads
    assert m["head_dim"] == spec.head_dim and m["num_hidden_layers"] == spec.num_hidden_layers
    assert sizing.weight_bytes_per_gpu(spec, tp, WEIGHTS) <= st.budget.weight_bytes
