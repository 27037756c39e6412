"""No fusion: every op (after simple-op merging) is its own group, the paper's "w/o Fusion"."""

from __future__ import annotations

from engine.fusion.sized import SizedModel


def search(at: SizedModel) -> tuple[list[int], int, bool]:
    """One group per op."""
    return [1 << i for i in range(at.model.n)], at.model.n, True
