"""Per-level access counts of one graph op on an accelerator, for `engine.evaluate` and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, TENSORS, Layer
from engine.blocking.model import Blocking, evaluate
from engine.blocking.optimizer import block
from engine.blocking.reuse import reusing_block
from engine.errors import GraphError
from engine.graph import Graph, Op, OpKind

BLOCKABLE = (OpKind.CONV, OpKind.DWCONV, OpKind.MATMUL, OpKind.POOL)


@dataclass(frozen=True)
class LevelCount:
    """Words read from and written to one memory level (all tensors), and their energy.

    `kind` is "rf" (inside every PE), "buffer" (on chip, outside the PEs), "dram", or "array" (words
    multicast to or reduced from the PEs over the array's network).
    """

    level: str
    reads: int
    writes: int
    energy_pj: float
    kind: str = "buffer"
    stored_words: int = 0  # the tiles it keeps at once, all tensors (per PE inside the array)
    capacity_words: int | None = None  # None: unbounded (DRAM) or not a memory (the array)
    weight_reads: int = 0  # the weights' (W's) share of `reads`


@dataclass(frozen=True)
class OpAccessCounts:
    """The best blocking of one op on an accelerator's memories and PE array, with its traffic per level.

    Split buffers (IB/KB/OB) are summed into one 'buffer' row. `rf_skipped` is True when the
    RF cannot hold even a one-element tile of this op, so the MACs read the buffer directly.
    `loop_nest` lists each operand's tile per level, the spatial unrolling and the utilisation.
    """

    op: str
    layer: Layer
    blocking: Blocking
    levels: tuple[LevelCount, ...]
    macs: int
    mac_pj: float
    rf_skipped: bool
    loop_nest: tuple[str, ...]
    utilisation: float = 1.0
    cycles: int = 0

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
    return hierarchy_counts(layer, Hierarchy.from_accelerator(acc), op.name)


def hierarchy_counts(layer: Layer, hierarchy: Hierarchy, op: str = "", *,
                     weights_once: bool = False, resized: bool = True) -> OpAccessCounts:
    """`layer`'s least-energy blocking on `hierarchy` with its traffic per level (cached by shape and hierarchy).

    With `weights_once`, the least-energy blocking among those that read each weight from the top level exactly once
    (a fused group's streamed weights: the weight block outermost at the top, the band's rows inside it).
    With `resized` False the blocking is searched on `hierarchy` alone (`block`), not kept for other sizes of its
    levels as well (`reusing_block`, which searches those too): a band's levels below the fusion level keep their
    sizes when the buffer changes.
    """
    shape = Layer(**{d: getattr(layer, d) for d in DIMS}, stride=layer.stride, dilation=layer.dilation,
                  groups=layer.groups, has_weights=layer.has_weights, pad=layer.pad)
    return OpAccessCounts(op or layer.name, layer, *_counts(shape, hierarchy, weights_once and layer.has_weights,
                                                             resized))


def once_penalty_pj(layer: Layer, hierarchy: Hierarchy) -> float:
    """pJ added to each weight word read from the top level so that the least-energy blocking reads each weight
    once: sized against what re-reading a weight word can spare, eight accesses (every operand read and written at
    both ends) at the dearest per-word energy of the hierarchy for each MAC that word feeds (checked against brute
    force in the tests, not proven)."""
    dearest = max(max(m.energy_pj) for m in hierarchy.levels)
    dearest = max(dearest, *(max(m.write_pj) for m in hierarchy.levels if m.write_pj),
                  *(hierarchy.array.noc_pj if hierarchy.array else ()), hierarchy.mac_pj)
    return 1.0 + 8 * dearest * layer.macs / max(1, layer.footprint("W", layer.dims))


def _weights_dearer(hierarchy: Hierarchy, pj: float) -> Hierarchy:
    """`hierarchy` with `pj` more on each weight word read from its top level."""
    top = hierarchy.levels[-1]
    i, w, o = top.energy_pj
    return replace(hierarchy, levels=(*hierarchy.levels[:-1], replace(top, energy_pj=(i, w + pj, o))))


def _weights_read_once(layer: Layer, hierarchy: Hierarchy, search):
    """The least-energy blocking that reads each weight once from the top: searched with `once_penalty_pj` on every
    weight word read there, raised until the blocking found reads no weight twice; with its hierarchy (the level order
    it was found on, at the true energies) and its cost."""
    top = hierarchy.levels[-1]
    weights = layer.groups * layer.footprint("W", layer.dims)
    penalty = once_penalty_pj(layer, hierarchy)
    while True:
        best = search(layer, _weights_dearer(hierarchy, penalty))
        searched = replace(best.hierarchy, levels=(*best.hierarchy.levels[:-1], top))
        cost = evaluate(layer, searched, best.blocking)
        if sum(a.reads for a in cost.accesses if a.level == top.name and a.tensor == "W") <= weights or penalty > 1e15:
            return best, searched, cost
        penalty *= 16


@lru_cache(maxsize=4096)
def _counts(layer: Layer, hierarchy: Hierarchy, weights_once: bool = False, resized: bool = True):
    search = reusing_block if resized else block
    rf_skipped = not fits_one(layer, hierarchy)
    if rf_skipped:
        hierarchy = hierarchy.keep([m.name for m in hierarchy.on_chip[1:]])
    if weights_once:  # the search sees the penalty; the counts are priced at the true energies
        best, hierarchy, cost = _weights_read_once(layer, hierarchy, search)
    else:
        best = search(layer, hierarchy)
        hierarchy, cost = best.hierarchy, best.cost
    rows = []
    for l, mem in enumerate(hierarchy.levels):
        mine = [a for a in cost.accesses if a.level == mem.name]
        top = l == len(hierarchy.on_chip)
        kind = "dram" if top else "rf" if hierarchy.inside(l) else "buffer"
        rows.append(LevelCount(mem.name, sum(a.reads for a in mine), sum(a.writes for a in mine),
                               sum(a.energy_pj for a in mine), kind, sum(a.stored_words for a in mine),
                               None if top else _capacity(hierarchy, l), sum(a.reads for a in mine if a.tensor == "W")))
    if hierarchy.array is not None:
        mine = [a for a in cost.accesses if a.level == hierarchy.array.name]
        rows.append(LevelCount(hierarchy.array.name, sum(a.reads for a in mine), 0,
                               sum(a.energy_pj for a in mine), "array"))
    if rf_skipped:
        rows.insert(0, LevelCount("RF", 0, 0, 0.0, "rf"))
    nest = (f"# utilisation {cost.utilisation:.1%} of the PEs over {cost.cycles:,} steps", *best.describe())
    return best.blocking, tuple(rows), cost.macs, cost.mac_pj, rf_skipped, nest, cost.utilisation, cost.cycles


def _capacity(hierarchy: Hierarchy, level: int) -> int:
    """Words an on-chip level holds in all (its IB, KB and OB together when split)."""
    mem = hierarchy.levels[level]
    if mem.split_bytes:
        return sum(hierarchy.capacity_words(level, T) for T in TENSORS)
    return hierarchy.capacity_words(level)


def fits_one(layer: Layer, hierarchy: Hierarchy) -> bool:
    """Whether the innermost level holds a one-element tile of every operand it holds."""
    one = (1,) * len(DIMS)
    mem = hierarchy.levels[0]
    held = [T for T in layer.tensors if mem.keeps(T)]
    if mem.split_bytes:
        return all(layer.footprint(T, one) <= hierarchy.capacity_words(0, T) for T in held)
    return sum(layer.footprint(T, one) for T in held) <= hierarchy.capacity_words(0)
