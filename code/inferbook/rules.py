"""The deployment rules, one function per decision, each returning a `Decision`.

`inferbook.recommend.recommend` calls them in order; every function here only decides. Memory
comes from `inferbook.sizing` (weights, KV cache, the vLLM budget), time from
`inferbook.roofline`, attention backends from `inferbook.attention_backends`. Each rule that
rests on vLLM's behaviour names the file and function of the pinned wheel (vllm 0.33.0) in
its `citation`; `tests/test_recommend_vllm.py` quotes the source line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from . import attention_backends, checkpoints, sizing, vllm_memory
from .arith import ceil_div
from .decision import Decision
from .hardware import GPU
from .models import ModelSpec

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


def default_graph_ceiling(g: GPU) -> int:
    """Return vLLM 0.33.0's default ceiling on CUDA-graph capture sizes: 1024 tokens on data
    centre Blackwell (sm100 family), else 512 (config/vllm.py:2463-2465)."""
    return 1024 if g.compute_capability[0] == 10 else 512


def cuda_graph_capture_max(g: GPU, max_num_seqs: int, max_num_batched_tokens: int,
                           decode_query_len: int = 1) -> int:
    """Return the largest step (tokens) vLLM 0.33.0 captures a CUDA graph for by default:
    min(max_num_seqs x decode_query_len x 2, the ceiling, max_num_batched_tokens)
    (`VllmConfig._set_cudagraph_sizes`, config/vllm.py:2460-2552)."""
    return min(max_num_seqs * decode_query_len * 2, default_graph_ceiling(g),
               max_num_batched_tokens)


# ---------------------------------------------------------------------------------------------
# memory layouts


@dataclass(frozen=True)
class Layout:
    """One replica's parallel layout and its per-GPU memory budget. `ep` > 1: data-parallel
    attention on every GPU (tp = 1, `dp` ranks) with the routed experts spread over `ep` GPUs."""

    tp: int
    pp: int
    dp: int
    weight_dtype: str
    kv_dtype: str
    batching: Decision             # this layout's scheduler caps (decide_batching)
    budget: vllm_memory.VllmBudget
    window_extra_tokens: int       # vLLM keeps in-flight tokens beside each window
    ep: int = 1
    draft: checkpoints.DraftWeights | None = None   # its weights are in budget.weight_bytes

    def _layers(self, spec: ModelSpec) -> int:
        return ceil_div(spec.num_hidden_layers, self.pp)

    def sequences(self, spec: ModelSpec, tokens: int, shared_prefix: int = 0) -> int:
        """Return how many requests of `tokens` tokens this layout's KV budget holds (a draft's
        attention layers take their share of every block: vLLM pages them with the target's)."""
        budget = self.budget.kv_budget_bytes
        if self.draft is not None and budget > 0:
            budget = budget * self._layers(spec) // (self._layers(spec) + self.draft.kv_layers)
        return sizing.sequences_that_fit(
            budget, spec, self.tp, tokens, self.kv_dtype,
            shared_prefix_tokens=shared_prefix, pipeline_parallel=self.pp,
            window_extra_tokens=self.window_extra_tokens, block_size=BLOCK_SIZE)

    def kv_bytes(self, spec: ModelSpec, tokens: int, batch: int = 1) -> int:
        """Return the KV bytes per GPU of `batch` requests of `tokens` tokens (draft layers
        included)."""
        target = sizing.kv_bytes_per_gpu(spec, self.tp, tokens, batch, self.kv_dtype,
                                         pipeline_parallel=self.pp,
                                         window_extra_tokens=self.window_extra_tokens,
                                         block_size=BLOCK_SIZE)
        if self.draft is None:
            return target
        return ceil_div(target * (self._layers(spec) + self.draft.kv_layers), self._layers(spec))


@dataclass(frozen=True)
class PlanRequest:
    """What every layout is sized for: the GPUs, the formats and the scheduling intent."""

    n_gpus: int
    kv_dtype: str
    priority: str
    concurrency: int | None
    utilization: float
    draft: checkpoints.DraftWeights | None = None   # a draft vLLM loads beside the model


def expert_bytes(spec: ModelSpec, weight_dtype: str) -> int:
    """Return the bytes of the routed experts (what expert parallelism shards), all layers."""
    if not spec.is_moe:
        return 0
    params = (spec.n_moe_layers * spec.n_routed_experts * 3 * spec.hidden_size
              * spec.moe_intermediate_size)
    return int(params * sizing.get_dtype(weight_dtype).bits / 8)


def layout(spec: ModelSpec, g: GPU, tp: int, pp: int, weight_dtype: str, req: PlanRequest,
           ep: int = 1) -> Layout:
    """Return the layout with vLLM's budget: utilization x total - weights - runtime terms.

    `ep` > 1 (tp = pp = 1): every GPU is a data-parallel attention rank holding the attention
    and dense weights whole and 1/ep of the routed experts; its non-torch memory is a TP
    group's (NCCL buffers for the all-to-all)."""
    dp = req.n_gpus // (tp * pp)
    batching = decide_batching(g, req.priority, req.concurrency, dp)
    caps = batching.value
    # the one vLLM budget (vllm_memory.layout_budget), as the simulator and the log check read
    budget = vllm_memory.layout_budget(vllm_memory.EngineLayout(
        spec, g, tp, pp, weight_dtype, caps["max_num_batched_tokens"], caps["max_num_seqs"],
        req.utilization))
    if ep > 1:
        experts = expert_bytes(spec, weight_dtype)
        weights = (sizing.weight_bytes(spec, weight_dtype) - experts + ceil_div(experts, ep)
                   + vllm_memory.vllm_replicated_bytes(spec, 1))
        budget = replace(budget, weight_bytes=weights, runtime=replace(
            budget.runtime, non_torch_bytes=vllm_memory.vllm_non_torch_bytes(2)))
    if req.draft is not None:   # the MTP layer / EAGLE-3 head, sharded like the model
        budget = replace(budget, weight_bytes=budget.weight_bytes + req.draft.bytes_per_gpu(
            tp, ep, sizing.get_dtype(weight_dtype).bits / 8))
    # VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens, and
    # max_concurrent_batches = pp + 1 under Model Runner V2 with async scheduling (0.33's default)
    in_flight = caps["max_num_batched_tokens"] * max_concurrent_batches(pp, True)
    return Layout(tp, pp, dp, weight_dtype, req.kv_dtype, batching, budget, in_flight, ep,
                  req.draft)


def max_concurrent_batches(pp: int, async_scheduling: bool, v2_runner: bool = True) -> int:
    """Return vLLM 0.33.0's `VllmConfig.max_concurrent_batches`: pp + 1 with async scheduling
    on Model Runner V2, 2 on V1 without PP, else pp (config/vllm.py)."""
    if async_scheduling:
        if v2_runner:
            return pp + 1
        if pp <= 1:
            return 2
    return pp


PCIE_TP_STEPS = (2, 4)     # without NVLink: TP <= 2, then <= 4, each before a larger TP
MAX_PIPELINE_STAGES = 16   # beyond this many stages a replica is a fleet, not a layout


def layout_shapes(spec: ModelSpec, n: int, max_tp: int, pipeline: bool) -> list[tuple[int, int, int]]:
    """Return the (tp, pp, ep) shapes of `n` GPUs, simplest first: TP degrees up to `max_tp`
    inside one node; with `pipeline`, the largest of them times PP stages across whole nodes;
    for MoE models, data-parallel attention with EP over one node (or whole nodes)."""
    per_node = min(n, GPUS_PER_NODE)
    tps = [d for d in sizing.valid_tp_degrees(spec, min(per_node, max_tp))
           if n % d == 0 and per_node % d == 0]
    shapes = [(d, 1, 1) for d in tps]
    if pipeline and n > GPUS_PER_NODE and tps:
        top = tps[-1]
        shapes += [(top, pp, 1) for pp in range(2, min(n // top, MAX_PIPELINE_STAGES) + 1)
                   if n % (top * pp) == 0 and pp <= spec.num_hidden_layers
                   and (top * pp) % GPUS_PER_NODE == 0]
    if spec.is_moe and n >= 2:
        groups = [per_node] + [e for e in (16, 32, 64) if e <= n and n % e == 0]
        shapes += [(1, 1, e) for e in groups if n % e == 0]
    return shapes


# ---------------------------------------------------------------------------------------------
# weights


def weight_ladder(spec: ModelSpec, g: GPU,
                  allow_quantization: bool) -> list[tuple[str, str | None, str]]:
    """Return (storage dtype, --quantization, why) from the checkpoint's dtype down. A
    published pre-quantized checkpoint (`inferbook.checkpoints`) needs no --quantization."""
    # the checkpoint's stored format (from_hf_config reads quantization_config), else the report
    native = (spec.checkpoint_dtype if spec.checkpoint_dtype != "bf16"
              else CHECKPOINT_DTYPE.get(spec.name, "bf16"))
    ladder = [(native, None, f"the checkpoint's own {native} weights")]
    if not allow_quantization:
        return ladder
    if sizing.get_dtype(native).bits > 8:
        repo = checkpoints.published(spec.name, "fp8")
        if repo and sm(g) >= 89:
            ladder.append(("fp8", None, f"the published FP8 checkpoint {repo} (W8A8 FP8 "
                                        f"kernels on sm{sm(g)})"))
        else:
            how = "W8A8 FP8 kernels" if sm(g) >= 89 else "FP8 Marlin weight-only kernels (sm75+)"
            ladder.append(("fp8", "fp8_per_tensor", f"online FP8 quantization of the linear "
                           f"layers ({how}; vLLM 0.33 calls it fp8_per_tensor: plain fp8 no "
                           "longer quantizes online)"))
    nvfp4 = checkpoints.published(spec.name, "nvfp4")
    if nvfp4 and sm(g) >= 100 and sizing.get_dtype(native).bits > 4:
        ladder.append(("nvfp4", None, f"the published NVFP4 checkpoint {nvfp4} (FP4 tensor "
                                      f"cores on sm{sm(g)}; 4.5 bits per weight)"))
    if sizing.get_dtype(native).bits > 4:
        repo = checkpoints.published(spec.name, "int4")
        ladder.append(("int4", None if repo else "awq",
                       f"the published 4-bit AWQ checkpoint {repo} (Marlin kernels)" if repo
                       else "a pre-quantized 4-bit AWQ checkpoint"))
    return ladder


RANKED_FORMATS = {"fp8": 89, "nvfp4": 100}   # published formats with native kernels from smXX


def published_rivals(spec: ModelSpec, g: GPU, ladder) -> dict[str, str]:
    """Return {format: repository} of the published checkpoints worth ranking beside 16-bit
    weights: FP8 where W8A8 FP8 kernels run (sm89+: Ada, Hopper, Blackwell), NVFP4 where FP4
    tensor cores do (sm100+)."""
    if sizing.get_dtype(ladder[0][0]).bits <= 8:
        return {}
    return {x[0]: checkpoints.published(spec.name, x[0]) for x in ladder[1:]
            if x[0] in RANKED_FORMATS and x[1] is None and sm(g) >= RANKED_FORMATS[x[0]]}


WEIGHT_CITATION = {
    "fp8_per_tensor": f"{WHEEL}: model_executor/layers/quantization/fp8.py:106-111 (fp8 refuses "
                      "online quantization), config/quantization.py:196 (fp8_per_tensor), "
                      "model_executor/layers/quantization/online/base.py:209-212 (sm75+)",
}


def decide_weights(spec: ModelSpec, g: GPU, ctx: int, req: PlanRequest,
                   allow_quantization: bool) -> Decision:
    """Return the weight format and the layouts that hold one `ctx`-token request with it:
    value = dict(weight_dtype, quantization, served_repo, layouts), or None (and the numbers
    that say why) when nothing does.

    The tiers, first that holds a request wins: the checkpoint's own weights at TP <= 8 inside
    a node (on PCIe GPUs, without NVLink, first every format at TP <= 2, then at TP <= 4:
    a TP all-reduce over PCIe costs more than the quantization); then pipeline
    parallelism across nodes; then quantized weights (a published checkpoint where one exists,
    else online FP8, then AWQ) inside a node, then across nodes."""
    n = req.n_gpus
    ladder = weight_ladder(spec, g, allow_quantization)
    pcie = g.nvlink_bytes_per_s is None
    tiers = ([(fmt, max_tp, False) for max_tp in PCIE_TP_STEPS for fmt in ladder]
             if pcie else [])
    tiers += [(ladder[0], GPUS_PER_NODE, False), (ladder[0], GPUS_PER_NODE, True)]
    tiers += [(fmt, GPUS_PER_NODE, pp) for fmt in ladder[1:] for pp in (False, True)]
    if not layout_shapes(spec, n, GPUS_PER_NODE, True):
        return Decision(None, f"no tensor-parallel degree dividing {n} can shard {spec.name} "
                        f"({spec.num_attention_heads} heads, {spec.num_key_value_heads} KV "
                        "heads)", CH_SIZING)
    for (wdtype, quant, why), max_tp, pipeline in tiers:
        fitting = [lay for tp, pp, ep in layout_shapes(spec, n, max_tp, pipeline)
                   if (lay := layout(spec, g, tp, pp, wdtype, req, ep)).sequences(spec, ctx) >= 1]
        if pipeline and not any(lay.pp > 1 for lay in fitting):
            continue
        if fitting and not pipeline and all(lay.ep > GPUS_PER_NODE for lay in fitting):
            # only an expert-parallel group wider than a node holds it: rank it against
            # TP x PP across the same nodes
            fitting += [lay for tp, pp, ep in layout_shapes(spec, n, max_tp, True) if pp > 1
                        and (lay := layout(spec, g, tp, pp, wdtype, req)).sequences(spec, ctx)
                        >= 1]
        if fitting:
            native = (wdtype, quant, why) == ladder[0]
            rivals = published_rivals(spec, g, ladder) if native else {}
            for fmt in rivals:   # rank published FP8 / NVFP4 checkpoints beside the native one
                more = [lay for tp, pp, ep in layout_shapes(spec, n, max_tp, True)
                        if (lay := layout(spec, g, tp, pp, fmt, req, ep)).sequences(spec, ctx)
                        >= 1]
                # pipeline stages only where no single-node layout of that format holds one
                fitting += [lay for lay in more if lay.pp == 1] or more
            if not native:
                where = f"at TP <= {max_tp} on PCIe GPUs " if pcie and max_tp < 8 else ""
                why += (f"; the checkpoint's weights {where}leave no room for one {ctx:,}-token "
                        f"request on {n}x {g.name}: check quality on your task before serving")
            repo = None if native or quant else checkpoints.published(spec.name, wdtype)
            return Decision(dict(weight_dtype=wdtype, quantization=quant, served_repo=repo,
                                 layouts=fitting), why, CH_SIZING,
                            WEIGHT_CITATION.get(quant, ""),
                            extra={"rivals": rivals} if rivals else {})
    wdtype = ladder[-1][0]
    tp, pp, ep = [s for s in layout_shapes(spec, n, GPUS_PER_NODE, True) if s[2] == 1][-1]
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
    # SGLang 0.5.23's own default (get_default_attn_backend, srt/arg_groups/
    # model_override_base.py:277-335): MHA: fa3 on Hopper, trtllm_mha on sm100, else
    # FlashInfer (a dependency of the wheel, so installed; sm75 included) unless the model has
    # attention sinks (gpt-oss: triton); MLA: fa3 on Hopper, FlashInfer on Blackwell, else triton
    major = g.compute_capability[0]
    sinks = "gpt-oss" in spec.name.lower()
    sglang = ("triton" if spec.is_mla and major < 9 else
              {9: "fa3", 10: "trtllm_mha"}.get(major, "triton" if sinks else "flashinfer"))
    if spec.is_mla and major >= 10:
        sglang = "flashinfer"
    hf = {7: "sdpa", 8: "flash_attention_2", 9: "flash_attention_3"}.get(major,
                                                                       "flash_attention_4")
    return Decision(dict(vllm=vb.name, flash_attention_version=vb.flash_attention_version,
                         sglang=sglang, hf=hf), vb.why, CH_TRITON,
                    f"{WHEEL}: platforms/cuda.py::_get_backend_priorities; sglang 0.5.23 "
                    "srt/arg_groups/model_override_base.py:277-335")


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
