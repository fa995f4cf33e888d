"""vLLM's start-up memory budget, term by term, as the pinned vLLM 0.33.0 computes it.

One function, `layout_budget` of a resolved `EngineLayout` (model, GPU, TP x PP, weight format,
scheduler caps, utilization), is the budget every reader uses: the recommender (`rules.layout`),
the simulator's deployments (`simulate.kv_blocks`), the DP + EP alternative, chapter 8, the
calculators and the log check (`inferbook.vllm_logs`, through `vllm_memory_budget`, the same
budget from loose arguments). Every function here takes a resolved `ModelSpec` and `GPU`: a
preset name is resolved once where the reader's call comes in. Each term cites the
0.33.0 wheel (`pip download --no-deps vllm==0.33.0`) as file:line; older versions' rules are
selected by `vllm_version`, each difference stated where it applies (read from those versions'
wheels):

* requested memory ``ceil(total x gpu_memory_utilization)`` (`request_memory`,
  v1/worker/utils.py:716-723; the total is what CUDA reports, `GPU.memory_bytes`);
* weights as "Model loading took" counts them: every parameter at its stored format split
  over TP x PP, plus what every rank holds whole (`vllm_replicated_bytes`: the rotary cos/sin
  cache, an MoE router);
* the torch peak of the profiling run (`vllm_activation_bytes`): the forward pass over
  `max_num_batched_tokens` tokens or the sampler over min(max_num_seqs, tokens) rows, whichever
  is larger (`vllm_sampler_bytes`, per version and sampling path);
* non-torch memory (`vllm_non_torch_bytes`: CUDA context share, cuBLAS, NCCL and custom
  all-reduce buffers; read from logs, more with TP > 1);
* the CUDA-graph estimate, deducted before the pool is sized from 0.21 on.

Then `vllm_kv_cache` turns the available bytes into blocks, "GPU KV cache size: N tokens" and
"Maximum concurrency", and `vllm_startup` does both end to end with the serve defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import sizing, validate
from .arith import ceil_div
from .hardware import GPU, require_gpu
from .models import ModelSpec, require_spec
from .sizing import DType, MemoryBudget, RuntimeMemory

GiB = 2**30
VLLM_PINNED = "0.33.0"
DEFAULT_UTILIZATION = 0.92     # CacheConfig.gpu_memory_utilization (config/cache.py:215)


def _positive_int(name: str, value) -> int:
    return validate.positive_int(name, value)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise validate.ArgumentTypeError(f"{name} must be True or False, got {value!r}")
    return value


def parse_version(value) -> tuple[int, int, int]:
    """Return vLLM's version string (e.g. "0.10.1.1", "0.33.0") as (major, minor, patch)."""
    if not isinstance(value, str):
        raise validate.ArgumentTypeError(f"vllm_version must be a version string like "
                                         f"'0.33.0', got {value!r}")
    parts = value.strip().lstrip("v").split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or "x") for p in parts[:3]]
    except ValueError:
        raise ValueError(f"vllm_version must look like '0.33.0', got {value!r}") from None
    if len(nums) < 2:
        raise ValueError(f"vllm_version must look like '0.33.0', got {value!r}")
    return tuple((nums + [0, 0])[:3])  # type: ignore[return-value]


# the KV cache from the available bytes --------------------------------------------------------


@dataclass(frozen=True)
class VllmKVCache:
    """vLLM's KV-cache layout for one worker: blocks, groups, tokens and concurrency it logs."""

    available_bytes: int       # "Available KV cache memory" (bytes)
    block_size: int            # tokens per block
    num_groups: int            # KV-cache groups (hybrid allocator: one per layer group)
    layers_per_group: int
    bytes_per_block: int       # one block id across one group's layers: what the pool divides by
    num_blocks: int            # floor(available / bytes_per_block)
    blocks_per_request: int    # blocks one request of max_model_len takes, all groups
    max_model_len: int
    kv_tokens: int             # "GPU KV cache size: N tokens"
    max_concurrency: float     # "Maximum concurrency for max_model_len tokens per request: x"
    rule: str                  # which version's rules were applied


def _kv_groups(windows: tuple[int | None, ...], hybrid: bool) -> tuple[int, list[int | None]]:
    """Return (layers per group, window of each group) as vLLM groups the layers of one worker.

    One attention type: one group of all layers. Several (sliding + full, the hybrid
    allocator): `_get_kv_cache_groups_uniform_page_size` (v1/core/kv_cache_planning.py:416-558)
    buckets layers by type, takes the smallest bucket as the group size (the largest when it is
    below 1.5x the smallest, gpt-oss + eagle) and cuts each bucket into cdiv(n, size) groups,
    padding the last; every group has the same page size, so each block id spans
    `group_size` layers.
    """
    kinds: dict[int | None, int] = {}
    for w in windows:
        kinds[w] = kinds.get(w, 0) + 1
    if len(kinds) == 1 or not hybrid:
        # without the hybrid allocator, sliding layers are allocated as full attention
        # (`unify_hybrid_kv_cache_specs`, kv_cache_planning.py:853)
        one = next(iter(kinds)) if len(kinds) == 1 else None
        return len(windows), [one]
    lo, hi = min(kinds.values()), max(kinds.values())
    size = hi if hi < lo * 1.5 else lo
    groups: list[int | None] = []
    for w, n in kinds.items():
        groups += [w] * ceil_div(n, size)
    return size, groups


def vllm_kv_cache(spec: ModelSpec, n_gpus: int = 1, *, available_bytes: int,
                  max_model_len: int, kv_dtype: str | DType = "bf16",
                  block_size: int = sizing.DEFAULT_BLOCK_SIZE, pipeline_parallel: int = 1,
                  max_num_batched_tokens: int = 2048, vllm_version: str = VLLM_PINNED,
                  hybrid_kv_cache_manager: bool = True) -> VllmKVCache:
    """Return the KV cache vLLM builds from `available_bytes` per GPU, and what it logs.

    0.33.0, term by term:

    * page: ``block_size x bytes per token per layer`` on this GPU (`AttentionSpec.
      page_size_bytes`, v1/kv_cache_interface.py:597; KV heads split by TP, replicated past
      num_key_value_heads; an MLA latent is not split);
    * groups and bytes per block: `_kv_groups` (sliding + full layers share a page size;
      bytes per block = page x layers per group, `_get_kv_cache_bytes_per_block`,
      kv_cache_planning.py:573-606);
    * ``num_blocks = available // bytes_per_block`` (`get_kv_cache_config_from_groups`,
      kv_cache_planning.py:679);
    * per request: full-attention groups ``cdiv(max_model_len, block_size)`` blocks, sliding
      groups ``cdiv(min(window - 1 + in_flight, max_model_len), block_size) + 1`` with
      ``in_flight = max_concurrent_batches x max_num_batched_tokens`` (`VllmConfig.
      max_in_flight_tokens`, config/vllm.py:588-609: pp + 1 batches with async scheduling on
      Model Runner V2);
    * ``max_concurrency = num_blocks / blocks_per_request`` and the logged
      ``kv_tokens = int(max_concurrency x max_model_len)`` (`get_kv_cache_capacity`,
      v1/core/kv_cache_utils.py:1061-1128).

    Older versions, as their logs show (`vllm_version`): before 0.21 one batch is in flight and
    the token count is ``num_blocks // num_groups x block_size``; before 0.10 there is no hybrid
    allocator (sliding layers count as full) and concurrency is ``tokens / max_model_len``;
    before 0.8 (the V0 engine, "# GPU blocks") every layer is full attention and
    ``num_blocks = available // (block_size x bytes per token, all layers)``.
    """
    s, dt = require_spec(spec), sizing.get_dtype(kv_dtype, "kv_dtype")
    validate.non_negative_int("available_bytes", available_bytes)
    _positive_int("max_model_len", max_model_len)
    _positive_int("block_size", block_size)
    _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if not isinstance(hybrid_kv_cache_manager, bool):
        raise validate.ArgumentTypeError(f"hybrid_kv_cache_manager must be True or False, got "
                                         f"{hybrid_kv_cache_manager!r}")
    v = parse_version(vllm_version)
    heads = sizing.kv_heads_per_gpu(s, n_gpus)
    windows = sizing.stage_windows(s, pipeline_parallel)
    page = block_size * sizing.layer_kv_bytes(s, dt, kv_heads=None if s.is_mla else heads)
    if v < (0, 8, 0):        # V0: one block spans all layers, all full attention
        rule = "V0 (< 0.8): all layers full attention, blocks x block_size"
        size, groups = len(windows), [None]
    else:
        hybrid = hybrid_kv_cache_manager and v >= (0, 10, 0)
        size, groups = _kv_groups(windows, hybrid)
        rule = ("V1 >= 0.21: int(concurrency x max_model_len), pp + 1 batches in flight"
                if v >= (0, 21, 0) else
                "V1 0.10-0.20: num_blocks // groups x block_size, one batch in flight"
                if v >= (0, 10, 0) else "V1 0.8-0.9: no hybrid allocator")
    bytes_per_block = size * page
    num_blocks = available_bytes // bytes_per_block
    batches = pipeline_parallel + 1 if v >= (0, 21, 0) else 1
    in_flight = batches * max_num_batched_tokens
    per_request = sum(sizing.request_blocks(w, max_model_len, in_flight, block_size,
                                           chunked=s.local_attention == "chunked")
                      for w in groups)
    if v >= (0, 21, 0):
        concurrency = num_blocks / per_request
        tokens = int(concurrency * max_model_len)
    else:
        tokens = num_blocks // len(groups) * block_size
        concurrency = (num_blocks / per_request if v >= (0, 10, 0)
                       else tokens / max_model_len)
    return VllmKVCache(available_bytes, block_size, len(groups), size, bytes_per_block,
                       num_blocks, per_request, max_model_len, tokens, concurrency, rule)

# the non-KV terms -----------------------------------------------------------------------------

# Non-torch memory per GPU (GiB), read from start-up logs (the records that set them are
# `vllm_logs.FIT_RECORDS`; vLLM measures it at start-up, no configuration predicts it exactly):
# * one GPU: 0.13 on H100 (vLLM 0.11, llm-d empirical-vllm-memory-results.md, five models) and
#   0.02-0.06 on 24/96 GB cards (0.10.2/0.12 "Actual usage" lines); 0.16-0.35 with the V0 engine;
# * two GPUs: 0.55 (Llama-3.3-70B FP8 and Qwen3-32B, TP = 2, H100, the same llm-d file);
# * four and eight GPUs: about 2 GiB of custom all-reduce and NCCL buffers (Qwen3-32B on 4 and 8
#   H100s, vLLM 0.10.0, DaisukeTakai/eval_dataset), as real logs put it near 2 GiB per GPU.
NON_TORCH_GIB = {"tp1": 0.13, "tp2": 0.55, "tp4+": 2.0,
                 "v0_tp1": 0.25, "v0_tp2": 0.5, "v0_tp4+": 2.0}
# CUDA graphs: "Graph capturing finished in 3 secs, took 0.50 GiB" (TP = 1) and 0.65 GiB
# (TP = 2) in vLLM 0.10.1 logs. 0.21+ deducts its estimate before sizing the pool
# (gpu_worker.py:702-757, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default, envs.py:2219);
# 0.19.1 computes it but deducts it only when that variable is set (envs.py:1654, default 0).
CUDA_GRAPH_GIB = {"tp1": 0.50, "tp": 0.65}

# The sampler's profiling peak, in bytes per row x vocabulary entry, by path (read from each
# version's v1/sample and v1/worker/gpu/sample; `m` is the model dtype's bytes, 2 for bf16):
# `_dummy_sampler_run` (gpu_model_runner.py:5866, 0.33.0) keeps the model-dtype logits alive
# while `Sampler.forward` makes its float32 copy (v1/sample/sampler.py:90, `logits.to(float32)`),
# so every V1 path pays m + 4 first. Then:
# * "sort" (PyTorch top-k/top-p, `apply_top_k_top_p_pytorch`, topk_topp_sampler.py:524): sorted
#   float32 values + int64 indices (12), the radix sort's second key/value buffers (12),
#   `probs_sort` (4) and the boolean masks (2): m + 34. The default before 0.17 (FlashInfer was
#   opt-in from 0.12, absent from pip installs before);
# * "triton" (0.17-0.20's default: `apply_top_k_top_p_triton` in place for >= 8 rows,
#   topk_topp_sampler.py:245-256 of 0.19.1, plus a per-SM float32 row buffer,
#   topk_topp_triton.py:1015-1019), then the float32 probabilities and the exponential noise
#   (`random_sample`, topk_topp_sampler.py:325-346): m + 4 + 4 + 4;
# * "flashinfer" (0.21+'s default, VLLM_USE_FLASHINFER_SAMPLER=True, envs.py:51):
#   `top_k_top_p_sampling_from_logits` masks the logits into a new float32 tensor and softmaxes
#   it (topk_topp_sampler.py:631-668): m + 4 + 4 + 4;
# * Model Runner V2 before 0.33 samples the model-dtype logits with its Triton Gumbel kernel,
#   no top-k/top-p in the profiling pass (v1/worker/gpu/model_runner.py:919-930 of 0.30.0): m;
# * Model Runner V2 in 0.33 runs a second, warm-up-parameter pass "so the profiled peak must
#   too" (v1/worker/gpu/model_runner.py:993-1012): the float32 copy (sample/sampler.py:242), then
#   FlashInfer's mask + softmax (m + 4 + 8) or the in-place Triton top-k/top-p with the
#   logprobs' float32 log-softmax (m + 4 + 4).
SAMPLER_EXTRA_BYTES = {"sort": 34, "triton": 12, "flashinfer": 12, "v2": 0,
                       "v2-warmup-flashinfer": 12, "v2-warmup": 8}
TRITON_SAMPLER_SMS = 132     # an H100's SMs, for GPUs whose preset does not say


def vllm_sampler_path(spec: ModelSpec, vllm_version: str = VLLM_PINNED, *,
                      rows: int = 256, flashinfer_sampler: bool | None = None) -> str:
    """Return the sampling path vLLM `vllm_version` profiles for `spec` (a key of
    `SAMPLER_EXTRA_BYTES`); `flashinfer_sampler` None: the version's default (FlashInfer is on
    by default from 0.21, opt-in before; older pip installs lacked it)."""
    s = require_spec(spec)
    v = parse_version(vllm_version)
    rows = _positive_int("rows", rows)
    if flashinfer_sampler is None:
        flashinfer_sampler = v >= (0, 21, 0)
    _flag("flashinfer_sampler", flashinfer_sampler)
    if vllm_model_runner(s, vllm_version) == "v2":
        if v < (0, 33, 0):
            return "v2"
        return "v2-warmup-flashinfer" if flashinfer_sampler else "v2-warmup"
    if flashinfer_sampler:
        return "flashinfer"
    return "triton" if v >= (0, 17, 0) and rows >= 8 else "sort"


def vllm_sampler_bytes(spec: ModelSpec, gpu: GPU | None = None, *, rows: int,
                       max_num_batched_tokens: int, vllm_version: str = VLLM_PINNED,
                       flashinfer_sampler: bool | None = None, model_dtype_bytes: int = 2) -> int:
    """Return the torch peak of the profiling run's sampler on one GPU (last PP rank).

    ``rows x vocab x (m + SAMPLER_EXTRA_BYTES[path])`` with `m` the model dtype's bytes (the
    logits vLLM computes stay alive), plus the forward pass's hidden states still held
    (`max_num_batched_tokens` x hidden x m) and, on the Triton path, its per-SM row buffer.
    """
    s, g = require_spec(spec), None if gpu is None else require_gpu(gpu)
    rows = _positive_int("rows", rows)
    tokens = _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    m = _positive_int("model_dtype_bytes", model_dtype_bytes)
    path = vllm_sampler_path(s, vllm_version, rows=rows, flashinfer_sampler=flashinfer_sampler)
    peak = rows * s.vocab_size * (m + SAMPLER_EXTRA_BYTES[path]) + tokens * s.hidden_size * m
    if path == "triton":
        sms = (g.num_sms if g is not None else None) or TRITON_SAMPLER_SMS
        peak += min(sms, rows) * s.vocab_size * 4
    return peak


def vllm_activation_bytes(spec: ModelSpec, n_gpus: int = 1, *,
                          max_num_batched_tokens: int, max_num_seqs: int,
                          vllm_version: str = VLLM_PINNED, gpu: GPU | None = None,
                          flashinfer_sampler: bool | None = None) -> int:
    """Return the estimated torch peak of vLLM's profiling run on one GPU.

    `profile_run` (gpu_model_runner.py:6072) runs one forward pass over
    `max_num_batched_tokens` tokens, then the sampler over min(max_num_seqs, tokens) rows
    (`vllm_sampler_bytes`); they run one after the other, so the peak is the larger. Forward:
    per token two 16-bit hidden vectors plus the MLP's gate/up and activation outputs
    (3 x intermediate, split by TP; an MoE token does this for each of its top-k experts) or
    attention's q/k/v, whichever is larger.
    """
    s = require_spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    tokens = _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    rows = min(_positive_int("max_num_seqs", max_num_seqs), tokens)
    if s.is_moe:
        mlp = s.num_experts_per_tok * 3 * s.moe_intermediate_size
        if s.n_moe_layers < s.num_hidden_layers:          # dense layers besides the MoE ones
            mlp = max(mlp, 3 * s.intermediate_size)
    else:
        mlp = 3 * s.intermediate_size
    attn = s.num_attention_heads * (3 * s.head_dim if not s.is_mla else s.head_dim + s.v_head_dim)
    forward = tokens * 2 * (2 * s.hidden_size + ceil_div(max(mlp, attn), tp))
    sampler = vllm_sampler_bytes(s, gpu, rows=rows, max_num_batched_tokens=tokens,
                                 vllm_version=vllm_version, flashinfer_sampler=flashinfer_sampler)
    return max(forward, sampler)


def vllm_non_torch_bytes(n_gpus: int = 1, *, pipeline_parallel: int = 1,
                         vllm_version: str = VLLM_PINNED) -> int:
    """Return the non-torch memory (CUDA context share, cuBLAS, NCCL and custom all-reduce
    buffers) vLLM measures per GPU, as start-up logs show it (`NON_TORCH_GIB`)."""
    tp = _positive_int("n_gpus", n_gpus)
    ranks = tp * _positive_int("pipeline_parallel", pipeline_parallel)
    v0 = parse_version(vllm_version) < (0, 8, 0)
    key = "tp1" if ranks == 1 else "tp2" if ranks == 2 else "tp4+"
    return int(NON_TORCH_GIB[("v0_" if v0 else "") + key] * GiB)


def vllm_cuda_graph_bytes(n_gpus: int = 1) -> int:
    """Return the CUDA-graph pool estimate per GPU (`CUDA_GRAPH_GIB`, from start-up logs)."""
    tp = _positive_int("n_gpus", n_gpus)
    return int(CUDA_GRAPH_GIB["tp1" if tp == 1 else "tp"] * GiB)


def cuda_graphs_deducted(vllm_version: str = VLLM_PINNED) -> bool:
    """Return whether `vllm_version` deducts its CUDA-graph estimate before sizing the pool."""
    return parse_version(vllm_version) >= (0, 21, 0)


# Which models run Model Runner V2 by default, per version (`VllmConfig.use_v2_model_runner` and
# `_is_default_v2_model_runner_model`, config/vllm.py of each wheel): none before 0.22; 0.22 only
# Qwen3 (dense, unquantized); 0.23 Llama, Mistral and Qwen3 (dense, unquantized); 0.24 those plus
# DeepSeek-V2 / Qwen2-MoE / Granite-MoE; 0.25-0.28 every dense model and those MoE families
# (Qwen3-MoE, Mixtral, gpt-oss stay on V1: the 0.26.1 Qwen3-Coder log runs gpu_model_runner.py);
# 0.29+ every model (only unsupported features fall back to V1).
_V2_FAMILIES = {(0, 22): ("qwen3",), (0, 23): ("llama", "mistral", "qwen3"),
                (0, 24): ("llama", "mistral", "qwen3", "deepseek-v2", "qwen2-moe", "granite")}
_V2_MOE_FAMILIES = ("deepseek-v2", "qwen2-moe", "granite")


def _family(s: ModelSpec) -> str:
    """Return the architecture family vLLM's V2 defaults name, from the model's name/source."""
    text = f"{s.name} {s.source}".lower().replace("_", "-")
    if "mixtral" in text:
        return "mixtral"
    for fam in ("deepseek-v2", "qwen2-moe", "qwen1.5-moe", "granite", "qwen3", "llama",
                "mistral"):
        if fam in text:
            return "qwen2-moe" if fam == "qwen1.5-moe" else fam
    return ""


def vllm_model_runner(spec: ModelSpec, vllm_version: str = VLLM_PINNED) -> str:
    """Return "v2" where `vllm_version` runs Model Runner V2 by default for `spec`, else "v1"
    (the rule by version is in the comment above `_V2_FAMILIES`)."""
    s = require_spec(spec)
    v = parse_version(vllm_version)
    if v < (0, 22, 0):
        return "v1"
    if v >= (0, 29, 0):
        return "v2"
    fam = _family(s)
    if v < (0, 25, 0):
        allowed = _V2_FAMILIES[v[:2]]
        quantized = s.checkpoint_dtype not in ("bf16", "fp16", "fp32")
        if v < (0, 24, 0) and (s.is_moe or quantized):
            return "v1"
        if s.is_moe:                              # a listed MoE architecture (Qwen2MoeFor...)
            return "v2" if fam in _V2_MOE_FAMILIES else "v1"
        return "v2" if fam in allowed else "v1"
    return "v2" if (not s.is_moe or fam in _V2_MOE_FAMILIES) else "v1"


def vllm_rope_cache_bytes(spec: ModelSpec) -> int:
    """Return the rotary-embedding cos/sin cache vLLM allocates while loading the model.

    `RotaryEmbedding.__init__` (model_executor/layers/rotary_embedding/base.py:58-63, 0.33.0)
    registers ``cos_sin_cache`` = max_position_embeddings x rotary_dim values in the model's
    16-bit dtype (`cache.to(dtype)`), once per model (`get_rope` shares one instance,
    rotary_embedding/__init__.py:84), on every TP rank. It is allocated inside
    `DeviceMemoryProfiler` around `load_model`, so "Model loading took" includes it: Llama-3.1-8B
    (131,072 x 128 x 2 B = 0.031 GiB) and Qwen3-30B-A3B (262,144 x 128 x 2 B = 0.0625 GiB) log
    that much above their parameter bytes.
    """
    s = require_spec(spec)
    rotary_dim = s.qk_rope_head_dim if s.is_mla else s.head_dim
    return s.max_position_embeddings * rotary_dim * 2


def vllm_replicated_bytes(spec: ModelSpec, n_gpus: int = 1) -> int:
    """Return what every TP rank holds beyond its even share of the parameters.

    * the rotary cache (`vllm_rope_cache_bytes`), one per rank;
    * an MoE model's router: `GateLinear` is a `ReplicatedLinear`
      (model_executor/layers/fused_moe/router/gate_linear.py:22; qwen3_moe.py:170,
      mixtral.py:111, deepseek_v2.py:321), so each rank holds all experts x hidden 16-bit
      weights of every MoE layer, not 1/TP of them (Qwen3-30B-A3B on 2 H100s: 28.4571 GiB
      logged, 12 MiB above the even split plus the rotary cache).
    """
    s = require_spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    extra = vllm_rope_cache_bytes(s)
    if s.is_moe and tp > 1:
        router = s.n_moe_layers * s.n_routed_experts \
            * s.hidden_size * 2
        extra += router - ceil_div(router, tp)
    return extra


def vllm_runtime_memory(spec: ModelSpec, n_gpus: int = 1, *, max_num_batched_tokens: int,
                        max_num_seqs: int, cuda_graphs: bool = True,
                        vllm_version: str = VLLM_PINNED, pipeline_parallel: int = 1,
                        gpu: GPU | None = None,
                        flashinfer_sampler: bool | None = None) -> RuntimeMemory:
    """Return what vLLM `vllm_version` subtracts per GPU besides the weights: the profiling
    run's torch peak (`vllm_activation_bytes`), the non-torch memory (`vllm_non_torch_bytes`)
    and the CUDA-graph estimate where the version deducts it (`cuda_graphs_deducted`)."""
    s = require_spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    pp = _positive_int("pipeline_parallel", pipeline_parallel)
    _flag("cuda_graphs", cuda_graphs)
    act = vllm_activation_bytes(s, tp, max_num_batched_tokens=max_num_batched_tokens,
                                max_num_seqs=max_num_seqs, vllm_version=vllm_version, gpu=gpu,
                                flashinfer_sampler=flashinfer_sampler)
    nt = vllm_non_torch_bytes(tp, pipeline_parallel=pp, vllm_version=vllm_version)
    graphs = vllm_cuda_graph_bytes(tp) if cuda_graphs and cuda_graphs_deducted(vllm_version) else 0
    how = (f"vLLM {vllm_version}: activations = max(forward over {max_num_batched_tokens:,} "
           f"tokens, sampler over {min(max_num_seqs, max_num_batched_tokens):,} rows); non-torch "
           f"{nt / GiB:.2f} GiB" + (f"; CUDA graphs {graphs / GiB:.2f} GiB" if graphs else
                                    "; CUDA graphs not deducted"))
    return RuntimeMemory(act, graphs, nt, how)


@dataclass(frozen=True)
class VllmBudget(MemoryBudget):
    """One GPU's start-up budget as vLLM computes it (a `MemoryBudget` whose weights include
    what every rank holds whole and whose runtime terms are vLLM's): requested - weights -
    runtime = "Available KV cache memory"."""

    how: str = ""

    @property
    def available_kv_bytes(self) -> int:
        """Return "Available KV cache memory" (negative: vLLM refuses to start)."""
        return self.kv_budget_bytes


@dataclass(frozen=True)
class EngineLayout:
    """One engine's resolved layout, what its start-up budget depends on: the model and GPU
    (resolved objects, never names), TP x PP, the weight format (None: the checkpoint's), the
    scheduler caps and `gpu_memory_utilization`. Checked once here; `layout_budget` reads it."""

    spec: ModelSpec
    gpu: GPU
    tp: int = 1
    pp: int = 1
    weight_dtype: str | DType | None = None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    gpu_memory_utilization: float = DEFAULT_UTILIZATION

    def __post_init__(self) -> None:
        require_spec(self.spec), require_gpu(self.gpu)
        for name, value in (("tp", self.tp), ("pp", self.pp), ("max_num_seqs", self.max_num_seqs),
                            ("max_num_batched_tokens", self.max_num_batched_tokens)):
            _positive_int(name, value)
        object.__setattr__(self, "gpu_memory_utilization", sizing.fraction(
            "gpu_memory_utilization", self.gpu_memory_utilization, high_open=False))
        if self.weight_dtype is not None:
            sizing.get_dtype(self.weight_dtype, "weight_dtype")
        problem = sizing.tp_problem(self.spec, self.tp)
        if problem:
            raise ValueError(f"tp: {problem}")


def layout_budget(layout: EngineLayout, *, vllm_version: str = VLLM_PINNED,
                  cuda_graphs: bool = True, weight_bytes: int | None = None,
                  flashinfer_sampler: bool | None = None) -> VllmBudget:
    """Return `layout`'s per-GPU budget the way vLLM `vllm_version` computes it (0.33.0 by
    default): the one budget the planner, the simulator, the calculators and the log check read.

    `Worker.determine_available_memory` (v1/worker/gpu_worker.py:641-757): requested memory
    ``ceil(total x gpu_memory_utilization)`` (`request_memory`, v1/worker/utils.py:716-723),
    minus what the profiling run consumed (`memory_profiling`, utils/mem_utils.py:230-321:
    weights + non-torch memory + the torch peak), minus the CUDA-graph estimate when deducted.
    Weights: every parameter at `weight_dtype` (None: the checkpoint's format) split over
    TP x PP, plus `vllm_replicated_bytes`; `weight_bytes` overrides them (e.g. a logged
    "Model loading took").
    """
    if not isinstance(layout, EngineLayout):
        raise TypeError(f"layout must be a vllm_memory.EngineLayout, got {type(layout).__name__}")
    s, g, tp, pp, util = layout.spec, layout.gpu, layout.tp, layout.pp, layout.gpu_memory_utilization
    if weight_bytes is None:
        weights = (sizing.weight_bytes_per_gpu(s, tp, layout.weight_dtype, pipeline_parallel=pp)
                   + vllm_replicated_bytes(s, tp))
    else:
        weights = validate.non_negative_int("weight_bytes", weight_bytes)
    runtime = vllm_runtime_memory(s, tp, max_num_batched_tokens=layout.max_num_batched_tokens,
                                  max_num_seqs=layout.max_num_seqs, cuda_graphs=cuda_graphs,
                                  vllm_version=vllm_version, pipeline_parallel=pp, gpu=g,
                                  flashinfer_sampler=flashinfer_sampler)
    requested = math.ceil(round(g.memory_bytes * util, 6))
    how = (f"ceil({g.memory_bytes / GiB:.2f} GiB x {util}) - weights {weights / GiB:.2f} GiB - "
           + runtime.how)
    return VllmBudget(g.memory_bytes, requested, weights, runtime, how)


def vllm_memory_budget(spec: ModelSpec, gpu: GPU, n_gpus: int = 1, *,
                       gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                       weight_dtype: str | DType | None = None,
                       max_num_batched_tokens: int, max_num_seqs: int,
                       pipeline_parallel: int = 1, vllm_version: str = VLLM_PINNED,
                       cuda_graphs: bool = True, weight_bytes: int | None = None,
                       flashinfer_sampler: bool | None = None) -> VllmBudget:
    """Return `layout_budget` of the `EngineLayout` these arguments describe (`n_gpus`: TP)."""
    s, tp = require_spec(spec), _positive_int("n_gpus", n_gpus)
    _positive_int("pipeline_parallel", pipeline_parallel)
    problem = sizing.tp_problem(s, tp)
    if problem:   # named as the caller spelled it (EngineLayout says tp)
        raise ValueError(f"n_gpus: {problem}")
    layout = EngineLayout(s, gpu, tp, pipeline_parallel, weight_dtype, max_num_batched_tokens,
                          max_num_seqs, gpu_memory_utilization)
    return layout_budget(layout, vllm_version=vllm_version, cuda_graphs=cuda_graphs,
                         weight_bytes=weight_bytes, flashinfer_sampler=flashinfer_sampler)


def vllm_default_caps(gpu: GPU, vllm_version: str = VLLM_PINNED, *,
                      max_model_len: int | None = None) -> tuple[int, int]:
    """Return `vllm serve`'s default (max_num_batched_tokens, max_num_seqs) on this GPU.

    V1 (0.8+; 0.33.0's `EngineArgs.get_batch_defaults`, engine/arg_utils.py:2950-3000, the
    OpenAI-server column): >= 160 GiB 16384 / 1024; >= 70 GiB and not an A100 8192 / 1024;
    otherwise 2048 / 256. The V0 engine (< 0.8) profiled max(max_model_len, 2048) tokens, or 512
    with chunked prefill (on above a 32K context), and 256 sequences.
    """
    g = require_gpu(gpu)
    v = parse_version(vllm_version)
    if v < (0, 8, 0):
        ctx = 2048 if max_model_len is None else _positive_int("max_model_len", max_model_len)
        return (512 if ctx > 32768 else max(ctx, 2048)), 256
    if g.memory_bytes >= 160 * GiB:
        return 16384, 1024
    if g.memory_bytes >= 70 * GiB and "a100" not in g.name.lower():
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class VllmStartup:
    """What `vllm serve` computes at start-up on one GPU: the budget and the KV cache it logs."""

    budget: VllmBudget
    kv_cache: VllmKVCache
    max_num_batched_tokens: int
    max_num_seqs: int

    @property
    def kv_tokens(self) -> int:
        """Return "GPU KV cache size: N tokens"."""
        return self.kv_cache.kv_tokens

    @property
    def max_concurrency(self) -> float:
        """Return "Maximum concurrency for max_model_len tokens per request"."""
        return self.kv_cache.max_concurrency


def vllm_startup(spec: ModelSpec, gpu: GPU, n_gpus: int = 1, *,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.92,
                 kv_dtype: str | DType = "bf16", weight_dtype: str | DType | None = None,
                 max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                 pipeline_parallel: int = 1, block_size: int = sizing.DEFAULT_BLOCK_SIZE,
                 vllm_version: str = VLLM_PINNED, cuda_graphs: bool = True,
                 flashinfer_sampler: bool | None = None) -> VllmStartup:
    """Return vLLM's start-up numbers for `spec` on `n_gpus`-way TP of `gpu`, end to end.

    `vllm_memory_budget` (weights at the checkpoint's format unless `weight_dtype` says
    otherwise, activations, non-torch, CUDA graphs) gives the available KV memory;
    `vllm_kv_cache` turns it into blocks, "GPU KV cache size" tokens and the maximum
    concurrency. Defaults are 0.33.0's: `gpu_memory_utilization` 0.92
    (config/cache.py:215), `max_model_len` the model's `max_position_embeddings`, the scheduler
    caps `vllm_default_caps`. A budget that leaves no memory for the cache raises ValueError,
    as vLLM does ("No available memory for the cache blocks").
    """
    s, g = require_spec(spec), require_gpu(gpu)
    ctx = s.max_position_embeddings if max_model_len is None else max_model_len
    _positive_int("max_model_len", ctx)
    d_tokens, d_seqs = vllm_default_caps(g, vllm_version, max_model_len=ctx)
    tokens = d_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    seqs = d_seqs if max_num_seqs is None else max_num_seqs
    budget = vllm_memory_budget(s, g, n_gpus, gpu_memory_utilization=gpu_memory_utilization,
                                weight_dtype=weight_dtype, max_num_batched_tokens=tokens,
                                max_num_seqs=seqs, pipeline_parallel=pipeline_parallel,
                                vllm_version=vllm_version, cuda_graphs=cuda_graphs,
                                flashinfer_sampler=flashinfer_sampler)
    if budget.available_kv_bytes <= 0:
        raise ValueError(f"gpu_memory_utilization: {s.name} on {n_gpus}x {g.name} leaves "
                         f"{budget.available_kv_bytes / GiB:.2f} GiB for the KV cache "
                         "(vLLM: 'No available memory for the cache blocks')")
    cache = vllm_kv_cache(s, n_gpus, available_bytes=budget.available_kv_bytes,
                          max_model_len=ctx, kv_dtype=kv_dtype, block_size=block_size,
                          pipeline_parallel=pipeline_parallel, max_num_batched_tokens=tokens,
                          vllm_version=vllm_version)
    return VllmStartup(budget, cache, tokens, seqs)
