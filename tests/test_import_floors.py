"""The package is a house of floors: a module imports only modules on its own floor or below,
and no two modules import each other, directly or round a circle.

Every `inferbook` import counts, at the top of a module or inside a function (a lazy import
is still a dependency), except under `if __name__ == "__main__":`, which runs only when the
module is the program (`python -m inferbook.recommend` hands over to `inferbook.cli` there).
A new module must be given a floor here, and DEVELOPERS.md shows the same table.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "code" / "inferbook"

# bottom to top; DEVELOPERS.md "Layout" lists the same floors and what each module owns
FLOORS = {
    "foundation": ["arith", "validate", "decision", "hardware", "models", "checkpoint_format",
                   "vision_towers", "attention_backends", "speculation_math", "notebook",
                   "exercise_hashes"],
    "arithmetic": ["sizing", "vllm_memory", "vllm_fit"],
    "kernels": ["masks", "softmax", "flash", "io_model", "roofline", "split_kv", "triton_launch",
                "triton_paged_decode", "triton_flash", "triton_aot", "triton_plots",
                "triton_device", "fp8_attention", "gpt", "llama", "tiny_lm"],
    "cache": ["kv_cache", "blocks", "paged", "decode", "speculative", "fragmentation"],
    "serving": ["metrics", "workload", "steploop", "prefix_cache", "engine", "cost_model",
                "sched_trace", "simulate", "capacity"],
    "planning": ["checkpoints", "rules", "speculation_rules", "parallelism", "alternatives",
                 "sglang_rules", "commands", "vllm_logs", "recommend", "render", "cli",
                 "vllm_gpu_check"],
    "course": ["grading_walls", "grading_plan", "grading_runner", "grading", "grading_sandbox",
               "grading_pytest", "kernel_checks", "main"],
    # the chapters' figures, drawn for the book's column (inferbook.notebook's plot rules)
    "figures": ["kv_plots", "flash_plots", "paged_plots", "batching_plots", "spec_plots",
                "plan_plots", "serving_plots"],
}
FLOOR_OF = {m: i for i, mods in enumerate(FLOORS.values()) for m in mods}
NAMES = list(FLOORS)


def _is_main_guard(node: ast.stmt) -> bool:
    """Return whether `node` is `if __name__ == "__main__":`."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def imports_of(path: Path) -> dict[str, int]:
    """Return {inferbook module: first line} for every package import in `path`."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    found: dict[str, int] = {}
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if not _is_main_guard(n)]
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1:
                names = [parts[0]] if node.module else [a.name for a in node.names]
            elif parts[0] == "inferbook":
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names
                     if a.name.startswith("inferbook.") and a.name.count(".") >= 1]
        for name in names:
            if name in modules and name != path.stem:
                found.setdefault(name, node.lineno)
    return found


GRAPH = {p.stem: imports_of(p) for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__"}


def test_every_module_has_a_floor():
    missing = sorted(set(GRAPH) - set(FLOOR_OF))
    gone = sorted(set(FLOOR_OF) - set(GRAPH))
    assert not missing, f"give these modules a floor in tests/test_import_floors.py: {missing}"
    assert not gone, f"these modules are listed but do not exist: {gone}"


def test_no_module_imports_one_above_it():
    upward = [f"{m} ({NAMES[FLOOR_OF[m]]}) imports {d} ({NAMES[FLOOR_OF[d]]}) at line {line}"
              for m, deps in GRAPH.items() for d, line in deps.items()
              if m in FLOOR_OF and d in FLOOR_OF and FLOOR_OF[d] > FLOOR_OF[m]]
    assert not upward, "\n".join(upward)


def test_no_circles():
    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            for d in GRAPH.get(stack.pop(), {}):
                if d == goal:
                    return True
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return False

    circles = sorted(f"{m} -> {d} -> ... -> {m}" for m, deps in GRAPH.items() for d in deps
                     if reaches(d, m))
    assert not circles, "\n".join(circles)


def test_the_finder_sees_lazy_imports(tmp_path):
    """The check itself: an import inside a function is found; a stdlib one and the
    program entry under the main guard are not."""
    source = tmp_path / "probe.py"
    source.write_text("import json\nfrom . import arith\n\ndef f():\n    from .sizing import x\n"
                      "    import inferbook.rules\n\nif __name__ == '__main__':\n"
                      "    from .cli import main\n")
    assert set(imports_of(source)) == {"arith", "sizing", "rules"}


@pytest.mark.parametrize("floor", NAMES)
def test_each_floor_is_listed_in_developers(floor):
    text = (PACKAGE.parents[1] / "DEVELOPERS.md").read_text()
    assert f"**{floor}**" in text, f"DEVELOPERS.md does not show the floor {floor!r}"


# --- no pass-through names: a caller imports a name from the module that defines it ----------

# names the planning floor still hands on (its modules are being split; the list only shrinks)
PASSED_ON: dict[str, set[str]] = {}


def defined_names(path: Path) -> set[str]:
    """Return the names `path` defines at its top level (def, class, assignment), not imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        for sub in ([node] if not isinstance(node, (ast.If, ast.Try)) else ast.walk(node)):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


DEFINED = {p.stem: defined_names(p) for p in PACKAGE.glob("*.py")}


def passed_on(source: str, where: str) -> list[str]:
    """Return 'where:line: name from module' for each package name imported from a module
    that only imports it itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        parts = node.module.split(".")
        module = parts[0] if node.level == 1 else parts[1] if parts[0] == "inferbook" and len(parts) > 1 else None
        for alias in node.names if module in DEFINED else ():
            if (alias.name not in DEFINED[module] and alias.name not in DEFINED and alias.name != "*"
                    and alias.name not in PASSED_ON.get(module, ())):
                found.append(f"{where}:{node.lineno}: {alias.name} from {module}")
    return found


def _sources():
    for path in sorted([*PACKAGE.glob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]):
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                yield f"{path.relative_to(ROOT)} cell {i}", "\n".join(
                    line for line in lines if not line.lstrip().startswith(("%", "!")))


def test_names_are_imported_from_their_owner():
    """`from inferbook.paged import blocks_for` would lift the books (a lower room) into paged:
    every import in the package, tests, tools and notebooks names the module that defines it."""
    found = [hit for where, source in _sources() for hit in passed_on(source, where)]
    assert not found, "import these from the module that defines them:\n" + "\n".join(found)


def test_the_owner_check_sees_a_passed_on_name():
    assert passed_on("from inferbook.paged import blocks_for, PagedKVCache\n", "probe") == [
        "probe:1: blocks_for from paged"]
    assert passed_on("from .blocks import blocks_for\nfrom inferbook import paged\n", "probe") == []


# Private names (`_name`) stay in their module. A test may reach into the module it mirrors
# (tests/test_<module>.py); nothing else may, by import or by attribute. Known reaches that only
# shrink (their files have other owners): tests/test_kernel_checks.py should read
# `triton_flash.flash_forward_kernel` and a public tile helper; notebook 04 the tile helper.
PRIVATE_REACH = {
    "tests/test_kernel_checks.py": {"triton_flash._attend_kv_tiles"},
    "notebooks/04_flash_attention_triton.ipynb": {"triton_flash._attend_kv_tiles"},
    # the grader's walls asked directly (grading's owner: a public `ask`/seed name, or the test
    # moved to tests/test_grading.py)
    "tests/test_grading_runner.py": {"grading._ask", "grading._ASK_SEED"},
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: str, where: str) -> list[str]:
    """Return 'where:line: module._name' for each private name of a package module that `source`
    imports (`from inferbook.m import _x`, `from .m import _x`) or reads as an attribute of a
    module it imported (`from inferbook import m` ... `m._x`), outside `where`'s own module."""
    tree = ast.parse(source)
    own = Path(where.split(" cell ")[0]).stem.removeprefix("test_")
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1 and node.module:
                module = parts[0]
            elif node.level == 0 and parts[0] == "inferbook" and len(parts) > 1:
                module = parts[1]
            else:   # `from . import m` / `from inferbook import m`: a module alias
                if (node.level == 1) or node.module == "inferbook":
                    aliases.update({a.asname or a.name: a.name for a in node.names if a.name in DEFINED})
                continue
            if module in DEFINED and module != own:
                found += [f"{where}:{node.lineno}: {module}.{a.name}" for a in node.names
                          if _is_private(a.name)]
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name.split(".")[1] for a in node.names
                            if a.asname and a.name.startswith("inferbook.")})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _is_private(node.attr)
                and aliases[node.value.id] != own):
            found.append(f"{where}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def _whole_sources():
    """Each file once: a notebook's code cells joined (a module imported in one cell is read in
    another)."""
    notebooks: dict[str, list[str]] = {}
    for where, source in _sources():
        path, _, _ = where.partition(" cell ")
        if path.endswith(".ipynb"):
            notebooks.setdefault(path, []).append(source)
        else:
            yield path, source
    for path, cells in notebooks.items():
        yield path, "\n".join(cells)


def _parsed_reaches(source: str, where: str) -> list[str]:
    try:
        return private_reaches(source, where)
    except SyntaxError:
        return []


def test_no_private_name_crosses_a_module():
    found = []
    for where, source in _whole_sources():
        try:
            hits = private_reaches(source, where)
        except SyntaxError:   # a notebook with a cell written not to parse: cell by cell
            hits = [h for w, src in _sources() if w.startswith(where + " cell ")
                    for h in _parsed_reaches(src, w)]
        known = PRIVATE_REACH.get(where, set())
        found += [h for h in hits if h.split(": ", 1)[1] not in known]
    assert not found, "private names used outside their module (make them public):\n" + "\n".join(found)


def test_the_private_check_sees_imports_and_attributes():
    probe = ("from inferbook.sizing import _fraction\nfrom inferbook import rules\n"
             "from . import blocks as b\nx = rules._roofline_seconds\ny = b._tables\n"
             "z = rules.__name__\nfrom inferbook.sizing import fraction\n")
    assert private_reaches(probe, "code/inferbook/simulate.py") == [
        "code/inferbook/simulate.py:1: sizing._fraction",
        "code/inferbook/simulate.py:4: rules._roofline_seconds",
        "code/inferbook/simulate.py:5: blocks._tables"]
    # a test may reach into the module it mirrors, and only that one
    assert private_reaches("from inferbook.fragmentation import _FirstFit\n",
                           "tests/test_fragmentation.py") == []
    assert private_reaches("from inferbook import blocks\nblocks._x\n", "tests/test_state.py") == [
        "tests/test_state.py:2: blocks._x"]


MAX_MODULE_LINES = 600


def test_no_module_over_600_lines():
    """Each module is one idea a newcomer can read: a module past 600 lines is two ideas (split
    it along its seam, as sizing / vllm_memory / vllm_fit and the grading modules were)."""
    long = {p.stem: n for p in PACKAGE.glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
