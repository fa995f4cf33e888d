"""Model presets: values as in each config.json, parameter counts against published totals."""

import dataclasses
import json

import pytest

from inferbook.models import MODELS, ModelSpec, model, param_count

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
         if f.name not in ("name", "source", "published_params", "params_source", "chat_repo")]


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
