"""vLLM's start-up accounting against real start-up logs (inferbook/data/vllm_logs.json).

The data are public log excerpts (GitHub issues, committed log files), each with its URL; the
predictions come from `inferbook.sizing` alone. `pytest -s` prints the table.
"""

import json
import math
import re

import pytest

from inferbook import sizing, vllm_logs, vllm_memory
from inferbook.hardware import GPUS
from inferbook.models import MODELS, ModelSpec
from inferbook.vllm_memory import parse_version
from inferbook.models import model as model_preset
from inferbook.hardware import gpu as gpu_preset

GiB = 2**30
ROWS = vllm_logs.vllm_log_table()
RECORDS = vllm_logs.records()


def test_at_least_30_real_records_with_every_field():
    assert len(RECORDS) >= 30
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids))
    for r in RECORDS:
        assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|blob)/", r["url"]), r["id"]
        parse_version(r["vllm_version"])                              # parses
        for key in ("model", "tensor_parallel_size", "pipeline_parallel_size", "dtype",
                    "kv_cache_dtype", "max_model_len", "gpu_memory_utilization", "gpu"):
            assert key in r, (r["id"], key)
        assert r["logged"]["kv_tokens"] > 0 and r["excerpt"], r["id"]
        # the printed token count is in the excerpt, as printed
        assert any(f"{r['logged']['kv_tokens']:,}" in line or str(r["logged"]["kv_tokens"]) in line
                   or str(r["logged"].get("num_blocks")) in line for line in r["excerpt"]), r["id"]
        if r.get("model_config"):
            vllm_logs.log_model(r["model_config"])               # every config resolves


def test_records_are_self_consistent_where_the_log_prints_the_concurrency():
    """Logged concurrency = logged tokens / max_model_len where vLLM derived one from the other."""
    for r in RECORDS:
        conc, tokens = r["logged"]["max_concurrency"], r["logged"]["kv_tokens"]
        text_full = r.get("model_config") and not log_has_windows(r)
        if conc is not None and text_full and r["max_model_len"] % 16 == 0:
            assert tokens / r["max_model_len"] == pytest.approx(conc, abs=0.006), r["id"]


def log_has_windows(r):
    return any(w is not None for w in vllm_logs.log_model(r["model_config"]).layer_windows)


def _stats(key, **kw):
    st = vllm_logs.summary(ROWS, **kw)[key]
    return st["n"], st["median"], st["p90"]


def test_print_the_table(capsys):
    with capsys.disabled():
        print()
        print(vllm_logs.format_table(ROWS))
        print("in sample (constants read from these, or in the development set):")
        print(json.dumps(vllm_logs.summary(ROWS, in_sample=True), indent=1))
        print("held out (chosen by the URL's hash; nothing read from them):")
        print(json.dumps(vllm_logs.summary(ROWS, held_out=True), indent=1))


@pytest.mark.parametrize("key", ["error_from_available", "concurrency_error_from_available"])
def test_kv_tokens_and_concurrency_from_the_logged_memory(key):
    """Bytes per token, the hybrid allocator's groups and the block rounding, isolated."""
    n, median, p90 = _stats(key)
    assert n >= 25
    assert median <= 0.02 and p90 <= 0.05, (median, p90)


@pytest.mark.parametrize("key", ["error_end_to_end", "concurrency_error_end_to_end"])
def test_kv_tokens_and_concurrency_end_to_end(key):
    """From the config, the GPU's CUDA total and the utilization alone (every term modelled),
    on the V1 engine's logs (V0's are left out with the reason in vllm_logs.V0_END_TO_END, pools
    under 4 GiB with vllm_logs.SMALL_POOL): issue 20's target, median |error| <= 2 % and 90th
    percentile <= 5 %, in sample (`vllm_logs.FIT_RECORDS` and the development set) and on the
    held-out records (chosen by the URL's hash before any error was looked at), apart."""
    n, median, p90 = _stats(key)
    assert n >= 17
    n_in, median_in, p90_in = _stats(key, in_sample=True)
    n_held, median, p90 = _stats(key, held_out=True)
    assert n_in + n_held == n and n_held >= 10                  # a held-out set, reported apart
    assert median_in <= 0.02 and p90_in <= 0.05, (median_in, p90_in)
    assert median <= 0.02 and p90 <= 0.05, (median, p90)


def test_small_pools_are_predicted_shown_and_left_out_with_the_reason():
    """Pools under 4 GiB: the +-0.2 GiB spread of the profiled non-KV terms is over 5 % of them.
    They are still predicted end to end (the table shows the error); with them, the 90th
    percentile over every V1 record is 7.2 % (21 records; held to 10 % here)."""
    small = [r for r in ROWS if r.logged_available_gib is not None
             and r.logged_available_gib < vllm_logs.SMALL_POOL_GIB and r.tokens_end_to_end]
    assert len(small) >= 2
    assert all(r.excluded and "4 GiB" in r.excluded for r in small)
    errs = [abs(r.error_end_to_end) for r in ROWS
            if r.text_only and r.error_end_to_end is not None]
    assert len(errs) == _stats("error_end_to_end")[0] + len(small)
    assert vllm_logs._quantile(errs, 0.5) <= 0.02 and vllm_logs._quantile(errs, 0.9) <= 0.10


def test_weights_include_the_rotary_cache_as_model_loading_took_does():
    """`RotaryEmbedding` registers max_position x rotary_dim 16-bit values while the model loads,
    so "Model loading took" is the parameters plus that cache: to the printed digit for
    unquantized Llama-3.1-8B, Qwen3-14B and Qwen3-30B-A3B."""
    exact = {"abinavchandar-llama31-8b-l4", "zyfjrx-qwen3-14b-a100",
             "kolyangg-qwen3-30b-a3b-h100", "vediosifter-qwen3-30b-a3b-rtxpro6000"}
    rows = [r for r in ROWS if r.id in exact]
    assert len(rows) == len(exact)
    for r in rows:
        assert abs(r.predicted_weights_gib - r.logged_weights_gib) < 0.002, r.id
    spec = MODELS["Llama-3.1-8B"]
    assert vllm_memory.vllm_rope_cache_bytes(spec) == 131072 * 128 * 2
    b = vllm_memory.vllm_memory_budget(spec, gpu_preset("L4"), 1, max_num_batched_tokens=2048, max_num_seqs=128)
    assert b.weight_bytes == sizing.weight_bytes_per_gpu(spec, 1) + 131072 * 128 * 2
    # without the cache the prediction misses the log by the cache's 0.031 GiB
    l4 = next(r for r in rows if r.id == "abinavchandar-llama31-8b-l4")
    assert l4.logged_weights_gib - sizing.weight_bytes_per_gpu(spec, 1) / GiB > 0.03


def test_v0_logs_are_excluded_from_end_to_end_with_the_reason():
    v0 = [r for r in ROWS if parse_version(r.vllm_version) < (0, 8, 0)]
    assert len(v0) >= 5
    assert all(r.tokens_end_to_end is None and r.excluded for r in v0)
    assert all(r.error_from_available is not None for r in v0 if r.text_only and
               r.logged_available_gib is not None and "not modelled" not in (r.excluded or ""))


def test_end_to_end_on_the_v1_engine_large_pools():
    """Where the pool is large (>= 10 GiB) and the engine is V1, end to end is within 4 % on
    every in-sample record (held-out ones are judged only by their median and p90 above)."""
    big = [r for r in ROWS if r.error_end_to_end is not None and parse_version(r.vllm_version) >= (0, 8, 0)
           and r.logged_available_gib and r.logged_available_gib >= 10 and r.fit]
    assert len(big) >= 5
    assert max(abs(r.error_end_to_end) for r in big) <= 0.04


def test_the_check_can_fail():
    """A model without the hybrid allocator's groups, or 80e9-byte GPUs, misses the logs."""
    gpt = next(r for r in RECORDS if r["model_config"] == "openai/gpt-oss-120b")
    spec = vllm_logs.log_model(gpt["model_config"])
    flat = vllm_memory.vllm_kv_cache(spec, 4, available_bytes=int(gpt["logged"]["available_kv_gib"] * GiB),
                                max_model_len=gpt["max_model_len"], vllm_version="0.9.2")
    # without the groups the token count is the same, but the sliding layers would hold every
    # token, so the concurrency vLLM logged (284x) would be 161x
    assert abs(flat.max_concurrency / gpt["logged"]["max_concurrency"] - 1) > 0.4
    r = next(r for r in RECORDS if r["id"] == "dennislee22-qwen2-7b-tp1-0.5")
    spec = vllm_logs.log_model(r["model_config"])
    marketing = GPUS["A100 80GB"].__class__(**{**GPUS["A100 80GB"].__dict__, "cuda_total_bytes": 0})
    b = vllm_memory.vllm_memory_budget(spec, marketing, 1, gpu_memory_utilization=0.5,
                                  max_num_batched_tokens=2048, max_num_seqs=256,
                                  vllm_version="0.10.1.1", flashinfer_sampler=True)
    assert b.available_kv_bytes / GiB < r["logged"]["available_kv_gib"] - 1   # 80e9 undersizes


# --- the rules, one by one ----------------------------------------------------------------------

def test_block_rounding_is_floor_of_available_over_a_block_of_all_layers():
    spec = MODELS["Llama-3.1-8B"]
    per_block = 16 * 32 * 2 * 8 * 128 * 2
    c = vllm_memory.vllm_kv_cache(spec, 1, available_bytes=10 * per_block - 1, max_model_len=4096)
    assert c.num_blocks == 9 and c.bytes_per_block == per_block and c.num_groups == 1
    assert c.blocks_per_request == 4096 // 16
    assert c.kv_tokens == int(9 / 256 * 4096) == 144 and c.max_concurrency == 9 / 256


def test_sliding_window_blocks_follow_vllm_rule():
    """cdiv(min(window - 1 + in-flight, max_model_len), block) + 1 (the window need not start at a
    block boundary): one block more than min(window, ctx) / block."""
    m = MODELS["Mistral-7B-v0.1"]                     # every layer slides, window 4096
    c = vllm_memory.vllm_kv_cache(m, 1, available_bytes=10**11, max_model_len=32768,
                             max_num_batched_tokens=2048)
    assert c.blocks_per_request == math.ceil((4096 - 1 + 2 * 2048) / 16) + 1   # 0.33: 2 batches
    old = vllm_memory.vllm_kv_cache(m, 1, available_bytes=10**11, max_model_len=32768,
                               max_num_batched_tokens=2048, vllm_version="0.10.1")
    assert old.blocks_per_request == math.ceil((4096 - 1 + 2048) / 16) + 1     # one batch
    tokens_held = sizing.kv_bytes_per_gpu(m, 1, 32768, 1, block_size=16,
                                          window_extra_tokens=2 * 2048) // (32 * 2 * 8 * 128 * 2)
    assert tokens_held == 16 * c.blocks_per_request
    short = sizing.kv_bytes_per_gpu(m, 1, 100, 1, block_size=16)
    assert short == 32 * 2 * 8 * 128 * 2 * 16 * (math.ceil(100 / 16) + 1)


def test_hybrid_groups_gemma_and_gpt_oss():
    gemma2 = MODELS["Gemma-2-9B"]                      # 21 sliding + 21 full
    c = vllm_memory.vllm_kv_cache(gemma2, 1, available_bytes=10 * GiB, max_model_len=8192)
    assert (c.num_groups, c.layers_per_group) == (2, 21)
    assert c.bytes_per_block == 21 * 16 * 2 * 8 * 256 * 2
    gemma3 = ModelSpec.from_hf_config({
        "model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
        "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
        "sliding_window": 1024, "sliding_window_pattern": 6})
    c3 = vllm_memory.vllm_kv_cache(gemma3, 1, available_bytes=10 * GiB, max_model_len=131072)
    assert (c3.num_groups, c3.layers_per_group) == (6, 8)          # 40 sliding / 8 + 8 full / 8
    per_request = 8192 + 5 * (math.ceil((1024 - 1 + 2 * 2048) / 16) + 1)
    assert c3.blocks_per_request == per_request
    assert c3.kv_tokens == int(c3.num_blocks / per_request * 131072)
    # without the hybrid allocator every layer is full attention
    flat = vllm_memory.vllm_kv_cache(gemma3, 1, available_bytes=10 * GiB, max_model_len=131072,
                                hybrid_kv_cache_manager=False)
    assert flat.num_groups == 1 and flat.kv_tokens < c3.kv_tokens / 4


def test_mla_latent_is_not_split_and_fp8_halves_it():
    ds = MODELS["DeepSeek-V3"]
    a = vllm_memory.vllm_kv_cache(ds, 8, available_bytes=20 * GiB, max_model_len=32768)
    b = vllm_memory.vllm_kv_cache(ds, 8, available_bytes=20 * GiB, max_model_len=32768, kv_dtype="fp8")
    assert a.bytes_per_block == 61 * 16 * (512 + 64) * 2
    assert b.num_blocks in (2 * a.num_blocks, 2 * a.num_blocks + 1)


def test_version_rules_for_the_token_count():
    spec = MODELS["Llama-3.1-8B"]
    kw = dict(available_bytes=1000 * 16 * 131072, max_model_len=4000)
    assert vllm_memory.vllm_kv_cache(spec, 1, **kw, vllm_version="0.10.0").kv_tokens == 1000 * 16
    new = vllm_memory.vllm_kv_cache(spec, 1, **kw)                       # 0.33: concurrency x len
    assert new.kv_tokens == int(1000 / 250 * 4000) == 16000
    assert vllm_memory.vllm_kv_cache(spec, 1, **kw, vllm_version="0.6.4").kv_tokens == 16000
    odd = vllm_memory.vllm_kv_cache(spec, 1, available_bytes=1000 * 16 * 131072, max_model_len=4001)
    assert odd.kv_tokens == int(1000 / 251 * 4001) < 16000


def test_cuda_graphs_are_deducted_from_0_21_only():
    kw = dict(max_num_batched_tokens=2048, max_num_seqs=256, gpu_memory_utilization=0.9)
    new = vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("L40S"), **kw, vllm_version="0.21.0")
    old = vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("L40S"), **kw, vllm_version="0.20.0",
                                    flashinfer_sampler=True)
    assert new.runtime.cuda_graph_bytes > 0 and old.runtime.cuda_graph_bytes == 0
    assert old.available_kv_bytes - new.available_kv_bytes == vllm_memory.vllm_cuda_graph_bytes(1)
    eager = vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("L40S"), **kw, cuda_graphs=False,
                                      vllm_version="0.21.0")
    assert eager.available_kv_bytes == old.available_kv_bytes
    assert vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("L40S"), **kw).runtime.cuda_graph_bytes  # 0.33


def test_terms_grow_as_vllm_says():
    kw = dict(max_num_batched_tokens=8192, max_num_seqs=1024)
    dense = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), 1, max_num_batched_tokens=16384,
                                         max_num_seqs=1)
    moe = vllm_memory.vllm_activation_bytes(model_preset("Mixtral-8x7B"), 1, max_num_batched_tokens=16384,
                                       max_num_seqs=1)
    assert moe > dense                                             # MoE peaks higher
    assert vllm_memory.vllm_non_torch_bytes(4) > vllm_memory.vllm_non_torch_bytes(2) > \
        vllm_memory.vllm_non_torch_bytes(1)
    # the sampler by path (vllm_memory.SAMPLER_EXTRA_BYTES): PyTorch's sort (0.16) costs about
    # 2.5x the Triton top-k/top-p path (0.17-0.20) and FlashInfer's (0.21+)
    sort = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **kw, vllm_version="0.16.0")
    tri = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **kw, vllm_version="0.19.1")
    fi = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **kw, vllm_version="0.21.0",
                                           flashinfer_sampler=True)
    assert sort > 2.5 * fi and tri > fi
    # 0.33's Model Runner V2 profiles the warm-up pass: model-dtype logits + float32 copy +
    # FlashInfer's mask and softmax (at least 6 bytes per row x vocab); 0.30's V2 only the logits
    rows = dict(max_num_batched_tokens=1024, max_num_seqs=1024)     # the sampler dominates
    v2 = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **rows)
    assert v2 == 1024 * 128256 * (2 + 12) + 1024 * 4096 * 2
    assert v2 >= 1024 * 128256 * 6
    v2_030 = vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **rows, vllm_version="0.30.0")
    assert v2_030 < v2 / 3
    assert vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), **rows, flashinfer_sampler=False) \
        == 1024 * 128256 * (2 + 8) + 1024 * 4096 * 2


def test_model_runner_v2_defaults_by_version():
    """config/vllm.py of each wheel: none before 0.22; Llama/Mistral/Qwen3 dense from 0.23;
    every dense model from 0.25; Qwen3-MoE and Mixtral only from 0.29; the logs agree (0.23.0
    Llama-3.2-1B prints "Using V2 Model Runner", 0.26.1 Qwen3-Coder-30B-A3B runs
    gpu_model_runner.py, 0.30.0 Qwen2.5-3B-AWQ prints "Using V2 Model Runner")."""
    def run(spec, version):   # names resolved here, once: vllm_model_runner takes a ModelSpec
        return vllm_memory.vllm_model_runner(
            model_preset(spec) if isinstance(spec, str) else spec, version)
    assert [run("Llama-3.1-8B", v) for v in ("0.21.0", "0.22.0", "0.23.0", "0.33.0")] == \
        ["v1", "v1", "v2", "v2"]
    assert run("Qwen2.5-7B", "0.23.0") == "v1" and run("Qwen2.5-7B", "0.25.0") == "v2"
    assert run("Mixtral-8x7B", "0.28.0") == "v1" and run("Mixtral-8x7B", "0.29.0") == "v2"
    assert run("DeepSeek-V2-Lite", "0.24.0") == "v2" and run("DeepSeek-V3", "0.28.0") == "v1"
    qwen3_moe = vllm_logs.log_model("Qwen/Qwen3-30B-A3B-Instruct-2507")
    assert run(qwen3_moe, "0.26.1") == "v1" and run(qwen3_moe, "0.33.0") == "v2"
    awq = vllm_logs.log_model("Qwen/Qwen2.5-3B-Instruct-AWQ")
    assert run(awq, "0.30.0") == "v2"
    assert run(vllm_logs.log_model("meta-llama/Llama-3.2-1B-Instruct"), "0.23.0") == "v2"
    # 0.30's V2 sampler profiles only the model-dtype logits; 0.26.1's V1 runner FlashInfer's
    kw = dict(max_num_batched_tokens=256, max_num_seqs=256)
    assert vllm_memory.vllm_activation_bytes(qwen3_moe, **kw, vllm_version="0.26.1") > \
        2 * vllm_memory.vllm_activation_bytes(qwen3_moe, **kw, vllm_version="0.30.0")


def test_vllm_startup_end_to_end_and_its_refusal():
    s = vllm_memory.vllm_startup(model_preset("Llama-3.1-8B"), gpu_preset("H100"), 1, max_model_len=8192)
    assert s.max_num_batched_tokens == 8192 and s.max_num_seqs == 1024        # H100 defaults
    assert s.budget.usable_bytes == math.ceil(GPUS["H100 SXM"].memory_bytes * 0.92)
    assert s.kv_tokens == s.kv_cache.kv_tokens and s.max_concurrency > 40
    assert vllm_memory.vllm_default_caps(gpu_preset("A100 80GB")) == (2048, 256)
    assert vllm_memory.vllm_default_caps(gpu_preset("B200")) == (16384, 1024)
    with pytest.raises(ValueError, match="gpu_memory_utilization.*No available memory"):
        vllm_memory.vllm_startup(model_preset("Llama-3.1-70B"), gpu_preset("H100"), 1)


@pytest.mark.parametrize("call, error, message", [
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=-1, max_model_len=10),
     ValueError, "available_bytes"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=0),
     ValueError, "max_model_len"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=8,
                                  block_size=0), ValueError, "block_size"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=8,
                                  vllm_version="latest"), ValueError, "vllm_version"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=8,
                                  vllm_version=0.33), TypeError, "vllm_version"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=8,
                                  hybrid_kv_cache_manager="yes"), TypeError,
     "hybrid_kv_cache_manager"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 3, available_bytes=GiB, max_model_len=8),
     ValueError, "n_gpus"),
    (lambda: vllm_memory.vllm_kv_cache(model_preset("Llama-3.1-8B"), 1, available_bytes=GiB, max_model_len=8,
                                  kv_dtype="fp5"), ValueError, "kv_dtype"),
    (lambda: vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), gpu_memory_utilization=1.5,
                                       max_num_batched_tokens=8, max_num_seqs=1),
     ValueError, "gpu_memory_utilization"),
    (lambda: vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), max_num_batched_tokens=8,
                                       max_num_seqs=1, weight_bytes=-5), ValueError,
     "weight_bytes"),
    (lambda: vllm_memory.vllm_memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), max_num_batched_tokens=8,
                                       max_num_seqs=1, cuda_graphs=1), TypeError, "cuda_graphs"),
    (lambda: vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), max_num_batched_tokens=8,
                                          max_num_seqs=0), ValueError, "max_num_seqs"),
    (lambda: vllm_memory.vllm_activation_bytes(model_preset("Llama-3.1-8B"), max_num_batched_tokens=8,
                                          max_num_seqs=1, flashinfer_sampler="on"), TypeError,
     "flashinfer_sampler"),
    (lambda: vllm_memory.vllm_startup(model_preset("Llama-3.1-8B"), gpu_preset("H100"), max_model_len=-4), ValueError,
     "max_model_len"),
    (lambda: vllm_memory.vllm_non_torch_bytes(0), ValueError, "n_gpus"),
    (lambda: vllm_memory.vllm_default_caps(gpu_preset("H100"), max_model_len=0, vllm_version="0.6.0"),
     ValueError, "max_model_len"),
    (lambda: vllm_logs.log_model("no-such-model"), ValueError, "key"),
    (lambda: vllm_logs.records(path=5), TypeError, "path"),
    (lambda: vllm_logs.records(path="/nonexistent.json"), ValueError, "path"),
    (lambda: vllm_logs.summary(["row"]), TypeError, "rows"),
    (lambda: vllm_logs.format_table("rows"), TypeError, "rows"),
    (lambda: vllm_logs.summary(held_out="yes"), TypeError, "held_out"),
    (lambda: vllm_memory.vllm_model_runner(model_preset("Llama-3.1-8B"), "0.x"), ValueError, "vllm_version"),
    (lambda: vllm_memory.vllm_rope_cache_bytes(model_preset("no-such-model")), ValueError, "no-such-model"),
    (lambda: ModelSpec.from_hf_config({}, name=3), TypeError, "name"),
])
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()
