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


# ---- every speed or ratio claim names its baseline ------------------------------------------
# "2x faster", "{glue:text}`r:.1f`× slower", "a 3× speedup": a ratio of speeds means nothing
# until the reader knows against what it was measured. The sentence must say it: "than ...",
# "over ...", "vs ...", "against ...", "relative to ...", "compared with ...".
RATIO = re.compile(r"(?:\d|`|\))\s*(?:×|x\b|times\b)(?!\s*(?:\d|\{glue|\$))")  # not "64 × 64"
# Words a page quotes (a source's claim under examination, a title) are not the page's claims.
QUOTED = re.compile(r"\u201c[^\u201d]*\u201d|\"[^\"\n]*\"|\([^()]*[\u4e00-\u9fff][^()]*\)")
SPEED = re.compile(r"\b(faster|slower|quicker|speed-?ups?|slowdowns?)\b", re.IGNORECASE)
BASELINE = re.compile(
    r"\b(than|over|vs\.?|versus|against|relative to|compared (?:with|to)|baseline)\b",
    re.IGNORECASE)
SPEED_PAGES = sorted((ROOT / "book").glob("*.md"))


def speed_claims_without_baseline(markdown: str) -> list[str]:
    """Return the sentences of `markdown` that state a speed ratio without naming a baseline."""
    from test_claims import _sentences

    own = [QUOTED.sub("\u2026", s) for s in _sentences(markdown)]
    return [s.strip()[:160] for s in own
            if RATIO.search(s) and SPEED.search(s) and not BASELINE.search(s)]


def test_speed_claim_detector_can_fail():
    assert speed_claims_without_baseline("FlashAttention-2 is 3× faster on an A100.")
    assert speed_claims_without_baseline("It gives a {glue:text}`r:.1f`× speedup at 4K.")
    assert not speed_claims_without_baseline("FlashAttention-2 is 3× faster than FlashAttention.")
    assert not speed_claims_without_baseline("A 2× speedup over standard attention.")
    assert not speed_claims_without_baseline("Decoding is slower. It reads 3× more bytes.")
    assert not speed_claims_without_baseline('The lesson says "3× faster on an A100".')
    assert not speed_claims_without_baseline("Each 64 × {glue:text}`bk` tile is not slower.")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_speed_claims_name_their_baseline_in_notebooks(path):
    cells = json.loads(path.read_text())["cells"]
    hits = [f"cell {i}: {s}" for i, c in enumerate(cells) if c["cell_type"] == "markdown"
            for s in speed_claims_without_baseline("".join(c["source"]))]
    assert not hits, (f"{path.name}: a speed ratio without its baseline (say 'than ...', "
                      f"'over ...' or 'vs ...'):\n  " + "\n  ".join(hits))


@pytest.mark.parametrize("path", SPEED_PAGES, ids=lambda p: p.name)
def test_speed_claims_name_their_baseline_in_pages(path):
    hits = speed_claims_without_baseline(path.read_text())
    assert not hits, (f"{path.name}: a speed ratio without its baseline:\n  " + "\n  ".join(hits))
