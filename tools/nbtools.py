"""Notebook tools for authors: the canonical setup cell, creating and executing notebooks.

    python tools/nbtools.py setup-cell              # print the canonical first cell
    python tools/nbtools.py execute NB.ipynb [...]  # execute in place from NB's folder, keep outputs
    python tools/nbtools.py strip NB.ipynb [...]    # remove outputs (exercise notebooks)
    python tools/nbtools.py sync-setup [NB ...]     # rewrite the setup cell of every notebook (or of NB ...)
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def repository_url() -> str:
    """Return `repository.url` from `_config.yml`, the one place the URL is set."""
    text = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", text, flags=re.M)
    if not match:
        raise ValueError("_config.yml has no repository.url")
    return match.group(1)


# The marker the setup cell writes into the clone once `pip install` has succeeded: a clone
# whose install failed (no network, a broken index) is installed again on the next run.
INSTALLED_MARKER = ".inferbook-installed"


def setup_cell_source() -> str:
    """Return the source of the first code cell every notebook starts with.

    On Colab it clones the repository (skipped when the clone is there), installs the package
    (skipped only when a previous install succeeded: a marker file), and changes into
    notebooks/. A failed clone or install stops the run with one exception saying what to do
    (set INFERBOOK_REPO_URL for a fork, or upload the repository), never a CalledProcessError
    followed by a ModuleNotFoundError in every later cell. pip keeps what Colab already has
    (pyproject's ranges admit Colab's versions, so nothing is upgraded).
    """
    url = repository_url()
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return f'''# Colab set-up: clone the book, install its package (Colab's torch and widgets are
# kept), change into notebooks/. Elsewhere it does nothing (`make` installed it).
# INFERBOOK_REPO_URL / INFERBOOK_CLONE_DIR override where from and where to.
import importlib, os, subprocess, sys
if "google.colab" in sys.modules:
    url = os.environ.get(
        "INFERBOOK_REPO_URL", "{url}"
    )
    book = os.environ.get("INFERBOOK_CLONE_DIR", "/content/{name}")
    steps = []
    if not os.path.isfile(os.path.join(book, "pyproject.toml")):
        steps.append(["git", "clone", "--depth", "1", url, book])
    if not os.path.isfile(os.path.join(book, "{INSTALLED_MARKER}")):
        steps.append([sys.executable, "-m", "pip", "install", "-q", book])
    for cmd in steps:
        try:
            run = subprocess.run(cmd, capture_output=True, text=True)
            why = run.stderr.strip().splitlines() or [f"exit {{run.returncode}}"]
            why = why[-1] if run.returncode else None
        except OSError as err:
            why = str(err)
        if why:
            tool = "git clone" if cmd[0] == "git" else "pip install"
            raise RuntimeError(
                f"The book's set-up failed ({{tool}}: {{why}}). From a fork or a "
                "copy? Run os.environ['INFERBOOK_REPO_URL'] = 'https://github.com/"
                "<you>/<repository>' in a new cell, then this cell again. No "
                "network? Upload the repository (Files pane), unzip it to "
                f"{{book}}, and run this cell again. Later cells need this one."
            ) from None
    open(os.path.join(book, "{INSTALLED_MARKER}"), "w").close()
    importlib.invalidate_caches()
    os.chdir(book + "/notebooks")'''


def setup_cell() -> nbformat.NotebookNode:
    """Return the setup cell. It does nothing outside Colab, so the rendered book leaves it out
    (tag remove-cell); the chapter's one visible set-up cell is the next one."""
    cell = nbformat.v4.new_code_cell(setup_cell_source())
    cell.metadata["tags"] = ["remove-cell"]
    return cell


def new_notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """Return a notebook from (kind, source) pairs, kind 'md' or 'code': the title, the setup cell, the rest."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    if cells and cells[0][0] == "md" and cells[0][1].lstrip().startswith("# "):
        nb.cells.append(nbformat.v4.new_markdown_cell(cells[0][1].strip("\n")))  # the title comes first
        cells = cells[1:]
    nb.cells.append(setup_cell())
    for kind, source in cells:
        make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        nb.cells.append(make(source.strip("\n")))
    return nb


def execute(path: Path, timeout: int = 600) -> float:
    """Execute the notebook at `path` in place, from its own folder; return the seconds it took."""
    from nbclient import NotebookClient

    from inferbook.notebook import CHECK_FIGURES_ENV

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # a chapter's figures are checked for the phone column as they are drawn (its kernel
    # inherits the variable): a figure that breaks the rules leaves an error in the output
    os.environ[CHECK_FIGURES_ENV] = "1" if Path(path).resolve().parent == ROOT / "notebooks" else ""
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def strip(path: Path) -> None:
    """Remove outputs and execution counts (for exercise notebooks handed to learners)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)


def sync_setup(paths: list[Path] | None = None) -> list[Path]:
    """Rewrite the setup cell (the first code cell) of every notebook (or of `paths`); return
    the files changed.

    The cell has no output, so executed notebooks stay valid for nbval.
    """
    changed = []
    for path in paths or sorted((ROOT / "notebooks").rglob("*.ipynb")):
        path = Path(path).resolve()
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code")
        fresh = setup_cell()
        if cell.source != fresh.source or cell.metadata.get("tags") != fresh.metadata["tags"]:
            cell.source = fresh.source
            cell.metadata["tags"] = fresh.metadata["tags"]
            nbformat.write(nb, path)
            changed.append(path)
    return changed


if __name__ == "__main__":
    command, *paths = sys.argv[1:] or ["help"]
    if command == "setup-cell":
        print(setup_cell_source())
    elif command == "execute":
        for p in paths:
            print(f"{p}: executed in {execute(Path(p)):.1f} s")
    elif command == "sync-setup":
        for p in sync_setup([Path(p) for p in paths] or None):
            print(f"rewrote the setup cell of {p.relative_to(ROOT)}")
    elif command == "strip":
        for p in paths:
            strip(Path(p))
    else:
        print(__doc__)
