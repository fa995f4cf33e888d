"""No page of the rendered book shows MyST source: every role and directive rendered.

A glue role inside display math, a citation in a table cell MyST does not parse, a directive
fence indented one level too far: each renders as its own source text (`{glue:text}`x``) with no
warning from the build. This reads every HTML page of the book as the reader gets it (the text
outside scripts, styles and code, and the alt and title attributes) and fails on any of `{glue`,
`{cite`, `{term`, `{numref`, ```` ```{ ```` or `:::{`. The book is built by tests/test_book.py's
fixture (from the committed outputs, as `make pdf` builds it); a planted role in a copy of a
built page proves the scan sees it.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_book import html  # noqa: F401  (the module-scoped book build, reused)

MARKERS = ("{glue", "{cite", "{term", "{numref", "```{", ":::{")
# scripts and styles are not read; code (`{term}` in the glossary's prose is written as code on
# purpose) shows MyST as MyST. A role that failed renders outside them, as text or inside math.
SKIPPED_TAGS = {"script", "style", "template", "noscript", "code", "pre", "kbd", "samp"}
READ_ATTRIBUTES = ("alt", "title", "aria-label")


class _Text(HTMLParser):
    """Collect (line, text) of what a reader sees: text outside scripts, styles and code, plus
    the attributes a reader or a screen reader gets."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skipping = 0
        self.parts: list[tuple[int, str]] = []

    def handle_starttag(self, tag, attrs):
        if tag in SKIPPED_TAGS:
            self.skipping += 1
        for name, value in attrs:
            if name in READ_ATTRIBUTES and value:
                self.parts.append((self.getpos()[0], value))

    def handle_startendtag(self, tag, attrs):
        for name, value in attrs:
            if name in READ_ATTRIBUTES and value:
                self.parts.append((self.getpos()[0], value))

    def handle_endtag(self, tag):
        if tag in SKIPPED_TAGS and self.skipping:
            self.skipping -= 1

    def handle_data(self, data):
        if not self.skipping and data.strip():
            self.parts.append((self.getpos()[0], data))


def unrendered(page: str) -> list[str]:
    """Return 'line N: ...excerpt...' for each MyST role or directive left as text in `page`."""
    parser = _Text()
    parser.feed(page)
    parser.close()
    found = []
    for line, text in parser.parts:
        for marker in MARKERS:
            for m in re.finditer(re.escape(marker), text):
                excerpt = re.sub(r"\s+", " ", text[max(0, m.start() - 40):m.end() + 40]).strip()
                found.append(f"line {line}: {marker} in …{excerpt}…")
    return found


def _pages(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(root).parts[:-1]))


def test_the_scan_sees_planted_roles_and_ignores_scripts():
    clean = ("<p>The cache holds <span>12 GB</span>.</p><script>var s = '{glue:text}`x`';</script>"
             "<p>Chapters link with <code>{term}</code>.</p><pre>```{note}</pre>")
    assert unrendered(clean) == []
    for planted in ("{glue:text}`kv_gb:.1f`", "{cite:p}`dao2022flashattention`", "{term}`KV cache`",
                    "{numref}`fig-x`", "```{admonition} Answer", ":::{admonition} Answer"):
        hits = unrendered(f"<p>The cache holds {planted} per GPU.</p>")
        assert len(hits) == 1 and planted[:5] in hits[0], (planted, hits)
    # inside display math (where MyST leaves roles alone) and in alt text
    assert unrendered(r"<div class='math'>\[ t = {glue:text}`t_ms` \]</div>")
    assert unrendered('<img src="f.png" alt="Figure: {glue:text}`n` requests"/>')


def test_no_page_shows_myst_source(html):  # noqa: F811
    pages = _pages(html)
    assert len(pages) >= 10, f"only {len(pages)} pages built under {html}"
    found = {str(p.relative_to(html)): hits for p in pages
             if (hits := unrendered(p.read_text(errors="replace")))}
    assert not found, "unrendered MyST in the built book:\n" + "\n".join(
        f"{page}: {hit}" for page, hits in found.items() for hit in hits)


def test_the_scan_catches_a_role_planted_in_a_built_page(html, tmp_path):  # noqa: F811
    """A copy of a real chapter page with one unrendered role in a paragraph fails the scan."""
    page = next(p for p in _pages(html) if p.name.startswith("01_"))
    text = page.read_text()
    if unrendered(text):
        pytest.skip(f"{page.name} already fails test_no_page_shows_myst_source")
    i = text.index("<p>", text.index("<main") if "<main" in text else 0)
    planted = tmp_path / page.name
    shutil.copy(page, planted)
    planted.write_text(text[:i] + "<p>About {glue:text}`planted_gb:.1f` GB.</p>" + text[i:])
    hits = unrendered(planted.read_text())
    assert len(hits) == 1 and "planted_gb" in hits[0]
