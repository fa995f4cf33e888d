"""Print the built book to one PDF for offline reading (`make pdf`).

    .venv/bin/python tools/make_pdf.py --build      # build the HTML from the committed outputs, print
    .venv/bin/python tools/make_pdf.py --html _build/html   # print a book `make book` built

Every page of the table of contents, in its order (introduction, how to use, chapters,
exercises, reference pages, solutions), is opened in the headless Chromium the tests use
(`chromium` on the PATH, driven by Playwright), printed once MathJax has typeset it and the
book's reading aids have run, and the pages are merged with a bookmark per page. Nothing is
fetched from the network: the book serves MathJax and its figures itself. Print styles
(book/_static/inferbook.css, `@media print`) drop the sidebars and buttons and wrap long code
lines instead of cutting them.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def build_html(out: Path, capture: bool = False) -> tuple[Path, subprocess.CompletedProcess]:
    """Build the book strictly from the notebooks' committed outputs (no execution) under `out`;
    return its html folder and the finished build (tests/test_book.py builds its book here too,
    with `capture` to read the warnings; without it a failed build stops the command)."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = (ROOT / "_config.yml").read_text()
    config, n = re.subn(r"execute_notebooks: \w+", "execute_notebooks: 'off'", config)
    if n != 1:
        raise SystemExit("_config.yml has no execute.execute_notebooks to switch off")
    # a config outside the source folder resolves local_extensions relative to itself
    config = config.replace("inferbook_sphinx: book/_ext",
                            f"inferbook_sphinx: {ROOT / 'book' / '_ext'}")
    (out / "_config.yml").write_text(config)
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jb), "build", "-W", "-n", "--keep-going", "--all", "--config",
                           str(out / "_config.yml"), "--path-output", str(out), str(ROOT)],
                          capture_output=capture, text=True, timeout=1800, check=False)
    if proc.returncode and not capture:
        raise SystemExit(f"the book did not build strictly (exit {proc.returncode})")
    return out / "_build" / "html", proc


def toc_pages(toc: Path = ROOT / "_toc.yml") -> list[str]:
    """Return the book's pages (docnames) in reading order: the root, then every `file:`."""
    text = toc.read_text()
    root = re.search(r"^root:\s*(\S+)", text, re.M).group(1)
    return [root] + re.findall(r"^\s*-?\s*file:\s*(\S+)", text, re.M)


def page_title(html_file: Path) -> str:
    """Return the page's first heading as plain text (the bookmark's title)."""
    match = re.search(r"<h1[^>]*>(.*?)</h1>", html_file.read_text(), re.S)
    text = re.sub(r"<[^>]+>", "", match.group(1)) if match else html_file.stem
    return re.sub(r"\s+", " ", text).replace("#", "").strip()


def print_pages(html: Path, pages: list[str], out: Path) -> list[tuple[str, int]]:
    """Print each page to PDF and merge them into `out`; return (title, page count) per page."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("make pdf needs chromium on the PATH (apt-get install chromium)")
    html, out = Path(html).resolve(), Path(out).resolve()   # as_uri() needs absolute paths
    missing = [p for p in pages if not (html / f"{p}.html").is_file()]
    if missing:
        raise SystemExit(f"{html} lacks {missing[:3]}: build the book first (make book)")
    writer, contents = PdfWriter(), []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name in pages:
            page.goto((html / f"{name}.html").as_uri())
            page.wait_for_function(
                "() => document.documentElement.dataset.ibMathFitted === '1'", timeout=60000)
            page.emulate_media(media="print")
            data = page.pdf(format="A4", print_background=True, display_header_footer=False,
                            margin={"top": "16mm", "bottom": "16mm", "left": "14mm",
                                    "right": "14mm"})
            reader = PdfReader(io.BytesIO(data))
            start = len(writer.pages)
            for pdf_page in reader.pages:
                writer.add_page(pdf_page)
            title = page_title(html / f"{name}.html")
            writer.add_outline_item(title=title, page_number=start)
            contents.append((title, len(reader.pages)))
            page.emulate_media(media="screen")
        browser.close()
    writer.add_metadata({"/Title": "LLM Inference Optimization, Executably"})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        writer.write(f)
    return contents


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "pdf" / "book.pdf")
    parser.add_argument("--build", action="store_true",
                        help="first build the HTML from the committed outputs (_build/pdf/)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    started = time.monotonic()
    html = build_html(args.out.parent)[0] if args.build else args.html
    built = time.monotonic()
    contents = print_pages(html, toc_pages(), args.out)
    done = time.monotonic()
    total = sum(n for _, n in contents)
    timing = (f"built in {built - started:.0f} s, printed in {done - built:.0f} s"
              if args.build else f"printed in {done - built:.0f} s")
    print(f"wrote {args.out}: {len(contents)} pages of the book, {total} PDF pages ({timing})")

if __name__ == "__main__":
    sys.exit(main())
