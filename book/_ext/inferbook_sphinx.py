"""The book's Sphinx extension: reading aids, static calculators and small fixes to the HTML
that Jupyter Book 1 writes.

Reading aids (every page; no notebook needs editing):
* book/_static/inferbook.css and inferbook.js: styled tables (numbers right-aligned, wide
  tables scroll inside their own box), figures that shrink with the column, wide display
  equations scaled to fit, nothing that makes a phone-width page scroll sideways.
* An "Open in Colab" badge under the title of every notebook page, built from the one
  repository URL in _config.yml (inline SVG: nothing is fetched from elsewhere).
* One visible "needs a running kernel" note on every embedded ipywidget, since the rendered page
  shows the widget as it was when the book was built: the chapter's own sentence saying so
  (in the paragraphs before the widget) is styled as the note, else a standard note is added.
* Solution pages (notebooks/solutions/) open with a banner "Solution to Exercise N.k — try the
  exercise first" linking to the exercise; exercise pages end with a link to their solution
  (solutions sit collapsed under Reference → Solutions, out of the reading order).
* A reading-time line under every chapter's title ("About 25 min read"): the chapter's prose at
  200 words a minute, its visible code at 25 lines a minute and 12 s per figure (hidden and
  removed code, outputs' text and math source are not counted).
* Alt text of a captioned figure's image is its caption (not the output's hash file name);
  table cells holding a number get the class `ib-num` (right-aligned by the CSS).

Calculators that run in the browser, without a kernel (book/calculators/):
* ```{kv-calculator}``` and ```{roofline-knob}``` directives (options: defaults, e.g.
  `:model: Llama-3.1-70B`). Each writes `<div data-inferbook-calc="...">`; pages using one load
  presets.js (written from the inferbook package at every build by tools/export_presets.py),
  the calculator's JS and calculators.css from _static/calculators/.

Fixes:
1. sphinx-thebe registers its inline configuration script at every `env-before-read-docs`, which
   a Jupyter Book build fires more than once, so pages declared `const THEBE_JS_URL` twice (a
   SyntaxError in the browser). Identical scripts are dropped before the page is written.
2. The ipywidgets renderer (html-manager 1.0.x) typesets widget labels with the MathJax 2 API,
   `MathJax.Hub.Queue`, but Sphinx loads MathJax 3. A tiny shim maps it to `typesetPromise`.
"""


import html
import importlib.util
import re
import shutil
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "book" / "_static"
CALCULATORS = ROOT / "book" / "calculators"
CALC_FILES = {"kv-cache": "kv_calculator.js", "roofline": "roofline_knob.js"}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
KERNEL_NOTE = (
    '<p class="ib-kernel-note" role="note"><strong>Needs a running kernel</strong> — open in '
    "Colab or Jupyter to use this widget. The rendered page shows it as it was when the book "
    "was built; changing it here does not recompute.</p>"
)
# A Colab-style mark drawn inline (two interlocking arcs), so the badge needs no image file.
COLAB_SVG = (
    '<svg class="ib-colab-logo" viewBox="0 0 24 16" width="24" height="16" aria-hidden="true">'
    '<path d="M8.5 3.2A5 5 0 1 0 8.5 12.8" fill="none" stroke="#f9ab00" stroke-width="3"/>'
    '<path d="M15.5 3.2A5 5 0 1 1 15.5 12.8" fill="none" stroke="#e8710a" stroke-width="3"/>'
    "</svg>"
)
NUMBER = re.compile(  # "1,024", "3.5 GB", "12 %", "2.0×", "~4096 tokens", "1e9 FLOP/s"
    r"^[~≈<>≤≥±+\-−]?\s*[$]?\d[\d,_ ]*(\.\d+)?(e[+-]?\d+)?\s*[%×xA-Za-zµ/]{0,12}$"
)


def _load_export_presets():
    spec = importlib.util.spec_from_file_location(
        "inferbook_export_presets", ROOT / "tools" / "export_presets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config_inited(app, config):
    """Serve book/_static and the calculators (with presets fresh from the package)."""
    generated = Path(app.doctreedir).parent / "inferbook_static"
    calc_out = generated / "calculators"
    calc_out.mkdir(parents=True, exist_ok=True)
    for f in CALCULATORS.iterdir():
        if f.suffix in (".js", ".css"):
            shutil.copyfile(f, calc_out / f.name)
    export = _load_export_presets()
    data = export.presets()
    (calc_out / "presets.js").write_text(export.as_js(data))
    config.html_static_path = [*config.html_static_path, str(STATIC), str(generated)]


def _calculator_directive(kind):
    class Calculator(Directive):
        """Embed a calculator that runs in the browser; options are its initial inputs."""

        option_spec = {key: directives.unchanged for key in
                       ("model", "gpu", "n-gpus", "ctx", "batch", "kv-dtype", "weight-dtype",
                        "utilization", "context")}

        def run(self):
            attrs = "".join(f' data-{k}="{html.escape(v, quote=True)}"'
                            for k, v in self.options.items())
            text = (f'<div class="ib-calc" data-inferbook-calc="{kind}"{attrs}>'
                    "<noscript>This calculator needs JavaScript.</noscript></div>")
            return [nodes.raw("", text, format="html")]

    return Calculator


def _calculator_assets(app, pagename, templatename, context, doctree):
    if doctree is None:
        return
    kinds = {kind for node in doctree.findall(nodes.raw)
             for kind in CALC_FILES if f'data-inferbook-calc="{kind}"' in node.astext()}
    if not kinds:
        return
    app.add_css_file("calculators/calculators.css")
    app.add_js_file("calculators/presets.js")
    for kind in sorted(kinds):
        app.add_js_file(f"calculators/{CALC_FILES[kind]}")


def _colab_url(app, docname):
    options = app.config.html_theme_options or {}
    repo = (options.get("repository_url") or "").rstrip("/")
    launch = options.get("launch_buttons") or {}
    colab = (launch.get("colab_url") or "https://colab.research.google.com").rstrip("/")
    if not repo.startswith("https://github.com/"):
        return None
    branch = options.get("repository_branch") or "main"
    path = "/".join(p for p in [(options.get("path_to_docs") or "").strip("/"), docname] if p)
    return f"{colab}/github/{repo[len('https://github.com/'):]}/blob/{branch}/{path}.ipynb"


def _add_colab_badge(app, doctree):
    docname = app.env.docname
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    url = _colab_url(app, docname)
    section = next(iter(doctree.findall(nodes.section)), None)
    if url is None or section is None:
        return
    badge = nodes.raw("", (
        f'<p class="ib-colab"><a class="ib-colab-badge" href="{html.escape(url, quote=True)}" '
        f'target="_blank" rel="noopener">{COLAB_SVG}<span>Open in Colab</span></a>'
        '<span class="ib-colab-hint">or locally: <code>make lab</code></span></p>'),
        format="html")
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, badge)


def _caption_text(figure):
    caption = next(iter(figure.findall(nodes.caption)), None)
    return " ".join(caption.astext().split()) if caption is not None else ""


def _reading_aids(app, doctree, docname):
    # alt text from the caption
    for figure in doctree.findall(nodes.figure):
        text = _caption_text(figure)
        for image in figure.findall(nodes.image):
            alt = image.get("alt", "")
            if text and (not alt or re.fullmatch(r"[0-9a-f]{32,}(\.\w+)?", Path(alt).name)):
                image["alt"] = text
    # numbers right-aligned: cells, and the headers of columns that are mostly numbers
    for tgroup in doctree.findall(nodes.tgroup):
        columns = {}
        for tbody in tgroup.findall(nodes.tbody):
            for row in tbody.findall(nodes.row):
                for i, entry in enumerate(e for e in row.children if isinstance(e, nodes.entry)):
                    numeric = bool(NUMBER.match(entry.astext().strip())) and entry.astext().strip() != ""
                    if numeric:
                        entry["classes"].append("ib-num")
                    columns.setdefault(i, []).append(numeric)
        numeric_columns = {i for i, flags in columns.items() if sum(flags) * 2 > len(flags)}
        for thead in tgroup.findall(nodes.thead):
            for row in thead.findall(nodes.row):
                for i, entry in enumerate(e for e in row.children if isinstance(e, nodes.entry)):
                    if i in numeric_columns:
                        entry["classes"].append("ib-num")
    # kernel-only widgets say so, once: a chapter that already says it in the paragraph before
    # the widget gets that paragraph styled as the note; otherwise the standard note is added
    _kernel_notes(doctree)


# --- reading time ------------------------------------------------------------------------------
WORDS_PER_MIN, CODE_LINES_PER_MIN, SECONDS_PER_FIGURE = 200, 25, 12
CHAPTER_PAGE = re.compile(r"notebooks/\d\d_\w+$")
_NOT_PROSE = (nodes.literal_block, nodes.math, nodes.math_block, nodes.raw, nodes.comment,
              nodes.system_message, nodes.title)


def _in_code_cell(node):
    """The notebook code cell (myst-nb's container) holding `node`, else None."""
    for parent in _ancestors(node):
        if isinstance(parent, nodes.container) and parent.get("nb_element") == "cell_code":
            return parent
    return None


def _ancestors(node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def reading_counts(doctree):
    """Return (prose words, visible code lines, figures) of a page: prose is every word outside
    code cells, code blocks, math and raw HTML (titles included once, below); code is the
    non-blank lines of code shown open (not collapsed by hide-input, not outputs)."""
    words = 0
    for text in doctree.findall(nodes.Text):
        if any(isinstance(p, _NOT_PROSE) for p in _ancestors(text)) or _in_code_cell(text) is not None:
            continue
        words += len(text.astext().split())
    words += sum(len(t.astext().split()) for t in doctree.findall(nodes.title))
    lines = 0
    for block in doctree.findall(nodes.literal_block):
        cell = _in_code_cell(block)
        if cell is not None:
            hidden = cell.get("hide_mode") in ("all", "input", "input+output")
            is_output = any(isinstance(p, nodes.container) and p.get("nb_element") == "cell_code_output"
                            for p in _ancestors(block))
            if hidden or is_output:
                continue
        lines += sum(1 for line in block.astext().splitlines() if line.strip())
    figures = sum(1 for _ in doctree.findall(nodes.image))
    return words, lines, figures


def reading_minutes(words: int, code_lines: int, figures: int) -> int:
    """Whole minutes (at least 1) to read `words` of prose, `code_lines` of code and `figures`."""
    minutes = (words / WORDS_PER_MIN + code_lines / CODE_LINES_PER_MIN
               + figures * SECONDS_PER_FIGURE / 60)
    return max(1, round(minutes))


def _reading_time(app, doctree, docname):
    """Put "About N min read" under the title of every chapter page."""
    if not CHAPTER_PAGE.match(docname):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    title = next(iter(section.findall(nodes.title)), None) if section is not None else None
    if title is None:
        return
    words, lines, figures = reading_counts(doctree)
    minutes = reading_minutes(words, lines, figures)
    line = nodes.raw("", (
        f'<p class="ib-reading-time" data-minutes="{minutes}" data-words="{words}" '
        f'data-code-lines="{lines}" data-figures="{figures}">'
        f'<strong>About {minutes} min read</strong> · {words:,} words, {lines:,} lines of code, '
        f'{figures} figures</p>'), format="html")
    section.insert(section.index(title) + 1, line)


RUNNING_KERNEL = re.compile(r"needs? a running kernel", re.I)


def _kernel_notes(doctree):
    """Give every embedded widget exactly one "needs a running kernel" note."""
    order = [n for n in doctree.findall() if isinstance(n, (nodes.paragraph, nodes.raw, nodes.title))]
    last_stop = -1
    for i, node in enumerate(order):
        if not (isinstance(node, nodes.raw) and WIDGET_MIME in node.astext()):
            continue
        found = None
        for j in range(i - 1, last_stop, -1):   # back to the previous widget or section title
            prev = order[j]
            if isinstance(prev, nodes.title):
                break
            if isinstance(prev, nodes.paragraph) and RUNNING_KERNEL.search(prev.astext()):
                found = prev
                break
        last_stop = i
        if found is not None:
            if "ib-kernel-note" not in found["classes"]:
                found["classes"].append("ib-kernel-note")
        elif node.parent is not None:
            node.parent.insert(node.parent.index(node), nodes.raw("", KERNEL_NOTE, format="html"))


SOLUTION_TITLE = re.compile(r"(\d+\.\d+)")


def _solution_banner(app, doctree):
    """Open every solution page with a banner linking back to its exercise."""
    docname = app.env.docname
    if not docname.startswith("notebooks/solutions/"):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    title = next(iter(section.findall(nodes.title)), None)
    number = SOLUTION_TITLE.search(title.astext()) if title is not None else None
    name = docname.rsplit("/", 1)[-1]
    label = f"Exercise {number.group(1)}" if number else "the exercise"
    banner = nodes.raw("", (
        '<div class="ib-solution-banner" role="note"><strong>Solution to '
        f'{html.escape(label)}</strong> — try the exercise first: '
        f'<a href="../exercises/{html.escape(name)}.html">open {html.escape(label)}</a>. '
        "The answers below give it away.</div>"), format="html")
    section.insert(section.index(title) + 1 if title is not None else 0, banner)


def _exercise_footer(app, doctree):
    """End every exercise page with the way to its solution (solutions are not in the sidebar)."""
    docname = app.env.docname
    if not docname.startswith("notebooks/exercises/"):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    name = docname.rsplit("/", 1)[-1]
    section.append(nodes.raw("", (
        '<p class="ib-solution-link">Done, and graded? Compare with '
        f'<a href="../solutions/{html.escape(name)}.html">the worked solution</a>.</p>'),
        format="html"))


MATHJAX2_SHIM = """(function () {
  function shim(mj) {
    if (mj && typeof mj === "object" && !mj.Hub) {
      mj.Hub = {Queue: function (job) {
        var el = job && job[2];
        var ready = (mj.startup && mj.startup.promise) || Promise.resolve();
        ready.then(function () { if (mj.typesetPromise) { return mj.typesetPromise(el ? [el] : undefined); } });
      }};
    }
  }
  var current = window.MathJax;
  Object.defineProperty(window, "MathJax", {configurable: true,
    get: function () { return current; }, set: function (v) { current = v; shim(v); }});
  shim(current);
})();"""

def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        filename = getattr(script, "filename", script) or ""  # inline scripts: None or ""
        key = (str(filename), tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:  # the copies differ only in filename None vs ""
            seen.add(key)
            unique.append(script)
    # in place: later handlers (MathJax, widgets) append page-specific scripts to this same list
    scripts[:] = unique

def setup(app):
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=1)
    app.connect("config-inited", _config_inited)
    app.add_css_file("inferbook.css")
    app.add_js_file("inferbook.js", defer="defer")
    app.add_directive("kv-calculator", _calculator_directive("kv-cache"))
    app.add_directive("roofline-knob", _calculator_directive("roofline"))
    app.connect("doctree-read", _add_colab_badge)
    app.connect("doctree-read", _solution_banner)
    app.connect("doctree-read", _exercise_footer)
    app.connect("doctree-resolved", _reading_aids)
    app.connect("doctree-resolved", _reading_time)
    app.connect("html-page-context", _calculator_assets)
    # html-page-context stops at the first handler that returns a value; ours returns None and
    # runs late, after the page-specific scripts are in the list
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
