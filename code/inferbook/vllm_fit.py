"""Does a batch fit under vLLM's start-up budget? The KV calculator's question, answered once.

Chapter 2's calculators (the static one in the rendered book, `book/calculators/kv_calculator.js`,
and the ipywidget a live kernel shows) answer it for a model, a GPU, a TP degree, a context, a
batch, the KV and weight formats and vLLM's `gpu_memory_utilization`: the per-GPU KV bytes
(`sizing`) against vLLM's "Available KV cache memory" (`vllm_memory.vllm_memory_budget` at
`vllm serve`'s default scheduler limits on that GPU, `vllm_memory.vllm_default_caps`), and from
the same budget the most sequences, the longest context and the fewest GPUs that fit.
tests/test_book.py compares the static page with `vllm_fit` on a grid.

Bytes, not blocks: vLLM rounds the budget down to whole blocks (`vllm_memory.vllm_kv_cache`),
which can turn an exact fit into one block short; the calculator says whether the bytes fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import sizing, validate
from .hardware import GPU, gpu as resolve_gpu
from .models import ModelSpec, as_spec
from .vllm_memory import DEFAULT_UTILIZATION, VllmBudget, vllm_default_caps, vllm_memory_budget

MAX_TP_DEGREE = 8


@dataclass(frozen=True)
class VllmFit:
    """One GPU's memory under vLLM's start-up budget for `batch` x `ctx_tokens` tokens."""

    model: str
    gpu: str
    n_gpus: int
    ctx_tokens: int
    batch: int
    kv_dtype: str
    weight_dtype: str
    gpu_memory_utilization: float
    budget: VllmBudget
    kv_bytes_per_gpu: int
    max_batch: int           # sequences of ctx_tokens that fit (0: none)
    max_context: int         # longest context (<= the model's limit) at which batch fits
    ctx_within_model_limit: bool

    @property
    def kv_budget_bytes(self) -> int:
        """Return vLLM's "Available KV cache memory" per GPU (<= 0: vLLM would not start)."""
        return self.budget.available_kv_bytes

    @property
    def starts(self) -> bool:
        """Return whether vLLM would start ("No available memory for the cache blocks")."""
        return self.kv_budget_bytes > 0

    @property
    def fits(self) -> bool:
        """Return whether the batch's KV bytes fit the budget."""
        return self.starts and self.kv_bytes_per_gpu <= self.kv_budget_bytes

    @property
    def outside_bytes(self) -> int:
        """Return the memory vLLM does not request: (1 - utilization) x total."""
        return self.budget.reserve_bytes

    @property
    def used_bytes_per_gpu(self) -> int:
        """Return everything accounted on one GPU: outside + runtime + weights + this KV."""
        b = self.budget
        return self.outside_bytes + b.runtime.total_bytes + b.weight_bytes + self.kv_bytes_per_gpu

    def __str__(self) -> str:
        gb = 1e9
        verdict = "fits" if self.fits else ("vLLM would not start" if not self.starts
                                            else "does not fit")
        return (f"{self.batch} x {self.ctx_tokens:,} tokens of {self.model} on {self.n_gpus}x "
                f"{self.gpu}: {verdict}. Per GPU: weights {self.budget.weight_bytes / gb:.2f} GB "
                f"({self.weight_dtype}) + runtime {self.budget.runtime.total_bytes / gb:.2f} GB + "
                f"KV {self.kv_bytes_per_gpu / gb:.2f} GB ({self.kv_dtype}) against vLLM's KV "
                f"budget {self.kv_budget_bytes / gb:.2f} GB at gpu_memory_utilization "
                f"{self.gpu_memory_utilization}")


def _budget(s: ModelSpec, g: GPU, n_gpus: int, weight_dtype, utilization: float) -> VllmBudget:
    tokens, seqs = vllm_default_caps(g)
    return vllm_memory_budget(s, g, n_gpus, gpu_memory_utilization=utilization,
                              weight_dtype=weight_dtype, max_num_batched_tokens=tokens,
                              max_num_seqs=seqs)


def _longest(s: ModelSpec, n_gpus: int, batch: int, kv_dtype, budget: int) -> int:
    """Return the longest context <= the model's limit whose KV bytes fit `budget` (0: none);
    KV bytes never fall as the context grows, so a bisection finds it."""
    def holds(ctx: int) -> bool:
        return budget > 0 and sizing.kv_bytes_per_gpu(s, n_gpus, ctx, batch, kv_dtype) <= budget

    lo, hi = 0, s.max_position_embeddings
    if holds(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def vllm_fit(spec: ModelSpec | str, gpu: GPU | str, n_gpus: int = 1, ctx_tokens: int = 4096,
             batch: int = 1, kv_dtype: str = "bf16", weight_dtype: str = "bf16",
             gpu_memory_utilization: float = DEFAULT_UTILIZATION) -> VllmFit:
    """Return whether `batch` sequences of `ctx_tokens` tokens fit `n_gpus`-way TP of `gpu`
    under vLLM's start-up budget, with the most sequences and the longest context that would.

    An entry point: a model or GPU preset name is resolved here. Refuses what vLLM refuses
    (a TP degree the heads cannot take, a utilization outside (0, 1]) with a ValueError.
    """
    s, g = as_spec(spec), resolve_gpu(gpu)
    validate.positive_int("ctx_tokens", ctx_tokens)
    validate.positive_int("batch", batch)
    budget = _budget(s, g, n_gpus, weight_dtype, gpu_memory_utilization)
    left = budget.available_kv_bytes
    return VllmFit(
        model=s.name, gpu=g.name, n_gpus=n_gpus, ctx_tokens=ctx_tokens, batch=batch,
        kv_dtype=sizing.get_dtype(kv_dtype, "kv_dtype").name,
        weight_dtype=sizing.get_dtype(weight_dtype, "weight_dtype").name,
        gpu_memory_utilization=float(gpu_memory_utilization), budget=budget,
        kv_bytes_per_gpu=sizing.kv_bytes_per_gpu(s, n_gpus, ctx_tokens, batch, kv_dtype),
        max_batch=sizing.sequences_that_fit(left, s, n_gpus, ctx_tokens, kv_dtype) if left > 0 else 0,
        max_context=_longest(s, n_gpus, batch, kv_dtype, left),
        ctx_within_model_limit=ctx_tokens <= s.max_position_embeddings,
    )


def vllm_min_tp_degree(spec: ModelSpec | str, gpu: GPU | str, ctx_tokens: int = 4096,
                       batch: int = 1, kv_dtype: str = "bf16", weight_dtype: str = "bf16",
                       gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                       max_gpus: int = MAX_TP_DEGREE) -> int | None:
    """Return the fewest GPUs (a TP degree the heads allow, up to `max_gpus`) on which the
    batch fits under vLLM's budget; None if none does. An entry point, like `vllm_fit`."""
    s, g = as_spec(spec), resolve_gpu(gpu)
    validate.positive_int("ctx_tokens", ctx_tokens)
    validate.positive_int("batch", batch)
    for n in sizing.valid_tp_degrees(s, max_gpus):
        left = _budget(s, g, n, weight_dtype, gpu_memory_utilization).available_kv_bytes
        if 0 < left and sizing.kv_bytes_per_gpu(s, n, ctx_tokens, batch, kv_dtype) <= left:
            return n
    return None
