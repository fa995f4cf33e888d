"""Integer arithmetic the book uses everywhere: one ceiling division, written once."""

from __future__ import annotations


def ceil_div(n: int, d: int) -> int:
    """Return ⌈n / d⌉ for integers n ≥ 0 and d > 0 (how many blocks of size d hold n items)."""
    if type(n) is not int or type(d) is not int or n < 0 or d <= 0:  # the fast path skips the checks
        from . import validate

        n, d = validate.non_negative_int("n", n), validate.positive_int("d", d)
    return -(-n // d)
