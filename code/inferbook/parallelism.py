"""Which parallel layout serves a model on a fleet, as the engines' tuning guides choose it.

The candidates, in the order a maintainer tries them (`rules.decide_weights` picks the first
tier of formats and degrees that holds one request; this module ranks what it found):

* replicas first: a model that fits one GPU runs TP=1 x DP=N behind a router; tensor
  parallelism (TP) only as far as the memory or a per-token latency target needs it, inside
  one node (NVLink), and at most 2 on PCIe GPUs while a TP <= 2 layout holds the model;
* pipeline parallelism (PP) across nodes only when no TP <= 8 layout holds it, costed with
  its bubble (fewer micro-batches than stages leave stages idle) and the activations it sends
  from stage to stage, across the nodes' network;
* for MoE models, data-parallel attention with the routed experts spread over the ranks
  (expert parallelism, EP), with the all-to-all of each MoE layer in the cost.

Each layout is rated by chapter 9's step-cost model (`inferbook.cost_model`, efficiencies fitted
on published runs) at the batch its KV cache holds. Among the layouts within
`SIMPLICITY_MARGIN` of the best estimate the simplest wins (fewest nodes per engine, no PP,
no EP, smallest TP): the cost model is not accurate to a few per cent, and a simpler layout
is cheaper to run. The decision says by how much the chosen one beat the runner-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .arith import ceil_div
from .cost_model import FITTED, roofline_decode_seconds
from .decision import Decision
from .hardware import GPU
from .models import ModelSpec
from .rules import CH_SERVING, GPUS_PER_NODE, Layout, PlanRequest

SIMPLICITY_MARGIN = 0.10   # layouts within 10 % of the best estimate count as equal
# Assumptions, not measurements (stated in every plan that crosses nodes): one 400 Gb/s
# InfiniBand NIC per GPU, as in NVIDIA's DGX H100/B200 reference designs.
INTER_NODE_BYTES_PER_S = 50e9
# A model that fits one GPU runs as independent replicas (no all-reduce, one GPU fails alone)
# unless TP is estimated more than ONE_GPU_MARGIN faster, or a per-token target needs TP.
ONE_GPU_MARGIN = 0.25
MIN_REPLICA_BATCH = 16     # a replica needs room for this many requests to be worth it
ACTIVATION_BYTES = 2       # bf16/fp16 hidden states between stages and to the experts


def nodes_per_engine(lay: Layout) -> int:
    """Return how many nodes one engine instance of `lay` spans (1: it fits one node)."""
    return ceil_div(engine_gpus(lay), GPUS_PER_NODE)


def engine_gpus(lay: Layout) -> int:
    """Return the GPUs of one engine instance: a TP x PP replica, or the whole EP group."""
    return lay.ep if lay.ep > 1 else lay.tp * lay.pp


def complexity(lay: Layout) -> tuple[int, int, int, int]:
    """Return the sort key of simplicity: nodes per engine, PP, EP, TP (smaller is simpler)."""
    return (nodes_per_engine(lay), lay.pp, int(lay.ep > 1), lay.tp)


def describe(lay: Layout) -> str:
    """Return a layout's short name, e.g. 'TP=4 x DP=2' or 'DP=8 attention + EP=8'."""
    if lay.ep > 1:
        return f"DP={lay.dp} attention + EP={lay.ep}"
    return (f"TP={lay.tp}" + (f" x PP={lay.pp}" if lay.pp > 1 else "")
            + (f" x DP={lay.dp}" if lay.dp > 1 else ""))


def _tp_step(spec: ModelSpec, g: GPU, lay: Layout, batch: int, tokens: int,
             output_tokens: int | None) -> float:
    """Seconds of one step of the whole model at TP=lay.tp over `batch` requests: decode at
    `tokens` of context, or (output_tokens known) steady state with the successors' prefill."""
    if g.fp16_tensor_flops is None:
        kv = lay.kv_bytes(spec, tokens, batch) if batch else 0
        return roofline_decode_seconds(spec, g, lay.tp * lay.pp, batch,
                                       lay.budget.weight_bytes, kv)
    if lay.ep > 1:
        cm = FITTED.cost_model(spec, g, 1, kv_dtype=lay.kv_dtype, weight_dtype=lay.weight_dtype)
        cm = replace(cm, weight_bytes=lay.budget.weight_bytes)
    else:
        cm = FITTED.cost_model(spec, g, lay.tp, kv_dtype=lay.kv_dtype,
                               weight_dtype=lay.weight_dtype)
    if not output_tokens:
        return cm.step_time([(1, tokens - 1)] * max(batch, 1))
    prompt = tokens - output_tokens
    budget = lay.batching.value["max_num_batched_tokens"]
    chunk = min(round(batch * prompt / output_tokens), max(budget - batch, 0))
    shapes = [(1, prompt + output_tokens // 2)] * max(batch, 1)
    if chunk > 0:
        shapes.append((chunk, 0))
    return cm.step_time(shapes)


def link_bytes_per_s(g: GPU, crosses_nodes: bool) -> float:
    """Return one direction's GPU-to-GPU bandwidth: the network across nodes (assumed
    `INTER_NODE_BYTES_PER_S`), else NVLink, else PCIe (half of the both-ways datasheet figure)."""
    if crosses_nodes:
        return INTER_NODE_BYTES_PER_S
    both = g.nvlink_bytes_per_s or g.pcie_bytes_per_s or INTER_NODE_BYTES_PER_S
    return both / 2


def pipeline_transfer_seconds(spec: ModelSpec, g: GPU, lay: Layout, micro_batch: int) -> float:
    """Return the seconds one micro-batch spends between stages: pp hops (the last returns
    the sampled tokens) of micro_batch x hidden activations, each a fixed latency plus bytes
    over the link (the network where the stages sit on different nodes)."""
    eff = FITTED.efficiency()
    crosses = lay.tp * lay.pp > GPUS_PER_NODE
    message = micro_batch * spec.hidden_size * ACTIVATION_BYTES
    hop = eff.allreduce_latency_s + message / (eff.link_efficiency * link_bytes_per_s(g, crosses))
    return lay.pp * hop


def expert_all_to_all_seconds(spec: ModelSpec, g: GPU, lay: Layout, batch: int) -> float:
    """Return one step's expert-parallel traffic per rank: a dispatch and a combine per MoE
    layer, each sending batch x top-k x hidden activations of which (ep-1)/ep leave the GPU."""
    eff = FITTED.efficiency()
    crosses = lay.ep > GPUS_PER_NODE
    moe_layers = spec.n_moe_layers  # as the config marks them (Llama-4 interleaves)
    message = (batch * max(spec.num_experts_per_tok, 1) * spec.hidden_size * ACTIVATION_BYTES
               * (lay.ep - 1) / lay.ep)
    one = eff.allreduce_latency_s + message / (eff.link_efficiency * link_bytes_per_s(g, crosses))
    return 2 * moe_layers * one


def step_seconds(spec: ModelSpec, g: GPU, lay: Layout, batch: int, tokens: int,
                 output_tokens: int | None = None) -> float:
    """Return the seconds between two tokens of a request in one replica running `batch`
    requests (chapter 9's cost model).

    TP: one step of the whole batch. PP: vLLM keeps up to pp batches in flight, so the batch
    runs as m = min(batch, pp) micro-batches; each request waits for its micro-batch to pass
    every stage (the whole model at TP over batch/m requests) plus the stage-to-stage
    transfers. With m < pp stages sit idle (the bubble), so PP adds capacity, never speed.
    EP: one data-parallel rank's step plus the experts' all-to-all.
    """
    batch = max(batch, 1)
    if lay.ep > 1:
        return (_tp_step(spec, g, lay, batch, tokens, output_tokens)
                + expert_all_to_all_seconds(spec, g, lay, batch))
    if lay.pp > 1:
        micro = ceil_div(batch, min(batch, lay.pp))
        return (_tp_step(spec, g, lay, micro, tokens, output_tokens)
                + pipeline_transfer_seconds(spec, g, lay, micro))
    return _tp_step(spec, g, lay, batch, tokens, output_tokens)


@dataclass(frozen=True)
class LayoutRate:
    """One layout as the step-cost model sees it: the requests all replicas hold, the running
    batch per replica (or per EP rank), the time between tokens and output tokens/s in all."""

    layout: Layout
    held: int
    batch: int
    step_s: float
    tokens_per_s: float


def rate_layouts(spec: ModelSpec, g: GPU, layouts: list[Layout], tokens: int,
                 shared_prefix: int = 0, concurrency: int | None = None,
                 output_tokens: int | None = None) -> list[LayoutRate]:
    """Return each layout's rate, each replica running what its KV cache holds (at most
    --max-num-seqs and its share of `concurrency`)."""
    out = []
    for lay in layouts:
        fit = lay.sequences(spec, tokens, shared_prefix)
        b = min(fit, lay.batching.value["max_num_seqs"])
        if concurrency is not None:
            b = min(b, ceil_div(concurrency, lay.dp))
        step = step_seconds(spec, g, lay, b, tokens, output_tokens)
        running = lay.dp * b if concurrency is None else min(lay.dp * b, concurrency)
        out.append(LayoutRate(lay, lay.dp * fit, b, step, running / step if b > 0 else 0.0))
    return out


def decide_parallelism(spec: ModelSpec, g: GPU, layouts: list[Layout], tokens: int,
                       shared_prefix: int, req: PlanRequest, tpot_target_ms: float | None,
                       output_tokens: int | None = None) -> Decision:
    """Return value = dict(layout, tp, pp, dp, ep, rates, runner_up): the simplest layout
    within `SIMPLICITY_MARGIN` of the best output tokens/s, among those whose replicas hold
    the requested concurrency (or the one that holds the most) and, with a per-token target,
    meet it at their running batch."""
    rates = rate_layouts(spec, g, layouts, tokens, shared_prefix, req.concurrency,
                         output_tokens)
    pool, warn = rates, ""
    if req.concurrency is not None:
        meeting = [r for r in rates if r.held >= req.concurrency]
        pool = meeting or [max(rates, key=lambda r: (r.held, -complexity(r.layout)[3]))]
        warn = "" if meeting else (
            f"only {pool[0].held} of the {req.concurrency} requested {tokens:,}-token requests "
            f"fit in the KV cache at once ({describe(pool[0].layout)}, the layout that holds "
            "the most); the rest wait in the queue, and --max-num-seqs is capped at what fits")
    target_note = ""
    if tpot_target_ms is not None:
        fast = [r for r in pool if r.step_s * 1e3 <= tpot_target_ms]
        if fast:
            target_note = (f"; only layouts whose step at their running batch meets the "
                           f"{tpot_target_ms:g} ms/token target were ranked")
            pool = fast
        else:
            quickest = min(pool, key=lambda r: r.step_s)
            pool = [quickest]
            warn = warn or (f"no layout meets {tpot_target_ms:g} ms/token in the step-cost "
                            f"model; the quickest, {describe(quickest.layout)}, takes "
                            f"{quickest.step_s * 1e3:.1f} ms")
    best = max(pool, key=lambda r: r.tokens_per_s)
    near = [r for r in pool if r.tokens_per_s >= (1 - SIMPLICITY_MARGIN) * best.tokens_per_s]
    # a replica with room for only a few requests is a layout the next long request stalls:
    # among the near-best, those that hold MIN_REPLICA_BATCH come first
    roomy = [r for r in near if r.batch >= min(MIN_REPLICA_BATCH, req.concurrency or
                                               MIN_REPLICA_BATCH)] or near
    chosen = min(roomy, key=lambda r: complexity(r.layout))
    one_gpu = [r for r in pool if engine_gpus(r.layout) == 1 and r.layout.ep == 1
               and r.batch >= min(MIN_REPLICA_BATCH, req.concurrency or MIN_REPLICA_BATCH)
               and r.tokens_per_s >= (1 - ONE_GPU_MARGIN) * best.tokens_per_s]
    rule = "margin"
    if one_gpu and chosen.layout.tp > 1 and tpot_target_ms is None:
        chosen, rule = one_gpu[0], "one gpu"
    others = sorted((r for r in rates if r is not chosen), key=lambda r: -r.tokens_per_s)
    runner = others[0] if others else None
    lay = chosen.layout
    what = ("output tokens/s with the prompts' prefill (steady state)" if output_tokens
            else "decode tokens/s")
    mixed = len({r.layout.weight_dtype for r in rates}) > 1   # FP8 ranked beside 16-bit

    def name(x: Layout) -> str:
        return f"{x.weight_dtype} {describe(x)}" if mixed else describe(x)

    table = ", ".join(f"{name(r.layout)}: {r.tokens_per_s:,.0f}" for r in rates)
    why = f"{name(lay)}: {chosen.tokens_per_s:,.0f} {what} over {req.n_gpus} GPUs"
    if runner is not None and runner.tokens_per_s > 0:
        margin = chosen.tokens_per_s / runner.tokens_per_s - 1
        why += (f", {margin:+.0%} against the runner-up {name(runner.layout)} "
                f"({runner.tokens_per_s:,.0f})")
        if chosen is not best and rule == "one gpu":
            why += (f"; the model fits one GPU with room for {chosen.batch} running requests "
                    f"and {describe(best.layout)} estimates only "
                    f"{best.tokens_per_s / chosen.tokens_per_s - 1:.0%} more (under "
                    f"{ONE_GPU_MARGIN:.0%}), so it runs as {lay.dp} independent replicas: no "
                    "all-reduce, and a failed GPU takes down one replica (no per-token latency "
                    "target asks for TP)")
        elif chosen is not best:
            why += (f"; {describe(best.layout)} estimates {best.tokens_per_s:,.0f}, within "
                    f"{SIMPLICITY_MARGIN:.0%}, so the simpler layout wins (the cost model is not "
                    "that exact, and fewer GPUs per engine fail and restart independently)")
    why += (f". Chapter 9's step-cost model (fitted efficiencies; all-reduce, pipeline "
            f"transfers and expert all-to-all included) at each layout's running batch: {table}")
    why += target_note
    if req.concurrency is not None and not warn:
        why += (f"; its replicas hold the {req.concurrency} concurrent {tokens:,}-token "
                f"requests ({chosen.held})")
    if lay.ep > 1:
        why += (f"; data-parallel attention keeps each request's KV on one rank and the "
                f"{spec.n_routed_experts} routed experts are spread over {lay.ep} GPUs: it holds "
                "more requests, and wins at high concurrency")
    elif spec.is_moe and any(r.layout.ep > 1 for r in rates):
        why += ("; tensor parallelism beats data-parallel attention + expert parallelism "
                "here: at this concurrency the all-to-all and the replicated attention weights "
                "cost more than the extra KV room earns")
    if lay.pp > 1:
        micro = min(chosen.batch, lay.pp)
        why += (f"; PP={lay.pp} because no TP <= {GPUS_PER_NODE} layout holds the model: each "
                f"request crosses {lay.pp} stages per token"
                + (f" on {nodes_per_engine(lay)} nodes (activations over the network, "
                   f"{INTER_NODE_BYTES_PER_S / 1e9:.0f} GB/s assumed)"
                   if nodes_per_engine(lay) > 1 else "")
                + (f", and with {micro} micro-batch(es) for {lay.pp} stages "
                   f"{1 - micro / lay.pp:.0%} of the stages idle" if micro < lay.pp else ""))
    if lay.dp > 1 and lay.ep == 1:
        why += (f"; {lay.dp} replicas behind a router (they share nothing, so throughput adds "
                "up without all-reduce traffic)")
    return Decision(dict(layout=lay, tp=lay.tp, pp=lay.pp, dp=lay.dp, ep=lay.ep, rates=rates,
                         runner_up=runner), why, CH_SERVING, extra={"warning": warn} if warn else {})


def settle_format(weights: Decision, parallel: Decision) -> Decision:
    """Return the weight decision for the format of the layout `parallel` chose: where
    `rules.decide_weights` ranked published FP8 / NVFP4 checkpoints beside the 16-bit weights,
    the plan says which won, by how much, and why."""
    rates, chosen = parallel.value.get("rates", ()), parallel.value["layout"]
    formats = {r.layout.weight_dtype for r in rates}
    if len(formats) < 2:
        return weights
    best = {f: max((r for r in rates if r.layout.weight_dtype == f), key=lambda r: r.tokens_per_s)
            for f in formats}
    won = chosen.weight_dtype
    lost = max((f for f in formats if f != won), key=lambda f: best[f].tokens_per_s)
    w = next((r for r in rates if r.layout == chosen), best[won])
    other = best[lost]
    compare = (f"{won} {describe(w.layout)} estimates {w.tokens_per_s:,.0f} tokens/s against "
               f"{lost} {describe(other.layout)} at {other.tokens_per_s:,.0f}")
    rivals = weights.extra.get("rivals", {})
    if won == weights.value["weight_dtype"]:
        names = " and ".join(f"{f.upper()} ({repo})" for f, repo in rivals.items())
        return replace(weights, reason=weights.reason + (
            f"; the published {names} checkpoint(s) were ranked beside them and lost: {compare}"))
    repo, native = rivals[won], weights.value["weight_dtype"]
    kernels = "W8A8 FP8 kernels" if won == "fp8" else "FP4 tensor cores, 4.5 bits per weight"
    fits = other.layout.pp > w.layout.pp
    why = (f"the published {won.upper()} checkpoint {repo} ({kernels}), ranked beside the "
           f"checkpoint's {native} weights and the other published formats: {compare}. Fewer "
           "bits halve (or more) the bytes every decode step reads and the memory the weights "
           "take, which leaves more KV room" + (" and fits without pipeline stages" if fits
                                                 else "")
           + "; a checkpoint published for serving (nothing is quantized at start-up), but "
           "check quality on your task before serving")
    layouts = [lay for lay in weights.value["layouts"] if lay.weight_dtype == won]
    return Decision(dict(weights.value, weight_dtype=won, quantization=None, served_repo=repo,
                         layouts=layouts), why, weights.chapter, weights.citation)
