"""The pytest door of the grader: `pytest -p inferbook.grading_pytest NB...` (what `make grade` runs).

Each notebook named on the command line becomes one item; all of them are graded together by
`inferbook.grading_runner.grade_notebooks` (one grading process), and the run ends with one
report per notebook in place of tracebacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .grading_runner import grade_notebooks


def pytest_addoption(parser):
    parser.addoption("--grading-stop-per-notebook", action="store_true",
                     help="accepted for compatibility: every notebook is graded to its end")
    parser.addoption("--grading-timeout", type=float, default=None,
                     help="seconds per cell (default: the exercise's own limit)")


def pytest_configure(config):
    # The report replaces tracebacks and the per-cell summary (a learner reads one screen).
    if getattr(config.option, "tbstyle", "auto") == "auto":
        config.option.tbstyle = "no"
    config.option.reportchars = "N"
    for option in ("nbval", "nbval_lax"):           # the grader, not nbval, runs the notebooks
        if hasattr(config.option, option):
            setattr(config.option, option, False)
    config._grading_reports = None




@pytest.hookimpl(tryfirst=True)
def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".ipynb":
        return GradedNotebook.from_parent(parent, path=file_path)
    return None


def _grade_session(config, items) -> dict:
    if config._grading_reports is None:
        mine = [it for it in items if isinstance(it, GradeItem)]
        reports = grade_notebooks([(json.loads(Path(it.path).read_text(encoding="utf-8")), str(it.path),
                                    Path(it.path).resolve().parent) for it in mine],
                                  timeout=config.getoption("grading_timeout"))
        for it, report in zip(mine, reports):
            report.notebook = it.parent.nodeid
        config._grading_reports = {it.nodeid: r for it, r in zip(mine, reports)}
    return config._grading_reports



class GradeFailed(Exception):
    pass


class GradedNotebook(pytest.File):
    def collect(self):
        yield GradeItem.from_parent(self, name="grade")


class GradeItem(pytest.Item):
    def runtest(self):
        report = _grade_session(self.config, self.session.items)[self.nodeid]
        if not report.passed:
            first = next((p for p in report.parts if p.status != "pass"), None)
            raise GradeFailed(f"{first.title}: {first.message or first.status}" if first
                              else (report.notes[-1] if report.notes else "no parts"))

    def repr_failure(self, excinfo):
        return str(excinfo.value) if isinstance(excinfo.value, GradeFailed) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"{self.parent.name}::grade"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for report in (config._grading_reports or {}).values():
        terminalreporter.write_sep("=", "grading report")
        terminalreporter.write_line(str(report))
