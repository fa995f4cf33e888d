"""Checks for exercise notebooks: a failed check says which one, what was expected, what came back.

Each check raises `ExerciseCheckFailed` (an `AssertionError`, so nbval reports the cell as failed and
prints the message). Use them in the exercise's check cells:

    from inferbook.grading import check, check_equal
    check_equal("tokens of the cached decoder", got=cached.tolist(), expected=naive.tolist())
"""

from __future__ import annotations

import math
from typing import Any


class ExerciseCheckFailed(AssertionError):
    """Raised by a check that fails; the message starts with 'CHECK FAILED [name]'."""


def _fail(name: str, message: str) -> None:
    raise ExerciseCheckFailed(f"CHECK FAILED [{name}]: {message}")


def check(name: str, condition: bool, expected: str) -> None:
    """Pass if `condition` is true; else fail, saying what was `expected`."""
    if not condition:
        _fail(name, f"expected {expected}")
    print(f"ok: {name}")


def check_equal(name: str, got: Any, expected: Any, hint: str = "") -> None:
    """Pass if `got == expected`; else fail with both values (and a hint, if given)."""
    if got is NotImplemented or got is None and expected is not None:
        _fail(name, f"no answer yet (got {got!r}); expected {expected!r}. {hint}".rstrip())
    if hasattr(got, "shape") or hasattr(expected, "shape"):  # tensors and arrays: shape, then values
        same_shape = tuple(getattr(got, "shape", ())) == tuple(getattr(expected, "shape", ()))
        equal = same_shape and bool((got == expected).all())
    else:
        equal = got == expected
    if not equal:
        _fail(name, f"expected {_short(expected)}, got {_short(got)}. {hint}".rstrip())
    print(f"ok: {name}")


def check_close(name: str, got: float, expected: float, rel: float = 1e-6, abs_: float = 0.0, hint: str = "") -> None:
    """Pass if `got` is within `rel` (relative) or `abs_` of `expected`."""
    if got is None or not isinstance(got, (int, float)) or not math.isfinite(got):
        _fail(name, f"expected a finite number close to {expected!r}, got {got!r}. {hint}".rstrip())
    if not math.isclose(got, expected, rel_tol=rel, abs_tol=abs_):
        _fail(name, f"expected {expected!r} (rel. tolerance {rel:g}), got {got!r}. {hint}".rstrip())
    print(f"ok: {name}")


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " …"
