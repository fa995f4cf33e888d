"""Model presets as data: the attention and size fields of real models' published `config.json`.

Field names are the `config.json` keys, so every value can be checked against the file named in
`source` (a Hugging Face repository and file). Only what KV-cache and weight sizing need is kept.

Parameter counts are *computed* from these fields by `param_count` (embeddings, attention,
MLP or experts, norms, biases: every tensor the checkpoint holds for the main model), and each
preset also stores the count its authors published (`published_params`, with `params_source`
saying where). `tests/test_models.py` checks that the two agree to within 1 %, and the computed
counts that the Hugging Face model pages list to the parameter are asserted exactly there.

Conventions:
* `num_key_value_heads` is the number of K/V heads (MHA: = heads, GQA: fewer, MQA: 1). For MLA
  models the config repeats `num_attention_heads` there; MLA caches no per-head K/V at all, so
  sizing uses `kv_lora_rank + qk_rope_head_dim` instead (see `inferbook.sizing`).
* `sliding_window` is the window of the layers that use one; `sliding_window_layers` says which:
  "all" (Mistral-7B-v0.1), "even" (Gemma-2: layers 0, 2, 4, ... are local, the odd ones global,
  as in the Transformers implementation, `is_sliding = not layer_idx % 2`), or one bool per
  layer (a config's `layer_types`).

Names: `model(name)` accepts a preset name or a Hugging Face repository (base or chat),
case-insensitively; `ModelSpec.from_hf_config(dict | path)` reads any other model's config.json
(Llama, Mistral, Qwen2, Gemma-2, Phi-3, Mixtral, DeepSeek-V2/V3 field names). A raw config dict
passed where a spec is expected raises TypeError pointing to `from_hf_config` (`as_spec`).
* DeepSeek-V3's checkpoint also ships one multi-token-prediction layer (`num_nextn_predict_layers`);
  it is used only for speculative decoding, so it is not counted here (the paper's 671B excludes it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


CHECKPOINT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "awq", "w4a16", "mxfp4")


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture, as published in its config.json (field names are the config keys)."""

    name: str
    source: str                      # "<HF repository>/config.json" the values come from
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int                    # per-head K/V width (MLA: qk_nope_head_dim + qk_rope_head_dim)
    intermediate_size: int           # dense MLP width
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False     # q/k/v projections carry biases (Qwen2)
    norms_per_layer: int = 2         # RMSNorm vectors per decoder layer (Gemma-2 has 4)
    sliding_window: int | None = None
    # "none" | "all" | "even", or one bool per layer (True: that layer uses the window)
    sliding_window_layers: str | tuple[bool, ...] = "none"
    # mixture of experts (Mixtral: num_local_experts; DeepSeek: n_routed_experts)
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0   # expert width (Mixtral: = intermediate_size)
    n_shared_experts: int = 0
    first_k_dense_replace: int = 0   # DeepSeek: the first k layers keep a dense MLP
    router_bias: bool = False        # DeepSeek-V3: e_score_correction_bias per expert
    # multi-head latent attention (DeepSeek); kv_lora_rank == 0 means not MLA
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # published parameter count and where it is stated
    published_params: float = 0.0
    params_source: str = ""
    # the instruction-tuned repository a chat or agent deployment serves ("" if none published)
    chat_repo: str = ""
    # The chat repository's own context limit when it differs from the base model's (0: same).
    # Qwen2.5-*-Instruct ship max_position_embeddings 32768 and reach 128K only with YaRN;
    # `chat_rope_scaling` is the override vLLM needs for more (JSON for --hf-overrides /
    # --rope-scaling), as the model card gives it.
    chat_max_position_embeddings: int = 0
    chat_rope_scaling: str = ""
    # how the checkpoint stores its weights: "bf16", "fp16", "fp32", "fp8", "int8", "int4",
    # "awq" (AWQ/GPTQ 4-bit, group 128), "w4a16" (compressed-tensors 4-bit) or "mxfp4" (gpt-oss:
    # routed experts only); sizing.weight_bytes's default
    checkpoint_dtype: str = "bf16"
    # parameters outside the language model the checkpoint also loads (a vision tower)
    vision_params: int = 0

    def __post_init__(self) -> None:
        for field in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                      "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                      "max_position_embeddings"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive int (not a bool), "
                                 f"got {value!r}")
        for field in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "n_shared_experts", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank",
                      "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.name}: {field} must be an int (not a bool), "
                                 f"got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{self.name}: num_attention_heads={self.num_attention_heads} is not divisible by "
                f"num_key_value_heads={self.num_key_value_heads}; each KV head must serve a whole "
                "group of query heads"
            )
        layers = self.sliding_window_layers
        if isinstance(layers, tuple):
            if len(layers) != self.num_hidden_layers or not all(isinstance(b, bool) for b in layers):
                raise ValueError(f"{self.name}: sliding_window_layers as a tuple needs one bool "
                                 f"per layer ({self.num_hidden_layers}), got {layers!r}")
        elif layers not in ("none", "all", "even"):
            raise ValueError(f"{self.name}: sliding_window_layers must be 'none', 'all', 'even' "
                             f"or one bool per layer, got {layers!r}")
        if (self.sliding_window_layers == "none") != (self.sliding_window is None):
            raise ValueError(f"{self.name}: give sliding_window together with sliding_window_layers "
                             f"('all' or 'even'), got {self.sliding_window!r} and "
                             f"{self.sliding_window_layers!r}")
        if self.sliding_window is not None and (isinstance(self.sliding_window, bool) or not
                                                isinstance(self.sliding_window, int)
                                                or self.sliding_window <= 0):
            raise ValueError(f"{self.name}: sliding_window must be positive, got {self.sliding_window}")
        if self.is_mla and (self.qk_rope_head_dim <= 0 or self.v_head_dim <= 0
                            or self.qk_nope_head_dim <= 0):
            raise ValueError(f"{self.name}: an MLA model needs positive qk_nope_head_dim, "
                             "qk_rope_head_dim and v_head_dim")
        if self.kv_lora_rank < 0:
            raise ValueError(f"{self.name}: kv_lora_rank must be >= 0, got {self.kv_lora_rank}")
        if self.checkpoint_dtype not in CHECKPOINT_DTYPES:
            raise ValueError(f"{self.name}: checkpoint_dtype must be one of "
                             f"{', '.join(CHECKPOINT_DTYPES)}, got {self.checkpoint_dtype!r}")
        for field in ("chat_max_position_embeddings", "vision_params"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{self.name}: {field} must be an int >= 0, got {value!r}")

    @property
    def chat_context_limit(self) -> int:
        """Return the context the chat repository serves without rope-scaling overrides."""
        return self.chat_max_position_embeddings or self.max_position_embeddings

    @classmethod
    def from_hf_config(cls, config: dict | str | Path, name: str | None = None) -> "ModelSpec":
        """Return the spec of a Hugging Face `config.json` (a dict, a file, or a folder holding one).

        Reads the Llama, Mistral, Qwen2/2.5/3, Qwen3-MoE, Gemma-2/3, Phi-3, Mixtral, gpt-oss and
        DeepSeek-V2/V3 field names (and any config that uses the same keys):

        * sliding windows from `layer_types` ("sliding_attention" / "full_attention"), Gemma-3's
          `sliding_window_pattern` (every N-th layer global), `use_sliding_window` /
          `max_window_layers` (Qwen2) or the family's pattern (Gemma-2: even layers);
        * MLA from `kv_lora_rank`;
        * experts from `num_experts` (Qwen-MoE), `num_local_experts` (Mixtral, gpt-oss) or
          `n_routed_experts` (DeepSeek), expert width from `moe_intermediate_size` (else
          `intermediate_size`), shared experts from `n_shared_experts` or Qwen's
          `shared_expert_intermediate_size`, dense layers from `first_k_dense_replace` or a
          leading `mlp_only_layers`;
        * tied embeddings from `tie_word_embeddings` (Gemma: tied unless it says otherwise);
        * the stored weight format from `quantization_config` (fp8, AWQ/GPTQ/compressed-tensors
          4- and 8-bit, MXFP4) or `torch_dtype`;
        * multimodal wrappers: the language model from `text_config`, a vision tower's parameters
          estimated from `vision_config` (`vision_params`).

        What the spec cannot represent is refused, never approximated: linear-attention or
        state-space layers (`layer_types` entries other than the two attention kinds, Qwen3-Next's
        `full_attention_interval`, Mamba hybrids), MoE layers on a stride
        (`decoder_sparse_step` > 1, non-leading `mlp_only_layers`), a shared expert whose width is
        not a multiple of the routed experts', unknown quantization methods. A missing or
        malformed field raises ValueError naming it.
        """
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str (the spec's label) or None, got "
                            f"{type(name).__name__}")
        return _from_hf_config(config, name)

    @property
    def is_mla(self) -> bool:
        """Return True for multi-head latent attention (a compressed KV latent is cached)."""
        return self.kv_lora_rank > 0

    @property
    def attention(self) -> str:
        """Return the attention kind: "MHA", "GQA", "MQA" or "MLA"."""
        if self.is_mla:
            return "MLA"
        if self.num_key_value_heads == self.num_attention_heads:
            return "MHA"
        if self.num_key_value_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Return each layer's attention window in tokens (None: the layer attends to everything)."""
        n = self.num_hidden_layers
        if isinstance(self.sliding_window_layers, tuple):
            return tuple(self.sliding_window if b else None for b in self.sliding_window_layers)
        if self.sliding_window_layers == "all":
            return (self.sliding_window,) * n
        if self.sliding_window_layers == "even":
            return tuple(self.sliding_window if i % 2 == 0 else None for i in range(n))
        return (None,) * n

    @property
    def is_moe(self) -> bool:
        """Return True for a mixture-of-experts model."""
        return self.n_routed_experts > 0

    @property
    def n_params(self) -> int:
        """Return the total parameter count computed from the config (see `param_count`)."""
        return param_count(self)

    @property
    def n_active_params(self) -> int:
        """Return the parameters one token uses (MoE: only its top-k routed experts)."""
        return param_count(self, active_only=True)


def _attention_params(s: ModelSpec) -> int:
    h = s.hidden_size
    if s.is_mla:
        q_dim = s.num_attention_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim)
        if s.q_lora_rank:  # q_a_proj, q_a_layernorm, q_b_proj
            q = h * s.q_lora_rank + s.q_lora_rank + s.q_lora_rank * q_dim
        else:              # q_proj
            q = h * q_dim
        kv_a = h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank  # kv_a_proj_with_mqa + norm
        kv_b = s.kv_lora_rank * s.num_attention_heads * (s.qk_nope_head_dim + s.v_head_dim)
        o = s.num_attention_heads * s.v_head_dim * h
        return q + kv_a + kv_b + o
    q_out = s.num_attention_heads * s.head_dim
    kv_out = s.num_key_value_heads * s.head_dim
    params = h * q_out + 2 * h * kv_out + q_out * h
    if s.attention_bias:
        params += q_out + 2 * kv_out
    return params


def _mlp_params(s: ModelSpec, layer: int, active_only: bool) -> int:
    h = s.hidden_size
    if not s.is_moe or layer < s.first_k_dense_replace:
        return 3 * h * s.intermediate_size  # gate, up, down
    expert = 3 * h * s.moe_intermediate_size
    routed = s.num_experts_per_tok if active_only else s.n_routed_experts
    router = h * s.n_routed_experts + (s.n_routed_experts if s.router_bias else 0)
    return routed * expert + s.n_shared_experts * expert + router


def param_count(spec: ModelSpec, active_only: bool = False) -> int:
    """Return the parameter count of `spec`'s checkpoint (main model), computed tensor by tensor.

    `active_only=True` counts a token's share of an MoE: its `num_experts_per_tok` routed experts
    (plus shared experts, router and everything outside the MLP).
    """
    spec = as_spec(spec)
    if not isinstance(active_only, bool):
        raise TypeError(f"active_only must be True or False, got {active_only!r}")
    h = spec.hidden_size
    total = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2) + h  # embeddings + final norm
    total += spec.vision_params
    for layer in range(spec.num_hidden_layers):
        total += _attention_params(spec) + _mlp_params(spec, layer, active_only)
        total += spec.norms_per_layer * h
    return total


# ---------------------------------------------------------------------------------------------
# Hugging Face config.json


_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
             "vocab_size", "max_position_embeddings")


def _load_config(config) -> tuple[dict, str]:
    if isinstance(config, dict):
        return config, "config dict"
    if isinstance(config, (str, Path)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"config: no config.json at {str(path)!r}")
        return json.loads(path.read_text()), str(path)
    raise TypeError(f"config must be a config.json dict, a path to one, or its folder; "
                    f"got {type(config).__name__}")


def _int_field(cfg: dict, key: str, default=None, *, minimum: int = 1) -> int:
    value = cfg.get(key)
    value = default if value is None else value      # configs write null for "not used"
    if value is None:
        raise ValueError(f"config.json: required field {key!r} is missing")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"config.json: {key} must be an integer >= {minimum}, got {value!r}")
    return value


_ATTENTION_TYPES = ("full_attention", "sliding_attention")
# Keys of architectures whose layers are not all attention layers (state-space, linear attention).
_NON_ATTENTION_KEYS = ("full_attention_interval", "layers_block_type", "hybrid_override_pattern",
                       "attn_type_list", "linear_num_value_heads", "mamba_d_state", "ssm_cfg")


def _refuse(field: str, why: str):
    raise ValueError(f"config.json: {field}: {why}; ModelSpec cannot represent it, so it is "
                     "refused rather than sized wrongly")


def _window_layers(cfg: dict, kind: str, n_layers: int):
    """Return (sliding_window, sliding_window_layers) from the config's window fields."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, (list, tuple)) or len(types) != n_layers:
            raise ValueError(f"config.json: layer_types must list one entry per layer "
                             f"({n_layers}), got {types!r}"[:300])
        other = sorted({t for t in types if t not in _ATTENTION_TYPES}, key=str)
        if other:
            _refuse("layer_types", f"{other} layers are not attention layers (linear attention "
                                   "or state-space layers cache no K/V per token)")
        flags = tuple(t == "sliding_attention" for t in types)
    elif cfg.get("sliding_window_pattern") is not None and window is not None:
        pattern = _int_field(cfg, "sliding_window_pattern")   # Gemma-3: every N-th layer global
        flags = tuple((i + 1) % pattern != 0 for i in range(n_layers))
    elif kind.startswith("qwen") or "use_sliding_window" in cfg:
        first = cfg.get("max_window_layers", n_layers)  # HF Qwen2: layers >= max_window_layers
        flags = tuple(bool(cfg.get("use_sliding_window")) and i >= first for i in range(n_layers))
    elif kind == "gemma2":
        flags = tuple(i % 2 == 0 for i in range(n_layers))   # is_sliding = not layer_idx % 2
    else:
        flags = (window is not None,) * n_layers
    if window is None or not any(flags):
        return None, "none"
    window = _int_field(cfg, "sliding_window")
    if all(flags):
        return window, "all"
    if flags == tuple(i % 2 == 0 for i in range(n_layers)):
        return window, "even"
    return window, flags


def _checkpoint_dtype(cfg: dict) -> str:
    """Return how the checkpoint stores its weights (see ModelSpec.checkpoint_dtype)."""
    q = cfg.get("quantization_config")
    if q is None:
        torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        dtypes = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}
        if torch_dtype not in dtypes:
            raise ValueError(f"config.json: torch_dtype {torch_dtype!r} is not one of "
                             f"{', '.join(dtypes)}")
        return dtypes[torch_dtype]
    if not isinstance(q, dict):
        raise ValueError(f"config.json: quantization_config must be an object, got {q!r}")
    method = str(q.get("quant_method", "")).lower()
    bits = q.get("bits", q.get("w_bit"))
    if method in ("fp8", "fbgemm_fp8", "modelopt") and q.get("quant_algo", "FP8") == "FP8":
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "autoround"):
        if bits in (4, 8):
            return "awq" if bits == 4 else "int8"
        _refuse("quantization_config.bits", f"{method} with bits={bits!r} is not 4 or 8")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = [g.get("weights") or {} for g in groups.values() if isinstance(g, dict)]
        kinds = {(w.get("num_bits"), w.get("type")) for w in weights}
        if kinds == {(8, "float")}:
            return "fp8"
        if kinds == {(8, "int")}:
            return "int8"
        if kinds == {(4, "int")}:
            return "w4a16"
        _refuse("quantization_config.config_groups", f"compressed-tensors weights {kinds!r}")
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return "int4"
        if q.get("load_in_8bit"):
            return "int8"
    _refuse("quantization_config.quant_method", f"unknown quantization method {method!r}")


def _vision_params(vcfg) -> int:
    """Return a ViT-style vision tower's parameter estimate from `vision_config` (0 if none):
    per layer 4 h^2 (attention) + 2 h i (MLP), plus the projector h x (text hidden) is left out."""
    if not isinstance(vcfg, dict):
        return 0
    h = vcfg.get("hidden_size") or vcfg.get("embed_dim") or vcfg.get("width")
    layers = vcfg.get("num_hidden_layers") or vcfg.get("depth") or vcfg.get("layers")
    inter = vcfg.get("intermediate_size") or (4 * h if isinstance(h, int) else None)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
               for v in (h, layers, inter)):
        _refuse("vision_config", "a vision tower without integer hidden_size, "
                                 "num_hidden_layers/depth and intermediate_size")
    return layers * (4 * h * h + 2 * h * inter)


def _experts(cfg: dict, fields: dict) -> dict:
    """Return the MoE fields of the spec from whichever naming the config uses."""
    n_layers = fields["num_hidden_layers"]
    names = [k for k in ("n_routed_experts", "num_experts", "num_local_experts")
             if cfg.get(k) not in (None, 0)]
    if not names:
        for key in ("moe_intermediate_size", "num_experts_per_tok"):
            if cfg.get(key) not in (None, 0) and key == "moe_intermediate_size":
                _refuse(key, "an expert width without an expert count (num_experts, "
                             "num_local_experts or n_routed_experts)")
        return dict(n_routed_experts=0, num_experts_per_tok=0, moe_intermediate_size=0,
                    n_shared_experts=0, first_k_dense_replace=0)
    experts = _int_field(cfg, names[0])
    top_k = _int_field(cfg, "num_experts_per_tok", cfg.get("experts_per_token"))
    width = _int_field(cfg, "moe_intermediate_size", fields["intermediate_size"])
    shared = _int_field(cfg, "n_shared_experts", 0, minimum=0)
    shared_width = cfg.get("shared_expert_intermediate_size")
    if shared_width:
        shared_width = _int_field(cfg, "shared_expert_intermediate_size")
        if shared_width % width:
            _refuse("shared_expert_intermediate_size",
                    f"{shared_width} is not a multiple of moe_intermediate_size {width}")
        shared = shared_width // width
    first_dense = _int_field(cfg, "first_k_dense_replace", 0, minimum=0)
    step = _int_field(cfg, "decoder_sparse_step", 1)
    if step != 1:
        _refuse("decoder_sparse_step", f"MoE every {step} layers (dense layers in between)")
    dense = cfg.get("mlp_only_layers") or []
    if dense:
        if list(dense) != list(range(len(dense))):
            _refuse("mlp_only_layers", f"dense layers {list(dense)[:8]} are not the first k")
        first_dense = max(first_dense, len(dense))
    if first_dense > n_layers:
        raise ValueError(f"config.json: first_k_dense_replace ({first_dense}) exceeds "
                         f"num_hidden_layers ({n_layers})")
    return dict(n_routed_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
                n_shared_experts=shared, first_k_dense_replace=first_dense)


def _from_hf_config(config, name: str | None) -> ModelSpec:
    cfg, where = _load_config(config)
    vision = 0
    if "text_config" in cfg:                      # multimodal wrappers keep the LM inside
        if not isinstance(cfg["text_config"], dict):
            raise ValueError("config.json: text_config must be an object")
        vision = _vision_params(cfg.get("vision_config"))
        outer = {k: cfg[k] for k in ("quantization_config", "torch_dtype", "_name_or_path",
                                     "tie_word_embeddings") if k in cfg}
        cfg = {**outer, **cfg["text_config"]}
    kind = str(cfg.get("model_type", "")).lower()
    bad = [k for k in _NON_ATTENTION_KEYS if cfg.get(k) not in (None, [], 0)]
    if bad:
        _refuse(bad[0], "the model mixes attention with linear-attention or state-space layers")
    fields = {key: _int_field(cfg, key) for key in _REQUIRED}
    heads = fields["num_attention_heads"]
    mla = {key: _int_field(cfg, key, 0, minimum=0)
           for key in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                       "v_head_dim")}
    if mla["kv_lora_rank"]:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        head_dim = _int_field(cfg, "head_dim", fields["hidden_size"] // heads)
    window, layers = _window_layers(cfg, kind, fields["num_hidden_layers"])
    gemma = kind.startswith("gemma")
    label = name or cfg.get("_name_or_path") or kind or "config"
    return ModelSpec(
        str(label), where, **fields,
        num_key_value_heads=_int_field(cfg, "num_key_value_heads", heads), head_dim=head_dim,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
        attention_bias=bool(cfg.get("attention_bias", kind == "qwen2")),
        norms_per_layer=4 if gemma and kind != "gemma" else 2,
        sliding_window=window, sliding_window_layers=layers,
        **_experts(cfg, fields),
        router_bias=cfg.get("topk_method") == "noaux_tc", **mla,
        checkpoint_dtype=_checkpoint_dtype(cfg), vision_params=vision)


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


_QWEN25_YARN = ('{"rope_type":"yarn","factor":4.0,'
                '"original_max_position_embeddings":32768}')
_LLAMA31_CARD = "model card, huggingface.co/meta-llama/Llama-3.1-8B (Llama 3.1 family table)"

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec(
            "Llama-2-7B", _hf("meta-llama/Llama-2-7b-hf"),
            num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
            head_dim=128, intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096,
            published_params=6.74e9,
            params_source="model page, huggingface.co/meta-llama/Llama-2-7b-hf: 6.74B params "
                          "(the Llama 2 paper rounds it to 7B)",
            chat_repo="meta-llama/Llama-2-7b-chat-hf",
        ),
        ModelSpec(
            "Llama-3.1-8B", _hf("meta-llama/Llama-3.1-8B"),
            num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
            head_dim=128, intermediate_size=14336, vocab_size=128256,
            max_position_embeddings=131072,
            published_params=8e9, params_source=_LLAMA31_CARD + ": 8B",
            chat_repo="meta-llama/Llama-3.1-8B-Instruct",
        ),
        ModelSpec(
            "Llama-3.1-70B", _hf("meta-llama/Llama-3.1-70B"),
            num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
            head_dim=128, intermediate_size=28672, vocab_size=128256,
            max_position_embeddings=131072,
            published_params=70e9, params_source=_LLAMA31_CARD + ": 70B",
            chat_repo="meta-llama/Llama-3.1-70B-Instruct",
        ),
        ModelSpec(
            "Llama-3.1-405B", _hf("meta-llama/Llama-3.1-405B"),
            num_hidden_layers=126, hidden_size=16384, num_attention_heads=128,
            num_key_value_heads=8, head_dim=128, intermediate_size=53248, vocab_size=128256,
            max_position_embeddings=131072,
            published_params=405e9, params_source=_LLAMA31_CARD + ": 405B",
            chat_repo="meta-llama/Llama-3.1-405B-Instruct",
        ),
        ModelSpec(
            "Mistral-7B-v0.1", _hf("mistralai/Mistral-7B-v0.1"),
            num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
            head_dim=128, intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768,
            sliding_window=4096, sliding_window_layers="all",
            published_params=7.3e9,
            params_source="Jiang et al. 2023 (Mistral 7B paper) and release post: 7.3B",
            chat_repo="mistralai/Mistral-7B-Instruct-v0.1",
        ),
        ModelSpec(
            "Mixtral-8x7B", _hf("mistralai/Mixtral-8x7B-v0.1"),
            num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
            head_dim=128, intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768,
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=14336,
            published_params=47e9,
            params_source="Jiang et al. 2024 (Mixtral of Experts paper): 47B total, 13B active",
            chat_repo="mistralai/Mixtral-8x7B-Instruct-v0.1",
        ),
        ModelSpec(
            "Qwen2.5-7B", _hf("Qwen/Qwen2.5-7B"),
            num_hidden_layers=28, hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
            head_dim=128, intermediate_size=18944, vocab_size=152064,
            max_position_embeddings=131072, attention_bias=True,
            published_params=7.61e9, params_source="model card, huggingface.co/Qwen/Qwen2.5-7B: 7.61B",
            chat_repo="Qwen/Qwen2.5-7B-Instruct",
            # huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json: 32768; the
            # model card enables 128K with YaRN (factor 4 over 32768)
            chat_max_position_embeddings=32768, chat_rope_scaling=_QWEN25_YARN,
        ),
        ModelSpec(
            "Qwen2.5-14B", _hf("Qwen/Qwen2.5-14B"),
            num_hidden_layers=48, hidden_size=5120, num_attention_heads=40, num_key_value_heads=8,
            head_dim=128, intermediate_size=13824, vocab_size=152064,
            max_position_embeddings=131072, attention_bias=True,
            published_params=14.7e9,
            params_source="model card, huggingface.co/Qwen/Qwen2.5-14B: 14.7B",
            chat_repo="Qwen/Qwen2.5-14B-Instruct",
            # huggingface.co/Qwen/Qwen2.5-14B-Instruct/blob/main/config.json: 32768; the
            # model card enables 128K with YaRN (factor 4 over 32768)
            chat_max_position_embeddings=32768, chat_rope_scaling=_QWEN25_YARN,
        ),
        ModelSpec(
            "Qwen2.5-72B", _hf("Qwen/Qwen2.5-72B"),
            num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
            head_dim=128, intermediate_size=29568, vocab_size=152064,
            max_position_embeddings=131072, attention_bias=True,
            published_params=72.7e9,
            params_source="model card, huggingface.co/Qwen/Qwen2.5-72B: 72.7B",
            chat_repo="Qwen/Qwen2.5-72B-Instruct",
            # huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json: 32768; the
            # model card enables 128K with YaRN (factor 4 over 32768)
            chat_max_position_embeddings=32768, chat_rope_scaling=_QWEN25_YARN,
        ),
        ModelSpec(
            "Gemma-2-9B", _hf("google/gemma-2-9b"),
            num_hidden_layers=42, hidden_size=3584, num_attention_heads=16, num_key_value_heads=8,
            head_dim=256, intermediate_size=14336, vocab_size=256000, max_position_embeddings=8192,
            tie_word_embeddings=True, norms_per_layer=4,
            sliding_window=4096, sliding_window_layers="even",
            published_params=9.24e9,
            params_source="Gemma Team 2024 (Gemma 2 paper), Table 2: 8,324,201,984 non-embedding "
                          "+ 917,504,000 embedding parameters",
            chat_repo="google/gemma-2-9b-it",
        ),
        ModelSpec(
            "DeepSeek-V2-Lite", _hf("deepseek-ai/DeepSeek-V2-Lite"),
            num_hidden_layers=27, hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
            head_dim=192, intermediate_size=10944, vocab_size=102400,
            max_position_embeddings=163840,
            n_routed_experts=64, num_experts_per_tok=6, moe_intermediate_size=1408,
            n_shared_experts=2, first_k_dense_replace=1,
            kv_lora_rank=512, q_lora_rank=0, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128,
            published_params=15.7e9,
            params_source="DeepSeek-AI 2024 (DeepSeek-V2 paper), DeepSeek-V2-Lite: 15.7B total, "
                          "2.4B activated",
            chat_repo="deepseek-ai/DeepSeek-V2-Lite-Chat",
        ),
        ModelSpec(
            "DeepSeek-V3", _hf("deepseek-ai/DeepSeek-V3"),
            num_hidden_layers=61, hidden_size=7168, num_attention_heads=128,
            num_key_value_heads=128, head_dim=192, intermediate_size=18432, vocab_size=129280,
            max_position_embeddings=163840,
            n_routed_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048,
            n_shared_experts=1, first_k_dense_replace=3, router_bias=True,
            kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128,
            published_params=671e9,
            params_source="DeepSeek-AI 2024 (DeepSeek-V3 technical report): 671B total, 37B "
                          "activated (the 685B on the model page adds the 14B MTP module)",
            chat_repo="deepseek-ai/DeepSeek-V3",
        ),
    ]
}


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _aliases(spec: ModelSpec) -> set[str]:
    """Return the names a preset answers to: its name and its base and chat repositories."""
    repo = re.search(r"huggingface\.co/([^/]+/[^/]+)/", spec.source)
    names = {spec.name}
    for r in ([repo.group(1)] if repo else []) + ([spec.chat_repo] if spec.chat_repo else []):
        names |= {r, r.split("/", 1)[1]}
    return {_norm(n) for n in names}


def model(name: str) -> ModelSpec:
    """Return the preset called `name`: its preset name or Hugging Face repository, base or chat
    (case-insensitive; spaces and underscores read as hyphens), e.g. "llama-3.1-8b" or
    "meta-llama/Llama-3.1-8B-Instruct". ValueError lists the known presets."""
    if isinstance(name, dict):
        raise TypeError("model() takes a preset name; for a config.json dict use "
                        "ModelSpec.from_hf_config(config)")
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    key = _norm(name)
    for spec in MODELS.values():
        if key in _aliases(spec):
            return spec
    raise ValueError(f"name: unknown model preset {name!r}; known presets: {', '.join(MODELS)} "
                     "(for another model: ModelSpec.from_hf_config(its config.json))")


def as_spec(spec) -> ModelSpec:
    """Return `spec` as a ModelSpec: a ModelSpec, or a preset name (see `model`).

    A raw config.json dict is refused with a TypeError pointing to `ModelSpec.from_hf_config`.
    """
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        return model(spec)
    if isinstance(spec, dict):
        raise TypeError("a config.json dict is not a ModelSpec: convert it with "
                        "ModelSpec.from_hf_config(config)")
    raise TypeError(f"spec must be a ModelSpec or a preset name, got {type(spec).__name__}")
