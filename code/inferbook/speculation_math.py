"""The arithmetic of speculative decoding, without torch: what the planner needs from chapter 7.

`inferbook.speculative` (the sampler, which needs torch) re-exports it, so the chapter's readers
find it there; `inferbook.rules` imports it from here, so planning a deployment loads no torch.
"""

from __future__ import annotations

from . import validate


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """Return (1 − α^(k+1)) / (1 − α): tokens per target pass if each draft is accepted with prob α."""
    alpha = validate.finite_float("alpha", alpha, 0.0, 1.0)
    k = validate.non_negative_int("k", k)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
