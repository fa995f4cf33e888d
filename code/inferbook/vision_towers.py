"""The parameters of a multimodal checkpoint's vision tower, read from its `vision_config`.

`vision_params(vision_config, text_hidden, outer_config)` counts, as transformers builds each
tower type (`_VISION`): the patch embedding (channels x patch^2 (x temporal patch) x width),
learned positions (and a class token), every encoder layer (q/k/v/o over the tower's width, a
gated gate/up/down or a plain fc1/fc2 MLP, two norms, biases where the type has them), the norms
around the encoder, and the projector into the language model (Llama-4's pixel-shuffle adapter
and projector, Gemma-3's input projection, Qwen2.5-VL's patch merger, Mistral-3's patch merger
and MLP, LLaVA's two-layer MLP). A tower type not in `_VISION` is refused naming
`vision_config.model_type` (ValueError).
"""

from __future__ import annotations


def _refuse(field: str, why: str):
    raise ValueError(f"config.json: {field}: {why}; ModelSpec cannot represent it, so it is "
                     "refused rather than sized wrongly")


# Vision towers by `vision_config.model_type`, as transformers builds them: MLP gated
# (gate/up/down) or not (fc1/fc2), biases on the linears, LayerNorm (weight + bias) or RMSNorm,
# a bias on the patch embedding, learned positions (with a class token), a norm before and after
# the encoder, and the projector into the language model (`_projector_params`).
_VISION = {
    "llama4_vision_model": dict(gated=False, bias=True, layer_norm=True, patch_bias=False,
                                positions="learned+class", pre=True, post=True),
    "siglip_vision_model": dict(gated=False, bias=True, layer_norm=True, patch_bias=True,
                                positions="learned", pre=False, post=True),
    "clip_vision_model": dict(gated=False, bias=True, layer_norm=True, patch_bias=False,
                              positions="learned+class", pre=True, post=True),
    "qwen2_5_vl_vision": dict(gated=True, bias=True, layer_norm=False, patch_bias=False,
                       positions=None, pre=False, post=False),
    "pixtral": dict(gated=True, bias=False, layer_norm=False, patch_bias=False,
                    positions=None, pre=True, post=False),
}

_DEFAULT_TOWER = {"llama4": "llama4_vision_model", "gemma3": "siglip_vision_model",
                  "llava": "clip_vision_model", "qwen2_5_vl": "qwen2_5_vl_vision",
                  "mistral3": "pixtral"}


def _pos_int(cfg: dict, key: str, where: str, default=None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        value = value[0]                          # square images and patches: [336, 336]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.json: {where}.{key} must be a positive integer, got {value!r}")
    return value


def _projector_params(kind: str, v: dict, h: int, text_hidden: int, outer: dict) -> int:
    """Return the projector's parameters (vision features -> the language model's hidden)."""
    if kind == "llama4_vision_model":      # vision_adapter (pixel-shuffle MLP) + projector
        inter = _pos_int(v, "intermediate_size", "vision_config")
        p_in = _pos_int(v, "projector_input_dim", "vision_config", 4096)
        p_out = _pos_int(v, "projector_output_dim", "vision_config", 4096)
        out = _pos_int(v, "vision_output_dim", "vision_config", 7680)
        return inter * p_in + p_out * p_out + out * text_hidden
    if kind == "siglip_vision_model":      # Gemma-3: soft-embedding norm + input projection
        return h + h * text_hidden
    if kind == "qwen2_5_vl_vision":             # merger: RMSNorm, then two linears over 2x2 patches
        m = _pos_int(v, "spatial_merge_size", "vision_config", 2)
        out = _pos_int(v, "out_hidden_size", "vision_config", text_hidden)
        wide = h * m * m
        return h + wide * wide + wide + wide * out + out
    bias = bool(outer.get("multimodal_projector_bias", kind != "pixtral"))
    mlp = h * text_hidden + text_hidden * text_hidden + (2 * text_hidden if bias else 0)
    if kind == "pixtral":                  # Mistral-3: RMSNorm + patch merger + 2-layer MLP
        m = _pos_int(outer, "spatial_merge_size", "config", 2)
        return h + h * m * m * h + mlp
    return mlp                             # LLaVA: linear_1, GELU, linear_2


def vision_params(vcfg, text_hidden: int, outer: dict) -> int:
    """Return a vision tower's parameters (0 if the config has none): patch embedding,
    positions, encoder layers (attention with q/k/v/o over the tower's width, a gated or plain
    MLP, two norms), the norms around the encoder and the projector (`_VISION`)."""
    if vcfg is None:
        return 0
    if not isinstance(vcfg, dict):
        raise ValueError(f"config.json: vision_config must be an object, got {vcfg!r}"[:200])
    # transformers fixes the tower's config class by the outer model_type; a config.json
    # without vision_config.model_type means that default
    kind = str(vcfg.get("model_type") or _DEFAULT_TOWER.get(str(outer.get("model_type")), ""))
    if kind not in _VISION:
        _refuse("vision_config.model_type", f"vision tower {kind!r} is not one of "
                                            f"{', '.join(_VISION)}")
    lay = _VISION[kind]
    wide_key = "embed_dim" if "embed_dim" in vcfg else "hidden_size"
    h = _pos_int(vcfg, wide_key, "vision_config")
    layers = _pos_int(vcfg, "depth" if "depth" in vcfg else "num_hidden_layers", "vision_config")
    inter = _pos_int(vcfg, "intermediate_size", "vision_config")
    patch = _pos_int(vcfg, "patch_size", "vision_config")
    channels = _pos_int(vcfg, "in_channels" if "in_channels" in vcfg else "num_channels",
                        "vision_config", 3)
    temporal = _pos_int(vcfg, "temporal_patch_size", "vision_config", 1)
    b = lay["bias"]
    norm = 2 * h if lay["layer_norm"] else h
    mlp = (3 * h * inter + (2 * inter + h if b else 0)) if lay["gated"] else \
        (2 * h * inter + (inter + h if b else 0))
    per_layer = 4 * h * h + (4 * h if b else 0) + mlp + 2 * norm
    total = layers * per_layer + channels * patch * patch * temporal * h
    total += h if lay["patch_bias"] else 0
    if lay["positions"]:
        grid = (_pos_int(vcfg, "image_size", "vision_config") // patch) ** 2
        total += (grid + 1) * h + h if lay["positions"] == "learned+class" else grid * h
    total += norm * (lay["pre"] + lay["post"])
    if kind == "siglip_vision_model" and vcfg.get("vision_use_head", True):
        # SiglipMultiheadAttentionPoolingHead: probe, attention (in/out projections), norm, MLP
        total += h + 4 * h * h + 4 * h + 2 * h + 2 * h * inter + inter + h
    return total + _projector_params(kind, vcfg, h, text_hidden, outer)
