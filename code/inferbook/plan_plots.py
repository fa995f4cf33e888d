"""Figures of chapter 8 (planning a deployment), drawn for the book's column.

Every function takes the data the chapter computed and returns a matplotlib Figure at most
`notebook.COLUMN_WIDTH_IN` wide with no text below `notebook.MIN_TEXT_PT` (the notebook glues
it and closes it). Nothing here computes a number the prose states: the functions draw the
sizes, schedules and labels they are given, and format those sizes for their labels.

- `budget_figure(segments, total_gb, xlabel)` -> one GPU's memory as vLLM divides it, one bar.
- `plans_memory_figure(names, parts, part_labels)` -> the same split for several plans,
  one horizontal stacked bar per plan.
- `spec_schedule_figure(curves)` -> draft tokens k against the running requests, one step
  line per deployment.
- `recommender_widget(...)` -> the "Try it" dropdowns (model, GPU, count, context, workload)
  that print `recommend`'s `vllm serve` command or its refusal; needs a running kernel.
"""

from __future__ import annotations

from . import validate
from .notebook import COLUMN_WIDTH_IN

__all__ = ["budget_figure", "plans_memory_figure", "spec_schedule_figure", "recommender_widget",
           "BUDGET_COLOURS"]

W = COLUMN_WIDTH_IN

# the colours of the budget's terms, the same in every figure of the chapter
BUDGET_COLOURS = {
    "weights": "#4c72b0",
    "activations": "#dd8452",
    "CUDA graphs": "#c44e52",
    "non-torch": "#8172b3",
    "runtime": "#dd8452",
    "KV cache": "#55a868",
    "KV held": "#55a868",
    "KV left": "#a6d8b0",
    "not requested": "#b0b0b0",
}
_FALLBACK = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#b0b0b0"]


def _size(name: str, value) -> float:
    return validate.finite_float(name, value, minimum=0.0)


def _text(name: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise validate.ArgumentTypeError(f"{name} must be a non-empty str, got {value!r}")
    return value


def _colour(key: str, i: int) -> str:
    return BUDGET_COLOURS.get(key, _FALLBACK[i % len(_FALLBACK)])


def budget_figure(segments, total_gb: float, xlabel: str):
    """Return one GPU's memory as a single horizontal bar, split into the budget's terms.

    segments: (label, GB, colour key) tuples in the order they fill the GPU, e.g.
    ("weights", 35.3, "weights"), ("activations", 1.2, "activations"), ...; the colour key
    picks a colour of `BUDGET_COLOURS` (another key: a fallback colour). Each segment is
    named, with its size, in a legend below the bar (small terms are unreadable inside it).
    total_gb: the GPU's whole memory (the x axis ends there; the segments must add up to at
    most this). xlabel: the x axis label.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    segments = validate.items("segments", segments)
    if not segments:
        raise ValueError("segments must not be empty")
    parsed = []
    for i, seg in enumerate(segments):
        if not isinstance(seg, (tuple, list)) or len(seg) != 3:
            raise ValueError(f"segments[{i}] must be (label, GB, colour key), got {seg!r}")
        label, gb, key = seg
        parsed.append((_text(f"segments[{i}] label", label), _size(f"segments[{i}] GB", gb),
                       _text(f"segments[{i}] colour key", key)))
    total = validate.finite_float("total_gb", total_gb, minimum=1e-9)
    filled = sum(gb for _, gb, _ in parsed)
    if filled > total * (1 + 1e-6):
        raise ValueError(f"the segments add up to {filled:.2f} GB, more than total_gb {total:.2f}")
    xlabel = _text("xlabel", xlabel)

    fig, ax = plt.subplots(figsize=(W, 3.0), layout="constrained")
    left, handles = 0.0, []
    for i, (label, gb, key) in enumerate(parsed):
        colour = _colour(key, i)
        ax.barh(0, gb, left=left, height=0.6, color=colour, edgecolor="white")
        handles.append(Patch(facecolor=colour, label=f"{label}: {gb:.1f} GB"))
        left += gb
    ax.set_xlim(0, total)
    ax.set_ylim(-0.5, 0.5)
    ax.set_yticks([])
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False)
    return fig


def plans_memory_figure(names, parts, part_labels):
    """Return the per-GPU memory of several plans, one horizontal stacked bar each.

    names: one label per plan (the y axis, top to bottom). parts: one row per plan of GB
    values, one per term, in the order of `part_labels` (the legend, below the plot). The
    colour of a term whose label starts with a key of `BUDGET_COLOURS` is that key's.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    names = validate.items("names", names)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"names must be non-empty strings, one per plan, got {names!r}")
    part_labels = validate.items("part_labels", part_labels)
    if not part_labels or not all(isinstance(p, str) and p for p in part_labels):
        raise ValueError(f"part_labels must be non-empty strings, got {part_labels!r}")
    rows = validate.items("parts", parts)
    if len(rows) != len(names):
        raise ValueError(f"parts must have one row per plan ({len(names)}), got {len(rows)}")
    data = np.array([[_size(f"parts[{i}][{j}]", v) for j, v in enumerate(validate.items(
        f"parts[{i}]", row))] for i, row in enumerate(rows)], dtype=object)
    if any(len(r) != len(part_labels) for r in data):
        raise ValueError(f"every row of parts must have {len(part_labels)} values (one per "
                         "part label)")
    data = np.asarray(data.tolist(), dtype=float)

    fig, ax = plt.subplots(figsize=(W, 1.9 + 0.42 * len(names) + 0.24 * len(part_labels)),
                           layout="constrained")
    y = np.arange(len(names))
    left = np.zeros(len(names))
    for j, label in enumerate(part_labels):
        key = next((k for k in BUDGET_COLOURS if label.startswith(k)), "")
        ax.barh(y, data[:, j], left=left, height=0.7, label=label, color=_colour(key, j),
                edgecolor="white", linewidth=0.5)
        left += data[:, j]
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("GB per GPU")
    ax.set_xlim(0, max(left.max(), 1e-9) * 1.02)
    fig.legend(loc="outside lower center", ncol=1, frameon=False)
    return fig


def spec_schedule_figure(curves, max_batch: int | None = None):
    """Return the draft-length schedule k of each deployment against its running requests.

    curves: (label, schedule) pairs, each schedule a list of (first, last, k) ranges of
    running requests as `speculation_rules.spec_schedule` returns them (contiguous, from 1).
    Drawn as step lines on a log x axis, the legend below the plot. max_batch: the x axis's
    end (default: the largest `last`).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from matplotlib.ticker import MaxNLocator

    curves = validate.items("curves", curves)
    if not curves:
        raise ValueError("curves must not be empty")
    parsed = []
    for i, item in enumerate(curves):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"curves[{i}] must be (label, schedule), got {item!r}")
        label, sched = _text(f"curves[{i}] label", item[0]), validate.items(
            f"curves[{i}] schedule", item[1])
        expect = 1
        for lo, hi, k in sched:
            validate.positive_int("first", lo)
            validate.integer("k", k, minimum=0)
            if lo != expect or validate.positive_int("last", hi) < lo:
                raise ValueError(f"curves[{i}]: the schedule's ranges must be contiguous from "
                                 f"1, got {sched!r}")
            expect = hi + 1
        if not sched:
            raise ValueError(f"curves[{i}]: empty schedule")
        parsed.append((label, sched))
    end = max(s[-1][1] for _, s in parsed) if max_batch is None else validate.positive_int(
        "max_batch", max_batch)

    fig, ax = plt.subplots(figsize=(W, 4.4), layout="constrained")
    for label, sched in parsed:
        b = np.concatenate([np.arange(lo, hi + 1) for lo, hi, _ in sched])
        k = np.concatenate([[kk] * (hi - lo + 1) for lo, hi, kk in sched])
        ax.step(b, k, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlim(1, end)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("running requests")
    ax.set_ylabel("draft tokens k")
    fig.legend(loc="outside lower center", ncol=1, frameon=False)
    return fig


WIDGET_GPU_COUNTS = (1, 2, 4, 8)
WIDGET_CONTEXTS = (4096, 8192, 32768, 131072)


def recommender_widget(model: str = "Llama-3.1-70B", gpu: str = "H100 SXM", n_gpus: int = 4,
                       context: int = 32768, kind: str = "chat"):
    """Return dropdowns for a model preset, a GPU preset, the GPU count, the context and the
    workload kind, above an output that shows `recommend.recommend`'s `vllm serve` command for
    the choice (or why it is refused), updated on every change. The arguments are the first
    choice; each must be one of its dropdown's options (ValueError otherwise).
    """
    import ipywidgets as widgets

    from . import recommend as rec
    from .hardware import GPUS
    from .models import MODELS

    options = {"model": list(MODELS), "gpu": list(GPUS), "n_gpus": list(WIDGET_GPU_COUNTS),
               "context": list(WIDGET_CONTEXTS), "kind": list(rec.WORKLOAD_KINDS)}
    chosen = {"model": model, "gpu": gpu, "n_gpus": n_gpus, "context": context, "kind": kind}
    for name, value in chosen.items():
        if value not in options[name]:
            raise ValueError(f"{name} must be one of {options[name]}, got {value!r}")
    labels = {"model": "model", "gpu": "GPU", "n_gpus": "GPUs", "context": "context",
              "kind": "workload"}
    boxes = {name: widgets.Dropdown(options=options[name], value=chosen[name],
                                    description=labels[name]) for name in options}
    out = widgets.Output()

    def show(_=None):
        out.clear_output()
        with out:
            try:
                plan = rec.recommend(boxes["model"].value,
                                     (boxes["gpu"].value, boxes["n_gpus"].value),
                                     rec.Workload(boxes["kind"].value,
                                                  context_tokens=boxes["context"].value))
                print(plan.vllm_command if plan.ok else f"Refused: {plan.reason}")
            except ValueError as err:
                print(f"error: {err}")

    for box in boxes.values():
        box.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([boxes["model"], boxes["gpu"], boxes["n_gpus"]]),
                         widgets.HBox([boxes["context"], boxes["kind"]]), out])
