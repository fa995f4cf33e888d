"""Helpers for the tests that grade exercise notebooks the way a learner does.

An answer cell is a code cell tagged `answer`; its cell id names it (`counts`, `fork`, ...).
`variant()` writes a copy of an exercise with answer cells replaced (the solution's, a wrong one,
a differently written right one); `grade_with_pytest()` runs the documented grading command on
one or more copies in ONE pytest process and parses the report it ends with.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "notebooks" / "exercises"
SOLUTIONS = ROOT / "notebooks" / "solutions"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# The documented command, minus the notebook path (README, book/how_to_use.md, every exercise).
GRADE_ARGS = ["-p", "inferbook.grading_pytest", "--nbval-lax", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg"]
GRADE_COMMAND = ".venv/bin/pytest " + " ".join(GRADE_ARGS)


@dataclass
class Report:
    """One notebook's grading report, parsed from the command's output."""
    notebook: str
    parts: list[tuple[str, str, str]]          # (title, PASS/FAIL/NOT RUN, message)
    text: str

    @property
    def passed(self) -> bool:
        return bool(self.parts) and all(status == "PASS" for _, status, _ in self.parts)

    def first_failure(self) -> str | None:
        """The first failed check's name (the text in CHECK FAILED [...]), in notebook order."""
        for _, status, message in self.parts:
            if status == "FAIL":
                m = re.search(r"CHECK FAILED \[([^\]]+)\]", message)
                return m.group(1) if m else message
        return None

    def verdict(self) -> dict[str, str]:
        return {title: status.lower() for title, status, _ in self.parts}


def parse_reports(output: str) -> list[Report]:
    """Every report in the output, in the order the notebooks were graded."""
    reports = []
    for block in re.split(r"=+ grading report =+\n", ANSI.sub("", output))[1:]:
        lines = block.splitlines()
        name = lines[0].removeprefix("Grading ").strip()
        parts, i = [], 1
        while i < len(lines) and not re.match(r"^\d+ of \d+ parts pass", lines[i]):
            m = re.match(r"^  (PASS|FAIL|NOT RUN)\s+(.*)$", lines[i])
            if m:
                message = ""
                if i + 1 < len(lines) and lines[i + 1].startswith("          "):
                    message = lines[i + 1].strip()
                    i += 1
                parts.append((m.group(2).strip(), m.group(1), message))
            i += 1
        reports.append(Report(name, parts, "\n".join(lines[:i + 1])))
    return reports


def answer_cells(nb: dict) -> dict[str, int]:
    """{answer name (the cell id): cell index} for the cells tagged `answer`."""
    return {c["id"]: i for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" and "answer" in c.get("metadata", {}).get("tags", [])}


def _source(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def solution_answer(name: str, answer: str, old: str | None = None, new: str = "") -> str:
    """The solution's `answer` cell of exercise `name`, with `old` replaced by `new` (if given)."""
    nb = json.loads((SOLUTIONS / f"{name}.ipynb").read_text())
    source = _source(nb["cells"][answer_cells(nb)[answer]])
    if old is None:
        return source
    if old not in source:
        raise ValueError(f"{name}/{answer}: the solution no longer contains {old!r}")
    return source.replace(old, new)


def variant(name: str, where: Path, replacements: dict[str, str] | None = None, answers: str = "solution",
            stale_outputs: bool = False, edit=None) -> Path:
    """Write exercise `name` into `where/notebooks/exercises/` (a repository-like layout) with its
    answer cells filled from the solution (answers="solution") or left blank ("blank"), then
    `replacements` {answer name: source} applied, then `edit(nb)` (a NOTEBOOK_CASES edit). stale_outputs: every code cell carries outputs
    from some earlier run (an error, an object address) and a shuffled execution count."""
    nb = json.loads((EXERCISES / f"{name}.ipynb").read_text())
    cells = answer_cells(nb)
    sources = {}
    if answers == "solution":
        sol = json.loads((SOLUTIONS / f"{name}.ipynb").read_text())
        sources = {k: _source(sol["cells"][i]) for k, i in answer_cells(sol).items()}
    sources.update(replacements or {})
    for key, source in sources.items():
        if key not in cells:
            raise KeyError(f"{name} has no answer cell {key!r}; has {sorted(cells)}")
        nb["cells"][cells[key]]["source"] = source
    if stale_outputs:
        for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
            cell["execution_count"] = 40 - n
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": "<object at 0x7f3a9c2b1d60>\nok: stale\n"},
                {"output_type": "error", "ename": "NotImplementedError", "evalue": "your answer here",
                 "traceback": ["NotImplementedError: your answer here"]},
            ]
    if edit is not None:
        edit(nb)
    out_dir = where / "notebooks" / "exercises"
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "_config.yml", where / "_config.yml")
    (where / "code").mkdir(exist_ok=True)
    out = out_dir / f"{name}.ipynb"
    out.write_text(json.dumps(nb, indent=1))
    return out


def grade_with_pytest(paths: list[Path], exitfirst: bool = False, timeout: int = 1800,
                      stop_per_notebook: bool = False, cell_timeout: float | None = None) -> tuple[list[Report], str]:
    """Run the documented grading command on `paths` in one pytest process (`-x` if asked;
    stop_per_notebook: each notebook stops at its first failed cell, as `-x` would for it alone).

    Returns (one Report per path, in order; the whole output). All paths share one root."""
    root = Path(paths[0]).parents[3]
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
            *GRADE_ARGS[:-1], str(ROOT / GRADE_ARGS[-1]), "-c", "/dev/null",
            "--rootdir", str(root), *(["-x"] if exitfirst else []),
            *(["--grading-stop-per-notebook"] if stop_per_notebook else []),
            *(["--grading-timeout", str(cell_timeout)] if cell_timeout else []), *map(str, paths)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=root)
    output = ANSI.sub("", proc.stdout + proc.stderr)
    reports = parse_reports(output)
    names = [r.notebook for r in reports]
    assert len(reports) == len(paths) and all(n.endswith(Path(p).name) for n, p in zip(names, paths)), (
        f"expected one report per notebook {[Path(p).name for p in paths]}, got {names}\n" + output[-3000:])
    return reports, output


def exercise_names() -> list[str]:
    """The stem of every exercise notebook (each has a solution of the same name)."""
    return sorted(p.stem for p in EXERCISES.glob("*.ipynb"))
