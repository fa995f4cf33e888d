"""`inferbook.grading.grade()` on Colab grades the notebook as it is in the tab.

Colab answers `google.colab._message.blocking_request("get_ipynb")` with the live notebook's JSON;
the fake in tests/fake_colab returns the file named by FAKE_COLAB_IPYNB (the "tab"). grade() runs
the same grader as the local command (the book's checks, in a separate process), so its report —
which parts pass, the first failed check, the notes — must equal `pytest -p inferbook.grading
--nbval-lax` on the same notebook, tampered checks, %%time and SyntaxErrors included.
"""

from __future__ import annotations

import json
import sys

import pytest

from grading_cases import ALTERNATIVES, NOTEBOOK_CASES, WRONG
from grading_helpers import EXERCISES, ROOT, grade_with_pytest, variant

from inferbook import grading, grading_plan


@pytest.fixture
def colab(monkeypatch):
    """A Colab-like process: google.colab importable and imported; the clone is this repository."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fake_colab"))
    monkeypatch.setenv("INFERBOOK_CLONE_DIR", str(ROOT))
    import google.colab  # noqa: F401  (Colab imports it at kernel start)

    yield monkeypatch
    for name in [m for m in sys.modules if m == "google" or m.startswith("google.")]:
        del sys.modules[name]


def _in_tab(monkeypatch, path):
    monkeypatch.setenv("FAKE_COLAB_IPYNB", str(path))


def _verdict(report):
    """{part title: status} and the first failed check, from either kind of report."""
    if isinstance(report, grading_plan.GradeReport):
        parts = [(p.title, p.status, p.message) for p in report.parts]
    else:
        parts = [(t, s.lower(), m) for t, s, m in report.parts]
    first = next((m for _, s, m in parts if s == "fail"), None)
    return {t: s for t, s, _ in parts}, first


def test_grades_the_live_notebook_not_the_saved_file(colab, tmp_path, capsys):
    # The tab holds the solution's answers; the file on disk is the blank exercise.
    tab = variant("ex05b_paged_attention", tmp_path / "tab")
    _in_tab(colab, tab)
    report = grading.grade()
    assert report is not None and report.passed, str(report)
    out = capsys.readouterr().out
    assert "Grading this notebook" in out and "5 of 5 parts pass" in out
    nb = json.loads((EXERCISES / "ex05b_paged_attention.ipynb").read_text())
    assert "NotImplementedError" in json.dumps(nb), "the saved exercise is still blank"


def test_same_verdict_as_the_local_command(colab, tmp_path):
    wrong = next(w for w in WRONG if w[3] == "Part 3/no copy of an unshared block")
    alt = next(a for a in ALTERNATIVES if a[0] == "ex03_online_softmax")
    cases = [
        variant("ex05b_paged_attention", tmp_path / "wrong", {wrong[1]: wrong[2]}),
        variant("ex01_naive_vs_cached", tmp_path / "blank", answers="blank"),
        variant("ex03_online_softmax", tmp_path / "alt", alt[2], stale_outputs=True),
    ]
    local, _ = grade_with_pytest(cases)
    for path, expected in zip(cases, local):
        _in_tab(colab, path)
        got = grading.grade(quiet=True)
        assert _verdict(got) == _verdict(expected), f"{path}:\n{got}\n---\n{expected.text}"
    assert _verdict(local[0])[1].startswith("CHECK FAILED [Part 3/no copy of an unshared block]")


def test_the_grade_cell_is_skipped_not_recursed(colab, tmp_path):
    tab = variant("ex02_kv_sizing", tmp_path / "tab")
    nb = json.loads(tab.read_text())
    assert "grade()" in "".join(nb["cells"][-1]["source"])
    _in_tab(colab, tab)
    report = grading.grade(quiet=True)
    assert report.passed and [p.title for p in report.parts][-1].startswith("Part 3"), str(report)


def test_outside_colab_it_prints_the_command(monkeypatch, capsys):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert grading.grade() is None
    assert "make grade NB=notebooks/exercises/" in capsys.readouterr().out


def test_part_state_of_the_live_kernel_is_restored(colab, tmp_path):
    grading.reset()
    with grading.part(1):
        pass
    _in_tab(colab, variant("ex01_naive_vs_cached", tmp_path / "blank", answers="blank"))
    grading.grade(quiet=True)
    with grading.part(2, needs=[1]):     # Part 1 passed in this kernel before grading
        pass
    grading.reset()


def test_a_tab_without_cell_tags_still_skips_the_grade_cell(colab, tmp_path):
    tab = variant("ex02_kv_sizing", tmp_path / "tab")
    nb = json.loads(tab.read_text())
    for cell in nb["cells"]:
        cell["metadata"] = {}
    tab.write_text(json.dumps(nb))
    _in_tab(colab, tab)
    report = grading.grade(quiet=True)
    assert report.passed and len(report.parts) == 3, str(report)


def test_same_report_for_tampered_notebooks(colab, tmp_path):
    labels = ["check helpers redefined in an added cell", "%%time on an answer cell", "SyntaxError in an answer",
              "package-calling answer", "raises-exception tag and NBVAL_SKIP on a check", "deleted check"]
    cases = [next(c for c in NOTEBOOK_CASES if c[1] == label) for label in labels]
    paths = [variant(c[0], tmp_path / f"case{i}", edit=c[2]) for i, c in enumerate(cases)]
    local, _ = grade_with_pytest(paths)
    for path, case, expected in zip(paths, cases, local):
        _in_tab(colab, path)
        got = grading.grade(quiet=True)
        assert _verdict(got) == _verdict(expected), f"{case[1]}:\n{got}\n---\n{expected.text}"
        assert [f"  Note: {n}" for n in got.notes] == [ln for ln in expected.text.splitlines() if "Note:" in ln]


def test_a_tab_without_cell_ids_is_graded_by_position(colab, tmp_path):
    tab = variant("ex03_online_softmax", tmp_path / "tab")
    nb = json.loads(tab.read_text())
    for cell in nb["cells"]:
        cell.pop("id", None)
        cell["metadata"] = {}
    tab.write_text(json.dumps(nb))
    _in_tab(colab, tab)
    report = grading.grade(quiet=True)
    assert report.passed, str(report)
