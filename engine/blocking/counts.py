"""Per-level access counts of one graph op on an accelerator, for `engine.evaluate` and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, Layer
from engine.blocking.model import Blocking, describe, evaluate
from engine.blocking.optimizer import exact_blocking
from engine.errors import GraphError
from engine.graph import Graph, Op, OpKind

BLOCKABLE = (OpKind.CONV, OpKind.DWCONV, OpKind.MATMUL, OpKind.POOL)


@dataclass(frozen=True)
class LevelCount:
    """Words read from and written to one memory level (all tensors), and their energy."""

    level: str
    reads: int
    writes: int
    energy_pj: float


@dataclass(frozen=True)
class OpAccessCounts:
    """The best blocking of one op on an accelerator's RF, buffer(s) and DRAM, with its traffic per level.

    Split buffers (IB/KB/OB) are summed into one 'buffer' row. `rf_skipped` is True when the
    RF cannot hold even a one-element tile of this op, so the MACs read the buffer directly.
    """

    op: str
    layer: Layer
    blocking: Blocking
    levels: tuple[LevelCount, ...]
    macs: int
    mac_pj: float
    rf_skipped: bool
    loop_nest: tuple[str, ...]

    @property
    def memory_pj(self) -> float:
        return sum(c.energy_pj for c in self.levels)

    def level(self, name: str) -> LevelCount:
        for c in self.levels:
            if c.level == name:
                return c
        return LevelCount(name, 0, 0, 0.0)


def layer_access_counts(graph: Graph, op: Op | str, acc: Accelerator) -> OpAccessCounts | None:
    """Access counts (words) and energy per level of `op`'s least-energy blocking on `acc`; None for ops
    with no convolution-like loop nest (eltwise, concat, reshape, ...).

    Results are cached by layer shape and accelerator, so the repeated convs of a ResNet cost one search.
    """
    op = graph.op(op) if isinstance(op, str) else op
    if op.kind not in BLOCKABLE and not (op.kind is OpKind.NORM and op.source_type == "LRN"):
        return None
    try:
        layer = Layer.from_op(graph, op)
    except GraphError:
        return None
    shape = Layer(**{d: getattr(layer, d) for d in DIMS}, stride=layer.stride, dilation=layer.dilation,
                  groups=layer.groups, has_weights=layer.has_weights)
    counts = _counts(shape, Hierarchy.from_accelerator(acc))
    return OpAccessCounts(op.name, layer, *counts)


@lru_cache(maxsize=4096)
def _counts(layer: Layer, hierarchy: Hierarchy):
    rf_skipped = not _fits_one(layer, hierarchy)
    if rf_skipped:
        hierarchy = hierarchy.keep([m.name for m in hierarchy.on_chip[1:]])
    blocking, _ = exact_blocking(layer, hierarchy)
    cost = evaluate(layer, hierarchy, blocking)
    rows = []
    for mem in hierarchy.levels:
        mine = [a for a in cost.accesses if a.level == mem.name]
        rows.append(LevelCount(mem.name, sum(a.reads for a in mine), sum(a.writes for a in mine),
                               sum(a.energy_pj for a in mine)))
    if rf_skipped:
        rows.insert(0, LevelCount("RF", 0, 0, 0.0))
    nest = tuple(describe(blocking, [m.name for m in hierarchy.levels]))
    return blocking, tuple(rows), cost.macs, cost.mac_pj, rf_skipped, nest


def _fits_one(layer: Layer, hierarchy: Hierarchy) -> bool:
    """Whether the innermost level holds a one-element tile of every tensor."""
    one = (1,) * len(DIMS)
    need = sum(layer.footprint(T, one) for T in layer.tensors)
    return need <= hierarchy.capacity_words(0)
