"""The walls around the learner's code in the grading process: an audit hook it cannot remove.

Installed once (`Walls.install`) before any of the learner's code runs; PEP 578 hooks cannot be
taken away from Python code. While a frame of the learner's code is on the stack, the hook refuses:

- frames and the garbage collector: `sys._getframe` (except from `warnings`, `logging` and the
  like, which never hand a frame back), `sys._current_frames`, `gc.get_objects/referrers/referents`,
  reading `tb_frame`, `gi_frame`, `cr_frame`, `ag_frame` and a package function's `__code__`;
  `sys.settrace/setprofile`; signal handlers (a handler is handed the interrupted frame:
  `signal.signal` refuses them, and the `_signal` module cannot be loaded again);
- leaving Python: `ctypes` (every event), other processes (`os.system`, `subprocess`, `fork`,
  `exec`, `posix_spawn`), signals to other processes (`os.kill`), links (`os.symlink`, `os.link`);
- reading the package code a part asks the learner to write (the module files of every `without`
  of the exercise, their byte code, a copy of them under any folder named `inferbook`), the
  book's solutions, tests, built pages and git objects, and the process's memory (`/proc/*/mem`);

- the grader's own state: the hook holds, where no Python object leads, the originals of the
  package code a part guards (handed only to the book's code), and answers the grading module's
  questions (who is the learner, a fresh seed) through audit events; `sys.addaudithook` (a hook
  of the learner's would see those events);

and, whoever asks, writing anything into the package, the book's repository, `site-packages` or
the standard library. Each refusal raises `PermissionError` in the learner's code and is recorded
(`Walls.take_violations`): the cell that ran it fails, even if their code caught the error.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import threading
from pathlib import Path

_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "gi_code", "cr_code", "ag_code"}
_ALWAYS_REFUSED = {"sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                   "sys.settrace", "sys.setprofile", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg",
                   "os.symlink", "os.link", "signal.pthread_kill", "os.startfile", "sys.remote_exec",
                   "sys.addaudithook"}
_WRITE_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                 "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree",
                 "os.replace"}
# Library code that calls sys._getframe for its own bookkeeping and never returns the frame.
_FRAME_USERS = ("warnings", "logging", "typing", "enum", "collections", "dataclasses", "abc",
                "functools", "torch", "triton", "numpy", "IPython", "traitlets", "importlib", "re", "inferbook")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Walls:
    """The audit hook of one grading process (see the module docstring)."""

    def __init__(self, package_dir: Path, forbidden_modules: list[str]):
        self.violations: list[str] = []
        self._guarded: dict[int, tuple] = {}            # key -> (original package function, its name)
        self._urandom = os.urandom                      # the real one, before any learner code ran
        self.tainted: set[str] = set()                   # file names the learner's code compiled
        self._learner_cache: dict[str, bool] = {}
        self._busy = threading.local()
        package_dir = Path(package_dir).resolve()
        self.package_dir = str(package_dir)
        repo = package_dir.parent.parent
        self.repo = str(repo) if (repo / "_config.yml").is_file() and (repo / "code").is_dir() else None
        roots = {self.package_dir, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                 sysconfig.get_paths()["platlib"]}
        with_user = [p for p in sys.path if p and "site-packages" in p]
        roots |= set(with_user)
        if self.repo:
            roots.add(self.repo)
        self.no_write = tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))
        paths = sysconfig.get_paths()
        library = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], self.package_dir,
                   *with_user}
        # Code from these places is the book's or a library's; code from anywhere else (a cell, a
        # file the learner wrote, a string they compiled) is the learner's.
        self.trusted = tuple(sorted({os.path.realpath(p) + os.sep for p in library if p} | {p + os.sep for p in library if p})) \
            + ("<frozen ", "<check ", "<inferbook.grading guard>", "<string>")
        self.no_read_dirs = tuple(os.path.join(self.repo, d) + os.sep for d in
                                  ("notebooks/solutions", "tests", "_build", ".git")) if self.repo else ()
        self.forbidden_stems = {m.rsplit(".", 1)[-1] for m in forbidden_modules}
        self.forbidden_modules = set(forbidden_modules)

    # --- who is asking -------------------------------------------------------------------------
    def is_learner_file(self, filename: str) -> bool:
        """Is code from `filename` the learner's (anything not the book's or a library's)?"""
        known = self._learner_cache.get(filename)
        if known is None:
            known = filename in self.tainted or not filename.startswith(self.trusted)
            self._learner_cache[filename] = known
        return known

    def _learner_on_stack(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if self.is_learner_file(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return False

    def _taint(self, filename) -> None:
        if isinstance(filename, (str, bytes)):
            name = os.fsdecode(filename)
            self.tainted.add(name)
            self._learner_cache.pop(name, None)

    def _caller(self) -> tuple[str, str]:
        """(module name, file name) of the code that made the audited call."""
        frame = sys._getframe(3)          # _caller <- _check <- _hook <- the audited call's caller
        if frame is None:
            return "", ""
        return str(frame.f_globals.get("__name__", "")), frame.f_code.co_filename

    # --- the hook ----------------------------------------------------------------------------------
    def install(self) -> None:
        """Add the hook (for the rest of this process's life) and close the signal door."""
        sys.dont_write_bytecode = True
        for name in list(linecache.cache):             # source read earlier stays unreadable
            if name.startswith(self.package_dir) or self._forbidden_source(os.path.realpath(name)):
                linecache.cache.pop(name, None)
        _close_signal_handlers()
        sys.addaudithook(self._hook)

    def take_violations(self) -> list[str]:
        found, self.violations[:] = list(self.violations), []
        return found

    def _hook(self, event: str, args: tuple) -> None:
        if event not in _WATCHED or getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            problem = self._check(event, args)
        finally:
            self._busy.on = False
        if problem:
            raise PermissionError(f"the grader refuses this while your work is graded: {problem}")

    def _check(self, event: str, args: tuple) -> str | None:
        if event.startswith("inferbook."):
            return self._grading_event(event, args)
        if event in ("compile", "exec"):
            filename = args[1] if event == "compile" and len(args) > 1 else getattr(args[0], "co_filename", None)
            if filename is None or not self._learner_on_stack():
                return None
            _, caller_file = self._caller()
            name = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else ""
            source = args[0] if event == "compile" else None
            if self.is_learner_file(caller_file) or not _is_source_of(source, name):
                self._taint(filename)      # their own code, under whatever name they gave it
            return None
        if event == "code.__new__":
            if self._learner_on_stack():
                return self._record("building a code object")
            return None
        if event == "open":
            return self._check_open(args)
        if event in _WRITE_EVENTS:
            paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
            if event in ("shutil.copyfile", "shutil.copytree"):
                paths = paths[1:2]                         # the copy is written; its source is read
            if any(self._protected(p) for p in paths):
                return self._record(f"{event} inside the book or the package ({os.fsdecode(paths[0])})",
                                    always=True)
            return None
        if event == "import":
            name = args[0] if args else ""
            binary = args[1] if len(args) > 1 else None
            if isinstance(binary, str) and not os.path.realpath(binary).startswith(self.trusted):
                if self._learner_on_stack():
                    return self._record(f"loading the binary module {binary}")
            if name in ("_signal", "signal", "_imp", "gc", "ctypes", "_ctypes") or name in self.forbidden_modules:
                if name not in sys.modules and self._learner_on_stack():
                    return self._record(f"importing {name} afresh")
            return None
        if event == "object.__getattr__":
            obj, attr = (args + (None, None))[:2]
            if attr in _FRAME_ATTRS or (attr == "__code__" and _is_package_function(obj)):
                if self._learner_on_stack():
                    return self._record(f"reading .{attr}")
            return None
        if event == "sys._getframe":
            caller, filename = self._caller()
            if caller.split(".")[0] in _FRAME_USERS and not self.is_learner_file(filename):
                return None
            if self._learner_on_stack():
                return self._record("sys._getframe (the stack of the checks)")
            return None
        if event.startswith("ctypes.") or event in _ALWAYS_REFUSED:
            if self._learner_on_stack():
                return self._record(event)
        return None

    def _grading_event(self, event: str, args: tuple) -> str | None:
        """The grading module's questions (`inferbook.grading._ask`): answered into the list `box`
        it passes last; what must stay out of the learner's reach is refused to their code."""
        box = args[-1] if args and type(args[-1]) is list else None
        if event == "inferbook.grading.is_learner" and box is not None and isinstance(args[0], str):
            box.append(self.is_learner_file(args[0]))
        elif event == "inferbook.grading.signal_handler":
            return self._record("a signal handler (it would see the checks' frames)")
        elif event == "inferbook.grading.seed" and box is not None:
            box.append(int.from_bytes(self._urandom(8), "little"))   # a fresh draw: no secret in it
        elif self._learner_on_stack():
            if event == "inferbook.grading.guarded" and args and args[0] in self._guarded:
                return self._record(f"{self._learner_function()} calls the package's {self._guarded[args[0]][1]}: "
                                    "this part asks you to write it yourself (the package's version is unavailable "
                                    "while the part is checked)")
            return self._record(f"the grader's own state ({event.rsplit('.', 1)[-1]})")
        elif event == "inferbook.grading.register" and box is not None and len(args) == 4:
            self._guarded[args[0]] = (args[1], args[2])
            box.append(True)
        elif event == "inferbook.grading.unregister" and args:
            self._guarded.pop(args[0], None)
        elif event == "inferbook.grading.guarded" and box is not None and args and args[0] in self._guarded:
            box.append(self._guarded[args[0]])
        return None

    def _learner_function(self) -> str:
        """The learner's innermost function on the stack ('your answer cell' for a cell's top level)."""
        frame = sys._getframe(3)
        while frame is not None:
            if self.is_learner_file(frame.f_code.co_filename):
                return "your answer cell" if frame.f_code.co_name == "<module>" else frame.f_code.co_name
            frame = frame.f_back
        return "your code"

    def _check_open(self, args: tuple) -> str | None:
        path, mode, flags = (args + (None, None, None))[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None
        text = os.fsdecode(path)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing:
            if self._protected(text):
                return self._record(f"writing {text} (inside the book or the package)", always=True)
            return None
        full = os.path.realpath(text)
        if full.endswith("/mem") and full.startswith("/proc/"):
            return self._record(f"reading {text}")
        if full.endswith((".pyc", ".so", ".pyd")) and not full.startswith(self.trusted):
            if self._learner_on_stack():
                return self._record(f"loading compiled code from {text}")
        secret = (self.no_read_dirs and full.startswith(self.no_read_dirs)) or self._forbidden_source(full)
        if secret and self._learner_on_stack():
            return self._record(f"reading {text} (the book's answers or the code this part asks you to write)")
        return None

    def _forbidden_source(self, full: str) -> bool:
        parent, base = os.path.split(full)
        stem = base.split(".")[0]
        if stem not in self.forbidden_stems:
            return False
        folder = os.path.basename(parent)
        if folder == "__pycache__":
            folder = os.path.basename(os.path.dirname(parent))
        return folder == "inferbook"

    def _protected(self, path) -> bool:
        full = os.path.realpath(os.fsdecode(path))
        return (full + os.sep).startswith(self.no_write)

    def _record(self, what: str, always: bool = False) -> str:
        if always and not self._learner_on_stack():
            return what                                   # refused, but not the learner's doing
        self.violations.append(what)
        return what


_WATCHED = ({"inferbook.grading.is_learner", "inferbook.grading.guarded", "inferbook.grading.register",
             "inferbook.grading.unregister", "inferbook.grading.seed", "inferbook.grading.signal_handler"}
            | {"open", "import", "object.__getattr__", "sys._getframe", "compile", "exec", "code.__new__"} | _ALWAYS_REFUSED | _WRITE_EVENTS
            | {"ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.call_function",
               "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata/buffer", "ctypes.create_string_buffer",
               "ctypes.create_unicode_buffer", "ctypes.get_errno", "ctypes.set_errno", "ctypes.dlsym/handle",
               "ctypes.set_exception", "ctypes.PyObj_FromPtr"})


def _is_source_of(source, filename: str) -> bool:
    """Is `source` (what is being compiled) the text of the existing file `filename`?"""
    if source is None or not os.path.isfile(filename):
        return source is None and os.path.isfile(filename)
    if not isinstance(source, (str, bytes)):
        return False                       # an AST: built by the learner's code
    try:
        with open(filename, "rb") as f:
            text = f.read()
    except OSError:
        return False
    return text == (source.encode("utf-8") if isinstance(source, str) else source)


def _is_package_function(obj) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and (module == "inferbook" or module.startswith("inferbook."))


def _close_signal_handlers() -> None:
    """Make `signal.signal` refuse handlers everywhere it is reachable (a handler gets the
    interrupted frame, the checks' own), and `_imp` refuse to load `_signal` a second time."""
    import _imp
    import signal

    import _signal

    originals = {id(signal.signal), id(_signal.signal)}

    def refused(*args, **kwargs):             # no closure: nothing here leads to the walls
        sys.audit("inferbook.grading.signal_handler")
        raise PermissionError("the grader refuses signal handlers while your work is graded")

    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if id(value) in originals:
                namespace[key] = refused
    create = _imp.create_builtin

    def create_builtin(spec):
        if getattr(spec, "name", "") == "_signal":
            raise PermissionError("the grader refuses to load _signal again")
        return create(spec)

    _imp.create_builtin = create_builtin
