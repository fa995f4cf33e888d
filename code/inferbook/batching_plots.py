"""The figures, tables and explorer of chapter 6 (continuous batching), drawn for the book's
column.

Each figure function takes what the notebook computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT` (the notebook glues
it and closes it); each report function formats a committed benchmark JSON as the plain-text
table the chapter prints. Nothing here computes the numbers the chapter's prose quotes.

- `scheduler_step_diagram(steps, budget, notes)`: scheduler steps under a token budget.
- `output_length_histogram(out_lens)`: the workload's reply lengths.
- `occupancy_figure(runs)`: useful rows and KV blocks per engine step, per policy.
- `batching_explorer(model, requests)`: static against continuous under other knobs (widget).
- `vllm_steps_report`, `static_vs_continuous_report`, `chunked_prefill_report`,
  `peer_report`, `vllm_tokens_report`, `vllm_throughput_report`: the printed tables.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from .notebook import COLUMN_WIDTH_IN

__all__ = [
    "batching_explorer",
    "chunked_prefill_report",
    "occupancy_figure",
    "output_length_histogram",
    "peer_report",
    "scheduler_step_diagram",
    "static_vs_continuous_report",
    "vllm_steps_report",
    "vllm_throughput_report",
    "vllm_tokens_report",
]

_KIND_COLOUR = {"decode": "#74c476", "prefill": "#9ecae1"}
_KIND_LABEL = {"decode": "decode (1 token per sequence)", "prefill": "prefill (prompt or chunk)"}


def scheduler_step_diagram(steps: Sequence[Sequence[tuple[str, int, str]]], budget: int,
                           notes: Sequence[str] = ()):
    """Return a diagram of scheduler steps: one row per step, one box per sequence scheduled
    (width = its tokens this step, green for a decode, blue for a prefill or chunk), the
    token budget as a red line and an optional note under each row.

    `steps[i]` lists (sequence, tokens, "decode" or "prefill") in the scheduler's order;
    a row's tokens must fit in `budget`.
    """
    if not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"budget must be a positive int; got {budget!r}")
    if not steps or (notes and len(notes) != len(steps)):
        raise ValueError("steps must be non-empty, with one note per step (or none)")
    for k, work in enumerate(steps):
        for seq, n, kind in work:
            if kind not in _KIND_COLOUR or not isinstance(n, int) or n <= 0:
                raise ValueError(f"step {k + 1}: ({seq!r}, {n!r}, {kind!r}) is not "
                                 "(name, positive tokens, 'decode' or 'prefill')")
        if sum(n for _, n, _ in work) > budget:
            raise ValueError(f"step {k + 1} schedules more than the {budget}-token budget")
    wrapped = [textwrap.wrap(note, 56) for note in notes] or [[] for _ in steps]
    heights = [1.0 + 0.32 * len(lines) for lines in wrapped]
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 1.3 + 0.95 * sum(heights)))
    fig.patch.set_facecolor("white")
    ax.set_facecolor("white")
    ax.axis("off")
    y = 0.0
    for k, (work, lines) in enumerate(zip(steps, wrapped)):
        y -= 0.8
        ax.text(-0.8, y + 0.3, f"step {k + 1}", ha="right", va="center")
        x, narrow = 0, []  # a run of boxes too narrow for a letter shares one label
        for seq, n, kind in [*work, (None, 0, None)]:
            if narrow and (seq is None or n >= 3):
                x0, x1 = narrow[0][0], narrow[-1][0] + narrow[-1][2]
                name = narrow[0][1] if len(narrow) == 1 else f"{narrow[0][1]}–{narrow[-1][1]}"
                ax.text((x0 + x1) / 2, y + 0.3, name, ha="center", va="center",
                        bbox={"facecolor": _KIND_COLOUR[narrow[0][3]], "edgecolor": "none", "pad": 1})
                narrow = []
            if seq is None:
                break
            ax.add_patch(Rectangle((x, y), n, 0.6, facecolor=_KIND_COLOUR[kind],
                                   edgecolor="#333333"))
            if n < 3:
                narrow.append((x, seq, n, kind))
            else:
                ax.text(x + n / 2, y + 0.3, seq if n < 6 else f"{seq}: {n}", ha="center",
                        va="center")
            x += n
        ax.plot([budget, budget], [y - 0.1, y + 0.7], color="#d62728", lw=2)
        for j, line in enumerate(lines):
            ax.text(0, y - 0.3 - 0.32 * j, line, va="center")
        y -= 0.25 + 0.32 * len(lines)
    ax.text(budget, 0.15, f"budget: {budget} tokens", ha="right", va="center",
            color="#d62728")
    handles = [Rectangle((0, 0), 1, 1, facecolor=_KIND_COLOUR[k], edgecolor="#333333")
               for k in _KIND_COLOUR]
    ax.legend(handles, list(_KIND_LABEL.values()), loc="upper center",
              bbox_to_anchor=(0.5, 0.0), ncol=1, frameon=False)
    ax.set_xlim(-6.5, budget + 1)
    ax.set_ylim(y - 0.1, 0.45)
    fig.tight_layout()
    return fig


def output_length_histogram(out_lens, bin_width: int = 4):
    """Return a histogram of output tokens per request (bins of `bin_width` tokens)."""
    out_lens = np.asarray(out_lens)
    if out_lens.ndim != 1 or out_lens.size == 0:
        raise ValueError("out_lens must be a non-empty 1-D array of lengths")
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.4))
    ax.hist(out_lens, bins=np.arange(0, out_lens.max() + bin_width + 1, bin_width),
            color="tab:blue", alpha=0.8)
    ax.set_xlabel("output tokens per request")
    ax.set_ylabel("requests")
    fig.tight_layout()
    return fig


def occupancy_figure(runs: Mapping):
    """Return two stacked panels against the engine step, one line per policy of `runs`
    (name -> `engine.serve` result): sequences doing useful work (running minus the static
    batch's padding rows) above, KV blocks in use below."""
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError("runs must map policy names to engine.serve results")
    for name, result in runs.items():
        if not hasattr(result, "timeline"):
            raise TypeError(f"runs[{name!r}] has no timeline (an engine.serve result?)")
    fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH_IN, 5.6), sharex=True)
    for name, result in runs.items():
        steps = np.arange(1, len(result.timeline) + 1)
        axes[0].plot(steps, [s.running - s.padding_rows for s in result.timeline], label=name)
        axes[1].plot(steps, [s.blocks_used for s in result.timeline], label=name)
    axes[0].set_ylabel("useful rows")
    axes[1].set_ylabel("KV blocks in use")
    axes[1].set_xlabel("engine step")
    axes[0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(runs),
                   frameon=False)
    fig.tight_layout()
    return fig


def batching_explorer(model, requests, n_requests: int = 48):
    """Return an ipywidgets explorer: static and continuous batching of the first
    `n_requests` of `requests` on `model` (`engine.serve`, steps clock) under the knobs
    chosen, printing steps, tokens per step, preemptions and TTFT percentiles."""
    import ipywidgets as widgets

    from .engine import serve

    subset = list(requests)[:n_requests]

    def explore(max_num_seqs=16, num_blocks=160, chunked_prefill=False,
                max_num_batched_tokens=1024):
        for policy in ("static", "continuous"):
            r = serve(model, subset, policy=policy, clock="steps", num_blocks=num_blocks,
                      block_size=16, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens,
                      chunked_prefill=chunked_prefill)
            print(f"{policy:<11}{r.steps:>4} steps, {r.throughput:5.2f} tok/step, "
                  f"{r.preemptions} preemptions")
            print(f"{'':<11}TTFT p50 {r.percentile('ttft', 50):.0f}, "
                  f"p90 {r.percentile('ttft', 90):.0f} steps")

    return widgets.interactive(explore, max_num_seqs=(1, 32), num_blocks=(8, 320, 8),
                               max_num_batched_tokens=(16, 1024, 16))


def vllm_steps_report(ref: Mapping, name: str, first: int = 0, last: int = 4) -> str:
    """Return steps `first`..`last` of example `name` of the committed vLLM scheduler trace
    (outputs/benchmarks/vllm_scheduler.json): each row as request[first:end token]."""
    if name not in ref.get("examples", {}):
        raise KeyError(f"no example {name!r}; known: {sorted(ref.get('examples', {}))}")
    lines = [f"{name} (vLLM {ref['vllm']}):"]
    for s in ref["examples"][name]["vllm_steps"][first:last]:
        rows = "  ".join(f"{'AB'[r]}[{a}:{a + n}]" for r, a, n in s["rows"])
        cut = f"   preempted: {'AB'[s['preempted'][0]]}" if s["preempted"] else ""
        lines.append(f"  step {s['t']}: {rows}{cut}")
    return "\n".join(lines)


def static_vs_continuous_report(bench: Mapping, wall: Mapping) -> str:
    """Return the CPU-time comparison of static and continuous batching
    (outputs/benchmarks/ch06_scheduling.json) and the wall-clock runs (serving.json)."""
    sc = bench["static_vs_continuous"]
    ratios = np.array(sc["throughput_ratio_per_pair"])
    tpot = np.array(sc["tpot_p50_ratio_per_pair"])
    lines = [(f"{bench['machine']['processor']}, torch {bench['torch']}, 1 thread, "
             f"{bench['date'][:10]}; {len(ratios)} alternated pairs of runs"),
             f"{'output tokens per CPU second':<30}{'median':>7}{'range':>12}"]
    for policy in ("static", "continuous"):
        tp = [r["throughput_tok_cpu_s"] for r in sc[policy]["runs"]]
        lines.append(f"  {policy:<28}{np.median(tp):>7.0f}{min(tp):>6.0f}-{max(tp):<5.0f}")
    lines.append(f"continuous / static, per pair: median {np.median(ratios):.2f}x, "
                 f"range {ratios.min():.2f}-{ratios.max():.2f}x")
    lines.append(f"TPOT p50, continuous / static: median {np.median(tpot):.2f}x, "
                 f"range {tpot.min():.2f}-{tpot.max():.2f}x")
    for policy in ("static", "continuous"):
        runs = wall[policy]["throughput_tok_s"]
        lines.append(f"wall clock, {policy}: " + ", ".join(f"{x:.0f}" for x in runs)
                     + " tok/s")
    return "\n".join(lines)


def chunked_prefill_report(cp: Mapping, repeats: int) -> str:
    """Return the CPU-time table of the chunked-prefill configurations
    (ch06_scheduling.json's "chunked_prefill"): TPOT p50 and decode-step p90, median
    (range over runs), and the median TTFT p50, in ms."""
    lines = [f"{repeats} runs each; CPU ms, median (range over runs)",
             f"{'':3}{'TPOT p50':>18}{'decode step p90':>18}{'TTFT p50':>11}"]

    def cell(runs, key, width):
        v = 1e3 * np.array([r[key] for r in runs])
        return f"{np.median(v):.2f} ({v.min():.1f}-{v.max():.1f})".rjust(width)

    for name, c in cp["configs"].items():
        lines.append(f"{name:3}{cell(c['runs'], 'tpot_p50_s', 18)}"
                     f"{cell(c['runs'], 'decode_step_p90_s', 18)}"
                     f"{1e3 * c['median']['ttft_p50_s']:>11.1f}")
    return "\n".join(lines)


def peer_report(peer: Mapping) -> str:
    """Return the book's engine beside transformers (peer_engine.json): tokens per CPU
    second (median, range) and each engine's CPU time by where it went."""
    w, sh = peer["workload"], peer["shape"]
    lines = [(f"GPT-2 shape, random weights: {sh['n_layer']} layers, width {sh['n_embd']}, "
             f"{sh['n_head']} heads, vocabulary {sh['vocab_size']}"),
             (f"{w['requests']} requests, prompts {w['prompt_len'][0]}-{w['prompt_len'][1]} "
             f"tokens, {w['new_tokens_each']} new tokens each; greedy tokens identical"),
             f"{'':<15}{'tok / CPU s':>17}   share of CPU time (%)",
             (f"{'':<15}{'median':>7}{'range':>10}{'matmul':>8}{'attn':>6}{'other':>6}"
             f"{'outside':>8}")]
    for name, tps in peer["throughput_tok_cpu_s"].items():
        p = peer["profile"][name]
        s = [100 * p[k] / p["total"]
             for k in ("matmul", "attention", "other_in_forward", "outside_forward")]
        lines.append(f"{name:<15}{np.median(tps):>7.0f}{min(tps):>5.0f}-{max(tps):<4.0f}"
                     f"{s[0]:>8.0f}{s[1]:>6.0f}{s[2]:>6.0f}{s[3]:>8.0f}")
    return "\n".join(lines)


def vllm_tokens_report(same: Mapping) -> str:
    """Return the identical-tokens check of vLLM, transformers and the book's engine
    (vllm_engine_tokens.json): per model, requests, prompt lengths, prompts over the chunk
    budget and sharing a prefix, and how many requests came back identical in each."""
    lim = same["engine_limits"]
    lines = [(f"vLLM {same['versions']['vllm']}, block size {lim['block_size']}, "
             f"{lim['max_num_batched_tokens']} tokens per step,"
             " chunked prefill and prefix caching on"),
             (f"{'model':<11}{'requests':>9}{'prompts':>10}{'> budget':>9}{'prefix':>7}"
             "   identical requests (vLLM / transformers / book)")]
    for kind, m in same["models"].items():
        lens, ok = m["prompt_lengths"], m["identical_requests"]
        lines.append(f"{kind:<11}{m['requests']:>9}{min(lens):>5}-{max(lens):<4}"
                     f"{m['prompts_longer_than_chunk_budget']:>9}"
                     f"{m['prompts_sharing_a_prefix']:>7}"
                     f"   {ok['vllm']} / {ok['transformers']} / {ok['book_engine']}")
    return "\n".join(lines)


def vllm_throughput_report(race: Mapping) -> str:
    """Return the throughput race of the book's engine and vLLM's CPU engine
    (vllm_engine_throughput.json): the model, then tokens per CPU second, median and range."""
    lines = textwrap.wrap(race["model"], 80)
    lines.append(f"{'engine':<13}{'tok / CPU s':>12}{'range':>14}")
    for name, tps in race["throughput_tok_cpu_s"].items():
        lines.append(f"{name:<13}{np.median(tps):>12.0f}{min(tps):>8.0f}-{max(tps):<5.0f}")
    return "\n".join(lines)
