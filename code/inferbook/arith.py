"""Integer arithmetic the book uses everywhere: one ceiling division, written once."""

from __future__ import annotations


def ceil_div(n: int, d: int) -> int:
    """Return ⌈n / d⌉ for integers n ≥ 0 and d > 0 (how many blocks of size d hold n items)."""
    return -(-n // d)
