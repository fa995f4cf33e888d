"""A fitted constant is reported on data it was not fitted to, and the page says which is which.

Wherever a chapter validates something fitted (the step-cost model's efficiencies, the vLLM
log check's constants, chapter 7's formula, chapter 9's CPU fit), the sentence that gives its
error must name the data the error is on: held out from the fit, or in-sample (the data it was
fitted on). An error quoted without that label reads as a held-out result even when it is an
in-sample one, which is the mistake this test exists to catch (as `test_prose` catches a ratio
without its baseline).

The rule, per markdown paragraph (a list item or table row counts as its own paragraph):
a paragraph that speaks of a fit ("fitted", "calibrated", "the fit", "fitted on") and gives an
error figure (a glued number after "error", "off by" or "deviates" in the same clause, before
"error", or "within {glue} %") must also carry a label: "held out"/"held-out"/"out of sample", or
"in-sample"/"in sample"/"on the data it was fitted to"/"the fit set"/"calibration steps".
"""

import json
import re

import pytest

from paths import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("0*.ipynb"))

FIT = re.compile(r"\b(fitted|calibrat\w*|the fit|its fit|a fit|refit\w*)\b", re.IGNORECASE)
# an error figure: an error word and then a glued number in the same clause ("median error
# {glue}", "off by {glue} %"), a glued number followed by "error" ("{glue} % error"), or
# "within {glue} %"
_G = r"\{glue:text\}`[^`]+`"
ERROR_FIGURE = re.compile(
    r"\b(?:errors?|off by|deviat\w*)\b[^.;]{0,80}?" + _G
    + "|" + _G + r"\s*%?\s*(?:\w+\s+){0,3}(?:errors?|off)\b"
    + r"|\bwithin\s+" + _G + r"\s*%", re.IGNORECASE)
LABEL = re.compile(r"held[- ]out|held out|out[- ]of[- ]sample|in[- ]sample|fitted to|fit set|"
                   r"calibration (?:steps|runs|set|logs)|not (?:used in|part of) the fit",
                   re.IGNORECASE)


def paragraphs(markdown: str) -> list[str]:
    """Split markdown into paragraphs: blank-line blocks, with each list item and table row apart."""
    out = []
    for block in re.split(r"\n\s*\n", markdown):
        out += [p for p in re.split(r"\n(?=\s*(?:[-*+] |\d+\. |\|))", block) if p.strip()]
    return out


def unlabelled_fit_errors(markdown: str) -> list[str]:
    """Return the paragraphs of `markdown` that report a fitted thing's error without saying
    whether it is held out or in-sample."""
    bad = []
    for para in paragraphs(markdown):
        if FIT.search(para) and ERROR_FIGURE.search(para) and not LABEL.search(para):
            bad.append(re.sub(r"\s+", " ", para)[:200])
    return bad


def test_rule_catches_an_unlabelled_fit_and_passes_a_labelled_one():
    unlabelled = ("With the fitted efficiencies the model is within "
                  "{glue:text}`err:.1f` % of the measured runs.")
    assert unlabelled_fit_errors(unlabelled)
    assert not unlabelled_fit_errors(unlabelled.replace("measured runs", "held-out runs"))
    assert not unlabelled_fit_errors(unlabelled + " (in-sample: the runs it was fitted to)")
    # a fit named without an error figure, or an error with no glued number, is not a report
    assert not unlabelled_fit_errors("The efficiencies are fitted once, in `cost_model`.")
    assert not unlabelled_fit_errors("The search quotes the fit and its error.")
    assert not unlabelled_fit_errors("The fitted line is monotone; a median of "
                                     "{glue:text}`n` runs each.")
    assert unlabelled_fit_errors("Fitted on six logs, it is off by {glue:text}`x:.1f` %.")
    assert unlabelled_fit_errors("The calibrated model: {glue:text}`x:.1f` % median error.")
    # one paragraph's label does not cover the next paragraph's report
    assert unlabelled_fit_errors("Held-out runs come later.\n\n" + unlabelled)
    # nor does one list item's label cover another's
    assert unlabelled_fit_errors("- On held-out data, see below.\n" + "- " + unlabelled)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_fit_error_says_held_out_or_in_sample(path):
    bad = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "markdown":
            bad += [f"cell {i}: {p}" for p in unlabelled_fit_errors("".join(cell["source"]))]
    assert not bad, (f"{path.name}: an error of something fitted, without saying whether it is "
                     "held out or in-sample:\n" + "\n".join(bad))
