"""The reader's page: code in chapters and solutions fits 88 columns, and the formatter that
gets it there (tools/format_notebooks.py) changes nothing but code.

The browser checks of the rendered page (no sideways scrolling, math, figures, captions) are in
tests/test_book.py, which builds the book once for all of them.
"""

import importlib.util
import sys

import nbformat
import pytest

from paths import ROOT

LINE_LENGTH = 88
NOTEBOOKS = sorted(ROOT.glob("notebooks/[0-9]*.ipynb")) + sorted(ROOT.glob("notebooks/solutions/*.ipynb"))


def _formatter():
    spec = importlib.util.spec_from_file_location("format_notebooks", ROOT / "tools" / "format_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_code_line_over_88_columns(path):
    nb = nbformat.read(path, as_version=4)
    long = [
        f"cell {i} line {n}: {len(line)} columns: {line.strip()[:60]}"
        for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
        for n, line in enumerate(cell.source.splitlines(), 1) if len(line) > LINE_LENGTH
    ]
    assert not long, (f"{len(long)} code line(s) over {LINE_LENGTH} columns "
                      "(run tools/format_notebooks.py, then shorten strings/comments by hand):\n"
                      + "\n".join(long))


def test_formatter_changes_only_code(tmp_path):
    fmt = _formatter()
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell(fmt.setup_cell_source())
    long_call = nbformat.v4.new_code_cell(
        "result = some_function(argument_number_one, argument_number_two, argument_number_three, x)")
    long_call.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    long_call.execution_count = 3
    long_call.metadata["tags"] = ["nbval-ignore-output"]
    magic = nbformat.v4.new_code_cell("%timeit " + "x" * 100)
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), setup, long_call, magic]
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)

    changed, skipped = fmt.format_notebook(path)
    after = nbformat.read(path, as_version=4)
    assert changed == 1 and skipped == [3]
    assert after.cells[1].source == setup.source                 # the canonical setup cell stays
    assert after.cells[3].source == magic.source                 # magics are left alone
    cell = after.cells[2]
    assert max(len(line) for line in cell.source.splitlines()) <= LINE_LENGTH
    assert cell.outputs == long_call.outputs and cell.execution_count == 3
    assert cell.metadata == long_call.metadata
    assert fmt.format_notebook(path) == (0, [3])                 # idempotent
