"""The checks and parts of inferbook.grading, and the texts a learner reads when they fail."""

import linecache

import numpy as np
import pytest
import torch

from inferbook import grading, grading_plan
from inferbook.grading import ExerciseCheckFailed, check, check_allclose, check_close, check_equal, part


@pytest.fixture(autouse=True)
def fresh():
    grading.reset()
    yield
    grading.reset()


def failure(fn, *args, **kwargs) -> str:
    with pytest.raises(ExerciseCheckFailed) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_equal_accepts_the_same_value_written_differently():
    check_equal("float vs int", 28.0, 28)
    check_equal("tuple vs list", (1, 2), [1, 2])
    check_equal("tensor vs list", torch.tensor([[1, 2]]), [[1, 2]])
    check_equal("numpy ints", np.array([3, 4]), [3, 4])
    check_equal("dicts", {"a": np.float64(0.5)}, {"a": 0.5})


def test_equal_shows_the_first_difference():
    msg = failure(check_equal, "tokens", [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 9, 6]], index=("sequence", "position"))
    assert msg == "CHECK FAILED [tokens]: first difference at sequence 1, position 1: expected 9, got 5."
    msg = failure(check_equal, "steps", ["a", "b"], ["a", "b", "c"], index="step")
    assert "at step 2: expected 'c', got (nothing) (3 expected, 2 returned)" in msg
    assert failure(check_equal, "n", 0, 1) == "CHECK FAILED [n]: expected 1, got 0."
    assert "no answer yet" in failure(check_equal, "n", None, 1)
    assert "expected True or False (a bool), got an int (1)" in failure(check_equal, "bool", 1, True)


def test_allclose_and_close():
    check_allclose("arrays", np.ones((2, 2)), np.ones((2, 2)) + 1e-12)
    msg = failure(check_allclose, "out", np.array([[1.0, np.nan]]), np.array([[1.0, 2.0]]), index=("row", "column"))
    assert msg == "CHECK FAILED [out]: first difference at row 0, column 1: expected 2, got nan."
    assert "expected shape (2,)" in failure(check_allclose, "shape", [1.0], [1.0, 2.0])
    check_close("ratio", 34, 34.0)
    assert "finite number" in failure(check_close, "ratio", float("inf"), 1.0)
    assert failure(check, "c", False, "something") == "CHECK FAILED [c]: expected something"


def test_part_names_checks_and_turns_errors_into_named_failures():
    answer_cell = {}   # the learner's function, defined in another notebook cell (IPython keeps its source)
    source = "def student():\n    raise NotImplementedError('your answer here')\n\ndef buggy(xs):\n    return xs[3]\n"
    linecache.cache["<cell 3>"] = (len(source), None, source.splitlines(True), "<cell 3>")
    exec(compile(source, "<cell 3>", "exec"), answer_cell)
    student, buggy = answer_cell["student"], answer_cell["buggy"]

    with pytest.raises(ExerciseCheckFailed, match=r"^CHECK FAILED \[Part 1/answer written\]: student is not written yet"):
        with part(1):
            student()
    with pytest.raises(ExerciseCheckFailed, match=r"^CHECK FAILED \[Part 2/x\]: expected 1, got 2"):
        with part(2):
            check_equal("x", 2, 1)
    with pytest.raises(ExerciseCheckFailed, match=r"^CHECK FAILED \[Part 3/your code runs\]: buggy raised "
                                                  r"IndexError: list index out of range \(in buggy, line 5"):
        with part(3):
            buggy([1, 2])
    with pytest.raises(ExerciseCheckFailed, match=r"^CHECK FAILED \[Part 4/needs Part 1 and Part 3\]: fix Part 1 and Part 3 first"):
        with part(4, needs=[1, 3]):
            pass
    with part(5):
        check("fine", True, "")
    with part(6, needs=5):
        pass


def test_report_names_parts_from_headings():
    cells = [
        {"cell_type": "markdown", "source": "# Exercise"},
        {"cell_type": "code", "source": "setup()", "metadata": {}},
        {"cell_type": "markdown", "source": "## Part 1 — one"},
        {"cell_type": "code", "source": "a", "metadata": {"tags": ["answer"]}},
        {"cell_type": "code", "source": "check", "metadata": {}},
        {"cell_type": "markdown", "source": "## Part 2 — two"},
        {"cell_type": "code", "source": "b", "metadata": {}},
    ]
    text = "Traceback ...\n  raise ExerciseCheckFailed(f\"CHECK FAILED [{_label(name)}]: {m}\")\n" \
           "ExerciseCheckFailed: CHECK FAILED [Part 1/x]: expected 1, got 2."
    message = grading_plan.failure_message(text)
    assert message == "CHECK FAILED [Part 1/x]: expected 1, got 2."
    assert grading_plan.failure_message("foo\nSyntaxError: invalid syntax", is_answer=True) == \
        "your answer cell raised SyntaxError: invalid syntax"
    report = grading_plan.build_report("nb", cells, {1: ("pass", ""), 3: ("pass", ""), 4: ("fail", message), 6: ("not run", "")})
    assert [(p.title, p.status) for p in report.parts] == [("Part 1 — one", "fail"), ("Part 2 — two", "not run")]
    assert "0 of 2 parts pass." in str(report) and "Cell" not in str(report)


def test_checks_name_the_type_they_expected():
    assert "expected a number (an int or a float), got a str ('12')" in failure(check_equal, "n", "12", 12)
    assert "expected a sequence" in failure(check_equal, "xs", 3, [1, 2, 3])
    assert "expected True or False (a bool), got an int" in failure(check_equal, "b", 1, True)
    # check_allclose fails (never crashes) on an answer that is not an array of numbers
    for wrong in ["abc", {"a": 1}, [[1, 2], [3]], object()]:
        msg = failure(check_allclose, "out", wrong, np.ones(2))
        assert "expected an array or tensor of numbers of shape (2,)" in msg, msg


def test_check_close_refuses_bools_like_check_equal():
    for value in (True, False, np.bool_(True)):
        assert "expected a number" in failure(check_close, "ratio", value, 1.0)
    assert "expected a number" in failure(check_close, "ratio", "1.0", 1.0)


def test_hidden_checks_never_show_the_expected_value():
    for msg in [failure(check_equal, "h", [1, 2, 41], [1, 2, 42], hidden=True),
                failure(check_close, "h", 41.0, 42.0, hidden=True),
                failure(check_allclose, "h", np.array([41.0]), np.array([42.0]), hidden=True),
                failure(check_close, "h", True, 42.0, hidden=True)]:
        assert "42" not in msg and "CHECK FAILED [h]" in msg, msg
    assert "got 41, which is wrong" in failure(check_equal, "h", 41, 42, hidden=True)
    assert "too small" in failure(check_close, "h", 41.0, 42.0, hidden=True)


def test_without_is_inert_outside_the_grader():
    """In a live kernel every cell is notebook code: only the grader tells answers from checks."""
    from inferbook.arith import ceil_div

    with part(1, without=["inferbook.arith"]):
        assert ceil_div(7, 2) == 4
    assert ceil_div.__code__.co_filename.endswith("arith.py")


def test_without_makes_package_code_unavailable_to_the_learner(monkeypatch):
    from inferbook.arith import ceil_div

    source = "def mine(n):\n    return ceil_div(n, 2)\n"
    answer_cell = {"ceil_div": ceil_div}
    exec(compile(source, "<answer a>", "exec"), answer_cell)
    monkeypatch.setattr(grading.STATE, "student_files", {"<answer a>"})
    with pytest.raises(ExerciseCheckFailed, match=r"^CHECK FAILED \[Part 1/your own code\]: mine calls the "
                                                  r"package's inferbook.arith.ceil_div"):
        with part(1, without=["inferbook.arith.ceil_div"]):
            try:
                answer_cell["mine"](7)          # caught by the learner: the part still fails
            except ExerciseCheckFailed:
                pass
    with part(2, without=["inferbook.arith.ceil_div"]):
        assert ceil_div(7, 2) == 4              # the check itself may call it
    assert ceil_div(7, 2) == 4 and ceil_div.__code__.co_filename.endswith("arith.py")
