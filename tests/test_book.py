"""The book builds strictly and its pages work in a real browser.

nbval (in this same suite) re-executes every chapter and solution notebook and compares the
outputs with the committed ones, so here the book is built from the committed outputs
(`execute_notebooks: off`) rather than executing everything a second time. `make book` executes.
The build is strict: -W -n --keep-going --all, zero warnings.
Screenshots are saved in test-artifacts/ (kept by CI as artifacts).
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT

ARTIFACTS = ROOT / "test-artifacts"
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = [f"notebooks/{m}" for m in re.findall(r"file: notebooks/(\d\d_\w+)", TOC)]


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("book")
    config = (ROOT / "_config.yml").read_text()
    config, n = re.subn(r"execute_notebooks: \w+", "execute_notebooks: 'off'", config)
    assert n == 1
    # a config outside the source folder resolves local_extensions relative to itself
    config = config.replace("inferbook_sphinx: book/_ext", f"inferbook_sphinx: {ROOT / 'book' / '_ext'}")
    (out / "_config.yml").write_text(config)
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run(
        [str(jb), "build", "-W", "-n", "--keep-going", "--all", "--config", str(out / "_config.yml"),
         "--path-output", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=900,
    )
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0 and not warnings, "\n".join(warnings) or log[-3000:]
    return out / "_build" / "html"


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
