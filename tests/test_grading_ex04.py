"""Exercise 4.1 graded the way a learner grades it: the kernel cases of tests/grading_cases_ex04.py.

One run of the documented command grades the blank exercise and the correct alternatives (each a
kernel written differently from the solution); a second grades every wrong kernel, each notebook
stopping at its first failed cell. Each wrong kernel must fail first at its named check. The
checks draw fresh random inputs at every grading, so these tests also exercise that the verdicts
do not depend on the values drawn. (`inferbook.kernel_checks` alone: tests/test_kernel_checks.py.)
"""

from __future__ import annotations

import functools

import pytest

from grading_cases_ex04 import ALTERNATIVES, BOUNDARIES, E4, WRONG
from grading_helpers import grade_with_pytest, variant

import grading_cases  # merges tests/grading_cases_ex*.py into its tables

# tests/test_grading.py grades every row of grading_cases' tables with the same command and the same
# assertions; once it holds these rows, grading them here again would only double the time.
MERGED = any(w[0] == E4 for w in grading_cases.WRONG)
graded_here = pytest.mark.skipif(MERGED, reason="graded by tests/test_grading.py (merged case table)")


@functools.lru_cache(maxsize=None)
def graded(tmp_root: str):
    """{case id: Report} for the blank exercise, the alternatives and the wrong kernels."""
    from pathlib import Path

    root = Path(tmp_root)
    cases = {"blank": variant(E4, root / "blank", answers="blank")}
    for i, (_, _, answers) in enumerate(ALTERNATIVES):
        cases[f"alternative-{i}"] = variant(E4, root / f"alt{i}", answers, stale_outputs=(i == 0))
    reports, _ = grade_with_pytest(list(cases.values()), timeout=900)
    result = dict(zip(cases, reports))
    wrong = {f"wrong-{i}": variant(E4, root / f"wrong{i}", {answer: source})
             for i, (_, answer, source, _) in enumerate(WRONG)}
    reports, _ = grade_with_pytest(list(wrong.values()), stop_per_notebook=True, timeout=1200)
    result.update(zip(wrong, reports))
    return result


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("grading_ex04"))


def test_the_case_table_is_complete():
    assert len(WRONG) >= 8 and len(ALTERNATIVES) >= 2
    assert all(w[0] == E4 for w in WRONG) and set(BOUNDARIES) == {E4}
    if MERGED:
        assert all(w in grading_cases.WRONG for w in WRONG)
        assert all(a in grading_cases.ALTERNATIVES for a in ALTERNATIVES)


@graded_here
@pytest.mark.parametrize("case", range(len(ALTERNATIVES)), ids=[a[1] for a in ALTERNATIVES])
def test_correct_kernels_written_differently_pass(case, tmp_root):
    report = graded(tmp_root)[f"alternative-{case}"]
    assert report.passed, report.text


@graded_here
def test_blank_exercise_fails_by_name(tmp_root):
    report = graded(tmp_root)["blank"]
    messages = [m for _, _, m in report.parts]
    assert [s for _, s, _ in report.parts] == ["FAIL", "FAIL"], report.text
    assert messages[0].startswith("CHECK FAILED [Part 1/answer written]: attend_q_tile is not written yet")
    assert "fix Part 1 first" in messages[1]


@graded_here
@pytest.mark.parametrize("case", range(len(WRONG)), ids=[w[3] for w in WRONG])
def test_wrong_kernel_fails_first_at_the_named_check(case, tmp_root):
    expected = WRONG[case][3]
    report = graded(tmp_root)[f"wrong-{case}"]
    assert not report.passed
    assert report.first_failure() == expected, report.text
    message = next(m for _, s, m in report.parts if s == "FAIL")
    assert message.startswith(f"CHECK FAILED [{expected}]: "), report.text
