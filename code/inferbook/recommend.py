"""Plan a vLLM / SGLang deployment: the rules of `outputs/skill-inference-optimizer.md` as code.

    plan = recommend("Llama-3.1-70B", "4xH100", Workload("chat", context_tokens=32768))
    print(plan.vllm_command)

`recommend(model, gpus, workload)` returns a `Plan` (every decision with its reason and the
chapter that explains it, the memory budget per GPU, the exact ``vllm serve`` command and the
SGLang equivalent) or a `Refusal` (a request no configuration of these GPUs can serve, with
the numbers that say why). Invalid input (an unknown GPU, a negative context) raises ValueError.

Memory comes from `inferbook.sizing` (weights + KV cache + a reserve must fit on every GPU).
Flags come from `data/vllm_args.json` and `data/sglang_args.json`: the argument names of the
pinned releases (vLLM 0.33.0, SGLang 0.5.23), read from their PyPI wheels; `check_command`
rejects any flag or value that is not there, and the tests run it on every generated command.

Thin adapters over `inferbook.sizing` (which this module does not change):
* GPU aliases ("H100" -> the "H100 SXM" preset) for the command line.
* Quantized weights: fp8 and int4 store the linear layers' weights at 1 or 0.5 byte, but vLLM,
  SGLang and AWQ checkpoints keep the embedding and LM head in 16 bits (`weight_bytes_for`);
  `sizing.weight_bytes` prices every parameter at the dtype, an underestimate of ~1.6 GB for
  Qwen2.5-7B at int4 that matters on a 16 GB T4.
* Checkpoint dtypes: DeepSeek-V3 ships FP8 weights (DeepSeek-AI 2024, the V3 report).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from . import sizing
from .hardware import GPU, gpu as _gpu_preset
from .models import ModelSpec, model as _model_preset
from .speculative import expected_tokens_per_pass

DATA = Path(__file__).resolve().parent / "data"

# Chapters that explain each rule (notebooks/ in the book).
CH_KV = "01_kv_cache"
CH_SIZING = "02_kv_cache_math"
CH_FLASH = "03_flash_attention_numpy"
CH_TRITON = "04_flash_attention_triton"
CH_PAGED = "05_paged_attention"
CH_BATCHING = "06_continuous_batching"
CH_SPEC = "07_speculative_decoding"
CH_TOGETHER = "08_putting_it_together"

WORKLOAD_KINDS = ("chat", "agent", "rag", "batch")
PRIORITIES = ("latency", "throughput")
GPU_ALIASES = {"H100": "H100 SXM", "A100": "A100 80GB", "4090": "RTX 4090"}
GPUS_PER_NODE = 8          # tensor parallelism stays inside one NVLink node
CHECKPOINT_DTYPE = {"DeepSeek-V3": "fp8"}     # DeepSeek-V3 report: weights released in FP8
MTP_LAYERS = {"DeepSeek-V3": 1}               # config.json num_nextn_predict_layers
# DeepSeek-V3 report, Sec. 5.4.3: the 2nd-token (MTP) acceptance rate is 85-90 %.
MTP_ACCEPTANCE = 0.85
# Assumptions (not measurements) used when the caller gives no measured acceptance rate.
ASSUMED_ACCEPTANCE = {"eagle3": 0.7, "ngram": 0.5}
MAX_DRAFT_TOKENS = 8
MIN_USEFUL_BATCH = 8      # below this many requests per replica, warn: decode wastes bandwidth


# ---------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class Workload:
    """What the deployment must serve. Token counts are prompt + output per request.

    kind: "chat" | "agent" (repeated system prompt / tool definitions) | "rag" (long documents)
          | "batch" (offline, throughput only).
    context_tokens: the longest request (becomes --max-model-len).
    typical_tokens: a typical request, for sizing concurrency (default: context_tokens,
          the worst case: every request as long as the longest).
    concurrency: requests in flight you must hold at once (None: as many as fit).
    shared_prefix_tokens: tokens every request starts with (prefix caching stores them once).
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
        for name in ("context_tokens", "typical_tokens", "concurrency"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.shared_prefix_tokens, int) or self.shared_prefix_tokens < 0:
            raise ValueError(f"shared_prefix_tokens must be an integer >= 0, "
                             f"got {self.shared_prefix_tokens!r}")
        if self.typical_tokens is not None and self.typical_tokens > self.context_tokens:
            raise ValueError(f"typical_tokens ({self.typical_tokens}) cannot exceed "
                             f"context_tokens ({self.context_tokens})")
        if self.shared_prefix_tokens >= self.context_tokens:
            raise ValueError(f"shared_prefix_tokens ({self.shared_prefix_tokens}) must be shorter "
                             f"than context_tokens ({self.context_tokens})")
        if self.priority is not None and self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES} or None, got {self.priority!r}")
        for name in ("tpot_target_ms", "throughput_target_tok_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.acceptance_rate is not None and not 0 < self.acceptance_rate < 1:
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


def resolve_gpus(gpus) -> tuple[GPU, int]:
    """Return (GPU preset, count) from "4xH100", ("H100", 4), a GPU, or a preset name."""
    if isinstance(gpus, GPU):
        return gpus, 1
    if isinstance(gpus, tuple) and len(gpus) == 2:
        name, count = gpus
        g = name if isinstance(name, GPU) else _gpu_by_name(name)
    elif isinstance(gpus, str):
        match = re.fullmatch(r"\s*(\d+)\s*[x×*]\s*(.+?)\s*", gpus)
        name, count = (match.group(2), int(match.group(1))) if match else (gpus, 1)
        g = _gpu_by_name(name)
    else:
        raise ValueError(f"gpus must be like '4xH100', ('H100', 4) or a GPU, got {gpus!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise ValueError(f"GPU count must be a positive integer, got {count!r}")
    return g, count


def _gpu_by_name(name: str) -> GPU:
    return _gpu_preset(GPU_ALIASES.get(name.strip(), name.strip()))


def _model(m) -> ModelSpec:
    return m if isinstance(m, ModelSpec) else _model_preset(m)


def hf_repo(spec: ModelSpec) -> str:
    """Return the Hugging Face repository named in the preset's `source`."""
    match = re.search(r"huggingface\.co/([^/]+/[^/]+)/", spec.source)
    return match.group(1) if match else spec.name


# ---------------------------------------------------------------------------------------------
# memory (adapters over inferbook.sizing)


def embedding_params(spec: ModelSpec) -> int:
    """Return the parameters of the token embedding and the LM head (one matrix if tied)."""
    return spec.vocab_size * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)


def weight_bytes_for(spec: ModelSpec, dtype: str) -> int:
    """Return weight bytes when the linear layers are stored at `dtype` and, for 8/4-bit
    formats, the embedding and LM head stay at 16 bits (as vLLM's fp8 and AWQ checkpoints do)."""
    dt = sizing.get_dtype(dtype)
    if dt.bits >= 16:
        return sizing.weight_bytes(spec, dt)
    emb = embedding_params(spec)
    return dt.vector_bytes(spec.n_params - emb) + 2 * emb


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU for one replica (TP x PP GPUs)."""

    gpu_bytes: int
    reserve_bytes: int
    weight_bytes: int
    kv_bytes_per_token: int       # one token of one sequence, on one GPU
    kv_budget_bytes: int          # what is left for the KV cache on one GPU

    def seqs_at(self, tokens: int, shared_prefix: int = 0) -> int:
        """Return how many sequences of `tokens` tokens fit, a shared prefix stored once."""
        if self.kv_budget_bytes <= 0:
            return 0
        own = (tokens - shared_prefix) * self.kv_bytes_per_token
        left = self.kv_budget_bytes - shared_prefix * self.kv_bytes_per_token
        return max(0, left // own) if left > 0 else 0


def memory(spec: ModelSpec, g: GPU, tp: int, pp: int, weight_dtype: str, kv_dtype: str,
           reserve_fraction: float) -> Memory:
    """Return the per-GPU budget of a replica with `tp`-way tensor and `pp`-way pipeline
    parallelism (pipeline stages split the layers, so weights and KV both divide by pp)."""
    reserve = int(g.hbm_bytes * reserve_fraction)
    weights = -(-weight_bytes_for(spec, weight_dtype) // (tp * pp))
    # kv_bytes_per_gpu handles GQA head splitting / replication and MLA (latent not split)
    per_token = -(-sizing.kv_bytes_per_gpu(spec, tp, 1, 1, kv_dtype) // pp)
    return Memory(g.hbm_bytes, reserve, weights, per_token, g.hbm_bytes - reserve - weights)


# ---------------------------------------------------------------------------------------------
# outputs


@dataclass(frozen=True)
class Decision:
    """One choice: what, why, and the chapter that explains it."""

    topic: str
    choice: str
    reason: str
    chapter: str


@dataclass(frozen=True)
class Speculation:
    """A speculative-decoding setting: method, draft length k, and k by running batch size."""

    method: str                   # vLLM speculative_config "method"
    num_tokens: int               # k at batch size 1
    acceptance: float
    acceptance_source: str
    schedule: tuple[tuple[int, int, int], ...]   # (batch from, batch to, k); k = 0: off
    draft_model: str | None = None


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
    max_num_seqs: int
    seqs_at_full_context: int
    max_num_batched_tokens: int
    prefix_caching: bool
    vllm_attention_backend: str
    flash_attention_version: int | None
    sglang_attention_backend: str
    hf_attn_implementation: str
    speculation: Speculation | None
    memory: Memory
    tpot_bound_ms: float          # roofline lower bound per decode step at max_num_seqs
    throughput_bound_tok_s: float  # roofline upper bound on decode tokens/s, all replicas
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...]
    vllm_argv: tuple[str, ...]
    sglang_argv: tuple[str, ...]
    ok: bool = True

    @property
    def vllm_command(self) -> str:
        """Return the `vllm serve` command, one flag per line."""
        return format_command(self.vllm_argv)

    @property
    def sglang_command(self) -> str:
        """Return the SGLang launch command, one flag per line."""
        return format_command(self.sglang_argv)

    def decision(self, topic: str) -> Decision:
        """Return the decision about `topic`."""
        for d in self.decisions:
            if d.topic == topic:
                return d
        raise KeyError(topic)

    def __str__(self) -> str:
        return render_markdown(self)


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
        return render_markdown(self)


# ---------------------------------------------------------------------------------------------
# the rules


def _sm(g: GPU) -> int:
    major, minor = g.compute_capability
    return 10 * major + minor


def attention_choice(spec: ModelSpec, g: GPU) -> tuple[str, int | None, str, str, str]:
    """Return (vLLM backend, FlashAttention version, SGLang backend, HF attn_implementation, why).

    Mirrors the engines' own selectors, read in the pinned releases: vLLM 0.33.0
    `platforms/cuda.py::_get_backend_priorities` and `v1/attention/backends/fa_utils.py::
    get_flash_attn_version`; SGLang 0.5.23 `arg_groups/model_override_base.py::
    get_default_attn_backend`; PyTorch SDPA's `sdp_utils.cpp` hardware checks.
    """
    sm = _sm(g)
    if sm < 75:
        raise ValueError(f"{g.name} (sm{sm}) is below sm75; vLLM and SGLang need sm75 or newer")
    if sm < 80:   # Turing (T4): no FlashAttention-2; SDPA falls back to its memory-efficient kernel
        hf, why = "sdpa", ("sm75: FlashAttention-2 and FlashInfer need sm80 in vLLM 0.33.0, so vLLM "
                           "picks its Triton kernel; PyTorch SDPA's flash kernel needs sm80, its "
                           "memory-efficient kernel runs on sm50+")
        if spec.is_mla:
            return "TRITON_MLA", None, "triton", hf, why
        return "TRITON_ATTN", None, "flashinfer (triton if FlashInfer is absent)", hf, why
    if sm < 90:
        why = f"sm{sm}: FlashAttention-2 (FA3 is Hopper-only, FA4 needs sm90/sm100)"
        if spec.is_mla:
            return "TRITON_MLA", None, "triton", "flash_attention_2", why + "; MLA uses Triton"
        return "FLASH_ATTN", 2, "flashinfer", "flash_attention_2", why
    if sm < 100:
        fa = 4 if spec.head_dim > 256 else 3
        why = ("sm90 (Hopper): FlashAttention-3 by default; vLLM upgrades to FA4 for head_dim > 256"
               if fa == 3 else "sm90 with head_dim > 256: vLLM upgrades FA3 -> FA4")
        if spec.is_mla:
            return "FLASH_ATTN_MLA", 3, "fa3", "flash_attention_3", why + "; MLA: FA3-based MLA kernel"
        return "FLASH_ATTN", fa, "fa3", "flash_attention_3", why
    why = ("sm100 (Blackwell): both engines default to TensorRT-LLM-derived kernels (vLLM via "
           "FlashInfer, SGLang trtllm_mha); FlashAttention-4 is the FLASH_ATTN backend's version "
           "here (vLLM --attention-backend FLASH_ATTN, SGLang --attention-backend fa4): benchmark "
           "before switching")
    if spec.is_mla:
        return "FLASHINFER_MLA", None, "flashinfer", "flash_attention_4", why
    return "FLASHINFER", 4, "trtllm_mha", "flash_attention_4", why


def _tp_candidates(spec: ModelSpec, n: int) -> list[tuple[int, int]]:
    """Return (tp, pp) pairs that use whole nodes, smallest first."""
    per_node = min(n, GPUS_PER_NODE)
    tps = [d for d in sizing.valid_tp_degrees(spec, per_node) if n % d == 0]
    pairs = [(d, 1) for d in tps]
    if n > GPUS_PER_NODE and tps:
        top = tps[-1]
        pairs += [(top, pp) for pp in range(2, n // top + 1) if n % (top * pp) == 0
                  and pp <= spec.num_hidden_layers]
    return pairs


def _weight_ladder(spec: ModelSpec, g: GPU, w: Workload) -> list[tuple[str, str | None, str]]:
    """Return (storage dtype, --quantization, why) from the checkpoint's dtype down."""
    native = CHECKPOINT_DTYPE.get(spec.name, "bf16")
    ladder = [(native, None, f"the checkpoint's own {native} weights")]
    if not w.allow_quantization:
        return ladder
    if sizing.get_dtype(native).bits > 8:
        how = "W8A8 FP8 kernels" if _sm(g) >= 89 else "FP8 Marlin weight-only kernels (sm75+)"
        ladder.append(("fp8", "fp8", f"online FP8 quantization of the linear layers ({how})"))
    if sizing.get_dtype(native).bits > 4:
        ladder.append(("int4", "awq", "a pre-quantized 4-bit AWQ checkpoint"))
    return ladder


def _decode_step_seconds(spec: ModelSpec, g: GPU, mem: Memory, batch: int, tokens: int) -> float:
    """Return the bandwidth-roofline lower bound of one decode step: every GPU reads its
    weights and its share of `batch` caches of `tokens` tokens once."""
    return (mem.weight_bytes + batch * tokens * mem.kv_bytes_per_token) / g.hbm_bytes_per_s


def decode_tokens_per_second(spec: ModelSpec, g: GPU, mem: Memory, tp: int, batch: int,
                             tokens: int) -> float:
    """Return the roofline upper bound on one replica's decode throughput at `batch` requests:
    batch / max(bytes per GPU / bandwidth, FLOPs per GPU / peak). Communication is ignored."""
    if batch <= 0:
        return 0.0
    t = _decode_step_seconds(spec, g, mem, batch, tokens)
    if g.fp16_tensor_flops is not None:
        t = max(t, 2 * spec.n_active_params * batch / tp / g.fp16_tensor_flops)
    return batch / t


def critical_tokens_per_step(spec: ModelSpec, g: GPU, weight_dtype: str) -> float | None:
    """Return the tokens per forward pass above which a decode step turns compute-bound.

    A step over T tokens does 2 * active_params * T FLOPs and reads the weights once, so its
    intensity is 2 * active_params * T / weight_bytes; it reaches the GPU's ridge point at
    T = ridge * weight_bytes / (2 * active_params) (KV reads only push this higher).
    """
    if g.fp16_tensor_flops is None:
        return None
    return g.ridge_flops_per_byte * weight_bytes_for(spec, weight_dtype) / (2 * spec.n_active_params)


def choose_draft_length(alpha: float, cost_ratio: float, k_max: int = MAX_DRAFT_TOKENS) -> int:
    """Return the smallest k whose speedup E(alpha, k) / (1 + k * cost_ratio) is within 90 % of
    the best k <= k_max (chapter 07's expected tokens per target pass)."""
    speedups = [expected_tokens_per_pass(alpha, k) / (1 + k * cost_ratio)
                for k in range(1, k_max + 1)]
    best = max(speedups)
    return next(k for k, s in enumerate(speedups, start=1) if s >= 0.9 * best)


def spec_schedule(k: int, t_crit: float | None, max_seqs: int) -> tuple[tuple[int, int, int], ...]:
    """Return vLLM's num_speculative_tokens_per_batch_size schedule: at running batch b use the
    largest k' <= k with b * (k' + 1) <= t_crit (verification stays memory-bound, so nearly
    free), and k' = 0 (off) once even one draft token would cross into compute-bound."""
    if t_crit is None:
        return ((1, max_seqs, k),)
    rows: list[list[int]] = []
    for b in range(1, max_seqs + 1):
        kb = max(0, min(k, int(t_crit // b) - 1))
        if rows and rows[-1][2] == kb:
            rows[-1][1] = b
        else:
            rows.append([b, b, kb])
    return tuple(tuple(r) for r in rows)


def _vllm_batch_defaults(g: GPU) -> tuple[dict[str, int], int]:
    """Return vLLM 0.33.0's default max_num_batched_tokens ({"serve", "offline"}) and
    max_num_seqs for this GPU class (`EngineArgs.get_batch_defaults`)."""
    gib = 2**30
    if g.hbm_bytes >= 160 * gib:
        return {"serve": 16384, "offline": 16384}, 1024
    if g.hbm_bytes >= 70 * gib and "A100" not in g.name:
        return {"serve": 8192, "offline": 16384}, 1024
    return {"serve": 2048, "offline": 8192}, 256


def recommend(model, gpus, workload: Workload | str = "chat", *, served_model: str | None = None,
              reserve_fraction: float = sizing.DEFAULT_RESERVE_FRACTION) -> Plan | Refusal:
    """Return a deployment plan for `model` on `gpus` serving `workload`, or a Refusal.

    model: a preset name (inferbook.models) or a ModelSpec. gpus: "4xH100", ("H100", 4) or a GPU.
    served_model: the repository to serve (default: the preset's; an int4 plan needs an AWQ one).
    """
    spec = _model(model)
    g, n = resolve_gpus(gpus)
    w = Workload(workload) if isinstance(workload, str) else workload
    if not isinstance(w, Workload):
        raise ValueError(f"workload must be a Workload or one of {WORKLOAD_KINDS}, got {workload!r}")
    if not (isinstance(reserve_fraction, (int, float)) and 0 <= reserve_fraction < 1):
        raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction!r}")
    sm = _sm(g)
    refuse = lambda reason, suggestions, chapter=CH_SIZING: Refusal(  # noqa: E731
        spec.name, g.name, n, w, reason, tuple(suggestions), chapter)

    # Hard rule 1: the model's position limit.
    if w.context_tokens > spec.max_position_embeddings:
        return refuse(
            f"{spec.name} supports at most {spec.max_position_embeddings:,} positions "
            f"(max_position_embeddings in {spec.source}); {w.context_tokens:,} were requested. "
            "A serving flag cannot extend it: longer contexts need a model trained (or RoPE-scaled "
            "and evaluated) for them.",
            [f"cap --max-model-len at {spec.max_position_embeddings}",
             "chunk the documents (RAG) so each request fits",
             "pick a model with a longer trained context"])

    compute_dtype = "bf16" if sm >= 80 else "fp16"
    kv_default = compute_dtype
    fp8_kv_ok = sm >= 89 and w.fp8_kv_quality_checked
    kv_dtype = "fp8" if fp8_kv_ok else kv_default
    pairs = _tp_candidates(spec, n)
    if not pairs:
        return refuse(f"no tensor-parallel degree dividing {n} can shard {spec.name} "
                      f"({spec.num_attention_heads} heads, {spec.num_key_value_heads} KV heads)",
                      ["use a GPU count whose divisors split the heads evenly"])
    decisions: list[Decision] = []
    warnings: list[str] = []
    ctx, tokens, prefix = w.context_tokens, w.sizing_tokens, w.shared_prefix_tokens
    priority = w.effective_priority

    # Weights: the checkpoint's dtype first; quantize only if nothing fits otherwise.
    chosen = None
    for wdtype, quant, why_w in _weight_ladder(spec, g, w):
        fitting = [(tp, pp, memory(spec, g, tp, pp, wdtype, kv_dtype, reserve_fraction))
                   for tp, pp in pairs]
        fitting = [(tp, pp, m) for tp, pp, m in fitting if m.seqs_at(ctx) >= 1]
        if fitting:
            chosen = (wdtype, quant, why_w, fitting)
            break
    if chosen is None:
        tp, pp = pairs[-1]
        last = _weight_ladder(spec, g, w)[-1][0]
        m = memory(spec, g, tp, pp, last, kv_dtype, reserve_fraction)
        need = m.reserve_bytes + m.weight_bytes + ctx * m.kv_bytes_per_token
        return refuse(
            f"{spec.name} does not fit on {n}x {g.name} even at TP={tp}"
            f"{f' x PP={pp}' if pp > 1 else ''} with {last} weights: one {ctx:,}-token sequence "
            f"needs {need / 1e9:.1f} GB per GPU (weights {m.weight_bytes / 1e9:.1f} + KV "
            f"{ctx * m.kv_bytes_per_token / 1e9:.1f} + reserve {m.reserve_bytes / 1e9:.1f}) and "
            f"each GPU has {g.hbm_bytes / 1e9:.0f} GB.",
            ["more or larger GPUs (see the TP table in chapter 02)",
             "a shorter --max-model-len" if ctx > 4096 else "a smaller model",
             "quantized weights" if not w.allow_quantization else "a smaller model"])
    wdtype, quant, why_w, fitting = chosen
    if quant == "awq" and served_model is None:
        return refuse(
            f"{spec.name} fits on {n}x {g.name} only with 4-bit weights, and 4-bit serving needs "
            "a pre-quantized (AWQ/GPTQ) checkpoint, which was not given.",
            ["pass served_model='<an AWQ checkpoint of this model>' (for example one the model's "
             "authors publish)", "more GPUs, or a GPU with more memory"])

    # TP degree: smallest that fits the concurrency target; latency goals may raise it.
    def seqs(m: Memory) -> int:
        return m.seqs_at(tokens, prefix)

    target = w.concurrency
    tp, pp, mem = fitting[0]
    why_tp = (f"TP={tp} is the smallest degree at which weights + one {ctx:,}-token sequence + "
              f"reserve fit")
    if target is not None:
        meeting = [(a, b, m) for a, b, m in fitting if seqs(m) >= target]
        if meeting:
            tp, pp, mem = meeting[0]
            why_tp = (f"TP={tp} is the smallest degree at which {target} concurrent "
                      f"{tokens:,}-token requests fit")
        else:
            tp, pp, mem = max(fitting, key=lambda t: seqs(t[2]))
            warnings.append(f"only {seqs(mem)} of the {target} requested concurrent "
                            f"{tokens:,}-token requests fit even at TP={tp}; the rest wait in "
                            "the queue (or are preempted)")
            why_tp = f"TP={tp} holds the most concurrent requests; the target does not fit"
    if target is None and priority == "throughput" and len(fitting) > 1:
        _, default_cap = _vllm_batch_defaults(g)
        rates = [(a, b, m, n // (a * b) * decode_tokens_per_second(
                      spec, g, m, a, min(seqs(m), default_cap), tokens))
                 for a, b, m in fitting]
        best = max(r[3] for r in rates)
        a, b, m, rate = next(r for r in rates if r[3] >= 0.9 * best)
        if (a, b) != (tp, pp):
            tp, pp, mem = a, b, m
            why_tp = (f"TP={tp}: the smallest degree whose roofline decode throughput over all "
                      f"{n} GPUs ({rate:,.0f} tokens/s, an upper bound) is within 10 % of the "
                      f"best degree's ({best:,.0f}); smaller TP leaves too little memory for "
                      "a large batch, larger TP adds all-reduce traffic the bound ignores")
    if priority == "latency" and w.tpot_target_ms is not None:
        for a, b, m in fitting:
            if (a * b >= tp * pp and
                    _decode_step_seconds(spec, g, m, 1, tokens) * 1e3 <= w.tpot_target_ms):
                if (a, b) != (tp, pp):
                    why_tp += f"; raised to TP={a} to meet the {w.tpot_target_ms:g} ms/token target"
                tp, pp, mem = a, b, m
                break
        else:
            warnings.append(f"no TP degree brings the bandwidth bound under "
                            f"{w.tpot_target_ms:g} ms/token")
    dp = n // (tp * pp)
    if dp > 1:
        why_tp += (f"; the other GPUs run {dp - 1} more replica(s) (data parallel): replicas "
                   "share nothing, so throughput adds up without all-reduce traffic")
    decisions.append(Decision("parallelism",
                              f"TP={tp}" + (f", PP={pp}" if pp > 1 else "") + (f", DP={dp}" if dp > 1 else ""),
                              why_tp, CH_SIZING))
    if spec.is_mla and tp > 1:
        warnings.append(
            f"MLA's latent KV is not split by TP: each of the {tp} GPUs holds every sequence's "
            f"{mem.kv_bytes_per_token * ctx / 1e9:.2f} GB ({ctx:,} tokens); for high concurrency "
            "consider data-parallel attention with expert parallelism (vLLM --data-parallel-size "
            "with --enable-expert-parallel, SGLang --attn-dp-size), not sized here")

    decisions.append(Decision("weights", f"{wdtype}" + (f" (--quantization {quant})" if quant else ""),
                              why_w + ("" if quant is None else
                                       "; the unquantized weights leave no room for one "
                                       f"{ctx:,}-token sequence on {n}x {g.name}; check quality "
                                       "on your task before serving"),
                              CH_SIZING))
    if compute_dtype == "fp16":
        decisions.append(Decision("compute dtype", "fp16 (--dtype half)",
                                  f"{g.name} is sm{sm}: bf16 needs sm80 (vLLM refuses bf16 below "
                                  "8.0 and suggests --dtype=half)", CH_KV))

    # KV cache.
    if fp8_kv_ok:
        decisions.append(Decision("kv cache", "paged, fp8",
                                  "fp8 halves KV bytes per token; enabled because a quality check "
                                  "on your task was reported", CH_PAGED))
    else:
        why_kv = f"paged blocks, {kv_default}"
        if sm < 89:
            why_kv += f"; fp8 KV needs sm89+ in vLLM (supports_fp8), {g.name} is sm{sm}"
        else:
            alt = memory(spec, g, tp, pp, wdtype, "fp8", reserve_fraction)
            why_kv += (f"; fp8 KV would hold {seqs(alt)} instead of {seqs(mem)} requests, but "
                       "only after a quality check on your task")
        decisions.append(Decision("kv cache", f"paged, {kv_default}", why_kv, CH_PAGED))

    # Concurrency and the per-step token budget.
    defaults_tokens, default_seqs = _vllm_batch_defaults(g)
    fit = seqs(mem)
    max_num_seqs = max(1, min(fit, target if target is not None else default_seqs))
    full = mem.seqs_at(ctx, prefix)
    if fit < MIN_USEFUL_BATCH:
        ladder = _weight_ladder(spec, g, w)
        names = [d for d, _, _ in ladder]
        if wdtype in names and names.index(wdtype) + 1 < len(names):
            nxt = names[names.index(wdtype) + 1]
            alt = seqs(memory(spec, g, tp, pp, nxt, kv_dtype, reserve_fraction))
            warnings.append(f"only {fit} request(s) of {tokens:,} tokens fit: the GPUs are "
                            f"nearly full of weights; {nxt} weights would hold {alt} (check "
                            "quality first), more GPUs would too")
        else:
            warnings.append(f"only {fit} request(s) of {tokens:,} tokens fit: expect queueing")
    decisions.append(Decision(
        "concurrency", f"--max-num-seqs {max_num_seqs}",
        f"{fit} requests of {tokens:,} tokens fit per replica ({full} at the full {ctx:,}); "
        + (f"capped at the target {target}" if target is not None and fit >= target
           else f"capped at vLLM 0.33.0's default {default_seqs} for this GPU class"
           if target is None and fit > default_seqs else "all that fit"),
        CH_PAGED))
    budget = defaults_tokens["serve" if priority == "latency" else "offline"]
    decisions.append(Decision(
        "batching", f"chunked prefill, --max-num-batched-tokens {budget}",
        ("latency: a small per-step token budget keeps long prefills from stalling decodes "
         if priority == "latency" else
         "throughput: a large per-step budget keeps the GPU compute-bound during prefill ")
        + "(the value vLLM 0.33.0 uses for this GPU class and usage)", CH_BATCHING))

    # Prefix caching.
    prefix_caching = w.kind in ("chat", "agent") or prefix > 0
    if prefix_caching:
        why_p = "hash-addressed KV blocks shared across requests"
        if prefix:
            saved = (max_num_seqs - 1) * prefix * mem.kv_bytes_per_token
            why_p += (f": the {prefix:,}-token shared prefix is stored and prefilled once; "
                      f"{max_num_seqs} private copies would take {saved / 1e9:.1f} GB more per GPU")
        decisions.append(Decision("prefix caching", "on", why_p, CH_PAGED))
    else:
        decisions.append(Decision("prefix caching", "engine default",
                                  "no shared prefix declared", CH_PAGED))

    # Attention kernel.
    vb, fa, sb, hf, why_a = attention_choice(spec, g)
    decisions.append(Decision("attention", f"vLLM {vb}" + (f" (FA{fa})" if fa else "")
                              + f", SGLang {sb}, HF {hf}", why_a, CH_TRITON))

    # Speculative decoding.
    t_crit = critical_tokens_per_step(spec, g, wdtype)
    speculation = None
    method = None
    if w.kind == "batch" or (priority == "throughput" and w.draft_model is None
                             and spec.name not in MTP_LAYERS):
        decisions.append(Decision("speculative decoding", "off",
                                  "throughput workload: large batches already make decode "
                                  "compute-bound, so verifying drafts costs real FLOPs",
                                  CH_SPEC))
    else:
        if spec.name in MTP_LAYERS:
            method, alpha, src = "mtp", MTP_ACCEPTANCE, ("DeepSeek-V3 report: 85-90 % "
                                                         "acceptance of the MTP token")
            cost = MTP_LAYERS[spec.name] / spec.num_hidden_layers
            k_max = MTP_LAYERS[spec.name] if w.acceptance_rate is None else MAX_DRAFT_TOKENS
        elif w.draft_model is not None:
            method, alpha, src = "eagle3", ASSUMED_ACCEPTANCE["eagle3"], "assumed"
            cost, k_max = 1 / spec.num_hidden_layers, MAX_DRAFT_TOKENS
        elif w.kind in ("agent", "rag"):
            method, alpha, src = "ngram", ASSUMED_ACCEPTANCE["ngram"], "assumed"
            cost, k_max = 0.0, MAX_DRAFT_TOKENS
        if method is None:
            decisions.append(Decision("speculative decoding", "off",
                                      "no draft: pass an EAGLE-3 head you validated "
                                      "(draft_model=...) to enable it", CH_SPEC))
        else:
            if w.acceptance_rate is not None:
                alpha, src = w.acceptance_rate, "measured (given)"
            k = choose_draft_length(alpha, cost, k_max)
            sched = spec_schedule(k, t_crit, max_num_seqs)
            speculation = Speculation(method, k, alpha, src, sched,
                                      w.draft_model if method == "eagle3" else None)
            off_at = next((r[0] for r in sched if r[2] == 0), None)
            decisions.append(Decision(
                "speculative decoding", f"{method}, k={k}",
                f"expected {expected_tokens_per_pass(alpha, k):.2f} tokens per target pass at "
                f"acceptance {alpha:g} ({src}); "
                + (f"k shrinks as the batch grows and is off from {off_at} running requests, "
                   f"where batch x (k+1) passes the ~{t_crit:.0f}-token compute-bound point"
                   if off_at else "the batch never gets large enough to turn it off"
                   if t_crit else "no FP16 peak published for this GPU: no load schedule"),
                CH_SPEC))
            if src == "assumed":
                warnings.append(f"the {method} acceptance rate {alpha:g} is an assumption: "
                                "measure it (vLLM logs it) and pass acceptance_rate=")

    tpot = _decode_step_seconds(spec, g, mem, max_num_seqs, tokens) * 1e3
    throughput = dp * decode_tokens_per_second(spec, g, mem, tp, max_num_seqs, tokens)
    if w.throughput_target_tok_s is not None and throughput < w.throughput_target_tok_s:
        warnings.append(f"the target of {w.throughput_target_tok_s:,.0f} decode tokens/s is above "
                        f"even the roofline bound of this plan ({throughput:,.0f}): add GPUs")
    served = served_model or hf_repo(spec)
    plan = Plan(
        model=spec.name, served_model=served, gpu=g.name, num_gpus=n, workload=w,
        tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, weight_dtype=wdtype,
        quantization=quant, compute_dtype=compute_dtype, kv_dtype=kv_dtype, max_model_len=ctx,
        max_num_seqs=max_num_seqs, seqs_at_full_context=full, max_num_batched_tokens=budget,
        prefix_caching=prefix_caching, vllm_attention_backend=vb, flash_attention_version=fa,
        sglang_attention_backend=sb, hf_attn_implementation=hf, speculation=speculation,
        memory=mem, tpot_bound_ms=tpot, throughput_bound_tok_s=throughput, decisions=tuple(decisions), warnings=tuple(warnings),
        vllm_argv=(), sglang_argv=(), ok=True,
    )
    plan = replace(plan, vllm_argv=vllm_argv(plan, reserve_fraction),
                   sglang_argv=sglang_argv(plan, reserve_fraction))
    for engine, argv in (("vllm", plan.vllm_argv), ("sglang", plan.sglang_argv)):
        problems = check_command(argv, engine)
        if problems:   # a bug here, never the user's fault
            raise AssertionError(f"generated {engine} command uses unknown flags: {problems}")
    return plan


# ---------------------------------------------------------------------------------------------
# commands


def vllm_argv(p: Plan, reserve_fraction: float) -> tuple[str, ...]:
    """Return the `vllm serve` argv for a plan."""
    a = ["vllm", "serve", p.served_model, "--tensor-parallel-size", str(p.tensor_parallel)]
    if p.pipeline_parallel > 1:
        a += ["--pipeline-parallel-size", str(p.pipeline_parallel)]
    if p.data_parallel > 1:
        a += ["--data-parallel-size", str(p.data_parallel)]
    a += ["--max-model-len", str(p.max_model_len),
          "--gpu-memory-utilization", f"{1 - reserve_fraction:.2f}",
          "--max-num-seqs", str(p.max_num_seqs),
          "--max-num-batched-tokens", str(p.max_num_batched_tokens),
          "--enable-chunked-prefill"]
    if p.prefix_caching:
        a.append("--enable-prefix-caching")
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization:
        a += ["--quantization", p.quantization]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    s = p.speculation
    if s is not None:
        cfg = {"method": s.method, "num_speculative_tokens": s.num_tokens}
        if s.draft_model:
            cfg["model"] = s.draft_model
        if s.method == "ngram":
            cfg.update(prompt_lookup_min=2, prompt_lookup_max=4)
        if len(s.schedule) > 1:
            cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in s.schedule]
        a += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return tuple(a)


def sglang_argv(p: Plan, reserve_fraction: float) -> tuple[str, ...]:
    """Return the `python -m sglang.launch_server` argv for a plan."""
    a = ["python", "-m", "sglang.launch_server", "--model-path", p.served_model,
         "--tp-size", str(p.tensor_parallel)]
    if p.pipeline_parallel > 1:
        a += ["--pp-size", str(p.pipeline_parallel)]
    if p.data_parallel > 1:
        a += ["--dp-size", str(p.data_parallel)]
    a += ["--context-length", str(p.max_model_len),
          "--mem-fraction-static", f"{1 - reserve_fraction:.2f}",
          "--max-running-requests", str(p.max_num_seqs),
          "--chunked-prefill-size", str(p.max_num_batched_tokens)]
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization:
        a += ["--quantization", p.quantization]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    s = p.speculation
    if s is not None:
        if s.method == "ngram":
            a += ["--speculative-algorithm", "NGRAM",
                  "--speculative-num-draft-tokens", str(s.num_tokens + 1)]
        else:
            algo = "EAGLE3" if s.method == "eagle3" else "EAGLE"   # DeepSeek MTP runs as EAGLE
            a += ["--speculative-algorithm", algo]
            if s.draft_model:
                a += ["--speculative-draft-model-path", s.draft_model]
            a += ["--speculative-num-steps", str(s.num_tokens), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(s.num_tokens + 1)]
    return tuple(a)


def format_command(argv) -> str:
    """Return argv as a shell command, each flag with its value on its own line."""
    argv = list(argv)
    i = 0
    while i < len(argv) and not argv[i].startswith("--"):
        i += 1
    lines = [" ".join(shlex.quote(x) for x in argv[:i])]
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        lines.append("    " + " ".join(shlex.quote(x) for x in argv[i:j]))
        i = j
    return " \\\n".join(lines)


@lru_cache(maxsize=None)
def engine_args(engine: str) -> dict:
    """Return the stored argument data of the pinned release of `engine` ("vllm" or "sglang")."""
    if engine not in ("vllm", "sglang"):
        raise ValueError(f"engine must be 'vllm' or 'sglang', got {engine!r}")
    return json.loads((DATA / f"{engine}_args.json").read_text())


@lru_cache(maxsize=None)
def _flag_index(engine: str) -> dict[str, dict]:
    return {name: f for f in engine_args(engine)["flags"] for name in f.get("names", [])}


def check_command(argv, engine: str) -> list[str]:
    """Return the problems with `argv` against the pinned release's arguments (empty: all real).

    Checks that every --flag exists, that flags taking a value get one, that values are among
    the recorded choices, and the values of --kv-cache-dtype, --quantization, --attention-backend,
    the speculative method (vLLM) and algorithm (SGLang) against the stored value sets.
    """
    index, values = _flag_index(engine), engine_args(engine).get("values", {})
    problems: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv) and not argv[i].startswith("--"):
        i += 1
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("-"):
            problems.append(f"stray argument {flag!r}")
            i += 1
            continue
        name, _, inline = flag.partition("=")
        info = index.get(name)
        if info is None:
            problems.append(f"unknown flag {name}")
            i += 1
            continue
        if info.get("deprecated"):
            problems.append(f"deprecated flag {name}")
        value = inline or None
        if info["kind"] == "value" and value is None:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                problems.append(f"{name} needs a value")
            else:
                value = argv[i + 1]
                i += 1
        i += 1
        if value is None:
            continue
        if "choices" in info and value not in info["choices"]:
            problems.append(f"{name} {value!r} is not one of the recorded choices")
        allowed = values.get(name, {}).get("values")
        if allowed is not None and value not in allowed:
            problems.append(f"{name} {value!r} is not a value of the pinned release")
        if engine == "vllm" and name == "--speculative-config":
            cfg = json.loads(value)
            keys = set(values["--speculative-config:keys"]["values"])
            problems += [f"speculative_config key {k!r} unknown" for k in cfg if k not in keys]
            if cfg.get("method") not in values["--speculative-config:method"]["values"]:
                problems.append(f"speculative method {cfg.get('method')!r} unknown")
    return problems


# ---------------------------------------------------------------------------------------------
# rendering (the skill file's worked examples are generated by these functions)


def render_markdown(p: Plan | Refusal) -> str:
    """Return a plan or refusal as Markdown: the header, decisions, warnings and commands."""
    w = p.workload
    head = (f"**{p.model} on {p.num_gpus}x {p.gpu}**, {w.kind} workload, context "
            f"{w.context_tokens:,} tokens"
            + (f", typical {w.typical_tokens:,}" if w.typical_tokens else "")
            + (f", concurrency {w.concurrency}" if w.concurrency else "")
            + (f", shared prefix {w.shared_prefix_tokens:,}" if w.shared_prefix_tokens else "")
            + ".")
    if not p.ok:
        lines = [head, "", f"**Refused** (chapter {p.chapter}): {p.reason}", ""]
        lines += [f"- instead: {s}" for s in p.suggestions]
        return "\n".join(lines) + "\n"
    m = p.memory
    lines = [head, "",
             f"Per GPU: weights {m.weight_bytes / 1e9:.1f} GB + reserve {m.reserve_bytes / 1e9:.1f} GB, "
             f"{m.kv_budget_bytes / 1e9:.1f} GB left for the KV cache "
             f"({m.kv_bytes_per_token / 1e3:.1f} kB per token per GPU). Roofline bounds at "
             f"{p.max_num_seqs} requests per replica: a decode step takes at least "
             f"{p.tpot_bound_ms:.1f} ms; all replicas together produce at most "
             f"{p.throughput_bound_tok_s:,.0f} tokens/s.", "",
             "| decision | choice | why | chapter |", "|---|---|---|---|"]
    lines += [f"| {d.topic} | {d.choice} | {d.reason} | {d.chapter} |" for d in p.decisions]
    if p.warnings:
        lines += [""] + [f"- warning: {x}" for x in p.warnings]
    lines += ["", "```bash", p.vllm_command, "```", "", "```bash", p.sglang_command, "```"]
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
    Example("t4-7b-chat", "Qwen2.5-7B", "1xT4", Workload("chat", context_tokens=8192),
            served_model="Qwen/Qwen2.5-7B-Instruct"),
    Example("llama70b-4xh100-32k", "Llama-3.1-70B", "4xH100",
            Workload("chat", context_tokens=32768, typical_tokens=4096),
            served_model="meta-llama/Llama-3.1-70B-Instruct"),
    Example("agent-shared-prompt", "Qwen2.5-14B", "2xA100",
            Workload("agent", context_tokens=16384, typical_tokens=8192, concurrency=64,
                     shared_prefix_tokens=6000),
            served_model="Qwen/Qwen2.5-14B-Instruct"),
    Example("deepseek-v3-8xh200", "DeepSeek-V3", "8xH200",
            Workload("chat", context_tokens=32768, typical_tokens=4096)),
    Example("blackwell-batch", "Llama-3.1-70B", "8xB200",
            Workload("batch", context_tokens=16384, typical_tokens=2048),
            served_model="meta-llama/Llama-3.1-70B-Instruct"),
    Example("refusal-405b-on-h100", "Llama-3.1-405B", "4xH100", Workload("chat", context_tokens=8192)),
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


# ---------------------------------------------------------------------------------------------
# command line


def main(argv: list[str] | None = None) -> int:
    """`python -m inferbook.recommend --model ... --gpu H100 --num-gpus 4 --context 32768`."""
    ap = argparse.ArgumentParser(prog="python -m inferbook.recommend",
                                 description="Plan a vLLM/SGLang deployment (or say why not).")
    ap.add_argument("--model", help="a preset of inferbook.models, e.g. Llama-3.1-70B")
    ap.add_argument("--gpu", help="a preset of inferbook.hardware (H100, A100, T4, B200, ...)")
    ap.add_argument("--num-gpus", type=int, default=1)
    ap.add_argument("--context", type=int, default=8192, help="longest request, tokens")
    ap.add_argument("--typical", type=int, default=None, help="typical request, tokens")
    ap.add_argument("--workload", choices=WORKLOAD_KINDS, default="chat")
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--shared-prefix", type=int, default=0)
    ap.add_argument("--priority", choices=PRIORITIES, default=None)
    ap.add_argument("--tpot-ms", type=float, default=None, help="per-token latency target")
    ap.add_argument("--throughput", type=float, default=None, help="decode tokens/s target")
    ap.add_argument("--fp8-kv-checked", action="store_true")
    ap.add_argument("--draft-model", default=None)
    ap.add_argument("--acceptance-rate", type=float, default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--update-skill", nargs="?", const="outputs/skill-inference-optimizer.md",
                    default=None, metavar="PATH", help="regenerate the skill file's examples")
    args = ap.parse_args(argv)
    if args.update_skill:
        names = update_skill_file(args.update_skill)
        print(f"updated {len(names)} examples in {args.update_skill}")
        return 0
    if not args.model or not args.gpu:
        ap.error("--model and --gpu are required")
    try:
        w = Workload(args.workload, context_tokens=args.context, typical_tokens=args.typical,
                     concurrency=args.concurrency, shared_prefix_tokens=args.shared_prefix,
                     priority=args.priority, tpot_target_ms=args.tpot_ms,
                     throughput_target_tok_s=args.throughput,
                     fp8_kv_quality_checked=args.fp8_kv_checked, draft_model=args.draft_model,
                     acceptance_rate=args.acceptance_rate)
        result = recommend(args.model, (args.gpu, args.num_gpus), w, served_model=args.served_model)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render_markdown(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
