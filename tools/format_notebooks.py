"""Format the code cells of the book's notebooks with ruff, to at most 88 columns.

    .venv/bin/python tools/format_notebooks.py              # chapters and solutions, in place
    .venv/bin/python tools/format_notebooks.py --check      # list what would change; exit 1 if any
    .venv/bin/python tools/format_notebooks.py notebooks/03_flash_attention_numpy.ipynb

Only the `source` of code cells changes (outputs, tags and metadata stay), so a notebook's
committed outputs remain valid and nbval still passes without re-executing. Cells holding
IPython magics or shell escapes (`%`, `!`) are left alone, and so is a cell ruff cannot parse
and the canonical Colab setup cell (`tools/nbtools.py setup-cell` owns its text).
Ruff does not split long strings or comments: the lines still over 88 columns are listed at the
end for a person to shorten (tests/test_layout.py fails on them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbtools import setup_cell_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LINE_LENGTH = 88
DEFAULT_GLOBS = ["notebooks/[0-9]*.ipynb", "notebooks/solutions/*.ipynb"]
RUFF = Path(sys.executable).parent / "ruff"


def format_source(source: str) -> str | None:
    """Return `source` formatted by ruff (at most LINE_LENGTH columns), or None if ruff cannot."""
    if any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
        return None
    proc = subprocess.run(
        [str(RUFF if RUFF.exists() else "ruff"), "format", "--line-length", str(LINE_LENGTH),
         "--config", "format.quote-style='preserve'", "--stdin-filename", "cell.py", "-"],
        input=source, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        return None
    # a cell has no trailing newline in the notebook's JSON
    return proc.stdout.rstrip("\n")


def long_lines(nb) -> list[tuple[int, int, str]]:
    """Return (cell index, line number, line) for every code line over LINE_LENGTH columns."""
    return [
        (i, n, line)
        for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
        for n, line in enumerate(cell.source.splitlines(), 1) if len(line) > LINE_LENGTH
    ]


def format_notebook(path: Path, check: bool = False) -> tuple[int, list[int]]:
    """Format `path`'s code cells; return (cells changed, cells skipped)."""
    nb = nbformat.read(path, as_version=4)
    changed, skipped = 0, []
    setup = setup_cell_source()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip() or cell.source == setup:
            continue
        new = format_source(cell.source)
        if new is None:
            skipped.append(i)
        elif new != cell.source:
            changed += 1
            cell.source = new
    if changed and not check:
        nbformat.write(nb, path)
    return changed, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any would")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(p for g in DEFAULT_GLOBS for p in ROOT.glob(g))
    would_change, remaining = 0, 0
    for path in paths:
        changed, skipped = format_notebook(path, check=args.check)
        would_change += changed
        verb = "would reformat" if args.check else "reformatted"
        note = f"; left alone (magics or not parseable): cells {skipped}" if skipped else ""
        print(f"{path}: {verb} {changed} cell(s){note}")
        for i, n, line in long_lines(nbformat.read(path, as_version=4)):
            remaining += 1
            print(f"  cell {i} line {n}: {len(line)} columns (string or comment?): {line.strip()[:70]}")
    print(f"{would_change} cell(s) {'to reformat' if args.check else 'reformatted'}; "
          f"{remaining} line(s) still over {LINE_LENGTH} columns")
    return 1 if args.check and (would_change or remaining) else 0


if __name__ == "__main__":
    sys.exit(main())
