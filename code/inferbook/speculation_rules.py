"""The speculative-decoding decision of a plan: the draft (an MTP layer, an EAGLE-3 head,
n-gram or suffix matching), its length k by running batch size, and the draft weights vLLM
loads beside the model, which the layout's memory budget counts (`draft_for`).

Split from `inferbook.rules` (one function per decision); time comes from
`inferbook.roofline`, the expected tokens per pass from `inferbook.speculation_math`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import checkpoints, roofline, sizing
from .decision import Decision
from .hardware import GPU
from .models import ModelSpec
from .rules import CH_SPEC, WHEEL
from .speculation_math import expected_tokens_per_pass

MTP_LAYERS = {"DeepSeek-V3": 1}               # config.json num_nextn_predict_layers
MTP_ACCEPTANCE = 0.85      # DeepSeek-V3 report, Sec. 5.4.3: 2nd-token acceptance 85-90 %
ASSUMED_ACCEPTANCE = {"eagle3": 0.7, "ngram": 0.5}   # assumptions, not measurements
SUFFIX_MAX_TREE_DEPTH = 24  # vLLM SpeculativeConfig.suffix_decoding_max_tree_depth default
MAX_DRAFT_TOKENS = 8


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


def draft_for(spec: ModelSpec, kind: str, priority: str,
              draft_model: str | None) -> checkpoints.DraftWeights | None:
    """Return the draft weights vLLM would load for this request (before the layout is known:
    `decide_speculation` may still turn speculation off, and the plan then drops them)."""
    found = _draft_method(spec, kind, draft_model)
    if found is None or kind == "batch" or (priority == "throughput" and draft_model is None
                                            and found[0] != "mtp"):
        return None
    return checkpoints.draft_weights(spec, found[0], MTP_LAYERS.get(spec.name, 0))


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
        heads = checkpoints.EAGLE3_HEAD_SOURCES.get(spec.chat_repo, ())
        named = "; ".join(f"{repo} ({source})" for repo, source in heads)
        return Decision(None, "no draft: pass an EAGLE-3 head you validated (draft_model=...) "
                        "to enable it" + (f"; public EAGLE-3 heads for {spec.chat_repo}: {named}"
                                          if heads else ""), CH_SPEC)
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
    if method == "mtp" and k == 1:   # the engines' guides start at the model's own depth
        why += ("; MTP depth 1 as vLLM's MTP guide starts ('a small value like 1 is a good "
                "default', docs.vllm.ai features/speculative_decoding/mtp) and SGLang runs it "
                "(--speculative-num-steps 1 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 2)")
    return Decision(Speculation(method, k, alpha, src, schedule,
                                draft_model if method == "eagle3" else None), why, CH_SPEC, cite)
