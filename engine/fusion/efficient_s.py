"""Efficient-S (Zheng et al. 2020) as Optimus evaluates it: dynamic programming on a linear proxy of the DAG.

The DAG is read as one sequence (its topological order) and cut into contiguous
segments. Like the prior works Optimus compares with, a segment of several ops is a
group only when its fmap tiles (no ISOA) and all its parameters fit on chip at once
(the "prior cost model"); then its traffic is inputs + outputs + parameters once,
which is also what `group_cost` gives it. Segments must be weakly connected to be
groups of the fusion space. Single ops are always allowed.
"""

from __future__ import annotations

from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel
from engine.fusion.sized import SizedModel

# Ops visited over all segments before longer segments stop being tried: 2.7x the most any zoo network needs
# (AmoebaNet-D at 64 MB, 3.0 M); one tensor read by 1,000 small ops would need 170 M (hours).
WORK_LIMIT = 8_000_000
# Ops visited in all over a graph fused window by window (`engine.fusion.windowed`), shared among its windows by
# their ops: each visit costs 5-10 us in Python, so a chain of 100,000 ops spends a few seconds here, not hours
WINDOWED_WORK = 300_000


def prior_fits(model: FusionModel, mask: int, cap: Capacity) -> bool:
    """The prior works' rule: every fmap tile at full channel depth and every parameter on chip together."""
    if not all(model.covered[i] for i in model.members(mask)):
        return False
    p_elems = model.io(mask)[2]
    tiles = model.footprint(mask, 0, isoa=False)
    return tiles + p_elems <= cap.fmap if cap.shared else tiles <= cap.fmap and p_elems <= cap.param


def segments(at: SizedModel, sequence: list[int], *, work_limit: int | None = None) -> tuple[list[int], int, bool]:
    """Least-traffic cut of `sequence` into contiguous groups, the number of segments evaluated, and whether the
    cut is exact (False: past `work_limit` ops visited, `WORK_LIMIT` unless given, the remaining starts tried
    single ops only)."""
    model, cap = at.model, at.cap
    work_limit = WORK_LIMIT if work_limit is None else work_limit
    inf = float("inf")
    best = [0] + [inf] * len(sequence)
    cut = [0] * (len(sequence) + 1)
    evaluated = work = 0
    for i in range(len(sequence)):
        if best[i] == inf:
            continue
        mask = 0
        parts: list[int] = []  # the segment's weakly connected components, kept as it grows by one op
        for j in range(i, len(sequence)):
            mask |= 1 << sequence[j]
            parts = _joined(parts, 1 << sequence[j], model.link[sequence[j]])
            evaluated += 1
            work += j - i + 1
            if j > i and (work > work_limit or not prior_fits(model, mask, cap)):
                break  # the prior footprint only grows as the segment grows
            if j > i and len(parts) > 1:
                continue
            cost = at.dram_bytes(mask)
            if cost is not None and best[i] + cost < best[j + 1]:
                best[j + 1], cut[j + 1] = best[i] + cost, i
    groups, j = [], len(sequence)
    while j > 0:
        i = cut[j]
        groups.append(sum(1 << sequence[t] for t in range(i, j)))
        j = i
    return groups[::-1], evaluated, work <= work_limit


def _joined(parts: list[int], bit: int, link: int) -> list[int]:
    """Components `parts` (masks) with the op `bit` added: it joins every component it links to (`link`: its
    producers, consumers and co-readers)."""
    merged, apart = bit, []
    for part in parts:
        if part & link:
            merged |= part
        else:
            apart.append(part)
    apart.append(merged)
    return apart


def search(at: SizedModel, *, work_limit: int | None = None) -> tuple[list[int], int, bool]:
    """Efficient-S on the graph's topological order, past `work_limit` ops visited trying single ops only."""
    return segments(at, list(range(at.model.n)), work_limit=work_limit)
