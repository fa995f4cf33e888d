"""Grading of the exercise notebooks: named checks, parts, one grader behind two doors.

In a check cell:

    with part(2, needs=[1], without=["inferbook.decode"]):   # Part 2; runs once Part 1 passed
        check_equal("cached decoder tokens", got=mine.tolist(), expected=ref.tolist(), index="step")

Every failure is an `ExerciseCheckFailed` whose message starts `CHECK FAILED [Part 2/<check>]:`.
Inside `part(...)`, an exception raised by the learner's code becomes such a failure too (with the
line of their code that raised), a part whose prerequisites failed says "fix Part N first", and
the package code named in `without` is unavailable to the learner's code (a call fails the part:
the part asks them to write that algorithm). `hidden=True` on a check withholds the expected
value (cases drawn afresh at every grading, so a table typed from messages cannot pass).

Grading a notebook (`grade_notebooks`) runs the BOOK's exercise — its set-up and check cells,
shipped with the package as `inferbook/data/exercise_<name>.json` (written by
tools/make_exercises.py) — with the learner's answer cells (by cell id) and the cells they added,
in a separate process, whatever the submitted notebook's other cells say. Answer cells run
through IPython (magics such as `%%time` work); check cells run in a namespace of their own, with
the package, NumPy, torch and Python's built-ins restored (and any change made by the learner's
code reported as a failure); each cell has the exercise's time limit. The two doors:

    pytest -p inferbook.grading --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg NB
    make grade NB=...                         # the same command
    from inferbook.grading import grade; grade()     # on Colab: the notebook as it is in the tab

What the learner's code can still do, running in the same process as the checks: anything Python
allows (ctypes, `gc` to reach the grader's objects, faking the grader's event stream). The grader
stops honest mistakes and ordinary tampering, not a determined attack on the interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import math
import os
import re
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable


class ExerciseCheckFailed(AssertionError):
    """Raised by a check that fails; the message starts with 'CHECK FAILED [part/name]'."""


# --- state of a grading run (empty in a live kernel) -------------------------------------------------
_RUN: list[dict] = []                 # [{"student_files": set of code file names of learner cells}]
_GRADING: list[bool] = []             # true inside the grading process (grade() then does nothing)


def _student_file(filename: str) -> bool:
    """Is `filename` code the learner wrote (an answer cell or a cell they added)?"""
    if _RUN:
        return filename in _RUN[0]["student_files"] or filename.startswith("<timed ")
    return _in_notebook_code(filename)


def _in_notebook_code(filename: str) -> bool:
    """True for code typed in a notebook cell (IPython's cell files, or the grader's cells)."""
    return (filename.startswith(("<cell ", "<answer ", "<your cell ", "<check ", "<timed "))
            or "ipykernel_" in filename or "ipython-input" in filename)


# --- parts ----------------------------------------------------------------------------------------
_PART_STATUS: dict[int, bool] = {}    # part number -> did its latest check cell pass
_CURRENT: list[int] = []              # the part whose check cell is running (a stack)
_VIOLATIONS: list[str] = []           # calls of package code a part asks the learner to write


def reset() -> None:
    """Forget which parts passed (a fresh grading run)."""
    _PART_STATUS.clear()
    _CURRENT.clear()
    _VIOLATIONS.clear()


def _label(name: str) -> str:
    return f"Part {_CURRENT[-1]}/{name}" if _CURRENT else name


def _fail(name: str, message: str) -> None:
    raise ExerciseCheckFailed(f"CHECK FAILED [{_label(name)}]: {message}")


def _explain(exc: BaseException) -> tuple[str, str]:
    """(check name, message) for an exception raised while a part's checks ran."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = frames[0].filename if frames else ""
    if _RUN:
        yours = [f for f in frames if _student_file(f.filename)]
    else:
        yours = [f for f in frames[1:] if _in_notebook_code(f.filename) and f.filename != first]
    called = next((f.name for f in frames[1:] if f.filename != first), None) if frames else None
    where = ""
    if yours:
        line = (yours[-1].line or linecache.getline(yours[-1].filename, yours[-1].lineno)).strip()
        where = f" (in {yours[-1].name}, line {yours[-1].lineno}: `{line}`)" if line else ""
    if yours and yours[0].name != "<module>":
        called = yours[0].name
    who = f"{called}" if called and called != "<module>" else "your code"
    if isinstance(exc, NotImplementedError):
        return "answer written", f"{who} is not written yet (it raises NotImplementedError)"
    if isinstance(exc, NameError) and not yours:
        return "answer defined", (f"{exc}: run this part's answer cell first (and fix any error it shows)")
    return "your code runs", f"{who} raised {type(exc).__name__}: {exc}{where}"


class part(contextlib.ContextDecorator):
    """`with part(N, needs=[...], without=[...]):` runs a check cell of Part N.

    needs: parts whose answers this part uses ("fix Part N first" when one failed).
    without: package modules or functions ("inferbook.sizing", "inferbook.paged.paged_attention")
    that the learner's code may not call while the part is checked: the part asks them to write
    that algorithm. A call fails the part, even if their code catches the error.
    """

    def __init__(self, number: int, needs: Iterable[int] | int = (), without: Iterable[str] | str = ()):
        self.number = number
        self.needs = [needs] if isinstance(needs, int) else list(needs)
        self.without = [without] if isinstance(without, str) else list(without)
        self._guards: list = []

    def __enter__(self):
        _CURRENT.append(self.number)
        missing = [n for n in self.needs if not _PART_STATUS.get(n, False)]
        if missing:
            _PART_STATUS[self.number] = False
            _CURRENT.pop()
            which = " and ".join(f"Part {n}" for n in missing)
            raise ExerciseCheckFailed(
                f"CHECK FAILED [Part {self.number}/needs {which}]: fix {which} first "
                f"(this part uses {'its' if len(missing) == 1 else 'their'} answers)")
        self._violations = len(_VIOLATIONS)
        # Only the grader can tell the book's cells from the learner's, so only it guards.
        self._guards = _install_guards(self.without) if self.without and _RUN else []
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            _remove_guards(self._guards)
            self._guards = []
            used = _VIOLATIONS[self._violations:]
            del _VIOLATIONS[self._violations:]
            if used:
                _PART_STATUS[self.number] = False
                raise ExerciseCheckFailed(f"CHECK FAILED [Part {self.number}/your own code]: {used[0]}") from None
            if exc is None:
                _PART_STATUS[self.number] = True
                return False
            _PART_STATUS[self.number] = False
            if isinstance(exc, ExerciseCheckFailed) or not isinstance(exc, Exception):
                return False
            name, message = _explain(exc)
            raise ExerciseCheckFailed(f"CHECK FAILED [Part {self.number}/{name}]: {message}") from None
        finally:
            if _CURRENT:
                _CURRENT.pop()


# --- package code a part asks the learner to write: unavailable to their code while it is checked ---
_GUARDED: dict[int, tuple[types.FunctionType, str]] = {}     # guard key -> (original, dotted name)


def _functions_of(spec: str) -> list[tuple[str, types.FunctionType]]:
    """The Python functions behind `spec`: a module (every function and method defined in it) or
    one function or class of it ("inferbook.paged.paged_attention")."""
    import importlib

    try:
        module, objects = importlib.import_module(spec), None
    except ImportError:
        mod_name, _, attr = spec.rpartition(".")
        module = importlib.import_module(mod_name)
        objects = [(f"{mod_name}.{attr}", getattr(module, attr))]
    if objects is None:
        objects = [(f"{spec}.{k}", v) for k, v in vars(module).items()
                   if getattr(v, "__module__", None) == module.__name__ and isinstance(v, (type, types.FunctionType))]
    found = []
    for name, obj in objects:
        members = [(f"{name}.{k}", v) for k, v in vars(obj).items()] if isinstance(obj, type) else [(name, obj)]
        for member_name, fn in members:
            if isinstance(fn, (staticmethod, classmethod)):
                fn = fn.__func__
            elif isinstance(fn, property):
                fn = fn.fget
            while hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            if isinstance(fn, types.FunctionType) and not fn.__code__.co_freevars:
                found.append((member_name, fn))
    return found


def _guard_code(key: int) -> types.CodeType:
    namespace: dict[str, Any] = {}
    exec(compile(f"def guarded(*args, **kwargs):\n    import inferbook.grading as g\n"
                 f"    return g._guarded({key}, args, kwargs)\n", "<inferbook.grading guard>", "exec"), namespace)
    return namespace["guarded"].__code__


def _install_guards(specs: list[str]) -> list[tuple[types.FunctionType, types.CodeType, int]]:
    installed = []
    for spec in specs:
        for name, fn in _functions_of(spec):
            if fn.__code__.co_filename == "<inferbook.grading guard>":
                continue                                       # guarded already (nested parts)
            original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, None)
            original.__kwdefaults__ = fn.__kwdefaults__
            key = id(original)
            _GUARDED[key] = (original, name)
            installed.append((fn, fn.__code__, key))
            fn.__code__ = _guard_code(key)
    return installed


def _remove_guards(installed) -> None:
    for fn, code, key in installed:
        fn.__code__ = code
        _GUARDED.pop(key, None)


def _student_caller(frame) -> str | None:
    """The learner's function on the call stack above `frame`, if any."""
    names = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if _RUN:
            if _student_file(filename):
                return "your answer cell" if frame.f_code.co_name == "<module>" else frame.f_code.co_name
        elif _in_notebook_code(filename) and not filename.startswith("<check "):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    # In a live kernel every cell is notebook code: the outermost one is the check cell.
    if len(names) >= 2:
        return names[-2] if names[-2] != "<module>" else "your answer cell"
    return None


def _guarded(key: int, args: tuple, kwargs: dict) -> Any:
    original, name = _GUARDED[key]
    culprit = _student_caller(sys._getframe(2))
    if culprit is not None:
        message = (f"{culprit} calls the package's {name}: this part asks you to write it yourself "
                   "(the package's version is unavailable while the part is checked)")
        _VIOLATIONS.append(message)
        raise ExerciseCheckFailed(f"CHECK FAILED [{_label('your own code')}]: {message}")
    return original(*args, **kwargs)


# --- checks ---------------------------------------------------------------------------------------
HIDDEN = "(this case is drawn afresh at every grading; its expected value is not shown)"


def check(name: str, condition: Any, expected: str) -> None:
    """Pass if `condition` is true; else fail, saying what was `expected` (never a closed form)."""
    if not condition:
        _fail(name, f"expected {expected}")
    print(f"ok: {_label(name)}")


def _plain(value: Any) -> Any:
    """Tensors/arrays -> nested lists; tuples -> lists; numpy scalars -> Python numbers."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return a == b


def first_difference(got: Any, expected: Any, path: tuple = ()) -> tuple[tuple, Any, Any] | None:
    """The first place where `got` differs from `expected`: (index path, expected part, got part)."""
    got, expected = _plain(got), _plain(expected)
    if isinstance(got, list) and isinstance(expected, list):
        for i, (g, e) in enumerate(zip(got, expected)):
            d = first_difference(g, e, path + (i,))
            if d is not None:
                return d
        if len(got) != len(expected):
            i = min(len(got), len(expected))
            return (path + (i,), expected[i] if i < len(expected) else "(nothing)",
                    got[i] if i < len(got) else "(nothing)")
        return None
    if isinstance(got, dict) and isinstance(expected, dict):
        for k in expected:
            if k not in got:
                return path + (k,), expected[k], "(missing)"
            d = first_difference(got[k], expected[k], path + (k,))
            if d is not None:
                return d
        extra = [k for k in got if k not in expected]
        return (path + (extra[0],), "(nothing)", got[extra[0]]) if extra else None
    return None if _same(got, expected) else (path, expected, got)


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) and value.startswith("(") else repr(value)
    return text if len(text) <= limit else text[:limit] + " …"


def _kind(value: Any) -> str:
    """'a str ('12')': what a learner returned, named by its type."""
    kind = type(value).__name__
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} ({_short(value, 60)})"


def _type_problem(got: Any, expected: Any) -> str | None:
    """What type was expected, when `got` is not even of the right kind; else None."""
    g, e = _plain(got), _plain(expected)
    if isinstance(e, bool):
        return None if isinstance(g, bool) else f"expected True or False (a bool), got {_kind(got)}"
    if isinstance(e, (int, float)):
        return None if isinstance(g, (int, float)) and not isinstance(g, bool) else \
            f"expected a number (an int or a float), got {_kind(got)}"
    if isinstance(e, list):
        return None if isinstance(g, list) else \
            f"expected a sequence (a list, tuple, array or tensor) of {len(e)} items, got {_kind(got)}"
    if isinstance(e, dict):
        return None if isinstance(g, dict) else f"expected a dict, got {_kind(got)}"
    if isinstance(e, str):
        return None if isinstance(g, str) else f"expected a str, got {_kind(got)}"
    return None


def _where(path: tuple, index: str | tuple[str, ...]) -> str:
    names = (index,) if isinstance(index, str) else tuple(index)
    parts = [f"{names[j] if j < len(names) else 'item'} {p!r}" if isinstance(p, str)
             else f"{names[j] if j < len(names) else 'item'} {p}" for j, p in enumerate(path)]
    return (" at " + ", ".join(parts)) if parts else ""


def check_equal(name: str, got: Any, expected: Any, hint: str = "",
                index: str | tuple[str, ...] = "index", hidden: bool = False) -> None:
    """Pass if `got` equals `expected` (int 3 == float 3.0; a tuple equals the same list; tensors
    and arrays by value); else fail, showing the first difference (`index` names the positions).
    hidden: a case drawn at grading time; the message never shows the expected value."""
    if got is NotImplemented or (got is None and expected is not None):
        _fail(name, f"no answer yet (got {got!r}). {hint}".rstrip())
    problem = _type_problem(got, expected)
    if problem:
        _fail(name, f"{problem}. {hint}".rstrip())
    diff = first_difference(got, expected)
    if diff is not None:
        where, e, g = diff
        at = _where(where, index)
        length = ""
        g_all, e_all = _plain(got), _plain(expected)
        if isinstance(g_all, list) and isinstance(e_all, list) and len(g_all) != len(e_all):
            length = f" ({len(e_all)} expected, {len(g_all)} returned)"
        if hidden:
            _fail(name, f"got {_short(g)}{at}, which is wrong{length} {HIDDEN}. {hint}".rstrip())
        lead = f"first difference{at}: expected" if at else "expected"
        _fail(name, f"{lead} {_short(e)}, got {_short(g)}{length}. {hint}".rstrip())
    print(f"ok: {_label(name)}")


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool", "bool_", "bool8")


def check_close(name: str, got: Any, expected: float, rel: float = 1e-6, abs_: float = 0.0, hint: str = "",
                hidden: bool = False) -> None:
    """Pass if the number `got` is within `rel` (relative) or `abs_` of `expected` (a bool is not
    a number here, as in check_equal). hidden: the message never shows the expected value."""
    value = None
    if not _is_bool(got) and not isinstance(got, (str, bytes)):
        try:
            value = float(got)
        except (TypeError, ValueError):
            value = None
    shown = "" if hidden else f" close to {expected!r}"
    if value is None:
        _fail(name, f"expected a number{shown}, got {_kind(got)}. {hint}".rstrip())
    if not math.isfinite(value):
        _fail(name, f"expected a finite number{shown}, got {value!r}. {hint}".rstrip())
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=abs_):
        if hidden:
            way = "too large" if value > expected else "too small"
            _fail(name, f"got {value!r}, which is {way} {HIDDEN}. {hint}".rstrip())
        _fail(name, f"expected {expected!r} (tolerance rel {rel:g}, abs {abs_:g}), got {value!r}. {hint}".rstrip())
    print(f"ok: {_label(name)}")


def check_allclose(name: str, got: Any, expected: Any, rtol: float = 1e-6, atol: float = 1e-9,
                   hint: str = "", index: str | tuple[str, ...] = "index", hidden: bool = False) -> None:
    """Pass if arrays/tensors `got` and `expected` have the same shape and close values (no NaN);
    else fail at the first element that differs (an answer that is not an array of numbers fails
    too, saying what was expected). hidden: the message never shows the expected values."""
    import numpy as np

    e = np.asarray(_plain(expected), dtype=float)
    try:
        g = None if got is None or isinstance(got, (str, bytes, dict)) else np.asarray(_plain(got), dtype=float)
    except (TypeError, ValueError):
        g = None
    if g is None:
        _fail(name, f"expected an array or tensor of numbers of shape {tuple(e.shape)}, got {_kind(got)}. "
                    f"{hint}".rstrip())
    if g.shape != e.shape:
        _fail(name, f"expected shape {tuple(e.shape)}, got {tuple(g.shape)}. {hint}".rstrip())
    bad = ~np.isclose(g, e, rtol=rtol, atol=atol)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        at = _where(where, index)
        if hidden:
            _fail(name, f"got {g[where]:.6g}{at}, which is wrong {HIDDEN}. {hint}".rstrip())
        lead = f"first difference{at}: expected" if at else "expected"
        _fail(name, f"{lead} {e[where]:.6g}, got {g[where]:.6g}. {hint}".rstrip())
    print(f"ok: {_label(name)}")


def fresh_rng():
    """A NumPy generator seeded afresh at every run: hidden cases a message never printed."""
    import numpy as np

    return np.random.default_rng(int.from_bytes(os.urandom(8), "little"))


# --- the report -----------------------------------------------------------------------------------
PART_HEADING = re.compile(r"^##\s+(Part\s+(\d+).*?)\s*$", re.M)
CHECK_LINE = re.compile(r"CHECK FAILED \[[^\]\n]+\][^\n]*")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _source(cell: Any) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def cell_parts(cells: list) -> list[str]:
    """For every cell, the title of the part it belongs to (from '## Part N — …' headings)."""
    titles, current = [], "Set-up"
    for cell in cells:
        if cell["cell_type"] == "markdown":
            m = PART_HEADING.search(_source(cell))
            if m:
                current = m.group(1).replace("**", "")
            elif re.match(r"^##\s", _source(cell).lstrip()):
                current = _source(cell).lstrip()[2:].splitlines()[0].strip()
        titles.append(current)
    return titles


def failure_message(text: str, is_answer: bool = False) -> str:
    """The line a learner needs from an error's text: the first CHECK FAILED, else the error line."""
    text = ANSI.sub("", text)
    found = CHECK_LINE.findall(text)      # the last one: earlier hits are source lines of checks
    if found:
        return found[-1].strip()
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln)]
    last = errors[-1] if errors else (lines[-1] if lines else "failed")
    return f"your answer cell raised {last}" if is_answer else last


@dataclass
class PartResult:
    title: str
    status: str = "pass"           # pass | fail | not run
    message: str = ""


@dataclass
class GradeReport:
    notebook: str
    parts: list[PartResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.parts) and all(p.status == "pass" for p in self.parts)

    def verdict(self) -> dict[str, str]:
        return {p.title: p.status for p in self.parts}

    def __str__(self) -> str:
        lines = [f"Grading {self.notebook}"]
        lines += [f"  Note: {n}" for n in self.notes]
        for p in self.parts:
            lines.append(f"  {p.status.upper():<7} {p.title}")
            if p.message:
                lines.append(f"          {p.message}")
        n_ok = sum(p.status == "pass" for p in self.parts)
        lines.append(f"{n_ok} of {len(self.parts)} parts pass." + (" All done!" if self.passed else ""))
        return "\n".join(lines)


def build_report(name: str, cells: list, outcomes: dict[int, tuple[str, str]],
                 notes: list[str] | None = None) -> GradeReport:
    """Fold per-cell outcomes {cell index: (status, message)} into one line per part."""
    titles = cell_parts(cells)
    report, by_title = GradeReport(name, notes=list(notes or [])), {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or i not in outcomes or "nbval-skip" in _tags(cell):
            continue
        status, message = outcomes[i]
        title = titles[i]
        if title not in by_title:
            by_title[title] = PartResult(title, "pass")
            report.parts.append(by_title[title])
        p = by_title[title]
        if status == "fail" and p.status != "fail":
            p.status, p.message = "fail", message
        elif status == "not run" and p.status == "pass":
            p.status = "not run"
    report.parts = [p for p in report.parts if not (p.title == "Set-up" and p.status == "pass")]
    return report


# --- the book's copy of an exercise -----------------------------------------------------------------
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_TIMEOUT = 120.0
GRADE_CALL = re.compile(r"^\s*(\w+\.)*grade\(\s*\)", re.M)   # a cell that grades (Colab may drop tags)


def _cell_id(cell: dict) -> str | None:
    return cell.get("id") or cell.get("metadata", {}).get("id")


def pristine_exercises() -> dict[str, dict]:
    """{exercise name: the book's exercise} from the package data (tools/make_exercises.py)."""
    found = {}
    for path in sorted(DATA.glob("exercise_*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        found[data["name"]] = data
    return found


def _title(cells: list) -> str:
    for cell in cells:
        if cell["cell_type"] == "markdown":
            m = re.match(r"#\s+(?:Solution to )?(Exercise\s+\d+\.\d+)", _source(cell).lstrip())
            return m.group(1) if m else ""
    return ""


def find_pristine(nb: dict, name: str | None = None) -> dict | None:
    """The book's exercise that `nb` is a copy of: by file name, else by title and cell ids."""
    book = pristine_exercises()
    stem = Path(name).stem if name else None
    if stem in book:
        return book[stem]
    ids = {_cell_id(c) for c in nb.get("cells", [])}
    title = _title(nb.get("cells", []))
    best, score = None, (0, 0)
    for data in book.values():        # the title, then the answer cells' ids (set-up ids are shared)
        s = (int(bool(title) and _title(data["cells"]) == title),
             len(ids & {c["id"] for c in data["cells"] if "answer" in c.get("tags", [])}))
        if s > score:
            best, score = data, s
    return best if score[0] or score[1] else None


def _norm(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.strip().splitlines())


def _is_grade_cell(cell: dict) -> bool:
    return "nbval-skip" in _tags(cell) or bool(GRADE_CALL.search(_source(cell)))


def build_plan(nb: dict, pristine: dict | None) -> tuple[list[dict], list[str]]:
    """The cells to run (the book's, with the learner's answers and added cells) and notes on how
    the submitted notebook's other cells differ from the book's."""
    student = [c for c in nb.get("cells", []) if c.get("cell_type") in ("code", "markdown")]
    notes: list[str] = []
    if pristine is None:
        notes.append("no book copy of this exercise was found: graded with the notebook's own checks")
        pristine = {"cells": [{"id": _cell_id(c) or f"cell{i}", "cell_type": c["cell_type"],
                               "source": _source(c), "tags": _tags(c)} for i, c in enumerate(student)]}
    book = [c for c in pristine["cells"] if not (c["cell_type"] == "code" and _is_grade_cell(c))]
    book_ids = {c["id"] for c in book}
    answers = {c["id"] for c in book if c["cell_type"] == "code" and "answer" in c.get("tags", [])}
    by_id = {}
    for c in student:
        if _cell_id(c) in book_ids and _cell_id(c) not in by_id:
            by_id[_cell_id(c)] = c
    if not by_id:                                   # ids lost: align the book's code cells by source
        by_id = _align(student, book, answers)
    # The learner's code cells the book does not have, each after the book cell it follows.
    added: dict[str | None, list[dict]] = {}
    anchor, known = None, {id(c) for c in by_id.values()}
    for c in student:
        if id(c) in known:
            anchor = next(k for k, v in by_id.items() if v is c)
        elif c["cell_type"] == "code" and _source(c).strip() and not _is_grade_cell(c):
            added.setdefault(anchor, []).append(c)
    plan: list[dict] = []
    for c in added.get(None, []):
        plan.append({"cell_type": "code", "kind": "added", "source": _source(c), "after": None})
    changed = []
    for c in book:
        if c["cell_type"] == "markdown":
            plan.append({"cell_type": "markdown", "source": c["source"]})
        elif c["id"] in answers:
            mine = by_id.get(c["id"])
            plan.append({"cell_type": "code", "kind": "answer", "id": c["id"],
                         "source": _source(mine) if mine is not None and mine["cell_type"] == "code" else c["source"]})
        else:
            plan.append({"cell_type": "code", "kind": "book", "id": c["id"], "source": c["source"]})
            mine = by_id.get(c["id"])
            if mine is None:
                changed.append(f"{c['id']} deleted")
            elif _norm(_source(mine)) != _norm(c["source"]) or set(_tags(mine)) - {"answer"} != set(c.get("tags", [])):
                changed.append(f"{c['id']} edited")
        for extra in added.get(c["id"], []):
            plan.append({"cell_type": "code", "kind": "added", "source": _source(extra), "after": c["id"]})
    order = [_cell_id(c) for c in student if _cell_id(c) in book_ids]
    if order != [c["id"] for c in book if c["id"] in order] and not changed:
        changed.append("cells moved")
    n_added = sum(len(v) for v in added.values())
    if changed:
        notes.append("this notebook's check cells differ from the book's (" + ", ".join(changed)
                     + "): it was graded with the book's checks")
    if n_added:
        notes.append(f"{n_added} code cell{'s' if n_added > 1 else ''} you added ran as part of your answers")
    return plan, notes


def _align(student: list[dict], book: list[dict], answers: set[str]) -> dict[str, dict]:
    """Without cell ids: the book's cells found by identical source; an answer is the first code
    cell after the book cell that precedes it."""
    by_id, i = {}, 0
    code = [c for c in student if c["cell_type"] == "code"]
    for c in book:
        if c["cell_type"] != "code":
            continue
        if c["id"] in answers:
            if i < len(code) and not any(_norm(_source(code[i])) == _norm(b["source"]) for b in book
                                         if b["cell_type"] == "code" and b["id"] not in answers):
                by_id[c["id"]] = code[i]
                i += 1
            continue
        for j in range(i, len(code)):
            if _norm(_source(code[j])) == _norm(c["source"]):
                by_id[c["id"]] = code[j]
                i = j + 1
                break
    return by_id


def _python_source(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


# --- the grading process: runs plans, reports each cell as one JSON line -------------------------------
_PROTECTED = ("builtins", "math", "cmath", "operator", "functools", "itertools", "collections", "random",
              "statistics", "copy", "dataclasses", "numpy", "numpy.linalg", "numpy.random", "torch",
              "torch.nn.functional", "torch.linalg", "scipy.stats", "linecache", "traceback", "contextlib")


class _Snapshot:
    """The package, NumPy, torch and the built-ins as they were before the learner's code ran."""

    def __init__(self):
        self.modules = {n: (m, dict(vars(m))) for n, m in list(sys.modules.items())
                        if m is not None and (n in _PROTECTED or n == "inferbook" or n.startswith("inferbook."))}
        classes = []
        functions = []
        for n, (m, d) in self.modules.items():
            if not n.startswith("inferbook"):
                continue
            for v in d.values():
                if isinstance(v, type) and v.__module__ == n:
                    classes.append(v)
                    functions += [f for f in vars(v).values() if isinstance(f, types.FunctionType)]
                elif isinstance(v, types.FunctionType) and v.__module__ == n:
                    functions.append(v)
        torch = sys.modules.get("torch")
        if torch is not None:
            classes += [torch.Tensor, torch.nn.Module]
        self.classes = [(c, dict(vars(c))) for c in classes]
        self.functions = [(f, f.__code__, f.__defaults__, f.__kwdefaults__) for f in functions]
        self.streams = (sys.stdout, sys.stderr)
        import builtins

        self._builtins = builtins.__dict__                 # restored first, by dict methods only
        self._builtins_copy = builtins.__dict__.copy()

    def check_and_restore(self) -> list[str]:
        """What the learner's code changed since the last call (then put back as it was)."""
        now = self._builtins.copy()
        self._builtins.update(self._builtins_copy)       # first: the code below uses the built-ins
        found = [f"builtins.{k}" for k, v in self._builtins_copy.items()
                 if (not (k.startswith("__") and k.endswith("__")) or k in ("__import__", "__build_class__"))
                 and k != "_" and now.get(k, _MISSING) is not v]
        found += [c for c in self.changes() if not c.startswith("builtins.")]
        self.restore()
        return found

    def changes(self) -> list[str]:
        found = []
        for n, (m, d) in self.modules.items():
            if sys.modules.get(n) is not m:
                found.append(f"sys.modules[{n!r}]")
            now = vars(m)
            for k, v in d.items():
                if (k.startswith("__") and k.endswith("__") and k not in ("__import__", "__build_class__")) \
                        or k == "_" or isinstance(v, types.ModuleType):
                    continue
                if now.get(k, _MISSING) is not v:
                    found.append(f"{n}.{k}")
        for c, d in self.classes:
            now = vars(c)
            for k, v in d.items():
                if not (k.startswith("__") and k.endswith("__")) and now.get(k, _MISSING) is not v:
                    found.append(f"{c.__module__}.{c.__qualname__}.{k}")
        for f, code, defaults, kwdefaults in self.functions:
            if f.__code__ is not code or f.__defaults__ is not defaults or f.__kwdefaults__ is not kwdefaults:
                found.append(f"{f.__module__}.{f.__qualname__} (its code)")
        if sys.getprofile() is not None or sys.gettrace() is not None:
            found.append("sys.setprofile/settrace")
        return found

    def restore(self) -> None:
        for n, (m, d) in self.modules.items():
            sys.modules[n] = m
            now = vars(m)
            for k, v in d.items():
                if now.get(k, _MISSING) is not v:
                    with contextlib.suppress(Exception):
                        setattr(m, k, v)
        for c, d in self.classes:
            for k, v in d.items():
                if vars(c).get(k, _MISSING) is not v:
                    with contextlib.suppress(Exception):
                        setattr(c, k, v)
        for f, code, defaults, kwdefaults in self.functions:
            f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
        sys.setprofile(None)
        sys.settrace(None)
        sys.stdout, sys.stderr = self.streams


_MISSING = object()


def _where_in(exc: BaseException, filename: str | None = None) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if (f.filename == filename if filename else _student_file(f.filename))]
    if not frames:
        return ""
    f = frames[-1]
    line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f" (line {f.lineno}" + (f": `{line}`)" if line else ")")


def _syntax_message(exc: SyntaxError, who: str, offset: int = 0) -> str:
    line = (exc.text or "").strip()
    where = f" on line {exc.lineno + offset}" if exc.lineno else ""
    return f"{who} has a SyntaxError{where}: {exc.msg}" + (f": `{line}`" if line else "")


def _run_plan(plan: dict, emit) -> None:
    """Run one notebook's plan in this (forked) process, emitting one event per cell."""
    import builtins

    from IPython.core.interactiveshell import InteractiveShell

    reset()
    _GRADING.append(True)
    run = {"student_files": set()}
    _RUN.append(run)
    if plan.get("cwd"):
        with contextlib.suppress(OSError):
            os.chdir(plan["cwd"])
    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: None               # errors are reported, not printed
    shell.showsyntaxerror = lambda *a, **k: None
    main_ns = shell.user_ns
    book_ns: dict[str, Any] = {}
    snapshot: _Snapshot | None = None
    part_status: dict[int, bool] = {}
    sink = io.StringIO()
    for i, cell in enumerate(plan["cells"]):
        if cell["cell_type"] != "code":
            continue
        number = cell.get("part")
        emit({"t": "start", "i": i})
        sink.seek(0)
        sink.truncate()
        status, message = "pass", ""
        if cell["kind"] == "book":
            tampered = snapshot.check_and_restore() if snapshot else []
            _PART_STATUS.clear()
            _PART_STATUS.update(part_status)
            _CURRENT.clear()
            _VIOLATIONS.clear()
            ns = dict(main_ns)
            ns.update(book_ns)
            ns["__builtins__"] = builtins
            ns["__name__"] = "__main__"
            before = dict(ns)
            filename = f"<check {cell['id']}>"
            source = _python_source(cell["source"])
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            try:
                if tampered:
                    raise ExerciseCheckFailed(
                        f"CHECK FAILED [{'Part %d/' % number if number else ''}checks untouched]: your code "
                        f"changed {', '.join(tampered[:3])}: the package, the checks, NumPy, torch and "
                        "Python's built-ins must stay as they are while your work is graded")
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    exec(compile(source, filename, "exec"), ns)
                after = snapshot.check_and_restore() if snapshot else []
                if after:
                    raise ExerciseCheckFailed(
                        f"CHECK FAILED [{'Part %d/' % number if number else ''}checks untouched]: your code "
                        f"changed {', '.join(after[:3])} while it was checked: the package, the checks, "
                        "NumPy, torch and Python's built-ins must stay as they are while your work is graded")
            except ExerciseCheckFailed as exc:
                status, message = "fail", failure_message(str(exc))
            except SyntaxError as exc:
                status, message = "fail", _syntax_message(exc, f"the book's cell {cell['id']}")
            except BaseException as exc:  # noqa: BLE001 — every error is a result here
                status = "fail"
                message = f"{type(exc).__name__}: {exc}{_where_in(exc)}"
            finally:
                if snapshot:
                    snapshot.restore()
            for k, v in ns.items():
                if k not in before or before[k] is not v:
                    book_ns[k] = v
                    main_ns[k] = v
            if number and "part(" in cell["source"]:
                ok = status == "pass" and _PART_STATUS.get(number, True)
                part_status[number] = part_status.get(number, True) and ok
        else:
            if snapshot is None:
                snapshot = _Snapshot()
            who = (f"your answer cell {cell['id']}" if cell["kind"] == "answer"
                   else "a cell you added" + (f" (after cell {cell['after']})" if cell.get("after") else ""))
            filename = (f"<answer {cell['id']}>" if cell["kind"] == "answer" else f"<your cell {i}>")
            run["student_files"].add(filename)
            shell.compile.get_code_name = lambda raw, transformed, n, _f=filename: _f
            label = f"Part {number}/" if number else ""
            what = "answer cell runs" if cell["kind"] == "answer" else "your added cell"
            try:
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    result = shell.run_cell(cell["source"], store_history=False)
                error = result.error_before_exec or result.error_in_exec
            except BaseException as exc:  # noqa: BLE001
                error = exc
            tampered = snapshot.check_and_restore()       # before any other code runs
            if tampered:
                status = "fail"
                message = (f"CHECK FAILED [{label}checks untouched]: {who} changed {', '.join(tampered[:3])}: "
                           "the package, the checks, NumPy, torch and Python's built-ins must stay as they "
                           "are while your work is graded")
            elif error is not None:
                status = "fail"
                if isinstance(error, SyntaxError):
                    offset = 1 if cell["source"].lstrip().startswith("%%") and error.filename == "<timed exec>" else 0
                    message = f"CHECK FAILED [{label}{what}]: " + _syntax_message(error, who, offset)
                elif isinstance(error, ExerciseCheckFailed):
                    message = failure_message(str(error))
                else:
                    message = (f"CHECK FAILED [{label}{what}]: {who} raised {type(error).__name__}: "
                               f"{error}{_where_in(error)}")
        emit({"t": "end", "i": i, "status": status, "message": message})
    emit({"t": "done"})


def _runner_main() -> None:
    """`python -m inferbook.grading --runner`: read plans on stdin, run each in a forked child."""
    request = json.loads(sys.stdin.read())
    token = request["token"]
    events = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)

    def emit(event: dict) -> None:
        event["token"] = token
        events.write(json.dumps(event) + "\n")
        events.flush()

    for module in request.get("preload", []):
        with contextlib.suppress(BaseException):
            __import__(module)
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    settings = Config()
    settings.HistoryManager.enabled = False
    InteractiveShell.instance(config=settings)           # made once, copied into every child
    for k, plan in enumerate(request["plans"]):
        def emit_k(event: dict, _k=k) -> None:
            event["k"] = _k
            emit(event)

        if not hasattr(os, "fork"):
            emit_k({"t": "pid", "pid": os.getpid()})
            _run_plan(plan, emit_k)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _run_plan(plan, emit_k)
            finally:
                events.flush()
                os._exit(0)
        emit_k({"t": "pid", "pid": pid})
        _, status = os.waitpid(pid, 0)
        emit_k({"t": "exit", "status": status})


# --- the grader: both doors end here ----------------------------------------------------------------
def _part_number(title: str) -> int | None:
    m = re.match(r"Part\s+(\d+)", title)
    return int(m.group(1)) if m else None


def _preload(plans: list[dict]) -> list[str]:
    import ast

    names = []
    for plan in plans:
        for cell in plan["cells"]:
            if cell["cell_type"] != "code" or cell.get("kind") != "book":
                continue
            try:
                tree = ast.parse(_python_source(cell["source"]))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names += [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.append(node.module)
    return list(dict.fromkeys(names))


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
    for nb, name, cwd in notebooks:
        pristine = find_pristine(nb, name)
        cells, notes = build_plan(nb, pristine)
        titles = cell_parts(cells)
        for cell, title in zip(cells, titles):
            cell["part"] = _part_number(title)
        limit = float(timeout or (pristine or {}).get("timeout") or DEFAULT_TIMEOUT)
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
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen([sys.executable, "-m", "inferbook.grading", "--runner"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, env=env, cwd=plans[0]["cwd"] if plans else None)
        proc.stdin.write(json.dumps({"token": token, "plans": plans, "preload": _preload(plans)}).encode())
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
                    limit = max(limit, DEFAULT_TIMEOUT)
                part_no = plans[k]["cells"][i].get("part")
                who = f"Part {part_no}" if part_no else "The set-up"
                outcomes[k][i] = ("fail", f"CHECK FAILED [{'Part %d/' % part_no if part_no else ''}time limit]: "
                                          f"{who} timed out after {limit:g} s (this exercise allows {limit:g} s "
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
                elif event["t"] == "start":
                    cell = plans[k]["cells"][event["i"]]
                    limit = reports_meta[k][4]
                    if cell.get("part") is None and cell.get("kind") == "book":
                        limit = max(limit, DEFAULT_TIMEOUT)      # the book's set-up (imports, models)
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
        if not outcomes[k] and crash:
            notes = notes + ["the grader stopped: " + " | ".join(crash)]
        reports.append(build_report(name, cells, result, notes))
    return reports


def _now() -> float:
    import time

    return time.monotonic()


def grade_file(path: str | os.PathLike, timeout: float | None = None) -> GradeReport:
    """Grade the notebook saved at `path` (it runs in the notebook's folder)."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return grade_notebooks([(nb, path.name, path.resolve().parent)], timeout)[0]


# --- grade(): the notebook as it is in the Colab tab ------------------------------------------------
def _live_notebook() -> tuple[dict, str]:
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


def grade(notebook: str | os.PathLike | dict | None = None, quiet: bool = False) -> GradeReport | None:
    """Grade an exercise notebook exactly as `make grade` does (the same grader, in a separate process).

    With no argument: on Colab, the notebook as it is in the tab (unsaved edits included);
    elsewhere it prints the command that grades the saved file. Returns the report.
    """
    if _GRADING:
        return None                      # the notebook's own grade() cell, met while grading
    if notebook is None:
        try:
            nb, name = _live_notebook()
        except LookupError:
            print("Not on Colab: save the notebook, then grade it from the repository root with\n"
                  "  make grade NB=notebooks/exercises/<this notebook>.ipynb")
            return None
        report = grade_notebooks([(nb, name, os.getcwd())])[0]
    elif isinstance(notebook, dict):
        report = grade_notebooks([(notebook, "notebook", os.getcwd())])[0]
    else:
        report = grade_file(notebook)
    if not quiet:
        print(report)
    return report


# --- the pytest plugin (`pytest -p inferbook.grading ...`): the same grader ---------------------------
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


try:  # the hooks below need pytest, which grade() on Colab does not
    import pytest
except ImportError:  # pragma: no cover
    pass
else:
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
                raise GradeFailed(f"{first.title}: {first.message or first.status}" if first else "no parts")

        def repr_failure(self, excinfo):
            return str(excinfo.value) if isinstance(excinfo.value, GradeFailed) else super().repr_failure(excinfo)

        def reportinfo(self):
            return self.path, 0, f"{self.parent.name}::grade"

    def _terminal_summary(terminalreporter, exitstatus, config):
        for report in (config._grading_reports or {}).values():
            terminalreporter.write_sep("=", "grading report")
            terminalreporter.write_line(str(report))

    pytest_terminal_summary = pytest.hookimpl(trylast=True)(_terminal_summary)
    pytest_collect_file = pytest.hookimpl(tryfirst=True)(pytest_collect_file)


def main(argv: list[str] | None = None) -> int:
    """`python -m inferbook.grading NB...`: grade saved notebooks, print the reports."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--runner"]:
        _runner_main()
        return 0
    reports = [grade_file(p) for p in args]
    for report in reports:
        print(report)
    return 0 if reports and all(r.passed for r in reports) else 1


if __name__ == "__main__":
    from inferbook import grading as _grading    # the importable module, not this __main__ copy

    sys.exit(_grading.main())
