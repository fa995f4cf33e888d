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

CH_SERVING = "09_serving_at_scale"

# Pre-quantized chat checkpoints people deploy, per model preset and storage format
# ("fp8": W8A8 FP8, read natively on sm89+; "int4": AWQ 4-bit, run by vLLM's Marlin kernels).
PUBLISHED = {
    "Llama-3.1-8B": {"fp8": "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
                     "int4": "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"},
    "Llama-3.1-70B": {"fp8": "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
                      "int4": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4"},
    "Llama-3.1-405B": {"fp8": "nvidia/Llama-3.1-405B-Instruct-FP8"},
    "Qwen2.5-7B": {"int4": "Qwen/Qwen2.5-7B-Instruct-AWQ"},
    "Qwen2.5-14B": {"int4": "Qwen/Qwen2.5-14B-Instruct-AWQ"},
    "Qwen2.5-72B": {"int4": "Qwen/Qwen2.5-72B-Instruct-AWQ"},
}

# Public EAGLE-3 heads trained for a chat checkpoint (vLLM docs, features/speculative_decoding/
# eagle; the head's model card names the target).
EAGLE3_HEADS = {
    "meta-llama/Llama-3.1-8B-Instruct": "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
}


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
    """Return the published `fmt` ("fp8" or "int4") checkpoint of a model preset, or None."""
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
