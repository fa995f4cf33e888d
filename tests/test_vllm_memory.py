"""vLLM's start-up budget (`inferbook.vllm_memory`): its terms, and one budget for every reader.

The planner (`rules.layout`), the simulator's deployments (`simulate.kv_blocks`), the log check
(`vllm_logs`) and the calculators all read `vllm_memory.vllm_memory_budget`; the agreement test
below builds plans on a grid and asserts they hold the same number of KV blocks.
"""

import math

import pytest
from inferbook import sizing, vllm_memory
from inferbook.hardware import gpu
from inferbook.sizing import weight_bytes
from inferbook.models import model as model_preset
from inferbook.hardware import gpu as gpu_preset


def test_vllm_budget_terms_are_stated():
    rt = vllm_memory.vllm_runtime_memory(model_preset("Llama-3.1-8B"), 1, max_num_batched_tokens=8192,
                                         max_num_seqs=1024)
    # 0.33.0: Model Runner V2's warm-up sampler pass (model-dtype logits + float32 copy +
    # FlashInfer's mask and softmax) or the forward pass, whichever peaks higher
    assert rt.activation_bytes >= 1024 * 128256 * 6
    # 0.33.0 deducts its CUDA-graph estimate before sizing the pool; 0.10 captured afterwards
    assert rt.cuda_graph_bytes == vllm_memory.vllm_cuda_graph_bytes(1) > 0
    assert "CUDA graphs 0.50 GiB" in rt.how
    old = vllm_memory.vllm_runtime_memory(model_preset("Llama-3.1-8B"), 1, max_num_batched_tokens=8192,
                                          max_num_seqs=1024, vllm_version="0.10.1")
    # 0.10 pip installs fell back to PyTorch's sort (m + 34 bytes per row x vocab)
    assert old.cuda_graph_bytes == 0 and old.activation_bytes > rt.activation_bytes
    b = vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), 1, max_num_batched_tokens=8192,
                                       max_num_seqs=1024)
    total = gpu("H100").memory_bytes
    assert b.usable_bytes == math.ceil(total * 0.92) and b.reserve_bytes == total - b.usable_bytes
    rope = vllm_memory.vllm_rope_cache_bytes(model_preset("Llama-3.1-8B"))
    assert b.weight_bytes == weight_bytes("Llama-3.1-8B") + rope
    assert b.available_kv_bytes == b.usable_bytes - b.weight_bytes - rt.total_bytes
    assert isinstance(b, sizing.MemoryBudget) and b.kv_budget_bytes == b.available_kv_bytes


def test_the_router_is_held_whole_on_every_rank():
    from inferbook.vllm_logs import log_model
    moe = log_model("Qwen/Qwen3-30B-A3B-Instruct-2507")
    router = moe.n_moe_layers * moe.n_routed_experts * moe.hidden_size * 2
    one = vllm_memory.vllm_replicated_bytes(moe, 1)
    two = vllm_memory.vllm_replicated_bytes(moe, 2)
    assert two - one == router - math.ceil(router / 2)


@pytest.mark.parametrize("version, path", [
    ("0.11.0", "sort"), ("0.16.0", "sort"), ("0.17.1", "triton"), ("0.19.1", "triton"),
    ("0.21.0", "flashinfer"), ("0.30.0", "v2"), ("0.33.0", "v2-warmup-flashinfer")])
def test_sampler_path_by_version(version, path):
    assert vllm_memory.vllm_sampler_path(model_preset("Llama-3.1-8B"), version, rows=256) == path


def test_few_rows_take_the_sort_even_where_triton_exists():
    assert vllm_memory.vllm_sampler_path(model_preset("Qwen2.5-7B"), "0.19.1", rows=4) == "sort"


@pytest.mark.parametrize("call, message", [
    (lambda: vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), 3, max_num_batched_tokens=8,
                                            max_num_seqs=1), "n_gpus"),
    (lambda: vllm_memory.vllm_sampler_bytes(model_preset("Llama-3.1-8B"), rows=0, max_num_batched_tokens=8),
     "rows"),
    (lambda: vllm_memory.vllm_sampler_path(model_preset("Llama-3.1-8B"), "0.19", flashinfer_sampler="yes"),
     "flashinfer_sampler"),
    (lambda: vllm_memory.vllm_runtime_memory(model_preset("Llama-3.1-8B"), max_num_batched_tokens=8,
                                             max_num_seqs=1, cuda_graphs=1), "cuda_graphs"),
    (lambda: vllm_memory.parse_version("latest"), "vllm_version"),
    (lambda: vllm_memory.vllm_cuda_graph_bytes(0), "n_gpus"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------------
# one budget: the planner, the simulator and the log check hold the same blocks

PLANS = [("Llama-3.1-8B", "H100", "chat"), ("Llama-3.1-8B", "L4", "chat"),
         ("Qwen2.5-14B", "A100 80GB", "rag"), ("Llama-3.1-70B", "4xH100", "chat"),
         ("Mistral-7B-v0.1", "L40S", "batch"), ("Qwen2.5-7B", "2xL4", "chat"),
         ("Llama-3.1-8B", "B200", "agent")]


def _blocks(spec, tp, budget_bytes, kv_dtype, tokens):
    return vllm_memory.vllm_kv_cache(spec, tp, available_bytes=budget_bytes,
                                     max_model_len=spec.max_position_embeddings,
                                     kv_dtype=kv_dtype, max_num_batched_tokens=tokens).num_blocks


@pytest.mark.parametrize("model, gpus, workload", PLANS)
def test_planner_simulator_and_log_check_read_one_budget(model, gpus, workload):
    from inferbook import recommend, simulate
    from inferbook.models import model as preset

    p = recommend.recommend(model, gpus, workload)
    spec, tp = preset(p.model), p.tensor_parallel
    caps = dict(max_num_batched_tokens=p.max_num_batched_tokens, max_num_seqs=p.max_num_seqs)
    assert p.pipeline_parallel == 1
    util = p.memory.usable_bytes / gpu(p.gpu).memory_bytes
    # the log check's budget: the same function, with the plan's inputs
    logged = vllm_memory.vllm_memory_budget(
        spec, gpu(p.gpu), tp, gpu_memory_utilization=p.gpu_memory_utilization,
        weight_dtype=p.weight_dtype, **caps)
    assert logged == p.memory
    assert util == pytest.approx(p.gpu_memory_utilization, abs=1e-9)
    plan_blocks = _blocks(spec, tp, p.memory.kv_budget_bytes, p.kv_dtype,
                          p.max_num_batched_tokens)
    sim_blocks = simulate.kv_blocks(spec, gpu(p.gpu), tp, 16, p.kv_dtype, p.weight_dtype,
                                    gpu_memory_utilization=p.gpu_memory_utilization, **caps)
    assert plan_blocks == sim_blocks == _blocks(spec, tp, logged.available_kv_bytes,
                                                p.kv_dtype, p.max_num_batched_tokens)


def test_llama_8b_on_one_h100_one_number():
    """Issue 34's case: 28,515 / 28,899 / 28,827 blocks before; one number now."""
    from inferbook import recommend, simulate
    p = recommend.recommend("Llama-3.1-8B", "H100", "chat")
    caps = dict(max_num_batched_tokens=p.max_num_batched_tokens, max_num_seqs=p.max_num_seqs)
    sim = simulate.kv_blocks(model_preset("Llama-3.1-8B"), gpu_preset("H100"), 1, 16, p.kv_dtype, p.weight_dtype,
                             gpu_memory_utilization=p.gpu_memory_utilization, **caps)
    plan = _blocks(model_spec("Llama-3.1-8B"), 1, p.memory.kv_budget_bytes, p.kv_dtype,
                   p.max_num_batched_tokens)
    assert sim == plan > 20_000


def model_spec(name):
    from inferbook.models import model
    return model(name)
