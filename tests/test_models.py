"""Model presets: values as in each config.json, parameter counts against published totals."""

import dataclasses

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
