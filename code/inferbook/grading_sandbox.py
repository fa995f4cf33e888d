"""The grading process: runs one notebook's plan and reports each cell as one JSON line.

`python -m inferbook.grading_sandbox` reads {token, plans, preload} on stdin, imports what the
book's cells import, and runs each plan in a fresh forked child. The child draws the seeds of
the hidden cases (`grading.fresh_seed`), raises the walls (`inferbook.grading_walls`) before any
of the learner's code runs, then runs the cells: the book's set-up and check cells in a
namespace of their own with the package, NumPy, torch and the built-ins restored (a change made
by the learner's code is reported as a failure); the learner's answer cells and the code cells
they added through IPython (magics such as `%%time` work), with the package code their part asks
them to write unavailable (`part(without=...)`) while they run, and every function they define
wrapped so that what it returns reaches the checks as plain built-in values, arrays and tensors
(`canonical`). Only the events on the output stream leave the child; the grader
(`inferbook.grading_runner`) enforces the time limits.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import linecache
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from . import grading
from .grading import ExerciseCheckFailed
from .grading_plan import failure_message, forbidden_code, python_source
from .grading_walls import Walls

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
        self.trust_state()

    def trust_state(self) -> None:
        """Record the grading state as it is now (the grading process's own doing): the fields that
        say who the learner is and whether this is a grading, read with `object`'s own methods."""
        state = grading.STATE
        self._state = (state, type(state), dict(object.__getattribute__(state, "__dict__")))

    def _state_changes(self) -> list[str]:
        state, kind, fields = self._state
        found = []
        if grading.__dict__.get("STATE") is not state:
            found.append("inferbook.grading.STATE")
        if type(state) is not kind:
            found.append("inferbook.grading.STATE.__class__")
        now = object.__getattribute__(state, "__dict__")
        for k, v in fields.items():
            if dict.get(now, k, _MISSING) is not v:
                found.append(f"inferbook.grading.STATE.{k}")
        if type(fields.get("student_files")) is not frozenset:
            found.append("inferbook.grading.STATE.student_files")
        found += [f"inferbook.grading.STATE.{k}" for k in dict.keys(now) if k not in fields]
        return found

    def _restore_state(self) -> None:
        state, kind, fields = self._state
        grading.__dict__["STATE"] = state
        with contextlib.suppress(Exception):
            object.__setattr__(state, "__class__", kind)
        now = object.__getattribute__(state, "__dict__")
        dict.clear(now)
        dict.update(now, fields)

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
        found = self._state_changes()
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
        self._restore_state()
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




def canonical(value: Any, _depth: int = 0) -> Any:
    """`value` rebuilt from the built-in types: exact bool/int/float/str, tuples, lists, dicts,
    NumPy arrays and torch tensors of the base classes (copies, read with the base classes' own
    methods). Anything else (an object of a class of the learner's) is returned as it is."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes) or _depth > 50:
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            copy = torch.Tensor.clone(torch.Tensor.detach(value))
            return torch.Tensor.as_subclass(copy, torch.Tensor)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return np.array(value, subok=False, copy=True)
    if np is not None and isinstance(value, np.generic):
        return np.array(value, subok=False)[()]
    if isinstance(value, (bool, int, float, str)):
        return grading.plain(value)
    if isinstance(value, tuple):
        return tuple(canonical(tuple.__getitem__(value, i), _depth + 1) for i in range(tuple.__len__(value)))
    if isinstance(value, list):
        return [canonical(list.__getitem__(value, i), _depth + 1) for i in range(list.__len__(value))]
    if isinstance(value, dict):
        return {canonical(k, _depth + 1): canonical(v, _depth + 1) for k, v in dict.items(value)}
    return value


def _wrap_answers(namespace: dict, before: dict) -> None:
    """Replace each function a learner's cell (re)defined by one returning `canonical` values."""
    for key, value in list(namespace.items()):
        if (isinstance(value, types.FunctionType) and before.get(key) is not value
                and not getattr(value, "__inferbook_canonical__", False)):
            inner = value

            @functools.wraps(inner)
            def answer(*args, _inner=inner, **kwargs):
                return canonical(_inner(*args, **kwargs))

            answer.__inferbook_canonical__ = True
            namespace[key] = answer


def _where_in(exc: BaseException, filename: str | None = None) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if (f.filename == filename if filename else grading.student_file(f.filename))]
    if not frames:
        return ""
    f = frames[-1]
    line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f" (line {f.lineno}" + (f": `{line}`)" if line else ")")


def _syntax_message(exc: SyntaxError, who: str, offset: int = 0) -> str:
    line = (exc.text or "").strip()
    where = f" on line {exc.lineno + offset}" if exc.lineno else ""
    return f"{who} has a SyntaxError{where}: {exc.msg}" + (f": `{line}`" if line else "")


def _tampered(label: str, who: str, what: list[str], during: str = "") -> str:
    return (f"CHECK FAILED [{label}checks untouched]: {who} changed {', '.join(what[:3])}{during}: the "
            "package, the checks, NumPy, torch and Python's built-ins must stay as they are while your "
            "work is graded")


def _walled(label: str, who: str, refused: list[str]) -> str:
    calls = [r for r in refused if "calls the package's" in r]
    if calls:                                 # package code the part asks them to write
        return f"CHECK FAILED [{label}your own code]: {calls[0]}"
    name = "your own code" if any("asks you to write" in r for r in refused) else "checks untouched"
    return (f"CHECK FAILED [{label}{name}]: {who} tried {refused[0]}, which the grader refuses while "
            "your work is graded")


def _run_plan(plan: dict, emit) -> None:
    """Run one notebook's plan in this (forked) process, emitting one event per cell."""
    import builtins

    from IPython.core.interactiveshell import InteractiveShell

    state = grading.STATE
    grading.reset()
    state.grading = True
    state.student_files = frozenset()
    if plan.get("cwd"):
        with contextlib.suppress(OSError):
            os.chdir(plan["cwd"])
        if plan["cwd"] not in sys.path:
            sys.path.append(plan["cwd"])           # the learner's own modules, after the book's
    forbidden = forbidden_code(plan["cells"])
    modules = sorted({_module_of(spec) for specs in forbidden.values() for spec in specs})
    walls = Walls(Path(grading.__file__).resolve().parent, modules)
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
        label = f"Part {number}/" if number else ""
        emit({"t": "start", "i": i})
        sink.seek(0)
        sink.truncate()
        status, message = "pass", ""
        if cell["kind"] == "book":
            tampered = snapshot.check_and_restore() if snapshot else []
            state.part_status.clear()
            state.part_status.update(part_status)
            state.current.clear()
            state.violations.clear()
            ns = dict(main_ns)
            ns.update(book_ns)
            ns["__builtins__"] = builtins
            ns["__name__"] = "__main__"
            before = dict(ns)
            filename = f"<check {cell['id']}>"
            source = python_source(cell["source"])
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            try:
                if tampered:
                    raise ExerciseCheckFailed(_tampered(label, "your code", tampered))
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    exec(compile(source, filename, "exec"), ns)
                after = snapshot.check_and_restore() if snapshot else []
                if after:
                    raise ExerciseCheckFailed(_tampered(label, "your code", after, " while it was checked"))
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
            refused = walls.take_violations() if snapshot else []
            if refused:
                status, message = "fail", _walled(label, "your code", refused)
            for k, v in ns.items():
                if k not in before or before[k] is not v:
                    book_ns[k] = v
                    main_ns[k] = v
            if number and "part(" in cell["source"]:
                ok = status == "pass" and state.part_status.get(number, True)
                part_status[number] = part_status.get(number, True) and ok
        else:
            if snapshot is None:
                snapshot = _Snapshot()
                walls.install()                               # before the learner's first line
            who = (f"your answer cell {cell['id']}" if cell["kind"] == "answer"
                   else "a cell you added" + (f" (after cell {cell['after']})" if cell.get("after") else ""))
            filename = (f"<answer {cell['id']}>" if cell["kind"] == "answer" else f"<your cell {i}>")
            state.student_files = state.student_files | {filename}
            snapshot.trust_state()
            shell.compile.get_code_name = lambda raw, transformed, n, _f=filename: _f
            what = "answer cell runs" if cell["kind"] == "answer" else "your added cell"
            state.violations.clear()
            state.current[:] = [number] if number else []
            guards = grading.install_guards(forbidden.get(number, [])) if number else []
            before = dict(main_ns)
            try:
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    result = shell.run_cell(cell["source"], store_history=False)
                error = result.error_before_exec or result.error_in_exec
            except BaseException as exc:  # noqa: BLE001
                error = exc
            finally:
                grading.remove_guards(guards)
                state.current.clear()
            used = list(state.violations)
            tampered = snapshot.check_and_restore()       # before any other code runs
            refused = walls.take_violations()
            _wrap_answers(main_ns, before)
            if tampered:
                status, message = "fail", _tampered(label, who, tampered)
            elif refused:
                status, message = "fail", _walled(label, who, refused)
            elif used:
                status, message = "fail", f"CHECK FAILED [{label}your own code]: {used[0]}"
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


def _module_of(spec: str) -> str:
    """The module behind a `without` entry ("inferbook.paged.paged_attention" -> "inferbook.paged")."""
    import importlib

    try:
        importlib.import_module(spec)
        return spec
    except ImportError:
        return spec.rpartition(".")[0]


def main() -> None:
    """`python -m inferbook.grading_sandbox`: read plans on stdin, run each in a forked child."""
    request = json.loads(sys.stdin.read())
    token = request["token"]
    events = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)

    def emit(event: dict) -> None:
        event["token"] = token
        events.write(json.dumps(event) + "\n")
        events.flush()

    expected = request.get("package")
    here = str(Path(grading.__file__).resolve().parent)
    if expected and here != str(Path(expected).resolve()):
        for k, _ in enumerate(request["plans"]):     # another package named inferbook came first
            emit({"t": "done", "k": k, "refused": f"the grader imported {here}, not the book's {expected}"})
        return
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
            except BaseException as exc:              # the grader's own failure: say what
                os.write(2, f"the grading process failed: {type(exc).__name__}: {exc!r}\n".encode(errors="replace"))
            finally:
                events.flush()
                os._exit(0)
        emit_k({"t": "pid", "pid": pid})
        _, status = os.waitpid(pid, 0)
        emit_k({"t": "exit", "status": status})



if __name__ == "__main__":
    from inferbook import grading_sandbox as _sandbox    # the importable module, not this __main__ copy

    _sandbox.main()
