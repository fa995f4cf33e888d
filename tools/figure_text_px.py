"""How big a figure's smallest text is on a phone, in CSS px, for every chapter figure of a built book.

Each chapter page of a built book (`make book`, or tools/make_pdf.py's build) is opened in
headless Chromium at `--width` CSS px (390: a phone; 1280: a laptop); for every PNG in the
article the text of `--pt` points comes out at

    pt x dpi / 72 x shown width / natural width   CSS px

with `dpi` from the PNG's pHYs chunk (which matplotlib writes). Without one, the dpi the book's
set-up draws at: `inferbook.notebook.PLOT_RC["figure.dpi"]`, doubled by the "retina" PNG format
`inferbook.notebook.apply_plot_defaults` selects. `--pt` defaults to the smallest plot text the
book sets (tick and legend size in `PLOT_RC`). Prints one row per figure and a summary: min,
median, max and the share under `--min-px` (9 px: about the smallest text a phone reader reads
without zooming). Exits 0 after measuring (also when no page holds a PNG), 2 when the book or
Chromium is missing.

    .venv/bin/python tools/figure_text_px.py _build/html [--pt 10] [--width 390] [--min-px 9]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from inferbook.notebook import PLOT_RC

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RETINA = 2   # matplotlib_inline's "retina" format (apply_plot_defaults) draws at twice figure.dpi
BOOK_DPI = PLOT_RC["figure.dpi"] * RETINA
SMALLEST_PT = min(PLOT_RC[k] for k in ("xtick.labelsize", "ytick.labelsize", "legend.fontsize"))


@dataclass(frozen=True)
class Figure:
    page: str          # notebooks/NN_name
    image: str         # the PNG's file name
    natural_px: int    # the PNG's width in pixels
    shown_px: float    # its width on the page, CSS px
    dpi: float         # pixels per inch the PNG was drawn at
    text_px: float     # `pt` points of text, in CSS px on the page


def png_dpi(path: Path) -> float | None:
    """Return the PNG's horizontal dpi from its pHYs chunk (None: no chunk, or not in metres)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    at = data.find(b"pHYs")
    if at < 0 or len(data) < at + 13:
        return None
    x_ppu, _y, unit = struct.unpack(">IIB", data[at + 4: at + 13])
    return x_ppu * 0.0254 if unit == 1 and x_ppu else None


def text_px(pt: float, dpi: float, shown_px: float, natural_px: int) -> float:
    """Return the CSS px that `pt`-point text drawn at `dpi` shows at when the image is shown
    `shown_px` wide out of its `natural_px` pixels."""
    return pt * dpi / 72 * shown_px / natural_px


def chapter_pages(toc: Path = ROOT / "_toc.yml") -> list[str]:
    return re.findall(r"file: (notebooks/\d\d_\w+)", toc.read_text())


def measure(html: Path, pt: float, width: int) -> list[Figure]:
    """Return a `Figure` for every PNG in the article of every chapter page of `html`."""
    from playwright.sync_api import TimeoutError as PageTimeout
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        for name in chapter_pages():
            file = html.resolve() / f"{name}.html"
            if not file.is_file():
                print(f"  (no page {name}.html in {html})", file=sys.stderr)
                continue
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(file.as_uri(), wait_until="load")
            try:   # the book's script fits display math to the column: wait until it has
                page.wait_for_function(
                    "() => document.documentElement.dataset.ibMathFitted === '1'", timeout=20000)
            except PageTimeout:   # a page without the book's script: measured as it is
                print(f"  ({name}: display math not fitted after 20 s)", file=sys.stderr)
            for img in page.evaluate("""() => [...document.querySelectorAll('article img')]
                    .map(i => ({src: i.getAttribute('src'), shown: i.getBoundingClientRect().width,
                                natural: i.naturalWidth}))"""):
                src = (img["src"] or "").split("?")[0]
                if not src.endswith(".png") or not img["natural"] or not img["shown"]:
                    continue
                dpi = png_dpi(file.parent / src) or BOOK_DPI
                rows.append(Figure(name, Path(src).name, img["natural"], img["shown"], dpi,
                                   text_px(pt, dpi, img["shown"], img["natural"])))
            page.close()
        browser.close()
    return rows


def summary(rows: list[Figure], width: int, pt: float, min_px: float) -> str:
    """Return the one-paragraph summary of `rows`."""
    if not rows:
        return f"no PNG figures on the chapter pages at {width} px: nothing to measure"
    px = [r.text_px for r in rows]
    under = sum(v < min_px for v in px)
    return (f"{len(px)} figures at {width} px, {pt:g} pt text: min {min(px):.1f}, median "
            f"{statistics.median(px):.1f}, max {max(px):.1f} CSS px; {under} of {len(px)} "
            f"({under / len(px):.0%}) under {min_px:g} px")


def table(rows: list[Figure]) -> str:
    head = f"{'text px':>7}  {'shown':>6}  {'natural':>7}  {'dpi':>4}  page  figure"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.text_px:7.1f}  {r.shown_px:6.0f}  {r.natural_px:7d}  {r.dpi:4.0f}  "
                     f"{r.page.removeprefix('notebooks/')}  {r.image[:24]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built book's html folder (_build/html)")
    parser.add_argument("--pt", type=float, default=float(SMALLEST_PT),
                        help=f"text size in points (default {SMALLEST_PT}: the book's smallest)")
    parser.add_argument("--width", type=int, default=390, help="viewport width, CSS px")
    parser.add_argument("--min-px", type=float, default=9.0, help="readable threshold, CSS px")
    args = parser.parse_args(argv)
    if args.pt <= 0 or args.width <= 0 or args.min_px <= 0:
        parser.error("--pt, --width and --min-px must be > 0")
    if not (args.html / "notebooks").is_dir():
        print(f"{args.html}: no built book here (expected {args.html}/notebooks/*.html; "
              "run `make book`)", file=sys.stderr)
        return 2
    if not shutil.which("chromium"):
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    rows = measure(args.html, args.pt, args.width)
    if rows:
        print(table(rows))
    print(summary(rows, args.width, args.pt, args.min_px))
    return 0


if __name__ == "__main__":
    sys.exit(main())
