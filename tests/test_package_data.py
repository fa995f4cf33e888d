"""Data the package needs at run time ships inside it, identical to the benchmark's output."""

import json
import subprocess
import sys

from paths import ROOT


def test_fitted_cost_model_ships_with_the_package():
    shipped = ROOT / "code" / "inferbook" / "data" / "simulate_published.json"
    written = ROOT / "outputs" / "benchmarks" / "simulate_published.json"
    assert json.loads(shipped.read_text()) == json.loads(written.read_text()), (
        "re-run tests/bench/bench_simulate.py --part published: it writes both copies"
    )


def test_fitted_model_loads_outside_the_repository(tmp_path):
    code = ("import inferbook.cost_model as s; e = s.FITTED.efficiency(); "
            "print(e.flops_efficiency, e.bandwidth_efficiency)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    assert len(out.stdout.split()) == 2
