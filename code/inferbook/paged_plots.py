"""The figures of chapter 5 (PagedAttention and prefix caching), drawn for the book's column.

Each function takes what the notebook computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT` (the notebook glues
it and closes it). Nothing here computes the chapter's numbers.

- `block_table_diagram(tables, num_blocks)`: a pool of blocks, block tables pointing into it.
- `pool_figure(blocks, title)`: which sequence owns each slot of a block pool.
- `length_histograms(prompt_lens, output_lens, max_len)`: the workload's lengths.
- `pool_use_bars(results)`: the KV pool's memory by use under each allocation policy.
- `running_over_time(results)`: sequences running per decoding step, per policy.
- `waste_by_block_size(waste_pct, exact_pct, paper_pct)`: paged waste against block size.
- `fork_speedup(points, positions_ratio, prompt_tokens, completions)`: fork after prefill.
- `prefix_hit_rate(pools, hit_pct)`: prefix-cache reuse against pool size.
- `fragmentation_explorer(requests, capacity_tokens)`: the policies under other knobs (widget).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from . import validate
from .notebook import COLUMN_WIDTH_IN

__all__ = [
    "block_table_diagram",
    "fork_speedup",
    "fragmentation_explorer",
    "length_histograms",
    "pool_figure",
    "pool_use_bars",
    "prefix_hit_rate",
    "running_over_time",
    "waste_by_block_size",
]

_EDGE = "#333333"
_SEQ_COLOURS = ("#9ecae1", "#fdae6b", "#bcbddc", "#fdd0a2")
_SHARED = "#74c476"
_FREE = "#f0f0f0"


def _white(fig, ax) -> None:
    """A schematic drawn on a white box reads the same in light and dark mode."""
    fig.patch.set_facecolor("white")
    ax.set_facecolor("white")
    ax.axis("off")


def block_table_diagram(tables: Mapping[str, Sequence[int]], num_blocks: int):
    """Return a diagram of a pool of `num_blocks` physical blocks and the block tables
    `tables` (sequence name -> physical blocks in logical order) that point into it.

    Each pool block shows its number and reference count (how many tables hold it), coloured
    by who holds it (one sequence, several: shared, none: free, hatched); each table entry has
    an arrow to its block, and the free list (ascending) is written under the tables.
    At most four tables.
    """
    num_blocks = validate.positive_int("num_blocks", num_blocks)
    if not isinstance(tables, Mapping) or not 1 <= len(tables) <= 4:
        raise ValueError("tables must map 1 to 4 sequence names to their block tables")
    for name, table in tables.items():
        if not table or any(not isinstance(b, int) or not 0 <= b < num_blocks for b in table):
            raise ValueError(f"table {name!r} must list blocks in [0, {num_blocks}); got {table}")
    names = list(tables)
    holders = {b: [s for s in names if b in tables[s]] for b in range(num_blocks)}

    def colour(b):
        held = holders[b]
        return _FREE if not held else _SHARED if len(held) > 1 else \
            _SEQ_COLOURS[names.index(held[0])]

    longest = max(len(t) for t in tables.values())
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2.0 + 0.7 * len(names)))
    _white(fig, ax)
    top = 1.4 * len(names) + 0.4
    ax.text(-0.2, top + 1.15, "pool of physical blocks", ha="left", va="center")
    for b in range(num_blocks):
        ax.add_patch(Rectangle((b, top), 0.9, 0.8, facecolor=colour(b), edgecolor=_EDGE,
                               hatch="//" if not holders[b] else None))
        ax.text(b + 0.45, top + 0.4, str(b), ha="center", va="center")
        ax.text(b + 0.45, top - 0.35, str(len(holders[b])), ha="center", va="center")
    ax.text(-0.3, top + 0.4, "block", ha="right", va="center")
    ax.text(-0.3, top - 0.35, "refs", ha="right", va="center")
    for row, name in enumerate(names):
        y = top - 1.9 - row * 1.2
        ax.text(-0.3, y + 0.3, f"table {name}", ha="right", va="center")
        for j, b in enumerate(tables[name]):
            x = j * 1.0 + 0.05
            # boxes above the arrows: an arrow from a lower table passes behind them
            ax.add_patch(Rectangle((x, y), 0.8, 0.6, facecolor=colour(b), edgecolor=_EDGE,
                                   zorder=3))
            ax.text(x + 0.4, y + 0.3, str(b), ha="center", va="center", zorder=4)
            ax.add_patch(FancyArrowPatch((x + 0.4, y + 0.6), (b + 0.45, top - 0.62),
                                         arrowstyle="-|>", mutation_scale=10, lw=0.9,
                                         color="#666666", zorder=2))
    free = [b for b in range(num_blocks) if not holders[b]]
    bottom = top - 1.9 - (len(names) - 1) * 1.2
    ax.text(longest + 0.3 if longest < num_blocks - 3 else -0.2,
            bottom + 0.3,
            "free list: " + (", ".join(map(str, free)) if free else "empty"),
            ha="left", va="center")
    handles = [Rectangle((0, 0), 1, 1, facecolor=_SHARED, edgecolor=_EDGE)]
    labels = ["shared"]
    for k, name in enumerate(names):
        handles.append(Rectangle((0, 0), 1, 1, facecolor=_SEQ_COLOURS[k], edgecolor=_EDGE))
        labels.append(f"{name} only")
    handles.append(Rectangle((0, 0), 1, 1, facecolor=_FREE, edgecolor=_EDGE, hatch="//"))
    labels.append("free")
    ax.legend(handles, labels, ncol=len(labels), loc="upper center",
              bbox_to_anchor=(0.5, 0.02), frameon=False, handlelength=1.2,
              columnspacing=1.0, handletextpad=0.4)
    ax.set_xlim(-1.9, num_blocks + 0.1)
    ax.set_ylim(bottom - 0.1, top + 1.45)
    fig.tight_layout()
    return fig


def pool_figure(blocks, title: str | None = None):
    """Return a picture of a block pool: one row per physical block, one column per slot,
    each slot coloured by the sequence whose token it holds (white: empty).

    `blocks` is an `inferbook.blocks.BlockManager` (or a `PagedKVCache`'s `.blocks`); the
    legend, under the grid, gives each sequence's block table.
    """
    for attr in ("sequences", "block_table", "num_tokens", "allocator", "block_size"):
        if not hasattr(blocks, attr):
            raise TypeError("blocks must be a BlockManager (a PagedKVCache's .blocks); "
                            f"{type(blocks).__name__} has no {attr!r}")
    seqs = blocks.sequences
    if len(seqs) > 10:
        raise ValueError(f"at most 10 sequences can be told apart; got {len(seqs)}")
    size = blocks.block_size
    owner = np.full((blocks.allocator.num_blocks, size), np.nan)
    for k, seq in enumerate(seqs):
        table = blocks.block_table(seq)
        for t in range(blocks.num_tokens(seq)):
            owner[table[t // size], t % size] = k
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.6))
    ax.imshow(np.zeros_like(owner), cmap="Greys", vmin=0, vmax=8, aspect="auto")
    ax.imshow(owner, cmap="tab10", vmin=0, vmax=9, aspect="auto", interpolation="nearest")
    ax.grid(False)
    ax.set_xlabel("slot within block")
    ax.set_ylabel("physical block")
    if title:
        ax.set_title(title)
    for k, seq in enumerate(seqs):
        ax.plot([], [], "s", color=plt.cm.tab10(k / 9), label=f"{seq}: {blocks.block_table(seq)}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False,
              title="sequence: block table")
    fig.tight_layout()
    return fig


def length_histograms(prompt_lens, output_lens, max_len: int):
    """Return two stacked histograms (log-spaced bins up to `max_len`): prompt lengths above,
    output lengths below, in tokens per request."""
    max_len = validate.positive_int("max_len", max_len)
    fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH_IN, 5.2), sharex=True)
    bins = np.logspace(0, np.log10(max_len), 40)
    for ax, x, name in ((axes[0], prompt_lens, "prompt"), (axes[1], output_lens, "output")):
        x = np.asarray(x)
        if x.ndim != 1 or x.size == 0:
            raise ValueError(f"{name} lengths must be a non-empty 1-D array")
        ax.hist(x, bins=bins, color="C0")
        ax.set_xscale("log")
        ax.set_ylabel("requests")
        ax.set_title(f"{name} lengths", loc="left")
    axes[1].set_xlabel("tokens")
    fig.tight_layout()
    return fig


def _check_results(results: Mapping, fields: Sequence[str]) -> None:
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must map policy names to fragmentation.SimResult")
    for name, r in results.items():
        missing = [f for f in fields if not hasattr(r, f)]
        if missing:
            raise TypeError(f"results[{name!r}] has no {missing} (a fragmentation.SimResult?)")


def pool_use_bars(results: Mapping):
    """Return stacked bars, one per policy of `results` (name -> `fragmentation.SimResult`):
    the share of the KV pool holding token states, reserved without a token (yet), free but
    unusable (external fragmentation) and free, averaged over the steps in which requests
    waited (the result's `held`, `reserved`, `external` over `capacity`)."""
    _check_results(results, ("held", "reserved", "external", "capacity"))
    names = list(results)
    cap = np.array([results[p].capacity for p in names], dtype=float)
    held = 100 * np.array([results[p].held for p in names]) / cap
    reserved = 100 * np.array([results[p].reserved for p in names]) / cap
    external = 100 * np.array([results[p].external for p in names]) / cap
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.6))
    parts = ((held, 0, "token states", "C2"),
             (reserved - held, held, "reserved, no token (yet)", "C3"),
             (external, reserved, "free but unusable (ext. frag.)", "C1"),
             (100 - reserved - external, reserved + external, "free", "0.85"))
    for height, bottom, label, colour in parts:
        ax.bar(names, height, bottom=bottom, label=label, color=colour)
    ax.set_ylabel("% of the KV pool")
    ax.set_ylim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def running_over_time(results: Mapping):
    """Return one line per policy of `results` (name -> `fragmentation.SimResult`): the
    sequences running at each decoding step (the result's `timeline["running"]`)."""
    _check_results(results, ("timeline",))
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.2))
    for name, r in results.items():
        running = r.timeline["running"]
        ax.plot(np.arange(len(running)), running, label=name, lw=1.2)
    ax.set_xlabel("decoding step")
    ax.set_ylabel("sequences running")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(results),
              frameon=False, columnspacing=1.0, handlelength=1.2)
    fig.tight_layout()
    return fig


def waste_by_block_size(waste_pct: Mapping[int, float], exact_pct: float,
                        paper_pct: float = 4.0):
    """Return the paged policy's waste (% of reserved memory) against block size on a log
    axis (`waste_pct`: block size -> %), beside the exact contiguous policy's waste
    (`exact_pct`, dashed) and the vLLM paper's figure (`paper_pct`, dotted)."""
    if not isinstance(waste_pct, Mapping) or not waste_pct:
        raise ValueError("waste_pct must map block sizes to waste in %")
    sizes = sorted(validate.positive_int("block size", s) for s in waste_pct)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.0))
    ax.plot(sizes, [waste_pct[s] for s in sizes], "o-", label="paged")
    ax.axhline(exact_pct, color="C3", ls="--", label="contiguous, exact size")
    ax.axhline(paper_pct, color="k", ls=":", lw=1, label=f"{paper_pct:g}% (vLLM paper)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("waste (% of reserved)")
    ax.legend(loc="center left", frameon=True)  # the empty band under the dashed line
    fig.tight_layout()
    return fig


def fork_speedup(points: Sequence[Mapping], positions_ratio: Callable[[np.ndarray], np.ndarray],
                 prompt_tokens: int, completions: int):
    """Return re-encode time over fork time against tokens per completion (log axis).

    `points`: rows with "completion_tokens" and "ratio" (the measured CPU-time ratio);
    `positions_ratio(c)`: the ratio of positions through the model, drawn dashed on a grid
    of c; the dotted line is n = `completions`, the limit when only the prefill counts.
    """
    if not points or any(not {"completion_tokens", "ratio"} <= set(p) for p in points):
        raise ValueError("points must be rows with 'completion_tokens' and 'ratio'")
    if not callable(positions_ratio):
        raise TypeError("positions_ratio must be a function of the completion length")
    n = validate.positive_int("completions", completions)
    points = sorted(points, key=lambda p: p["completion_tokens"])
    c_max = max(p["completion_tokens"] for p in points)
    c_grid = np.logspace(0, np.log10(max(c_max, 2)), 100)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 4.4))
    ax.plot(c_grid, positions_ratio(c_grid), "--", color="0.5", label="positions ratio")
    ax.plot([p["completion_tokens"] for p in points], [p["ratio"] for p in points], "o-",
            label="measured CPU time")
    ax.axhline(n, color="k", ls=":", lw=1, label=f"n = {n}")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per completion (c)")
    ax.set_ylabel("re-encode / fork time")
    ax.set_title(f"P = {prompt_tokens} tokens, n = {n} completions")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False,
              columnspacing=1.0, handlelength=1.5)
    fig.tight_layout()
    return fig


def prefix_hit_rate(pools: Sequence[int], hit_pct: Sequence[float]):
    """Return the share of prompt tokens served from the prefix cache (%) against the pool
    size in 16-token blocks, on a log axis."""
    if len(pools) != len(hit_pct) or not pools:
        raise ValueError(f"pools and hit_pct must be as long, and not empty: "
                         f"{len(pools)} and {len(hit_pct)}")
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.8))
    ax.plot(pools, hit_pct, "o-")
    ax.set_xscale("log")
    ax.set_xticks(pools, [str(n) for n in pools])
    ax.minorticks_off()
    ax.set_xlabel("KV pool (16-token blocks)")
    ax.set_ylabel("prompt tokens reused (%)")
    fig.tight_layout()
    return fig


def fragmentation_explorer(requests, capacity_k_tokens: int = 32):
    """Return an ipywidgets explorer: for a block size and a pool size (in thousands of
    tokens) it prints what `fragmentation.simulate` gives three policies on `requests`
    (tokens per pool slot, waste, most sequences at once, steps, preemptions)."""
    import ipywidgets as widgets

    from .fragmentation import simulate

    def explore(block_size=16, pool_k_tokens=capacity_k_tokens):
        for p in ("reserve_max", "exact", "paged"):
            x = simulate(requests, p, capacity_tokens=pool_k_tokens * 1024,
                         block_size=block_size)
            print(f"{p:<12} tokens/pool {x.utilisation:6.1%}, waste {x.waste:6.1%}")
            print(f"{'':<12} max seqs {x.max_concurrent}, steps {x.steps}, "
                  f"preemptions {x.preemptions}")

    return widgets.interactive(
        explore,
        block_size=widgets.Dropdown(options=[1, 4, 8, 16, 32, 64, 128], value=16),
        pool_k_tokens=widgets.IntSlider(min=8, max=128, step=8, value=capacity_k_tokens,
                                        description="pool (K tokens)"))


def prefix_caching_report(bench: Mapping) -> str:
    """Return the fork-after-prefill benchmark (outputs/benchmarks/prefix_caching.json) as the
    lines the chapter prints: provenance, CPU seconds forked and re-encoded, the completion
    length sweep and the paged decode loop's cost against the contiguous cache."""
    r, cpu, n = bench["ratios"], bench["median_cpu_seconds"], bench["completions"]
    lines = [bench["model"],
             (f"prompt {bench['prompt_tokens']}, {n} completions x "
              f"{bench['completion_tokens']} tokens; {bench['machine']['torch_threads']} "
              f"thread, torch {bench['versions']['torch']}, {bench['date']}"),
             (f"prefill of P alone: {cpu['prompt_prefill_once']:.2f} CPU s, once when "
              f"forking, {n} times when re-encoding"),
             (f"all {n} completions: forked {cpu['forked']:.2f} CPU s, re-encoded "
              f"{cpu['reencoded']:.2f} CPU s -> {r['reencoded_over_forked_cpu']:.1f}x"),
             (f"  (positions through the model: {r['tokens_reencoded_over_forked']:.1f}x; "
              f"max |logit diff| {bench['max_abs_logit_diff_forked_vs_reencoded']:.1e})")]
    for row in bench["completion_length_sweep"]:
        c = row["completion_tokens"]
        unit = "token: " if c == 1 else "tokens:"
        lines.append(f"  completions of {c:3d} {unit} {row['ratio']:.1f}x "
                     f"(positions {row['token_ratio']:.1f}x)")
    lines.append(f"paged vs contiguous greedy decoding ({bench['decode_tokens']} tokens): "
                 f"{r['paged_over_contiguous_decode_cpu']:.2f}x the time")
    return "\n".join(lines)
