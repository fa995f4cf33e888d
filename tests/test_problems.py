"""Worked problems: at least five per chapter, each answer hidden and computed.

The convention (DEVELOPERS.md): a markdown cell that starts with `**Problem N.k.**`, then a code
cell tagged `hide-input` that computes the answer with the package, asserts it and glues its
numbers, then a markdown cell holding a dropdown admonition (collapsed in the rendered book, plain
in Jupyter) whose numbers are glued.
"""

import re

import nbformat
import pytest

from paths import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MIN_PROBLEMS = 5
HEAD = re.compile(r"^\*\*Problem (\d+)\.(\d+)\.\*\*")


def problems(path):
    """Return (number, question, code cell, answer cell) for each worked problem."""
    cells = nbformat.read(path, as_version=4).cells
    found = []
    for i, c in enumerate(cells):
        m = HEAD.match(c.source) if c.cell_type == "markdown" else None
        if m:
            code = cells[i + 1] if i + 1 < len(cells) else None
            answer = cells[i + 2] if i + 2 < len(cells) else None
            found.append(((int(m[1]), int(m[2])), c, code, answer))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_worked_problems(path):
    chapter = int(path.stem[:2])
    found = problems(path)
    assert len(found) >= MIN_PROBLEMS, f"{path.name}: {len(found)} worked problems"
    numbers = [n for n, *_ in found]
    assert numbers == [(chapter, k) for k in range(1, len(found) + 1)], numbers


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_answers_are_hidden_computed_and_glued(path):
    for (n, k), _, code, answer in problems(path):
        name = f"{path.name} Problem {n}.{k}"
        assert code is not None and code.cell_type == "code", f"{name}: no code cell"
        assert "hide-input" in code.metadata.get("tags", []), f"{name}: code not collapsed"
        assert code.execution_count is not None, f"{name}: code cell not executed"
        assert "glue(" in code.source, f"{name}: the answer's numbers are not glued"
        assert "claim(" in code.source or "assert " in code.source, f"{name}: nothing asserted"
        assert answer is not None and answer.cell_type == "markdown", f"{name}: no answer"
        assert re.search(r":class: dropdown", answer.source), f"{name}: answer not collapsed"
        assert "{glue:text}`" in answer.source, f"{name}: the answer glues no number"
        prefix = f"p{n}_{k}_"
        glued = set(re.findall(r"\{glue:text\}`([A-Za-z0-9_]+)", answer.source))
        assert any(g.startswith(prefix) for g in glued), f"{name}: names must start {prefix}"
