"""Helpers for tests that grade exercise notebooks in both directions.

An exercise's answer cells carry the cell tag `answer` and a metadata key `"answer": "<name>"`.
`variant()` writes a copy of a notebook with one answer cell replaced (a wrong answer, or the
solution's answer), and `run_nbval()` runs the learner's command on it in a subprocess.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "notebooks" / "exercises"
SOLUTIONS = ROOT / "notebooks" / "solutions"


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class NbvalRun:
    returncode: int
    output: str

    @property
    def passed(self) -> bool:
        return self.returncode == 0

    def failed_cells(self) -> list[int]:
        """Return the numbers of the cells nbval reported as failed (as in `::Cell 5`)."""
        return sorted({int(n) for n in re.findall(r"::Cell (\d+)", self.output)
                       if f"Cell {n}" in self.output})

    def check_failures(self) -> list[str]:
        """Return the names of the grading checks that failed (from 'CHECK FAILED [name]')."""
        return sorted(set(re.findall(r"CHECK FAILED \[([^\]]+)\]", self.output)))


def answer_cells(nb) -> dict[str, int]:
    """Return {answer name: cell index} for the cells tagged `answer`."""
    return {
        cell.metadata["answer"]: i
        for i, cell in enumerate(nb.cells)
        if "answer" in cell.metadata.get("tags", [])
    }


def variant(src: Path, tmp_path: Path, replacements: dict[str, str] | None = None,
            from_notebook: Path | None = None) -> Path:
    """Copy `src` into `tmp_path/notebooks/exercises/` with answer cells replaced.

    `replacements` maps answer names to new source; `from_notebook` takes every answer cell
    from another notebook (e.g. the solution). The copy keeps the repo-relative layout so
    `repo_root()` and relative paths work.
    """
    nb = nbformat.read(src, as_version=4)
    cells = answer_cells(nb)
    new_sources = dict(replacements or {})
    if from_notebook is not None:
        other = nbformat.read(from_notebook, as_version=4)
        for name, i in answer_cells(other).items():
            new_sources.setdefault(name, other.cells[i].source)
    for name, source in new_sources.items():
        if name not in cells:
            raise KeyError(f"{src.name} has no answer cell named {name!r}; has {sorted(cells)}")
        nb.cells[cells[name]].source = source
    out_dir = tmp_path / "notebooks" / "exercises"
    out_dir.mkdir(parents=True, exist_ok=True)
    for marker in ("_config.yml",):
        shutil.copy(ROOT / marker, tmp_path / marker)
    (tmp_path / "code").mkdir(exist_ok=True)
    out = out_dir / src.name
    nbformat.write(nb, out)
    return out


def run_nbval(path: Path, timeout: int = 300) -> NbvalRun:
    """Run `pytest --nbval PATH` (the learner's grading command) and return its outcome."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider", "-q",
         "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"),
         "--rootdir", str(path.parent), "-c", "/dev/null", str(path)],
        capture_output=True, text=True, timeout=timeout, cwd=path.parent,
    )
    return NbvalRun(proc.returncode, ANSI.sub("", proc.stdout + proc.stderr))


def exercise_names() -> list[str]:
    """Return the stem of every exercise notebook (each has a solution of the same name)."""
    return sorted(p.stem for p in EXERCISES.glob("*.ipynb"))


def run_exercise(name: str, tmp_path: Path, answers: str = "solution",
                 replacements: dict[str, str] | None = None) -> NbvalRun:
    """Grade exercise `name` as a learner would, with its answer cells filled in.

    answers="solution": every answer cell from the solution notebook, except `replacements`
    (a wrong answer under test); answers="blank": the notebook as handed out.
    """
    if answers not in ("solution", "blank"):
        raise ValueError(f"answers must be 'solution' or 'blank', got {answers!r}")
    solution = SOLUTIONS / f"{name}.ipynb" if answers == "solution" else None
    return run_nbval(variant(EXERCISES / f"{name}.ipynb", tmp_path, replacements, from_notebook=solution))


def solution_answer(name: str, answer: str, old: str, new: str) -> str:
    """Return the solution's `answer` cell of exercise `name` with `old` replaced by `new`.

    Wrong answers written this way differ from the solution in exactly the piece under test.
    """
    nb = nbformat.read(SOLUTIONS / f"{name}.ipynb", as_version=4)
    source = nb.cells[answer_cells(nb)[answer]].source
    if old not in source:
        raise ValueError(f"{name}/{answer}: the solution no longer contains {old!r}")
    return source.replace(old, new)
