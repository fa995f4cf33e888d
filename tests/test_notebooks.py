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


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_no_error_in_committed_outputs(path):
    """A committed page shows no traceback: in particular no `FigureTextTooSmall`, which
    tools/nbtools.py's kernels raise when a chapter draws a figure a phone cannot read."""
    cells, _ = code_cells(path)
    errors = [(i, o.get("ename"), str(o.get("evalue", ""))[:160]) for i, c in enumerate(cells)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{rel(path)}: error outputs (cell, name, message): {errors}"


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
    if path in SOLUTIONS:   # a solution page links to its exercise, which says how to grade it
        title = "".join(json.loads(path.read_text())["cells"][0]["source"])
        assert f"](../exercises/{path.stem}.ipynb)" in title, (
            f"{rel(path)}: the first cell must link to its exercise, ../exercises/{path.stem}.ipynb")
        return
    if path in EXERCISES:
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


# ----------------------------------------------------------------------------------------------
# Solution pages answer; exercises state. The book renders a solution without its cells tagged
# remove-cell, so the statement (cells tagged exercise-only, see tools/make_exercises.py) and the
# grading instructions stay on the exercise's page.

def _shown_markdown(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
            and "remove-cell" not in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("path", SOLUTIONS, ids=rel)
def test_solution_page_does_not_restate_its_exercise(path):
    solution = json.loads(path.read_text())
    exercise = json.loads((ROOT / "notebooks" / "exercises" / path.name).read_text())
    shown = _shown_markdown(solution)
    told = [s for s in shown if re.search(r"Fill in the cells?|How to grade yourself", s)]
    assert not told, f"{rel(path)}: the solution page tells the reader to fill in answers: {told[0][:80]!r}"
    statement = [p for s in _shown_markdown(exercise) for p in re.split(r"\n\s*\n", s)
                 if p.strip() and not p.lstrip().startswith("#")]
    words = sum(len(s.split()) for s in statement)
    page = "\n\n".join(shown)
    repeated = [p for p in statement if p.strip() in page]
    n = sum(len(s.split()) for s in repeated)
    # What may repeat: the closing remark and the line above `grade()`; never a statement cell.
    assert words and n <= 0.15 * words, (
        f"{rel(path)} repeats {n} of its exercise's {words} statement words word for word "
        f"(tag the statement cells exercise-only and remove-cell): {[s[:50] for s in repeated]}")
    tasks = ["".join(c["source"]).strip() for c in solution["cells"]
             if "exercise-only" in c.get("metadata", {}).get("tags", [])]
    assert not [t for t in tasks if t in page], f"{rel(path)}: a statement cell is shown"
    parts = [s for s in shown if s.startswith("## Part")]
    assert parts and all("\n" not in s.strip() for s in parts), (
        f"{rel(path)}: each part's heading stands alone; its statement is an exercise-only cell")


@pytest.mark.parametrize("path", EXERCISES, ids=rel)
def test_exercise_keeps_its_statement_and_says_how_to_grade(path):
    nb = json.loads(path.read_text())
    text = _markdown(path)
    answers = sum("answer" in c.get("metadata", {}).get("tags", []) for c in nb["cells"])
    cells = "cell" if answers == 1 else "cells"
    assert text.count("**How to grade yourself.**") == 1, f"{rel(path)}: one grading paragraph"
    assert f"Fill in the {cells} marked *Your answer*" in text, (
        f"{rel(path)} has {answers} answer {cells}: say 'Fill in the {cells} marked *Your answer*'")
    assert not any(t in c.get("metadata", {}).get("tags", []) for c in nb["cells"]
                   for t in ("exercise-only", "solution-only")), f"{rel(path)}: generator tags left in"
    solution = json.loads((ROOT / "notebooks" / "solutions" / path.name).read_text())
    statement = ["".join(c["source"]) for c in solution["cells"]
                 if "exercise-only" in c.get("metadata", {}).get("tags", [])]
    assert statement and all(s in text for s in statement), f"{rel(path)}: a statement cell is missing"


def test_generator_refuses_a_statement_the_solution_page_would_show():
    import make_exercises

    nb = json.loads((ROOT / "notebooks" / "solutions" / "ex01_naive_vs_cached.ipynb").read_text())
    before = json.dumps(nb)
    cell = next(c for c in nb["cells"] if "exercise-only" in c.get("metadata", {}).get("tags", []))
    cell["metadata"]["tags"] = ["exercise-only"]
    with pytest.raises(ValueError, match=r"ex01.*exercise-only.*remove-cell"):
        make_exercises.make_exercise(nb, "ex01")
    cell["metadata"]["tags"] = ["exercise-only", "remove-cell"]
    exercise = make_exercises.make_exercise(nb, "ex01")
    assert json.dumps(nb) == before, "generating an exercise changes nothing in the solution"
    first = "".join(exercise["cells"][0]["source"])
    assert first.startswith("# Exercise 1.1 — ") and "Worked answers" not in first, first[:200]
    assert first.index("Confirm that") < first.index("**How to grade yourself.**"), first[:200]


# ----------------------------------------------------------------------------------------------
# Every chapter opens the same way: the title, the question it answers (no repository files or
# paths in it), then what the reader can do after it, as 3-5 bullets.

REPO_PATH = re.compile(r"[\w-]+\.(py|ipynb|json|md|yml|yaml|toml|cfg|txt|sh)\b"
                       r"|\b(notebooks|outputs|tests|tools|code|book)/|\binferbook\b|`make \w+")


def opening_problems(text: str) -> list[str]:
    """What is wrong with a chapter's first markdown cell, `text` (empty: nothing)."""
    blocks = [b.strip("\n") for b in re.split(r"\n\s*\n", text.strip())]
    if len(blocks) < 4:
        return [f"expected a title, the question, 'After this chapter you can' and its bullets; "
                f"got {len(blocks)} paragraph(s)"]
    title, question, can, bullets = blocks[:4]
    problems = []
    if not re.fullmatch(r"# \S.*", title):
        problems.append(f"the first line must be the title alone ('# ...'), not {title[:60]!r}")
    if not question.startswith("**The question.** "):
        problems.append(f"the second paragraph must start '**The question.** ', not {question[:60]!r}")
    named = sorted({m.group(0) for m in REPO_PATH.finditer(question)})
    if named:
        problems.append(f"the question names repository files or paths: {named}")
    if can != "**After this chapter you can**":
        problems.append(f"the third paragraph must be '**After this chapter you can**', not {can[:60]!r}")
    items = re.split(r"\n(?=\* )", bullets)
    if not bullets.startswith("* ") or not 3 <= len(items) <= 5:
        problems.append(f"3-5 bullet items ('* ...;') must follow, found {len(items) if bullets.startswith('* ') else 0}")
    elif not all(i.rstrip().endswith(";") for i in items[:-1]) or not items[-1].rstrip().endswith((";", ".")):
        problems.append("each bullet item ends with ';' (the last with ';' or '.')")
    return problems


def test_opening_check_catches_each_mistake():
    good = ("# Title\n\n**The question.** Why?\n\n**After this chapter you can**\n\n"
            "* do a;\n* do b;\n* do c.\n\nContext, `code/inferbook/x.py`.")
    assert opening_problems(good) == []
    bad = {
        "title": good.replace("# Title", "Title"),
        "second paragraph": good.replace("**The question.** Why?", "Why?"),
        "repository files": good.replace("Why?", "Why does `tools/x.py` exist?"),
        "third paragraph": good.replace("**After this chapter you can**", "**You will**"),
        "3-5 bullet": good.replace("* do c.", "").replace("* do b;\n", ""),
        "ends with": good.replace("do a;", "do a"),
    }
    for what, text in bad.items():
        assert any(what in p for p in opening_problems(text)), (what, opening_problems(text))


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("0?_*.ipynb")), ids=rel)
def test_chapter_opening(path):
    first = json.loads(path.read_text())["cells"][0]
    assert first["cell_type"] == "markdown", f"{rel(path)}: the first cell must be markdown"
    problems = opening_problems("".join(first["source"]))
    assert not problems, f"{rel(path)}: " + "; ".join(problems)


# ----------------------------------------------------------------------------------------------
# One calculator per idea: where a chapter has the static calculator ({kv-calculator},
# {roofline-knob}), its ipywidget copy is for Colab and Jupyter only (tag remove-cell), and so is
# any text about that widget.

@pytest.mark.parametrize("path", CHAPTERS, ids=rel)
def test_widget_copy_of_a_static_calculator_is_left_out_of_the_book(path):
    nb = json.loads(path.read_text())
    if not any(re.search(r"```\{(kv-calculator|roofline-knob)\}", "".join(c["source"]))
               for c in nb["cells"] if c["cell_type"] == "markdown"):
        pytest.skip("no static calculator in this chapter")
    shown = [c for c in nb["cells"] if "remove-cell" not in c.get("metadata", {}).get("tags", [])]
    widgets = [c["id"] for c in shown if c["cell_type"] == "code"
               and re.search(r"^\s*(import ipywidgets|from ipywidgets)", "".join(c["source"]), re.M)]
    assert not widgets, f"{rel(path)}: widget cells {widgets} shown beside the static calculator (tag remove-cell)"
    told = [c["id"] for c in shown if c["cell_type"] == "markdown"
            and re.search(r"\bthe widget\b|\bthis widget\b|needs a running kernel", "".join(c["source"]), re.I)]
    assert not told, f"{rel(path)}: markdown cells {told} describe a widget the book leaves out"
