"""A plan as Markdown, and the skill file's worked examples generated from the recommender."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .commands import format_command
from .recommend import Plan, Refusal, Workload, recommend

GB = 1e9


def choice(p: Plan, topic: str) -> str:
    """Return a plan's choice about `topic` in a few words (the table's second column)."""
    s = p.speculation
    fa = f" (FlashAttention-{p.flash_attention_version})" if p.flash_attention_version else ""
    return {
        "weights": p.weight_dtype
                   + (f" (--quantization {p.quantization})" if p.quantization else ""),
        "parallelism": (f"DP={p.data_parallel} attention + EP={p.expert_parallel}"
                        if p.expert_parallel > 1 else f"TP={p.tensor_parallel}"
                        + (f", PP={p.pipeline_parallel}" if p.pipeline_parallel > 1 else "")
                        + (f", DP={p.data_parallel}" if p.data_parallel > 1 else "")),
        "kv cache": f"paged, {p.kv_dtype}",
        "batching": f"--max-num-seqs {p.max_num_seqs}, --max-num-batched-tokens "
                    f"{p.max_num_batched_tokens}, --performance-mode {p.performance_mode}",
        "prefix caching": "on" if p.prefix_caching else "engine default",
        "attention": f"vLLM {p.vllm_attention_backend}{fa}, SGLang "
                     f"{p.sglang_attention_backend}, HF {p.hf_attn_implementation}",
        "speculative decoding": "off" if s is None else
                                f"{s.method}, k={s.num_tokens}" + (" (at most)" if s.method ==
                                                                   "suffix" else ""),
        "async scheduling": "on (--async-scheduling)" if p.async_scheduling else "off",
        "output parsing": "none" if p.parsers is None else ", ".join(
            x for x in (p.parsers.vllm_tool and f"tools: {p.parsers.vllm_tool}",
                        p.parsers.vllm_reasoning and f"reasoning: {p.parsers.vllm_reasoning}")
            if x),
    }[topic]


def _head(p: Plan | Refusal) -> str:
    w = p.workload
    return (f"**{p.model} on {p.num_gpus}x {p.gpu}**, {w.kind} workload, context "
            f"{w.context_tokens:,} tokens"
            + (f", typical {w.typical_tokens:,}" if w.typical_tokens else "")
            + (f", concurrency {w.concurrency}" if w.concurrency else "")
            + (f", shared prefix {w.shared_prefix_tokens:,}" if w.shared_prefix_tokens else "")
            + ".")


def _memory_line(p: Plan) -> str:
    m = p.memory
    r = m.runtime
    return (f"Per GPU (vLLM's budget): {p.gpu_memory_utilization:.2f} x "
            f"{m.gpu_bytes / GB:.1f} GB = {m.usable_bytes / GB:.1f} GB, minus weights "
            f"{m.weight_bytes / GB:.1f}, activations {r.activation_bytes / GB:.2f}, CUDA graphs "
            f"{r.cuda_graph_bytes / GB:.2f} and non-torch {r.non_torch_bytes / GB:.2f} GB, "
            f"leaves {m.kv_budget_bytes / GB:.1f} GB of KV cache "
            f"({p.kv_bytes_per_token / 1e3:.1f} kB per token per GPU): {p.seqs_at_typical} "
            f"typical requests per replica, {p.seqs_at_full_context} at full context. Chapter 9's "
            f"step-cost model at {min(p.max_num_seqs, max(1, p.seqs_at_typical))} running "
            f"requests: a decode step takes about {p.tpot_bound_ms:.1f} ms; all replicas together "
            f"produce about {p.throughput_bound_tok_s:,.0f} tokens/s.")


def render_markdown(p: Plan | Refusal) -> str:
    """Return a plan or refusal as Markdown: the header, decisions, warnings and commands."""
    if not p.ok:
        lines = [_head(p), "", f"**Refused** (chapter {p.chapter}): {p.reason}", ""]
        lines += [f"- instead: {s}" for s in p.suggestions]
        return "\n".join(lines) + "\n"
    lines = [_head(p), "", _memory_line(p), ""]
    if p.capacity is not None:
        c = p.capacity.value
        lines += [f"Chapter 9's simulator predicts p90 TTFT {c['p90_ttft_s']:.2f} s and p90 "
                  f"TPOT {c['p90_tpot_s'] * 1e3:.0f} ms at this configuration.", ""]
    lines += ["| decision | choice | why | chapter | vLLM source |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {choice(p, t)} | {d.reason} | {d.chapter} | {d.citation} |"
              for t, d in p.decisions]
    if p.sglang is not None and p.sglang.value is not None:
        lines += [f"| sglang memory | --mem-fraction-static "
                  f"{p.sglang.value.mem_fraction_static:.3f} | {p.sglang.reason} | "
                  f"{p.sglang.chapter} | {p.sglang.citation} |"]
    for name, d in p.alternatives:
        lines += (["", f"Alternative, {name}: {d.reason}."] if d.value is not None else
                  ["", f"Alternative, {name}: not applicable ({d.reason})."])
    if p.warnings:
        lines += [""] + [f"- warning: {x}" for x in p.warnings]
    for engine, nodes in (("vLLM", p.vllm_nodes), ("SGLang", p.sglang_nodes)):
        for node in nodes:
            if len(nodes) > 1 or node.count > 1:
                lines += ["", f"{engine}, {node.where}:"]
            lines += ["", "```bash", format_command(node.argv), "```"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Example:
    """A worked example of the skill file: a name and the call that produces it."""

    name: str
    model: str
    gpus: str
    workload: Workload
    served_model: str | None = None


WORKED_EXAMPLES: tuple[Example, ...] = (
    Example("t4-7b-chat", "Qwen2.5-7B", "1xT4", Workload("chat", context_tokens=8192)),
    Example("llama70b-4xh100-32k", "Llama-3.1-70B", "4xH100",
            Workload("chat", context_tokens=32768, typical_tokens=4096),
            served_model="meta-llama/Llama-3.1-70B-Instruct"),   # the lesson's repository
    Example("agent-shared-prompt", "Qwen2.5-14B", "2xA100",
            Workload("agent", context_tokens=16384, typical_tokens=8192, concurrency=64,
                     shared_prefix_tokens=6000)),
    Example("sliding-window-mistral-l4", "Mistral-7B-v0.1", "1xL4",
            Workload("chat", context_tokens=32768)),
    Example("deepseek-v3-8xh200", "DeepSeek-V3", "8xH200",
            Workload("chat", context_tokens=32768, typical_tokens=4096)),
    Example("mla-high-concurrency", "DeepSeek-V2-Lite", "4xH100",
            Workload("chat", context_tokens=16384, typical_tokens=2048, concurrency=1024)),
    Example("blackwell-batch", "Llama-3.1-70B", "8xB200",
            Workload("batch", context_tokens=16384, typical_tokens=2048),
            served_model="meta-llama/Llama-3.1-70B-Instruct"),
    Example("refusal-405b-on-h100", "Llama-3.1-405B", "4xH100",
            Workload("chat", context_tokens=8192)),
    Example("refusal-context", "Llama-2-7B", "1xA100", Workload("rag", context_tokens=32768)),
)


def run_example(ex: Example) -> Plan | Refusal:
    """Return the recommender's answer for a worked example."""
    return recommend(ex.model, ex.gpus, ex.workload, served_model=ex.served_model)


BEGIN = "<!-- BEGIN GENERATED {name}: python -m inferbook.recommend --update-skill -->"
END = "<!-- END GENERATED {name} -->"


def generated_block(ex: Example) -> str:
    """Return the skill file's generated block for one example, markers included."""
    return (BEGIN.format(name=ex.name) + "\n" + render_markdown(run_example(ex))
            + END.format(name=ex.name))


def update_skill_file(path: str | Path) -> list[str]:
    """Rewrite the generated blocks of the skill file at `path`; return the names updated."""
    path = Path(path)
    text = path.read_text()
    done = []
    for ex in WORKED_EXAMPLES:
        pattern = re.compile(re.escape(BEGIN.format(name=ex.name)) + r".*?"
                             + re.escape(END.format(name=ex.name)), re.S)
        if not pattern.search(text):
            raise ValueError(f"{path} has no generated block for {ex.name!r}")
        text = pattern.sub(lambda _m, ex=ex: generated_block(ex), text)
        done.append(ex.name)
    path.write_text(text)
    return done
