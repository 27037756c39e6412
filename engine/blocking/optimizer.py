"""`block`: one layer's least-energy blocking on a memory hierarchy (Yang et al. Sec. 3.5), by the exact dynamic
program (`dp.py`) or by brute force (`exhaustive.py`), over every level order the hierarchy allows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from engine.accelerator import Accelerator
from engine.blocking.dp import exact_blocking
from engine.blocking.exhaustive import exhaustive_blocking
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import Layer
from engine.blocking.model import Blocking, Cost, describe, evaluate
from engine.blocking.routes import level_orders
from engine.errors import EngineError, UnknownNameError

METHODS = ("exact", "exhaustive")


@dataclass(frozen=True)
class BlockingResult:
    """The best blocking found for one layer on one hierarchy, with its cost and how it was found."""

    layer: Layer
    hierarchy: Hierarchy
    blocking: Blocking
    cost: Cost
    method: str
    optimal: bool  # proven least energy under the model (exact DP or full enumeration)
    evaluated: int  # (tiles, order) combinations scored
    seconds: float

    @property
    def energy_pj(self) -> float:
        """Memory energy (pJ): accesses times per-word energy, summed over levels (Eq. 1)."""
        return self.cost.memory_pj

    @property
    def accesses(self) -> dict[str, int]:
        """Level name -> words read from or written back to it."""
        return {name: self.cost.at(name) for name in self.cost.level_names}

    def describe(self) -> list[str]:
        return describe(self.blocking, [m.name for m in self.hierarchy.levels], self.hierarchy)


def as_hierarchy(hierarchy) -> Hierarchy:
    """A Hierarchy from a Hierarchy, an Accelerator, or the names 'diannao' / 'cpu' / an accelerator preset."""
    if isinstance(hierarchy, Hierarchy):
        return hierarchy
    if isinstance(hierarchy, Accelerator):
        return Hierarchy.from_accelerator(hierarchy)
    if isinstance(hierarchy, str):
        if hierarchy == "diannao":
            return Hierarchy.diannao()
        if hierarchy == "cpu":
            return Hierarchy.cpu()
        if hierarchy in Accelerator.presets():
            return Hierarchy.from_accelerator(Accelerator.preset(hierarchy))
        raise UnknownNameError("hierarchy", hierarchy, ("diannao", "cpu", *Accelerator.presets()))
    raise EngineError(f"cannot block on {type(hierarchy).__name__}; give a Hierarchy, an Accelerator or a name")


def block(layer: Layer, hierarchy, *, levels=None, method: str = "exact", within_pj: float = np.inf) -> BlockingResult:
    """The least-energy blocking of `layer` on `hierarchy`, using only the on-chip `levels` named (default all).

    `method="exact"` is the dynamic program (fast, optimal under the model); "exhaustive"
    scores every blocking one by one (the oracle, small layers only). `within_pj`: memory energy (pJ) that some
    blocking which fits is known to cost at most, so the exact search skips whatever costs more.
    """
    hierarchy = as_hierarchy(hierarchy)
    if levels is not None:
        hierarchy = hierarchy.keep(levels)
    if method not in METHODS:
        raise UnknownNameError("blocking method", method, METHODS)
    start = time.perf_counter()
    best, evaluated = None, 0
    for h in level_orders(hierarchy):
        cap = (best[2].memory_pj if best else within_pj) / layer.groups  # one group's energy to beat
        try:
            blocking, n = exact_blocking(layer, h, cap) if method == "exact" else exhaustive_blocking(layer, h)
        except EngineError:
            if h is hierarchy:
                raise
            continue
        evaluated += n
        if blocking is None:
            continue
        cost = evaluate(layer, h, blocking)
        if best is None or cost.memory_pj < best[2].memory_pj * (1 - 1e-12):
            best = (h, blocking, cost)
    if best is None:  # every level order failed or found nothing (the given order's error is raised above)
        raise EngineError(f"layer '{layer.name}': no blocking fits hierarchy '{hierarchy.name}'")
    return BlockingResult(layer, *best, method, True, evaluated, time.perf_counter() - start)
