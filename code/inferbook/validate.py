"""Argument checks for the package's public functions: one place, one wording.

Every public function and constructor checks its arguments here, once, before it changes
anything, so the algorithms stay free of `raise` lines and a rejected call leaves every object
as it was. Each helper returns the value (normalised: a plain `int`, a `float`, a list) or
raises `TypeError` (wrong kind of value) / `ValueError` (right kind, outside the rule) with a
message that names the argument and the rule.

A wrong kind of value raises `ArgumentTypeError`, a `TypeError` that is also a `ValueError`,
so code that catches either keeps working. Booleans are not integers here (``n_layer=True`` is a mistake, not 1); NumPy integers are.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:  # torch is imported only by the tensor checks, so torch-free modules
    import torch  # (sizing, models, hardware) can use this module too


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong kind (a float where a count is needed, a bool as a layer count)."""


def is_int(value) -> bool:
    """Return whether `value` is an integer (Python or NumPy; not a bool, not a float)."""
    kind = type(value)
    if kind is int:  # the common case, checked first: this runs on every public call
        return True
    return kind is not bool and isinstance(value, numbers.Integral)


def integer(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return `value` as an int; raise unless it is an integer in [minimum, maximum]."""
    if type(value) is not int:
        if not is_int(value):
            raise ArgumentTypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
        value = int(value)
    if minimum is not None and value < minimum:
        kind = {0: "a non-negative integer (≥ 0)", 1: "a positive integer (≥ 1)"}.get(
            minimum, f"≥ {minimum}") if maximum is None else f"≥ {minimum}"
        raise ValueError(f"{name} must be {kind}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be ≤ {maximum}, got {value}")
    return value


def positive_int(name: str, value) -> int:
    """Return `value` as an int; raise unless it is an integer ≥ 1."""
    return integer(name, value, minimum=1)


def non_negative_int(name: str, value) -> int:
    """Return `value` as an int; raise unless it is an integer ≥ 0."""
    return integer(name, value, minimum=0)


def finite_float(name: str, value, minimum: float | None = None, maximum: float | None = None) -> float:
    """Return `value` as a float; raise unless it is a finite real number in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be ≤ {maximum}, got {value}")
    return value


def one_of(name: str, value, choices: Iterable) -> object:
    """Return `value`; raise unless it is one of `choices`."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def int_list(name: str, values, minimum: int | None = 0, maximum: int | None = None) -> list[int]:
    """Return `values` (a sequence of integers, a NumPy array or an integer tensor) as a list of
    ints; raise unless every entry is an integer in [minimum, maximum]."""
    if _is_tensor(values):
        values = values.detach().cpu().numpy()
    elif isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(f"{name} must be a sequence of integers, got {type(values).__name__}")
    if not isinstance(values, np.ndarray):
        values = list(values)
        if any(type(x) is bool for x in values):  # NumPy would quietly read True as 1
            raise ArgumentTypeError(f"{name} must hold integers, not booleans")
    arr = np.asarray(values)
    if arr.size == 0:
        return []
    if arr.dtype.kind not in "iu":
        raise ArgumentTypeError(f"{name} must hold integers only, got {arr.dtype} values "
                                f"(e.g. {arr.reshape(-1)[0]!r})")
    arr = arr.reshape(-1)
    bad = np.zeros(arr.shape, dtype=bool)
    if minimum is not None:
        bad |= arr < minimum
    if maximum is not None:
        bad |= arr > maximum
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        rule = f"in [{minimum}, {maximum}]" if maximum is not None else f"≥ {minimum}"
        raise ValueError(f"{name}[{i}] must be {rule}, got {arr[i]}")
    return arr.tolist()


def token_ids(name: str, ids, vocab_size: int) -> list[int]:
    """Return `ids` as a list of ints; raise unless each is a token id in [0, vocab_size)."""
    ids = int_list(name, ids, minimum=None)
    bad = [i for i, t in enumerate(ids) if not 0 <= t < vocab_size] if ids and (
        min(ids) < 0 or max(ids) >= vocab_size) else []
    if bad:
        raise ValueError(f"{name}[{bad[0]}] = {ids[bad[0]]} is outside the vocabulary: token ids "
                         f"must be in [0, {vocab_size})")
    return ids


def _is_tensor(value) -> bool:
    """Return whether `value` is a torch.Tensor, without importing torch when it is not loaded."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def int_tensor(name: str, values, low: int, high: int, what: str = "values") -> "torch.Tensor":
    """Return `values` unchanged; raise unless it is a non-empty integer tensor with entries in
    [low, high) (`what` names them in the message, e.g. "token ids")."""
    import torch

    if not isinstance(values, torch.Tensor):
        raise ArgumentTypeError(f"{name} must be a torch.Tensor of {what}, got {type(values).__name__}")
    if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
        raise ArgumentTypeError(f"{name} must hold integer {what}, got dtype {values.dtype}")
    if values.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(values.shape)}")
    lo, hi = torch.aminmax(values)
    if lo < low or hi >= high:
        raise ValueError(f"{name} must be {what} in [{low}, {high}), got values in [{int(lo)}, {int(hi)}]")
    return values


def token_tensor(name: str, tokens, vocab_size: int, dims: int = 2) -> "torch.Tensor":
    """Return `tokens` unchanged; raise unless it is a non-empty integer tensor of `dims` axes
    whose entries are token ids in [0, vocab_size)."""
    if _is_tensor(tokens) and tokens.dim() != dims:
        raise ValueError(f"{name} must be a tensor with {dims} axes, got shape {tuple(tokens.shape)}")
    return int_tensor(name, tokens, 0, vocab_size, "token ids")


def block_table(name: str, blocks, num_blocks: int) -> list[int]:
    """Return `blocks` as a list of ints; raise unless each is a block id in [0, num_blocks) and
    no block appears twice (one table never holds a block twice)."""
    table = int_list(name, blocks, 0, num_blocks - 1)
    if len(set(table)) != len(table):
        twice = sorted({b for b in table if table.count(b) > 1})
        raise ValueError(f"{name} holds block(s) {twice} more than once; a table lists distinct blocks")
    return table


def same(name: str, value, expected, what: str) -> None:
    """Raise ValueError unless `value == expected` (`what` says what they must agree on)."""
    if value != expected:
        raise ValueError(f"{name} must {what}: got {value}, expected {expected}")


def positive_float(name: str, value) -> float:
    """Return `value` as a float; raise unless it is a finite real number > 0."""
    value = finite_float(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def flag(name: str, value) -> bool:
    """Return `value`; raise unless it is True or False (not 0/1, not a string)."""
    if type(value) is not bool and not isinstance(value, np.bool_):
        raise ArgumentTypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def items(name: str, values) -> list:
    """Return `values` (a list, tuple or other iterable, not a string or a mapping) as a list."""
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(f"{name} must be a list, got {type(values).__name__}")
    return list(values)


def finite_floats(name: str, values, *, length: int | None = None, minimum: float | None = None,
                  positive: bool = False) -> list[float]:
    """Return `values` (a sequence, not a string) as a non-empty list of finite floats, each
    >= `minimum` and, with `positive`, above 0 (a log axis); `length`: exactly that many."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a sequence of numbers; got {type(values).__name__}")
    out = [finite_float(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(values)]
    if not out:
        raise ValueError(f"{name} is empty: nothing to draw")
    if length is not None and len(out) != length:
        raise ValueError(f"{name} has {len(out)} values; expected {length} (one per x value)")
    if positive and min(out) <= 0:
        raise ValueError(f"{name} must be positive on a log scale; got {min(out):g}")
    return out


def device(name: str, value) -> "torch.device":
    """Return `value` as a torch.device; raise unless it names a device torch knows."""
    import torch

    if not isinstance(value, (str, torch.device)):
        raise ArgumentTypeError(f"{name} must be a device name like 'cpu' or 'cuda', got {value!r}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{name}: {value!r} is not a device torch knows ({e})".split("\n")[0]) from None


def torch_dtype(name: str, value) -> "torch.dtype":
    """Return `value`; raise unless it is a torch.dtype."""
    import torch

    if not isinstance(value, torch.dtype):
        raise ArgumentTypeError(f"{name} must be a torch.dtype such as torch.float32, got {value!r}")
    return value


def instance_of(name: str, value, types: type | tuple[type, ...]):
    """Return `value`; raise unless it is an instance of `types` (a class or a tuple of them)."""
    if not isinstance(value, types):
        wanted = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise ArgumentTypeError(f"{name} must be a {wanted}, got {type(value).__name__}")
    return value


def has_attributes(name: str, value, attributes: tuple[str, ...], what: str):
    """Return `value`; raise unless it has every one of `attributes` (`what` names the kind)."""
    missing = [a for a in attributes if not hasattr(value, a)]
    if missing:
        raise ArgumentTypeError(f"{name} must be {what} (it needs {', '.join(missing)}), "
                                f"got {type(value).__name__}")
    return value


def tensor_elements(name: str, shape, limit: int = 2**34) -> None:
    """Raise unless a tensor of `shape` has at most `limit` elements (so allocating it can finish)."""
    n = 1
    for s in shape:
        n *= int(s)
    if n > limit:
        raise ValueError(f"{name}: a tensor of shape {tuple(shape)} has {n:.3e} elements, more than "
                         f"{limit:.3e}; use smaller sizes")
