"""A decision the recommender (or the capacity simulator) makes, with the reason behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Decision:
    """One choice: its `value`, the `reason` a reader can recompute, where the book teaches it
    (`chapter`, e.g. "ch 5") and the external source it relies on (`citation`, a bibtex key or a
    file and function in a pinned wheel; empty when the rule is the book's own computation)."""

    value: Any
    reason: str
    chapter: str = ""
    citation: str = ""
    extra: dict = field(default_factory=dict, compare=False)
