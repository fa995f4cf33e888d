"""Integer arithmetic the book uses everywhere: one ceiling division, written once."""

from __future__ import annotations


def ceil_div(n: int, d: int) -> int:
    """Return ⌈n / d⌉ for integers n ≥ 0 and d > 0 (how many blocks of size d hold n items)."""
    if type(n) is not int or type(d) is not int or n < 0 or d <= 0:  # the fast path skips the checks
        from . import validate

        # integers (Python or NumPy) as documented; finite real numbers are still accepted
        n = n if validate.is_int(n) else validate.finite_float("n", n)
        d = d if validate.is_int(d) else validate.finite_float("d", d)
        validate.finite_float("n", n, minimum=0)
        if validate.finite_float("d", d) <= 0:
            raise ValueError(f"d must be > 0 (a block size, a divisor), got {d}")
    return -(-n // d)
