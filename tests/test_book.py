"""The book builds strictly and its pages work in a real browser.

nbval (in this same suite) re-executes every chapter and solution notebook and compares the
outputs with the committed ones, so here the book is built from the committed outputs
(`execute_notebooks: off`) rather than executing everything a second time. `make book` executes.
The build is strict: -W -n --keep-going --all, zero warnings.
Screenshots are saved in test-artifacts/ (kept by CI as artifacts).

Reading checks in the browser (headless Chromium): at 1280 px and 390 px no chapter, exercise,
solution, errata or intro page scrolls sideways (code and tables may scroll inside their own box),
no display equation is clipped at 1280 px, figures are sharp (>= 150 dpi) and legible at column
width, every figure is captioned with alt text from its caption, every notebook page has an
"Open in Colab" badge built from _config.yml, and embedded ipywidgets say they need a kernel.
The static calculators (book/calculators/) are driven through their inputs on a grid and their
answers compared with inferbook.sizing / inferbook.roofline; the first answer each shows (before
any input changes) is checked too, on the chapters that embed them.

Reader checks added with the wider column (book/_static/inferbook.css): at 1280 px no code block
or printed output scrolls sideways on a chapter, exercise or solution page and the code column
holds at least 88 characters; no table is wider than the column; number cells are right-aligned
and text cells left-aligned; at 390 px tapping a figure opens it at a size whose smallest text is
readable; each embedded widget has exactly one "needs a running kernel" note; solutions are out
of the reading order (collapsed in the sidebar, never "Next" from a chapter, an exercise or the
references) and open with a banner naming their exercise.
"""

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from paths import ROOT
from inferbook.notebook import MIN_TEXT_PT

ARTIFACTS = ROOT / "test-artifacts"
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = [f"notebooks/{m}" for m in re.findall(r"file: notebooks/(\d\d_\w+)", TOC)]
EXERCISES = re.findall(r"file: (notebooks/exercises/\w+)", TOC)
SOLUTIONS = re.findall(r"file: (notebooks/solutions/\w+)", TOC)
NOTEBOOK_PAGES = CHAPTERS + EXERCISES + SOLUTIONS
READING_PAGES = ["book/intro", "book/errata"] + NOTEBOOK_PAGES
needs_chromium = pytest.mark.skipif(not shutil.which("chromium"),
                                    reason="chromium is not installed (apt-get install chromium)")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


BUILD_LOG = []   # [returncode, warning lines, log] of the build below


def _make_pdf():
    spec = importlib.util.spec_from_file_location("make_pdf", ROOT / "tools" / "make_pdf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    """The book built from the committed outputs, as `make pdf` builds it (one function:
    tools/make_pdf.py build_html)."""
    out = tmp_path_factory.mktemp("book")
    html, proc = _make_pdf().build_html(out, capture=True)
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    # --keep-going writes every page even when a warning fails the build: the page checks below
    # still run (and report their own findings); test_build_is_strict reports the warnings.
    if not (html / f"{CHAPTERS[0]}.html").is_file():
        pytest.fail("the book did not build:\n" + ("\n".join(warnings) or log[-3000:]))
    BUILD_LOG[:] = [proc.returncode, warnings, log]
    return html


def test_build_is_strict(html):
    returncode, warnings, log = BUILD_LOG
    assert returncode == 0 and not warnings, "\n".join(warnings) or log[-3000:]


def test_every_page_built(html):
    for page in CHAPTERS + ["book/glossary", "book/errata", "book/bibliography", "book/how_to_use"]:
        assert (html / f"{page}.html").is_file(), page


def test_math_and_widget_js_served_locally(html):
    page = (html / "notebooks" / "01_kv_cache.html").read_text()
    assert "cdn.jsdelivr.net" not in page and "cdnjs.cloudflare.com" not in page
    assert (html / "_static" / "embed-amd.js").is_file() and (html / "_static" / "require.js").is_file()
    assert re.search(r'src="[^"]*mathjax[^"]*\.js', page, re.I), "MathJax must be served from the book"


def test_colab_link_on_every_chapter(html):
    for chapter in CHAPTERS:
        page = (html / f"{chapter}.html").read_text()
        assert "colab.research.google.com/github/" in page and f"{chapter}.ipynb" in page, chapter


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed (apt-get install chromium)")
def test_pages_in_headless_chromium(html):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        for chapter in CHAPTERS:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"failed request {r.url}"))
            page.goto((html / f"{chapter}.html").as_uri())
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            page.evaluate("() => MathJax.startup.promise")
            n_math = page.locator("mjx-container").count()
            n_figures = page.locator("img").evaluate_all(
                "imgs => imgs.filter(i => i.complete && i.naturalWidth > 100).length")
            colab = page.locator("a[href*='colab.research.google.com']").count()
            page.screenshot(path=str(ARTIFACTS / f"{Path(chapter).name}.png"), full_page=False)
            page.close()
            if errors:
                problems.append(f"{chapter}: console errors {errors[:5]}")
            if n_math == 0:
                problems.append(f"{chapter}: no rendered math")
            if n_figures == 0:
                problems.append(f"{chapter}: no figure rendered")
            if colab == 0:
                problems.append(f"{chapter}: no Colab link")
        browser.close()
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------
# Reading checks: the page fits, math is whole, figures read, every figure is captioned.

OVERFLOW_JS = r"""() => {
  const doc = document.documentElement, cw = doc.clientWidth;
  const clipsX = el => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (/(auto|scroll|hidden|clip)/.test(s.overflowX) || s.position === 'fixed') return true; }
    return getComputedStyle(el).position === 'fixed'; };
  const wide = [];
  if (doc.scrollWidth > cw) {
    for (const el of document.querySelectorAll('body *')) {
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > cw + 1 && !clipsX(el)) {
        wide.push(`<${el.tagName.toLowerCase()} class="${el.className}"> right=${Math.round(r.right)}px `
                  + JSON.stringify((el.textContent || '').trim().slice(0, 60)));
      }
    }
  }
  const math = [...document.querySelectorAll('mjx-container[display="true"]')]
    .filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => `equation ${c.scrollWidth}px wide in a ${c.clientWidth}px box `
              + JSON.stringify(c.textContent.slice(0, 60)));
  // MathJax's own size: unscaled display equations render at the font size inline math does
  const px = c => parseFloat(getComputedStyle(c).fontSize);
  const displaySizes = [...document.querySelectorAll('mjx-container[display="true"]')]
    .filter(c => !c.dataset.ibScaled).map(px);
  const inlineSizes = [...document.querySelectorAll('mjx-container:not([display="true"])')]
    .filter(c => !c.closest('table, h1, h2, h3, h4, figcaption, .caption')).map(px);
  const scaledShare = [...document.querySelectorAll('mjx-container[display="true"]')]
    .filter(c => c.dataset.ibScaled).map(c => px(c) / parseFloat(getComputedStyle(c.parentElement).fontSize));
  const imgs = [...document.querySelectorAll('article img')].map(i => ({
    src: i.getAttribute('src'), shown: i.getBoundingClientRect().width, natural: i.naturalWidth}));
  // code blocks and printed outputs that scroll sideways; how many characters the column holds
  const pres = [...document.querySelectorAll('article pre')];
  const codeScroll = pres.filter(p => p.scrollWidth > p.clientWidth + 1).map(p =>
    p.textContent.split('\n').reduce((a, l) => l.length > a.length ? l : a, '').slice(0, 100));
  let codeChars = null;
  const cellPre = document.querySelector('article div.cell_input pre') || pres[0];
  if (cellPre) {
    const cs = getComputedStyle(cellPre), ctx = document.createElement('canvas').getContext('2d');
    ctx.font = cs.font;
    const inner = cellPre.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    codeChars = inner / (ctx.measureText('x'.repeat(100)).width / 100);
  }
  const art = document.querySelector('article');
  const tables = [...document.querySelectorAll('article table')];
  const wideTables = tables.filter(t => t.getBoundingClientRect().width > art.clientWidth + 1)
    .map(t => `${Math.round(t.getBoundingClientRect().width)}px: ` + t.rows[0].textContent.trim().slice(0, 60));
  const misaligned = [];
  for (const t of tables) for (const c of t.querySelectorAll('td.ib-num, td.ib-text')) {
    const want = c.classList.contains('ib-num') ? 'right' : 'left', got = getComputedStyle(c).textAlign;
    if (!(got === want || (want === 'left' && got === 'start'))) misaligned.push(`${JSON.stringify(c.textContent.trim().slice(0, 30))} is ${got}`);
  }
  const unclassified = tables.reduce((n, t) => n + t.querySelectorAll('td:not(.ib-num):not(.ib-text)').length, 0);
  // every table: the box that scrolls it sideways (if any), whether it needs to, and the hint
  const tableLayout = tables.filter(t => !t.closest('.ib-calc')).map(t => {
    let box = null;
    for (let p = t.parentElement; p && p.tagName !== 'ARTICLE'; p = p.parentElement)
      if (/(auto|scroll)/.test(getComputedStyle(p).overflowX)) { box = p; break; }
    const width = t.getBoundingClientRect().width, host = box || t.parentElement;
    const before = host.previousElementSibling;
    const hint = !!before && before.classList.contains('ib-table-hint') && before.checkVisibility()
      && before.getBoundingClientRect().height > 0;
    return {head: ((t.rows[0] || {}).textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60),
            width: Math.round(width), room: art.clientWidth, inBox: !!box,
            scrolls: !!box && width > box.clientWidth + 1, hint, stacked: t.classList.contains('ib-stacked')};
  });
  const rt = document.querySelector('article .ib-reading-time');
  const readingTime = rt ? {text: rt.textContent.trim(), bottom: rt.getBoundingClientRect().bottom + scrollY,
                            visible: rt.checkVisibility()} : null;
  // how much of the page's height is code a reader scrolls past (input cells, not outputs;
  // a collapsed hide-input cell takes no room, though Chromium still reports its box's height)
  const codeHeight = [...document.querySelectorAll('article div.cell_input')]
    .filter(c => !c.closest('details:not([open])'))
    .reduce((h, c) => h + c.getBoundingClientRect().height, 0);
  const codeShare = art ? codeHeight / art.getBoundingClientRect().height : 0;
  return {scrollWidth: doc.scrollWidth, clientWidth: cw, wide: wide.slice(0, 5), math, imgs, codeShare,
          tableLayout, readingTime, viewportHeight: innerHeight,
          displaySizes, inlineSizes, scaledShare,
          codeScroll, codeChars, wideTables, misaligned: misaligned.slice(0, 5), unclassified,
          tablesAligned: doc.dataset.ibTablesAligned === '1'};
}"""
# The smallest plot text the book sets (inferbook.notebook.MIN_TEXT_PT, which the chapters'
# kernels enforce as they draw) comes out at pt x dpi / 72 x the factor the page shrinks the
# image by. At a laptop's 1280 px, 11 CSS px is about the smallest a reader reads comfortably;
# on a phone (390 px), 9 CSS px is about the smallest read without zooming.
LEGEND_PT, MIN_TEXT_PX, MIN_PHONE_TEXT_PX, MIN_DPI = MIN_TEXT_PT, 11.0, 9.0, 150


def png_dpi(path: Path) -> float | None:
    """Return the dots per inch stored in a PNG's pHYs chunk (matplotlib writes it), else None."""
    data = path.read_bytes()
    at = data.find(b"pHYs")
    if at < 0:
        return None
    x_ppu, _y, unit = struct.unpack(">IIB", data[at + 4: at + 13])
    return x_ppu * 0.0254 if unit == 1 else None


def _browser(p):
    return p.chromium.launch(executable_path=shutil.which("chromium"), args=BROWSER_ARGS)


def _open(browser, url, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(url)
    # inferbook.js sets this once MathJax has typeset and wide equations are fitted
    page.wait_for_function("() => document.documentElement.dataset.ibMathFitted === '1'",
                           timeout=30000)
    return page


@pytest.fixture(scope="module")
def measured(html):
    """Measure every reading page at 1280 px and 390 px once: {(page, width): result}."""
    from playwright.sync_api import sync_playwright

    results = {}
    with sync_playwright() as p:
        browser = _browser(p)
        for name in READING_PAGES:
            for width in (1280, 390):
                page = _open(browser, (html / f"{name}.html").as_uri(), width)
                results[name, width] = page.evaluate(OVERFLOW_JS)
                page.close()
        browser.close()
    return results


@needs_chromium
@pytest.mark.parametrize("width", [1280, 390])
def test_no_page_scrolls_sideways(measured, width):
    problems = [
        f"{name} at {width}px: page is {r['scrollWidth']}px wide in a {r['clientWidth']}px window; "
        + "; ".join(r["wide"])
        for (name, w), r in measured.items() if w == width and r["scrollWidth"] > r["clientWidth"]
    ]
    assert not problems, "\n".join(problems)


@needs_chromium
def test_code_fits_its_column_at_1280(measured):
    """No code block or printed output scrolls sideways; the column holds 88-column code."""
    problems = []
    for (name, width), r in measured.items():
        if width != 1280 or name not in NOTEBOOK_PAGES:
            continue
        if r["codeChars"] is not None and r["codeChars"] < 88:
            problems.append(f"{name}: the code column holds {r['codeChars']:.1f} characters (< 88)")
        problems += [f"{name}: a code block scrolls sideways, its longest line ({len(line)} chars): "
                     f"{line!r}" for line in r["codeScroll"]]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


@needs_chromium
def test_tables_fit_and_align_at_1280(measured):
    problems = []
    for (name, width), r in measured.items():
        if width != 1280:
            continue
        problems += [f"{name}: table {t} wider than the column" for t in r["wideTables"]]
        problems += [f"{name}: cell {m}" for m in r["misaligned"]]
        if not r["tablesAligned"] or r["unclassified"]:
            problems.append(f"{name}: {r['unclassified']} table cells were not classified "
                            "number/text by inferbook.js")
    assert not problems, "\n".join(problems)


@needs_chromium
@pytest.mark.parametrize("width", [1280, 390])
def test_tables_readable_at_width(measured, width):
    """No table runs past the window without a box that scrolls it; a table that scrolls in its
    box has a visible line above it saying so (none where it does not); on a phone the intro's
    chapter table and chapter 8's "each choice traced" table (stacked, a card per row) need no
    sideways scrolling at all."""
    problems, seen = [], set()
    for (name, w), r in measured.items():
        if w != width:
            continue
        for t in r["tableLayout"]:
            where = f"{name} at {width}px: table {t['head'][:40]!r} ({t['width']}px, column {t['room']}px)"
            if t["width"] > t["room"] + 1 and not t["inBox"]:
                problems.append(f"{where} runs past the column with no scroll box")
            if t["scrolls"] and not t["hint"]:
                problems.append(f"{where} scrolls sideways with no visible hint")
            if t["hint"] and not t["scrolls"]:
                problems.append(f"{where} says it scrolls but does not")
            must_fit = name == "book/intro" or (name.startswith("notebooks/08_")
                                                and t["head"].startswith("decision"))
            if width == 390 and must_fit:
                seen.add(name)
                if t["scrolls"] or t["width"] > t["room"] + 1:
                    problems.append(f"{where} must be readable without scrolling sideways")
    if width == 390:
        assert {"book/intro", CHAPTERS[7]} <= seen, f"tables not found: {seen}"
    assert not problems, "\n".join(problems)


class _PageText(__import__("html.parser").parser.HTMLParser):
    """The article's prose (outside code cells, code and scripts), the text of each code block
    shown open (a cell's input unless collapsed by hide-input, or a code fence) and its images."""

    VOID = frozenset({"img", "br", "hr", "input", "meta", "link", "source", "wbr", "col", "area"})

    def __init__(self):
        super().__init__()
        self.stack, self.prose, self.code, self.images = [], [], [], 0

    def _inside(self, pred):
        return any(pred(tag, cls) for tag, cls in self.stack)

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "img" and self._inside(lambda t, c: t == "article"):
            self.images += 1
        if tag in self.VOID:
            return
        self.stack.append((tag, cls.split()))
        if tag == "pre" and self._inside(lambda t, c: t == "article") and not self._inside(
                lambda t, c: "cell_output" in c or "tag_hide-input" in c):
            self.code.append("")

    def handle_endtag(self, tag):   # close the innermost open `tag` (a stray end tag: nothing)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if not self._inside(lambda t, c: t == "article") or self._inside(
                lambda t, c: t in ("script", "style")):
            return
        if self._inside(lambda t, c: t == "pre"):
            if self.code and not self._inside(lambda t, c: "cell_output" in c or "tag_hide-input" in c):
                self.code[-1] += data
        elif not self._inside(lambda t, c: bool({"cell", "ib-reading-time", "ib-colab"} & set(c))):
            self.prose.append(data)


def test_reading_time_under_every_chapter_title(html):
    """Each chapter opens with "About N min read": N from its prose, visible code and figures as
    book/_ext counts them, and the counts agree with the page (code lines exactly)."""
    spec = importlib.util.spec_from_file_location("inferbook_sphinx", ROOT / "book" / "_ext" / "inferbook_sphinx.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    problems = []
    for chapter in CHAPTERS:
        page = (html / f"{chapter}.html").read_text()
        m = re.search(r'<p class="ib-reading-time" data-minutes="(\d+)" data-words="(\d+)" '
                      r'data-code-lines="(\d+)" data-figures="(\d+)"><strong>About (\d+) min read</strong>',
                      page)
        if not m:
            problems.append(f"{chapter}: no reading time")
            continue
        minutes, words, lines, figures, said = map(int, m.groups())
        if said != minutes or minutes != ext.reading_minutes(words, lines, figures):
            problems.append(f"{chapter}: says {said} min for {words} words, {lines} lines, {figures} figures")
        # right under the title, before the Colab badge and the first cell
        h1_end = page.index("</h1>")
        if not h1_end < m.start() < page.index("ib-colab-badge") < page.find('class="cell'):
            problems.append(f"{chapter}: the reading time is not right under the title")
        shown = _PageText()
        shown.feed(page)
        shown_code = sum(1 for block in shown.code for line in block.splitlines() if line.strip())
        if shown_code != lines:
            problems.append(f"{chapter}: counted {lines} code lines, the page shows {shown_code}")
        if shown.images != figures:
            problems.append(f"{chapter}: counted {figures} figures, the page has {shown.images} images")
        prose = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]|\$\$.*?\$\$", " ", " ".join(shown.prose), flags=re.S)
        n_words = len(prose.split())
        if not 0.9 * n_words <= words <= 1.1 * n_words:
            problems.append(f"{chapter}: counted {words} words of prose, the page has about {n_words}")
    assert not problems, "\n".join(problems)


@needs_chromium
def test_reading_time_on_the_first_screen(measured):
    problems = []
    for (name, width), r in measured.items():
        if name not in CHAPTERS:
            continue
        rt = r["readingTime"]
        if rt is None or not rt["visible"] or rt["bottom"] > r["viewportHeight"]:
            problems.append(f"{name} at {width}px: the reading time is not on the first screen: {rt}")
    assert not problems, "\n".join(problems)


ZOOM_JS = r"""async () => {
  const img = document.querySelector('article figure a.ib-zoomable img, article .cell_output a.ib-zoomable img');
  if (!img) return null;
  const badge = img.parentElement.querySelector('.ib-zoom-badge');
  const badgeShown = !!badge && getComputedStyle(badge).opacity > 0.5 && badge.getBoundingClientRect().width > 0;
  const before = {shown: img.getBoundingClientRect().width, natural: img.naturalWidth, src: img.getAttribute('src')};
  img.click();
  await new Promise(r => setTimeout(r, 50));
  const big = document.querySelector('.ib-zoom .ib-zoom-img');
  if (!big) return {before, badgeShown, zoomed: null};
  await big.decode().catch(() => null);
  const zoomed = {shown: big.getBoundingClientRect().width, natural: big.naturalWidth};
  const bodyScroll = document.documentElement.scrollWidth > document.documentElement.clientWidth;
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}));
  return {before, badgeShown, zoomed, bodyScroll, closed: !document.querySelector('.ib-zoom')};
}"""


@needs_chromium
def test_figures_enlarge_to_readable_on_a_phone(html):
    """A tap on a figure at 390 px opens it larger, its smallest text readable at 11 px."""
    from playwright.sync_api import sync_playwright

    problems, checked = [], 0
    with sync_playwright() as p:
        browser = _browser(p)
        for name in CHAPTERS:
            page = _open(browser, (html / f"{name}.html").as_uri(), 390)
            page.wait_for_function("() => document.documentElement.dataset.ibFiguresZoomable === '1'")
            r = page.evaluate(ZOOM_JS)
            page.close()
            if r is None:
                continue
            checked += 1
            dpi = png_dpi((html / name).parent / r["before"]["src"]) or 100
            if not r["badgeShown"]:
                problems.append(f"{name}: no visible 'tap to enlarge' mark on the figure at 390 px")
            if r["zoomed"] is None:
                problems.append(f"{name}: tapping the figure opened nothing")
                continue
            text_px = LEGEND_PT * dpi / 72 * r["zoomed"]["shown"] / r["zoomed"]["natural"]
            if text_px < MIN_TEXT_PX:
                problems.append(f"{name}: enlarged figure's {LEGEND_PT} pt text is {text_px:.1f}px (< {MIN_TEXT_PX})")
            if r["bodyScroll"] or not r["closed"]:
                problems.append(f"{name}: the enlarged view made the page scroll or did not close")
    assert checked, "no chapter figure found"
    assert not problems, "\n".join(problems)


@needs_chromium
def test_display_math_at_mathjax_size(measured):
    """An equation that fits is shown at the size MathJax gave it (the size of inline math);
    one that is fitted to a narrow column is never shrunk below 70 % of that size."""
    import statistics

    problems, compared = [], 0
    for (name, width), r in measured.items():
        if r["inlineSizes"] and r["displaySizes"]:
            compared += 1
            inline = statistics.median(r["inlineSizes"])
            small = [s for s in r["displaySizes"] if abs(s - inline) > 0.02 * inline]
            if small:
                problems.append(f"{name} at {width}px: {len(small)} display equations at "
                                f"{statistics.median(small):.1f}px beside inline math at {inline:.1f}px")
        # the fitted ones: MathJax's size (about 1.27 x the text) times at least MIN_SCALE 0.7
        problems += [f"{name} at {width}px: a fitted equation at {share:.2f} of the text size"
                     for share in r["scaledShare"] if share < 0.7 * 1.2]
    assert compared, "no page with both display and inline math was measured"
    assert not problems, "\n".join(problems)


@needs_chromium
def test_no_display_equation_clipped_at_1280(measured):
    problems = [f"{name}: {m}" for (name, w), r in measured.items() if w == 1280 for m in r["math"]]
    assert not problems, "\n".join(problems)


@needs_chromium
def test_figures_sharp_and_legible_at_1280(measured, html):
    problems = []
    for (name, width), r in measured.items():
        if width != 1280:
            continue
        for img in r["imgs"]:
            src = img["src"] or ""
            if not src.endswith(".png") or not img["natural"]:
                continue
            dpi = png_dpi((html / name).parent / src)
            if dpi is None:
                continue
            text_px = LEGEND_PT * dpi / 72 * img["shown"] / img["natural"]
            if dpi < MIN_DPI - 1 or text_px < MIN_TEXT_PX:
                problems.append(f"{name}: {Path(src).name[:12]}… drawn at {dpi:.0f} dpi, shown "
                                f"{img['shown']:.0f}px of {img['natural']}px: {LEGEND_PT} pt text is "
                                f"{text_px:.1f}px (need >= {MIN_DPI} dpi and >= {MIN_TEXT_PX}px)")
    assert not problems, "\n".join(problems)


# A chapter's visible code is its algorithm and the check against the package; plotting and
# widget plumbing live in the package (inferbook.*_plots), so at 1280 px code is at most this
# share of a chapter page's height.
MAX_CODE_SHARE = 0.30


@needs_chromium
def test_code_is_at_most_a_third_of_a_chapter(measured):
    shares = {name: r["codeShare"] for (name, width), r in measured.items()
              if width == 1280 and name in CHAPTERS}
    assert len(shares) == len(CHAPTERS)
    over = {n: f"{s:.0%}" for n, s in shares.items() if s > MAX_CODE_SHARE}
    assert not over, f"code share of page height above {MAX_CODE_SHARE:.0%} at 1280 px: {over}"


@needs_chromium
def test_figures_legible_on_a_phone_without_zooming(measured, html):
    """At 390 px every chapter figure's smallest text is at least 9 CSS px in the column (the
    tap-to-enlarge view is for detail, not for reading the axes)."""
    problems, checked = [], 0
    for (name, width), r in measured.items():
        if width != 390:
            continue
        for img in r["imgs"]:
            src = img["src"] or ""
            if not src.endswith(".png") or not img["natural"]:
                continue
            dpi = png_dpi((html / name).parent / src)
            if dpi is None:
                continue
            checked += 1
            text_px = LEGEND_PT * dpi / 72 * img["shown"] / img["natural"]
            if text_px < MIN_PHONE_TEXT_PX:
                problems.append(f"{name}: {Path(src).name[:12]}… shown {img['shown']:.0f}px of "
                                f"{img['natural']}px at {dpi:.0f} dpi: {LEGEND_PT} pt text is "
                                f"{text_px:.1f}px (< {MIN_PHONE_TEXT_PX})")
    assert checked, "no chapter figure was measured at 390 px"
    assert not problems, f"{len(problems)} of {checked} figures:\n" + "\n".join(problems)


class _Figures(__import__("html.parser").parser.HTMLParser):
    """Collect each <img> of the article with its alt text and whether a caption encloses it."""

    def __init__(self):
        super().__init__()
        self.in_article, self.figures, self.images = 0, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "article":
            self.in_article += 1
        elif tag == "figure" and self.in_article:
            self.figures.append({"caption": False, "images": []})
        elif tag == "figcaption" and self.figures:
            self.figures[-1]["caption"] = True
        elif tag == "img" and self.in_article:
            image = {"src": attrs.get("src", ""), "alt": (attrs.get("alt") or "").strip()}
            (self.figures[-1]["images"] if self.figures else self.images).append(image)

    def handle_endtag(self, tag):
        if tag == "article":
            self.in_article -= 1
        elif tag == "figure" and self.figures:
            figure = self.figures.pop()
            for image in figure["images"]:
                image["captioned"] = figure["caption"]
                self.images.append(image)


def test_every_chapter_figure_has_caption_and_alt_text(html):
    problems = []
    for chapter in CHAPTERS:
        parser = _Figures()
        parser.feed((html / f"{chapter}.html").read_text())
        for image in parser.images:
            name = Path(image["src"]).name
            if not image.get("captioned"):
                problems.append(f"{chapter}: figure {name[:12]}… has no caption "
                                "(glue it and use {glue:figure} with a caption)")
            alt = image["alt"]
            if not alt or re.fullmatch(r"(\.\./)*(_images/)?[0-9a-f]{32,}(\.\w+)?", alt):
                problems.append(f"{chapter}: figure {name[:12]}… alt text is {alt!r}")
    assert not problems, "\n".join(problems)


def _config_value(key: str) -> str:
    config = (ROOT / "_config.yml").read_text()
    block = config[config.index("repository:"):]
    return re.search(rf"^\s+{key}:\s*(\S+)", block, re.M).group(1)


def test_colab_badge_on_every_notebook_page(html):
    repo = _config_value("url").removeprefix("https://github.com/")
    branch = _config_value("branch")
    for name in CHAPTERS + EXERCISES:
        page = (html / f"{name}.html").read_text()
        badge = re.search(r'<a class="ib-colab-badge" href="([^"]+)"', page)
        assert badge, f"{name}: no Open in Colab badge"
        assert badge.group(1) == (f"https://colab.research.google.com/github/{repo}/blob/"
                                  f"{branch}/{name}.ipynb"), name
        # the badge comes first: before the first code cell of the page
        assert page.index("ib-colab-badge") < page.find('class="cell'), name


def test_kernel_only_widgets_say_so_once(html):
    """Each embedded widget has exactly one "needs a running kernel" note (the chapter's own
    sentence styled as the note, or the extension's), and no other paragraph repeats it."""
    problems = []
    for name in NOTEBOOK_PAGES:
        page = (html / f"{name}.html").read_text()
        n_widgets = page.count('<script type="application/vnd.jupyter.widget-view+json">')
        notes = len(re.findall(r'class="[^"]*ib-kernel-note', page))
        paragraphs = [p for p in re.findall(r"<p[^>]*>(.*?)</p>", page, re.S)
                      if re.search(r"needs? a running kernel", re.sub(r"<[^>]+>", "", p), re.I)]
        if notes != n_widgets or len(paragraphs) != n_widgets:
            problems.append(f"{name}: {n_widgets} widgets, {notes} notes, {len(paragraphs)} "
                            "paragraphs saying they need a running kernel")
    assert not problems, "\n".join(problems)


def _sidebar_links(page_html):
    nav = re.search(r'<nav class="bd-docs-nav.*?</nav>', page_html, re.S)
    return nav.group(0) if nav else ""


@needs_chromium
def test_solutions_out_of_the_reading_order(html):
    from playwright.sync_api import sync_playwright

    problems = []
    for name in CHAPTERS + EXERCISES + ["book/glossary", "book/errata", "book/bibliography"]:
        text = (html / f"{name}.html").read_text()
        nxt = re.search(r'<a class="right-next"\s+href="([^"]+)"', text)
        if nxt and "solutions/" in nxt.group(1):
            problems.append(f"{name}: 'Next' opens a solution ({nxt.group(1)})")
    for name in SOLUTIONS:
        text = (html / f"{name}.html").read_text()
        title = re.search(r"<h1>(.*?)<", text, re.S).group(1)
        number = re.search(r"(\d+\.\d+)", title).group(1)
        banner = re.search(r'<div class="ib-solution-banner"[^>]*>(.*?)</div>', text, re.S)
        if not banner or f"Solution to Exercise {number}" not in banner.group(1) \
                or "try the exercise first" not in banner.group(1):
            problems.append(f"{name}: no banner 'Solution to Exercise {number} — try the exercise first'")
        elif text.index("ib-solution-banner") > text.find('class="cell'):
            problems.append(f"{name}: the banner is not at the top")
    for name in EXERCISES:
        text = (html / f"{name}.html").read_text()
        if f'href="../solutions/{Path(name).name}.html"' not in text:
            problems.append(f"{name}: does not end with a link to its solution")
    with sync_playwright() as p:   # solutions are collapsed in the sidebar of every other page
        browser = _browser(p)
        for name in [CHAPTERS[0], EXERCISES[0], "book/bibliography"]:
            page = _open(browser, (html / f"{name}.html").as_uri(), 1280)
            shown = page.evaluate("""() => [...document.querySelectorAll('.bd-docs-nav a')]
                .filter(a => a.getAttribute('href').includes('solutions/ex') && a.checkVisibility())
                .map(a => a.textContent.trim())""")
            page.close()
            if shown:
                problems.append(f"{name}: the sidebar shows {len(shown)} solutions: {shown[:2]}")
        browser.close()
    assert not problems, "\n".join(problems)


def test_calculator_presets_served(html):
    presets = (html / "_static" / "calculators" / "presets.js").read_text()
    assert json.loads(presets.split("=", 1)[1].rstrip().rstrip(";")) == _export().presets()
    for name in ("kv_calculator.js", "roofline_knob.js", "calculators.css"):
        assert (html / "_static" / "calculators" / name).is_file(), name
    for name in READING_PAGES:   # embedded calculators load their scripts from the book
        page = (html / f"{name}.html").read_text()
        if "data-inferbook-calc=" in page:
            assert "_static/calculators/presets.js" in page, name
            assert "cdn" not in " ".join(re.findall(r'src="([^"]+)"', page)).lower(), name


# ----------------------------------------------------------------------------------------------
# The static calculators compute what inferbook computes.

def _export():
    spec = importlib.util.spec_from_file_location("export_presets", ROOT / "tools" / "export_presets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def calculator_page(tmp_path_factory):
    """A standalone page with both calculators, built from book/calculators/ as a chapter embeds them."""
    out = tmp_path_factory.mktemp("calculators")
    for f in (ROOT / "book" / "calculators").iterdir():
        shutil.copy(f, out / f.name)
    export = _export()
    (out / "presets.js").write_text(export.as_js(export.presets()))
    (out / "index.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="calculators.css">'
        '<script src="presets.js"></script><script src="kv_calculator.js"></script>'
        '<script src="roofline_knob.js"></script></head><body>'
        '<div data-inferbook-calc="kv-cache"></div><div data-inferbook-calc="roofline"></div>'
        "</body></html>")
    return (out / "index.html").as_uri()


def _kv_grid():
    """Inputs covering MHA, GQA (split and replicated KV heads), MLA, sliding windows, every
    dtype, invalid TP degrees, contexts inside and past the windows and the model limit."""
    from inferbook.hardware import GPUS
    from inferbook.models import MODELS
    from inferbook.sizing import DTYPES

    models, gpus, dtypes = list(MODELS), list(GPUS), list(DTYPES)
    contexts, batches = [1, 1000, 4096, 4097, 32768, 131072, 200000], [1, 3, 8, 64, 512]
    grid = []
    for i, model in enumerate(models):
        for j, n_gpus in enumerate([1, 2, 3, 4, 8, 7]):
            k = i * 7 + j
            grid.append(dict(model=model, gpu=gpus[k % len(gpus)], n_gpus=n_gpus,
                             ctx_tokens=contexts[k % len(contexts)], batch=batches[k % len(batches)],
                             kv_dtype=dtypes[k % len(dtypes)], weight_dtype=dtypes[(k // 3) % len(dtypes)],
                             gpu_memory_utilization=[0.92, 1.0, 0.5, 0.05][k % 4]))
    return grid


def _kv_expected(q):
    """The KV calculator's answers from the package: `vllm_fit` (vLLM's start-up budget at
    `vllm serve`'s default limits, `sizing`'s per-GPU KV bytes)."""
    from inferbook import sizing
    from inferbook.hardware import GPUS
    from inferbook.models import MODELS
    from inferbook.vllm_fit import vllm_fit, vllm_min_tp_degree

    model, gpu = MODELS[q["model"]], GPUS[q["gpu"]]
    args = dict(kv_dtype=q["kv_dtype"], weight_dtype=q["weight_dtype"],
                gpu_memory_utilization=q["gpu_memory_utilization"])
    expected = {
        "kv_bytes_per_token": sizing.kv_bytes_per_token(model, q["kv_dtype"]),
        "kv_bytes_total": sizing.kv_bytes(model, q["ctx_tokens"], q["batch"], q["kv_dtype"]),
        "min_tp_degree": vllm_min_tp_degree(model, gpu, q["ctx_tokens"], q["batch"], **args)
        or "none",
    }
    if sizing.tp_problem(model, q["n_gpus"]):
        expected["verdict"] = "invalid"
        return expected
    r = vllm_fit(model, gpu, q["n_gpus"], q["ctx_tokens"], q["batch"], **args)
    expected.update(
        kv_bytes_per_gpu=r.kv_bytes_per_gpu, weight_bytes_per_gpu=r.budget.weight_bytes,
        runtime_bytes_per_gpu=r.budget.runtime.total_bytes, outside_bytes_per_gpu=r.outside_bytes,
        kv_budget_bytes_per_gpu=r.kv_budget_bytes, used_bytes_per_gpu=r.used_bytes_per_gpu,
        verdict="fits" if r.fits else "does-not-fit", max_batch=r.max_batch,
        max_context=r.max_context,
    )
    return expected


@needs_chromium
def test_kv_calculator_matches_sizing(calculator_page):
    from playwright.sync_api import sync_playwright

    problems = []
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(calculator_page)
        calc = page.locator('[data-inferbook-calc="kv-cache"]')
        for q in _kv_grid():
            for name in ("model", "gpu", "n_gpus", "kv_dtype", "weight_dtype"):
                calc.locator(f'select[name="{name}"]').select_option(str(q[name]))
            for name in ("ctx_tokens", "batch", "gpu_memory_utilization"):
                calc.locator(f'input[name="{name}"]').fill(str(q[name]))
            shown = calc.evaluate("""root => Object.fromEntries(
                [...root.querySelectorAll('[data-key]')].map(o => [o.dataset.key, o.dataset.value]))""")
            for key, want in _kv_expected(q).items():
                got = shown.get(key)
                if str(got) != str(want):
                    problems.append(f"{q}: {key} page {got} != inferbook {want}")
        browser.close()
    assert not errors, errors
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:20])


def _knob_expected(model, gpu_name, batch, context):
    """One decode step as the knob computes it, from the package: forward_cost with a token's
    active parameters for the FLOPs (MoE), every weight read once, and the KV cache the model
    really holds (MLA's compressed latent: kv_lora_rank + qk_rope_head_dim values per token and
    layer). For a dense MHA/GQA model this is forward_cost exactly."""
    from inferbook.hardware import GPUS
    from inferbook.models import MODELS
    from inferbook.roofline import attainable_flops, bound, forward_cost

    s, g = MODELS[model], GPUS[gpu_name]
    c = forward_cost(n_params=s.n_active_params, n_layer=s.num_hidden_layers,
                     d_attn=s.num_attention_heads * s.head_dim,
                     kv_dim=s.num_key_value_heads * s.head_dim,
                     batch=batch, new_tokens=1, past_tokens=context)
    kv_bytes = c.bytes_moved - 2 * s.n_active_params
    if s.is_mla:
        kv_bytes = ((s.kv_lora_rank + s.qk_rope_head_dim) * s.num_hidden_layers * 2
                    * batch * (context + 1))
    flops, bytes_moved = c.flops, 2 * s.n_params + kv_bytes
    intensity = flops / bytes_moved
    step_s = max(flops / g.fp16_tensor_flops, bytes_moved / g.hbm_bytes_per_s)
    return {"intensity": intensity, "ridge": g.ridge_flops_per_byte,
            "attainable_flops": attainable_flops(g, intensity), "step_s": step_s,
            "tokens_per_s": batch / step_s, "bound": bound(g, intensity)}


def _shown(root):
    return root.evaluate("""root => Object.fromEntries(
        [...root.querySelectorAll('[data-key]')].map(o => [o.dataset.key, o.dataset.value]))""")


def _knob_problems(where, shown, model, gpu_name, batch, context):
    problems = []
    for key, value in _knob_expected(model, gpu_name, batch, context).items():
        ok = shown.get(key) == value if key == "bound" else (
            shown.get(key) is not None and float(shown[key]) == pytest.approx(value, rel=1e-12))
        if not ok:
            problems.append(f"{where}: {model} {gpu_name} b={batch} ctx={context}: {key} "
                            f"page {shown.get(key)} != inferbook {value}")
    return problems


@needs_chromium
def test_roofline_knob_matches_roofline(calculator_page):
    from playwright.sync_api import sync_playwright

    from inferbook.hardware import GPUS
    from inferbook.models import MODELS

    gpus = [n for n, g in GPUS.items() if g.fp16_tensor_flops]
    models = list(MODELS)
    assert any(MODELS[m].is_mla for m in models) and any(
        MODELS[m].n_active_params < MODELS[m].n_params for m in models)
    problems = []
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(calculator_page)
        knob = page.locator('[data-inferbook-calc="roofline"]')
        offered = knob.locator('select[name="model"] option').all_inner_texts()
        if sorted(offered) != sorted(models):
            problems.append(f"the knob offers {offered}, the package has {models}")
        for k, (batch, context) in enumerate([(1, 0), (1, 1024), (8, 4096), (64, 256), (512, 32768),
                                              (200, 8192), (37, 1280)]):
            for model in models[k % 3::3]:
                gpu_name = gpus[(k + len(model)) % len(gpus)]
                knob.locator('select[name="model"]').select_option(model)
                knob.locator('select[name="gpu"]').select_option(gpu_name)
                knob.locator('input[name="batch"]').fill(str(batch))
                knob.locator('input[name="context"]').fill(str(context))
                problems += _knob_problems("grid", _shown(knob), model, gpu_name, batch, context)
        browser.close()
    assert not problems, "\n".join(problems[:20])


SVG_TEXT_JS = r"""root => [...root.querySelectorAll('svg')].flatMap(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const right = document.documentElement.clientWidth;
  return [...svg.querySelectorAll('text')].map(t => ({text: t.textContent,
    px: parseFloat(getComputedStyle(t).fontSize) * scale,
    inside: t.getBoundingClientRect().right <= right + 1 && t.getBoundingClientRect().left >= -1}));
})"""
MIN_SVG_TEXT_PX = 9.0


@needs_chromium
@pytest.mark.parametrize("width", [390, 1280])
def test_calculator_chart_text_readable(calculator_page, width):
    """The roofline chart's axis text is at least 9 CSS px at a phone's width (it is drawn for
    the width it is shown at) and inside the window; also after a resize."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(calculator_page)
        knob = page.locator('[data-inferbook-calc="roofline"]')
        texts = knob.evaluate(SVG_TEXT_JS)
        page.set_viewport_size({"width": 1280 + 390 - width, "height": 900})
        page.wait_for_timeout(400)
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(400)
        after = knob.evaluate(SVG_TEXT_JS)
        browser.close()
    assert texts and after
    for label, measured_texts in (("on opening", texts), ("after a resize", after)):
        small = [f"{t['text']!r} {t['px']:.1f}px" for t in measured_texts if t["px"] < MIN_SVG_TEXT_PX]
        outside = [t["text"] for t in measured_texts if not t["inside"]]
        assert not small and not outside, f"at {width}px {label}: small {small}, outside {outside}"


# (field, impossible value, words the reason must contain), each on the calculator's defaults
KV_REFUSED = [
    ("ctx_tokens", "0", "at least 1"), ("ctx_tokens", "-5", "whole number"),
    ("ctx_tokens", "2.5", "whole number"), ("ctx_tokens", "", "empty"),
    ("batch", "0", "at least 1"), ("batch", "1.5", "whole number"), ("batch", "", "empty"),
    ("gpu_memory_utilization", "0", "above 0"), ("gpu_memory_utilization", "-0.1", "above 0"),
    ("gpu_memory_utilization", "1.5", "at most 1"), ("gpu_memory_utilization", "", "empty"),
    ("n_gpus", "3", "cannot be split over 3 GPUs"),
]


@needs_chromium
@pytest.mark.parametrize("width", [390, 1280])
def test_kv_calculator_refuses_impossible_inputs(calculator_page, width):
    """Every field of the KV calculator refuses what inferbook.sizing refuses (a context or batch
    that is not a whole number >= 1, a GPU memory utilization outside (0, 1], a TP degree the heads cannot
    take): the reason under the field, visible within the window, and in the verdict; no
    answer that depends on it. A valid value clears it. The roofline knob's fields are menus and
    sliders bounded to what it accepts, so it has nothing impossible to refuse."""
    from playwright.sync_api import sync_playwright

    from inferbook import sizing
    from inferbook.models import MODELS

    problems = []
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": width, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(calculator_page)
        calc = page.locator('[data-inferbook-calc="kv-cache"]')
        model = calc.locator('select[name="model"]').input_value()
        assert sizing.tp_problem(MODELS[model], 3), model   # the TP case below is impossible in the package
        for field, value, reason in KV_REFUSED:
            element = calc.locator(f'[name="{field}"]')
            good = element.input_value()
            if field == "n_gpus":
                element.select_option(value)
            else:
                element.fill(value)
            error = calc.locator(f'.ib-field-error[data-error-for="{field}"]')
            shown = _shown(calc)
            said, box = error.inner_text(), error.bounding_box()
            verdict = calc.locator('[data-key="verdict"]').inner_text()
            where = f"{field}={value!r} at {width}px"
            if reason not in said:
                problems.append(f"{where}: the field says {said!r}, not why ({reason!r})")
            if not box or box["x"] < 0 or box["x"] + box["width"] > width + 1:
                problems.append(f"{where}: the reason is not visible in the window ({box})")
            if shown.get("verdict") != "invalid" or reason not in verdict:
                problems.append(f"{where}: the verdict is {verdict!r}")
            answered = [k for k in ("kv_bytes_per_gpu", "max_batch", "max_context", "used_bytes_per_gpu")
                        if shown.get(k) != "invalid"]
            if answered:
                problems.append(f"{where}: still answers {answered}")
            if calc.locator(f'[name="{field}"]').get_attribute("aria-invalid") != "true":
                problems.append(f"{where}: the field is not marked invalid")
            if field == "n_gpus":
                element.select_option(good)
            else:
                element.fill(good)
            if error.inner_text().strip() or _shown(calc).get("verdict") == "invalid":
                problems.append(f"{where}: restoring {good!r} left it refused")
        for name in ("model", "gpu", "batch", "context"):   # the knob: bounded controls only
            kind = page.locator(f'[data-inferbook-calc="roofline"] [name="{name}"]').evaluate(
                "e => e.tagName === 'SELECT' ? 'select' : e.type")
            if kind not in ("select", "range"):
                problems.append(f"roofline knob: {name} is a free {kind} field")
        browser.close()
    assert not errors, errors
    assert not problems, "\n".join(problems)


@needs_chromium
def test_calculators_first_answer_matches_the_package(html):
    """What a reader sees before touching anything: each calculator embedded in the book, as
    its page opens, against inferbook (the inputs it shows are read back from the page)."""
    from playwright.sync_api import sync_playwright

    pages = [n for n in READING_PAGES if "data-inferbook-calc=" in (html / f"{n}.html").read_text()]
    assert any("roofline" in (html / f"{n}.html").read_text() for n in pages), pages
    problems, checked = [], 0
    with sync_playwright() as p:
        browser = _browser(p)
        for name in pages:
            page = _open(browser, (html / f"{name}.html").as_uri(), 1280)
            for root in page.locator('[data-inferbook-calc="roofline"]').all():
                value = {k: root.evaluate(f"r => r.querySelector('[name=\"{k}\"]').value")
                         for k in ("model", "gpu", "batch", "context")}
                want = {k: v for k, v in root.evaluate("r => ({...r.dataset})").items()
                        if k in ("model", "gpu", "batch", "context")}
                for k, v in want.items():   # the knob opens at the inputs the page asked for
                    if str(value[k]) != str(v):
                        problems.append(f"{name}: the knob opens at {k}={value[k]}, the page asks {v}")
                problems += _knob_problems(name, _shown(root), value["model"], value["gpu"],
                                           int(value["batch"]), int(value["context"]))
                checked += 1
            for root in page.locator('[data-inferbook-calc="kv-cache"]').all():
                q = root.evaluate("""r => Object.fromEntries([...r.querySelectorAll('select, input')]
                    .map(e => [e.name, e.value]))""")
                q = {**q, "n_gpus": int(q["n_gpus"]), "ctx_tokens": int(q["ctx_tokens"]),
                     "batch": int(q["batch"]),
                     "gpu_memory_utilization": float(q["gpu_memory_utilization"])}
                shown = _shown(root)
                for key, want in _kv_expected(q).items():
                    if str(shown.get(key)) != str(want):
                        problems.append(f"{name}: kv calculator opens with {key} {shown.get(key)} "
                                        f"!= inferbook {want} for {q}")
                checked += 1
            page.close()
        browser.close()
    assert checked and not problems, "\n".join(problems[:20])


# ----------------------------------------------------------------------------------------------
# make pdf: the whole book, offline, figures and math included.

@needs_chromium
@pytest.mark.slow
def test_pdf_has_every_page_with_figures_and_math(html):
    """The documented command, run as a reader runs it after a build: relative paths
    (`tools/make_pdf.py --html _build/html`), its summary line true of the PDF it wrote."""
    from pypdf import PdfReader

    make_pdf = _make_pdf()
    pages = make_pdf.toc_pages()
    assert set(CHAPTERS + EXERCISES + SOLUTIONS) <= set(pages)
    build_dir = html.parent.parent        # .../_build/html -> the folder holding _build
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "make_pdf.py"), "--html",
                           "_build/html", "--out", "pdf/book.pdf"], cwd=build_dir,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = build_dir / "pdf" / "book.pdf"
    said = re.search(r"wrote (\S+): (\d+) pages of the book, (\d+) PDF pages \(printed in (\d+) s\)",
                     proc.stdout)
    assert said, proc.stdout
    assert Path(said.group(1)) == out and int(said.group(2)) == len(pages), said.group(0)
    reader = PdfReader(out)
    outline = [item.title for item in reader.outline]
    assert outline == [make_pdf.page_title(html / f"{p}.html") for p in pages]
    assert len(reader.pages) == int(said.group(3))
    # the README's page count is what the command prints (within 15 %: chapters move)
    readme = re.search(r"about (\d+) A4 pages \((\d+) pages of the book\)",
                       " ".join((ROOT / "README.md").read_text().split()))
    assert readme, "README.md does not say how many pages make pdf prints"
    assert abs(int(readme.group(1)) - len(reader.pages)) <= 0.15 * len(reader.pages), \
        f"README says about {readme.group(1)} PDF pages, make pdf printed {len(reader.pages)}"
    assert int(readme.group(2)) == len(pages), (readme.group(2), len(pages))
    text = unicodedata.normalize("NFKC", "\n".join(p.extract_text() or "" for p in reader.pages))
    flat = " ".join(text.split())
    for chapter in CHAPTERS:   # every chapter's title, and its figures as images
        assert " ".join(make_pdf.page_title(html / f"{chapter}.html").split()) in flat, chapter
    n_figures = sum((html / f"{c}.html").read_text().count("<figure") for c in CHAPTERS)
    n_images = sum(len(page.images) for page in reader.pages)
    assert n_images >= n_figures > 0, (n_images, n_figures)
    # math typeset (MathJax ran), not left as TeX source
    assert "\\frac" not in text and "$$" not in text
