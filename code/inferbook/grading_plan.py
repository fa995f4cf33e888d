"""The grading plan: which book exercise a notebook is, the cells to run, and the report per part.

A submitted notebook is matched to the book's copy of its exercise (`inferbook/data/exercise_<name>.json`,
written by tools/make_exercises.py and verified against the SHA-256 recorded in
`inferbook.exercise_hashes` before use): by file name, else by its title, its answer cells' ids or
the names its answer cells define. A notebook that matches no exercise is refused, never graded
with its own checks. The plan is the book's cells with the learner's answer cells (by id, else
aligned by source) and the code cells they added; the report folds per-cell outcomes into one
line per part.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exercise_hashes import EXERCISE_SHA256

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


class TamperedExerciseData(ValueError):
    """The package's copy of an exercise differs from the hash recorded when it was generated."""


def exercise_digest(text: str) -> str:
    """The SHA-256 of an exercise file's text (what tools/make_exercises.py records)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pristine_exercises() -> dict[str, dict]:
    """{exercise name: the book's exercise} from the package data, each verified against its
    recorded hash (a TamperedExerciseData error names a file that differs or is missing)."""
    found = {}
    for name, digest in sorted(EXERCISE_SHA256.items()):
        path = DATA / f"exercise_{name}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise TamperedExerciseData(f"{path.name} is missing ({err}); reinstall the package") from None
        if exercise_digest(text) != digest:
            raise TamperedExerciseData(f"{path.name} differs from the copy the book shipped (SHA-256 "
                                       "mismatch): reinstall the package or run tools/make_exercises.py")
        found[name] = json.loads(text)
    return found


def _title(cells: list) -> str:
    for cell in cells:
        if cell["cell_type"] == "markdown":
            m = re.match(r"#\s+(?:Solution to )?(Exercise\s+\d+\.\d+)", _source(cell).lstrip())
            return m.group(1) if m else ""
    return ""


def defined_names(source: str) -> set[str]:
    """The top-level functions and classes a cell's code defines."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _answer_names(cells: list, answers_only: bool) -> set[str]:
    names: set[str] = set()
    for c in cells:
        if c["cell_type"] == "code" and (not answers_only or "answer" in c.get("tags", [])):
            names |= defined_names(_source(c))
    return names


def find_pristine(nb: dict, name: str | None = None) -> dict | None:
    """The book's exercise that `nb` is a copy of: by file name, else by its content (its title,
    its answer cells' ids, the functions its cells define); None when it is none of them."""
    book = pristine_exercises()
    stem = Path(name).stem if name else None
    if stem in book:
        return book[stem]
    cells = nb.get("cells", [])
    ids = {_cell_id(c) for c in cells}
    title = _title(cells)
    defined = _answer_names([{"cell_type": c.get("cell_type"), "source": _source(c)} for c in cells], False)
    best, score = None, (0, 0, 0)
    for data in book.values():        # the title, then the answer cells' ids and names
        wanted = _answer_names(data["cells"], True)
        s = (int(bool(title) and _title(data["cells"]) == title),
             len(ids & {c["id"] for c in data["cells"] if "answer" in c.get("tags", [])}),
             len(defined & wanted))
        if s > score:
            best, score = data, s
    return best if any(score) else None


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
        return [], ["this notebook is none of the book's exercises (its title, cell ids and answers "
                    "match none): it was not graded"]
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


def python_source(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)



def part_number(title: str) -> int | None:
    """N for a part titled 'Part N …', else None."""
    m = re.match(r"Part\s+(\d+)", title)
    return int(m.group(1)) if m else None


def forbidden_code(cells: list[dict]) -> dict[int, list[str]]:
    """{part number: the package code its check cells name in `without=[...]`} for a plan's cells."""
    found: dict[int, list[str]] = {}
    for cell in cells:
        if cell.get("cell_type") != "code" or cell.get("kind") != "book" or "part(" not in cell["source"]:
            continue
        try:
            tree = ast.parse(python_source(cell["source"]))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "part" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
                continue
            for kw in node.keywords:
                if kw.arg == "without":
                    try:
                        value = ast.literal_eval(kw.value)
                    except ValueError:
                        continue
                    specs = [value] if isinstance(value, str) else list(value)
                    found.setdefault(node.args[0].value, [])
                    found[node.args[0].value] += [s for s in specs if s not in found[node.args[0].value]]
    return found
