"""`reusing_block`: a layer's least-energy blocking, reused across hierarchies that differ only in level sizes.

A blocking that is least energy on a hierarchy is least energy on any hierarchy with the same levels and energies
whose capacities are no larger, as long as it still fits there: its feasible set is a subset of the first one's and
the blocking's cost does not depend on the sizes. So a dashboard's buffer slider need not search again each layer
whose best blocking fits well below the buffer: the blocking found with the levels outside the PE array made large
enough for anything (searched once per layer and energies, after the first size, bounded by its blocking) serves
every buffer it fits, and one found at a size serves every smaller size it fits. Where
none does, one found at another size that fits bounds the new search.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from functools import lru_cache

from engine.blocking.hierarchy import Hierarchy, Memory
from engine.blocking.layer import Layer
from engine.blocking.model import Cost, evaluate
from engine.blocking.optimizer import BlockingResult, block
from engine.blocking.routes import level_orders

ANY_SIZE = 1 << 50  # bytes of a level outside the array "large enough for anything": more than any layer's tiles
SIZES = ("size_bytes", "split_bytes", "area_mm2")  # what a level's capacity changes, none of it a blocking's cost


def reusing_block(layer: Layer, hierarchy: Hierarchy) -> BlockingResult:
    """`block(layer, hierarchy)`'s least energy, found once for every size of the levels it fits (see the module
    docstring); a reused blocking is priced anew on `hierarchy` (its capacities in the counts are `hierarchy`'s)."""
    found = _found(layer, _sizeless(hierarchy))
    for result in found:
        reused = _reuse(layer, result, hierarchy)
        if reused is not None:
            return reused
    result = block(layer, hierarchy, within_pj=_bound(layer, found, hierarchy))
    large = _any_size(hierarchy)
    if not found and large != hierarchy:  # once: the levels outside the array large enough for anything (bounded)
        found.append(block(layer, large, within_pj=_bound(layer, [result], large)))
    found.append(result)
    return result


def _bound(layer: Layer, found: list[BlockingResult], hierarchy: Hierarchy) -> float:
    """Memory pJ (a hair more) of the least-energy blocking found at another size that fits `hierarchy`: the search
    there may skip whatever costs more (inf when none fits)."""
    fitting = [cost.memory_pj for cost in (_priced(layer, r, hierarchy) for r in found) if cost is not None and cost.fits]
    return min(fitting, default=math.inf) * (1 + 1e-9)


@lru_cache(maxsize=4096)
def _found(layer: Layer, sizeless: tuple) -> list[BlockingResult]:
    """The blockings searched so far for `layer` on hierarchies of one shape (`_sizeless`), at their own sizes."""
    return []


def _sizeless(hierarchy: Hierarchy) -> tuple:
    """Everything of `hierarchy` a blocking's cost depends on: all but its levels' sizes (and whether each of a split
    level's buffers exists: a zero-byte one is passed through, not small)."""
    def level(mem: Memory) -> tuple:
        split = tuple(b > 0 for b in mem.split_bytes) if mem.split_bytes else None
        return (*(getattr(mem, f.name) for f in fields(mem) if f.name not in SIZES), split)
    rest = tuple(getattr(hierarchy, f.name) for f in fields(hierarchy) if f.name not in ("levels", "name"))
    return (*rest, tuple(level(m) for m in hierarchy.levels))


def _any_size(hierarchy: Hierarchy) -> Hierarchy:
    """`hierarchy` with each on-chip level outside the PE array (and each of its split buffers) of `ANY_SIZE`."""
    def large(mem: Memory) -> Memory:
        if mem.split_bytes:
            return replace(mem, split_bytes=tuple(ANY_SIZE if b else 0 for b in mem.split_bytes))
        return replace(mem, size_bytes=ANY_SIZE)
    return replace(hierarchy, levels=tuple(large(m) if i < len(hierarchy.on_chip) and not hierarchy.inside(i) else m
                                           for i, m in enumerate(hierarchy.levels)))


def _reuse(layer: Layer, result: BlockingResult, hierarchy: Hierarchy) -> BlockingResult | None:
    """`result` on `hierarchy`, when each level of `hierarchy` is no larger than where `result` was found and its
    blocking fits there; else None."""
    mine = _ordered(hierarchy, result)
    if mine == result.hierarchy:  # the hierarchy it was searched on (one with no on-chip level outside the array)
        return result
    if mine is None or not all(_no_larger(a, b) for a, b in zip(mine.levels, result.hierarchy.levels)):
        return None
    cost = evaluate(layer, mine, result.blocking)
    if not cost.fits:
        return None
    return replace(result, hierarchy=mine, cost=cost, evaluated=0, seconds=0.0)


def _ordered(hierarchy: Hierarchy, result: BlockingResult) -> Hierarchy | None:
    """`hierarchy` with its levels in the order `result`'s blocking was found on (None: no such order)."""
    order = [m.name for m in result.hierarchy.levels]
    return next((h for h in level_orders(hierarchy) if [m.name for m in h.levels] == order), None)


def _priced(layer: Layer, result: BlockingResult, hierarchy: Hierarchy) -> Cost | None:
    """`result`'s blocking priced on `hierarchy` (whether it fits there included)."""
    mine = _ordered(hierarchy, result)
    return None if mine is None else evaluate(layer, mine, result.blocking)


def _no_larger(mem: Memory, than: Memory) -> bool:
    """Whether level `mem` holds no more than `than` (each split buffer; DRAM, unbounded, is no larger than itself)."""
    if mem.split_bytes and than.split_bytes:
        return all(a <= b for a, b in zip(mem.split_bytes, than.split_bytes))
    if mem.size_bytes is None or than.size_bytes is None:
        return mem.size_bytes is None and than.size_bytes is None
    return mem.size_bytes <= than.size_bytes
