"""The book as a reader meets it, on the built HTML: one calculator per idea on chapters 1 and 2,
and solution pages that answer instead of restating their exercise.

Reuses the book built by tests/test_book.py (its module fixture `html`, the strict build from
the committed outputs), so run it with that file when both are wanted in one build.
"""

import re

import pytest

from test_book import CHAPTERS, SOLUTIONS, html  # noqa: F401  (html is the shared fixture)

WIDGET_VIEW = '<script type="application/vnd.jupyter.widget-view+json">'


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


@pytest.mark.parametrize("name", CHAPTERS[:2])
def test_one_calculator_per_idea(html, name):  # noqa: F811
    page = (html / f"{name}.html").read_text()
    assert 'class="ib-calc" data-inferbook-calc=' in page, f"{name}: its static calculator is missing"
    assert page.count(WIDGET_VIEW) == 0, f"{name}: an ipywidget copy is shown beside the static calculator"
    assert not re.search(r"needs a running kernel", _text(page), re.I), f"{name}: a note for a hidden widget"


@pytest.mark.parametrize("name", SOLUTIONS)
def test_solution_page_answers(html, name):  # noqa: F811
    page = (html / f"{name}.html").read_text()
    text = _text(page)
    stem = name.rsplit("/", 1)[-1]
    assert "Fill in the cell" not in text and "How to grade yourself" not in text, name
    assert f'href="../exercises/{stem}.html' in page, f"{name}: no link to its exercise"
    exercise = _text((html / "notebooks" / "exercises" / f"{stem}.html").read_text())
    assert "How to grade yourself" in exercise and "Fill in the cell" in exercise, stem
