"""The planner (recommend, rules, commands, render, cli) loads no torch, and its CLI starts fast.

Each check runs in a fresh interpreter, so modules another test imported do not hide a torch
import. Planning a deployment is arithmetic over presets; torch (about 3 s to import) belongs
to the chapters that run models.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

PLANNER = ("inferbook.rules", "inferbook.recommend", "inferbook.commands", "inferbook.render",
           "inferbook.cli", "inferbook.speculation_math")


@pytest.mark.parametrize("module", PLANNER)
def test_import_loads_no_torch(module):
    code = (f"import sys, {module}\n"
            "heavy = [m for m in ('torch', 'triton', 'transformers') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "", f"import {module} loaded {out}"


def test_the_formula_is_imported_from_its_owner():
    from inferbook import speculative
    from inferbook.speculation_math import expected_tokens_per_pass
    assert expected_tokens_per_pass(0.0, 4) == 1.0 and expected_tokens_per_pass(1.0, 4) == 5.0
    assert not hasattr(speculative, "expected_tokens_per_pass")


def test_cli_help_starts_fast():
    """`python -m inferbook.recommend --help` in well under a second of CPU time (best of three
    starts; CPU time, not wall time, so a loaded machine does not make the test flaky)."""
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-m", "inferbook.recommend", "--help"],
                              capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, cpu)
        assert done.returncode == 0, done.stderr
        assert "--model" in done.stdout
    assert best < 0.8, f"the CLI took {best:.2f} s of CPU time to print its help"
