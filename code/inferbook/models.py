"""Model presets as data: the attention and size fields of real models' published `config.json`.

Field names are the `config.json` keys, so every value can be checked against the file named in
`source`. Only what KV-cache and weight sizing need is kept. Parameter counts are *computed* from
these fields by `param_count` (every tensor the checkpoint holds for the main model) and checked
against the count the authors published (`published_params`, `params_source`) in
`tests/test_models.py`, exactly where a model page lists the count to the parameter.

Conventions:
* `num_key_value_heads` is the number of K/V heads (MHA: = heads, GQA: fewer, MQA: 1). MLA
  configs repeat `num_attention_heads` there, but MLA caches no per-head K/V: sizing uses
  `kv_lora_rank + qk_rope_head_dim` instead (`inferbook.sizing`).
* `sliding_window_layers` says which layers use `sliding_window`: "all" (Mistral-7B-v0.1), "even"
  (Gemma-2: layers 0, 2, 4, ... local, as Transformers' `is_sliding = not layer_idx % 2`), or one
  bool per layer (a config's `layer_types`).
* DeepSeek-V3's multi-token-prediction layer (`num_nextn_predict_layers`) serves only
  speculative decoding and is not counted (the paper's 671B excludes it).

Names: `model(name)` (a preset or Hugging Face repository), `ModelSpec.from_hf_config` (any
other config.json); `as_spec` and `require_spec` for the package's entry and inner functions.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import checkpoint_format, vision_towers

CHECKPOINT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "awq", "w4a16", "mxfp4",
                     "nvfp4")


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
    # the chat repository's context limit if not the base's (0: same; Qwen2.5-*-Instruct: 32768,
    # 128K only with YaRN, `chat_rope_scaling`: vLLM's override, as the model card gives it)
    chat_max_position_embeddings: int = 0
    chat_rope_scaling: str = ""
    # how the checkpoint stores its weights (CHECKPOINT_DTYPES; "awq": AWQ/GPTQ 4-bit, group 128;
    # "mxfp4": gpt-oss's routed experts only); sizing.weight_bytes's default
    checkpoint_dtype: str = "bf16"
    # parameters outside the language model the checkpoint also loads (a vision tower, its
    # patch embedding and the projector into the language model)
    vision_params: int = 0
    # GPT-2-style layers: LayerNorm with a bias, a plain (not gated) MLP with biases, a bias on
    # the attention output, learned absolute positions (rows of the position embedding)
    mlp_gated: bool = True
    mlp_bias: bool = False
    attention_out_bias: bool = False
    norm_bias: bool = False
    learned_positions: int = 0
    qk_norm: bool = False            # an RMSNorm over each head's q and k (Qwen3, Gemma-3)
    # windowed layers: "sliding" (moves with each token) or "chunked" (Llama-4: a token attends
    # within its chunk of `sliding_window` tokens, so the layer caches at most that many)
    local_attention: str = "sliding"
    # one bool per layer, True where the layer is MoE ((): all but the first_k_dense_replace)
    moe_layer_flags: tuple[bool, ...] = ()

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
        if self.local_attention not in ("sliding", "chunked"):
            raise ValueError(f"{self.name}: local_attention must be 'sliding' or 'chunked', got "
                             f"{self.local_attention!r}")
        for field in ("mlp_gated", "mlp_bias", "attention_out_bias", "norm_bias", "qk_norm"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{self.name}: {field} must be True or False, got "
                                 f"{getattr(self, field)!r}")
        flags = self.moe_layer_flags
        if flags and (len(flags) != self.num_hidden_layers
                      or not all(isinstance(b, bool) for b in flags)):
            raise ValueError(f"{self.name}: moe_layer_flags needs one bool per layer "
                             f"({self.num_hidden_layers}), got {flags!r}"[:300])
        for field in ("chat_max_position_embeddings", "vision_params", "learned_positions"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{self.name}: {field} must be an int >= 0, got {value!r}")

    @property
    def chat_context_limit(self) -> int:
        """Return the context the chat repository serves without rope-scaling overrides."""
        return self.chat_max_position_embeddings or self.max_position_embeddings

    @classmethod
    def from_hf_config(cls, config: dict | str | Path, name: str | None = None) -> ModelSpec:
        """Return the spec of a Hugging Face `config.json` (a dict, a file, or a folder holding one).

        Reads the keys as transformers defines them, for Llama(-4), Mistral, Qwen2/2.5/3(-MoE),
        Gemma-2/3, Phi-3, Mixtral, gpt-oss, DeepSeek-V2/V3 and GPT-2 (`n_layer`, `n_embd`,
        `n_head`, `n_positions`, `n_inner`: LayerNorm with biases, a plain MLP, learned
        positions, tied embeddings):

        * windows from `layer_types` (sliding and Llama-4's chunked attention, whose layers
          cache at most `attention_chunk_size` tokens; Llama-4's NoPE layers are global, from
          `no_rope_layers`), Gemma-3's `sliding_window_pattern`, Qwen2's `use_sliding_window`;
        * MLA from `kv_lora_rank`; experts from `num_experts` / `num_local_experts` /
          `n_routed_experts`, shared experts (`n_shared_experts`, Qwen's
          `shared_expert_intermediate_size`, Llama-4's always-on one), dense layers
          (`first_k_dense_replace`, leading `mlp_only_layers`, Llama-4's `moe_layers` /
          `interleave_moe_layer_step` with `intermediate_size_mlp`);
        * the stored weight format (`inferbook.checkpoint_format`); a vision tower, its patch
          embedding and projector (`inferbook.vision_towers`).

        What the spec cannot represent is refused naming the field (linear-attention or
        state-space layers, MoE on a stride, unknown quantization or vision towers); a missing
        or malformed field raises ValueError naming it.
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

    def layer_is_moe(self, layer: int) -> bool:
        """Return True where decoder layer `layer` (0-based) has a mixture-of-experts MLP."""
        if not self.is_moe:
            return False
        if self.moe_layer_flags:
            return self.moe_layer_flags[layer]
        return layer >= self.first_k_dense_replace

    @property
    def n_moe_layers(self) -> int:
        """Return how many decoder layers are MoE layers."""
        return sum(self.layer_is_moe(i) for i in range(self.num_hidden_layers))

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
    if s.attention_out_bias:
        params += h
    if s.qk_norm:
        params += 2 * s.head_dim
    return params


def _mlp_params(s: ModelSpec, layer: int, active_only: bool) -> int:
    h = s.hidden_size
    if not s.layer_is_moe(layer):
        if not s.mlp_gated:                 # up, down (GPT-2's c_fc, c_proj)
            return 2 * h * s.intermediate_size + (s.intermediate_size + h if s.mlp_bias else 0)
        return 3 * h * s.intermediate_size + (2 * s.intermediate_size + h if s.mlp_bias else 0)
    expert = 3 * h * s.moe_intermediate_size
    routed = s.num_experts_per_tok if active_only else s.n_routed_experts
    router = h * s.n_routed_experts + (s.n_routed_experts if s.router_bias else 0)
    return routed * expert + s.n_shared_experts * expert + router


def param_count(spec: ModelSpec, active_only: bool = False) -> int:
    """Return the parameter count of `spec`'s checkpoint (main model), computed tensor by tensor.

    `active_only=True` counts a token's share of an MoE: its `num_experts_per_tok` routed experts
    (plus shared experts, router and everything outside the MLP).
    """
    spec = require_spec(spec)
    if not isinstance(active_only, bool):
        raise TypeError(f"active_only must be True or False, got {active_only!r}")
    h = spec.hidden_size
    norm = 2 * h if spec.norm_bias else h                 # LayerNorm: weight and bias
    total = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2) + norm  # + final norm
    total += spec.learned_positions * h + spec.vision_params
    for layer in range(spec.num_hidden_layers):
        total += _attention_params(spec) + _mlp_params(spec, layer, active_only)
        total += spec.norms_per_layer * norm
    return total


# Hugging Face config.json ---------------------------------------------------------------------

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


_ATTENTION_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
# Keys of architectures whose layers are not all attention layers (state-space, linear attention).
_NON_ATTENTION_KEYS = ("full_attention_interval", "layers_block_type", "hybrid_override_pattern",
                       "attn_type_list", "linear_num_value_heads", "mamba_d_state", "ssm_cfg")
# transformers' GPT-2 names (GPT2Config.attribute_map) for the canonical keys
_GPT2_NAMES = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size",
               "n_head": "num_attention_heads", "n_positions": "max_position_embeddings",
               "n_inner": "intermediate_size"}
_GPT2_KINDS = ("gpt2", "gpt_bigcode")


def _refuse(field: str, why: str):
    raise ValueError(f"config.json: {field}: {why}; ModelSpec cannot represent it, so it is "
                     "refused rather than sized wrongly")


def _layer_types(cfg: dict, kind: str, n_layers: int):
    """Return the config's layer types, as transformers derives them, or None if it has none.

    Llama-4 (`Llama4TextConfig.__post_init__`): "chunked_attention" for every layer with RoPE
    (`no_rope_layers[i] == 1`; by default all but every `no_rope_layer_interval`-th), the NoPE
    layers "full_attention"; no chunks when `attention_chunk_size` is null."""
    types = cfg.get("layer_types")
    if types is None and kind.startswith("llama4") and cfg.get("attention_chunk_size"):
        interval = _int_field(cfg, "no_rope_layer_interval", 4)
        rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n_layers)]
        if not isinstance(rope, (list, tuple)) or len(rope) != n_layers \
                or any(r not in (0, 1) for r in rope):
            raise ValueError(f"config.json: no_rope_layers must list 0 or 1 per layer "
                             f"({n_layers}), got {rope!r}"[:300])
        types = ["chunked_attention" if r else "full_attention" for r in rope]
    return types


def _window_layers(cfg: dict, kind: str, n_layers: int):
    """Return (window, sliding_window_layers, local_attention) from the config's window fields."""
    window = cfg.get("sliding_window")
    types = _layer_types(cfg, kind, n_layers)
    local = "sliding"
    if types is not None:
        if not isinstance(types, (list, tuple)) or len(types) != n_layers:
            raise ValueError(f"config.json: layer_types must list one entry per layer "
                             f"({n_layers}), got {types!r}"[:300])
        other = sorted({t for t in types if t not in _ATTENTION_TYPES}, key=str)
        if other:
            _refuse("layer_types", f"{other} layers are not attention layers (linear attention "
                                   "or state-space layers cache no K/V per token)")
        if "chunked_attention" in types:
            if "sliding_attention" in types:
                _refuse("layer_types", "both sliding-window and chunked layers")
            window, local = _int_field(cfg, "attention_chunk_size"), "chunked"
        flags = tuple(t != "full_attention" for t in types)
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
        return None, "none", "sliding"
    if local == "sliding":
        window = _int_field(cfg, "sliding_window")
    if all(flags):
        return window, "all", local
    if flags == tuple(i % 2 == 0 for i in range(n_layers)):
        return window, "even", local
    return window, flags, local


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
                    n_shared_experts=0, first_k_dense_replace=0, moe_layer_flags=())
    experts = _int_field(cfg, names[0])
    top_k = _int_field(cfg, "num_experts_per_tok", cfg.get("experts_per_token"))
    width = _int_field(cfg, "moe_intermediate_size", cfg.get("intermediate_size"))
    # Llama-4: every MoE layer also runs one shared expert of the experts' width
    # (Llama4TextMoe.shared_expert); there is no config key for it
    llama4 = str(cfg.get("model_type", "")).startswith("llama4")
    shared = _int_field(cfg, "n_shared_experts", 1 if llama4 else 0, minimum=0)
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
    flags: tuple[bool, ...] = ()
    if llama4:    # Llama4TextConfig: moe_layers, else every interleave_moe_layer_step-th layer
        stride = _int_field(cfg, "interleave_moe_layer_step", 1)
        moe = cfg.get("moe_layers")
        moe = list(range(stride - 1, n_layers, stride)) if moe is None else moe
        if not isinstance(moe, (list, tuple)) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers for i in moe):
            raise ValueError(f"config.json: moe_layers must list layer indices below "
                             f"{n_layers}, got {moe!r}"[:300])
        flags = tuple(i in set(moe) for i in range(n_layers))
        flags = () if all(flags) else flags
    return dict(n_routed_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
                n_shared_experts=shared, first_k_dense_replace=first_dense, moe_layer_flags=flags)


def _gpt2_names(cfg: dict, kind: str) -> dict:
    """Return `cfg` with GPT-2's field names read as the canonical ones (GPT2Config.attribute_map;
    `n_inner` null means 4 x n_embd), refusing them on an architecture laid out otherwise."""
    found = [k for k in _GPT2_NAMES if k in cfg]
    if not found:
        return cfg
    if kind not in _GPT2_KINDS:
        _refuse("model_type", f"{kind!r} uses GPT-2's field names ({', '.join(found)}) but not "
                              f"GPT-2's layer layout (known: {', '.join(_GPT2_KINDS)})")
    out = dict(cfg)
    for old, new in _GPT2_NAMES.items():
        if out.get(new) is None and out.get(old) is not None:
            out[new] = out[old]
    if out.get("intermediate_size") is None:
        out["intermediate_size"] = 4 * _int_field(out, "hidden_size")
    if kind == "gpt_bigcode" and out.get("multi_query", True):
        out.setdefault("num_key_value_heads", 1)
    return out


def _from_hf_config(config, name: str | None) -> ModelSpec:
    cfg, where = _load_config(config)
    outer = cfg
    if "text_config" in cfg:                      # multimodal wrappers keep the LM inside
        if not isinstance(cfg["text_config"], dict):
            raise ValueError("config.json: text_config must be an object")
        keep = {k: cfg[k] for k in ("quantization_config", "torch_dtype", "_name_or_path",
                                    "tie_word_embeddings") if k in cfg}
        cfg = {**keep, **cfg["text_config"]}
    elif "vision_config" in cfg:
        _refuse("vision_config", "a vision tower without a text_config language model")
    kind = str(cfg.get("model_type", "")).lower()
    cfg = _gpt2_names(cfg, kind)
    gpt2 = kind in _GPT2_KINDS
    bad = [k for k in _NON_ATTENTION_KEYS if cfg.get(k) not in (None, [], 0)]
    if bad:
        _refuse(bad[0], "the model mixes attention with linear-attention or state-space layers")
    fields = {key: _int_field(cfg, key) for key in _REQUIRED}
    if kind.startswith("llama4") and cfg.get("intermediate_size_mlp") is not None:
        fields["intermediate_size"] = _int_field(cfg, "intermediate_size_mlp")  # dense layers
    heads = fields["num_attention_heads"]
    mla = {key: _int_field(cfg, key, 0, minimum=0)
           for key in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                       "v_head_dim")}
    if mla["kv_lora_rank"]:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        head_dim = _int_field(cfg, "head_dim", fields["hidden_size"] // heads)
    window, layers, local = _window_layers(cfg, kind, fields["num_hidden_layers"])
    gemma = kind.startswith("gemma")
    label = name or cfg.get("_name_or_path") or kind or "config"
    vision = vision_towers.vision_params(outer.get("vision_config"), fields["hidden_size"], outer)
    return ModelSpec(
        str(label), where, **fields,
        num_key_value_heads=_int_field(cfg, "num_key_value_heads", heads), head_dim=head_dim,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma or gpt2)),
        attention_bias=bool(cfg.get("attention_bias", kind.startswith("qwen2") or gpt2)),
        norms_per_layer=4 if gemma and kind != "gemma" else 2,
        sliding_window=window, sliding_window_layers=layers, local_attention=local,
        **_experts(cfg, fields),
        router_bias=cfg.get("topk_method") == "noaux_tc", **mla,
        checkpoint_dtype=checkpoint_format.checkpoint_dtype(cfg), vision_params=vision,
        mlp_gated=not gpt2, mlp_bias=gpt2, attention_out_bias=gpt2, norm_bias=gpt2,
        learned_positions=fields["max_position_embeddings"] if gpt2 else 0,
        qk_norm=kind.startswith(("qwen3", "gemma3")))


def _load_presets() -> dict[str, ModelSpec]:
    """Return the presets of `data/model_presets.json` (see its `_about`) as ModelSpecs."""
    data = json.loads((Path(__file__).resolve().parent / "data" / "model_presets.json").read_text())
    out = {}
    for entry in data["presets"]:
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
        out[fields["name"]] = ModelSpec(**fields)
    return out


MODELS: dict[str, ModelSpec] = _load_presets()


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
    """Return `spec` (a ModelSpec or a preset name, see `model`) as a ModelSpec; a config.json
    dict is refused with a TypeError pointing to `ModelSpec.from_hf_config`."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        return model(spec)
    if isinstance(spec, dict):
        raise TypeError("a config.json dict is not a ModelSpec: convert it with "
                        "ModelSpec.from_hf_config(config)")
    raise TypeError(f"spec must be a ModelSpec or a preset name, got {type(spec).__name__}")


def require_spec(value, name: str = "spec") -> ModelSpec:
    """Return `value` if it is a `ModelSpec`; TypeError otherwise. For the package's inner
    functions: a preset name is resolved once, where the reader's call comes in (`as_spec`,
    `model`), and only the `ModelSpec` travels further."""
    if isinstance(value, ModelSpec):
        return value
    from .validate import ArgumentTypeError   # a TypeError (numpy only on this path)
    if isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a ModelSpec, got the name {value!r}: resolve it "
                                f"once at the entry point, models.model({value!r})")
    if isinstance(value, dict):
        raise ArgumentTypeError(f"{name}: a config.json dict is not a ModelSpec: convert it "
                                "with ModelSpec.from_hf_config(config)")
    raise ArgumentTypeError(f"{name} must be a ModelSpec, got {type(value).__name__}")
