"""Conventions every committed notebook follows (see DEVELOPERS.md)."""

import json
import re
from pathlib import Path

import pytest

from nbtools import setup_cell_source
from paths import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))
ALL = CHAPTERS + SOLUTIONS + EXERCISES
ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/(home|Users|root|tmp|opt|work|mnt|srv)/[\w.-]+")


def code_cells(path):
    nb = json.loads(path.read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"], nb


def rel(path):
    return str(path.relative_to(ROOT))


def test_there_are_notebooks():
    assert CHAPTERS and SOLUTIONS and EXERCISES
    assert len(SOLUTIONS) == len(EXERCISES)
    assert {p.name for p in SOLUTIONS} == {p.name for p in EXERCISES}


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_committed_executed(path):
    # nbval does not compare a cell whose execution_count is null: an unexecuted notebook passes trivially.
    cells, _ = code_cells(path)
    unexecuted = [i for i, c in enumerate(cells) if "".join(c["source"]).strip() and c["execution_count"] is None]
    assert not unexecuted, f"{rel(path)}: code cells {unexecuted} were never executed; run tools/nbtools.py execute"
    counts = [c["execution_count"] for c in cells if c["execution_count"] is not None]
    assert counts == list(range(1, len(counts) + 1)), f"{rel(path)} was not executed top to bottom in one run"


@pytest.mark.parametrize("path", EXERCISES, ids=rel)
def test_exercises_are_handed_out_blank(path):
    cells, nb = code_cells(path)
    assert all(not c["outputs"] and c["execution_count"] is None for c in cells), f"{rel(path)}: strip it"
    answers = [c for c in nb["cells"] if "answer" in c.get("metadata", {}).get("tags", [])]
    assert answers and not any("answer" in c["metadata"] for c in answers)


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_setup_cell_and_device_report(path):
    cells, _ = code_cells(path)
    assert "".join(cells[0]["source"]) == setup_cell_source(), (
        f"{rel(path)}: the first cell must be the canonical setup cell (tools/nbtools.py setup-cell)")
    assert cells[0].get("metadata", {}).get("tags") == ["remove-cell"], (
        f"{rel(path)}: the Colab setup cell is left out of the rendered book (tag remove-cell)")
    second = "".join(cells[1]["source"])
    tags = cells[1].get("metadata", {}).get("tags", [])
    assert "nbval-ignore-output" in tags and "setup(seed=" in second, (
        f"{rel(path)}: the second cell must report the device and seed (inferbook.notebook.setup)"
        " and carry the tag nbval-ignore-output")


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_no_test_markers_in_visible_source(path):
    # Test markers are cell tags, not the first line a reader sees.
    cells, _ = code_cells(path)
    marked = [i for i, c in enumerate(cells) if "# NBVAL_" in "".join(c["source"])]
    assert not marked, f"{rel(path)}: code cells {marked} carry '# NBVAL_' comments; use cell tags"


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_no_absolute_paths(path):
    text = path.read_text()
    hits = sorted(set(m.group(0) for m in ABSOLUTE_PATH.finditer(text)))
    assert not hits, f"{rel(path)} contains machine-specific paths: {hits}"


def test_every_notebook_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    missing = [rel(p) for p in ALL if rel(p).removesuffix(".ipynb") not in toc]
    assert not missing, f"not in _toc.yml: {missing}"


# ----------------------------------------------------------------------------------------------
# One story for the reader: one grading command, one way to open the notebooks locally.

GRADE = "make grade NB=notebooks/exercises/{}.ipynb"
# what a reader must never be told (the old ways): raw pytest grading, a hand-installed JupyterLab
OTHER_STORIES = {
    r"pytest\s+(-p\s+inferbook\.grading|--nbval)": "grade with `make grade NB=...` (or `grade()` on Colab)",
    r"pip install jupyterlab|(?<!make )(\.venv/bin/)?jupyter[ -]lab(?! from)": "open notebooks with `make lab`",
}
BOOK_PAGES = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]


def _markdown(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text()
    nb = json.loads(path.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", ALL + BOOK_PAGES, ids=rel)
def test_one_grading_and_lab_story(path):
    text = _markdown(path)
    problems = [f"{rel(path)} says {m.group(0)!r}: {fix}"
                for pattern, fix in OTHER_STORIES.items() for m in re.finditer(pattern, text)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS + EXERCISES + SOLUTIONS, ids=rel)
def test_every_exercise_link_says_how_to_grade(path):
    """A page that hands out an exercise says how to grade it, the same way everywhere."""
    text = _markdown(path)
    if path in EXERCISES or path in SOLUTIONS:
        named = {path.stem}
    else:
        named = set(re.findall(r"exercises/(ex\w+)\.ipynb", text))
    for name in sorted(named):
        assert GRADE.format(name) in text and "grade()" in text, (
            f"{rel(path)}: say how to grade {name}: `{GRADE.format(name)}` from the repository "
            "root, or on Colab its last cell, `grade()`")


def test_book_pages_tell_the_same_story():
    for path in [ROOT / "README.md", ROOT / "book" / "how_to_use.md", ROOT / "book" / "intro.md"]:
        text = path.read_text()
        assert "make grade NB=notebooks/exercises/" in text and "grade()" in text, rel(path)
    assert "make lab" in (ROOT / "book" / "how_to_use.md").read_text()
    assert "make lab" in (ROOT / "README.md").read_text()
    # the badge's hint (book/_ext) says the same as how-to
    assert "<code>make lab</code>" in (ROOT / "book" / "_ext" / "inferbook_sphinx.py").read_text()
