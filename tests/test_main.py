"""code/main.py, the lesson's demo, prints a correct report."""

import re
import subprocess
import sys

import pytest

from inferbook import main as demo
from paths import ROOT


def test_report_numbers(capsys):
    demo.main(["--tokens", "30"])
    out = capsys.readouterr().out
    assert "identical tokens: True" in out
    # 30 tokens from a 1-token prompt: naive 1+...+30 = 465 rows; cached 30 rows, 465 dot products
    assert re.search(r"naive \(recompute the prefix\)\s+465\s+4,960", out)
    assert re.search(r"KV cache\s+30\s+465", out)
    assert "bit-identical" in out and re.search(r"^\s+1000\s+\S+\s+(True|False)$", out, re.M)
    # Llama-3.1-70B, bf16: 2 (K,V) x 8 KV heads x 128 x 2 bytes = 4096 B/token/layer; 80 layers -> 320 KiB
    assert re.search(r"Llama-3.1-70B\s+4,096\s+320\s+10.00", out)


def test_runs_as_a_script():
    proc = subprocess.run([sys.executable, str(ROOT / "code" / "inferbook" / "main.py"), "--tokens", "5"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "identical tokens: True" in proc.stdout


def test_bad_arguments():
    with pytest.raises(SystemExit):
        demo.main(["--tokens", "0"])
