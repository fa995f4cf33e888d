"""Model presets: values as in each config.json, parameter counts against published totals."""

import dataclasses
import json

import pytest

from inferbook.models import MODELS, ModelSpec, model, param_count
from inferbook.models import model as model_preset

# (layers, hidden, heads, kv heads, head_dim, vocab, max_position_embeddings), typed again from
# each config.json so a slip in the preset table shows up as a mismatch here.
CONFIG = {
    "Llama-2-7B": (32, 4096, 32, 32, 128, 32000, 4096),
    "Llama-3.1-8B": (32, 4096, 32, 8, 128, 128256, 131072),
    "Llama-3.1-70B": (80, 8192, 64, 8, 128, 128256, 131072),
    "Llama-3.1-405B": (126, 16384, 128, 8, 128, 128256, 131072),
    "Mistral-7B-v0.1": (32, 4096, 32, 8, 128, 32000, 32768),
    "Mixtral-8x7B": (32, 4096, 32, 8, 128, 32000, 32768),
    "Qwen2.5-7B": (28, 3584, 28, 4, 128, 152064, 131072),
    "Qwen2.5-14B": (48, 5120, 40, 8, 128, 152064, 131072),
    "Qwen2.5-72B": (80, 8192, 64, 8, 128, 152064, 131072),
    "Gemma-2-9B": (42, 3584, 16, 8, 256, 256000, 8192),
    "DeepSeek-V2-Lite": (27, 2048, 16, 16, 192, 102400, 163840),
    "DeepSeek-V3": (61, 7168, 128, 128, 192, 129280, 163840),
}

# Exact totals as the Hugging Face model pages list them (safetensors parameter counts) and the
# Gemma 2 paper's table (non-embedding + embedding); these are the checkpoint tensors summed.
EXACT_PARAMS = {
    "Llama-2-7B": 6_738_415_616,
    "Llama-3.1-8B": 8_030_261_248,
    "Llama-3.1-70B": 70_553_706_496,
    "Mistral-7B-v0.1": 7_241_732_096,
    "Qwen2.5-7B": 7_615_616_512,
    "Gemma-2-9B": 8_324_201_984 + 917_504_000,
}


def test_every_issue_model_is_there():
    assert set(MODELS) == set(CONFIG)


@pytest.mark.parametrize("name", CONFIG)
def test_config_values(name):
    m = MODELS[name]
    got = (m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.num_key_value_heads,
           m.head_dim, m.vocab_size, m.max_position_embeddings)
    assert got == CONFIG[name]
    assert m.source.startswith("https://huggingface.co/") and m.source.endswith("/config.json")
    assert m.params_source


def test_attention_kinds_and_special_fields():
    kinds = {name: m.attention for name, m in MODELS.items()}
    assert kinds["Llama-2-7B"] == "MHA"
    assert kinds["DeepSeek-V3"] == kinds["DeepSeek-V2-Lite"] == "MLA"
    assert all(kinds[n] == "GQA" for n in CONFIG if n not in
               ("Llama-2-7B", "DeepSeek-V3", "DeepSeek-V2-Lite"))
    v3 = model("deepseek-v3")
    assert (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.num_hidden_layers) == (512, 64, 61)
    assert model("DeepSeek-V2-Lite").kv_lora_rank == 512
    assert model("Mistral-7B-v0.1").layer_windows == (4096,) * 32
    gemma = model("Gemma-2-9B").layer_windows
    assert gemma[:4] == (4096, None, 4096, None) and gemma.count(None) == 21
    assert model("Llama-3.1-8B").layer_windows == (None,) * 32


@pytest.mark.parametrize("name", EXACT_PARAMS)
def test_param_count_exact(name):
    assert param_count(MODELS[name]) == EXACT_PARAMS[name]


@pytest.mark.parametrize("name", CONFIG)
def test_param_count_matches_published_within_1_percent(name):
    m = MODELS[name]
    assert abs(m.n_params / m.published_params - 1) < 0.01, (m.n_params, m.published_params)


def test_hand_count_llama31_8b():
    # embeddings (untied) + 32 x (q,o 4096² ; k,v 4096x1024 ; MLP 3x4096x14336 ; 2 norms) + norm
    embed = 2 * 128256 * 4096
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert param_count(model("Llama-3.1-8B")) == embed + 32 * layer + 4096


def test_moe_active_params():
    # Mixtral paper: 13B active of 47B; DeepSeek-V3 report: 37B activated of 671B
    assert abs(model("Mixtral-8x7B").n_active_params / 13e9 - 1) < 0.02
    assert abs(model("DeepSeek-V3").n_active_params / 37e9 - 1) < 0.03
    dense = model("Llama-3.1-8B")
    assert dense.n_active_params == dense.n_params


def test_unknown_model_lists_known_names():
    with pytest.raises(ValueError, match="Llama-3.1-8B"):
        model("GPT-5")


def test_invalid_specs_raise():
    base = model("Llama-3.1-8B")
    with pytest.raises(ValueError, match="not divisible"):
        dataclasses.replace(base, num_key_value_heads=5)
    with pytest.raises(ValueError, match="positive"):
        dataclasses.replace(base, head_dim=0)
    with pytest.raises(ValueError, match="sliding_window"):
        dataclasses.replace(base, sliding_window=4096)
    with pytest.raises(ValueError, match="sliding_window_layers"):
        dataclasses.replace(base, sliding_window=4096, sliding_window_layers="odd")
    with pytest.raises(ValueError, match="MLA"):
        dataclasses.replace(base, kv_lora_rank=512)
    assert isinstance(base, ModelSpec)


# ---- Hugging Face config.json ------------------------------------------------------------------
# Hand-written from each repository's config.json (the keys the loader reads; no download).

HF_CONFIGS = {
    "Llama-3.1-8B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "attention_bias": False, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}},
    "Mistral-7B-v0.1": {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
        "tie_word_embeddings": False},
    "Qwen2.5-7B": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "max_position_embeddings": 131072, "sliding_window": 131072,
        "use_sliding_window": False, "max_window_layers": 28, "tie_word_embeddings": False},
    "Gemma-2-9B": {
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
        "sliding_window": 4096, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0},
    "Mixtral-8x7B": {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": None,
        "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False},
    "DeepSeek-V2-Lite": {
        "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_hidden_layers": 27,
        "num_key_value_heads": 16, "vocab_size": 102400, "max_position_embeddings": 163840,
        "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "topk_method": "greedy",
        "tie_word_embeddings": False},
    "DeepSeek-V3": {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_hidden_layers": 61,
        "num_key_value_heads": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "topk_method": "noaux_tc",
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False},
}

_ARCH = [f.name for f in dataclasses.fields(ModelSpec)
         if f.name not in ("name", "source", "published_params", "params_source", "chat_repo",
                           "chat_max_position_embeddings", "chat_rope_scaling")]


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_from_hf_config_matches_the_presets(name):
    spec = ModelSpec.from_hf_config(HF_CONFIGS[name], name=name)
    preset = model(name)
    assert {f: getattr(spec, f) for f in _ARCH} == {f: getattr(preset, f) for f in _ARCH}
    assert spec.n_params == preset.n_params


def test_from_hf_config_phi3_and_files(tmp_path):
    phi3 = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "vocab_size": 32064, "max_position_embeddings": 4096, "sliding_window": 2047,
            "tie_word_embeddings": False, "_name_or_path": "microsoft/Phi-3-mini-4k-instruct"}
    spec = ModelSpec.from_hf_config(phi3)
    assert spec.name == "microsoft/Phi-3-mini-4k-instruct" and spec.attention == "MHA"
    assert spec.layer_windows == (2047,) * 32
    assert abs(spec.n_params - 3.82e9) / 3.82e9 < 0.01     # "3.8B parameters" (model card)
    (tmp_path / "config.json").write_text(json.dumps(phi3))
    assert ModelSpec.from_hf_config(tmp_path) == ModelSpec.from_hf_config(
        tmp_path / "config.json")


def test_from_hf_config_unseen_configs():
    # a Qwen3-style config: explicit head_dim, per-layer types (every 4th layer global)
    types = ["sliding_attention" if i % 4 else "full_attention" for i in range(24)]
    cfg = {"model_type": "newmodel", "hidden_size": 2048, "intermediate_size": 6144,
           "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 4,
           "head_dim": 256, "vocab_size": 100000, "max_position_embeddings": 65536,
           "sliding_window": 1024, "layer_types": types}
    spec = ModelSpec.from_hf_config(cfg, name="unseen")
    assert spec.head_dim == 256 and spec.attention == "GQA"
    assert spec.layer_windows.count(None) == 6 and spec.layer_windows.count(1024) == 18
    from inferbook.sizing import kv_bytes
    assert kv_bytes(spec, 8192) == 2 * 4 * 256 * 2 * (6 * 8192 + 18 * 1024)
    # a multimodal wrapper keeps the language model in text_config
    wrapped = {"model_type": "llava", "text_config": HF_CONFIGS["Llama-3.1-8B"]}
    assert ModelSpec.from_hf_config(wrapped).n_params == model("Llama-3.1-8B").n_params
    # Qwen2 with its window switched on for the upper layers
    qwen = dict(HF_CONFIGS["Qwen2.5-7B"], use_sliding_window=True, max_window_layers=20,
                sliding_window=4096)
    assert ModelSpec.from_hf_config(qwen).layer_windows == (None,) * 20 + (4096,) * 8


@pytest.mark.parametrize("change, message", [
    ({"num_hidden_layers": None}, "num_hidden_layers.* missing"),
    ({"num_hidden_layers": True}, "num_hidden_layers must be an integer"),
    ({"hidden_size": 4096.5}, "hidden_size must be an integer"),
    ({"vocab_size": -1}, "vocab_size must be an integer >= 1"),
    ({"num_key_value_heads": 5}, "not divisible"),
])
def test_from_hf_config_rejects_bad_fields(change, message):
    cfg = dict(HF_CONFIGS["Llama-3.1-8B"], **change)
    with pytest.raises(ValueError, match=message):
        ModelSpec.from_hf_config(cfg)


def test_raw_config_dicts_are_refused_where_a_spec_is_expected():
    from inferbook import sizing
    for call in (lambda: sizing.kv_bytes(HF_CONFIGS["Llama-3.1-8B"], 1024),
                 lambda: sizing.fits(HF_CONFIGS["Llama-3.1-8B"], "H100"),
                 lambda: model(HF_CONFIGS["Llama-3.1-8B"])):
        with pytest.raises(TypeError, match="from_hf_config"):
            call()
    with pytest.raises(TypeError, match="config must be"):
        ModelSpec.from_hf_config(42)


def test_bools_are_not_layer_counts():
    with pytest.raises(ValueError, match="num_hidden_layers must be a positive int"):
        dataclasses.replace(model("Llama-3.1-8B"), num_hidden_layers=True)
    with pytest.raises(ValueError, match="n_routed_experts must be an int"):
        dataclasses.replace(model("Llama-3.1-8B"), n_routed_experts=False)


@pytest.mark.parametrize("alias", ["llama-3.1-8b", "LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B",
                                   "meta-llama/Llama-3.1-8B-Instruct", "llama 3.1 8b"])
def test_model_names_and_aliases(alias):
    assert model(alias) is MODELS["Llama-3.1-8B"]


# --- from_hf_config: what it reads and what it refuses (issue 20, item 6) ----------------------

QWEN3_MOE = {  # huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_attention_heads": 32, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_qwen3_moe_is_sized_as_moe_not_dense():
    spec = ModelSpec.from_hf_config(QWEN3_MOE, name="Qwen3-30B-A3B")
    assert spec.is_moe and spec.n_routed_experts == 128 and spec.num_experts_per_tok == 8
    assert spec.moe_intermediate_size == 768
    # the model card: 30.5B total, 3.3B activated
    assert abs(spec.n_params / 30.5e9 - 1) < 0.01 and abs(spec.n_active_params / 3.3e9 - 1) < 0.03
    dense = {k: v for k, v in QWEN3_MOE.items() if k not in ("num_experts",)}
    with pytest.raises(ValueError, match="moe_intermediate_size"):
        ModelSpec.from_hf_config(dense)      # an expert width without experts is not dense


def test_moe_layouts_that_cannot_be_represented_are_refused():
    with pytest.raises(ValueError, match="decoder_sparse_step"):
        ModelSpec.from_hf_config(dict(QWEN3_MOE, decoder_sparse_step=2))
    with pytest.raises(ValueError, match="mlp_only_layers"):
        ModelSpec.from_hf_config(dict(QWEN3_MOE, mlp_only_layers=[5, 9]))
    lead = ModelSpec.from_hf_config(dict(QWEN3_MOE, mlp_only_layers=[0, 1]))
    assert lead.first_k_dense_replace == 2
    shared = ModelSpec.from_hf_config(dict(QWEN3_MOE, shared_expert_intermediate_size=3072))
    assert shared.n_shared_experts == 4                     # 3072 / 768
    with pytest.raises(ValueError, match="shared_expert_intermediate_size"):
        ModelSpec.from_hf_config(dict(QWEN3_MOE, shared_expert_intermediate_size=1000))


GEMMA3_TEXT = {  # huggingface.co/google/gemma-3-12b-it/blob/main/config.json (text_config)
    "model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
    "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
    "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
    "sliding_window": 1024, "sliding_window_pattern": 6}


def test_gemma3_pattern_tied_embeddings_and_text_config():
    spec = ModelSpec.from_hf_config(GEMMA3_TEXT, name="gemma-3-12b")
    windows = spec.layer_windows
    assert windows.count(None) == 8 and windows[5] is None and windows[0] == 1024
    assert spec.tie_word_embeddings                        # Gemma ties unless it says otherwise
    wrapped = {"model_type": "gemma3", "text_config": GEMMA3_TEXT,
               # huggingface.co/google/gemma-3-12b-it/blob/main/config.json (vision_config)
               "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                                 "model_type": "siglip_vision_model", "num_attention_heads": 16,
                                 "num_hidden_layers": 27, "patch_size": 14,
                                 "vision_use_head": False}}
    mm = ModelSpec.from_hf_config(wrapped, name="gemma-3-12b-it")
    assert mm.layer_windows == windows and mm.vision_params > 0.35e9   # SigLIP-So400m ~0.4B
    assert mm.n_params == spec.n_params + mm.vision_params
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(48)]
    assert ModelSpec.from_hf_config(dict(GEMMA3_TEXT, layer_types=types)).layer_windows == windows


def test_linear_attention_and_state_space_layers_are_refused():
    types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(48)]
    with pytest.raises(ValueError, match="layer_types.*linear_attention.*not attention"):
        ModelSpec.from_hf_config(dict(QWEN3_MOE, layer_types=types))
    with pytest.raises(ValueError, match="full_attention_interval"):
        ModelSpec.from_hf_config(dict(QWEN3_MOE, full_attention_interval=4))
    with pytest.raises(ValueError, match="hybrid_override_pattern"):
        ModelSpec.from_hf_config(dict(HF_CONFIGS["Llama-3.1-8B"],
                                      hybrid_override_pattern="M-M-M*-"))


@pytest.mark.parametrize("qcfg, stored", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8"),
    ({"quant_method": "mxfp4"}, "mxfp4"),             # on a MoE: the routed experts
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g0": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g0": {"weights": {"num_bits": 4, "type": "int"}}}}, "w4a16"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "nvfp4"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g0": {"weights": {"num_bits": 4, "type": "float",
                                           "group_size": 16}}}}, "nvfp4"),
])
def test_quantized_checkpoints_are_sized_at_their_stored_size(qcfg, stored):
    from inferbook import sizing
    base = "Mixtral-8x7B" if stored == "mxfp4" else "Llama-3.1-8B"
    spec = ModelSpec.from_hf_config(dict(HF_CONFIGS[base], quantization_config=qcfg))
    assert spec.checkpoint_dtype == stored
    assert sizing.weight_bytes(spec) == sizing.weight_bytes(spec, stored)
    assert sizing.weight_bytes(spec) < sizing.weight_bytes(spec, "bf16")


def test_unknown_quantization_is_refused_and_fp16_checkpoints_read():
    with pytest.raises(ValueError, match="quantization_config.quant_method"):
        ModelSpec.from_hf_config(dict(HF_CONFIGS["Llama-3.1-8B"],
                                      quantization_config={"quant_method": "hqq"}))
    with pytest.raises(ValueError, match="torch_dtype"):
        ModelSpec.from_hf_config(dict(HF_CONFIGS["Llama-3.1-8B"], torch_dtype="int3"))
    fp16 = ModelSpec.from_hf_config(dict(HF_CONFIGS["Llama-3.1-8B"], torch_dtype="float16"))
    assert fp16.checkpoint_dtype == "fp16"


def test_gpt_oss_mxfp4_experts_and_alternating_windows():
    from inferbook import sizing
    from inferbook.vllm_logs import log_model
    spec = log_model("openai/gpt-oss-120b")
    assert spec.checkpoint_dtype == "mxfp4" and spec.sliding_window_layers == "even"
    assert abs(spec.n_params / 116.8e9 - 1) < 0.01         # the model card: 117B
    # experts at 4.25 bits, everything else 16-bit: ~61 GiB, not 16-bit's 218 GiB
    assert 58 * 2**30 < sizing.weight_bytes(spec) < 66 * 2**30


def test_qwen25_instruct_context_limit_and_yarn_override():
    for name in ("Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-72B"):
        spec = model(name)
        assert spec.max_position_embeddings == 131072          # the base model's config
        assert spec.chat_context_limit == 32768                # the Instruct config.json
        rope = json.loads(spec.chat_rope_scaling)
        assert rope == {"rope_type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": 32768}
        assert rope["factor"] * rope["original_max_position_embeddings"] == 131072
    assert model("Llama-3.1-8B").chat_context_limit == 131072


def test_every_log_model_config_reads_and_matches_its_published_size():
    from inferbook.vllm_logs import log_model, model_configs
    published = {"Qwen/Qwen3-0.6B": 0.6e9, "Qwen/Qwen3-1.7B": 1.7e9, "Qwen/Qwen3-4B": 4.0e9,
                 "Qwen/Qwen3-14B": 14.8e9, "Qwen/Qwen3-32B": 32.8e9,
                 "Qwen/Qwen2.5-3B-Instruct": 3.09e9, "Qwen/Qwen2.5-32B-Instruct": 32.5e9,
                 "Qwen/Qwen3-235B-A22B-FP8": 235e9, "Qwen/Qwen2-7B-Instruct": 7.62e9}
    for key in model_configs():
        spec = log_model(key)
        if key in published:
            assert abs(spec.n_params / published[key] - 1) < 0.02, key


def test_bad_model_spec_fields_are_named():
    with pytest.raises(ValueError, match="checkpoint_dtype"):
        dataclasses.replace(model("Llama-3.1-8B"), checkpoint_dtype="int3")
    with pytest.raises(ValueError, match="chat_max_position_embeddings"):
        dataclasses.replace(model("Llama-3.1-8B"), chat_max_position_embeddings=-1)
    with pytest.raises(TypeError, match="model name must be a str"):
        model(3)
    with pytest.raises(ValueError, match="no config.json"):
        ModelSpec.from_hf_config("/nonexistent/dir")


def test_param_count_checks_its_arguments():
    from inferbook.models import param_count
    assert param_count(model_preset("Llama-3.1-8B")) == model("Llama-3.1-8B").n_params
    with pytest.raises(TypeError, match="active_only"):
        param_count(model("Mixtral-8x7B"), active_only="yes")
    with pytest.raises(TypeError, match="from_hf_config"):
        param_count(HF_CONFIGS["Llama-3.1-8B"])


# ---------------------------------------------------------------------------------------------
# configs counted against transformers' own models (built on the meta device: no weights)

def _hf_count(model_cls, config) -> int:
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        m = model_cls(config)
    return sum(p.numel() for p in m.parameters())


def test_gpt2_field_names_are_read_and_sized_exactly():
    transformers = pytest.importorskip("transformers")
    small = transformers.GPT2Config()                       # GPT-2 small, the book's model
    spec = ModelSpec.from_hf_config(small.to_dict(), name="gpt2")
    assert (spec.num_hidden_layers, spec.hidden_size, spec.num_attention_heads,
            spec.max_position_embeddings, spec.intermediate_size) == (12, 768, 12, 1024, 3072)
    # the model page's 124M: 124,439,808 tensors with the LM head tied to the embedding
    assert spec.n_params == _hf_count(transformers.GPT2LMHeadModel, small) == 124_439_808
    for kw in (dict(n_layer=3, n_embd=96, n_head=6, n_positions=64, n_inner=200, vocab_size=301),
               dict(n_layer=2, n_embd=64, n_head=4, n_positions=32, n_inner=None, vocab_size=97)):
        cfg = transformers.GPT2Config(**kw)
        assert ModelSpec.from_hf_config(cfg.to_dict()).n_params == \
            _hf_count(transformers.GPT2LMHeadModel, cfg)
    # GPT-2's names on an architecture that is not laid out like GPT-2: refused, named
    with pytest.raises(ValueError, match="model_type.*gptj.*n_embd"):
        ModelSpec.from_hf_config({"model_type": "gptj", "n_layer": 2, "n_embd": 64, "n_head": 4,
                                  "n_positions": 32, "vocab_size": 100})


def _llama4(transformers, text=None, vision=None):
    return transformers.Llama4Config(text_config=text, vision_config=vision)


def test_llama4_chunked_attention_shared_expert_and_vision_tower_exactly():
    transformers = pytest.importorskip("transformers")
    scout = _llama4(transformers)                          # transformers' defaults: Scout
    spec = ModelSpec.from_hf_config(scout.to_dict())
    assert spec.n_params == _hf_count(transformers.Llama4ForConditionalGeneration, scout)
    assert spec.n_shared_experts == 1 and spec.n_moe_layers == 48
    assert 17e9 <= spec.n_active_params <= 17.7e9          # published: 17B active
    # every 4th layer is a global NoPE layer; the others attend within 8,192-token chunks
    assert spec.local_attention == "chunked"
    assert spec.layer_windows.count(None) == 12 and spec.layer_windows[0] == 8192
    from inferbook.sizing import kv_bytes
    all_global = dataclasses.replace(spec, sliding_window=None, sliding_window_layers="none")
    ratio = kv_bytes(all_global, 2**20) / kv_bytes(spec, 2**20)
    assert ratio == pytest.approx(48 / (12 + 36 * 8192 / 2**20))   # ~3.6x less than all-global
    # a Maverick-like interleave (MoE every 2nd layer, dense layers intermediate_size_mlp wide)
    text = dict(interleave_moe_layer_step=2, num_local_experts=4, num_hidden_layers=4,
                hidden_size=256, intermediate_size=128, intermediate_size_mlp=512,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1000)
    vision = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                  num_attention_heads=4, image_size=56, patch_size=14, vision_output_dim=96,
                  projector_input_dim=80, projector_output_dim=80)
    small = _llama4(transformers, text, vision)
    s = ModelSpec.from_hf_config(small.to_dict())
    assert s.moe_layer_flags == (False, True, False, True)
    assert s.n_params == _hf_count(transformers.Llama4ForConditionalGeneration, small)
    with pytest.raises(ValueError, match="moe_layers"):
        ModelSpec.from_hf_config(dict(small.to_dict()["text_config"], moe_layers=[9]))


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3", "llava", "mistral3"])
def test_vision_towers_gated_mlps_patch_embedding_and_projector_exactly(kind):
    T = pytest.importorskip("transformers")
    text = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=500, max_position_embeddings=256)
    tower = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, image_size=56, patch_size=14)
    cls, cfg = {
        "qwen2_5_vl": lambda: (T.Qwen2_5_VLForConditionalGeneration, T.Qwen2_5_VLConfig(
            text_config=dict(text, model_type="qwen2_5_vl_text"),
            vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4,
                               out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                               temporal_patch_size=2, in_channels=3))),
        "gemma3": lambda: (T.Gemma3ForConditionalGeneration, T.Gemma3Config(
            text_config=dict(text, head_dim=16, model_type="gemma3_text"),
            vision_config=dict(tower, model_type="siglip_vision_model"), mm_tokens_per_image=4)),
        "llava": lambda: (T.LlavaForConditionalGeneration, T.LlavaConfig(
            text_config=dict(text, model_type="llama"),
            vision_config=dict(tower, model_type="clip_vision_model", projection_dim=16))),
        "mistral3": lambda: (T.Mistral3ForConditionalGeneration, T.Mistral3Config(
            text_config=dict(text, model_type="mistral", head_dim=16, tie_word_embeddings=False),
            vision_config=dict(tower, model_type="pixtral", head_dim=8),
            tie_word_embeddings=False)),
    }[kind]()
    spec = ModelSpec.from_hf_config(cfg.to_dict())
    assert spec.vision_params > 0 and spec.n_params == _hf_count(cls, cfg)


def test_unknown_vision_tower_and_bad_vision_fields_are_refused_by_name():
    base = {"model_type": "llava", "text_config": HF_CONFIGS["Llama-3.1-8B"]}
    with pytest.raises(ValueError, match="vision_config.model_type.*'mystery'"):
        ModelSpec.from_hf_config(dict(base, vision_config={"model_type": "mystery"}))
    with pytest.raises(ValueError, match="vision_config.patch_size"):
        ModelSpec.from_hf_config(dict(base, vision_config={
            "model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "image_size": 56, "patch_size": 0}))
    with pytest.raises(ValueError, match="vision_config"):
        ModelSpec.from_hf_config({**HF_CONFIGS["Llama-3.1-8B"], "vision_config": {}})
