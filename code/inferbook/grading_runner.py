"""The grader behind both doors (`make grade`, Colab's `grade()`): plans, the grading process, reports.

    make grade NB=notebooks/exercises/ex01_naive_vs_cached.ipynb     # pytest -p inferbook.grading_pytest
    from inferbook.grading import grade; grade()                      # on Colab: the notebook in the tab
    python -m inferbook.grading_runner NB...                          # the same, without pytest

`grade_notebooks` matches each notebook to the book's exercise (`inferbook.grading_plan`: verified
check data; a notebook that is none of the exercises is refused), runs the plans in one grading
process (`inferbook.grading_sandbox`, a fresh forked child per notebook, the learner's code behind
`inferbook.grading_walls`), enforces the per-cell time limit from outside (the exercise's limit
times this machine's measured slowness, `load_factor`), and folds the events into reports. The
package's files are fingerprinted before and after: a grading that changed them fails, so one
checkout grading many learners cannot be poisoned by an earlier one.

A grading runs beside no package named inferbook (a learner's code may write one next to a
notebook kept outside the book): the runner refuses such a folder, and the grading process
starts with `python -P` (Python 3.11+), so the folder never comes before the book's package.

What stays out of the grader's reach (each tried once by
tests/test_grading_integrity.py::test_the_out_of_scope_list_is_tried_once):
- the checks run in the same process as the learner's code: a learner who leaves Python there
  (a C extension they bring, or a bug in CPython's audit hooks) can read the checks' values;
  the walls refuse the ways Python offers (frames, `gc`, `ctypes`, signal handlers, processes);
- code a library compiles on the learner's behalf under the name of an existing library file;
- copies of the package's source outside the package and the repository (a pip cache, a
  download) and the book's published solutions typed in by hand: grading judges what the
  functions do, not who wrote them;
- Colab's `grade()` prints its report in the learner's own kernel, which the learner controls;
  the grade that counts is the one `make grade` gives the saved notebook.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from .grading_plan import (DEFAULT_TIMEOUT, GradeReport, PartResult, TamperedExerciseData, build_plan, build_report,
                           cell_parts, find_pristine, part_number, python_source)

PACKAGE = Path(__file__).resolve().parent


# The grading process. With -P (Python 3.11+) the folder it runs in (the notebook's) is not put
# first on sys.path, so a package named inferbook written there cannot stand in for the grader;
# on 3.10 the runner's folder check stands alone (the sandbox also checks it imported the
# runner's package). Not `python -c`: its frame, "<string>", is a name the learner's code can
# have compiled under (a dataclass's generated methods are), and the walls would take the
# grader's own frame for the learner's.
_SANDBOX = [*(["-P"] if sys.version_info >= (3, 11) else []), "-m", "inferbook.grading_sandbox"]


def _preload(plans: list[dict]) -> list[str]:
    import ast

    names = []
    for plan in plans:
        for cell in plan["cells"]:
            if cell["cell_type"] != "code" or cell.get("kind") != "book":
                continue
            try:
                tree = ast.parse(python_source(cell["source"]))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names += [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.append(node.module)
    return list(dict.fromkeys(names))




def package_fingerprint() -> str:
    """A SHA-256 over the files grading trusts: the grader's modules, the exercises' check data
    and their recorded hashes (names and contents)."""
    digest = hashlib.sha256()
    trusted = [*PACKAGE.glob("grading*.py"), PACKAGE / "kernel_checks.py", PACKAGE / "exercise_hashes.py",
               *(PACKAGE / "data").glob("exercise_*.json")]
    for path in sorted(trusted):
        if path.is_file():
            digest.update(str(path.relative_to(PACKAGE)).encode())
            with contextlib.suppress(OSError):
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


_FACTOR: list[float] = []


def load_factor() -> float:
    """How much slower this machine runs a fixed piece of Python now than the machine the time
    limits were set on (at least 1; measured at every grading, in wall time, so a loaded machine
    gets proportionally longer limits). INFERBOOK_GRADING_SLOWDOWN overrides it."""
    _FACTOR.clear()
    if not _FACTOR:
        forced = os.environ.get("INFERBOOK_GRADING_SLOWDOWN")
        if forced:
            _FACTOR.append(max(1.0, float(forced)))
        else:
            wall = []
            for _ in range(3):
                t0 = time.perf_counter()
                total = 0
                for i in range(200_000):
                    total += i * i % 7
                wall.append(time.perf_counter() - t0)
            reference = 0.03               # CPU seconds this loop takes on an idle core of the book's CI
            _FACTOR.append(min(20.0, max(1.0, min(wall) / reference)))
    return _FACTOR[0]


def grade_notebooks(notebooks: list[tuple[dict, str, str | os.PathLike | None]],
                    timeout: float | None = None) -> list[GradeReport]:
    """Grade each (notebook JSON, name shown, folder it runs in) in one grading process (a fresh
    forked child per notebook); the reports, in order. `timeout` overrides the exercise's limit
    per cell (seconds)."""
    import select
    import signal
    import subprocess
    import tempfile

    plans, reports_meta = [], []
    factor = load_factor()
    try:
        for nb, name, cwd in notebooks:
            find_pristine(nb, name)
    except TamperedExerciseData as err:       # the check data differ from what the book shipped
        return [GradeReport(Path(name).name if name else "notebook", notes=[f"not graded: {err}"])
                for nb, name, cwd in notebooks]
    shadows = [_shadowing_package(cwd) for _, _, cwd in notebooks]
    if any(shadows):
        return [GradeReport(Path(name).name if name else "notebook", notes=[
            f"not graded: the folder it runs in holds a package named inferbook ({shadow}), which would "
            "stand in for the book's grader: remove or rename it, then grade again"] if shadow else [
            "not graded: another notebook of this grading is beside a package named inferbook"])
            for (nb, name, cwd), shadow in zip(notebooks, shadows)]
    for nb, name, cwd in notebooks:
        pristine = find_pristine(nb, name)
        cells, notes = build_plan(nb, pristine)
        titles = cell_parts(cells)
        for cell, title in zip(cells, titles):
            cell["part"] = part_number(title)
        limit = float(timeout or (pristine or {}).get("timeout") or DEFAULT_TIMEOUT) * factor
        plans.append({"cells": cells, "cwd": str(cwd) if cwd else os.getcwd()})
        reports_meta.append((Path(name).name if name else "notebook", cells, titles, notes, limit))
    token = os.urandom(16).hex()
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    env.pop("PYTEST_CURRENT_TEST", None)
    code_dir = Path(__file__).resolve().parent.parent
    if code_dir.name == "code":                     # the repository's layout: keep this copy first
        env["PYTHONPATH"] = str(code_dir) + os.pathsep + env.get("PYTHONPATH", "")
    outcomes: list[dict[int, tuple[str, str]]] = [{} for _ in plans]
    refused: dict[int, str] = {}
    fingerprint = package_fingerprint()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen([sys.executable, *_SANDBOX], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, env=env, cwd=plans[0]["cwd"] if plans else None)
        proc.stdin.write(json.dumps({"token": token, "plans": plans, "preload": _preload(plans),
                                     "package": str(PACKAGE)}).encode())
        proc.stdin.close()
        fd = proc.stdout.fileno()
        buffer, pids, running, deadline = b"", {}, None, None
        while True:
            wait = None if deadline is None else max(0.0, deadline - _now())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:                                   # a cell ran past the time limit
                k, i = running
                limit = reports_meta[k][4]
                if plans[k]["cells"][i].get("part") is None and plans[k]["cells"][i].get("kind") == "book":
                    limit = max(limit, DEFAULT_TIMEOUT * factor)
                part_no = plans[k]["cells"][i].get("part")
                who = f"Part {part_no}" if part_no else "The set-up"
                outcomes[k][i] = ("fail", f"CHECK FAILED [{'Part %d/' % part_no if part_no else ''}time limit]: "
                                          f"{who} timed out after {limit:.0f} s (this exercise allows {limit:.0f} s "
                                          "per cell: a loop that never ends, or far too much work?)")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pids.get(k, proc.pid), signal.SIGKILL)
                running, deadline = None, None
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(event, dict) or event.get("token") != token:
                    continue
                k = event.get("k")
                if event["t"] == "pid":
                    pids[k] = event["pid"]
                elif event["t"] == "done" and event.get("refused"):
                    refused[k] = str(event["refused"])
                elif event["t"] == "start":
                    cell = plans[k]["cells"][event["i"]]
                    limit = reports_meta[k][4]
                    if cell.get("part") is None and cell.get("kind") == "book":
                        limit = max(limit, DEFAULT_TIMEOUT * factor)      # the book's set-up (imports, models)
                    running, deadline = (k, event["i"]), _now() + limit
                elif event["t"] == "end":
                    if (k, event["i"]) == running:
                        running, deadline = None, None
                    outcomes[k].setdefault(event["i"], (event["status"], event["message"]))
                elif event["t"] == "exit":
                    if running is not None and running[0] == k:
                        i = running[1]
                        part_no = plans[k]["cells"][i].get("part")
                        outcomes[k].setdefault(i, ("fail", f"CHECK FAILED [{'Part %d/' % part_no if part_no else ''}"
                                                           "process ended]: the grading process ended during this "
                                                           "cell (exit(), os._exit or a crash in your code)"))
                        running, deadline = None, None
        proc.wait()
        errors.seek(0)
        crash = errors.read().decode(errors="replace").strip().splitlines()[-3:]
    reports = []
    for k, (name, cells, titles, notes, limit) in enumerate(reports_meta):
        result = dict(outcomes[k])
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code" and i not in result:
                result[i] = ("not run", "")
        if k in refused:
            notes = notes + [f"not graded: {refused[k]}"]
        elif not outcomes[k] and crash:
            notes = notes + ["the grader stopped: " + " | ".join(crash)]
        reports.append(build_report(name, cells, result, notes))
    if package_fingerprint() != fingerprint:
        for report in reports:
            report.parts.append(PartResult("Checks untouched", "fail", (
                "CHECK FAILED [checks untouched]: the package's files changed while this grading ran: "
                "reinstall the package (git checkout code/) before grading again")))
    return reports


def _shadowing_package(cwd) -> str | None:
    """A package or module named inferbook in the folder `cwd` that is not the book's own (a
    learner's code could write one there, outside the book: it would come first on sys.path)."""
    if not cwd:
        return None
    for candidate in (Path(cwd) / "inferbook", Path(cwd) / "inferbook.py"):
        if candidate.exists() and candidate.resolve() != PACKAGE:
            return str(candidate)
    return None


def _now() -> float:
    return time.monotonic()


def grade_file(path: str | os.PathLike, timeout: float | None = None) -> GradeReport:
    """Grade the notebook saved at `path` (it runs in the notebook's folder)."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return grade_notebooks([(nb, path.name, path.resolve().parent)], timeout)[0]



def live_notebook() -> tuple[dict, str]:
    if "google.colab" in sys.modules:
        from google.colab import _message  # type: ignore

        reply = _message.blocking_request("get_ipynb", request="", timeout_sec=60)
        nb = reply["ipynb"] if isinstance(reply, dict) and "ipynb" in reply else reply
        return nb, "this notebook"
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session.endswith(".ipynb") and Path(session).is_file():
        with open(session, encoding="utf-8") as f:
            return json.load(f), Path(session).name + " (as last saved)"
    raise LookupError("not on Colab")



def main(argv: list[str] | None = None) -> int:
    """`python -m inferbook.grading_runner NB...`: grade saved notebooks, print the reports."""
    args = sys.argv[1:] if argv is None else argv
    reports = [grade_file(p) for p in args]
    for report in reports:
        print(report)
    return 0 if reports and all(r.passed for r in reports) else 1


if __name__ == "__main__":
    from inferbook import grading_runner as _runner    # the importable module, not this __main__ copy

    sys.exit(_runner.main())
