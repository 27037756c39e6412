"""The least traffic any partition can have, and the plan that reaches it when the buffer holds enough.

Every valid partition pays, summed over its groups, at least: each network input read once and each
network output written once, every parameter (and every streamed network input, a KV cache) loaded
once, and every intermediate tensor that an op outside the tile model makes or reads written once and
read once, since such an op always runs alone (`least_bytes` of each group is at most its cost; the
per-group sums only add intermediates, repeated reads and reloads). That sum is `floor_bytes`.

When every piece of the graph the tile model covers (its connected components once the lone ops are
taken out) runs as one group at that floor, no partition is cheaper: `whole_plan` returns it, so a
search that would enumerate every way of cutting a graph that fits whole (decode's one token through
32 layers, whose groups spanning layers turn the exact search into a beam) ends at once, and exactly.
"""

from __future__ import annotations

from engine.errors import EngineError
from engine.fusion.cost import Capacity, dram_bytes, fits
from engine.fusion.model import FusionModel
from engine.fusion.plan import execution_order


def floor_bytes(model: FusionModel) -> int:
    """A lower bound on the DRAM bytes of every valid partition (see the module docstring)."""
    everything = (1 << model.n) - 1
    fin, fout, p_elems, _ = model.io(everything)
    for j, p in enumerate(model.producer):
        readers = model.consumer_mask[j]
        if p < 0 or not readers or (model.covered[p] and all(model.covered[r] for r in model.members(readers))):
            continue
        if not model.is_graph_output[j]:
            fout += model.tbytes[j]  # written by the lone producer's group, or for the lone reader
        if model.stream_elems[j]:
            p_elems += model.stream_elems[j]  # read as parameters are, by some group
        else:
            fin += model.tbytes[j]
    return fin + fout + -(-p_elems * model.word_bits // 8)


def whole_plan(model: FusionModel, cap: Capacity) -> list[int] | None:
    """Group masks in execution order of the covered components and lone uncovered ops, when that partition is
    valid and costs exactly `floor_bytes` (so it is optimal); else None."""
    covered = sum(1 << i for i in range(model.n) if model.covered[i])
    groups = [1 << i for i in range(model.n) if not model.covered[i]]
    rest = covered
    while rest:
        seen = todo = rest & -rest
        while todo:
            b = todo & -todo
            todo ^= b
            new = model.link[b.bit_length() - 1] & covered & ~seen
            seen |= new
            todo |= new
        rest &= ~seen
        if not model.is_convex(seen):
            return None
        groups.append(seen)
    if any(g & (g - 1) and not fits(model, g, cap) for g in groups):
        return None
    total, floor = 0, floor_bytes(model)
    for g in groups:
        cost = dram_bytes(model, g, cap)
        if cost is None or total + cost > floor:
            return None
        total += cost
    if total != floor:
        return None
    try:
        return execution_order(model, groups)
    except EngineError:  # the components form a cycle through a lone op
        return None
