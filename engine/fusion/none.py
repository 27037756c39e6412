"""No fusion: every op (after simple-op merging) is its own group, the paper's "w/o Fusion"."""

from __future__ import annotations

from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel


def search(model: FusionModel, cap: Capacity) -> tuple[list[int], int, bool]:
    """One group per op."""
    return [1 << i for i in range(model.n)], model.n, True
