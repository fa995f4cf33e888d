"""Every exercise is graded in both directions (wrong answers are tested per exercise, test_grading_exNN).

The solution's answers pass `pytest --nbval`; the notebook as handed out fails.
"""

import pytest

from grading_helpers import SOLUTIONS, exercise_names, run_exercise


def test_every_exercise_has_a_solution():
    names = exercise_names()
    assert names, "no exercise notebooks found"
    missing = [n for n in names if not (SOLUTIONS / f"{n}.ipynb").is_file()]
    assert not missing, f"exercises without a solution notebook: {missing}"


@pytest.mark.parametrize("name", exercise_names())
def test_solution_answers_pass(name, tmp_path):
    run = run_exercise(name, tmp_path)
    assert run.passed, run.output[-3000:]


@pytest.mark.parametrize("name", exercise_names())
def test_untouched_exercise_fails(name, tmp_path):
    run = run_exercise(name, tmp_path, answers="blank")
    assert not run.passed, f"{name} passes although no answer was written"
    assert "NotImplementedError" in run.output or run.check_failures(), run.output[-3000:]
