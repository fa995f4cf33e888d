"""Grading a learner can trust: every exercise graded the way the learner grades it.

For each exercise one run of the documented command (`pytest -p inferbook.grading --nbval-lax ...`,
which `make grade` runs and which shares one grader with the Colab `grade()`) grades, side by side,
the notebook as handed out and the correct alternatives (one under stale saved outputs; the
solution's own answers are graded by nbval on notebooks/solutions in the full suite); a second run
grades every wrong answer of `grading_cases` (which also documents the boundary each check covers)
and every notebook-level case (tampered, deleted, reordered and weakened checks, redefined helpers,
tags on checks, package-calling answers, copied tables, %%time, errors in added cells, SyntaxErrors,
answers of the wrong type); a third, with a short time limit per cell, the endless loops.
"""

from __future__ import annotations

import functools
import json
import re
import sys

import pytest

from grading_cases import ALTERNATIVES, BOUNDARIES, NOTEBOOK_CASES, WRONG
from grading_helpers import (EXERCISES, GRADE_COMMAND, ROOT, SOLUTIONS, exercise_names, grade_with_pytest,
                             variant)

sys.path.insert(0, str(ROOT / "tools"))
import make_exercises  # noqa: E402

NAMES = exercise_names()


@functools.lru_cache(maxsize=None)
def graded(name: str, tmp_root: str):
    """Grade every variant of exercise `name` in one pytest process; {case id: Report}."""
    from pathlib import Path

    root = Path(tmp_root) / name
    # The solution's own answers are graded by nbval on notebooks/solutions (the full suite); here
    # the right answers are the alternatives, the first one under stale saved outputs.
    cases = {"blank": variant(name, root / "blank", answers="blank")}
    for i, (ex, label, answers) in enumerate(a for a in ALTERNATIVES if a[0] == name):
        cases[f"alternative-{i}"] = variant(name, root / f"alt{i}", answers, stale_outputs=(i == 0))
    reports, output = grade_with_pytest(list(cases.values()))
    result = dict(zip(cases, reports))
    # Wrong answers: each notebook stops at its first failed cell, as `-x` stops a lone notebook.
    wrong = {f"wrong-{i}": variant(name, root / f"wrong{i}", {answer: source})
             for i, (_, answer, source, _) in enumerate(w for w in WRONG if w[0] == name)}
    # Notebook-level cases (tampered checks, package calls, copied tables, ...), in the same run.
    timeouts = {}
    for i, (_, label, edit, _, _) in enumerate(c for c in NOTEBOOK_CASES if c[0] == name):
        (timeouts if label.startswith("timeout:") else wrong)[f"notebook-{i}"] = \
            variant(name, root / f"nb{i}", edit=edit)
    if wrong:
        reports, more = grade_with_pytest(list(wrong.values()))
        result.update(zip(wrong, reports))
        output += more
    if timeouts:
        reports, more = grade_with_pytest(list(timeouts.values()), cell_timeout=6)
        result.update(zip(timeouts, reports))
        output += more
    return result, output


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("grading"))


# --- the exercises are the solutions, blanked ------------------------------------------------------------
def test_every_exercise_has_a_solution():
    assert NAMES, "no exercise notebooks found"
    assert {p.stem for p in SOLUTIONS.glob("*.ipynb")} == set(NAMES)


def test_exercises_are_generated_from_solutions():
    stale = [p.name for p, text in make_exercises.expected_exercises().items()
             if not p.is_file() or p.read_text(encoding="utf-8") != text]
    assert not stale, f"run tools/make_exercises.py: {stale} differ from their solutions, blanked"


@pytest.mark.parametrize("name", NAMES)
def test_one_marker_per_answer_cell(name):
    for folder in (EXERCISES, SOLUTIONS):
        nb = json.loads((folder / f"{name}.ipynb").read_text())
        answers = [c for c in nb["cells"] if "answer" in c.get("metadata", {}).get("tags", [])]
        assert answers, f"{name}: no answer cell"
        assert all("answer" not in c["metadata"] for c in nb["cells"]), "the tag marks answers; no metadata key"
        assert all(c["cell_type"] == "code" and re.fullmatch(r"[a-z0-9_]+", c["id"]) for c in answers)


def test_blanking_keeps_signatures_and_docstrings():
    src = 'import math\n\n@dec\ndef f(a,\n      b):\n    """Doc."""\n    return a\n\nclass C:\n' \
          '    def __init__(self):  # given\n        self.x = 1\n\n    def g(self):\n        return 2\n\nx = 3\nprint(x)\n'
    assert make_exercises.blank_answer(src) == (
        'import math\n\n@dec\ndef f(a,\n      b):\n    """Doc."""\n    raise NotImplementedError("your answer here")\n\n'
        'class C:\n    def __init__(self):  # given\n        self.x = 1\n\n    def g(self):\n'
        '        raise NotImplementedError("your answer here")\nx = None')


# --- one command, documented identically ---------------------------------------------------------------
# Learners are told `make grade NB=...` (and `grade()` on Colab); the pytest line it runs keeps working.
def _command_lines(text: str, notebook: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() == f"make grade NB={notebook}"]


@pytest.mark.parametrize("doc", ["README.md", "book/how_to_use.md"])
def test_documents_give_the_grading_command(doc):
    text = (ROOT / doc).read_text()
    nb = "notebooks/exercises/ex01_naive_vs_cached.ipynb"
    assert _command_lines(text, nb), f"{doc} must show `make grade NB={nb}`"
    assert "grade()" in text


@pytest.mark.parametrize("name", NAMES)
def test_each_exercise_opens_with_the_grading_command(name):
    nb = json.loads((EXERCISES / f"{name}.ipynb").read_text())
    first = "".join(nb["cells"][0]["source"])
    assert first.startswith("# Exercise ")
    assert _command_lines(first, f"notebooks/exercises/{name}.ipynb")
    last = nb["cells"][-1]
    assert "grade()" in "".join(last["source"]) and "nbval-skip" in last["metadata"].get("tags", [])


def test_make_grade_runs_the_documented_command():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^grade:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "Makefile has no grade target"
    assert GRADE_COMMAND.replace(".venv/bin/pytest", "$(VENV)/bin/pytest") + " $(NB)" in recipe.group(1)


# --- graded both ways, wrong answers, alternatives ------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_right_answers_pass_despite_stale_outputs(name, tmp_root):
    report = graded(name, tmp_root)[0]["alternative-0"]
    assert report.passed, report.text
    assert not re.search(r"\bCell \d+", report.text), "parts are named as the notebook names them"
    titles = [t for t, _, _ in report.parts]
    nb = json.loads((EXERCISES / f"{name}.ipynb").read_text())
    headings = [m for c in nb["cells"] if c["cell_type"] == "markdown"
                for m in re.findall(r"^## (Part \d+.*)$", "".join(c["source"]), re.M)]
    assert titles == headings


@pytest.mark.parametrize("name", NAMES)
def test_blank_exercise_fails_every_part_by_name(name, tmp_root):
    report = graded(name, tmp_root)[0]["blank"]
    assert report.parts and all(status == "FAIL" for _, status, _ in report.parts), report.text
    for _, _, message in report.parts:
        assert message.startswith("CHECK FAILED [Part "), report.text
        assert "NameError" not in message and "Traceback" not in message
    later = [m for _, _, m in report.parts[1:]]
    assert all("not written yet" in m or "fix Part" in m for m in later), report.text


@pytest.mark.parametrize("case", range(len(ALTERNATIVES)), ids=[f"{a[0]}:{a[1]}" for a in ALTERNATIVES])
def test_correct_alternatives_pass(case, tmp_root):
    name = ALTERNATIVES[case][0]
    index = [i for i, a in enumerate(ALTERNATIVES) if a[0] == name].index(case)
    report = graded(name, tmp_root)[0][f"alternative-{index}"]
    assert report.passed, report.text


def test_at_least_two_alternatives_per_exercise():
    assert all(sum(a[0] == n for a in ALTERNATIVES) >= 2 for n in NAMES)
    assert set(BOUNDARIES) == set(NAMES)


@pytest.mark.parametrize("case", range(len(WRONG)), ids=[f"{w[0]}:{w[3]}" for w in WRONG])
def test_wrong_answer_fails_first_at_the_named_check(case, tmp_root):
    name, _, _, expected = WRONG[case]
    index = [i for i, w in enumerate(WRONG) if w[0] == name].index(case)
    report = graded(name, tmp_root)[0][f"wrong-{index}"]
    assert not report.passed
    # a row may name several checks when which one fails first depends on the hidden draw
    allowed = expected if isinstance(expected, tuple) else (expected,)
    assert report.first_failure() in allowed, report.text
    message = next(m for _, s, m in report.parts if s == "FAIL")
    assert message.startswith(f"CHECK FAILED [{report.first_failure()}]: "), report.text


def test_no_message_reveals_a_closed_form(tmp_root):
    texts = [r.text for name in NAMES for r in graded(name, tmp_root)[0].values()]
    for forbidden in ["(n+2)/3", "(n + 2) / 3", "n_k - n_q", "min(window", "min(w,", "ceil("]:
        assert not any(forbidden in t for t in texts), forbidden


def test_first_difference_is_shown(tmp_root):
    by_check = {w[3]: i for i, w in enumerate(WRONG)}
    report = graded("ex06_scheduler", tmp_root)[0]
    texts = "\n".join(r.text for r in report.values())
    assert "first difference at" in texts
    ex01 = "\n".join(r.text for r in graded("ex01_naive_vs_cached", tmp_root)[0].values())
    assert re.search(r"first difference at sequence 0, position \d+: expected \d+, got \d+", ex01), ex01
    assert by_check


@pytest.mark.parametrize("case", range(len(NOTEBOOK_CASES)), ids=[f"{c[0]}:{c[1]}" for c in NOTEBOOK_CASES])
def test_notebook_case(case, tmp_root):
    """Tampered checks, package calls, copied tables, %%time, timeouts, errors: graded as the table says."""
    name, label, _, expected, text = NOTEBOOK_CASES[case]
    index = [i for i, c in enumerate(NOTEBOOK_CASES) if c[0] == name].index(case)
    report = graded(name, tmp_root)[0][f"notebook-{index}"]
    if expected == "pass":
        assert report.passed, report.text
    else:
        assert not report.passed
        assert report.first_failure() == expected, report.text
        message = next(m for _, s, m in report.parts if s == "FAIL")
        assert message.startswith(f"CHECK FAILED [{expected}]: "), report.text
    assert text in report.text, report.text


def test_every_exercise_has_notebook_cases():
    """Each exercise is graded at least once with a package-calling, tampered or copied answer."""
    assert {c[0] for c in NOTEBOOK_CASES} >= {n for n in NAMES if n in BOUNDARIES and n.startswith(
        ("ex01", "ex02", "ex03", "ex05", "ex06", "ex07"))}


def test_check_cells_of_the_book_ship_with_the_package():
    from inferbook import grading_plan

    book = grading_plan.pristine_exercises()
    for name in NAMES:
        assert name in book, f"run tools/make_exercises.py {name}"
        nb = json.loads((EXERCISES / f"{name}.ipynb").read_text())
        assert [c["id"] for c in nb["cells"]] == [c["id"] for c in book[name]["cells"]]
        assert book[name]["timeout"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_answer_names_are_not_bound_by_the_books_cells(name):
    """The grader runs check cells with the names the book's cells bound (so a learner cannot
    redefine a check helper); a name an answer cell defines must therefore be the answer's alone."""
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    def bound(source):
        tree = ast.parse(TransformerManager().transform_cell(source))
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return names

    nb = json.loads((SOLUTIONS / f"{name}.ipynb").read_text())
    book, answers = set(), set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            is_answer = "answer" in cell.get("metadata", {}).get("tags", [])
            (answers if is_answer else book).update(bound("".join(cell["source"])))
    assert not book & answers, f"{name}: answer names also bound by the book's cells: {sorted(book & answers)}"
