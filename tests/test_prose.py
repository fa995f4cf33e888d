"""Reader-facing text carries no project-tracker language.

A reader of the book has no issue tracker and no goals list: "the issue's goal", a plot line
labelled "goal" or an instruction to "commit the JSON" is our process leaking onto the page.
Checked in every chapter's and exercise's markdown, in the string literals of code cells (plot
labels, titles, printed text) and in the book's own pages.
"""

import io
import json
import re
import tokenize

import pytest

from paths import ROOT

TRACKER = re.compile(r"\b(issues?|goals?|todo|fixme)\b|\bcommit the\b", re.IGNORECASE)
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
PAGES = sorted((ROOT / "book").glob("*.md"))


def _strings(source: str) -> list[str]:
    """Return the string literals of a code cell (comments and names are for authors)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    return [t.string for t in tokens if t.type == tokenize.STRING]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_tracker_words_in_notebooks(path):
    hits = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        source = "".join(cell["source"])
        texts = [source] if cell["cell_type"] == "markdown" else _strings(source)
        hits += [f"cell {i}: {m.group(0)!r}" for t in texts for m in TRACKER.finditer(t)]
    assert not hits, f"{path.name}: tracker words in reader-facing text: {hits}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_tracker_words_in_pages(path):
    hits = [m.group(0) for m in TRACKER.finditer(path.read_text())]
    assert not hits, f"{path.name}: tracker words: {hits}"
