"""Generate the exercise notebooks from the solutions: same cells, answers blanked, no outputs.

    python tools/make_exercises.py                  # rewrite every exercise (and its book copy)
    python tools/make_exercises.py ex04_triton_kernel   # only the exercises named
    python tools/make_exercises.py --check          # exit 1 if a committed exercise differs

Each exercise also gets the book's copy of its cells, `code/inferbook/data/exercise_<name>.json`
(shipped with the package): the grader runs the set-up and check cells from that copy, never from
the notebook a learner submits. Its `timeout` (seconds per cell) is the solution notebook's
metadata `grading.timeout` (default 120).

An answer cell is a code cell with the tag `answer`; its cell id names it (e.g. `counts`). In an
answer cell every function keeps its decorators, signature and docstring and gets the body
`raise NotImplementedError("your answer here")`; a method whose `def` line ends with `# given`
stays as written; a class keeps its other statements; a top-level assignment becomes `name = None`;
imports stay; anything else (prints, calls) goes. Outputs are cleared.

A solution notebook is a page of answers; the exercise carries the statement:

* the title cell "# Solution to Exercise N.k — …" becomes "# Exercise N.k — …" alone: the rest
  of that cell (the solution page's lead, which links to the exercise) is dropped;
* cells tagged `solution-only` (the answer's explanation) are dropped;
* cells tagged `exercise-only` are the statement. In the solution they also carry `remove-cell`,
  so the book's solution page leaves them out (Jupyter and Colab still show them); in the
  exercise both tags are dropped;
* the exercise's first cell is its title, then the statement cells that follow the title in
  the solution (merged into it), then the grading instructions ("How to grade yourself"),
  written here once for every exercise.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "notebooks" / "solutions"
EXERCISES = ROOT / "notebooks" / "exercises"
DATA = ROOT / "code" / "inferbook" / "data"
HASHES = ROOT / "code" / "inferbook" / "exercise_hashes.py"
STUB = 'raise NotImplementedError("your answer here")'
SOLUTION_TITLE = "# Solution to Exercise "
EXERCISE_ONLY = "exercise-only"
HOW_TO = """**How to grade yourself.** Fill in the {cells} marked *Your answer*, then grade the whole
notebook. On Colab, run the last cell, `grade()`: it grades the notebook as it is in the tab.
Elsewhere, save the notebook and run, from the repository root:

```bash
make grade NB=notebooks/exercises/{name}.ipynb
```

Both end with the same short report: each part, pass or fail, and the first failed check's message,
`CHECK FAILED [Part N/check]: …`. Outputs saved in the notebook are ignored: your code is run
afresh, with the book's own copy of the checks (editing or deleting a check cell changes
nothing), and each cell has a time limit.
"""


def _header_end(lines: list[str], node: ast.AST) -> int:
    """Index of the line that ends the `def ...:` / `class ...:` header of `node`."""
    for i in range(node.lineno - 1, node.body[0].lineno):
        code = lines[i].split("#")[0].rstrip()
        if code.endswith(":"):
            return i
    return node.body[0].lineno - 2


def _docstring_end(node: ast.AST) -> int | None:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str):
        return first.end_lineno - 1
    return None


def _start(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators]) - 1


def _blank_function(lines: list[str], node: ast.AST) -> list[str]:
    start, head = _start(node), _header_end(lines, node)
    if lines[node.lineno - 1].rstrip().endswith("# given"):
        return lines[start:node.end_lineno]
    out = lines[start:head + 1]
    doc = _docstring_end(node)
    if doc is not None:
        out += lines[node.body[0].lineno - 1:doc + 1]
    indent = " " * (node.body[0].col_offset)
    return out + [indent + STUB]


def _blank_class(lines: list[str], node: ast.ClassDef) -> list[str]:
    start, head = _start(node), _header_end(lines, node)
    out = lines[start:head + 1]
    body = node.body
    doc = _docstring_end(node)
    if doc is not None:
        out += lines[body[0].lineno - 1:doc + 1]
        body = body[1:]
    for i, stmt in enumerate(body):
        if out and (i or doc is not None) and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append("")
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += _blank_function(lines, stmt)
        else:
            out += lines[_start(stmt):stmt.end_lineno]
    return out


def blank_answer(source: str) -> str:
    """The stub handed out for the answer `source` (see the module docstring)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    if not tree.body:
        return source
    out = [ln for ln in lines[:_start(tree.body[0])] if ln.strip()]   # leading comments
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            piece = _blank_function(lines, node)
        elif isinstance(node, ast.ClassDef):
            piece = _blank_class(lines, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            piece = lines[node.lineno - 1:node.end_lineno]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            piece = [" = ".join(ast.get_source_segment(source, t) for t in targets) + " = None"]
        else:
            continue
        if i and isinstance(node, (ast.FunctionDef, ast.ClassDef)) and out:
            out.append("")
        out += piece
    return "\n".join(out)


def _source(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _split(text: str) -> list[str]:
    return text.splitlines(True)


def how_to_grade(name: str, answers: int) -> str:
    """The paragraph that tells a learner how to grade exercise `name` (`answers` answer cells)."""
    return HOW_TO.format(cells="cell" if answers == 1 else "cells", name=name).rstrip("\n")


def check_solution(solution: dict, name: str) -> None:
    """Raise ValueError unless the solution's statement cells are marked as the generator needs."""
    for cell in solution["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if EXERCISE_ONLY in tags and "remove-cell" not in tags:
            raise ValueError(f"{name}: cell {cell.get('id')!r} is tagged {EXERCISE_ONLY!r} but not "
                             "'remove-cell': the solution page would repeat the statement")
        if EXERCISE_ONLY in tags and "solution-only" in tags:
            raise ValueError(f"{name}: cell {cell.get('id')!r} is tagged both {EXERCISE_ONLY!r} and "
                             "'solution-only'")


def make_exercise(solution: dict, name: str) -> dict:
    """The exercise notebook generated from a solution notebook (JSON dicts, nbformat 4)."""
    check_solution(solution, name)
    nb = copy.deepcopy(solution)
    cells, statement = [], set()
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution-only" in tags:
            continue
        if EXERCISE_ONLY in tags:
            statement.add(cell["id"])
            cell["metadata"]["tags"] = [t for t in tags if t not in (EXERCISE_ONLY, "remove-cell")]
            if not cell["metadata"]["tags"]:
                del cell["metadata"]["tags"]
        if cell["cell_type"] == "markdown" and _source(cell).startswith(SOLUTION_TITLE):
            title = _source(cell).splitlines()[0]
            cell["source"] = _split("# Exercise " + title[len(SOLUTION_TITLE):])
        cell.get("metadata", {}).pop("execution", None)        # run timestamps of the solution
        if cell["cell_type"] == "code":
            if "answer" in tags:
                cell["source"] = _split(blank_answer(_source(cell)))
            cell["outputs"] = []
            cell["execution_count"] = None
        cells.append(cell)
    answers = sum("answer" in c.get("metadata", {}).get("tags", []) for c in cells)
    # The first cell: the title, the statement cells that follow it, how to grade.
    k = 1
    while k < len(cells) and cells[k]["cell_type"] == "markdown" and cells[k]["id"] in statement:
        k += 1
    opening = [_source(c).strip("\n") for c in cells[:k]] + [how_to_grade(name, answers)]
    cells[0]["source"] = _split("\n\n".join(opening))
    nb["cells"] = cells[:1] + cells[k:]
    return nb


def dumps(nb: dict) -> str:
    """Serialise like nbformat.write (indent 1, sorted keys, trailing newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def book_copy(name: str, exercise: dict) -> dict:
    """The book's copy of exercise `name`: what the grader runs instead of a learner's checks."""
    title = next((_source(c).splitlines()[0].lstrip("# ").strip() for c in exercise["cells"]
                  if c["cell_type"] == "markdown"), name)
    timeout = exercise.get("metadata", {}).get("grading", {}).get("timeout", 120)
    cells = [{"id": c["id"], "cell_type": c["cell_type"], "source": _source(c),
              "tags": list(c.get("metadata", {}).get("tags", []))} for c in exercise["cells"]]
    return {"name": name, "title": title, "timeout": timeout, "cells": cells}


def expected_exercises(names: list[str] | None = None) -> dict[Path, str]:
    """{path: text} for every generated file: the exercise notebooks and their book copies."""
    out = {}
    for p in sorted(SOLUTIONS.glob("*.ipynb")):
        if names and p.stem not in names:
            continue
        exercise = make_exercise(json.loads(p.read_text(encoding="utf-8")), p.stem)
        out[EXERCISES / p.name] = dumps(exercise)
        out[DATA / f"exercise_{p.stem}.json"] = json.dumps(book_copy(p.stem, exercise), indent=1,
                                                           ensure_ascii=False) + "\n"
    if not names:
        out[HASHES] = hashes_module({path.stem.removeprefix("exercise_"): text for path, text in out.items()
                                     if path.parent == DATA})
    return out


def hashes_module(copies: dict[str, str]) -> str:
    """The text of inferbook/exercise_hashes.py: the SHA-256 of each exercise's book copy, which
    the grader checks before it trusts the copy."""
    lines = ['"""SHA-256 of each exercise\'s check data (inferbook/data/exercise_<name>.json), written by',
             'tools/make_exercises.py; the grader refuses a copy whose hash differs."""', "",
             "EXERCISE_SHA256 = {"]
    lines += [f'    "{name}": "{hashlib.sha256(text.encode("utf-8")).hexdigest()}",' for name, text in sorted(copies.items())]
    return "\n".join(lines + ["}", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="exercises to generate (default: all), e.g. ex01_naive_vs_cached")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = parser.parse_args(argv)
    expected = expected_exercises(args.names or None)
    if args.names and not expected:
        parser.error(f"no solution notebook named {args.names}")
    stale = []
    for path, text in expected.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("out of date (run tools/make_exercises.py):", *[str(p.relative_to(ROOT)) for p in stale])
        return 1
    print(("checked " if args.check else "wrote ") + f"{sum(p.parent == DATA for p in expected)} exercises")
    return 0


if __name__ == "__main__":
    sys.exit(main())
