"""The grader's pieces that need no grading process: plain values, the load factor of the time
limits, the verified check data and the matching of a notebook to its exercise."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from inferbook import grading, grading_plan, grading_runner
from inferbook.grading_sandbox import canonical

from grading_helpers import EXERCISES, ROOT


class AlwaysEqualInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class LyingFloat(float):
    def __float__(self):
        return 42.0

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class LyingList(list):
    def __iter__(self):
        return iter([1, 2, 3])


class LyingTensor(torch.Tensor):
    def tolist(self):
        return [42]


class LyingArray(np.ndarray):
    def tolist(self):
        return [42]


def test_plain_reads_values_with_the_built_in_types_methods():
    assert type(grading.plain(AlwaysEqualInt(5))) is int and grading.plain(AlwaysEqualInt(5)) == 5
    assert grading.plain(LyingFloat(1.5)) == 1.5 and type(grading.plain(LyingFloat(1.5))) is float
    assert grading.plain(LyingList([7, 8])) == [7, 8]
    assert grading.plain(torch.tensor([1.0, 2.0]).as_subclass(LyingTensor)) == [1.0, 2.0]
    assert grading.plain(np.arange(3).view(LyingArray)) == [0, 1, 2]
    assert grading.plain((1, np.int64(2), {"a": np.float32(0.5)})) == [1, 2, {"a": 0.5}]
    assert grading.plain(True) is True and grading.plain(np.bool_(True)) is True


def test_an_always_equal_answer_fails_the_checks():
    with pytest.raises(grading.ExerciseCheckFailed, match="got 0"):
        grading.check_equal("n", AlwaysEqualInt(0), 3)
    with pytest.raises(grading.ExerciseCheckFailed, match="got 1.5"):
        grading.check_close("x", LyingFloat(1.5), 42.0)
    with pytest.raises(grading.ExerciseCheckFailed):
        grading.check("c", type("Yes", (), {"__bool__": lambda self: True})(), "a bool")
    grading.check_equal("list", LyingList([1, 2, 3]), [1, 2, 3])     # its real items
    grading.check("numpy bool", np.bool_(True), "true")


def test_canonical_returns_base_types():
    t = canonical(torch.ones(2).as_subclass(LyingTensor))
    assert type(t) is torch.Tensor and t.tolist() == [1.0, 1.0]
    a = canonical(np.arange(2).view(LyingArray))
    assert type(a) is np.ndarray and a.tolist() == [0, 1]
    v = canonical((AlwaysEqualInt(3), [LyingFloat(2.0)], {"k": np.float64(1.0)}))
    assert type(v) is tuple and type(v[0]) is int and type(v[1][0]) is float and v[1][0] == 2.0


def test_no_grader_state_a_learner_could_change():
    """Who is the learner, the guarded originals and the seeds live in the walls while grading
    (asked through audit events), not in STATE: it holds only what the sandbox verifies after
    every cell. Outside the grading process fresh_seed draws from os.urandom."""
    fields = set(vars(grading.STATE))
    assert fields == {"grading", "student_files", "part_status", "current", "violations"}, fields
    assert grading._ask(grading._ASK_SEED) == []                    # no walls in this process
    assert grading.fresh_seed() != grading.fresh_seed()


def test_load_factor(monkeypatch):
    monkeypatch.setenv("INFERBOOK_GRADING_SLOWDOWN", "3")
    assert grading_runner.load_factor() == 3.0
    monkeypatch.setenv("INFERBOOK_GRADING_SLOWDOWN", "0.2")
    assert grading_runner.load_factor() == 1.0                     # never shorter than the limit
    monkeypatch.delenv("INFERBOOK_GRADING_SLOWDOWN")
    assert 1.0 <= grading_runner.load_factor() <= 20.0


def test_check_data_are_verified(tmp_path, monkeypatch):
    shutil.copytree(grading_plan.DATA, tmp_path / "data")
    monkeypatch.setattr(grading_plan, "DATA", tmp_path / "data")
    assert set(grading_plan.pristine_exercises()) == set(grading_plan.EXERCISE_SHA256)
    path = tmp_path / "data" / "exercise_ex02_kv_sizing.json"
    path.write_text(path.read_text().replace("check_equal", "print"))
    with pytest.raises(grading_plan.TamperedExerciseData, match="exercise_ex02_kv_sizing.json differs"):
        grading_plan.pristine_exercises()
    path.unlink()
    with pytest.raises(grading_plan.TamperedExerciseData, match="missing"):
        grading_plan.pristine_exercises()


def test_a_copy_is_matched_by_its_content():
    nb = json.loads((EXERCISES / "ex09_find_the_knee.ipynb").read_text())
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"new{i}"                                     # new cell ids
        if cell["cell_type"] == "markdown" and "".join(cell["source"]).startswith("# Exercise"):
            cell["source"] = "# my notes"                         # no title either
    assert grading_plan.find_pristine(nb, "anything.ipynb")["name"] == "ex09_find_the_knee"
    nothing = {"cells": [{"cell_type": "code", "id": "a", "source": "def f(): pass", "metadata": {}}]}
    assert grading_plan.find_pristine(nothing, "x.ipynb") is None
    plan, notes = grading_plan.build_plan(nothing, None)
    assert plan == [] and "none of the book's exercises" in notes[0]


def test_the_time_limit_holds_under_load(tmp_path):
    """Exercise 8.1's correct solution (Part 3 simulates every TP degree of several models)
    passes within the exercise's limits while four busy processes load the machine: the limits
    are scaled by the load factor measured when the grading starts."""
    from grading_helpers import variant

    path = variant("ex08_plan_deployment", tmp_path / "loaded")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        report = grading_runner.grade_file(path)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert report.passed, str(report)
    assert "timed out" not in str(report)


def _outcomes(workers: int) -> dict[str, str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist", "-n", str(workers), "-q", "-rA",
                          "-p", "no:randomly", "tests/test_grading_checks.py"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return {test: outcome for outcome, test in re.findall(r"^(PASSED|FAILED|ERROR|SKIPPED) (\S+)",
                                                          run.stdout, re.M)} or {"no tests": run.stdout[-2000:]}


def test_the_outcome_does_not_depend_on_the_number_of_workers():
    """The in-process grading checks (which change the grader's state and put it back) give the
    same outcome per test with one pytest-xdist worker and with two (the suite runs -n 2)."""
    one, two = _outcomes(1), _outcomes(2)
    assert one == two
    assert one and set(one.values()) == {"PASSED"}, one
