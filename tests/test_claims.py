"""A sentence is a claim: prose that compares glued numbers is asserted where they are glued.

For every markdown sentence that uses a glued number ({glue:text}`name`) together with a word of
comparison or quantity ("less than", "only", "fits", "faster", "at most", ...), the code cell
that glues one of those numbers must also call `claim(...)` (inferbook.notebook.claim), which
raises when the words stop being true. This test checks that the assertion exists; executing the
notebook (nbval, the book build) checks that it holds.
"""

import json
import re

import pytest

from paths import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
GLUE_REF = re.compile(r"\{glue:(?:text|md)\}`([A-Za-z0-9_]+)")
COMPARISON = re.compile(
    r"\b(less|more|fewer|smaller|larger|bigger|faster|slower|only|fits?|exceeds?|at most|"
    r"at least|cheaper|below|above|within|half|twice|double)\b",
    re.IGNORECASE,
)
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def _sentences(markdown: str) -> list[str]:
    """Split a markdown cell into sentences; fences, headings, directive options and list items
    end a sentence."""
    lines = []
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith((":", "#")) or not stripped:
            lines.append("\n\n")
            continue
        if stripped.startswith("```"):
            stripped = stripped.lstrip("`")
            stripped = re.sub(r"^\{[^}]*\}\s*\S*", "", stripped)
            lines.append("\n\n" + stripped)
            continue
        if re.match(r"([*-]|\d+\.)\s", stripped):
            lines.append("\n\n")
        lines.append(stripped)
    blocks = re.split(r"\n\n+", " ".join(lines))
    return [s for block in blocks for s in SENTENCE.split(block) if s.strip()]


def _glue_sites(cells):
    """Map glued name (or f-string prefix) -> indices of the code cells that glue it."""
    sites = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for m in re.finditer(r"glue\(\s*(f?)[\"']([^\"']+)[\"']", source):
            name = m.group(2).split("{")[0] if m.group(1) else m.group(2)
            sites.setdefault((name, bool(m.group(1))), []).append(i)
    return sites


def _cells_gluing(name, sites):
    exact = sites.get((name, False), [])
    prefixed = [i for (n, f), idx in sites.items() if f and name.startswith(n) for i in idx]
    return exact + prefixed


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_comparisons_on_glued_numbers_are_claimed(path):
    cells = json.loads(path.read_text())["cells"]
    sites = _glue_sites(cells)
    unclaimed = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        for sentence in _sentences("".join(cell["source"])):
            names = GLUE_REF.findall(sentence)
            if not names or not COMPARISON.search(sentence):
                continue
            gluing = {i for n in names for i in _cells_gluing(n, sites)}
            if not any(re.search(r"\bclaim\(|\bassert\b", "".join(cells[i]["source"])) for i in gluing):
                unclaimed.append(sentence.strip()[:160])
    assert not unclaimed, (
        f"{path.name}: sentences compare glued numbers but no gluing cell calls claim(...):\n  "
        + "\n  ".join(unclaimed))
