"""Integrity attacks on the grader: each one a determined learner's answer cell, graded with the
documented command (`make grade`'s pytest line); each must fail, at the part it attacks, for the
reason it names (so a test passes only when that wall stopped it, not some other error).

Every attack would pass without its wall: the frame, `gc`, signal, tracer and `ctypes` attacks
read the expected budget `b` that Exercise 8.1's Part 1 computes before it calls the learner's
function; the package attacks reach the implementation Part 1 forbids (`inferbook.rules`); the
equality attacks return objects equal to anything; the file attacks write where a later grading
would read; the state attacks change or read the grader's own state (who is the learner, the
guarded originals, the seeds, the walls) and put it back. The out-of-scope list of
`inferbook.grading_runner` is tried at the end (test_the_out_of_scope_list_is_tried_once), after a
package a notebook outside the book writes beside itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grading_helpers import EXERCISES, ROOT, grade_with_pytest, solution_answer, variant

E8, E2 = "ex08_plan_deployment", "ex02_kv_sizing"

# The learner's function hands back the expected budget it found (the cheat), given the check
# cell's globals `ns`, where Part 1 bound `b` just before calling it.
CHEAT = '''
import sys, math
def _answer(ns):
    b = ns["b"]
    return {"requested": b.usable_bytes, "weights": b.weight_bytes, "kv": b.kv_budget_bytes}
'''


def budget(body: str, prelude: str = "") -> str:
    """An answer cell for Exercise 8.1's `budget`: `prelude`, then my_kv_budget running `body`
    (which must end by returning)."""
    lines = "\n".join("    " + ln for ln in body.strip().splitlines())
    return f"{CHEAT}\n{prelude}\ndef my_kv_budget(spec, g, tp, utilization, runtime):\n{lines}\n"


PACKAGE_CALL = "return {k: getattr(b, v) for k, v in (('requested', 'usable_bytes'), ('weights', " \
               "'weight_bytes'), ('kv', 'kv_budget_bytes'))}"
LAYOUT = "b = layout(spec, g, tp, 1, 'bf16', rules.PlanRequest(tp, 'bf16', 'latency', None, utilization)).budget"

# (id, exercise, answer cell, source, first failure label, text the message must contain)
ATTACKS = [
    # --- frames: the checks' values are not reachable from the learner's frames
    ("sys._getframe", E8, "budget", budget("return _answer(sys._getframe(1).f_globals)"),
     "Part 1/checks untouched", "sys._getframe"),
    ("inspect.currentframe", E8, "budget", budget("import inspect\nreturn _answer(inspect.currentframe()"
                                                  ".f_back.f_globals)"), "Part 1/checks untouched", "sys._getframe"),
    ("inspect.stack", E8, "budget", budget("import inspect\nreturn _answer(inspect.stack()[1].frame.f_globals)"),
     "Part 1/checks untouched", "sys._getframe"),
    ("traceback frame", E8, "budget", budget("try:\n    raise RuntimeError\nexcept RuntimeError as e:\n"
                                             "    return _answer(e.__traceback__.tb_frame.f_back.f_globals)"),
     "Part 1/checks untouched", "tb_frame"),
    ("generator frame", E8, "budget", budget("def peek():\n    yield gen.gi_frame.f_back.f_back.f_globals\n"
                                             "gen = peek()\nreturn _answer(next(gen))"),
     "Part 1/checks untouched", "gi_frame"),
    ("signal handler frame", E8, "budget", budget(
        "import signal, time\nseen = []\nsignal.signal(signal.SIGALRM, lambda n, f: seen.append(f))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.001)\nwhile not seen:\n    time.sleep(0.001)\n"
        "return _answer(seen[0].f_back.f_globals)"), "Part 1/checks untouched", "signal handler"),
    ("sys.settrace", E8, "budget", budget("seen = []\nsys.settrace(lambda f, e, a: seen.append(f))\n"
                                          "return _answer(seen[0].f_back.f_back.f_globals)"),
     "Part 1/checks untouched", "sys.settrace"),
    ("sys.setprofile", E8, "budget", budget("seen = []\nsys.setprofile(lambda f, e, a: seen.append(f))\n"
                                            "len([])\nsys.setprofile(None)\nreturn _answer(seen[0].f_back.f_globals)"),
     "Part 1/checks untouched", "sys.setprofile"),
    ("sys._current_frames", E8, "budget", budget("import threading\nf = sys._current_frames()"
                                                 "[threading.get_ident()]\nreturn _answer(f.f_back.f_globals)"),
     "Part 1/checks untouched", "sys._current_frames"),
    ("a frame under a library's name", E8, "budget", budget(
        "import warnings\nns = {'__name__': 'warnings', 'sys': sys}\n"
        "exec(compile('frame = sys._getframe(2)', warnings.__file__, 'exec'), ns)\n"
        "return _answer(ns['frame'].f_globals)"), "Part 1/checks untouched", "sys._getframe"),
    ("code.InteractiveInterpreter under a library's name", E8, "budget", budget(
        "import code, warnings\nns = {'__name__': 'warnings', 'sys': sys}\n"
        "code.InteractiveInterpreter(ns).runsource('frame = sys._getframe(3)', warnings.__file__)\n"
        "return _answer(ns['frame'].f_globals)"), "Part 1/checks untouched", "sys._getframe"),
    # --- the garbage collector and leaving Python
    ("gc.get_referrers", E8, "budget", budget("import gc\nns = next(d for d in gc.get_referrers(spec) if "
                                              "isinstance(d, dict) and 'b' in d)\nreturn _answer(ns)"),
     "Part 1/checks untouched", "gc.get_referrers"),
    ("gc.get_objects", E8, "budget", budget("import gc\nns = next(d for d in gc.get_objects() if "
                                            "isinstance(d, dict) and 'expected_budget' in d)\nreturn _answer(ns)"),
     "Part 1/checks untouched", "gc.get_objects"),
    ("ctypes frame", E8, "budget", budget("import ctypes\nget = ctypes.pythonapi.PyEval_GetFrame\n"
                                          "get.restype = ctypes.py_object\nreturn _answer(get().f_back.f_globals)"),
     "Part 1/checks untouched", "ctypes"),
    # --- the package's implementation, however reached (Part 1 forbids inferbook.rules)
    ("plain import", E8, "budget", budget(f"from inferbook import rules\nfrom inferbook.rules import layout\n"
                                          f"{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/your own code", "rules.layout"),
    ("importlib twin", E8, "budget", budget(
        "import importlib.util, inferbook.rules as real\n"
        "spec_ = importlib.util.spec_from_file_location('twin', real.__file__)\n"
        "rules = importlib.util.module_from_spec(spec_)\nspec_.loader.exec_module(rules)\n"
        f"layout = rules.layout\n{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/your own code", "rules."),
    ("copied source file", E8, "budget", budget(
        "import importlib, shutil, tempfile, inferbook.rules as real\nd = tempfile.mkdtemp()\n"
        "shutil.copy(real.__file__, d + '/copied_rules.py')\nsys.path.insert(0, d)\n"
        f"rules = importlib.import_module('copied_rules')\nlayout = rules.layout\n{LAYOUT}\n{PACKAGE_CALL}"),
     "Part 1/your own code", "rules."),
    ("inspect.getsource + exec", E8, "budget", budget(
        "import inspect, inferbook.rules as real\nns = dict(vars(real))\n"
        "exec(inspect.getsource(real), ns)\nfrom inferbook import rules\nlayout = ns['layout']\n"
        f"{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/your own code", "rules."),
    ("__code__ copy", E8, "budget", budget(
        "import types, inferbook.rules as rules\n"
        "layout = types.FunctionType(rules.layout.__code__, vars(rules))\n"
        f"{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/checks untouched", "__code__"),
    ("reimport from sys.modules", E8, "budget", budget(
        "del sys.modules['inferbook.rules']\nimport inferbook.rules as rules\nlayout = rules.layout\n"
        f"{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/", "rules"),
    ("git show of the package", E8, "budget", budget(
        "import subprocess\nsrc = subprocess.run(['git', 'show', 'HEAD:code/inferbook/rules.py'], "
        "capture_output=True, text=True).stdout\nreturn {}"), "Part 1/checks untouched", "subprocess.Popen"),
    ("the book's solution", E8, "budget", budget(
        "import json, inferbook, pathlib\nroot = pathlib.Path(inferbook.__file__).parents[2]\n"
        "nb = json.loads((root / 'notebooks/solutions/ex08_plan_deployment.ipynb').read_text())\nreturn {}"),
     "Part 1/your own code", "solutions"),
    # --- the grader's own state (issue 31 §3): who the learner is, the guarded originals, the seeds,
    # the walls themselves; each attack puts back what it changed before the checks look
    ("STATE says nobody is the learner", E8, "budget", budget(
        "import inferbook.grading as g\nclass Nobody(set):\n    def __contains__(self, x):\n        return False\n"
        "old = dict(vars(g.STATE))\ng.STATE.learner_file = None\ng.STATE.student_files = Nobody()\n"
        f"from inferbook import rules\nfrom inferbook.rules import layout\n{LAYOUT}\n"
        "vars(g.STATE).clear()\nvars(g.STATE).update(old)\n" + PACKAGE_CALL), "Part 1/your own code", "rules.layout"),
    ("STATE.student_files set to None between cells", E8, "budget", budget(
        f"from inferbook import rules\nfrom inferbook.rules import layout\n{LAYOUT}\n{PACKAGE_CALL}",
        "import inferbook.grading as g\ng.STATE.student_files = None"), "Part 1/", "STATE.student_files"),
    ("the guarded original from the grading module", E8, "budget", budget(
        "import inferbook.grading as g\nfrom inferbook import rules\n"
        "layout = next(o for o, n in g._GUARDED.values() if n.endswith('rules.layout'))\n"
        f"{LAYOUT}\n{PACKAGE_CALL}"), "Part 1/", "StopIteration"),
    ("the seeds of hidden cases overwritten", E8, "budget",
     "import inferbook.grading as g\nseeds = g.STATE.seeds\nseeds[:] = [0] * len(seeds)\n"
     + solution_answer(E8, "budget"), "Part 1/", "seeds"),
    ("the walls through signal.signal's closure", E8, "budget", budget(
        "import signal\nrecord = signal.signal.__closure__[0].cell_contents\n"
        "walls = record.__closure__[0].cell_contents\nwalls.trusted = ('',)\nwalls._learner_cache.clear()\n"
        "return _answer(sys._getframe(1).f_globals)"), "Part 1/", "signal"),
    ("the walls through STATE.learner_file", E8, "budget", budget(
        "import inferbook.grading as g\nwalls = g.STATE.learner_file.__self__\nwalls.trusted = ('',)\n"
        "walls._learner_cache.clear()\nwalls.violations.clear()\nreturn _answer(sys._getframe(1).f_globals)"),
     "Part 1/", "learner_file"),
    ("an audit hook of the learner's", E8, "budget", budget(
        "seen = []\nsys.addaudithook(lambda e, a: seen.append(a) if e.startswith('inferbook.') else None)\n"
        "return {'requested': 0, 'weights': 0, 'kv': 0}"), "Part 1/checks untouched", "sys.addaudithook"),
    # --- the checks, NumPy and the built-ins stay as they are
    ("check replaced in the module", E8, "budget", budget(
        "return {'requested': 0, 'weights': 0, 'kv': 0}",
        "import inferbook.grading as g\ng.check_close = lambda *a, **k: None\ng.check = lambda *a, **k: None"),
     "Part 1/checks untouched", "inferbook.grading.check"),
    ("sys.modules['inferbook.grading'] replaced", E8, "budget", budget(
        "return {}", "import types\nfake = types.ModuleType('inferbook.grading')\n"
        "sys.modules['inferbook.grading'] = fake"), "Part 1/checks untouched", "sys.modules"),
    ("builtins patched", E8, "budget", budget("return {}", "import builtins\nbuiltins.isinstance = lambda *a: True"),
     "Part 1/checks untouched", "builtins.isinstance"),
    ("os.kill of the grader", E8, "budget", budget("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                                   "return {}"), "Part 1/checks untouched", "os.kill"),
    ("reading the process's memory", E8, "budget", budget("open('/proc/self/mem', 'rb')\nreturn {}"),
     "Part 1/checks untouched", "/proc/self/mem"),
    # --- answers are plain values before they are compared
    ("int whose == is always true", E2, "per_layer",
     "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
     "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n    return Yes(0)\n",
     "Part 1/bytes per token per layer", "got 0"),
    ("object whose == is always true", E2, "per_layer",
     "class Yes:\n    def __eq__(self, other):\n        return True\n\n"
     "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n    return Yes()\n",
     "Part 1/bytes per token per layer", "expected a number"),
    ("float whose __float__ lies", E8, "budget", budget(
        "class Liar(float):\n    def __float__(self):\n        return float(_answer(sys.modules['__main__']"
        ".__dict__)['kv'])\n    def __eq__(self, o):\n        return True\n"
        "return {'requested': Liar(0), 'weights': Liar(0), 'kv': Liar(0)}"), "Part 1/", "got 0.0"),
    # --- files a later grading reads
    ("writes the check data", E2, "per_layer",
     "import inferbook, pathlib\np = pathlib.Path(inferbook.__file__).parent / 'data/exercise_ex02_kv_sizing.json'\n"
     "p.write_text(p.read_text())\n", "Part 1/checks untouched", "inside the book or the package"),
    ("writes into the book", E2, "per_layer",
     "import inferbook, pathlib\nroot = pathlib.Path(inferbook.__file__).parents[2]\n"
     "open(root / 'README.md', 'a').close()\n", "Part 1/checks untouched", "inside the book or the package"),
    ("a .pth file in site-packages", E2, "per_layer",
     "import sysconfig\nopen(sysconfig.get_paths()['purelib'] + '/zz_cheat.pth', 'w').write('import os')\n",
     "Part 1/checks untouched", "inside the book or the package"),
    ("os.remove in the package", E2, "per_layer",
     "import os, inferbook\nos.remove(os.path.join(os.path.dirname(inferbook.__file__), 'exercise_hashes.py'))\n",
     "Part 1/checks untouched", "os.remove"),
    # --- the event stream and the process
    ("forged events", E2, "per_layer",
     "import json, os\nfor fd in range(1, 40):\n    for i in range(40):\n        try:\n"
     "            os.write(fd, (json.dumps({'t': 'end', 'i': i, 'status': 'pass', 'message': ''}) + '\\n')"
     ".encode())\n        except OSError:\n            pass\n\n"
     "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n    raise NotImplementedError\n",
     "Part 1/answer written", "not written yet"),
    ("os._exit in an answer", E2, "per_layer", "import os\nos._exit(0)\n", "Part 1/process ended",
     "the grading process ended"),
]


def _cases(exercise):
    return [a for a in ATTACKS if a[1] == exercise]


_GRADED: dict = {}


def _graded(exercise, tmp_path_factory):
    if exercise not in _GRADED:
        root = tmp_path_factory.mktemp(f"attacks-{exercise}")
        paths = [variant(exercise, root / f"a{i}", {cell: source})
                 for i, (_, _, cell, source, _, _) in enumerate(_cases(exercise))]
        reports, _ = grade_with_pytest(paths)
        _GRADED[exercise] = dict(zip([a[0] for a in _cases(exercise)], reports))
    return _GRADED[exercise]


def test_at_least_28_kinds_of_attack():
    assert len({a[0] for a in ATTACKS}) >= 28


@pytest.mark.parametrize("attack", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_fails(attack, tmp_path_factory):
    label, exercise, _, _, first, text = attack
    report = _graded(exercise, tmp_path_factory)[label]
    assert not report.passed, report.text
    failure = report.first_failure()
    assert failure and failure.startswith(first), report.text
    assert text in report.text, report.text


def test_nothing_was_written_into_the_book():
    """The file attacks above were refused: the package's check data still match their hashes
    and no file was left behind."""
    from inferbook import grading_plan

    grading_plan.pristine_exercises()              # raises on a changed file
    import sysconfig

    assert not Path(sysconfig.get_paths()["purelib"], "zz_cheat.pth").exists()
    assert (ROOT / "code" / "inferbook" / "exercise_hashes.py").is_file()


# --- notebooks that are not what they claim, and a poisoned checkout ------------------------------------
def _exercise(name):
    return json.loads((EXERCISES / f"{name}.ipynb").read_text())


def _renamed(tmp: Path, keep_title: bool) -> Path:
    """Exercise 2.1 with the right-looking answers, its check cells deleted, new cell ids, saved
    under another name; without its title too when keep_title is false."""
    nb = _exercise(E2)
    answers = {c["id"] for c in nb["cells"] if "answer" in c["metadata"].get("tags", [])}
    cells = []
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "code" and c["id"] not in answers and "part(" in "".join(c["source"]):
            continue                                   # no check cells
        if c["id"] in answers:
            c["source"] = solution_answer(E2, c["id"]).replace("return", "return 1 + 0 *")
        if not keep_title and c["cell_type"] == "markdown" and "".join(c["source"]).startswith("# Exercise"):
            c["source"] = "# My homework"
        c["id"] = f"mine{i}"
        cells.append(c)
    nb["cells"] = cells
    out = tmp / "notebooks" / "exercises" / "my_homework.ipynb"
    out.parent.mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", tmp / "_config.yml")
    out.write_text(json.dumps(nb))
    return out


def test_renamed_copy_without_checks_is_graded_as_the_exercise(tmp_path):
    for keep_title in (True, False):
        path = _renamed(tmp_path / f"t{keep_title}", keep_title)
        report = grade_with_pytest([path])[0][0]
        assert not report.passed and "All done!" not in report.text, report.text
        assert report.first_failure().startswith("Part 1/"), report.text


def test_a_notebook_that_is_no_exercise_is_refused(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "id": "x", "metadata": {}, "source": "# Anything"},
                    {"cell_type": "code", "id": "y", "metadata": {}, "source": "print('All done!')",
                     "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = tmp_path / "notebooks" / "exercises" / "nothing.ipynb"
    out.parent.mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    out.write_text(json.dumps(nb))
    report = grade_with_pytest([out])[0][0]
    assert not report.passed and "0 of 0 parts pass." in report.text, report.text
    assert "none of the book's exercises" in report.text


def test_a_poisoned_checkout_is_refused(tmp_path):
    """A copy of the package whose check data an earlier grading (or anyone) edited: refused."""
    package = tmp_path / "code" / "inferbook"
    shutil.copytree(ROOT / "code" / "inferbook", package, ignore=shutil.ignore_patterns("__pycache__"))
    data = package / "data" / f"exercise_{E2}.json"
    book = json.loads(data.read_text())
    for cell in book["cells"]:
        if "part(" in cell["source"]:
            cell["source"] = "pass"                     # checks that accept anything
    data.write_text(json.dumps(book))
    notebook = tmp_path / f"{E2}.ipynb"
    shutil.copy(EXERCISES / f"{E2}.ipynb", notebook)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "code"), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "inferbook.grading_runner", str(notebook)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "differs from the copy the book shipped" in run.stdout, run.stdout + run.stderr
    assert "All done!" not in run.stdout


# --- a notebook outside the repository: a package it writes beside itself (issue 31 §3) -------------
SHADOW = '''
import json, os, sys
request = json.loads(sys.stdin.read())
for k, plan in enumerate(request["plans"]):
    for i, cell in enumerate(plan["cells"]):
        if cell["cell_type"] == "code":
            for t in ("start", "end"):
                print(json.dumps({"t": t, "i": i, "k": k, "status": "pass", "message": "",
                                  "token": request["token"]}), flush=True)
print(json.dumps({"t": "done", "token": request["token"]}), flush=True)
'''

WRITES_SHADOW = ("import os\nos.makedirs('inferbook', exist_ok=True)\nopen('inferbook/__init__.py', 'w').close()\n"
                 f"open('inferbook/grading_sandbox.py', 'w').write({SHADOW!r})\n")


def test_a_package_written_beside_the_notebook_cannot_stand_in_for_the_grader(tmp_path, monkeypatch):
    """Graded outside the book (no repository around it), an answer cell may write files beside
    the notebook: a package named inferbook there would be imported instead of the grader by the
    next grading from that folder (the folder came first on sys.path) and pass anything. The
    runner refuses to grade beside one, and the sandbox (python -P: the folder not on sys.path)
    imports the book's anyway."""
    from inferbook import grading_runner

    folder = tmp_path / "homework"
    folder.mkdir()
    nb = json.loads((EXERCISES / f"{E2}.ipynb").read_text())
    first = json.loads(json.dumps(nb))
    cell = next(c for c in first["cells"] if c.get("id") == "per_layer")
    cell["source"] = WRITES_SHADOW + solution_answer(E2, "per_layer")
    (folder / "first.ipynb").write_text(json.dumps(first))
    grading_runner.grade_file(folder / "first.ipynb")
    assert (folder / "inferbook" / "grading_sandbox.py").is_file()     # outside the book: allowed
    (folder / "blank.ipynb").write_text(json.dumps(nb))                  # nothing answered
    report = grading_runner.grade_file(folder / "blank.ipynb")
    assert not report.passed and "holds a package named inferbook" in str(report), str(report)
    monkeypatch.setattr(grading_runner, "_shadowing_package", lambda cwd: None)   # the runner's check off
    report = grading_runner.grade_file(folder / "blank.ipynb")
    assert not report.passed and "All done!" not in str(report), str(report)
    assert "not written yet" in str(report), str(report)          # graded by the book's grader


# --- the grader's documented out-of-scope list (grading_runner's docstring), each tried once ---------
def _sizing_copy(folder: Path) -> Path:
    """A verbatim copy of the package's sizing.kv_values_per_token_per_layer (the function Part 1
    of Exercise 2.1 asks for) outside the package and the repository, as a download would hold
    it, under another name."""
    import inspect

    from inferbook import sizing

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "downloaded_kv_math.py"
    copy.write_text(inspect.getsource(sizing.kv_values_per_token_per_layer))
    return copy


def test_the_out_of_scope_list_is_tried_once(tmp_path):
    """Each residual of grading_runner's docstring, tried once: the walls stop what they can
    (a binary module the learner brings, a library compiling the learner's code under its own
    name); a copy of the package's source kept outside the book passes (the documented limit:
    grading judges what the functions do); a grade() the learner's kernel redefines is a change
    to the package, which `make grade` fails."""
    import _bisect

    from inferbook import grading_runner

    binary = Path(_bisect.__file__)         # an extension module of the standard library, copied
    copy = _sizing_copy(tmp_path / "vendor")
    right = "from dataclasses import dataclass\n\n@dataclass\nclass Mine:\n    x: int = 0\n\n" + \
        solution_answer(E2, "per_layer")        # a dataclass of theirs: the grader's frames stay its own
    cases = {
        "a C extension the learner brings": (
            f"import importlib.util, shutil, tempfile\nd = tempfile.mkdtemp()\n"
            f"p = shutil.copy({str(binary)!r}, d)\ns = importlib.util.spec_from_file_location('_bisect', p)\n"
            f"m = importlib.util.module_from_spec(s)\n{right}", False, "binary module"),
        "a library compiling the learner's code": (
            "import sys, timeit\nseen = []\ntimeit.Timer('seen.append(sys._getframe(3))', "
            "globals={'sys': sys, 'seen': seen}).timeit(1)\n" + right, False, "sys._getframe"),
        "a copy of the package's source outside the book": (
            "import pathlib\nns = {'_spec': lambda spec: spec, '_resolved': lambda spec: spec, 'ModelSpec': object}\n"
            f"exec(compile(pathlib.Path({str(copy)!r}).read_text(), 'kv_copy.py', 'exec'), ns)\n\n"
            "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n"
            "    return ns['kv_values_per_token_per_layer'](spec) * bytes_per_value\n", True, ""),
        "grade() redefined in the learner's kernel": (
            "import inferbook.grading as g\ng.grade = lambda *a, **k: print('All done!')\n\n"
            "def my_bytes_per_token_per_layer(spec, bytes_per_value):\n    raise NotImplementedError\n",
            False, "changed inferbook.grading.grade"),
    }
    notebooks = []
    for i, (source, _, _) in enumerate(cases.values()):
        path = variant(E2, tmp_path / f"r{i}", {"per_layer": source})
        notebooks.append((json.loads(path.read_text()), path.name, path.parent))
    reports = grading_runner.grade_notebooks(notebooks)
    for (name, (_, passes, text)), report in zip(cases.items(), reports):
        part1 = report.parts[0]
        if passes:       # the known limit: documented in grading_runner, still succeeds
            assert part1.status == "pass", (name, str(report))
        else:
            assert part1.status == "fail" and text in part1.message, (name, part1.message)
            assert "All done!" not in str(report)
    doc = grading_runner.__doc__
    for listed in ("C extension", "compiles on the learner's behalf", "copies of the package's source",
                   "Colab's `grade()`"):
        assert listed in doc, listed
