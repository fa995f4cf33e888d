"""Tests for inferbook.triton_device: the interpreter is chosen before Triton loads, or refused."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU only")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_importing_it_first_selects_the_interpreter():
    out = _run("import inferbook.triton_device as d, os, triton, triton.language as tl\n"
               "@triton.jit\ndef f(x):\n    pass\n"
               "print(d.DEVICE, d.INTERPRETED, os.environ['TRITON_INTERPRET'], type(f).__name__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "True", "1", "InterpretedFunction"]


def test_importing_it_after_triton_is_refused_with_the_remedy():
    out = _run("import triton, triton.language\nimport inferbook.triton_device")
    assert out.returncode != 0
    assert "restart the kernel" in out.stderr and "before anything imports triton" in out.stderr
