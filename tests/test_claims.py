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


# ---- no sentence renders a degenerate glued value ------------------------------------------
# "one GPU holds a single sequence of at most 0 tokens" is a sentence that should never have
# been printed: where nothing fits, the words must change, not the number. This reads the
# values glue() stored in the committed outputs (myst_nb's display_data with a "scrapbook"
# name), renders each {glue:text}`name:fmt` the way the page will, and fails on an empty,
# NaN, zero or negative result. A markdown cell tagged `glue-nonpositive-ok` declares that its
# sentences mean a zero or a negative value (a difference that may be negative, say).
ALLOW_TAG = "glue-nonpositive-ok"
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)\}`([A-Za-z0-9_]+)(?::([^`]*))?`")


def glued_values(cells) -> dict:
    """Return {name: text/plain} of every value glued in the cells' committed outputs."""
    values = {}
    for cell in cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = out.get("data", {})
            text = data.get("application/papermill.record/text/plain")
            if text is None and any(k.startswith("application/papermill.record/image")
                                    for k in data):
                continue                                       # a figure
            values[name] = "".join(text) if isinstance(text, list) else text
    return values


def rendered(text: str, spec: str | None) -> str:
    """Return the value as {glue:text}`name:spec` shows it."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            value = float(text)                               # nan, inf
        except ValueError:
            return text
    if isinstance(value, str):
        return value
    if spec and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return format(value, spec)
        except ValueError:
            return str(value)
    return str(value)


def degenerate(shown: str) -> str | None:
    """Return why a rendered value is degenerate (empty, NaN, zero, negative), else None."""
    stripped = shown.strip()
    if not stripped:
        return "empty"
    number = stripped.replace(",", "").rstrip("%")
    try:
        x = float(number)
    except ValueError:
        return None                                          # words: not a number
    if x != x:
        return "NaN"
    if x == 0:
        return "zero"
    if x < 0:
        return "negative"
    return None


def degenerate_glues(cells) -> list[str]:
    values = glued_values(cells)
    hits = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown" or ALLOW_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        for sentence in _sentences("".join(cell["source"])):
            for name, spec in GLUE_ROLE.findall(sentence):
                if name not in values:
                    continue                                  # checked by the build (-n -W)
                shown = rendered(values[name], spec or None)
                why = degenerate(shown)
                if why:
                    hits.append(f"cell {i}: {name} renders {shown!r} ({why}): {sentence[:120]}")
    return hits


def test_degenerate_glue_detector_can_fail():
    def cells(value, spec=":,"):
        out = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "x"}},
               "data": {"application/papermill.record/text/plain": value}}
        return [{"cell_type": "code", "source": [], "outputs": [out], "metadata": {}},
                {"cell_type": "markdown", "metadata": {},
                 "source": [f"It holds at most {{glue:text}}`x{spec}` tokens."]}]

    assert degenerate_glues(cells("0"))
    assert degenerate_glues(cells("-3.5", ":.1f"))
    assert degenerate_glues(cells("nan", ":.2f"))
    assert degenerate_glues(cells("0.3", ":.0f"))              # rounds to 0 on the page
    assert degenerate_glues(cells("''", ""))
    assert not degenerate_glues(cells("4096"))
    assert not degenerate_glues(cells("'none yet'", ""))
    allowed = cells("0")
    allowed[1]["metadata"]["tags"] = [ALLOW_TAG]
    assert not degenerate_glues(allowed)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_sentence_renders_a_degenerate_glued_value(path):
    hits = degenerate_glues(json.loads(path.read_text())["cells"])
    assert not hits, (f"{path.name}: a sentence shows an empty, NaN, zero or negative value; "
                      f"change the words for that case (or tag the cell {ALLOW_TAG} if the "
                      "sentence means it):\n  " + "\n  ".join(hits))
