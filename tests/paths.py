"""Where the tests find the repository: one constant, no authoring tool imported for it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
