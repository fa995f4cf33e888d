"""What a plan serves: the published checkpoints, draft heads and output parsers of a family.

Every repository here is a public Hugging Face repository (its page is the citation); every
parser name is a key of the pinned engines' registries (vLLM 0.33.0
`tool_parsers/__init__.py`, `reasoning/__init__.py`; SGLang 0.5.23
`srt/function_call/function_call_parser.py`, `srt/parser/reasoning_parser.py`), and the tests
check them against the stored argument data. A model not listed gets no published quantized
checkpoint (online FP8 instead), no draft head and no parsers, and the plan says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .decision import Decision
from .models import param_count

CH_SERVING = "09_serving_at_scale"

# Pre-quantized chat checkpoints people deploy, per model preset and storage format
# ("fp8": W8A8 FP8, read natively on sm89+; "nvfp4": NVIDIA's ModelOpt NVFP4, FP4 tensor cores
# on sm100 (listed in https://github.com/NVIDIA/TensorRT-Model-Optimizer README); "int4": AWQ
# 4-bit, run by vLLM's Marlin kernels).
PUBLISHED = {
    "Llama-3.1-8B": {"fp8": "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
                     "int4": "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"},
    "Llama-3.1-70B": {"fp8": "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
                      "int4": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4"},
    "Llama-3.1-405B": {"fp8": "nvidia/Llama-3.1-405B-Instruct-FP8",
                       "nvfp4": "nvidia/Llama-3.1-405B-Instruct-FP4"},
    "Qwen2.5-7B": {"int4": "Qwen/Qwen2.5-7B-Instruct-AWQ"},
    "Qwen2.5-14B": {"int4": "Qwen/Qwen2.5-14B-Instruct-AWQ"},
    "Qwen2.5-72B": {"int4": "Qwen/Qwen2.5-72B-Instruct-AWQ"},
}

# Public EAGLE-3 heads trained for a chat checkpoint (the head's model card names the target),
# each with where it is published: the first is the one a plan names.
EAGLE3_HEADS = {
    "meta-llama/Llama-3.1-8B-Instruct": "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
}
EAGLE3_HEAD_SOURCES = {
    "meta-llama/Llama-3.1-8B-Instruct": (
        ("RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
         "vLLM docs, features/speculative_decoding/eagle"),
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
         "https://github.com/SafeAILab/EAGLE (README, EAGLE-3 weights); vLLM's "
         "tests/v1/e2e/test_spec_decode.py")),
}
# An EAGLE-3 head is one decoder layer whose attention reads [embedding; hidden] (2h), an fc
# fusing three target layers (3h -> h) and its own LM head over a 32,000-token draft vocabulary
# (draft_vocab_size in https://github.com/sgl-project/SpecForge configs/llama3-70B-ealge3.json);
# it keeps the target's embedding (vLLM shares it: v1/spec_decode/llm_base_proposer.py
# `_maybe_share_embeddings`) and is stored in 16-bit.
EAGLE3_DRAFT_VOCAB = 32000
EAGLE3_BYTES_PER_PARAM = 2


@dataclass(frozen=True)
class DraftWeights:
    """What a speculative draft adds to every GPU: its parameters (the routed-expert part
    apart, which expert parallelism shards), their bytes per parameter, and the attention
    layers whose KV it keeps beside the target's (same per-layer size)."""

    method: str
    params: int
    expert_params: int
    bytes_per_param: float | None   # None: stored like the target's weights
    kv_layers: int
    what: str

    def bytes_per_gpu(self, tp: int, ep: int = 1, target_bytes_per_param: float = 2) -> int:
        """Return the draft's weight bytes on one GPU of a TP=`tp` (or EP=`ep`) layout whose
        weights take `target_bytes_per_param`."""
        dense = self.params - self.expert_params
        split = tp if ep == 1 else 1
        per = target_bytes_per_param if self.bytes_per_param is None else self.bytes_per_param
        return int((dense / split + self.expert_params / max(tp, ep)) * per)


def draft_weights(spec, method: str | None, mtp_layers: int = 0) -> DraftWeights | None:
    """Return the weights and KV layers vLLM loads for `method`'s draft, or None (n-gram and
    suffix decoding draft from token history: nothing to load).

    "mtp" (DeepSeek-V3's `num_nextn_predict_layers`): per layer one decoder layer like the
    model's last (MoE) one, `eh_proj` (2h -> h) and three RMSNorms (enorm, hnorm, the shared
    head's), stored like the target; embedding and LM head are the target's (vLLM shares them
    with an MTP draft: `_maybe_share_embeddings`, `_maybe_share_lm_head`). "eagle3": see
    `EAGLE3_DRAFT_VOCAB`.
    """
    h = spec.hidden_size
    if method == "mtp" and mtp_layers > 0:
        last = param_count(spec) - param_count(replace(spec, num_hidden_layers=(
            spec.num_hidden_layers - 1)))
        experts = (spec.n_routed_experts * 3 * h * spec.moe_intermediate_size
                   if spec.is_moe else 0)
        per_layer = last + 2 * h * h + 3 * h
        return DraftWeights("mtp", mtp_layers * per_layer, mtp_layers * experts, None,
                            mtp_layers,
                            f"{mtp_layers} MTP layer(s) of {per_layer / 1e9:.1f} B parameters "
                            "(a decoder layer, eh_proj and norms; embedding and LM head shared)")
    if method == "eagle3":
        q_out, kv_out = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
        attention = 2 * h * (q_out + 2 * kv_out) + q_out * h
        params = (attention + 3 * h * spec.intermediate_size + 4 * h + 3 * h * h
                  + EAGLE3_DRAFT_VOCAB * h)
        return DraftWeights("eagle3", params, 0, EAGLE3_BYTES_PER_PARAM, 1,
                            f"an EAGLE-3 head of {params / 1e9:.2f} B parameters (one decoder "
                            f"layer, fc and a {EAGLE3_DRAFT_VOCAB:,}-token LM head)")
    return None


@dataclass(frozen=True)
class Parsers:
    """The output parsers of one model family, by engine (None: the family has none)."""

    family: str
    vllm_tool: str | None
    vllm_reasoning: str | None
    sglang_tool: str | None
    sglang_reasoning: str | None


# (pattern on the served repository or model name, parsers), first match wins. Families whose
# chat template has no tool format (Llama 2, Mistral-7B-Instruct-v0.1, Mixtral v0.1, Gemma 2)
# are left out on purpose.
FAMILY_PARSERS = (
    (r"gpt-oss", Parsers("gpt-oss", "openai", "openai_gptoss", "gpt-oss", "gpt-oss")),
    (r"deepseek-r1", Parsers("DeepSeek-R1", "deepseek_v3", "deepseek_r1", "deepseekv3",
                             "deepseek-r1")),
    (r"deepseek-v3", Parsers("DeepSeek-V3", "deepseek_v3", None, "deepseekv3", None)),
    (r"qwen3-coder", Parsers("Qwen3-Coder", "qwen3_coder", None, "qwen3_coder", None)),
    (r"qwen3.*instruct-2507", Parsers("Qwen3 Instruct-2507 (no thinking)", "hermes", None,
                                      "qwen25", None)),
    (r"qwen3", Parsers("Qwen3", "hermes", "qwen3", "qwen25", "qwen3")),
    (r"qwen2\.5", Parsers("Qwen2.5", "hermes", None, "qwen25", None)),
    (r"llama-4", Parsers("Llama 4", "llama4_pythonic", None, "pythonic", None)),
    (r"llama-3\.[123]", Parsers("Llama 3.x", "llama3_json", None, "llama3", None)),
)


def parsers(*names: str) -> Parsers | None:
    """Return the parsers of the first family whose pattern matches one of `names`."""
    for pattern, found in FAMILY_PARSERS:
        if any(re.search(pattern, n, re.I) for n in names if n):
            return found
    return None


def published(model_name: str, fmt: str) -> str | None:
    """Return the published `fmt` ("fp8", "nvfp4" or "int4") checkpoint of a model preset, or
    None."""
    return PUBLISHED.get(model_name, {}).get(fmt)


def decide_parsers(spec, served: str, kind: str) -> Decision:
    """Return value = `checkpoints.Parsers` for agent plans (tool calls) and reasoning models
    (reasoning content), or None: the family's parsers in vLLM 0.33.0's and SGLang 0.5.23's
    registries."""
    found = parsers(served, spec.name)
    cite = ("vllm 0.33.0: tool_parsers/__init__.py, reasoning/__init__.py; sglang 0.5.23 "
            "srt/function_call/function_call_parser.py, srt/parser/reasoning_parser.py")
    if found is None:
        return Decision(None, "no tool-call or reasoning parser is registered for this family's "
                        "chat format" if kind == "agent" else "not a reasoning model; no tool "
                        "calls asked for", CH_SERVING)
    tools = kind == "agent" and found.vllm_tool is not None
    if not tools and found.vllm_reasoning is None:
        return Decision(None, "not a reasoning model, and a " + kind + " workload needs no "
                        "tool-call parser", CH_SERVING)
    value = replace(found, vllm_tool=found.vllm_tool if tools else None,
                    sglang_tool=found.sglang_tool if tools else None)
    why = (f"{found.family} checkpoints "
           + (f"emit tool calls that vLLM's {found.vllm_tool} and SGLang's {found.sglang_tool} "
              "parsers turn into OpenAI tool_calls" if tools else "")
           + ("; " if tools and found.vllm_reasoning else "")
           + (f"think before answering: the {found.vllm_reasoning} (vLLM) and "
              f"{found.sglang_reasoning} (SGLang) parsers return it as reasoning_content"
              if found.vllm_reasoning else ""))
    return Decision(value, why, CH_SERVING, cite)
