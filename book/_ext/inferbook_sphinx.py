"""Small fixes to the HTML that Jupyter Book 1 writes, so pages load with no console errors.

1. sphinx-thebe registers its inline configuration script at every `env-before-read-docs`, which
   a Jupyter Book build fires more than once, so pages declared `const THEBE_JS_URL` twice (a
   SyntaxError in the browser). Identical scripts are dropped before the page is written.
2. The ipywidgets renderer (html-manager 1.0.x) typesets widget labels with the MathJax 2 API,
   `MathJax.Hub.Queue`, but Sphinx loads MathJax 3. A tiny shim maps it to `typesetPromise`.
"""


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
    # html-page-context stops at the first handler that returns a value; ours returns None and
    # runs late, after the page-specific scripts are in the list
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
