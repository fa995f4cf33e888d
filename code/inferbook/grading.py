"""Checks for the exercise notebooks' check cells: named checks and parts (the in-cell half of grading).

In a check cell:

    with part(2, needs=[1], without=["inferbook.decode"]):   # Part 2; runs once Part 1 passed
        check_equal("cached decoder tokens", got=mine.tolist(), expected=ref.tolist(), index="step")

Every failure is an `ExerciseCheckFailed` whose message starts `CHECK FAILED [Part 2/<check>]:`.
Inside `part(...)`, an exception raised by the learner's code becomes such a failure too (with the
line of their code that raised), a part whose prerequisites failed says "fix Part N first", and
the package code named in `without` is unavailable to the learner's code (a call fails the part:
the part asks them to write that algorithm). `hidden=True` on a check withholds the expected
value (cases drawn afresh at every grading, so a table typed from messages cannot pass). Every
answer is converted to plain built-in values (`plain`) before it is compared: an `int` subclass
whose `==` is always true is not an int here.

`grade()` is the Colab door of the grader (`inferbook.grading_runner`); the whole design, and what
stays out of the grader's reach, is described there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import math
import os
import sys
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Iterable

from .grading_plan import GradeReport
from .grading_runner import grade_file, grade_notebooks, live_notebook


class ExerciseCheckFailed(AssertionError):
    """Raised by a check that fails; the message starts with 'CHECK FAILED [part/name]'."""


# --- state of a grading run (empty in a live kernel) -------------------------------------------------
@dataclass
class GradingState:
    """What a grading process knows: which files are the learner's, which parts passed, the seeds."""
    grading: bool = False                       # true inside the grading process (grade() does nothing)
    student_files: set | None = None            # code file names of the learner's cells (grading only)
    part_status: dict = field(default_factory=dict)   # part number -> did its latest check cell pass
    current: list = field(default_factory=list)       # the part whose check cell is running (a stack)
    violations: list = field(default_factory=list)    # calls of package code a part asks them to write


# While grading, what must stay out of the learner's reach lives in the walls' audit hook
# (`inferbook.grading_walls`), which no Python object refers to: who is the learner, the package
# code a part guards, the seeds of hidden cases. This module asks it through audit events; the
# grading process checks after every cell that nothing here was changed (`grading_sandbox`).
_ASK_LEARNER = "inferbook.grading.is_learner"       # (filename, box): box gets [bool]
_ASK_GUARDED = "inferbook.grading.guarded"          # (key, box): box gets [(original, name)] or it refuses
_REGISTER = "inferbook.grading.register"            # (key, original, name, box): box gets [True]
_UNREGISTER = "inferbook.grading.unregister"        # (key,)
_ASK_SEED = "inferbook.grading.seed"                # (box,): box gets [64-bit seed]


def _ask(event: str, *args) -> list:
    box: list = []
    sys.audit(event, *args, box)
    return box


STATE = GradingState()


def student_file(filename: str) -> bool:
    """Is `filename` code the learner wrote (an answer cell or a cell they added)?"""
    if _ask(_ASK_LEARNER, filename) == [True]:
        return True
    if STATE.student_files is not None:
        return filename in STATE.student_files or filename.startswith("<timed ")
    return _in_notebook_code(filename)

def _in_notebook_code(filename: str) -> bool:
    """True for code typed in a notebook cell (IPython's cell files, or the grader's cells)."""
    return (filename.startswith(("<cell ", "<answer ", "<your cell ", "<check ", "<timed "))
            or "ipykernel_" in filename or "ipython-input" in filename)


# --- parts ----------------------------------------------------------------------------------------
def reset() -> None:
    """Forget which parts passed (a fresh grading run)."""
    STATE.part_status.clear()
    STATE.current.clear()
    STATE.violations.clear()


def label(name: str) -> str:
    """'Part N/name' while Part N's checks run, else `name`."""
    return f"Part {STATE.current[-1]}/{name}" if STATE.current else name


def fail(name: str, message: str) -> None:
    """Fail check `name` with `message` (as 'CHECK FAILED [Part N/name]: message')."""
    raise ExerciseCheckFailed(f"CHECK FAILED [{label(name)}]: {message}")


def _explain(exc: BaseException) -> tuple[str, str]:
    """(check name, message) for an exception raised while a part's checks ran."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = frames[0].filename if frames else ""
    if STATE.student_files is not None:
        yours = [f for f in frames if student_file(f.filename)]
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
        STATE.current.append(self.number)
        missing = [n for n in self.needs if not STATE.part_status.get(n, False)]
        if missing:
            STATE.part_status[self.number] = False
            STATE.current.pop()
            which = " and ".join(f"Part {n}" for n in missing)
            raise ExerciseCheckFailed(
                f"CHECK FAILED [Part {self.number}/needs {which}]: fix {which} first "
                f"(this part uses {'its' if len(missing) == 1 else 'their'} answers)")
        self._violations = len(STATE.violations)
        # Only the grader can tell the book's cells from the learner's, so only it guards.
        self._guards = install_guards(self.without) if self.without and STATE.student_files is not None else []
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            remove_guards(self._guards)
            self._guards = []
            used = STATE.violations[self._violations:]
            del STATE.violations[self._violations:]
            if used:
                STATE.part_status[self.number] = False
                raise ExerciseCheckFailed(f"CHECK FAILED [Part {self.number}/your own code]: {used[0]}") from None
            if exc is None:
                STATE.part_status[self.number] = True
                return False
            STATE.part_status[self.number] = False
            if isinstance(exc, ExerciseCheckFailed) or not isinstance(exc, Exception):
                return False
            name, message = _explain(exc)
            raise ExerciseCheckFailed(f"CHECK FAILED [Part {self.number}/{name}]: {message}") from None
        finally:
            if STATE.current:
                STATE.current.pop()


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


def install_guards(specs: list[str]) -> list[tuple[types.FunctionType, types.CodeType, int]]:
    """Make the package code `specs` names fail when the learner's code calls it (until removed)."""
    installed = []
    for spec in specs:
        for name, fn in _functions_of(spec):
            if fn.__code__.co_filename == "<inferbook.grading guard>":
                continue                                       # guarded already (nested parts)
            original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, None)
            original.__kwdefaults__ = fn.__kwdefaults__
            key = id(original)
            if _ask(_REGISTER, key, original, name) != [True]:
                _GUARDED[key] = (original, name)   # no walls (outside the grading process)
            installed.append((fn, fn.__code__, key))
            fn.__code__ = _guard_code(key)
    return installed


def remove_guards(installed) -> None:
    """Put back the package functions `install_guards` replaced."""
    for fn, code, key in installed:
        fn.__code__ = code
        _GUARDED.pop(key, None)
        sys.audit(_UNREGISTER, key)


def _student_caller(frame) -> str | None:
    """The learner's function on the call stack above `frame`, if any."""
    names = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if STATE.student_files is not None:
            if student_file(filename):
                return "your answer cell" if frame.f_code.co_name == "<module>" else frame.f_code.co_name
        elif _in_notebook_code(filename) and not filename.startswith("<check "):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    # In a live kernel every cell is notebook code: the outermost one is the check cell.
    if len(names) >= 2:
        return names[-2] if names[-2] != "<module>" else "your answer cell"
    return None


def _guarded(key: int, args: tuple, kwargs: dict) -> Any:
    held = _ask(_ASK_GUARDED, key)           # the walls refuse the learner's code (PermissionError)
    if held:
        original, _ = held[0]
        return original(*args, **kwargs)
    original, name = _GUARDED[key]
    culprit = _student_caller(sys._getframe(2))
    if culprit is not None:
        message = (f"{culprit} calls the package's {name}: this part asks you to write it yourself "
                   "(the package's version is unavailable while the part is checked)")
        STATE.violations.append(message)
        raise ExerciseCheckFailed(f"CHECK FAILED [{label('your own code')}]: {message}")
    return original(*args, **kwargs)


# --- checks ---------------------------------------------------------------------------------------
HIDDEN = "(this case is drawn afresh at every grading; its expected value is not shown)"


def check(name: str, condition: Any, expected: str) -> None:
    """Pass if `condition` is true; else fail, saying what was `expected` (never a closed form)."""
    value = plain(condition)
    if type(value) not in (bool, int, float) or not value:
        fail(name, f"expected {expected}")
    print(f"ok: {label(name)}")


def plain(value: Any, _depth: int = 0) -> Any:
    """`value` as plain built-in data, read with the built-in types' own methods: exact bool,
    int, float, str and None; lists (from lists, tuples, arrays, tensors); dicts; dataclasses as
    dicts of their fields. A subclass of a built-in becomes that built-in: its own `==`,
    `__iter__` or `tolist` is never called. Anything else is returned as it is (and is equal
    only to an object of the very same type, see `first_difference`)."""
    if _depth > 50:
        return value
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if isinstance(value, bool):
        return bool.__bool__(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return torch.Tensor.tolist(torch.Tensor.detach(value).cpu())
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        return np.ndarray.tolist(np.array(value, subok=False))
    if isinstance(value, (list, tuple)):
        getitem, length = (list.__getitem__, list.__len__) if isinstance(value, list) else \
            (tuple.__getitem__, tuple.__len__)
        return [plain(getitem(value, i), _depth + 1) for i in range(length(value))]
    if isinstance(value, dict):
        return {plain(k, _depth + 1): plain(v, _depth + 1) for k, v in dict.items(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(object.__getattribute__(value, f.name), _depth + 1)
                for f in dataclasses.fields(value)}
    return value


def _plain(value: Any) -> Any:
    return plain(value)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b) and not (type(a) in (int, float) and type(b) in (int, float)):
        return False
    if type(a) in (int, float):
        return a == b or (type(a) is float and type(b) is float and math.isnan(a) and math.isnan(b))
    if type(a) in (bool, str) or a is None:
        return a == b
    return type(a) is type(b) and a == b          # same book type (its own ==)


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
        fail(name, f"no answer yet (got {got!r}). {hint}".rstrip())
    problem = _type_problem(got, expected)
    if problem:
        fail(name, f"{problem}. {hint}".rstrip())
    diff = first_difference(got, expected)
    if diff is not None:
        where, e, g = diff
        at = _where(where, index)
        length = ""
        g_all, e_all = _plain(got), _plain(expected)
        if isinstance(g_all, list) and isinstance(e_all, list) and len(g_all) != len(e_all):
            length = f" ({len(e_all)} expected, {len(g_all)} returned)"
        if hidden:
            fail(name, f"got {_short(g)}{at}, which is wrong{length} {HIDDEN}. {hint}".rstrip())
        lead = f"first difference{at}: expected" if at else "expected"
        fail(name, f"{lead} {_short(e)}, got {_short(g)}{length}. {hint}".rstrip())
    print(f"ok: {label(name)}")


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool", "bool_", "bool8")


def check_close(name: str, got: Any, expected: float, rel: float = 1e-6, abs_: float = 0.0, hint: str = "",
                hidden: bool = False) -> None:
    """Pass if the number `got` is within `rel` (relative) or `abs_` of `expected` (a bool is not
    a number here, as in check_equal). hidden: the message never shows the expected value."""
    value = plain(got)
    if isinstance(value, list) and len(value) == 1 and not _is_bool(got):
        value = value[0]                               # a one-element array or tensor
    value = float(value) if type(value) in (int, float) else None
    expected = float(plain(expected))
    shown = "" if hidden else f" close to {expected!r}"
    if value is None:
        fail(name, f"expected a number{shown}, got {_kind(got)}. {hint}".rstrip())
    if not math.isfinite(value):
        fail(name, f"expected a finite number{shown}, got {value!r}. {hint}".rstrip())
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=abs_):
        if hidden:
            way = "too large" if value > expected else "too small"
            fail(name, f"got {value!r}, which is {way} {HIDDEN}. {hint}".rstrip())
        fail(name, f"expected {expected!r} (tolerance rel {rel:g}, abs {abs_:g}), got {value!r}. {hint}".rstrip())
    print(f"ok: {label(name)}")


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
        fail(name, f"expected an array or tensor of numbers of shape {tuple(e.shape)}, got {_kind(got)}. "
                    f"{hint}".rstrip())
    if g.shape != e.shape:
        fail(name, f"expected shape {tuple(e.shape)}, got {tuple(g.shape)}. {hint}".rstrip())
    bad = ~np.isclose(g, e, rtol=rtol, atol=atol)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        at = _where(where, index)
        if hidden:
            fail(name, f"got {g[where]:.6g}{at}, which is wrong {HIDDEN}. {hint}".rstrip())
        lead = f"first difference{at}: expected" if at else "expected"
        fail(name, f"{lead} {e[where]:.6g}, got {g[where]:.6g}. {hint}".rstrip())
    print(f"ok: {label(name)}")


def fresh_seed() -> int:
    """A 64-bit seed drawn afresh at every run. While grading, the walls draw it with the
    `os.urandom` they captured before any of the learner's code ran (patching `os.urandom` or
    `random` changes nothing, and the learner's code cannot ask for one)."""
    held = _ask(_ASK_SEED)
    if held:
        return held[0]
    return int.from_bytes(os.urandom(8), "little")


def fresh_rng():
    """A NumPy generator seeded afresh at every run: hidden cases a message never printed."""
    import numpy as np

    return np.random.default_rng(fresh_seed())




# --- grade(): the notebook as it is in the Colab tab ------------------------------------------------
def grade(notebook: str | os.PathLike | dict | None = None, quiet: bool = False) -> GradeReport | None:
    """Grade an exercise notebook exactly as `make grade` does (the same grader, in a separate process).

    With no argument: on Colab, the notebook as it is in the tab (unsaved edits included);
    elsewhere it prints the command that grades the saved file. Returns the report.
    """
    if STATE.grading:
        return None                      # the notebook's own grade() cell, met while grading
    if notebook is None:
        try:
            nb, name = live_notebook()
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
