"""Plan a vLLM / SGLang deployment: the rules of `outputs/skill-inference-optimizer.md` as code.

    plan = recommend("Llama-3.1-70B", "4xH100", Workload("chat", context_tokens=32768))
    print(plan.vllm_command)

`recommend(model, gpus, workload)` returns a `Plan` (every decision with its reason, the chapter
that explains it and the vLLM source it relies on; the memory budget per GPU; the exact
``vllm serve`` command and the SGLang equivalent) or a `Refusal` (a request no configuration of
these GPUs can serve, with the numbers that say why). Invalid input raises ValueError/TypeError.

The module only composes. The rules are `inferbook.rules` (one function per decision), memory
is `inferbook.sizing`, commands are `inferbook.commands`, rendering (Markdown, the skill file)
is `inferbook.render`, and the command line is `inferbook.cli` (`python -m inferbook.recommend`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from . import (alternatives, checkpoints, parallelism, rules, sglang_rules, sizing,
               speculation_rules, validate, vllm_memory)
from .commands import NodeCommand, check_command, format_command, node_commands
from .arith import ceil_div
from .capacity import decide_capacity
from .decision import Decision
from .hardware import GPU, gpu as gpu_preset
from .models import ModelSpec, as_spec
from .speculation_rules import Speculation

WORKLOAD_KINDS = ("chat", "agent", "rag", "batch")
PRIORITIES = ("latency", "throughput")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92    # vLLM 0.33.0 config/cache.py: CacheConfig default


@dataclass(frozen=True)
class Workload:
    """What the deployment must serve. Token counts are prompt + output per request.

    kind: "chat" | "agent" (repeated system prompt / tool definitions) | "rag" (long documents)
          | "batch" (offline, throughput only).
    context_tokens: the longest request (becomes --max-model-len).
    typical_tokens: a typical request, for sizing concurrency (default: context_tokens).
    concurrency: requests in flight you must hold at once (None: vLLM's default cap).
    shared_prefix_tokens: tokens every request starts with (prefix caching stores them once);
          shorter than a typical request, which contains it.
    output_tokens: generated tokens per typical request (needed for capacity planning).
    priority: "latency" or "throughput" (default: latency for chat/agent, throughput otherwise).
    tpot_target_ms: a per-token latency target; TP grows until the roofline bound meets it.
    throughput_target_tok_s: decode tokens/s over all GPUs; a warning if even the roofline
          upper bound of the plan is below it.
    fp8_kv_quality_checked: you evaluated the model with an fp8 KV cache on your task.
    draft_model: an EAGLE-3 head (or draft model) you validated for this model.
    acceptance_rate: the draft acceptance rate you measured (else a stated assumption).
    allow_quantization: False forbids quantized weights (the request is refused instead).
    """

    kind: str = "chat"
    context_tokens: int = 8192
    typical_tokens: int | None = None
    concurrency: int | None = None
    shared_prefix_tokens: int = 0
    output_tokens: int | None = None
    priority: str | None = None
    tpot_target_ms: float | None = None
    throughput_target_tok_s: float | None = None
    fp8_kv_quality_checked: bool = False
    draft_model: str | None = None
    acceptance_rate: float | None = None
    allow_quantization: bool = True

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise ValueError(f"workload kind must be one of {WORKLOAD_KINDS}, got {self.kind!r}")
        for name in ("context_tokens", "typical_tokens", "concurrency", "output_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        prefix = self.shared_prefix_tokens
        if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
            raise ValueError(f"shared_prefix_tokens must be an integer >= 0, got {prefix!r}")
        if self.typical_tokens is not None and self.typical_tokens > self.context_tokens:
            raise ValueError(f"typical_tokens ({self.typical_tokens}) cannot exceed "
                             f"context_tokens ({self.context_tokens})")
        if prefix >= self.sizing_tokens:
            raise ValueError(f"shared_prefix_tokens ({prefix}) must be shorter than a typical "
                             f"request (typical_tokens or context_tokens: {self.sizing_tokens}), "
                             "which starts with it")
        if self.output_tokens is not None and self.output_tokens >= self.sizing_tokens:
            raise ValueError(f"output_tokens ({self.output_tokens}) must be shorter than a "
                             f"typical request ({self.sizing_tokens} tokens, prompt + output)")
        if self.priority is not None and self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES} or None, got {self.priority!r}")
        for name in ("tpot_target_ms", "throughput_target_tok_s"):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite positive number, got {value!r}")
        for name in ("fp8_kv_quality_checked", "allow_quantization"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.draft_model is not None and not (isinstance(self.draft_model, str)
                                                 and self.draft_model.strip()):
            raise TypeError(f"draft_model must be a repository name (a non-empty string) or "
                            f"None, got {self.draft_model!r}")
        if self.acceptance_rate is not None and not (_is_number(self.acceptance_rate)
                                                     and 0 < self.acceptance_rate < 1):
            raise ValueError(f"acceptance_rate must be in (0, 1), got {self.acceptance_rate!r}")

    @property
    def effective_priority(self) -> str:
        """Return the priority, defaulting to latency for interactive kinds."""
        if self.priority:
            return self.priority
        return "latency" if self.kind in ("chat", "agent") else "throughput"

    @property
    def sizing_tokens(self) -> int:
        """Return the tokens per request used to size concurrency."""
        return self.typical_tokens or self.context_tokens


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def resolve_gpus(gpus: str | tuple[str, int] | GPU) -> tuple[GPU, int]:
    """Return (GPU preset, count) from "4xH100", ("H100", 4), a GPU, or a preset name."""
    if isinstance(gpus, GPU):
        return gpus, 1
    if isinstance(gpus, tuple) and len(gpus) == 2:
        name, count = gpus
    elif isinstance(gpus, str):
        match = re.fullmatch(r"\s*(\d+)\s*[x×*]\s*(.+?)\s*", gpus)
        name, count = (match.group(2), int(match.group(1))) if match else (gpus, 1)
    else:
        raise ValueError(f"gpus must be like '4xH100', ('H100', 4) or a GPU, got {gpus!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise ValueError(f"GPU count must be a positive integer, got {count!r}")
    if count > MAX_GPUS:
        raise ValueError(f"GPU count {count:,} is more than any one deployment (at most "
                         f"{MAX_GPUS:,}): plan one engine and replicate it behind a router")
    return gpu_preset(name), count


def served_repo(spec: ModelSpec, base: bool = False) -> str:
    """Return the repository to serve: the chat (instruct) one for every workload (RAG and
    batch requests come through the chat API too, and a base checkpoint has no chat
    template), the base one only when asked (`base=True`) or when no chat one is published."""
    if spec.chat_repo and not base:
        return spec.chat_repo
    match = re.search(r"huggingface\.co/([^/]+/[^/]+)/", spec.source)
    return match.group(1) if match else spec.name


@dataclass(frozen=True)
class Plan:
    """A deployment plan. `ok` is True (a `Refusal` has `ok` False)."""

    model: str
    served_model: str
    gpu: str
    num_gpus: int
    workload: Workload
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    weight_dtype: str
    quantization: str | None
    compute_dtype: str
    kv_dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    performance_mode: str
    async_scheduling: bool
    seqs_at_typical: int          # requests of typical length the KV budget holds, per replica
    seqs_at_full_context: int
    prefix_caching: bool
    vllm_attention_backend: str
    flash_attention_version: int | None
    sglang_attention_backend: str
    hf_attn_implementation: str
    speculation: Speculation | None
    memory: vllm_memory.VllmBudget
    weight_bytes_total: int
    kv_bytes_per_token: int       # one token of one request, on one GPU
    kv_bytes_per_sequence: int    # one full-context request, on one GPU (windows capped)
    tpot_bound_ms: float          # one decode step at the running batch (chapter 9's cost model)
    throughput_bound_tok_s: float  # decode tokens/s, all replicas (chapter 9's cost model)
    decisions: tuple[tuple[str, Decision], ...]
    warnings: tuple[str, ...]
    capacity: Decision | None = None
    hf_overrides: str | None = None          # e.g. the RoPE scaling an Instruct model needs
    sglang: Decision | None = None           # value: sglang_rules.SglangMemory or None (no command)
    alternatives: tuple[tuple[str, Decision], ...] = ()   # sized alternatives (DP+EP, offload)
    vllm_argv: tuple[str, ...] = ()          # the first node's command (all of it on one node)
    sglang_argv: tuple[str, ...] = ()
    expert_parallel: int = 1                 # > 1: data-parallel attention + EP over that many GPUs
    parsers: checkpoints.Parsers | None = None   # tool-call / reasoning parsers (agent, reasoning)
    served_model_name: str = ""
    vllm_nodes: tuple[NodeCommand, ...] = ()   # one command per kind of node
    sglang_nodes: tuple[NodeCommand, ...] = ()
    ok: bool = True

    @property
    def nodes(self) -> int:
        """Return the nodes the plan's commands run on."""
        return sum(c.count for c in self.vllm_nodes) or 1

    @property
    def vllm_command(self) -> str:
        """Return the `vllm serve` command, one flag per line."""
        return format_command(self.vllm_argv)

    @property
    def sglang_command(self) -> str:
        """Return the SGLang launch command, one flag per line."""
        return format_command(self.sglang_argv)

    def decision(self, topic: str) -> Decision:
        """Return the decision about `topic` (e.g. "weights", "kv cache")."""
        for name, d in self.decisions:
            if name == topic:
                return d
        raise KeyError(topic)

    def __str__(self) -> str:
        return (f"{self.model} on {self.num_gpus}x {self.gpu}: {self.served_model}, "
                f"{self.weight_dtype} weights, TP={self.tensor_parallel} PP="
                f"{self.pipeline_parallel} DP={self.data_parallel} EP={self.expert_parallel} "
                "(inferbook.render.render_markdown shows the decisions)")


@dataclass(frozen=True)
class Refusal:
    """Why no configuration of these GPUs serves the request, with what would."""

    model: str
    gpu: str
    num_gpus: int
    workload: Workload
    reason: str
    suggestions: tuple[str, ...]
    chapter: str
    ok: bool = False

    def __str__(self) -> str:
        return f"refused: {self.model} on {self.num_gpus}x {self.gpu}: {self.reason}"


def recommend(model: ModelSpec | str, gpus: str | tuple[str, int] | GPU,
              workload: Workload | str = "chat", *, served_model: str | None = None,
              gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
              request_rate: float | None = None, ttft_p90_s: float | None = None,
              tpot_p90_s: float | None = None, base_model: bool = False) -> Plan | Refusal:
    """Return a deployment plan for `model` on `gpus` serving `workload`, or a Refusal.

    model: a preset name or a ModelSpec (`ModelSpec.from_hf_config` for others). gpus: "4xH100",
    ("H100", 4) or a GPU. served_model: the repository to serve (default: the preset's chat
    repository, or its base one with `base_model=True`; a published quantized checkpoint when
    the plan needs one). request_rate, ttft_p90_s, tpot_p90_s: size TP, replicas and
    --max-num-seqs with chapter 9's simulator instead of the memory-only rules.

    An entry point: the model and GPU names are resolved here, once; every rule below takes the
    resolved `ModelSpec` and `GPU`.
    """
    spec, (g, n), w = as_spec(model), resolve_gpus(gpus), _workload(workload)
    util = _arguments(served_model, gpu_memory_utilization, base_model)
    if w.context_tokens > spec.max_position_embeddings:
        return _refuse_context(spec, g, n, w)
    served = served_model or served_repo(spec, base_model)
    context = rules.decide_context(spec, served, w.context_tokens)
    if context.value is None:
        return Refusal(spec.name, g.name, n, w, context.reason,
                       tuple(context.extra["suggestions"]), rules.CH_SIZING)
    req = rules.PlanRequest(n, rules.kv_dtype_for(spec, g, w.fp8_kv_quality_checked),
                            w.effective_priority, w.concurrency, util,
                            speculation_rules.draft_for(spec, w.kind, w.effective_priority, w.draft_model))
    weights = _decide_weights(spec, g, w, req, served_model is not None)
    if weights.value is None:
        return _refuse_memory(spec, g, n, w, weights)
    if weights.value["quantization"] == "awq" and served_model is None:
        return _refuse_awq(spec, g, n, w)
    capacity = _capacity(spec, g, w, weights.value["weight_dtype"], req.kv_dtype, request_rate,
                         ttft_p90_s, tpot_p90_s, util)
    parallel = _decide_parallelism(spec, g, w, req, weights, capacity)
    if parallel.value is None:
        return Refusal(spec.name, g.name, n, w, parallel.reason,
                       ("more GPUs", "a lower request rate or looser p90 targets"),
                       rules.CH_SERVING)
    weights = parallelism.settle_format(weights, parallel)   # FP8 ranked beside 16-bit
    served = served_model or weights.value["served_repo"] or served
    lay, tokens, prefix = parallel.value["layout"], w.sizing_tokens, w.shared_prefix_tokens
    max_seqs = lay.batching.value["max_num_seqs"]
    speculation = speculation_rules.decide_speculation(
        spec, g, w.kind, req.priority, lay.weight_dtype, w.draft_model, w.acceptance_rate,
        max_seqs, lay.dp, running_batch=min(max_seqs, lay.sequences(spec, tokens, prefix)))
    if lay.draft is not None and speculation.value is None:   # off after all: no draft loaded
        lay = rules.layout(spec, g, lay.tp, lay.pp, lay.weight_dtype,
                           replace(req, draft=None, concurrency=None if req.concurrency is None
                                   else max_seqs * lay.dp), lay.ep)
        parallel = replace(parallel, value=dict(parallel.value, layout=lay))
    elif lay.draft is not None:
        speculation = replace(speculation, reason=speculation.reason + _draft_note(spec, lay))
    decisions = (
        ("weights", weights), ("parallelism", parallel),
        ("kv cache", rules.decide_kv_cache(spec, g, lay, w.context_tokens, tokens, prefix,
                                           w.fp8_kv_quality_checked)),
        ("batching", lay.batching),
        ("prefix caching", rules.decide_prefix_caching(w.kind, prefix, lay, spec, max_seqs)),
        ("attention", rules.decide_attention_backend(spec, g, req.kv_dtype)),
        ("speculative decoding", speculation),
        ("async scheduling", rules.decide_async_scheduling(
            speculation.value.method if speculation.value else None, lay.pp)),
        ("output parsing", checkpoints.decide_parsers(spec, served, w.kind)))
    return _assemble(spec, g, n, w, util, served, decisions, capacity, context)


MAX_GPUS = 100_000   # more than any one deployment: a typo or a fleet, never a plan


def _arguments(served_model, gpu_memory_utilization, base_model) -> float:
    """Check recommend's keyword arguments; return the utilization."""
    if served_model is not None and not (isinstance(served_model, str) and served_model.strip()):
        raise TypeError(f"served_model must be a repository name (a non-empty string) or None, "
                        f"got {served_model!r}")
    if not isinstance(base_model, bool):
        raise TypeError(f"base_model must be True or False, got {base_model!r}")
    util = validate.finite_float("gpu_memory_utilization", gpu_memory_utilization, maximum=1.0)
    if util <= 0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    return util


def _decide_weights(spec, g, w, req, served_given: bool) -> Decision:
    """Return the weight decision, taken at vLLM's default cap: a large requested concurrency
    is a queue, never a reason to quantize the weights (capped later to what the KV holds).
    A repository the user names is served in its own format: no FP8 checkpoint beside it."""
    default_seqs = rules.decide_batching(g, req.priority, None).value["max_num_seqs"]
    wreq = replace(req, concurrency=None if w.concurrency is None
                   else min(w.concurrency, req.n_gpus * default_seqs))
    d = rules.decide_weights(spec, g, w.context_tokens, wreq, w.allow_quantization)
    if served_given and d.value is not None and "rivals" in d.extra:
        own = [x for x in d.value["layouts"] if x.weight_dtype == d.value["weight_dtype"]]
        d = replace(d, value=dict(d.value, layouts=own), extra={})
    return d


def _decide_parallelism(spec, g, w, req, weights, capacity) -> Decision:
    """Return the parallelism decision at the requested concurrency, with --max-num-seqs
    capped at what each replica's KV cache holds (a fixed point: the cap changes the
    activation memory, which changes what fits)."""
    wdtype, tokens, prefix = weights.value["weight_dtype"], w.sizing_tokens, w.shared_prefix_tokens
    if capacity:
        return _capacity_parallelism(spec, g, w, req, wdtype, capacity)
    layouts = [lay for lay in (rules.layout(spec, g, x.tp, x.pp, x.weight_dtype, req, x.ep)
                               for x in weights.value["layouts"])
               if lay.sequences(spec, w.context_tokens) >= 1] or weights.value["layouts"]
    parallel = parallelism.decide_parallelism(spec, g, layouts, tokens, prefix, req,
                                              w.tpot_target_ms, w.output_tokens)
    lay = parallel.value["layout"]
    for _ in range(3):
        held = max(lay.sequences(spec, tokens, prefix), 1)
        if w.concurrency is None or lay.batching.value["max_num_seqs"] == held or (
                lay.batching.value["max_num_seqs"] < held and held * lay.dp >= w.concurrency):
            break
        lay = rules.layout(spec, g, lay.tp, lay.pp, lay.weight_dtype,
                           replace(req, concurrency=min(held * lay.dp, w.concurrency)), lay.ep)
        held = lay.sequences(spec, tokens, prefix)
        parallel = replace(parallel, value=dict(parallel.value, layout=lay), extra={
            "warning": f"only {held * lay.dp} of the {w.concurrency} requested {tokens:,}-token "
                       f"requests fit in the KV cache at once ({parallelism.describe(lay)}); "
                       f"the rest wait in the queue, so --max-num-seqs is capped at "
                       f"{max(held, 1)} per replica (a larger cap only adds sampler buffers): "
                       "more GPUs, or an fp8 KV cache after a quality check, would hold more"})
    return parallel


def _draft_note(spec, lay) -> str:
    """Return what the draft adds to every GPU's budget, for the speculation decision."""
    d = lay.draft
    per_gpu = d.bytes_per_gpu(lay.tp, lay.ep, sizing.get_dtype(lay.weight_dtype).bits / 8)
    layers = -(-spec.num_hidden_layers // lay.pp)
    return (f"; the draft ({d.what}) is in vLLM's budget: {per_gpu / 1e9:.2f} GB of weights per "
            f"GPU, and its KV beside the model's ({layers} + {d.kv_layers} attention layers per "
            "token), which vLLM pages together")


def _workload(workload) -> Workload:
    w = Workload(workload) if isinstance(workload, str) else workload
    if not isinstance(w, Workload):
        raise TypeError(f"workload must be a Workload or one of {WORKLOAD_KINDS}, "
                        f"got {type(workload).__name__}")
    return w


def _capacity(spec, g, w, weight_dtype, kv_dtype, request_rate, ttft_p90_s, tpot_p90_s, util):
    """Return chapter 9's capacity decision, or None when no rate and targets are given."""
    given = [request_rate, ttft_p90_s, tpot_p90_s]
    if all(v is None for v in given):
        return None
    if any(v is None for v in given) or not all(
            _is_number(v) and math.isfinite(v) and v > 0 for v in given):
        raise ValueError("request_rate, ttft_p90_s and tpot_p90_s go together, each a finite "
                         f"positive number; got {given}")
    if w.output_tokens is None:
        raise ValueError("capacity planning needs Workload(output_tokens=...): the simulator "
                         "splits each typical request into prompt and output")
    decision = decide_capacity(spec, g, request_rate=request_rate,
                               prompt_tokens=w.sizing_tokens - w.output_tokens,
                               output_tokens=w.output_tokens, ttft_p90_s=ttft_p90_s,
                               tpot_p90_s=tpot_p90_s, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                               gpu_memory_utilization=util)
    return decision if decision.value is not None else Decision(
        None, decision.reason, rules.CH_SERVING, decision.citation)


def _capacity_parallelism(spec, g, w, req, weight_dtype, capacity: Decision) -> Decision:
    """Return the parallelism decision that carries out chapter 9's capacity plan."""
    if capacity.value is None:
        return Decision(None, f"chapter 9's simulator finds no configuration that meets the "
                        f"targets: {capacity.reason}", rules.CH_SERVING)
    c = capacity.value
    tp, replicas, n = c["tensor_parallel_size"], c["replicas"], req.n_gpus
    if tp * replicas > n:
        return Decision(None, f"chapter 9's simulator needs {replicas} replica(s) of TP={tp}, "
                        f"{tp * replicas} GPUs; {n} are available", rules.CH_SERVING)
    req = replace(req, n_gpus=tp * replicas, concurrency=c["max_num_seqs"] * replicas)
    lay = rules.layout(spec, g, tp, 1, weight_dtype, req)
    if lay.sequences(spec, w.context_tokens) < 1:
        return Decision(None, f"chapter 9's plan (TP={tp}) leaves no room for one "
                        f"{w.context_tokens:,}-token request in vLLM's budget", rules.CH_SERVING)
    why = (f"TP={tp} x {replicas} replica(s): the fewest GPUs whose simulated p90 TTFT "
           f"({c['p90_ttft_s']:.2f} s) and TPOT ({c['p90_tpot_s'] * 1e3:.0f} ms) meet the "
           f"targets; {capacity.reason}")
    return Decision(dict(layout=lay, tp=tp, pp=1, dp=replicas), why, rules.CH_SERVING,
                    capacity.citation)


def _assemble(spec, g, n, w, util, served, decisions, capacity, context) -> Plan:
    """Return the plan the decisions describe, with its estimated speed and commands."""
    d = dict(decisions)
    lay, par = d["parallelism"].value["layout"], d["parallelism"].value
    kv, caps, att = d["kv cache"].value, d["batching"].value, d["attention"].value
    batch = max(1, min(caps["max_num_seqs"], kv["sequences"]))
    tokens = w.sizing_tokens
    warnings = [x for x in (d["parallelism"].extra.get("warning"), context.extra.get("warning"))
                if x]
    warnings += _warnings(spec, g, w, lay, kv, d["speculative decoding"].value)
    warnings += _fleet_warnings(spec, w, lay, n, kv["sequences"])
    step_s = parallelism.step_seconds(spec, g, lay, batch, tokens,
                                      None if capacity else w.output_tokens)
    throughput = par["dp"] * batch / step_s
    if w.throughput_target_tok_s is not None and throughput < w.throughput_target_tok_s:
        warnings.append(f"the target of {w.throughput_target_tok_s:,.0f} decode tokens/s is above"
                        f" chapter 9's estimate for this plan ({throughput:,.0f}): add GPUs")
    graphs = rules.cuda_graph_capture_max(g, caps["max_num_seqs"], caps["max_num_batched_tokens"])
    if batch > graphs:
        warnings.append(f"vLLM captures CUDA graphs up to {graphs} tokens per step "
                        f"(min(2 x --max-num-seqs, {rules.default_graph_ceiling(g)}, "
                        f"--max-num-batched-tokens)); decode steps of more than {graphs} of the "
                        f"{batch} running requests run without a full graph")
    alts = alternatives.alternatives(spec, g, n, w, lay, d["kv cache"].value, throughput,
                                     par.get("rates", ()))
    sglang = sglang_rules.decide_sglang(spec, g, w, lay, d["weights"].value["quantization"],
                                        caps)
    if sglang.value is None:
        warnings.append(f"no SGLang command: {sglang.reason}")
    plan = Plan(
        model=spec.name, served_model=served, gpu=g.name,
        num_gpus=n, workload=w, tensor_parallel=par["tp"], pipeline_parallel=par["pp"],
        data_parallel=par["dp"], weight_dtype=d["weights"].value["weight_dtype"],
        quantization=d["weights"].value["quantization"], compute_dtype=rules.compute_dtype(g),
        kv_dtype=kv["kv_dtype"], max_model_len=w.context_tokens, gpu_memory_utilization=util,
        max_num_seqs=caps["max_num_seqs"], max_num_batched_tokens=caps["max_num_batched_tokens"],
        performance_mode=caps["performance_mode"], async_scheduling=d["async scheduling"].value,
        seqs_at_typical=kv["sequences"], seqs_at_full_context=kv["full_sequences"],
        prefix_caching=d["prefix caching"].value, vllm_attention_backend=att["vllm"],
        flash_attention_version=att["flash_attention_version"],
        sglang_attention_backend=att["sglang"],
        hf_attn_implementation=att["hf"], speculation=d["speculative decoding"].value,
        memory=lay.budget, weight_bytes_total=sizing.weight_bytes(spec, lay.weight_dtype),
        kv_bytes_per_token=kv["per_token_bytes"],
        kv_bytes_per_sequence=lay.kv_bytes(spec, w.context_tokens),
        tpot_bound_ms=step_s * 1e3,
        throughput_bound_tok_s=throughput, decisions=tuple(decisions),
        warnings=tuple(warnings), capacity=capacity, hf_overrides=context.value["hf_overrides"],
        sglang=sglang, alternatives=alts, expert_parallel=lay.ep,
        parsers=d["output parsing"].value, served_model_name=_served_name(spec, served))
    vllm_nodes = node_commands(plan, "vllm")
    sglang_nodes = node_commands(plan, "sglang") if sglang.value is not None else ()
    plan = replace(plan, vllm_nodes=vllm_nodes, sglang_nodes=sglang_nodes,
                   vllm_argv=vllm_nodes[0].argv,
                   sglang_argv=sglang_nodes[0].argv if sglang_nodes else ())
    for engine, nodes in (("vllm", plan.vllm_nodes), ("sglang", plan.sglang_nodes)):
        for node in nodes:
            problems = check_command(node.argv, engine)
            if problems:   # a bug here, never the user's fault
                raise AssertionError(f"generated {engine} command is refused: {problems}")
    return plan


def _served_name(spec: ModelSpec, served: str) -> str:
    """Return the name clients call the model by: the preset's name (stable across formats and
    repositories), as --served-model-name."""
    return spec.name if spec.name and "/" not in spec.name else served.rsplit("/", 1)[-1]


ABSURD_FLEET_GPUS = 64   # more GPUs than 8 nodes: a fleet of deployments, not one


def _fleet_warnings(spec, w, lay, n, held_per_replica) -> list[str]:
    """Return warnings about GPUs the plan leaves idle or a fleet larger than the load."""
    out = []
    used = lay.dp * lay.tp * lay.pp if lay.ep == 1 else lay.dp
    if used < n:
        out.append(f"{n - used} of the {n} GPUs stay idle: {parallelism.describe(lay)} uses "
                   f"{used}")
    engines = used // parallelism.engine_gpus(lay)
    if n > ABSURD_FLEET_GPUS:
        out.append(f"{n:,} GPUs are a fleet, not one deployment: the plan is {engines:,} "
                   f"independent engine(s) of {parallelism.engine_gpus(lay)} GPU(s) behind a "
                   "router (one command per node below); size the fleet from the request "
                   "rate (request_rate=, ttft_p90_s=, tpot_p90_s=)")
    if w.concurrency is not None and held_per_replica > 0:
        per_engine = held_per_replica * max(1, lay.dp // max(engines, 1))
        needed = ceil_div(w.concurrency, per_engine)
        if needed < engines:
            out.append(f"{needed} of the {engines:,} engines already hold the {w.concurrency} "
                       "concurrent requests; the rest add throughput only")
    return out


def _warnings(spec, g, w, lay, kv, speculation) -> list[str]:
    out = []
    if kv["sequences"] < rules.MIN_USEFUL_BATCH:
        out.append(f"only {kv['sequences']} request(s) of {w.sizing_tokens:,} tokens fit per "
                   "replica: expect queueing (more GPUs, or quantized weights after a quality "
                   "check, would hold more)")
    if spec.is_mla and lay.tp > 1:
        out.append(
            f"MLA's latent KV is not split by TP: each of the {lay.tp} GPUs holds every "
            f"request's whole latent ({lay.kv_bytes(spec, w.context_tokens) / 1e9:.2f} GB at "
            f"{w.context_tokens:,} tokens); see the data-parallel attention + expert-parallel "
            "alternative below")
    if speculation is not None and speculation.acceptance_source == "assumed":
        out.append(f"the {speculation.method} acceptance rate {speculation.acceptance:g} is an "
                   "assumption: measure it (vLLM logs it) and pass acceptance_rate=")
    return out


def _refuse_context(spec, g, n, w) -> Refusal:
    return Refusal(
        spec.name, g.name, n, w,
        f"{spec.name} supports at most {spec.max_position_embeddings:,} positions "
        f"(max_position_embeddings in {spec.source}); {w.context_tokens:,} were requested. "
        "A serving flag cannot extend it: longer contexts need a model trained (or RoPE-scaled "
        "and evaluated) for them.",
        (f"cap --max-model-len at {spec.max_position_embeddings}",
         "chunk the documents (RAG) so each request fits",
         "pick a model with a longer trained context"), rules.CH_SIZING)


def _refuse_memory(spec, g, n, w, weights: Decision) -> Refusal:
    return Refusal(spec.name, g.name, n, w, weights.reason + ".",
                   alternatives.memory_fixes(spec, g, n, w.context_tokens, w.allow_quantization),
                   rules.CH_SIZING)


def _refuse_awq(spec, g, n, w) -> Refusal:
    return Refusal(
        spec.name, g.name, n, w,
        f"{spec.name} fits on {n}x {g.name} only with 4-bit weights, and 4-bit serving needs "
        "a pre-quantized (AWQ/GPTQ) checkpoint, which was not given.",
        ("pass served_model='<an AWQ checkpoint of this model>' (for example one the model's "
         "authors publish)", "more GPUs, or a GPU with more memory"), rules.CH_SIZING)


__all__ = ["Workload", "Plan", "Refusal", "recommend", "resolve_gpus", "served_repo",
           "WORKLOAD_KINDS", "PRIORITIES"]


if __name__ == "__main__":
    from .cli import main
    raise SystemExit(main())
