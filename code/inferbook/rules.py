"""The deployment rules, one function per decision, each returning a `Decision`.

`inferbook.recommend.recommend` calls them in order; every function here only decides. Memory
comes from `inferbook.sizing` (weights, KV cache, the vLLM budget), time from
`inferbook.roofline`, attention backends from `inferbook.attention_backends`. Each rule that
rests on vLLM's behaviour names the file and function of the pinned wheel (vllm 0.33.0) in
its `citation`; `tests/test_recommend_vllm.py` quotes the source line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import attention_backends, roofline, sizing
from .arith import ceil_div
from .decision import Decision
from .hardware import GPU
from .models import ModelSpec
from .speculation_math import expected_tokens_per_pass

# Chapters that explain each rule (notebooks/ in the book).
CH_KV = "01_kv_cache"
CH_SIZING = "02_kv_cache_math"
CH_TRITON = "04_flash_attention_triton"
CH_PAGED = "05_paged_attention"
CH_BATCHING = "06_continuous_batching"
CH_SPEC = "07_speculative_decoding"
CH_SERVING = "09_serving_at_scale"

WHEEL = "vllm 0.33.0"
GPUS_PER_NODE = 8          # tensor parallelism stays inside one NVLink node
CHECKPOINT_DTYPE = {"DeepSeek-V3": "fp8"}     # DeepSeek-V3 report: weights released in FP8
MTP_LAYERS = {"DeepSeek-V3": 1}               # config.json num_nextn_predict_layers
MTP_ACCEPTANCE = 0.85      # DeepSeek-V3 report, Sec. 5.4.3: 2nd-token acceptance 85-90 %
ASSUMED_ACCEPTANCE = {"eagle3": 0.7, "ngram": 0.5}   # assumptions, not measurements
SUFFIX_MAX_TREE_DEPTH = 24  # vLLM SpeculativeConfig.suffix_decoding_max_tree_depth default
MAX_DRAFT_TOKENS = 8
BLOCK_SIZE = sizing.DEFAULT_BLOCK_SIZE   # vLLM reserves whole KV blocks per request
MIN_USEFUL_BATCH = 8       # below this many requests per replica, warn: decode wastes bandwidth
# Speculative methods whose batch-size schedule vLLM's V1 runner keeps
# (VllmConfig._maybe_disable_dynamic_sd_for_v1).
DYNAMIC_SD_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
# Methods the V1 runner overlaps with async scheduling (VllmConfig.__post_init__).
ASYNC_OK_METHODS = (None, "eagle", "eagle3", "mtp", "ngram_gpu", "draft_model")
# Speculative methods Model Runner V2 does not run (VllmConfig._get_v2_model_runner_unsupported_
# features): vLLM falls back to the V1 runner for them, which cannot overlap them.
V2_UNSUPPORTED_METHODS = ("suffix", "custom_class")


def sm(g: GPU) -> int:
    """Return the compute capability as one number (sm80 -> 80)."""
    major, minor = g.compute_capability
    return 10 * major + minor


def compute_dtype(g: GPU) -> str:
    """Return the activation dtype: bf16 from sm80, fp16 before (vLLM refuses bf16 below 8.0)."""
    return "bf16" if sm(g) >= 80 else "fp16"


# ---------------------------------------------------------------------------------------------
# batching caps (decided first: the memory budget depends on them)


def vllm_batch_defaults(g: GPU) -> tuple[int, int]:
    """Return vLLM 0.33.0's `vllm serve` defaults (max_num_batched_tokens, max_num_seqs) for this
    GPU class (`EngineArgs.get_batch_defaults`, OPENAI_API_SERVER)."""
    gib = 2**30
    if g.hbm_bytes >= 160 * gib:
        return 16384, 1024
    if g.hbm_bytes >= 70 * gib and "A100" not in g.name:
        return 8192, 1024
    return 2048, 256


def decide_batching(g: GPU, priority: str, concurrency: int | None, dp: int = 1) -> Decision:
    """Return one engine's scheduler caps: value = dict(max_num_seqs, max_num_batched_tokens,
    performance_mode). With `dp` replicas each takes ceil(concurrency / dp) requests.

    `--max-num-seqs` is a cap, not a reservation: vLLM admits a request when its KV blocks can be
    allocated and preempts when they run out (`v1/core/sched/scheduler.py::Scheduler.schedule`),
    so the cap is vLLM's own default (or the caller's concurrency), never a worst-case count.
    """
    tokens, seqs = vllm_batch_defaults(g)
    mode = "interactivity" if priority == "latency" else "throughput"
    if mode == "throughput":   # --performance-mode throughput doubles both defaults
        tokens, seqs = 2 * tokens, 2 * seqs
    if concurrency is not None:
        seqs = ceil_div(concurrency, dp)
    raised = seqs > tokens
    if raised:   # SchedulerConfig.verify_max_model_len: max_num_batched_tokens >= max_num_seqs
        tokens = ceil_div(seqs, 256) * 256
    why = (f"--performance-mode {mode} ({priority} priority); --max-num-batched-tokens {tokens:,}"
           f" is the value vLLM 0.33.0 itself uses for {g.name} in this mode, and "
           + (f"--max-num-seqs {seqs} is the requested concurrency {concurrency}"
              + (f" over {dp} replicas" if dp > 1 else "") if concurrency is not None else
              f"--max-num-seqs {seqs} its default cap")
           + (f"; --max-num-batched-tokens is raised to {tokens:,} because vLLM refuses to "
              "start with fewer batched tokens than sequences" if raised else "")
           + ". The cap is not a reservation: requests are admitted while their KV blocks fit "
           "and preempted when the blocks run out")
    return Decision(dict(max_num_seqs=seqs, max_num_batched_tokens=tokens, performance_mode=mode),
                    why, CH_BATCHING,
                    f"{WHEEL}: engine/arg_utils.py::EngineArgs.get_batch_defaults; "
                    "v1/core/sched/scheduler.py::Scheduler.schedule; config/scheduler.py::"
                    "SchedulerConfig.verify_max_model_len")


# ---------------------------------------------------------------------------------------------
# memory layouts


@dataclass(frozen=True)
class Layout:
    """One replica's parallel layout and its per-GPU memory budget."""

    tp: int
    pp: int
    dp: int
    weight_dtype: str
    kv_dtype: str
    batching: Decision             # this layout's scheduler caps (decide_batching)
    budget: sizing.MemoryBudget
    window_extra_tokens: int       # vLLM keeps in-flight tokens beside each window

    def sequences(self, spec: ModelSpec, tokens: int, shared_prefix: int = 0) -> int:
        """Return how many requests of `tokens` tokens this layout's KV budget holds."""
        return sizing.sequences_that_fit(
            self.budget.kv_budget_bytes, spec, self.tp, tokens, self.kv_dtype,
            shared_prefix_tokens=shared_prefix, pipeline_parallel=self.pp,
            window_extra_tokens=self.window_extra_tokens, block_size=BLOCK_SIZE)

    def kv_bytes(self, spec: ModelSpec, tokens: int, batch: int = 1) -> int:
        """Return the KV bytes per GPU of `batch` requests of `tokens` tokens."""
        return sizing.kv_bytes_per_gpu(spec, self.tp, tokens, batch, self.kv_dtype,
                                       pipeline_parallel=self.pp,
                                       window_extra_tokens=self.window_extra_tokens,
                                       block_size=BLOCK_SIZE)


@dataclass(frozen=True)
class PlanRequest:
    """What every layout is sized for: the GPUs, the formats and the scheduling intent."""

    n_gpus: int
    kv_dtype: str
    priority: str
    concurrency: int | None
    utilization: float


def layout(spec: ModelSpec, g: GPU, tp: int, pp: int, weight_dtype: str, req: PlanRequest) -> Layout:
    """Return the layout with vLLM's budget: utilization x total - weights - runtime terms."""
    dp = req.n_gpus // (tp * pp)
    batching = decide_batching(g, req.priority, req.concurrency, dp)
    caps = batching.value
    runtime = sizing.vllm_runtime_memory(
        spec, tp, max_num_batched_tokens=caps["max_num_batched_tokens"],
        max_num_seqs=caps["max_num_seqs"])
    budget = sizing.memory_budget(spec, g, tp, weight_dtype,
                                  gpu_memory_utilization=req.utilization, runtime=runtime,
                                  pipeline_parallel=pp)
    # VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens, and
    # max_concurrent_batches = pp + 1 under Model Runner V2 with async scheduling (0.33's default)
    in_flight = caps["max_num_batched_tokens"] * max_concurrent_batches(pp, True)
    return Layout(tp, pp, dp, weight_dtype, req.kv_dtype, batching, budget, in_flight)


def max_concurrent_batches(pp: int, async_scheduling: bool, v2_runner: bool = True) -> int:
    """Return vLLM 0.33.0's `VllmConfig.max_concurrent_batches`: pp + 1 with async scheduling
    on Model Runner V2, 2 on V1 without PP, else pp (config/vllm.py)."""
    if async_scheduling:
        if v2_runner:
            return pp + 1
        if pp <= 1:
            return 2
    return pp


def tp_pp_candidates(spec: ModelSpec, n: int) -> list[tuple[int, int]]:
    """Return (tp, pp) pairs that use whole nodes, smallest first."""
    per_node = min(n, GPUS_PER_NODE)
    tps = [d for d in sizing.valid_tp_degrees(spec, per_node) if n % d == 0]
    pairs = [(d, 1) for d in tps]
    if n > GPUS_PER_NODE and tps:
        top = tps[-1]
        pairs += [(top, pp) for pp in range(2, n // top + 1)
                  if n % (top * pp) == 0 and pp <= spec.num_hidden_layers]
    return pairs


# ---------------------------------------------------------------------------------------------
# weights


def weight_ladder(spec: ModelSpec, g: GPU,
                  allow_quantization: bool) -> list[tuple[str, str | None, str]]:
    """Return (storage dtype, --quantization, why) from the checkpoint's dtype down."""
    # the checkpoint's stored format (from_hf_config reads quantization_config), else the report
    native = (spec.checkpoint_dtype if spec.checkpoint_dtype != "bf16"
              else CHECKPOINT_DTYPE.get(spec.name, "bf16"))
    ladder = [(native, None, f"the checkpoint's own {native} weights")]
    if not allow_quantization:
        return ladder
    if sizing.get_dtype(native).bits > 8:
        how = "W8A8 FP8 kernels" if sm(g) >= 89 else "FP8 Marlin weight-only kernels (sm75+)"
        ladder.append(("fp8", "fp8", f"online FP8 quantization of the linear layers ({how})"))
    if sizing.get_dtype(native).bits > 4:
        ladder.append(("int4", "awq", "a pre-quantized 4-bit AWQ checkpoint"))
    return ladder


def decide_weights(spec: ModelSpec, g: GPU, ctx: int, req: PlanRequest,
                   allow_quantization: bool) -> Decision:
    """Return the weight format: the checkpoint's own unless no layout of the `n` GPUs then
    holds one `ctx`-token request. value = dict(weight_dtype, quantization, layouts) with the
    layouts that fit, or None (and the numbers that say why) when nothing does."""
    n = req.n_gpus
    pairs = tp_pp_candidates(spec, n)
    if not pairs:
        return Decision(None, f"no tensor-parallel degree dividing {n} can shard {spec.name} "
                        f"({spec.num_attention_heads} heads, {spec.num_key_value_heads} KV "
                        "heads)", CH_SIZING)
    for wdtype, quant, why in weight_ladder(spec, g, allow_quantization):
        fitting = [lay for tp, pp in pairs
                   if (lay := layout(spec, g, tp, pp, wdtype, req))
                   .sequences(spec, ctx) >= 1]
        if fitting:
            if quant:
                why += (f"; the checkpoint's weights leave no room for one {ctx:,}-token request "
                        f"on {n}x {g.name}: check quality on your task before serving")
            return Decision(dict(weight_dtype=wdtype, quantization=quant, layouts=fitting),
                            why, CH_SIZING, "fp8: vllm 0.33.0 model_executor/layers/quantization"
                            "/fp8.py::Fp8Config.get_min_capability (75)" if quant == "fp8" else "")
    tp, pp = pairs[-1]
    lay = layout(spec, g, tp, pp, wdtype, req)
    b, gb = lay.budget, 1e9
    need = lay.kv_bytes(spec, ctx)
    return Decision(None, (
        f"{spec.name} does not fit on {n}x {g.name} even at TP={tp}"
        f"{f' x PP={pp}' if pp > 1 else ''} with {wdtype} weights: vLLM would get "
        f"{b.usable_bytes / gb:.1f} GB per GPU (--gpu-memory-utilization {req.utilization:.2f}), "
        f"spend {b.weight_bytes / gb:.1f} on weights and {b.runtime.total_bytes / gb:.1f} on "
        f"activations, CUDA graphs and non-torch memory, and one {ctx:,}-token request needs "
        f"{need / gb:.1f} GB of KV cache; {b.kv_budget_bytes / gb:.1f} GB are left"),
        CH_SIZING, f"{WHEEL}: v1/core/kv_cache_planning.py::_check_enough_kv_cache_memory")


# ---------------------------------------------------------------------------------------------
# parallelism


def step_cost_model(spec: ModelSpec, g: GPU, lay: Layout):
    """Return chapter 9's step-cost model (`simulate.CostModel`) of one replica of `lay`, with
    the efficiencies fitted on published runs: the one cost model the book plans with."""
    from .simulate import FITTED
    return FITTED.cost_model(spec, g, lay.tp, kv_dtype=lay.kv_dtype,
                             weight_dtype=lay.weight_dtype)


def _roofline_seconds(spec: ModelSpec, g: GPU, lay: Layout, batch: int, tokens: int) -> float:
    """Roofline bound on one decode step, for GPUs without a published FP16 peak."""
    cost = roofline.ForwardCost(
        flops=2 * spec.n_active_params * max(batch, 1) / (lay.tp * lay.pp),
        bytes_moved=lay.budget.weight_bytes + (lay.kv_bytes(spec, tokens, batch) if batch else 0))
    return roofline.step_seconds(g, cost)


def decode_step_seconds(spec: ModelSpec, g: GPU, lay: Layout, batch: int, tokens: int) -> float:
    """Return the simulator's time for one decode step of `batch` requests of `tokens` tokens
    on one replica: overhead + max(compute, memory) + the TP all-reduce (chapter 9). With PP the
    stages share the step's work (weights and layers split pp ways, pp batches in flight)."""
    if g.fp16_tensor_flops is None:
        return _roofline_seconds(spec, g, lay, batch, tokens)
    from .simulate import decode_step_time
    return decode_step_time(spec, g, lay.tp, max(batch, 1), tokens, kv_dtype=lay.kv_dtype,
                            weight_dtype=lay.weight_dtype) / lay.pp


_decode_seconds = decode_step_seconds


def decode_tokens_per_second(spec: ModelSpec, g: GPU, lay: Layout, batch: int,
                             tokens: int) -> float:
    """Return the simulator's estimate of one replica's decode tokens/s at `batch` requests."""
    return 0.0 if batch <= 0 else batch / decode_step_seconds(spec, g, lay, batch, tokens)


@dataclass(frozen=True)
class LayoutRate:
    """One layout as the step-cost model sees it: its running batch per replica, step time and
    decode tokens/s over all replicas."""

    layout: Layout
    held: int                # requests all replicas hold at once (KV cache)
    batch: int               # running requests per replica
    step_s: float
    tokens_per_s: float


def steady_step_seconds(spec: ModelSpec, g: GPU, lay: Layout, batch: int, tokens: int,
                        output_tokens: int) -> float:
    """Return the simulator's time for one step of continuous batching in steady state: `batch`
    decodes at the mean context plus the prefill those requests' successors need, batch x
    prompt / output tokens per step, up to the step's token budget (chapter 9's cost model)."""
    if g.fp16_tensor_flops is None:
        return _roofline_seconds(spec, g, lay, batch, tokens)
    prompt = tokens - output_tokens
    budget = lay.batching.value["max_num_batched_tokens"]
    chunk = min(round(batch * prompt / output_tokens), max(budget - batch, 0))
    shapes = [(1, prompt + output_tokens // 2)] * batch
    if chunk > 0:
        shapes.append((chunk, 0))
    return step_cost_model(spec, g, lay).step_time(shapes) / lay.pp


def rate_layouts(spec: ModelSpec, g: GPU, layouts: list[Layout], tokens: int,
                 shared_prefix: int = 0, concurrency: int | None = None,
                 output_tokens: int | None = None) -> list[LayoutRate]:
    """Return each layout's output tokens/s by the simulator's step-cost model, each replica
    running what its KV cache holds (at most --max-num-seqs and its share of `concurrency`):
    decode steps at `tokens` of context, or, when `output_tokens` of each request are known,
    steady-state steps that also prefill the next requests' prompts (`steady_step_seconds`)."""
    out = []
    for lay in layouts:
        fit = lay.sequences(spec, tokens, shared_prefix)
        b = min(fit, lay.batching.value["max_num_seqs"])
        if concurrency is not None:
            b = min(b, ceil_div(concurrency, lay.dp))
        step = (steady_step_seconds(spec, g, lay, max(b, 1), tokens, output_tokens)
                if output_tokens else decode_step_seconds(spec, g, lay, max(b, 1), tokens))
        out.append(LayoutRate(lay, lay.dp * fit, b, step, lay.dp * b / step if b > 0 else 0.0))
    return out


def decide_parallelism(spec: ModelSpec, g: GPU, layouts: list[Layout], tokens: int,
                       shared_prefix: int, req: PlanRequest, tpot_target_ms: float | None,
                       output_tokens: int | None = None) -> Decision:
    """Return value = dict(layout, tp, pp, dp, rates): the layout chapter 9's step-cost model
    (with its all-reduce term) ranks first by decode tokens/s over all GPUs, among those whose
    replicas together hold the requested concurrency (or, if none does, the one that holds the
    most); raised to meet a per-token target. Replicas (DP) fill the remaining GPUs."""
    rates = rate_layouts(spec, g, layouts, tokens, shared_prefix, req.concurrency,
                         output_tokens)
    pool, warn = rates, ""
    if req.concurrency is not None:
        meeting = [r for r in rates if r.held >= req.concurrency]
        pool = meeting or [max(rates, key=lambda r: r.held)]
        warn = "" if meeting else (
            f"only {pool[0].held} of the {req.concurrency} requested {tokens:,}-token requests "
            f"fit in the KV cache at once (TP={pool[0].layout.tp}, the layout that holds the "
            "most); the rest wait in the queue, and --max-num-seqs is capped at what fits, "
            "since a larger cap only adds sampler buffers")
    best = max(pool, key=lambda r: r.tokens_per_s)
    chosen = best.layout
    table = ", ".join(f"TP={r.layout.tp}{f'xPP={r.layout.pp}' if r.layout.pp > 1 else ''}"
                      f"{f'xDP={r.layout.dp}' if r.layout.dp > 1 else ''}: "
                      f"{r.tokens_per_s:,.0f}" for r in rates)
    what = ("output tokens/s with the prompts' prefill (steady state)" if output_tokens
            else "decode tokens/s")
    why = (f"TP={chosen.tp}: chapter 9's step-cost model (fitted efficiencies, all-reduce term) "
           f"ranks it first at {best.tokens_per_s:,.0f} {what} over all {req.n_gpus} "
           f"GPUs, {best.batch} running requests per replica ({table})")
    if req.concurrency is not None and not warn:
        why += (f"; its replicas hold the {req.concurrency} concurrent {tokens:,}-token "
                f"requests ({best.held})")
    if spec.is_mla and chosen.tp < max(lay.tp for lay in layouts):
        why += ("; MLA's latent is not split by TP, so replicas hold more requests than "
                "larger TP degrees")
    if req.priority == "latency" and tpot_target_ms is not None:
        fast = [lay for lay in layouts if lay.tp * lay.pp >= chosen.tp * chosen.pp
                and decode_step_seconds(spec, g, lay, 1, tokens) * 1e3 <= tpot_target_ms]
        if fast and fast[0] is not chosen:
            why += f"; raised to TP={fast[0].tp} to meet the {tpot_target_ms:g} ms/token target"
        chosen = fast[0] if fast else chosen
        warn = warn or ("" if fast else f"no TP degree brings one decode step under "
                        f"{tpot_target_ms:g} ms/token in the step-cost model")
    if chosen.dp > 1:
        why += (f"; the other GPUs run {chosen.dp - 1} more replica(s) (--data-parallel-size "
                f"{chosen.dp}): replicas share nothing, so throughput adds up without all-reduce "
                "traffic")
    return Decision(dict(layout=chosen, tp=chosen.tp, pp=chosen.pp, dp=chosen.dp, rates=rates),
                    why, CH_SERVING, extra={"warning": warn} if warn else {})


# ---------------------------------------------------------------------------------------------
# KV cache


def kv_dtype_for(spec: ModelSpec, g: GPU, fp8_quality_checked: bool) -> str:
    """Return the KV dtype: fp8 only after a quality check and where a backend reads it."""
    backend = attention_backends.fp8_kv_backend(g.compute_capability, mla=spec.is_mla,
                                                head_dim=spec.head_dim)
    return "fp8" if fp8_quality_checked and backend else compute_dtype(g)


def decide_kv_cache(spec: ModelSpec, g: GPU, lay: Layout, ctx: int, tokens: int,
                    shared_prefix: int, fp8_quality_checked: bool) -> Decision:
    """Return value = dict(kv_dtype, budget_bytes, per_token_bytes, sequences, full_sequences)."""
    kv = lay.kv_dtype
    seqs, full = lay.sequences(spec, tokens, shared_prefix), lay.sequences(spec, ctx)
    per_token = sizing.kv_bytes_per_gpu(spec, lay.tp, 1, 1, kv, pipeline_parallel=lay.pp)
    b, gb = lay.budget, 1e9
    why = (f"paged blocks, {kv}: vLLM gets {b.usable_bytes / gb:.1f} GB per GPU, minus weights "
           f"{b.weight_bytes / gb:.1f}, activations {b.runtime.activation_bytes / gb:.2f}, CUDA "
           f"graphs {b.runtime.cuda_graph_bytes / gb:.2f} and non-torch "
           f"{b.runtime.non_torch_bytes / gb:.2f} GB leaves {b.kv_budget_bytes / gb:.1f} GB: "
           f"{seqs} requests of {tokens:,} tokens ({full} at {ctx:,})")
    if spec.sliding_window is not None:
        why += (f"; sliding-window layers keep {spec.sliding_window:,} tokens plus the "
                f"{lay.window_extra_tokens:,} vLLM holds in flight")
    fp8_backend = attention_backends.fp8_kv_backend(g.compute_capability, mla=spec.is_mla,
                                                    head_dim=spec.head_dim)
    if kv != "fp8" and fp8_backend is None:
        why += f"; no vLLM backend reads an fp8 KV cache on {g.name} (sm{sm(g)})"
    elif kv != "fp8":
        why += (f"; fp8 ({fp8_backend} reads it on sm{sm(g)}) would nearly double that, after "
                "a quality check on your task")
    return Decision(dict(kv_dtype=kv, budget_bytes=b.kv_budget_bytes, per_token_bytes=per_token,
                         sequences=seqs, full_sequences=full), why, CH_PAGED,
                    f"{WHEEL}: v1/worker/gpu_worker.py::Worker.determine_available_memory")


# ---------------------------------------------------------------------------------------------
# prefix caching, attention, speculation, scheduling


def decide_prefix_caching(kind: str, shared_prefix: int, lay: Layout, spec: ModelSpec,
                          max_num_seqs: int) -> Decision:
    """Return value True/False: on for chat/agent or any declared shared prefix."""
    if not (kind in ("chat", "agent") or shared_prefix > 0):
        return Decision(False, "no shared prefix declared: the engine default", CH_PAGED)
    why = "hash-addressed KV blocks shared across requests"
    if shared_prefix:
        saved = (max_num_seqs - 1) * lay.kv_bytes(spec, shared_prefix)
        why += (f": the {shared_prefix:,}-token shared prefix is stored and prefilled once; "
                f"{max_num_seqs} private copies would take {saved / 1e9:.1f} GB more per GPU")
    return Decision(True, why, CH_PAGED)


def decide_attention_backend(spec: ModelSpec, g: GPU, kv_dtype: str) -> Decision:
    """Return value = dict(vllm, flash_attention_version, sglang, hf)."""
    vb = attention_backends.vllm_backend(g.compute_capability, mla=spec.is_mla,
                                         head_dim=spec.head_dim, kv_dtype=kv_dtype)
    major = g.compute_capability[0]
    sglang = ("triton" if spec.is_mla and major < 9 else
              {7: "triton", 8: "flashinfer", 9: "fa3"}.get(major, "trtllm_mha"))
    if spec.is_mla and major >= 10:
        sglang = "flashinfer"
    hf = {7: "sdpa", 8: "flash_attention_2", 9: "flash_attention_3"}.get(major,
                                                                       "flash_attention_4")
    return Decision(dict(vllm=vb.name, flash_attention_version=vb.flash_attention_version,
                         sglang=sglang, hf=hf), vb.why, CH_TRITON,
                    f"{WHEEL}: platforms/cuda.py::_get_backend_priorities")


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


@dataclass(frozen=True)
class Speculation:
    """A speculative-decoding setting: method, draft length k, and k by running batch size."""

    method: str                   # vLLM speculative_config "method"
    num_tokens: int               # k at batch size 1 (suffix: the most it may draft)
    acceptance: float | None
    acceptance_source: str
    schedule: tuple[tuple[int, int, int], ...]   # (batch from, batch to, k); empty: static k
    draft_model: str | None = None


def _draft_method(spec: ModelSpec, kind: str, draft_model: str | None):
    """Return (method, acceptance, source, draft cost ratio, k_max) or None."""
    if spec.name in MTP_LAYERS:
        return ("mtp", MTP_ACCEPTANCE, "DeepSeek-V3 report: 85-90 % acceptance of the MTP token",
                MTP_LAYERS[spec.name] / spec.num_hidden_layers, MTP_LAYERS[spec.name])
    if draft_model is not None:
        return ("eagle3", ASSUMED_ACCEPTANCE["eagle3"], "assumed", 1 / spec.num_hidden_layers,
                MAX_DRAFT_TOKENS)
    if kind == "agent":
        return ("suffix", None, "decided per step by suffix-tree matches", 0.0,
                SUFFIX_MAX_TREE_DEPTH)
    if kind == "rag":
        return ("ngram", ASSUMED_ACCEPTANCE["ngram"], "assumed", 0.0, MAX_DRAFT_TOKENS)
    return None


def decide_speculation(spec: ModelSpec, g: GPU, kind: str, priority: str, weight_dtype: str,
                       draft_model: str | None, acceptance_rate: float | None,
                       max_num_seqs: int, dp: int, running_batch: int | None = None) -> Decision:
    """Return value = a `Speculation` or None (off).

    With data parallelism vLLM keeps one k for every batch size, so k is the book's schedule
    read at one replica's running batch (`running_batch`: what its KV cache holds, at most
    `max_num_seqs`), and speculation is off when that batch is past the compute-bound point.
    """
    found = _draft_method(spec, kind, draft_model)
    if kind == "batch" or (priority == "throughput" and draft_model is None
                           and (found is None or found[0] != "mtp")):
        return Decision(None, "throughput workload: large batches already make decode "
                        "compute-bound, so verifying drafts costs real FLOPs", CH_SPEC)
    if found is None:
        return Decision(None, "no draft: pass an EAGLE-3 head you validated (draft_model=...) "
                        "to enable it", CH_SPEC)
    method, alpha, src, cost, k_max = found
    if acceptance_rate is not None and method != "suffix":
        alpha, src, k_max = acceptance_rate, "measured (given)", MAX_DRAFT_TOKENS
    if method == "suffix":
        return Decision(Speculation(method, k_max, None, src, ()), (
            f"suffix decoding (agent loops repeat earlier outputs): it drafts up to {k_max} "
            "tokens from suffix trees over the prompt and past responses, as many as match; "
            "needs the arctic-inference package"), CH_SPEC,
            f"{WHEEL}: config/speculative.py::SpeculativeConfig._validate_suffix_decoding")
    k = choose_draft_length(alpha, cost, k_max)
    t_crit = roofline.critical_tokens(g, 2 * spec.n_active_params,
                                      sizing.weight_bytes(spec, weight_dtype))
    why = (f"expected {expected_tokens_per_pass(alpha, k):.2f} tokens per target pass at "
           f"acceptance {alpha:g} ({src})")
    schedule = spec_schedule(k, t_crit, max_num_seqs)
    if dp > 1:
        b = max(1, min(running_batch or max_num_seqs, max_num_seqs))
        k_dp = next(r[2] for r in schedule if r[0] <= b <= r[1])
        cite = f"{WHEEL}: config/vllm.py::VllmConfig._maybe_disable_dynamic_sd_for_data_parallel"
        if k_dp == 0:
            return Decision(None, (
                f"off: with --data-parallel-size {dp} vLLM keeps one k for all batch sizes, and "
                f"one replica's running batch ({b}) x (k + 1) is past the ~{t_crit:.0f}-token "
                "compute-bound point even at k = 1"), CH_SPEC, cite)
        k = k_dp
        why = (f"expected {expected_tokens_per_pass(alpha, k):.2f} tokens per target pass at "
               f"acceptance {alpha:g} ({src}); k = {k} is the schedule's value at one replica's "
               f"running batch of {b}: with --data-parallel-size {dp} vLLM keeps one k for all "
               "batch sizes (ranks could otherwise pick different k)")
        schedule = ()
    else:
        off_at = next((r[0] for r in schedule if r[2] == 0), None)
        why += (f"; k shrinks as the batch grows and is off from {off_at} running requests, "
                f"where batch x (k+1) passes the ~{t_crit:.0f}-token compute-bound point"
                if off_at else "; the batch never gets large enough to turn it off")
        schedule = schedule if len(schedule) > 1 else ()
        cite = f"{WHEEL}: config/vllm.py::VllmConfig._maybe_disable_dynamic_sd_for_v1"
    return Decision(Speculation(method, k, alpha, src, schedule,
                                draft_model if method == "eagle3" else None), why, CH_SPEC, cite)


def decide_async_scheduling(method: str | None, pp: int) -> Decision:
    """Return value True (pass --async-scheduling) or False (leave it to vLLM, which turns it
    off for these settings; passing the flag would make it refuse to start).

    vLLM 0.33.0 runs Model Runner V2 by default, which overlaps scheduling with every setting
    the book emits, pipeline parallelism included (pp + 1 batches in flight), except the
    speculative methods V2 does not run (suffix): vLLM falls back to the V1 runner for those,
    and V1 cannot overlap them."""
    cite = (f"{WHEEL}: config/vllm.py::VllmConfig.__post_init__, "
            "VllmConfig._get_v2_model_runner_unsupported_features, "
            "VllmConfig.max_concurrent_batches")
    if method not in V2_UNSUPPORTED_METHODS:
        why = "the CPU schedules step n+1 while the GPU runs step n (Model Runner V2)"
        if pp > 1:
            why += (f"; with PP={pp} vLLM keeps pp + 1 = {max_concurrent_batches(pp, True)} "
                    "batches in flight")
        return Decision(True, why, CH_BATCHING, cite)
    return Decision(False, f"Model Runner V2 does not run {method} drafting, so vLLM falls back "
                    f"to the V1 runner, which cannot overlap scheduling with {method}-based "
                    "speculative decoding; it turns async scheduling off itself (an explicit "
                    "--async-scheduling would refuse to start)", CH_BATCHING, cite)


# ---------------------------------------------------------------------------------------------
# context limits of the served checkpoint, and fixes that would work


# rope_theta of the families whose chat checkpoints need a YaRN override: vLLM 0.33 replaces
# the config's whole rope_parameters with --hf-overrides, so the override repeats it
# (Qwen2.5 config.json: "rope_theta": 1000000.0).
ROPE_THETA = {"Qwen2.5": 1_000_000.0}


def decide_context(spec: ModelSpec, served: str, ctx: int) -> Decision:
    """Return value = dict(limit, hf_overrides) for serving `served` at `ctx` tokens, or None
    (with suggestions in `extra`) when the checkpoint cannot reach `ctx`.

    The chat repository's own limit and the YaRN scaling its model card gives are the model
    preset's (`ModelSpec.chat_max_position_embeddings`, `chat_rope_scaling`)."""
    native = spec.chat_max_position_embeddings
    if served != spec.chat_repo or not native:
        return Decision(dict(limit=spec.max_position_embeddings, hf_overrides=None),
                        "the served checkpoint's own context limit", CH_SIZING)
    if ctx <= native:
        return Decision(dict(limit=native, hf_overrides=None),
                        f"{served} is configured for {native:,} positions", CH_SIZING)
    scaling = json.loads(spec.chat_rope_scaling) if spec.chat_rope_scaling else {}
    factor = float(scaling.get("factor", 1.0))
    longest = int(native * factor)
    if ctx > longest:
        return Decision(None, (
            f"{served} is configured for {native:,} positions"
            + (f", and its model card extends it with YaRN (factor {factor:g}) to "
               f"{longest:,} at most" if factor > 1 else "")
            + f"; {ctx:,} were requested."),
            CH_SIZING, extra={"suggestions": (f"cap --max-model-len at {longest}",
                                              "chunk the documents (RAG) so each request fits")})
    rope = dict(scaling)
    theta = next((v for k, v in ROPE_THETA.items() if spec.name.startswith(k)), None)
    if theta is not None:
        rope.setdefault("rope_theta", theta)
    overrides = json.dumps({"rope_parameters": rope}, separators=(",", ":"))
    return Decision(dict(limit=longest, hf_overrides=overrides), (
        f"{served} is configured for {native:,} positions; {ctx:,} need the YaRN scaling its "
        f"model card gives (factor {factor:g} over {native:,}), passed as --hf-overrides"),
        CH_SIZING, f"{WHEEL}: config/model.py (rope_parameters scale the derived max length)",
        extra={"warning": f"{served} beyond {native:,} tokens runs with static YaRN scaling, "
               "which the model card says may lower quality on short texts: serve it only "
               "where long requests need it"})


def memory_fixes(spec: ModelSpec, g: GPU, n: int, ctx: int,
                 allow_quantization: bool) -> tuple[str, ...]:
    """Return the changes that would make `ctx`-token requests of `spec` fit, each checked with
    the same budget rules: more GPUs of this type, a GPU with more memory, a shorter context
    (only when the weights alone leave room), quantized weights (only when they would fit)."""
    from .hardware import GPUS

    def fits(gpu: GPU, count: int, tokens: int, quant: bool) -> bool:
        req = PlanRequest(count, compute_dtype(gpu), "latency", None, 0.92)
        return decide_weights(spec, gpu, tokens, req, quant).value is not None

    out = []
    more = next((m for m in (2, 4, 8, 16, 32, 64) if m > n and fits(g, m, ctx, False)), None)
    if more:
        out.append(f"at least {more}x {g.name} (the checkpoint's weights at TP/PP over them)")
    bigger = [x.name for x in GPUS.values() if x.hbm_bytes > g.hbm_bytes and fits(x, n, ctx, False)]
    if bigger:
        out.append(f"{n}x a GPU with more memory: {', '.join(bigger)}")
    if ctx > 1024 and fits(g, n, 1024, False):
        lo, hi = 1024, ctx
        while hi - lo > 256:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(g, n, mid, False) else (lo, mid)
        out.append(f"a --max-model-len of at most {lo:,} on these GPUs")
    if not allow_quantization and fits(g, n, ctx, True):
        out.append("quantized weights (allow_quantization=True), after a quality check")
    nothing = (f"{spec.name} does not fit on {n}x {g.name} at any context: weights alone "
               f"exceed the budget; use more GPUs than one node's {GPUS_PER_NODE} or a smaller "
               "model")
    return tuple(out) or (nothing,)
