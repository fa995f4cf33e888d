"""KV-cache and weight sizing: bytes per token, what fits on a GPU, and how many GPUs it takes.

Per token and per layer the cache holds (values, then times the dtype's bytes):

* MHA / GQA / MQA: a key and a value vector for each KV head,
  ``2 * num_key_value_heads * head_dim`` values (MHA: KV heads = query heads; MQA: one).
* MLA (DeepSeek-V2/V3): one compressed latent plus the decoupled RoPE key shared by all heads,
  ``kv_lora_rank + qk_rope_head_dim`` values. No factor 2: keys and values are both
  re-expanded from the same latent.

A sliding-window layer holds at most `sliding_window` tokens, whatever the context length.

Dtypes (`DTYPES`) and their stated overhead:

* fp32 4 bytes, bf16 / fp16 2 bytes, fp8 (e4m3) 1 byte: no per-value metadata. fp8 caches
  (vLLM ``--kv-cache-dtype fp8``) keep one float32 scale per layer for K and one for V; that is a
  few bytes per layer for the whole cache, not per token, so it is left out.
* int8: 1 byte per value plus one fp16 scale per group of 128 values (8.125 bits per value).
* int4: half a byte per value plus an fp16 scale and an fp16 zero point per group of 128 values
  (4.25 bits per value, the GPTQ/AWQ layout).
* q8_0 / q4_0: llama.cpp's block formats (``--cache-type-k/-v``): blocks of 32 values with one fp16
  scale, 34 and 18 bytes per block (8.5 and 4.5 bits per value).

Groups never span two cached vectors: each K or V head vector (or MLA latent) is its own row.

Weights at a dtype: every parameter at that dtype, grouped the same way, except that below 16
bits the token embedding and the LM head stay at 16 bits, as fp8, AWQ and GPTQ checkpoints (and
vLLM's online fp8) keep them (`weight_bytes`).

Tensor parallelism over `n_gpus` (vLLM's layout): weights are split evenly; a GQA model's KV heads
are split across GPUs (replicated once there are more GPUs than KV heads); an MLA latent is not
split, every GPU holds the whole latent cache. Pipeline parallelism over `pipeline_parallel`
stages splits the layers: a GPU holds its stage's weights and its stage's layers' cache.

GPU memory is the total CUDA reports (`GPU.memory_bytes`, e.g. 79.18 GiB on an H100 80GB), not
the datasheet's "GB": that is what vLLM multiplies by `gpu_memory_utilization`.

Weights default to the checkpoint's own format (`ModelSpec.checkpoint_dtype`: bf16 for the
presets; fp8, AWQ/GPTQ ("awq"), compressed-tensors W4A16 ("w4a16") and MXFP4 (gpt-oss, routed
experts only) from a config's `quantization_config`).

The memory budget (`memory_budget`) is one model with two readings:

* chapter 2's: `reserve_fraction` of each GPU's memory is kept back for everything that is not
  weights or cache (activations, the CUDA context, CUDA graphs, allocator slack), an assumption;
* vLLM's (`vllm_runtime_memory`, used by the recommender): vLLM 0.33.0 requests
  ``ceil(total * gpu_memory_utilization)`` bytes (`v1/worker/utils.py::request_memory`) and gives
  the KV cache what is left after the weights, the peak activations of a profiling forward pass,
  the non-torch memory (NCCL, cuBLAS) and the CUDA-graph estimate
  (`v1/worker/gpu_worker.py::Worker.determine_available_memory`).

vLLM's start-up accounting, term by term (the last section; each rule with its vLLM 0.33.0
file:line, older versions selected by `vllm_version`, checked against 35 real start-up logs in
`inferbook.vllm_logs`):

* `vllm_startup(spec, gpu, n_gpus, max_model_len=..., gpu_memory_utilization=0.92, ...)`: end to
  end, what `vllm serve` logs ("Available KV cache memory", "GPU KV cache size: N tokens",
  "Maximum concurrency");
* `vllm_memory_budget(...)` -> `VllmBudget` (requested, weights, activations, non-torch, CUDA
  graphs and whether they are deducted, `available_kv_bytes`); `vllm_activation_bytes`,
  `vllm_non_torch_bytes`, `vllm_default_caps` (the serve defaults per GPU and version);
* `vllm_kv_cache(spec, n_gpus, available_bytes=..., max_model_len=...)` -> `VllmKVCache`
  (page and group layout of the hybrid allocator, `num_blocks`, blocks per request, tokens,
  concurrency);
* `kv_bytes_per_gpu(..., block_size=16)` and `sequences_that_fit(..., block_size=16)` count
  whole blocks as vLLM reserves them (a sliding-window layer: cdiv(min(window - 1 + in-flight,
  ctx), block) + 1 blocks).

GPU memory is the total CUDA reports (`GPU.memory_bytes`), in both readings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import validate
from .arith import ceil_div
from .hardware import GPU, gpu as _gpu
from .models import ModelSpec, as_spec as _spec


@dataclass(frozen=True)
class DType:
    """A storage format: bits per value, plus per-group metadata (scales, zero points)."""

    name: str
    bits: int
    group_size: int | None = None    # values sharing one scale; None: no per-group metadata
    group_overhead_bytes: int = 0    # bytes of scale (+ zero point) per group
    note: str = ""

    def vector_bytes(self, n_values: int) -> int:
        """Return the bytes of one vector of `n_values` values, its group metadata included."""
        validate.non_negative_int("n_values", n_values)
        data = ceil_div(n_values * self.bits, 8)
        if self.group_size is None:
            return data
        return data + ceil_div(n_values, self.group_size) * self.group_overhead_bytes

    @property
    def bits_per_value(self) -> float:
        """Return the average bits per value for long vectors (data plus group metadata)."""
        if self.group_size is None:
            return float(self.bits)
        return self.bits + 8 * self.group_overhead_bytes / self.group_size


DTYPES: dict[str, DType] = {
    d.name: d
    for d in [
        DType("fp32", 32, note="IEEE float32"),
        DType("bf16", 16, note="bfloat16"),
        DType("fp16", 16, note="IEEE float16"),
        DType("fp8", 8, note="e4m3; one fp32 scale per tensor (per layer for K and for V), "
                             "not per token, so counted as zero"),
        DType("int8", 8, 128, 2, note="one fp16 scale per group of 128 values"),
        DType("int4", 4, 128, 4, note="one fp16 scale and one fp16 zero point per group of 128 values"),
        DType("q8_0", 8, 32, 2, note="llama.cpp block: 32 int8 values + one fp16 scale"),
        DType("q4_0", 4, 32, 2, note="llama.cpp block: 32 4-bit values + one fp16 scale"),
        DType("awq", 4, 256, 5, note="AWQ / GPTQ 4-bit checkpoints: per 128 values one fp16 scale "
                                     "and one packed 4-bit zero point (2.5 bytes, so 5 per 256)"),
        DType("w4a16", 4, 128, 2, note="compressed-tensors W4A16: 4-bit values, one fp16 scale per "
                                       "group of 128 (symmetric, no zero point)"),
        DType("mxfp4", 4, 32, 1, note="OCP microscaling: 32 FP4 (e2m1) values + one e8m0 "
                                      "scale byte (gpt-oss stores its routed experts so)"),
    ]
}

# Other spellings of the same formats (PyTorch, vLLM and Hugging Face names), lower-case.
DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
                 "half": "fp16", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8"}

DEFAULT_RESERVE_FRACTION = 0.10


def get_dtype(name: str | DType, argument: str = "dtype") -> DType:
    """Return the dtype called `name` (case-insensitive, aliases in `DTYPE_ALIASES`).

    `argument` is the caller's parameter name, which an error message names."""
    if isinstance(name, DType):
        return name
    if not isinstance(name, str):
        raise validate.ArgumentTypeError(f"{argument} must be a name like 'bf16', got "
                                         f"{type(name).__name__}")
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"{argument}: unknown dtype {name!r}; known dtypes: {', '.join(DTYPES)}")
    return DTYPES[key]


_dtype = get_dtype  # the sizing functions' `kv_dtype` argument shadows a public `dtype` name


def _positive_int(name: str, value) -> int:
    if isinstance(value, (str, GPU)):  # the commonest slip: arguments in the wrong order
        raise validate.ArgumentTypeError(
            f"{name} must be a positive integer, got {value!r} (the GPU is the second argument "
            "of fits/max_batch/max_context, and kv_bytes_per_gpu takes n_gpus second)")
    return validate.positive_int(name, value)


def _fraction(name: str, value, *, high_open: bool) -> float:
    value = validate.finite_float(name, value, minimum=0.0, maximum=1.0)
    if value == (1.0 if high_open else 0.0):
        rule = "[0, 1)" if high_open else "(0, 1]"
        raise ValueError(f"{name} must be a finite number in {rule}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# bytes per token


def kv_values_per_token_per_layer(spec: ModelSpec | str) -> int:
    """Return how many numbers one token adds to one layer's cache (before the dtype)."""
    s = _spec(spec)
    if s.is_mla:
        return s.kv_lora_rank + s.qk_rope_head_dim
    return 2 * s.num_key_value_heads * s.head_dim


def _layer_bytes(s: ModelSpec, dt: DType, kv_heads: int | None = None) -> int:
    """Bytes one token adds to one layer on one GPU holding `kv_heads` KV heads (default: all)."""
    if s.is_mla:
        return dt.vector_bytes(s.kv_lora_rank) + dt.vector_bytes(s.qk_rope_head_dim)
    heads = s.num_key_value_heads if kv_heads is None else kv_heads
    return 2 * heads * dt.vector_bytes(s.head_dim)


def kv_bytes_per_token_per_layer(spec: ModelSpec | str, kv_dtype: str | DType = "bf16") -> int:
    """Return the bytes one token adds to one layer's KV cache."""
    return _layer_bytes(_spec(spec), get_dtype(kv_dtype, "kv_dtype"))


def mha_kv_bytes_per_token_per_layer(spec: ModelSpec | str, kv_dtype: str | DType = "bf16") -> int:
    """Return what one layer would cache per token with full MHA (a K and V vector per query head).

    For MLA models these are the expanded keys (qk_nope + qk_rope wide) and values (v_head_dim)
    that attention actually uses; for the others, `head_dim`-wide K and V for every query head.
    """
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    if s.is_mla:
        k = dt.vector_bytes(s.qk_nope_head_dim + s.qk_rope_head_dim)
        v = dt.vector_bytes(s.v_head_dim)
        return s.num_attention_heads * (k + v)
    return 2 * s.num_attention_heads * dt.vector_bytes(s.head_dim)


def _cached_tokens(window: int | None, ctx_tokens: int, window_extra_tokens: int = 0) -> int:
    return ctx_tokens if window is None else min(window + window_extra_tokens, ctx_tokens)


def _stage_windows(s: ModelSpec, pipeline_parallel: int) -> tuple[int | None, ...]:
    """Return the layer windows of the pipeline stage with the most cached layers."""
    windows = s.layer_windows
    n, pp = len(windows), _positive_int("pipeline_parallel", pipeline_parallel)
    if pp > n:
        raise ValueError(f"pipeline_parallel ({pp}) cannot exceed the {n} layers of {s.name}")
    cuts = [i * n // pp for i in range(pp + 1)]
    stages = [windows[a:b] for a, b in zip(cuts, cuts[1:])]
    return max(stages, key=lambda st: (len(st), sum(w is None for w in st)))


def kv_bytes(spec: ModelSpec | str, ctx_tokens: int, batch: int = 1,
             kv_dtype: str | DType = "bf16") -> int:
    """Return the KV-cache bytes of `batch` sequences of `ctx_tokens` tokens, all layers.

    Sliding-window layers hold min(window, ctx_tokens) tokens.
    """
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    _positive_int("ctx_tokens", ctx_tokens)
    _positive_int("batch", batch)
    tokens = sum(_cached_tokens(w, ctx_tokens) for w in s.layer_windows)
    return batch * _layer_bytes(s, dt) * tokens


def kv_bytes_per_token(spec: ModelSpec | str, kv_dtype: str | DType = "bf16",
                       ctx_tokens: int | None = None) -> int:
    """Return the KV-cache bytes per token, summed over all layers.

    Without `ctx_tokens`: every layer stores the token (the cost of a token inside every window).
    With `ctx_tokens`: the average over a sequence of that length, sliding-window layers capped
    at their window, i.e. ``ceil(kv_bytes(spec, ctx_tokens, 1, kv_dtype) / ctx_tokens)``.
    """
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    if ctx_tokens is None:
        return s.num_hidden_layers * _layer_bytes(s, dt)
    return ceil_div(kv_bytes(s, ctx_tokens, 1, dt), ctx_tokens)


def embedding_params(spec: ModelSpec | str) -> int:
    """Return the parameters of the token embedding and the LM head (one matrix if tied)."""
    s = _spec(spec)
    return s.vocab_size * s.hidden_size * (1 if s.tie_word_embeddings else 2)


def weight_bytes(spec: ModelSpec | str, weight_dtype: str | DType | None = None) -> int:
    """Return the bytes of all parameters stored at `weight_dtype` (group scales included).

    `weight_dtype=None` reads the checkpoint's own format (`ModelSpec.checkpoint_dtype`: bf16
    for the presets; fp8, int4 (AWQ/GPTQ), mxfp4 from a config's `quantization_config`).
    Below 16 bits the embedding and LM head stay at 16 bits (fp8, AWQ and GPTQ checkpoints and
    vLLM's online fp8 quantize only the linear layers). MXFP4 (gpt-oss) quantizes only the
    routed experts; attention, router, shared parts and embeddings stay at 16 bits.
    """
    s = _spec(spec)
    dt = get_dtype(s.checkpoint_dtype if weight_dtype is None else weight_dtype, "weight_dtype")
    if dt.bits >= 16:
        return dt.vector_bytes(s.n_params)
    emb = embedding_params(s)
    if dt.name == "mxfp4":
        moe_layers = s.num_hidden_layers - s.first_k_dense_replace if s.is_moe else 0
        experts = moe_layers * s.n_routed_experts * 3 * s.hidden_size * s.moe_intermediate_size
        return dt.vector_bytes(experts) + 2 * (s.n_params - experts)
    return dt.vector_bytes(s.n_params - emb) + 2 * emb


def weight_bytes_per_gpu(spec: ModelSpec | str, n_gpus: int = 1,
                         weight_dtype: str | DType | None = "bf16", *,
                         pipeline_parallel: int = 1) -> int:
    """Return the weight bytes on each GPU of `n_gpus`-way TP x `pipeline_parallel` stages
    (an even split, rounded up)."""
    _positive_int("n_gpus", n_gpus)
    _positive_int("pipeline_parallel", pipeline_parallel)
    return ceil_div(weight_bytes(spec, weight_dtype), n_gpus * pipeline_parallel)


def with_kv_heads(spec: ModelSpec | str, num_key_value_heads: int) -> ModelSpec:
    """Return a hypothetical copy of `spec` with another number of KV heads (MHA / GQA / MQA)."""
    s = _spec(spec)
    if s.is_mla:
        raise ValueError(f"{s.name} uses MLA; it has no KV heads to change")
    _positive_int("num_key_value_heads", num_key_value_heads)
    kind = {1: "MQA", s.num_attention_heads: "MHA"}.get(num_key_value_heads,
                                                          f"GQA-{num_key_value_heads}")
    return replace(s, name=f"{s.name} as {kind}", num_key_value_heads=num_key_value_heads,
                   source=f"hypothetical: {s.source} with num_key_value_heads={num_key_value_heads}")


# ---------------------------------------------------------------------------------------------
# tensor parallelism


def tp_problem(spec: ModelSpec | str, n_gpus: int) -> str | None:
    """Return why `n_gpus`-way tensor parallelism cannot shard `spec`, or None if it can.

    vLLM's rules: query heads split evenly; KV heads split evenly, or, with more GPUs than
    KV heads, each KV head is replicated on n_gpus / num_key_value_heads GPUs.
    """
    s = _spec(spec)
    _positive_int("n_gpus", n_gpus)
    if s.num_attention_heads % n_gpus:
        return (f"{s.name}: {s.num_attention_heads} attention heads cannot be split over "
                f"{n_gpus} GPUs")
    kv = s.num_key_value_heads
    if not s.is_mla and kv % n_gpus and n_gpus % kv:
        return (f"{s.name}: {kv} KV heads can be neither split over nor replicated onto "
                f"{n_gpus} GPUs")
    return None


def valid_tp_degrees(spec: ModelSpec | str, max_gpus: int = 8) -> list[int]:
    """Return the tensor-parallel degrees 1..max_gpus that can shard `spec`."""
    _positive_int("max_gpus", max_gpus)
    return [n for n in range(1, max_gpus + 1) if tp_problem(spec, n) is None]


def kv_heads_per_gpu(spec: ModelSpec | str, n_gpus: int) -> int:
    """Return the KV heads each GPU stores under `n_gpus`-way TP (MLA: 0, it stores the latent)."""
    s = _spec(spec)
    problem = tp_problem(s, n_gpus)
    if problem:
        raise ValueError(f"n_gpus: {problem}")
    if s.is_mla:
        return 0
    return max(1, s.num_key_value_heads // n_gpus)


def kv_bytes_per_gpu(spec: ModelSpec | str, n_gpus: int, ctx_tokens: int, batch: int = 1,
                     kv_dtype: str | DType = "bf16", *, pipeline_parallel: int = 1,
                     window_extra_tokens: int = 0, block_size: int | None = None) -> int:
    """Return the KV-cache bytes each GPU holds for `batch` sequences of `ctx_tokens` tokens
    under `n_gpus`-way tensor parallelism (and `pipeline_parallel` stages: the fullest stage).

    GQA heads are split (replicated once there are more GPUs than KV heads); an MLA latent is
    not split. A sliding-window layer holds min(window + `window_extra_tokens`, ctx_tokens)
    tokens; vLLM keeps the tokens still in flight besides the window (`extra` = its
    `max_in_flight_tokens`, see `v1/kv_cache_interface.py::SlidingWindowSpec`).

    With `block_size` (vLLM's paged cache, 16 tokens by default there) the count is in whole
    blocks, as vLLM 0.33.0 reserves them per request: a full-attention layer
    ``cdiv(ctx_tokens, block_size)`` blocks (`FullAttentionSpec.max_memory_usage_bytes`,
    v1/kv_cache_interface.py:643), a sliding-window layer
    ``cdiv(min(window - 1 + window_extra_tokens, ctx_tokens), block_size) + 1`` blocks (the
    window need not start at a block boundary: `SlidingWindowSpec.
    max_admission_blocks_per_request`, v1/kv_cache_interface.py:918-944). Without it, tokens.
    """
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    heads = kv_heads_per_gpu(s, n_gpus)
    _positive_int("ctx_tokens", ctx_tokens)
    _positive_int("batch", batch)
    validate.non_negative_int("window_extra_tokens", window_extra_tokens)
    if block_size is not None:
        _positive_int("block_size", block_size)
    per_layer = _layer_bytes(s, dt, kv_heads=None if s.is_mla else heads)
    windows = _stage_windows(s, pipeline_parallel)
    if block_size is None:
        tokens = sum(_cached_tokens(w, ctx_tokens, window_extra_tokens) for w in windows)
    else:
        tokens = block_size * sum(_vllm_blocks(w, ctx_tokens, window_extra_tokens, block_size)
                                  for w in windows)
    return batch * per_layer * tokens


def _vllm_blocks(window: int | None, ctx_tokens: int, extra: int, block_size: int) -> int:
    """Blocks one request of `ctx_tokens` tokens holds in one layer, by vLLM 0.33.0's rule."""
    if window is None:   # FullAttentionSpec.max_memory_usage_bytes (kv_cache_interface.py:643)
        return ceil_div(ctx_tokens, block_size)
    # SlidingWindowSpec.max_admission_blocks_per_request (kv_cache_interface.py:918-944)
    return ceil_div(min(window - 1 + extra, ctx_tokens), block_size) + 1


def sequences_that_fit(kv_budget_bytes: int, spec: ModelSpec | str, n_gpus: int,
                       ctx_tokens: int, kv_dtype: str | DType = "bf16", *,
                       shared_prefix_tokens: int = 0, pipeline_parallel: int = 1,
                       window_extra_tokens: int = 0, block_size: int | None = None) -> int:
    """Return how many sequences of `ctx_tokens` tokens a per-GPU KV budget holds; 0 if none.

    With prefix caching the first `shared_prefix_tokens` of every sequence are stored once in
    the full-attention layers (a sliding-window layer drops them once they leave its window,
    so there they are counted per sequence).
    """
    s = _spec(spec)
    if isinstance(kv_budget_bytes, bool) or not validate.is_int(kv_budget_bytes):
        raise validate.ArgumentTypeError(f"kv_budget_bytes must be an integer number of bytes, "
                                         f"got {kv_budget_bytes!r}")
    _positive_int("ctx_tokens", ctx_tokens)
    if isinstance(shared_prefix_tokens, bool) or not isinstance(shared_prefix_tokens, int) \
            or not 0 <= shared_prefix_tokens < ctx_tokens:
        raise ValueError(f"shared_prefix_tokens must be an integer in [0, ctx_tokens={ctx_tokens})"
                         f", got {shared_prefix_tokens!r}")
    whole = kv_bytes_per_gpu(s, n_gpus, ctx_tokens, 1, kv_dtype,
                             pipeline_parallel=pipeline_parallel,
                             window_extra_tokens=window_extra_tokens, block_size=block_size)
    full_layers = sum(w is None for w in _stage_windows(s, pipeline_parallel))
    per_layer = _layer_bytes(s, get_dtype(kv_dtype, "kv_dtype"),
                             kv_heads=None if s.is_mla else kv_heads_per_gpu(s, n_gpus))
    shared = shared_prefix_tokens * full_layers * per_layer
    if kv_budget_bytes < whole:
        return 0
    return 1 + (kv_budget_bytes - whole) // (whole - shared)


# ---------------------------------------------------------------------------------------------
# the memory budget


@dataclass(frozen=True)
class RuntimeMemory:
    """Per-GPU memory an engine takes besides weights and KV cache, as estimated, with how."""

    activation_bytes: int     # peak of the profiling forward pass (and sampler)
    cuda_graph_bytes: int
    non_torch_bytes: int      # NCCL, cuBLAS workspaces: memory torch does not allocate
    how: str

    @property
    def total_bytes(self) -> int:
        """Return the three terms together."""
        return self.activation_bytes + self.cuda_graph_bytes + self.non_torch_bytes


NO_RUNTIME = RuntimeMemory(0, 0, 0, "folded into the reserve fraction")

GiB = 2**30
# Assumptions, not measurements: vLLM measures both at start-up and logs them.
ASSUMED_CUDA_GRAPH_BYTES = GiB // 2
ASSUMED_NON_TORCH_BYTES = {1: GiB // 4, "tp": GiB}   # one GPU; with NCCL and all-reduce buffers


def vllm_runtime_memory(spec: ModelSpec | str, n_gpus: int = 1, *, max_num_batched_tokens: int,
                        max_num_seqs: int, cuda_graphs: bool = True,
                        vllm_version: str = "0.33.0", pipeline_parallel: int = 1,
                        flashinfer_sampler: bool | None = None) -> RuntimeMemory:
    """Return what vLLM `vllm_version` (0.33.0 by default) subtracts besides weights, per GPU.

    The same terms as `vllm_memory_budget` (which see, with the source lines): the activation
    peak of the profiling run (`vllm_activation_bytes`: a forward pass over
    `max_num_batched_tokens` tokens, MoE per routed expert, plus the sampler over `max_num_seqs`
    rows), non-torch memory (`NON_TORCH_GIB`, read from logs: more with TP > 1) and the
    CUDA-graph estimate (`CUDA_GRAPH_GIB`), which 0.21+ deducts before sizing the KV pool
    (older versions capture graphs afterwards: pass `cuda_graphs=False` for their budget).
    """
    s = _spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    pp = _positive_int("pipeline_parallel", pipeline_parallel)
    if not isinstance(cuda_graphs, bool):
        raise validate.ArgumentTypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
    v = _version(vllm_version)
    act = vllm_activation_bytes(s, tp, max_num_batched_tokens=max_num_batched_tokens,
                                max_num_seqs=max_num_seqs, vllm_version=vllm_version,
                                flashinfer_sampler=flashinfer_sampler)
    nt_gib = vllm_non_torch_bytes(tp, pipeline_parallel=pp, vllm_version=vllm_version) / GiB
    deducted = cuda_graphs and v >= (0, 21, 0)
    graphs = int(CUDA_GRAPH_GIB["tp1" if tp == 1 else "tp"] * GiB) if deducted else 0
    how = (f"activations: forward pass over {max_num_batched_tokens:,} tokens + sampler over "
           f"{min(max_num_seqs, max_num_batched_tokens):,} rows (estimated); non-torch "
           f"{nt_gib:.2f} GiB and CUDA graphs {graphs / GiB:.2f} GiB (from start-up logs; vLLM "
           "measures them at start-up)")
    return RuntimeMemory(act, graphs, int(nt_gib * GiB), how)


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU's memory: what the engine may use, what it spends, and what the KV cache gets."""

    gpu_bytes: int
    usable_bytes: int          # ceil(total x gpu_memory_utilization)
    weight_bytes: int
    runtime: RuntimeMemory

    @property
    def reserve_bytes(self) -> int:
        """Return the memory left outside the engine's request."""
        return self.gpu_bytes - self.usable_bytes

    @property
    def kv_budget_bytes(self) -> int:
        """Return what is left for the KV cache (negative: short by that much)."""
        return self.usable_bytes - self.weight_bytes - self.runtime.total_bytes


def memory_budget(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1,
                  weight_dtype: str | DType = "bf16", *,
                  gpu_memory_utilization: float = 1 - DEFAULT_RESERVE_FRACTION,
                  runtime: RuntimeMemory = NO_RUNTIME, pipeline_parallel: int = 1) -> MemoryBudget:
    """Return one GPU's budget: ceil(total x utilization) - weights - runtime terms = KV budget."""
    g = _gpu(gpu)
    util = _fraction("gpu_memory_utilization", gpu_memory_utilization, high_open=False)
    if not isinstance(runtime, RuntimeMemory):
        raise validate.ArgumentTypeError(f"runtime must be a RuntimeMemory (see "
                                         f"vllm_runtime_memory), got {type(runtime).__name__}")
    usable = math.ceil(round(g.memory_bytes * util, 6))
    weights = weight_bytes_per_gpu(spec, n_gpus, weight_dtype, pipeline_parallel=pipeline_parallel)
    return MemoryBudget(g.memory_bytes, usable, weights, runtime)


# ---------------------------------------------------------------------------------------------
# does it fit?


@dataclass(frozen=True)
class FitReport:
    """Memory per GPU for one deployment: reserve + runtime + weights + KV against the GPU."""

    model: str
    gpu: str
    n_gpus: int
    ctx_tokens: int
    batch: int
    kv_dtype: str
    weight_dtype: str
    reserve_fraction: float
    memory_bytes_per_gpu: int
    reserve_bytes_per_gpu: int
    weight_bytes_per_gpu: int
    kv_bytes_per_gpu: int
    weight_bytes_total: int
    kv_bytes_total: int
    ctx_within_model_limit: bool   # ctx_tokens <= the model's max_position_embeddings
    fits: bool                     # reserve + runtime + weights + KV <= memory, on every GPU
    runtime_bytes_per_gpu: int = 0

    @property
    def used_bytes_per_gpu(self) -> int:
        """Return reserve + runtime + weights + KV on one GPU."""
        return (self.reserve_bytes_per_gpu + self.runtime_bytes_per_gpu
                + self.weight_bytes_per_gpu + self.kv_bytes_per_gpu)

    @property
    def free_bytes_per_gpu(self) -> int:
        """Return the bytes left on one GPU (negative: short by that much)."""
        return self.memory_bytes_per_gpu - self.used_bytes_per_gpu

    def __str__(self) -> str:
        gb = 1e9
        verdict = "fits" if self.fits else "does NOT fit"
        limit = "" if self.ctx_within_model_limit else " (context exceeds the model's limit!)"
        runtime = (f" + runtime {self.runtime_bytes_per_gpu / gb:.2f} GB"
                   if self.runtime_bytes_per_gpu else "")
        return (
            f"{self.model} on {self.n_gpus}x {self.gpu}, {self.batch} x {self.ctx_tokens} tokens"
            f"{limit}: {verdict}. Per GPU: weights {self.weight_bytes_per_gpu / gb:.2f} GB "
            f"({self.weight_dtype}) + KV {self.kv_bytes_per_gpu / gb:.2f} GB ({self.kv_dtype}) + "
            f"reserve {self.reserve_bytes_per_gpu / gb:.2f} GB{runtime} = "
            f"{self.used_bytes_per_gpu / gb:.2f} of {self.memory_bytes_per_gpu / gb:.2f} GB"
        )


def _checked_budget(s, g, n_gpus, weight_dtype, reserve_fraction, runtime) -> MemoryBudget:
    problem = tp_problem(s, n_gpus)
    if problem:
        raise ValueError(f"n_gpus: {problem}")
    reserve = _fraction("reserve_fraction", reserve_fraction, high_open=True)
    return memory_budget(s, g, n_gpus, weight_dtype, gpu_memory_utilization=1 - reserve,
                         runtime=runtime)


def fits(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, ctx_tokens: int = 4096,
         batch: int = 1, kv_dtype: str = "bf16", weight_dtype: str = "bf16",
         reserve_fraction: float = DEFAULT_RESERVE_FRACTION, *,
         runtime: RuntimeMemory = NO_RUNTIME) -> FitReport:
    """Return the per-GPU memory breakdown of serving `batch` sequences of `ctx_tokens` tokens
    with `n_gpus`-way tensor parallelism, and whether it fits."""
    s, g = _spec(spec), _gpu(gpu)
    budget = _checked_budget(s, g, n_gpus, weight_dtype, reserve_fraction, runtime)
    kv = kv_bytes_per_gpu(s, n_gpus, ctx_tokens, batch, kv_dtype)
    return FitReport(
        model=s.name, gpu=g.name, n_gpus=n_gpus, ctx_tokens=ctx_tokens, batch=batch,
        kv_dtype=get_dtype(kv_dtype, "kv_dtype").name, weight_dtype=get_dtype(weight_dtype, "weight_dtype").name,
        reserve_fraction=float(reserve_fraction), memory_bytes_per_gpu=g.memory_bytes,
        reserve_bytes_per_gpu=budget.reserve_bytes, weight_bytes_per_gpu=budget.weight_bytes,
        kv_bytes_per_gpu=kv, weight_bytes_total=weight_bytes(s, weight_dtype),
        kv_bytes_total=kv_bytes(s, ctx_tokens, batch, kv_dtype),
        ctx_within_model_limit=ctx_tokens <= s.max_position_embeddings,
        fits=kv <= budget.kv_budget_bytes, runtime_bytes_per_gpu=runtime.total_bytes,
    )


def max_batch(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, ctx_tokens: int = 4096,
              kv_dtype: str = "bf16", weight_dtype: str = "bf16",
              reserve_fraction: float = DEFAULT_RESERVE_FRACTION, *,
              runtime: RuntimeMemory = NO_RUNTIME) -> int:
    """Return how many sequences of `ctx_tokens` tokens fit at once (0: not even one)."""
    s, g = _spec(spec), _gpu(gpu)
    budget = _checked_budget(s, g, n_gpus, weight_dtype, reserve_fraction, runtime)
    return sequences_that_fit(budget.kv_budget_bytes, s, n_gpus, ctx_tokens, kv_dtype)


def max_context(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, batch: int = 1,
                kv_dtype: str = "bf16", weight_dtype: str = "bf16",
                reserve_fraction: float = DEFAULT_RESERVE_FRACTION, *,
                runtime: RuntimeMemory = NO_RUNTIME) -> int:
    """Return the longest context (<= the model's max_position_embeddings) at which `batch`
    sequences fit (0: not even one token each)."""
    s, g = _spec(spec), _gpu(gpu)
    _positive_int("batch", batch)
    left = _checked_budget(s, g, n_gpus, weight_dtype, reserve_fraction, runtime).kv_budget_bytes

    def ok(ctx: int) -> bool:
        return kv_bytes_per_gpu(s, n_gpus, ctx, batch, kv_dtype) <= left

    lo, hi = 0, s.max_position_embeddings     # KV bytes never fall as ctx grows: bisect
    if ok(hi):
        return hi
    while hi - lo > 1:                        # invariant: ok(lo) (or lo == 0), not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def min_tp_degree(spec: ModelSpec | str, gpu: GPU | str, ctx_tokens: int = 4096, batch: int = 1,
                  kv_dtype: str = "bf16", weight_dtype: str = "bf16",
                  reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
                  max_gpus: int = 8) -> int | None:
    """Return the smallest valid tensor-parallel degree (<= max_gpus) at which it fits, else None."""
    for n in valid_tp_degrees(spec, max_gpus):
        if fits(spec, gpu, n, ctx_tokens, batch, kv_dtype, weight_dtype, reserve_fraction).fits:
            return n
    return None


# ---------------------------------------------------------------------------------------------
# vLLM's start-up accounting, term by term
#
# The book pins vLLM 0.33.0; file:line references are to that wheel
# (`pip download --no-deps vllm==0.33.0`). Older versions differ in a few rules; `vllm_version`
# selects them, each difference stated where it applies (checked against the start-up logs in
# `inferbook/data/vllm_logs.json`, see `inferbook.vllm_logs`).

VLLM_PINNED = "0.33.0"
DEFAULT_BLOCK_SIZE = 16        # CacheConfig.DEFAULT_BLOCK_SIZE on CUDA (config/cache.py:463)


def _version(value) -> tuple[int, int, int]:
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


def vllm_kv_cache(spec: ModelSpec | str, n_gpus: int = 1, *, available_bytes: int,
                  max_model_len: int, kv_dtype: str | DType = "bf16",
                  block_size: int = DEFAULT_BLOCK_SIZE, pipeline_parallel: int = 1,
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
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    validate.non_negative_int("available_bytes", available_bytes)
    _positive_int("max_model_len", max_model_len)
    _positive_int("block_size", block_size)
    _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if not isinstance(hybrid_kv_cache_manager, bool):
        raise validate.ArgumentTypeError(f"hybrid_kv_cache_manager must be True or False, got "
                                         f"{hybrid_kv_cache_manager!r}")
    v = _version(vllm_version)
    heads = kv_heads_per_gpu(s, n_gpus)
    windows = _stage_windows(s, pipeline_parallel)
    page = block_size * _layer_bytes(s, dt, kv_heads=None if s.is_mla else heads)
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
    per_request = sum(_vllm_blocks(w, max_model_len, in_flight, block_size) for w in groups)
    if v >= (0, 21, 0):
        concurrency = num_blocks / per_request
        tokens = int(concurrency * max_model_len)
    else:
        tokens = num_blocks // len(groups) * block_size
        concurrency = (num_blocks / per_request if v >= (0, 10, 0)
                       else tokens / max_model_len)
    return VllmKVCache(available_bytes, block_size, len(groups), size, bytes_per_block,
                       num_blocks, per_request, max_model_len, tokens, concurrency, rule)


@dataclass(frozen=True)
class VllmBudget:
    """One GPU's start-up budget as vLLM computes it: requested - non-KV terms = KV memory."""

    gpu_bytes: int             # total CUDA reports (GPU.memory_bytes)
    requested_bytes: int       # ceil(total x gpu_memory_utilization)
    weight_bytes: int          # "Model loading took X GiB"
    activation_bytes: int      # peak of the profiling run (forward + sampler), estimated
    non_torch_bytes: int       # NCCL, cuBLAS, custom all-reduce buffers, estimated
    cuda_graph_bytes: int      # CUDA-graph pool estimate
    cuda_graph_deducted: bool  # 0.21+: deducted before sizing the pool; before: not
    how: str

    @property
    def available_kv_bytes(self) -> int:
        """Return "Available KV cache memory" (negative: vLLM refuses to start)."""
        graphs = self.cuda_graph_bytes if self.cuda_graph_deducted else 0
        return (self.requested_bytes - self.weight_bytes - self.activation_bytes
                - self.non_torch_bytes - graphs)


# Non-torch memory per GPU (GiB), read from start-up logs:
# * one GPU: 0.13 on H100 (vLLM 0.11, llm-d empirical-vllm-memory-results.md, five models) and
#   0.02-0.06 on 24/96 GB cards (0.10.2/0.12 "Actual usage" lines); 0.16-0.35 with the V0 engine
#   (vllm#12126, vllm#13109: 0.16 on H100; vllm#10517: 0.35 on an RTX 3090);
# * two GPUs: 0.55 (Llama-3.3-70B FP8 and Qwen3-32B, TP = 2, H100, the same llm-d file);
#   0.30-0.73 with V0 (vllm#15815, L40S; 0324wy/MapCoder, L40S);
# * four and eight GPUs: about 2 GiB of custom all-reduce and NCCL buffers: Qwen3-32B on 4 and
#   8 H100s (vLLM 0.10.0, DaisukeTakai/eval_dataset) leaves 7.6-7.9 GiB besides the weights,
#   the sampler's 5.5 GiB being the rest.
# Runs across nodes (Ray) take more and vary; those records are left out of the end-to-end check.
# Open: the TP > 1 figures come from H100s; an A100 TP = 2 run (dennislee22, 0.10.1.1) leaves
# only about 0.25 GiB besides its profiled terms and a Qwen3-30B-A3B TP = 2 H100 run (0.12.0)
# about 0.78, so NVSwitch systems (NCCL's NVLink SHARP buffers) likely take more than PCIe ones;
# too few logs to make that a rule.
NON_TORCH_GIB = {"tp1": 0.13, "tp2": 0.55, "tp4+": 2.0,
                 "v0_tp1": 0.25, "v0_tp2": 0.5, "v0_tp4+": 2.0}
# CUDA graphs: "Graph capturing finished in 3 secs, took 0.50 GiB" (TP = 1) and 0.65 GiB
# (TP = 2) in the same vLLM 0.10.1 logs; 0.21+ deducts its estimate before sizing the pool
# (gpu_worker.py:702-757, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default, envs.py:2219).
CUDA_GRAPH_GIB = {"tp1": 0.50, "tp": 0.65}
# Sampler profiling: `_dummy_sampler_run` (gpu_model_runner.py:5866) samples
# min(max_num_seqs, max_num_batched_tokens) rows over the whole vocabulary with top-k = vocab - 1
# and top-p. What that costs depends on the top-k/top-p implementation the log names:
# * FlashInfer's sampler ("Using FlashInfer for top-p & top-k sampling"): about 2.75 float32
#   copies of rows x vocab (vLLM 0.10.1.1 on A100, dennislee22/vLLM-benchmarking: 0.53 GiB besides
#   weights at 2,048 tokens / 256 rows). 0.33.0 ships FlashInfer (requirements/cuda.txt) and uses it
#   by default (VLLM_USE_FLASHINFER_SAMPLER=1, v1/sample/ops/topk_topp_sampler.py:102-160).
# * PyTorch's fallback ("FlashInfer is not available. Falling back to the PyTorch-native ...") sorts
#   the logits: about 9.5 copies (H100 logs with 1,024 rows: Llama-3.1-8B 4.76 GiB peak, Qwen3-0.6B
#   5.56, gpt-oss-20b 7.38, Qwen3-32B 5.64, llm-d/llm-d-benchmark empirical-vllm-memory-results.md;
#   the V0 engine's sampler likewise, 1.19 GiB at 256 rows in 0.6.4, 0324wy/MapCoder vllm.log).
# The forward pass and the sampler run one after the other, so the peak is the larger of the two.
# * Model Runner V2 (`vllm_model_runner`) samples with its own Triton kernels
#   (v1/worker/gpu/sample/sampler.py, gumbel.py; top-k/top-p by topk_topp_triton.py, no sort):
#   `_dummy_sampler_run` (v1/worker/gpu/model_runner.py:993, 0.33.0) costs about one float32
#   copy. Read from one log, an upper bound: Qwen2.5-3B-AWQ, 256 rows, vLLM 0.30.0 prints a
#   peak of 0.15 GiB, no more than one copy (0.145 GiB) (romeon728/ledgerly-etl vllm_server.log).
SAMPLER_COPIES = {"flashinfer": 2.75, "native": 9.5, "v2": 1.0}

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


def vllm_model_runner(spec: ModelSpec | str, vllm_version: str = VLLM_PINNED) -> str:
    """Return "v2" where `vllm_version` runs Model Runner V2 by default for `spec`, else "v1"
    (the rule by version is in the comment above `_V2_FAMILIES`)."""
    s = _spec(spec)
    v = _version(vllm_version)
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


def _flashinfer_default(v: tuple[int, int, int]) -> bool:
    """Whether a version uses FlashInfer's sampler by default: 0.21+ ships FlashInfer with the
    wheel; older pip installs usually lacked it (their logs print the PyTorch fallback)."""
    return v >= (0, 21, 0)


def vllm_activation_bytes(spec: ModelSpec | str, n_gpus: int = 1, *,
                          max_num_batched_tokens: int, max_num_seqs: int,
                          vllm_version: str = VLLM_PINNED,
                          flashinfer_sampler: bool | None = None) -> int:
    """Return the estimated activation peak of vLLM's profiling run on one GPU.

    `profile_run` (gpu_model_runner.py:6072) runs one forward pass over
    `max_num_batched_tokens` tokens, then the sampler over min(max_num_seqs, tokens) rows.
    Forward: per token two 16-bit hidden vectors plus the MLP's gate/up and activation outputs
    (3 x intermediate, split by TP; an MoE token does this for each of its top-k experts, so
    MoE models peak higher) or attention's q/k/v, whichever is larger. Sampler: float32 logits
    over the vocabulary, `SAMPLER_COPIES` times (Model Runner V2's Triton sampler where
    `vllm_model_runner` says V2; otherwise FlashInfer's sampler or PyTorch's; None: the
    version's default). The peak is the larger of the two.
    """
    s = _spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    tokens = _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    rows = min(_positive_int("max_num_seqs", max_num_seqs), tokens)
    v = _version(vllm_version)
    if flashinfer_sampler is None:
        flashinfer_sampler = _flashinfer_default(v)
    elif not isinstance(flashinfer_sampler, bool):
        raise validate.ArgumentTypeError(f"flashinfer_sampler must be True, False or None, got "
                                         f"{flashinfer_sampler!r}")
    if s.is_moe:
        mlp = s.num_experts_per_tok * 3 * s.moe_intermediate_size
        if s.first_k_dense_replace:
            mlp = max(mlp, 3 * s.intermediate_size)
    else:
        mlp = 3 * s.intermediate_size
    attn = s.num_attention_heads * (3 * s.head_dim if not s.is_mla else s.head_dim + s.v_head_dim)
    forward = tokens * 2 * (2 * s.hidden_size + ceil_div(max(mlp, attn), tp))
    copies = SAMPLER_COPIES["v2" if vllm_model_runner(s, vllm_version) == "v2" else
                            "flashinfer" if flashinfer_sampler else "native"]
    sampler = int(copies * rows * s.vocab_size * 4)
    return max(forward, sampler)


def vllm_non_torch_bytes(n_gpus: int = 1, *, pipeline_parallel: int = 1,
                         vllm_version: str = VLLM_PINNED) -> int:
    """Return the non-torch memory (CUDA context share, cuBLAS, NCCL and custom all-reduce
    buffers) vLLM measures per GPU, as start-up logs show it (`NON_TORCH_GIB`)."""
    tp = _positive_int("n_gpus", n_gpus)
    ranks = tp * _positive_int("pipeline_parallel", pipeline_parallel)
    v0 = _version(vllm_version) < (0, 8, 0)
    key = "tp1" if ranks == 1 else "tp2" if ranks == 2 else "tp4+"
    return int(NON_TORCH_GIB[("v0_" if v0 else "") + key] * GiB)


def vllm_rope_cache_bytes(spec: ModelSpec | str) -> int:
    """Return the rotary-embedding cos/sin cache vLLM allocates while loading the model.

    `RotaryEmbedding.__init__` (model_executor/layers/rotary_embedding/base.py:58-63, 0.33.0)
    registers ``cos_sin_cache`` = max_position_embeddings x rotary_dim values in the model's
    16-bit dtype (`cache.to(dtype)`), once per model (`get_rope` shares one instance,
    rotary_embedding/__init__.py:84), on every TP rank. It is allocated inside
    `DeviceMemoryProfiler` around `load_model`, so "Model loading took" includes it: Llama-3.1-8B
    (131,072 x 128 x 2 B = 0.031 GiB) and Qwen3-30B-A3B (262,144 x 128 x 2 B = 0.0625 GiB) log
    that much above their parameter bytes.
    """
    s = _spec(spec)
    rotary_dim = s.qk_rope_head_dim if s.is_mla else s.head_dim
    return s.max_position_embeddings * rotary_dim * 2


def vllm_replicated_bytes(spec: ModelSpec | str, n_gpus: int = 1) -> int:
    """Return what every TP rank holds beyond its even share of the parameters.

    * the rotary cache (`vllm_rope_cache_bytes`), one per rank;
    * an MoE model's router: `GateLinear` is a `ReplicatedLinear`
      (model_executor/layers/fused_moe/router/gate_linear.py:22; qwen3_moe.py:170,
      mixtral.py:111, deepseek_v2.py:321), so each rank holds all experts x hidden 16-bit
      weights of every MoE layer, not 1/TP of them (Qwen3-30B-A3B on 2 H100s: 28.4571 GiB
      logged, 12 MiB above the even split plus the rotary cache).
    """
    s = _spec(spec)
    tp = _positive_int("n_gpus", n_gpus)
    extra = vllm_rope_cache_bytes(s)
    if s.is_moe and tp > 1:
        router = (s.num_hidden_layers - s.first_k_dense_replace) * s.n_routed_experts \
            * s.hidden_size * 2
        extra += router - ceil_div(router, tp)
    return extra


def vllm_memory_budget(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, *,
                       gpu_memory_utilization: float = 0.9,
                       weight_dtype: str | DType = "bf16",
                       max_num_batched_tokens: int, max_num_seqs: int,
                       pipeline_parallel: int = 1, vllm_version: str = VLLM_PINNED,
                       cuda_graphs: bool = True, weight_bytes: int | None = None,
                       flashinfer_sampler: bool | None = None) -> VllmBudget:
    """Return one GPU's budget the way vLLM `vllm_version` computes it (0.33.0 by default).

    `Worker.determine_available_memory` (v1/worker/gpu_worker.py:641-757): requested memory
    ``ceil(total x gpu_memory_utilization)`` (`request_memory`, v1/worker/utils.py:716-723, the
    total is what CUDA reports), minus what the profiling run consumed (`memory_profiling`,
    utils/mem_utils.py:230-321: weights + non-torch memory + the torch activation peak), minus
    the CUDA-graph estimate when it is deducted (0.21+). `weight_bytes` overrides the weights
    (e.g. the logged "Model loading took"); otherwise every parameter at `weight_dtype`, split
    over TP x PP (`weight_bytes_per_gpu`), plus what every rank holds whole (the rotary cache,
    an MoE router: `vllm_replicated_bytes`), as "Model loading took" counts them.
    """
    s, g = _spec(spec), _gpu(gpu)
    util = _fraction("gpu_memory_utilization", gpu_memory_utilization, high_open=False)
    tp = _positive_int("n_gpus", n_gpus)
    v = _version(vllm_version)
    if not isinstance(cuda_graphs, bool):
        raise validate.ArgumentTypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
    if weight_bytes is None:
        weights = (weight_bytes_per_gpu(s, tp, weight_dtype, pipeline_parallel=pipeline_parallel)
                   + vllm_replicated_bytes(s, tp))
    else:
        weights = validate.non_negative_int("weight_bytes", weight_bytes)
    act = vllm_activation_bytes(s, tp, max_num_batched_tokens=max_num_batched_tokens,
                                max_num_seqs=max_num_seqs, vllm_version=vllm_version,
                                flashinfer_sampler=flashinfer_sampler)
    nt = vllm_non_torch_bytes(tp, pipeline_parallel=pipeline_parallel,
                              vllm_version=vllm_version) / GiB
    graphs = CUDA_GRAPH_GIB["tp1" if tp == 1 else "tp"] if cuda_graphs else 0.0
    requested = math.ceil(round(g.memory_bytes * util, 6))
    how = (f"vLLM {vllm_version}: ceil({g.memory_bytes / GiB:.2f} GiB x {util}) - weights - "
           f"activations (forward over {max_num_batched_tokens:,} tokens + sampler) - non-torch "
           f"{nt:.2f} GiB" + (f" - CUDA graphs {graphs:.2f} GiB" if v >= (0, 21, 0) and graphs
                              else "; CUDA graphs captured after the pool is sized"))
    return VllmBudget(g.memory_bytes, requested, weights, act, int(nt * GiB), int(graphs * GiB),
                      v >= (0, 21, 0), how)


def vllm_default_caps(gpu: GPU | str, vllm_version: str = VLLM_PINNED, *,
                      max_model_len: int | None = None) -> tuple[int, int]:
    """Return `vllm serve`'s default (max_num_batched_tokens, max_num_seqs) on this GPU.

    V1 (0.8+; 0.33.0's `EngineArgs.get_batch_defaults`, engine/arg_utils.py:2950-3000, the
    OpenAI-server column): >= 160 GiB 16384 / 1024; >= 70 GiB and not an A100 8192 / 1024;
    otherwise 2048 / 256. The V0 engine (< 0.8) profiled max(max_model_len, 2048) tokens, or 512
    with chunked prefill (on above a 32K context), and 256 sequences.
    """
    g = _gpu(gpu)
    v = _version(vllm_version)
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


def vllm_startup(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, *,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.92,
                 kv_dtype: str | DType = "bf16", weight_dtype: str | DType | None = None,
                 max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                 pipeline_parallel: int = 1, block_size: int = DEFAULT_BLOCK_SIZE,
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
    s, g = _spec(spec), _gpu(gpu)
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
