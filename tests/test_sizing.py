"""Sizing: bytes per token against hand computations, the lesson's corrected examples, fits."""

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook import sizing, vllm_memory
from inferbook.hardware import GPUS, gpu
from inferbook.models import MODELS, model
from inferbook.sizing import (
    DTYPES, fits, kv_bytes, kv_bytes_per_gpu, kv_bytes_per_token, kv_bytes_per_token_per_layer,
    max_batch, max_context, mha_kv_bytes_per_token_per_layer, min_tp_degree, tp_problem,
    valid_tp_degrees, weight_bytes, with_kv_heads,
)
from inferbook.models import model as model_preset
from inferbook.hardware import gpu as gpu_preset

ROOT = Path(__file__).resolve().parent.parent

# bf16 bytes per token over all layers, by hand: layers x (K + V) x KV heads x head_dim x 2 bytes;
# MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes.
HAND_BF16_PER_TOKEN = {
    "Llama-2-7B": 32 * 2 * 32 * 128 * 2,
    "Llama-3.1-8B": 32 * 2 * 8 * 128 * 2,
    "Llama-3.1-70B": 80 * 2 * 8 * 128 * 2,
    "Llama-3.1-405B": 126 * 2 * 8 * 128 * 2,
    "Mistral-7B-v0.1": 32 * 2 * 8 * 128 * 2,
    "Mixtral-8x7B": 32 * 2 * 8 * 128 * 2,
    "Qwen2.5-7B": 28 * 2 * 4 * 128 * 2,
    "Qwen2.5-14B": 48 * 2 * 8 * 128 * 2,
    "Qwen2.5-72B": 80 * 2 * 8 * 128 * 2,
    "Gemma-2-9B": 42 * 2 * 8 * 256 * 2,
    "DeepSeek-V2-Lite": 27 * (512 + 64) * 2,
    "DeepSeek-V3": 61 * (512 + 64) * 2,
}


@pytest.mark.parametrize("name", HAND_BF16_PER_TOKEN)
def test_bytes_per_token_by_hand(name):
    assert kv_bytes_per_token(MODELS[name]) == HAND_BF16_PER_TOKEN[name]
    assert kv_bytes_per_token(name, "fp32") == 2 * HAND_BF16_PER_TOKEN[name]
    assert kv_bytes_per_token(name, "fp8") == HAND_BF16_PER_TOKEN[name] // 2


def test_scale_overheads_are_counted():
    # one 128-value head vector: int8 128 B + one fp16 scale; int4 64 B + fp16 scale and zero
    assert DTYPES["int8"].vector_bytes(128) == 130
    assert DTYPES["int4"].vector_bytes(128) == 68
    assert DTYPES["int4"].bits_per_value == 4.25 and DTYPES["int8"].bits_per_value == 8.125
    # NVFP4: 16 e2m1 values (8 bytes) + one e4m3 scale byte = 4.5 bits per weight; MXFP4's
    # 32-value blocks with an e8m0 byte are 4.25
    assert DTYPES["nvfp4"].vector_bytes(16) == 9 and DTYPES["nvfp4"].bits_per_value == 4.5
    assert DTYPES["mxfp4"].bits_per_value == 4.25
    # llama.cpp blocks: block_q8_0 is 34 bytes, block_q4_0 18 bytes, per 32 values
    assert DTYPES["q8_0"].vector_bytes(32) == 34 and DTYPES["q4_0"].vector_bytes(32) == 18
    assert DTYPES["q8_0"].vector_bytes(128) == 4 * 34
    assert kv_bytes_per_token_per_layer(model_preset("Llama-3.1-8B"), "int4") == 2 * 8 * 68
    # MLA rows: latent 512 (4 groups) and rope key 64 (1 group) quantized separately
    assert kv_bytes_per_token_per_layer(model_preset("DeepSeek-V3"), "int8") == (512 + 4 * 2) + (64 + 2)
    # quantized weights: the linear layers at 4 bits plus group scales; embedding and LM head
    # stay at 16 bits (two 128256 x 4096 matrices for Llama-3.1-8B)
    emb = 2 * 128256 * 4096
    linear = model("Llama-3.1-8B").n_params - emb
    assert weight_bytes("Llama-3.1-8B", "int4") == -(-linear // 2) + -(-linear // 128) * 4 + 2 * emb
    assert weight_bytes("Llama-3.1-8B", "fp8") == linear + 2 * emb


def test_sliding_windows_cap_the_cache():
    mistral, gemma = model("Mistral-7B-v0.1"), model("Gemma-2-9B")
    per_layer = 2 * 8 * 128 * 2
    assert kv_bytes(mistral, 32768) == 32 * 4096 * per_layer           # every layer capped
    assert kv_bytes(mistral, 1000) == 32 * 1000 * per_layer            # below the window
    assert kv_bytes_per_token(mistral, ctx_tokens=32768) == per_layer * 32 // 8
    g_layer = 2 * 8 * 256 * 2
    assert kv_bytes(gemma, 8192) == 21 * 8192 * g_layer + 21 * 4096 * g_layer
    assert kv_bytes_per_token(gemma, ctx_tokens=100) == kv_bytes_per_token(gemma)


def test_mla_vs_mha_for_deepseek_v3():
    mla = kv_bytes_per_token_per_layer(model_preset("DeepSeek-V3"))
    mha = mha_kv_bytes_per_token_per_layer(model_preset("DeepSeek-V3"))
    assert mla == (512 + 64) * 2 == 1152
    assert mha == 128 * ((128 + 64) + 128) * 2 == 81920      # expanded K (192 wide) and V (128)
    assert mha / mla == pytest.approx(71.11, abs=0.01)
    # the V2 paper's comparison uses MHA with d_h = 128 for both K and V: 2 n_h d_h = 56.9x
    assert 2 * 128 * 128 / (512 + 64) == pytest.approx(56.89, abs=0.01)


# ---- the lesson's worked examples (section "KV cache 数学"), corrected ----------------------

LLAMA2_7B = "Llama-2-7B"         # 32 layers, 32 heads, d_head 128: the lesson's "7B"
LLAMA3_70B = "Llama-3.1-70B"     # same attention shape as Llama-3-70B: 80 layers, 8 KV heads


def test_lesson_7b_example():
    lesson_per_layer = 2 * 128 * 2                       # the lesson's "512 bytes"
    assert lesson_per_layer == 512
    per_layer = kv_bytes_per_token_per_layer(model(LLAMA2_7B), "fp16")
    assert per_layer == 16384 == 32 * lesson_per_layer   # it left out the 32 heads
    assert kv_bytes_per_token(LLAMA2_7B, "fp16") == 524288      # lesson: "16 KB"
    assert kv_bytes(LLAMA2_7B, 32768, 1, "fp16") == 17179869184  # lesson: "512 MB"
    assert kv_bytes(LLAMA2_7B, 32768, 1, "fp16") == 16 * 2**30


def test_lesson_70b_example():
    assert kv_bytes_per_token_per_layer(model(LLAMA3_70B), "fp16") == 4096   # lesson right
    assert kv_bytes(LLAMA3_70B, 32768, 1, "fp16") == 10737418240        # lesson: "10.4 GB"
    assert kv_bytes(LLAMA3_70B, 131072, 1, "fp16") == 42949672960 > gpu("A100 40GB").hbm_bytes
    mha = with_kv_heads(model(LLAMA3_70B), 64)
    assert kv_bytes_per_token_per_layer(mha, "fp16") == 32768
    assert kv_bytes(mha, 32768, 1, "fp16") == 85899345920               # lesson: "32 GB"


# ---- fits, max batch, max context, TP degree -------------------------------------------------


def test_fits_breakdown():
    r = fits("Llama-3.1-8B", "H100 SXM", 1, 8192, 4)
    assert r.fits and r.ctx_within_model_limit
    assert r.weight_bytes_per_gpu == weight_bytes("Llama-3.1-8B") == 2 * model("Llama-3.1-8B").n_params
    assert r.kv_bytes_per_gpu == 4 * 8192 * 131072
    total = gpu("H100 SXM").memory_bytes          # what CUDA reports: 79.18 GiB, not 80e9
    assert r.memory_bytes_per_gpu == total == round(79.18 * 1024) * 2**20
    assert r.reserve_bytes_per_gpu == total - math.ceil(total * 0.9)
    assert r.free_bytes_per_gpu == total - r.used_bytes_per_gpu
    assert "fits" in str(r)
    big = fits("Llama-3.1-70B", "H100 SXM", 1, 131072, 1)
    assert not big.fits and "NOT" in str(big)
    assert not fits("Llama-2-7B", "H100 SXM", 1, 32768, 1).ctx_within_model_limit


def test_max_batch_is_the_boundary():
    for name, g, n, ctx, w in [("Llama-3.1-8B", "A100 80GB", 1, 8192, "bf16"),
                               ("Qwen2.5-72B", "H100 SXM", 4, 32768, "bf16"),
                               ("Gemma-2-9B", "L4", 1, 8192, "bf16"),
                               ("DeepSeek-V3", "H200", 8, 16384, "fp8")]:
        b = max_batch(name, g, n, ctx, weight_dtype=w)
        assert b >= 1
        assert fits(name, g, n, ctx, b, weight_dtype=w).fits
        assert not fits(name, g, n, ctx, b + 1, weight_dtype=w).fits
    assert max_batch("Llama-3.1-70B", "T4", 1, 1024) == 0


def test_max_context_is_the_boundary():
    c = max_context("Llama-3.1-70B", "H100 SXM", 2, batch=4)
    assert fits("Llama-3.1-70B", "H100 SXM", 2, c, 4).fits
    assert not fits("Llama-3.1-70B", "H100 SXM", 2, c + 1, 4).fits
    # Mistral's window caps its cache: the model limit, not memory, binds
    assert max_context("Mistral-7B-v0.1", "A100 80GB") == 32768
    assert max_context("Llama-3.1-405B", "H100 SXM", 8) == 0        # weights alone do not fit


def test_min_tp_degree():
    assert min_tp_degree("Llama-3.1-8B", "H100 SXM", 8192, 1) == 1
    tp = min_tp_degree("Llama-3.1-70B", "H100 SXM", 32768, 8)
    assert tp == 4
    assert fits("Llama-3.1-70B", "H100 SXM", tp, 32768, 8).fits
    assert not fits("Llama-3.1-70B", "H100 SXM", 2, 32768, 8).fits
    assert min_tp_degree("Llama-3.1-405B", "A100 40GB", 8192, 1) is None
    assert min_tp_degree("DeepSeek-V3", "H200", 8192, 1, weight_dtype="fp8") == 8


def test_tensor_parallel_rules():
    assert valid_tp_degrees("Qwen2.5-7B", 28) == [1, 2, 4, 28]  # 28 heads, 4 KV heads
    assert "4 KV heads can be neither" in tp_problem(model_preset("Qwen2.5-7B"), 7)
    assert "28 attention heads" in tp_problem(model_preset("Qwen2.5-7B"), 8)
    # more GPUs than KV heads: each GPU keeps one (replicated) KV head
    r16 = kv_bytes_per_gpu("Llama-3.1-405B", 16, 1024, 1, "bf16")
    assert r16 == kv_bytes_per_gpu("Llama-3.1-405B", 8, 1024, 1, "bf16") == kv_bytes("Llama-3.1-405B", 1024) // 8
    # MLA: every GPU holds the whole latent cache
    assert kv_bytes_per_gpu("DeepSeek-V3", 8, 4096, 2, "bf16") == kv_bytes("DeepSeek-V3", 4096, 2)
    with pytest.raises(ValueError, match="cannot be split"):
        fits("Qwen2.5-7B", "L4", 8, 1024, 1)


@pytest.mark.parametrize("call, message", [
    (lambda: kv_bytes_per_token("Llama-3.1-8B", "fp6"), "unknown dtype 'fp6'; known dtypes: fp32"),
    (lambda: kv_bytes("Llama-3.1-8B", 0, 1), "ctx_tokens must be a positive integer"),
    (lambda: kv_bytes("Llama-3.1-8B", 10, -1), "batch must be a positive integer"),
    (lambda: kv_bytes("Llama-3.1-8B", 1.5, 1), "ctx_tokens"),
    (lambda: kv_bytes("Llama-3.1-8B", True, 1), "ctx_tokens"),
    (lambda: kv_bytes("Llama-9", 10, 1), "unknown model preset"),
    (lambda: fits("Llama-3.1-8B", "Z100"), "unknown GPU preset"),
    (lambda: fits("Llama-3.1-8B", "H100 SXM", reserve_fraction=1.0), r"reserve_fraction must be a finite number in \[0, 1\)"),
    (lambda: fits("Llama-3.1-8B", "H100 SXM", n_gpus=0), "n_gpus must be a positive integer"),
    (lambda: with_kv_heads(model_preset("Llama-3.1-8B"), 3), "not divisible"),
    (lambda: with_kv_heads(model_preset("DeepSeek-V3"), 8), "MLA"),
    (lambda: max_context("Llama-3.1-8B", "H100 SXM", batch=0), "batch"),
])
def test_bad_inputs_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- properties ------------------------------------------------------------------------------

models = st.sampled_from(sorted(MODELS))
dtypes = st.sampled_from(sorted(DTYPES))


@settings(max_examples=60, deadline=None)
@given(models, dtypes, st.integers(1, 200_000), st.integers(1, 64), st.integers(2, 5))
def test_linear_in_batch_and_in_context_below_windows(name, dt, ctx, batch, k):
    s = model(name)
    assert kv_bytes(s, ctx, batch * k, dt) == k * kv_bytes(s, ctx, batch, dt)
    if s.sliding_window is None:
        assert kv_bytes(s, ctx * k, batch, dt) == k * kv_bytes(s, ctx, batch, dt)
        assert kv_bytes(s, ctx, batch, dt) == batch * ctx * kv_bytes_per_token(s, dt)
    else:  # never more than linear, never decreasing
        assert kv_bytes(s, ctx, batch, dt) <= kv_bytes(s, ctx * k, batch, dt) <= k * kv_bytes(s, ctx, batch, dt)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([n for n in sorted(MODELS) if not model(n).is_mla]), dtypes,
       st.integers(1, 50_000))
def test_fewer_kv_heads_never_cost_more(name, dt, ctx):
    s = model(name)
    heads = [h for h in range(1, s.num_attention_heads + 1) if s.num_attention_heads % h == 0]
    sizes = [kv_bytes(with_kv_heads(s, h), ctx, 1, dt) for h in heads]
    assert sizes == sorted(sizes)                       # MQA <= GQA <= MHA
    assert kv_bytes(s, ctx, 1, dt) <= kv_bytes(with_kv_heads(s, s.num_attention_heads), ctx, 1, dt)
    assert kv_bytes_per_token_per_layer(s, dt) <= mha_kv_bytes_per_token_per_layer(s, dt)


@settings(max_examples=40, deadline=None)
@given(models, st.sampled_from(sorted(GPUS)), st.integers(1, 131072), st.integers(1, 8))
def test_per_gpu_shards_cover_the_cache(name, g, ctx, n):
    s = model(name)
    if tp_problem(s, n):
        return
    per_gpu = kv_bytes_per_gpu(s, n, ctx, 1, "bf16")
    total = kv_bytes(s, ctx, 1, "bf16")
    assert per_gpu * n >= total and per_gpu <= total
    if not s.is_mla and n <= s.num_key_value_heads:
        assert per_gpu * n == total                     # an even split, nothing replicated
    b = max_batch(s, g, n, min(ctx, s.max_position_embeddings))
    assert b >= 0


# ---- one way to name things -------------------------------------------------------------------


def test_dtype_names_are_case_insensitive_with_aliases():
    for alias, name in [("BF16", "bf16"), ("bfloat16", "bf16"), ("float16", "fp16"),
                        ("half", "fp16"), ("FP8_E4M3", "fp8"), ("float32", "fp32")]:
        assert sizing.get_dtype(alias) is DTYPES[name]
    assert kv_bytes("llama-3.1-8b", 1024, 1, "BFloat16") == kv_bytes("Llama-3.1-8B", 1024)


def test_shared_arguments_come_in_the_same_order():
    """spec, then where (gpu, n_gpus), then what (ctx_tokens, batch), then formats."""
    import inspect
    order = ["spec", "gpu", "n_gpus", "ctx_tokens", "batch", "kv_dtype", "weight_dtype"]
    for fn in (kv_bytes, kv_bytes_per_gpu, fits, max_batch, max_context, min_tp_degree):
        names = [p for p in inspect.signature(fn).parameters if p in order]
        assert names == sorted(names, key=order.index), f"{fn.__name__}: {names}"
    assert kv_bytes_per_gpu("Llama-3.1-8B", 2, 1024, 3, "fp8") == kv_bytes("Llama-3.1-8B", 1024, 3, "fp8") // 2


@pytest.mark.parametrize("call, error, message", [
    (lambda: kv_bytes("Llama-3.1-8B", 1024, 1, 16), TypeError, "dtype must be a name"),
    (lambda: kv_bytes_per_gpu("Llama-3.1-8B", 1024, 1, 1, "bf16"), ValueError, "n_gpus|split"),
    (lambda: kv_bytes_per_gpu("Llama-3.1-8B", 1, "H100", 1), ValueError, "ctx_tokens"),
    (lambda: fits("Llama-3.1-8B", "H100", reserve_fraction=float("nan")), ValueError,
     "reserve_fraction must be a finite number"),
    (lambda: sizing.memory_budget(model_preset("Llama-3.1-8B"), gpu_preset("H100"), gpu_memory_utilization=0),
     ValueError, r"gpu_memory_utilization must be a finite number in \(0, 1\]"),
    (lambda: kv_bytes_per_gpu("Llama-3.1-8B", 1, 1024, window_extra_tokens=-1), ValueError,
     "window_extra_tokens"),
    (lambda: sizing.sequences_that_fit(10**12, model("Llama-3.1-8B"), 1, 1024,
                                       shared_prefix_tokens=1024), ValueError,
     "shared_prefix_tokens"),
])
def test_bad_inputs_name_the_argument_and_the_rule(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_names_are_resolved_by_the_public_functions_not_the_helpers_below_them():
    """kv_bytes and fits take a preset name (the reader's calculator); the helpers they call
    take the one ModelSpec the public function resolved, and refuse a name with a TypeError that
    says where to resolve it."""
    spec, h100 = model("Llama-3.1-8B"), gpu("H100")
    assert sizing.kv_heads_per_gpu(spec, 2) == 4 and sizing.embedding_params(spec) > 0
    for helper in (lambda: sizing.kv_heads_per_gpu("Llama-3.1-8B", 2),
                   lambda: sizing.embedding_params("Llama-3.1-8B"),
                   lambda: sizing.tp_problem("Llama-3.1-8B", 2),
                   lambda: sizing.weight_bytes_per_gpu("Llama-3.1-8B", 2),
                   lambda: sizing.kv_bytes_per_token_per_layer("Llama-3.1-8B"),
                   lambda: sizing.with_kv_heads("Llama-3.1-8B", 1),
                   lambda: sizing.sequences_that_fit(10**10, "Llama-3.1-8B", 1, 1024),
                   lambda: sizing.memory_budget("Llama-3.1-8B", h100)):
        with pytest.raises(TypeError, match=r"spec must be a ModelSpec, got the name "
                                            r"'Llama-3.1-8B': resolve it once at the entry point, "
                                            r"models.model\('Llama-3.1-8B'\)"):
            helper()
    with pytest.raises(TypeError, match=r"gpu must be a hardware.GPU, got the name 'H100'"):
        sizing.memory_budget(spec, "H100")
    # the entry points resolve once and hand the helpers the objects
    assert kv_bytes("Llama-3.1-8B", 1024) == kv_bytes(spec, 1024)
    assert fits("Llama-3.1-8B", "H100", 2) == fits(spec, h100, 2)
    assert valid_tp_degrees("Llama-3.1-8B") == valid_tp_degrees(spec)
    assert min_tp_degree("Llama-3.1-70B", "H100") == min_tp_degree(model("Llama-3.1-70B"), h100)


def test_sliding_windows_in_flight_and_shared_prefixes():
    m = model("Mistral-7B-v0.1")
    per_token = 32 * 2 * 8 * 128 * 2
    assert kv_bytes_per_gpu(m, 1, 32768, 1, "bf16", window_extra_tokens=4096) == per_token * 8192
    assert kv_bytes_per_gpu(m, 1, 6000, 1, "bf16", window_extra_tokens=4096) == per_token * 6000
    # all layers slide: a shared prefix is not stored once (it leaves the window)
    budget = 100 * per_token * 4096
    assert sizing.sequences_that_fit(budget, m, 1, 4096, shared_prefix_tokens=2000) == 100
    l8 = model("Llama-3.1-8B")
    assert sizing.sequences_that_fit(budget, l8, 1, 4096, shared_prefix_tokens=2048) == 199
