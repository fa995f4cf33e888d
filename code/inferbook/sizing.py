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

Weights default to the checkpoint's own format (`ModelSpec.checkpoint_dtype`: bf16 for the
presets; fp8, AWQ/GPTQ ("awq"), compressed-tensors W4A16 ("w4a16") and MXFP4 (gpt-oss, routed
experts only) from a config's `quantization_config`).

The memory budget (`memory_budget`): ``ceil(total x gpu_memory_utilization)`` minus the
weights minus a `RuntimeMemory` (activations, CUDA graphs, non-torch memory) is what the KV
cache gets. Chapter 2 folds the runtime terms into `reserve_fraction`; vLLM's own start-up
budget, term by term from its source, is `inferbook.vllm_memory` (which builds on these
functions), and `inferbook.vllm_fit` answers the KV calculators' question with it. GPU memory is
the total CUDA reports (`GPU.memory_bytes`, e.g. 79.18 GiB on an H100 80GB), not the datasheet's
"GB": what vLLM multiplies by `gpu_memory_utilization`.

Names are resolved once, by the entry points chapter 2 and its readers call
(`kv_bytes`, `kv_bytes_per_token`, `kv_bytes_per_gpu`, `weight_bytes`, `valid_tp_degrees`,
`fits`, `max_batch`, `max_context`, `min_tp_degree`: a preset name or the object); every other
function here takes the resolved `ModelSpec` / `GPU` and refuses a name (`models.require_spec`,
`hardware.require_gpu`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from . import validate
from .arith import ceil_div
from .hardware import GPU, require_gpu
from .hardware import gpu as _gpu
from .models import ModelSpec, require_spec
from .models import as_spec as _spec


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
        DType("int4", 4, 128, 4, note="asymmetric: one fp16 scale and one fp16 zero point per group of 128 values"),
        DType("q8_0", 8, 32, 2, note="llama.cpp block: 32 int8 values + one fp16 scale"),
        DType("q4_0", 4, 32, 2, note="llama.cpp block: 32 4-bit values + one fp16 scale"),
        DType("awq", 4, 256, 5, note="AWQ / GPTQ 4-bit checkpoints: per 128 values one fp16 scale "
                                     "and one packed 4-bit zero point (2.5 bytes, so 5 per 256)"),
        DType("w4a16", 4, 128, 2, note="compressed-tensors W4A16: 4-bit values, one fp16 scale per "
                                       "group of 128 (symmetric, no zero point)"),
        DType("mxfp4", 4, 32, 1, note="OCP microscaling: 32 FP4 (e2m1) values + one e8m0 "
                                      "scale byte (gpt-oss stores its routed experts so)"),
        DType("nvfp4", 4, 16, 1, note="NVIDIA NVFP4 (Blackwell): 16 FP4 (e2m1) values + one e4m3 "
                                      "scale byte, 4.5 bits; the fp32 tensor scale not counted"),
    ]
}

# Other spellings of the same formats (PyTorch, vLLM and Hugging Face names), lower-case.
DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
                 "half": "fp16", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8"}

DEFAULT_RESERVE_FRACTION = 0.10
DEFAULT_BLOCK_SIZE = 16        # vLLM's CacheConfig.DEFAULT_BLOCK_SIZE on CUDA (config/cache.py:463)


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


def _resolved(spec) -> ModelSpec:
    """Return `spec` if it is a ModelSpec (`models.require_spec`): the functions below the
    entry points take one resolved spec (a name is resolved once, by the function the caller
    called)."""
    return require_spec(spec)


def fraction(name: str, value, *, high_open: bool) -> float:
    """Return `value` checked to lie in [0, 1) (`high_open`) or (0, 1], naming `name` if not."""
    value = validate.finite_float(name, value, minimum=0.0, maximum=1.0)
    if value == (1.0 if high_open else 0.0):
        rule = "[0, 1)" if high_open else "(0, 1]"
        raise ValueError(f"{name} must be a finite number in {rule}, got {value!r}")
    return value


# bytes per token ------------------------------------------------------------------------------


def kv_values_per_token_per_layer(spec: ModelSpec) -> int:
    """Return how many numbers one token adds to one layer's cache (before the dtype)."""
    s = _resolved(spec)
    if s.is_mla:
        return s.kv_lora_rank + s.qk_rope_head_dim
    return 2 * s.num_key_value_heads * s.head_dim


def layer_kv_bytes(s: ModelSpec, dt: DType, kv_heads: int | None = None) -> int:
    """Return the bytes one token adds to one layer on one GPU holding `kv_heads` KV heads
    (default: all; an MLA latent is never split)."""
    if s.is_mla:
        return dt.vector_bytes(s.kv_lora_rank) + dt.vector_bytes(s.qk_rope_head_dim)
    heads = s.num_key_value_heads if kv_heads is None else kv_heads
    return 2 * heads * dt.vector_bytes(s.head_dim)


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str | DType = "bf16") -> int:
    """Return the bytes one token adds to one layer's KV cache."""
    return layer_kv_bytes(_resolved(spec), get_dtype(kv_dtype, "kv_dtype"))


def mha_kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str | DType = "bf16") -> int:
    """Return what one layer would cache per token with full MHA (a K and V vector per query head).

    For MLA models these are the expanded keys (qk_nope + qk_rope wide) and values (v_head_dim)
    that attention actually uses; for the others, `head_dim`-wide K and V for every query head.
    """
    s, dt = _resolved(spec), get_dtype(kv_dtype, "kv_dtype")
    if s.is_mla:
        k = dt.vector_bytes(s.qk_nope_head_dim + s.qk_rope_head_dim)
        v = dt.vector_bytes(s.v_head_dim)
        return s.num_attention_heads * (k + v)
    return 2 * s.num_attention_heads * dt.vector_bytes(s.head_dim)


def _cached_tokens(window: int | None, ctx_tokens: int, window_extra_tokens: int = 0) -> int:
    return ctx_tokens if window is None else min(window + window_extra_tokens, ctx_tokens)


def stage_windows(s: ModelSpec, pipeline_parallel: int) -> tuple[int | None, ...]:
    """Return the layer windows of the pipeline stage with the most cached layers."""
    windows = s.layer_windows
    n, pp = len(windows), _positive_int("pipeline_parallel", pipeline_parallel)
    if pp > n:
        raise ValueError(f"pipeline_parallel ({pp}) cannot exceed the {n} layers of {s.name}")
    cuts = [i * n // pp for i in range(pp + 1)]
    stages = [windows[a:b] for a, b in itertools.pairwise(cuts)]
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
    return batch * layer_kv_bytes(s, dt) * tokens


def kv_bytes_per_token(spec: ModelSpec | str, kv_dtype: str | DType = "bf16",
                       ctx_tokens: int | None = None) -> int:
    """Return the KV-cache bytes per token, summed over all layers.

    Without `ctx_tokens`: every layer stores the token (the cost of a token inside every window).
    With `ctx_tokens`: the average over a sequence of that length, sliding-window layers capped
    at their window, i.e. ``ceil(kv_bytes(spec, ctx_tokens, 1, kv_dtype) / ctx_tokens)``.
    """
    s, dt = _spec(spec), get_dtype(kv_dtype, "kv_dtype")
    if ctx_tokens is None:
        return s.num_hidden_layers * layer_kv_bytes(s, dt)
    return ceil_div(kv_bytes(s, ctx_tokens, 1, dt), ctx_tokens)


def embedding_params(spec: ModelSpec) -> int:
    """Return the parameters of the token embedding and the LM head (one matrix if tied)."""
    s = _resolved(spec)
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
        moe_layers = s.n_moe_layers
        experts = moe_layers * s.n_routed_experts * 3 * s.hidden_size * s.moe_intermediate_size
        return dt.vector_bytes(experts) + 2 * (s.n_params - experts)
    return dt.vector_bytes(s.n_params - emb) + 2 * emb


def weight_bytes_per_gpu(spec: ModelSpec, n_gpus: int = 1,
                         weight_dtype: str | DType | None = "bf16", *,
                         pipeline_parallel: int = 1) -> int:
    """Return the weight bytes on each GPU of `n_gpus`-way TP x `pipeline_parallel` stages
    (an even split, rounded up)."""
    _positive_int("n_gpus", n_gpus)
    _positive_int("pipeline_parallel", pipeline_parallel)
    return ceil_div(weight_bytes(_resolved(spec), weight_dtype), n_gpus * pipeline_parallel)


def with_kv_heads(spec: ModelSpec, num_key_value_heads: int) -> ModelSpec:
    """Return a hypothetical copy of `spec` with another number of KV heads (MHA / GQA / MQA)."""
    s = _resolved(spec)
    if s.is_mla:
        raise ValueError(f"{s.name} uses MLA; it has no KV heads to change")
    _positive_int("num_key_value_heads", num_key_value_heads)
    kind = {1: "MQA", s.num_attention_heads: "MHA"}.get(num_key_value_heads,
                                                          f"GQA-{num_key_value_heads}")
    return replace(s, name=f"{s.name} as {kind}", num_key_value_heads=num_key_value_heads,
                   source=f"hypothetical: {s.source} with num_key_value_heads={num_key_value_heads}")


# tensor parallelism ---------------------------------------------------------------------------


def tp_problem(spec: ModelSpec, n_gpus: int) -> str | None:
    """Return why `n_gpus`-way tensor parallelism cannot shard `spec`, or None if it can.

    vLLM's rules: query heads split evenly; KV heads split evenly, or, with more GPUs than
    KV heads, each KV head is replicated on n_gpus / num_key_value_heads GPUs.
    """
    s = _resolved(spec)
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
    s = _spec(spec)
    _positive_int("max_gpus", max_gpus)
    return [n for n in range(1, max_gpus + 1) if tp_problem(s, n) is None]


def kv_heads_per_gpu(spec: ModelSpec, n_gpus: int) -> int:
    """Return the KV heads each GPU stores under `n_gpus`-way TP (MLA: 0, it stores the latent)."""
    s = _resolved(spec)
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
    per_layer = layer_kv_bytes(s, dt, kv_heads=None if s.is_mla else heads)
    windows = stage_windows(s, pipeline_parallel)
    if block_size is None:
        tokens = sum(_cached_tokens(w, ctx_tokens, window_extra_tokens) for w in windows)
    else:
        chunked = s.local_attention == "chunked"
        tokens = block_size * sum(request_blocks(w, ctx_tokens, window_extra_tokens, block_size,
                                                 chunked=chunked)
                                  for w in windows)
    return batch * per_layer * tokens


def request_blocks(window: int | None, ctx_tokens: int, extra: int, block_size: int, *,
                   chunked: bool = False) -> int:
    """Return the blocks one request of `ctx_tokens` tokens holds in one layer, by vLLM 0.33.0's
    rule (`chunked`: the window is a chunked-local-attention chunk, Llama-4)."""
    if window is None:   # FullAttentionSpec.max_memory_usage_bytes (kv_cache_interface.py:643)
        return ceil_div(ctx_tokens, block_size)
    if chunked:          # ChunkedLocalAttentionSpec.max_admission_blocks_per_request (:864-881)
        return ceil_div(min(window + extra, ctx_tokens), block_size)
    # SlidingWindowSpec.max_admission_blocks_per_request (kv_cache_interface.py:918-944)
    return ceil_div(min(window - 1 + extra, ctx_tokens), block_size) + 1


def sequences_that_fit(kv_budget_bytes: int, spec: ModelSpec, n_gpus: int,
                       ctx_tokens: int, kv_dtype: str | DType = "bf16", *,
                       shared_prefix_tokens: int = 0, pipeline_parallel: int = 1,
                       window_extra_tokens: int = 0, block_size: int | None = None) -> int:
    """Return how many sequences of `ctx_tokens` tokens a per-GPU KV budget holds; 0 if none.

    With prefix caching the first `shared_prefix_tokens` of every sequence are stored once in
    the full-attention layers (a sliding-window layer drops them once they leave its window,
    so there they are counted per sequence).
    """
    s = _resolved(spec)
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
    full_layers = sum(w is None for w in stage_windows(s, pipeline_parallel))
    per_layer = layer_kv_bytes(s, get_dtype(kv_dtype, "kv_dtype"),
                             kv_heads=None if s.is_mla else kv_heads_per_gpu(s, n_gpus))
    shared = shared_prefix_tokens * full_layers * per_layer
    if kv_budget_bytes < whole:
        return 0
    return 1 + (kv_budget_bytes - whole) // (whole - shared)


# the memory budget ----------------------------------------------------------------------------


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


def memory_budget(spec: ModelSpec, gpu: GPU, n_gpus: int = 1,
                  weight_dtype: str | DType = "bf16", *,
                  gpu_memory_utilization: float = 1 - DEFAULT_RESERVE_FRACTION,
                  runtime: RuntimeMemory = NO_RUNTIME, pipeline_parallel: int = 1) -> MemoryBudget:
    """Return one GPU's budget: ceil(total x utilization) - weights - runtime terms = KV budget."""
    s, g = _resolved(spec), require_gpu(gpu)
    util = fraction("gpu_memory_utilization", gpu_memory_utilization, high_open=False)
    if not isinstance(runtime, RuntimeMemory):
        raise validate.ArgumentTypeError(f"runtime must be a RuntimeMemory (see "
                                         f"inferbook.vllm_memory.vllm_runtime_memory), got {type(runtime).__name__}")
    usable = math.ceil(round(g.memory_bytes * util, 6))
    weights = weight_bytes_per_gpu(s, n_gpus, weight_dtype, pipeline_parallel=pipeline_parallel)
    return MemoryBudget(g.memory_bytes, usable, weights, runtime)


# does it fit? ---------------------------------------------------------------------------------


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
    reserve = fraction("reserve_fraction", reserve_fraction, high_open=True)
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
    s, g = _spec(spec), _gpu(gpu)
    for n in valid_tp_degrees(s, max_gpus):
        if fits(s, g, n, ctx_tokens, batch, kv_dtype, weight_dtype, reserve_fraction).fits:
            return n
    return None

