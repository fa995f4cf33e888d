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

Weights at a dtype: every parameter at that dtype, grouped the same way. Real quantized
checkpoints keep embeddings and norms in 16 bits, so this slightly underestimates int4/int8/fp8.

Tensor parallelism over `n_gpus` (vLLM's layout): weights are split evenly; a GQA model's KV heads
are split across GPUs (replicated once there are more GPUs than KV heads); an MLA latent is not
split, every GPU holds the whole latent cache. `reserve_fraction` of each GPU's memory is kept back
for activations, the CUDA context, CUDA graphs and allocator slack. It is an assumption, not a
measurement; vLLM's default ``--gpu-memory-utilization`` (0.9; 0.92 in recent releases) keeps
8-10 % back in the same spirit, and TensorRT-LLM's ``free_gpu_memory_fraction`` gives the cache
0.9 of what is free after the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .hardware import GPU, gpu as _gpu_preset
from .models import ModelSpec, model as _model_preset


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
        data = math.ceil(n_values * self.bits / 8)
        if self.group_size is None:
            return data
        return data + math.ceil(n_values / self.group_size) * self.group_overhead_bytes

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
    ]
}

DEFAULT_RESERVE_FRACTION = 0.10


def get_dtype(name: str | DType) -> DType:
    """Return the dtype called `name`; ValueError lists the known ones."""
    if isinstance(name, DType):
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known dtypes: {', '.join(DTYPES)}")
    return DTYPES[name]


_dtype = get_dtype  # the sizing functions' `dtype` argument shadows a public `dtype` name


def _spec(spec: ModelSpec | str) -> ModelSpec:
    return _model_preset(spec) if isinstance(spec, str) else spec


def _gpu(g: GPU | str) -> GPU:
    return _gpu_preset(g) if isinstance(g, str) else g


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
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


def kv_bytes_per_token_per_layer(spec: ModelSpec | str, dtype: str | DType = "bf16") -> int:
    """Return the bytes one token adds to one layer's KV cache."""
    return _layer_bytes(_spec(spec), _dtype(dtype))


def mha_kv_bytes_per_token_per_layer(spec: ModelSpec | str, dtype: str | DType = "bf16") -> int:
    """Return what one layer would cache per token with full MHA (a K and V vector per query head).

    For MLA models these are the expanded keys (qk_nope + qk_rope wide) and values (v_head_dim)
    that attention actually uses; for the others, `head_dim`-wide K and V for every query head.
    """
    s, dt = _spec(spec), _dtype(dtype)
    if s.is_mla:
        k = dt.vector_bytes(s.qk_nope_head_dim + s.qk_rope_head_dim)
        v = dt.vector_bytes(s.v_head_dim)
        return s.num_attention_heads * (k + v)
    return 2 * s.num_attention_heads * dt.vector_bytes(s.head_dim)


def _cached_tokens(window: int | None, ctx_tokens: int) -> int:
    return ctx_tokens if window is None else min(window, ctx_tokens)


def kv_bytes(spec: ModelSpec | str, ctx_tokens: int, batch: int = 1,
             dtype: str | DType = "bf16") -> int:
    """Return the KV-cache bytes of `batch` sequences of `ctx_tokens` tokens, all layers.

    Sliding-window layers hold min(window, ctx_tokens) tokens.
    """
    s, dt = _spec(spec), _dtype(dtype)
    _positive_int("ctx_tokens", ctx_tokens)
    _positive_int("batch", batch)
    per_layer = _layer_bytes(s, dt)
    tokens = sum(_cached_tokens(w, ctx_tokens) for w in s.layer_windows)
    return batch * per_layer * tokens


def kv_bytes_per_token(spec: ModelSpec | str, dtype: str | DType = "bf16",
                       ctx_tokens: int | None = None) -> int:
    """Return the KV-cache bytes per token, summed over all layers.

    Without `ctx_tokens`: every layer stores the token (the cost of a token inside every window).
    With `ctx_tokens`: the average over a sequence of that length, sliding-window layers capped
    at their window, i.e. ``ceil(kv_bytes(spec, ctx_tokens, 1, dtype) / ctx_tokens)``.
    """
    s, dt = _spec(spec), _dtype(dtype)
    if ctx_tokens is None:
        return s.num_hidden_layers * _layer_bytes(s, dt)
    total = kv_bytes(s, ctx_tokens, 1, dt)
    return -(-total // ctx_tokens)


def weight_bytes(spec: ModelSpec | str, dtype: str | DType = "bf16") -> int:
    """Return the bytes of all parameters stored at `dtype` (group scales included)."""
    s, dt = _spec(spec), _dtype(dtype)
    return dt.vector_bytes(s.n_params)


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
        raise ValueError(problem)
    if s.is_mla:
        return 0
    return max(1, s.num_key_value_heads // n_gpus)


def kv_bytes_per_gpu(spec: ModelSpec | str, ctx_tokens: int, batch: int = 1,
                     dtype: str | DType = "bf16", n_gpus: int = 1) -> int:
    """Return the KV-cache bytes each of `n_gpus` tensor-parallel GPUs holds."""
    s, dt = _spec(spec), _dtype(dtype)
    heads = kv_heads_per_gpu(s, n_gpus)
    per_layer = _layer_bytes(s, dt, kv_heads=heads if not s.is_mla else None)
    _positive_int("ctx_tokens", ctx_tokens)
    _positive_int("batch", batch)
    return batch * per_layer * sum(_cached_tokens(w, ctx_tokens) for w in s.layer_windows)


# ---------------------------------------------------------------------------------------------
# does it fit?


@dataclass(frozen=True)
class FitReport:
    """Memory per GPU for one deployment: reserve + weights + KV cache against the GPU's memory."""

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
    fits: bool                     # reserve + weights + KV <= memory, on every GPU

    @property
    def used_bytes_per_gpu(self) -> int:
        """Return reserve + weights + KV on one GPU."""
        return self.reserve_bytes_per_gpu + self.weight_bytes_per_gpu + self.kv_bytes_per_gpu

    @property
    def free_bytes_per_gpu(self) -> int:
        """Return the bytes left on one GPU (negative: short by that much)."""
        return self.memory_bytes_per_gpu - self.used_bytes_per_gpu

    def __str__(self) -> str:
        gb = 1e9
        verdict = "fits" if self.fits else "does NOT fit"
        limit = "" if self.ctx_within_model_limit else " (context exceeds the model's limit!)"
        return (
            f"{self.model} on {self.n_gpus}x {self.gpu}, {self.batch} x {self.ctx_tokens} tokens"
            f"{limit}: {verdict}. Per GPU: weights {self.weight_bytes_per_gpu / gb:.2f} GB "
            f"({self.weight_dtype}) + KV {self.kv_bytes_per_gpu / gb:.2f} GB ({self.kv_dtype}) + "
            f"reserve {self.reserve_bytes_per_gpu / gb:.2f} GB = {self.used_bytes_per_gpu / gb:.2f}"
            f" of {self.memory_bytes_per_gpu / gb:.2f} GB"
        )


def _check_reserve(reserve_fraction: float) -> float:
    if not (isinstance(reserve_fraction, (int, float)) and 0 <= reserve_fraction < 1):
        raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction!r}")
    return float(reserve_fraction)


def _budget(g: GPU, n_gpus: int, s: ModelSpec, weight_dtype, reserve_fraction) -> tuple[int, int, int]:
    """Return (reserve, weights, bytes left for KV) per GPU."""
    reserve = int(g.hbm_bytes * _check_reserve(reserve_fraction))
    weights = -(-weight_bytes(s, weight_dtype) // n_gpus)
    return reserve, weights, g.hbm_bytes - reserve - weights


def fits(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, ctx_tokens: int = 4096,
         batch: int = 1, kv_dtype: str = "bf16", weight_dtype: str = "bf16",
         reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> FitReport:
    """Return the per-GPU memory breakdown of serving `batch` sequences of `ctx_tokens` tokens
    with `n_gpus`-way tensor parallelism, and whether it fits."""
    s, g = _spec(spec), _gpu(gpu)
    problem = tp_problem(s, n_gpus)
    if problem:
        raise ValueError(problem)
    reserve, weights, _ = _budget(g, n_gpus, s, weight_dtype, reserve_fraction)
    kv = kv_bytes_per_gpu(s, ctx_tokens, batch, kv_dtype, n_gpus)
    return FitReport(
        model=s.name, gpu=g.name, n_gpus=n_gpus, ctx_tokens=ctx_tokens, batch=batch,
        kv_dtype=_dtype(kv_dtype).name, weight_dtype=_dtype(weight_dtype).name,
        reserve_fraction=float(reserve_fraction), memory_bytes_per_gpu=g.hbm_bytes,
        reserve_bytes_per_gpu=reserve, weight_bytes_per_gpu=weights, kv_bytes_per_gpu=kv,
        weight_bytes_total=weight_bytes(s, weight_dtype),
        kv_bytes_total=kv_bytes(s, ctx_tokens, batch, kv_dtype),
        ctx_within_model_limit=ctx_tokens <= s.max_position_embeddings,
        fits=reserve + weights + kv <= g.hbm_bytes,
    )


def max_batch(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, ctx_tokens: int = 4096,
              kv_dtype: str = "bf16", weight_dtype: str = "bf16",
              reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    """Return how many sequences of `ctx_tokens` tokens fit at once (0: not even one)."""
    s, g = _spec(spec), _gpu(gpu)
    problem = tp_problem(s, n_gpus)
    if problem:
        raise ValueError(problem)
    _, _, left = _budget(g, n_gpus, s, weight_dtype, reserve_fraction)
    per_sequence = kv_bytes_per_gpu(s, ctx_tokens, 1, kv_dtype, n_gpus)
    return max(0, left // per_sequence)


def max_context(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, batch: int = 1,
                kv_dtype: str = "bf16", weight_dtype: str = "bf16",
                reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    """Return the longest context (<= the model's max_position_embeddings) at which `batch`
    sequences fit (0: not even one token each)."""
    s, g = _spec(spec), _gpu(gpu)
    problem = tp_problem(s, n_gpus)
    if problem:
        raise ValueError(problem)
    _positive_int("batch", batch)
    _, _, left = _budget(g, n_gpus, s, weight_dtype, reserve_fraction)

    def ok(ctx: int) -> bool:
        return kv_bytes_per_gpu(s, ctx, batch, kv_dtype, n_gpus) <= left

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
