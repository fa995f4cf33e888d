"""What every benchmark script in tests/bench/ shares: machine metadata, timing, the JSON file.

    from bench_util import machine, timed, write_result   (tests/bench/*.py put tools/ on the path)

* ``machine() -> dict``: device, platform, processor, CPU count, torch threads.
  ``versions(**extra) -> dict``: Python, torch, NumPy (plus e.g.
  ``transformers=transformers.__version__``). ``utc_now() -> str``: the date and time, ISO 8601.
* ``timed(fn) -> Timing``: run `fn()` once; wall seconds (`time.perf_counter`), CPU seconds of
  this process (`time.process_time`: with one torch thread, what the wall clock would read on
  an idle machine, far steadier on a shared one) and fn's result.
* ``repeat(fn, repeats, warmup=0) -> Repeats``: `timed` `repeats` times; ``.median`` /
  ``.cpu_median`` / ``.spread`` (min, max) of the wall seconds, ``.result`` (the last result).
* ``write_result(path, result, argv=None) -> Path``: add ``machine``, ``versions``, ``date``
  and ``command`` where absent (chapters read ``bench["machine"]["cpu_count"]``,
  ``bench["versions"]["torch"]``, ``bench["date"]``), write indented JSON, return the path.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """Return where a benchmark ran: device, platform, processor, CPU count, torch threads."""
    import torch

    return {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def versions(**extra: str) -> dict:
    """Return the Python, torch and NumPy versions, plus `extra` (name=version)."""
    import numpy
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, **extra}


def utc_now() -> str:
    """Return the current UTC date and time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Timing:
    """One timed call: wall and CPU seconds, and what the call returned."""

    seconds: float
    cpu_seconds: float
    result: Any = None


def timed(fn: Callable[[], Any]) -> Timing:
    """Return the wall and CPU seconds of one call of `fn()`, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu, result)


@dataclass
class Repeats:
    """Several timings of the same call."""

    timings: list[Timing] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        return [t.seconds for t in self.timings]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float:
        return statistics.median(t.cpu_seconds for t in self.timings)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.seconds), max(self.seconds)

    @property
    def result(self) -> Any:
        return self.timings[-1].result


def repeat(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> Repeats:
    """Return `repeats` timings of `fn()` after `warmup` untimed calls."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    for _ in range(warmup):
        fn()
    return Repeats([timed(fn) for _ in range(repeats)])


def write_result(path: str | os.PathLike, result: dict, argv: list[str] | None = None) -> Path:
    """Write `result` (with `machine`, `versions`, `date`, `command` added when absent) as JSON."""
    result = dict(result)
    result.setdefault("machine", machine())
    result.setdefault("versions", versions())
    result.setdefault("date", utc_now())
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    result.setdefault("command", " ".join(["python", str(script), *argv[1:]]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
