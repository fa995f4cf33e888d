"""inferbook.notebook (set-up every chapter runs) and inferbook.grading (exercise checks)."""

import random

import numpy as np
import pytest
import torch

from inferbook.grading import ExerciseCheckFailed, check, check_close, check_equal
from inferbook.notebook import device_report, repo_root, seed_everything, setup
from paths import ROOT


def test_setup_seeds_and_reports(capsys):
    report = setup(seed=3)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(3)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item())
    assert report == device_report()
    out = capsys.readouterr().out
    assert out.startswith("device: ") and f"torch {torch.__version__}" in out
    if not torch.cuda.is_available():
        assert report.device == "cpu" and report.compute_capability is None


def test_repo_root_found_from_notebooks_and_refused_elsewhere(tmp_path):
    assert repo_root(ROOT / "notebooks" / "exercises") == ROOT
    with pytest.raises(FileNotFoundError, match="setup cell"):
        repo_root(tmp_path)


def test_checks_pass_quietly_and_fail_with_the_check_name(capsys):
    check("a", True, "truth")
    check_equal("b", [1, 2], [1, 2])
    check_equal("tensor", torch.tensor([1, 2]), torch.tensor([1, 2]))
    check_close("c", 1.0 + 1e-9, 1.0)
    assert capsys.readouterr().out.split() == ["ok:", "a", "ok:", "b", "ok:", "tensor", "ok:", "c"]
    with pytest.raises(ExerciseCheckFailed, match=r"CHECK FAILED \[b\]: first difference at index 0: expected 1, got 2"):
        check_equal("b", [2, 1], [1, 2])
    with pytest.raises(ExerciseCheckFailed, match=r"\[tensor\]"):
        check_equal("tensor", torch.tensor([1, 2, 3]), torch.tensor([1, 2]))
    with pytest.raises(ExerciseCheckFailed, match="no answer yet"):
        check_equal("d", None, 5)
    with pytest.raises(ExerciseCheckFailed, match="finite number"):
        check_close("e", float("nan"), 1.0)
    with pytest.raises(ExerciseCheckFailed, match="expected positive"):
        check("f", False, "positive")


def test_glue_without_myst_nb_shows_figures_only(monkeypatch):
    # On Colab there is no myst_nb: glue stores nothing, shows a figure where it is glued (no
    # {glue:figure} will), and keeps other values hidden unless display=True.
    import sys

    import IPython.display
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inferbook.notebook import glue

    shown = []
    monkeypatch.setitem(sys.modules, "myst_nb", None)
    monkeypatch.setattr(IPython.display, "display", shown.append)
    fig = plt.figure()
    glue("n", 3, display=False)
    glue("fig", fig, display=False)
    glue("m", 4, display=True)
    plt.close(fig)
    assert shown == [fig, 4]


def test_claim_raises_with_the_sentence():
    from inferbook.notebook import claim

    claim(1 < 2, "one is less than two")
    with pytest.raises(AssertionError, match="two is less than one"):
        claim(2 < 1, "two is less than one")


def test_device_report_reads_well_when_displayed():
    from IPython.lib.pretty import pretty

    report = device_report()
    assert pretty(report) == str(report) and not pretty(report).startswith("DeviceReport(")
    assert str(report) in report._repr_html_()


def test_html_table_aligns_numbers_right_and_text_left():
    import pytest

    from inferbook.notebook import html_table

    table = html_table(["model", "KV GB", "note"],
                       [["Llama-3.1-8B", "4.29", "GQA <8 heads>"], ["Mixtral-8x7B", "1,024", "MoE"]])
    html = table.data
    assert '<th class="ib-text" style="text-align:left">model</th>' in html
    assert '<th class="ib-num" style="text-align:right">KV GB</th>' in html
    assert '<td class="ib-num" style="text-align:right">1,024</td>' in html
    assert '<td class="ib-text" style="text-align:left">GQA &lt;8 heads&gt;</td>' in html
    with pytest.raises(ValueError, match="row 1 has 2 cells"):
        html_table(["a", "b", "c"], [["1", "2", "3"], ["1", "2"]])


def test_glue_stores_numpy_scalars_as_python_numbers(monkeypatch):
    import sys
    import types

    from inferbook import notebook

    stored = {}
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=False: stored.__setitem__(name, value)
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    notebook.glue("x", np.float64(1.5))
    notebook.glue("n", np.int64(3))
    assert stored == {"x": 1.5, "n": 3}
    assert type(stored["x"]) is float and type(stored["n"]) is int


def test_figure_text_problems_names_each_rule():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inferbook.notebook import COLUMN_WIDTH_IN, MIN_TEXT_PT, apply_plot_defaults, figure_text_problems

    apply_plot_defaults()
    fig, ax = plt.subplots()
    ax.plot([0, 1], label="a line")
    ax.legend()
    ax.set_title("at the defaults")
    assert figure_text_problems(fig) == []          # the book's defaults pass
    ax.text(0.5, 0.5, "a note", fontsize=MIN_TEXT_PT - 2)
    ax.text(0.2, 0.2, "", fontsize=4)               # empty text is not text a reader sees
    hidden = ax.text(0.3, 0.3, "hidden", fontsize=4)
    hidden.set_visible(False)
    fig.set_size_inches(COLUMN_WIDTH_IN + 1, 3)
    problems = figure_text_problems(fig)
    assert len(problems) == 2, problems
    assert "wide" in problems[0] and f"{MIN_TEXT_PT - 2:g} pt" in problems[1] and "'a note'" in problems[1]
    plt.close(fig)


def test_check_mode_refuses_to_draw_an_unreadable_figure(monkeypatch, tmp_path):
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inferbook import notebook

    monkeypatch.setenv(notebook.CHECK_FIGURES_ENV, "1")
    notebook.apply_plot_defaults()
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    fig.savefig(io.BytesIO(), format="png")        # a figure at the defaults draws
    ax.set_xlabel("too small", fontsize=6)
    with pytest.raises(notebook.FigureTextTooSmall, match="6 pt"):
        fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


def test_legend_below_and_plain_log_ticks():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inferbook.notebook import (apply_plot_defaults, figure_text_problems, legend_below,
                                    plain_log_ticks)

    apply_plot_defaults()
    fig, ax = plt.subplots(layout="constrained")
    ax.loglog([1, 10, 1000], [0.01, 0.1, 1], label="a line")
    legend_below(fig, ax)
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    fig.canvas.draw()
    assert not ax.get_legend() and len(fig.legends) == 1
    ticks = [t.get_text() for axis in (ax.xaxis, ax.yaxis) for t in axis.get_ticklabels()]
    assert "1,000" in ticks and "0.01" in ticks and not [t for t in ticks if "$" in t]
    assert figure_text_problems(fig) == []
    plt.close(fig)
