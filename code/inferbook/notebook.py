"""Shared set-up for every chapter notebook: seeds, a device report, plotting defaults, glue.

`glue` stores a value for the rendered book's `{glue:text}` roles when myst_nb is installed
(`make book`, CI) and does nothing otherwise (Colab, a plain Jupyter session), so a chapter runs
anywhere without Sphinx.
"""

from __future__ import annotations

import os
import platform
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DeviceReport:
    """What the notebook is running on: `device` is "cpu" or "cuda"."""

    device: str
    name: str
    compute_capability: tuple[int, int] | None
    torch_version: str
    python_version: str

    def __str__(self) -> str:
        if self.compute_capability is None:
            where = f"CPU ({self.name})"
        else:
            major, minor = self.compute_capability
            where = f"GPU {self.name}, compute capability {major}.{minor} (sm{major}{minor})"
        return f"device: {where} | torch {self.torch_version} | Python {self.python_version}"

    # A cell ending in `setup(seed=0)` shows its value: the readable line, not the dataclass repr
    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(str(self))}</code>"


def device_report() -> DeviceReport:
    """Return what this kernel computes on: the first CUDA GPU if there is one, else the CPU."""
    import torch

    if torch.cuda.is_available():
        return DeviceReport(
            device="cuda",
            name=torch.cuda.get_device_name(0),
            compute_capability=torch.cuda.get_device_capability(0),
            torch_version=torch.__version__,
            python_version=platform.python_version(),
        )
    return DeviceReport(
        device="cpu",
        name=platform.machine() or "unknown",
        compute_capability=None,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
    )


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) so a notebook reruns identically."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0, threads: int | None = None) -> DeviceReport:
    """Seed everything, pin CPU threads, set plot defaults, print and return the device report.

    `threads` defaults to the `INFERBOOK_THREADS` environment variable, else PyTorch's choice.
    """
    import torch

    seed_everything(seed)
    threads = threads or int(os.environ.get("INFERBOOK_THREADS", "0")) or None
    if threads:
        torch.set_num_threads(threads)
    apply_plot_defaults()
    report = device_report()
    print(report)
    return report


# Drawn for the narrowest column the book is read in: a phone (390 CSS px window) shows the
# article 342 px wide, so a figure `COLUMN_WIDTH_IN` wide (560 CSS px at 100 dpi) is shrunk to
# 342/560 of its size there and `MIN_TEXT_PT` text still comes out at
# 11 x 100/72 x 342/560 = 9.3 CSS px, about the smallest a reader reads without zooming
# (tools/figure_text_px.py measures it on the built book; tests/test_book.py asserts it). At a
# 1280 px window the same figure is shown at its natural 560 px, its text at 15 px.
# A figure with several panels stacks them (rows, not columns) rather than growing wider.
COLUMN_WIDTH_IN = 5.6
MIN_TEXT_PT = 11
PLOT_RC = {
    "figure.figsize": (COLUMN_WIDTH_IN, 3.8),
    # 100 dpi here is 100 CSS px per inch on the page; the PNG itself is drawn at twice that
    # ("retina", 200 dpi) so it stays sharp on high-density screens and projectors.
    "figure.dpi": 100,
    "savefig.dpi": "figure",
    # White, not transparent: a transparent figure is unreadable in the theme's dark mode.
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": MIN_TEXT_PT,
    "axes.titlesize": 12,
    "figure.titlesize": 12,
    "axes.labelsize": MIN_TEXT_PT,
    "xtick.labelsize": MIN_TEXT_PT,
    "ytick.labelsize": MIN_TEXT_PT,
    "legend.fontsize": MIN_TEXT_PT,
    "legend.title_fontsize": MIN_TEXT_PT,
    "legend.framealpha": 0.85,
    "lines.linewidth": 1.8,
    "axes.grid": True,
    "grid.alpha": 0.3,
}

# Set (to anything non-empty) by tools/nbtools.py when it executes a notebook for commit and by
# the test suite's kernels (tests/conftest.py): every figure a cell shows is then checked.
CHECK_FIGURES_ENV = "INFERBOOK_CHECK_FIGURES"


class FigureTextTooSmall(ValueError):
    """A figure the book shows would be unreadable on a phone (see `figure_text_problems`)."""


def figure_text_problems(fig, min_pt: float = MIN_TEXT_PT,
                         max_width_in: float = COLUMN_WIDTH_IN) -> list[str]:
    """Return what makes `fig` unreadable in the book's narrowest column (empty: nothing).

    Two rules, from the arithmetic above `COLUMN_WIDTH_IN`: the figure is at most
    `max_width_in` wide, and no visible text in it (titles, labels, ticks, legends,
    annotations) is set below `min_pt` points.
    """
    from matplotlib.text import Text

    problems = []
    width = float(fig.get_size_inches()[0])
    if width > max_width_in + 1e-6:
        problems.append(f"the figure is {width:g} in wide (at most {max_width_in:g}: draw it for "
                        "the column, stacking panels in rows)")
    small: dict[float, list[str]] = {}
    for text in fig.findobj(Text):
        words = text.get_text().strip()
        if words and text.get_visible() and text.get_fontsize() < min_pt - 1e-9:
            small.setdefault(round(float(text.get_fontsize()), 1), []).append(words)
    for size, words in sorted(small.items()):
        shown = ", ".join(repr(w[:24]) for w in words[:3]) + (" …" if len(words) > 3 else "")
        problems.append(f"{len(words)} text(s) at {size:g} pt (at least {min_pt:g}): {shown}")
    return problems


def legend_below(fig, ax, ncol: int = 1, frameon: bool = False) -> None:
    """Put `ax`'s legend under the figure, clear of every axes (a constrained-layout figure):
    on a column 5.6 in wide a legend inside the axes sits on the data."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=frameon)


def plain_log_ticks(axis) -> None:
    """Label a log `axis` with plain numbers (1,000 and 0.01, not 10³ or 10⁻²): a power's
    superscript is set smaller than `MIN_TEXT_PT`."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return f"{x:,.0f}" if x >= 1 else f"{x:g}"

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(minor_thresholds=(2, 0.5)))


def _check_figures_when_drawn() -> None:
    """In check mode, make every figure drawn for display raise `FigureTextTooSmall` when it
    breaks `figure_text_problems`' rules (the error shows in the cell's output, so nbval and
    the committed-notebook tests catch it)."""
    from matplotlib.backend_bases import FigureCanvasBase

    if getattr(FigureCanvasBase.print_figure, "_inferbook_checked", False):
        return
    original = FigureCanvasBase.print_figure

    def print_figure(self, *args, **kwargs):
        problems = figure_text_problems(self.figure) if os.environ.get(CHECK_FIGURES_ENV) else []
        if problems:
            raise FigureTextTooSmall("figure not drawn for the book's column: "
                                     + "; ".join(problems))
        return original(self, *args, **kwargs)

    print_figure._inferbook_checked = True
    FigureCanvasBase.print_figure = print_figure


def apply_plot_defaults() -> None:
    """Set the book's matplotlib defaults and, inside IPython, high-resolution PNG output.

    The inline backend then emits PNGs at twice `figure.dpi` with their display size in the
    output's metadata, so the rendered book shows each figure at its intended size, sharp.
    With `INFERBOOK_CHECK_FIGURES` set, every figure drawn is checked (`figure_text_problems`).
    """
    import matplotlib

    matplotlib.rcParams.update(PLOT_RC)
    if os.environ.get(CHECK_FIGURES_ENV):
        _check_figures_when_drawn()
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    # Import pyplot first: activating the inline backend resets the figure formats.
    import matplotlib.pyplot  # noqa: F401

    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    set_matplotlib_formats("retina")


def repo_root(start: str | os.PathLike | None = None) -> Path:
    """Return the book's repository root: the nearest folder above `start` holding `_config.yml`.

    Notebooks run from `notebooks/` (locally, in CI, and on Colab after the setup cell), so
    committed artifacts such as `outputs/benchmarks/*.json` are found without absolute paths.
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "code" / "inferbook").is_dir():
            return folder
    raise FileNotFoundError(
        f"no book repository above {here}: run the notebook from the repository's notebooks/ "
        "folder (on Colab, run the setup cell first; it clones the repository)"
    )


def _is_figure(value) -> bool:
    """Return True for a matplotlib figure (without importing matplotlib if it is not loaded)."""
    import sys

    figure = getattr(sys.modules.get("matplotlib.figure"), "Figure", None)
    return figure is not None and isinstance(value, figure)


def glue(name: str, value, display: bool = False) -> None:
    """Store `value` under `name` for the book's `{glue:text}` / `{glue:figure}` roles.

    With myst_nb absent (Colab, a plain Jupyter session) nothing is stored. A figure is then
    shown where it is glued, since no `{glue:figure}` will ever show it (on Colab the reader
    sees the notebook, not the book); other values only if `display` is true, as myst_nb would.
    """
    if isinstance(value, np.generic):  # np.float64(1.5) would be stored as its repr, which
        value = value.item()           # {glue:text}`x:.1f` cannot format: store 1.5
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display or _is_figure(value):
            from IPython.display import display as show

            show(value)
        return
    myst_glue(name, value, display=display)


def claim(holds: bool, sentence: str) -> None:
    """Assert that a sentence of the chapter's prose is true of the numbers it glues.

    A chapter that writes "X is less than Y" glues X and Y *and* calls
    `claim(x < y, "X is less than Y")` in the same cell, so the build fails the day the words
    stop being true (new presets, new measurements), instead of printing a false sentence.
    """
    if not holds:
        raise AssertionError(f"the prose claims something the numbers no longer support: {sentence}")


_NUMBER = None


def _is_number_text(text: str) -> bool:
    """Return True for a cell that reads as a number: "1,024", "3.5 GB", "12 %", "2.0×"."""
    import re

    global _NUMBER
    if _NUMBER is None:  # the rule the book's CSS/JS use to right-align table cells
        _NUMBER = re.compile(
            r"^[~≈<>≤≥±+\-−]?\s*[$]?\d[\d,_ ]*(\.\d+)?(e[+-]?\d+)?\s*[%×xA-Za-zµ/]{0,12}$"
        )
    return bool(_NUMBER.match(text.strip()))


def html_table(header, rows, caption: str | None = None):
    """Return an HTML table (an IPython `HTML` object) that reads well in the book and in Jupyter.

    Cells are formatted with `str`; cells that read as numbers ("1,024", "3.5 GB", "2.0×") are
    right-aligned, text is left-aligned, and a column's header follows its cells. Every row
    must have as many cells as `header`.
    """
    import html as _html

    from IPython.display import HTML

    header = [str(h) for h in header]
    rows = [[str(c) for c in row] for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"html_table: row {i} has {len(row)} cells, the header has {len(header)}"
            )
    numeric = [
        bool(rows) and sum(_is_number_text(r[j]) for r in rows) * 2 > len(rows)
        for j in range(len(header))
    ]

    def cell(tag, text, right):
        align = "right" if right else "left"
        cls = "ib-num" if right else "ib-text"
        return f'<{tag} class="{cls}" style="text-align:{align}">{_html.escape(text)}</{tag}>'

    head = "".join(cell("th", h, numeric[j]) for j, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(cell("td", c, _is_number_text(c)) for c in row) + "</tr>"
        for row in rows
    )
    cap = f"<caption>{_html.escape(caption)}</caption>" if caption else ""
    return HTML(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
