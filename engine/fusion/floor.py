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

import networkx as nx

from engine.errors import EngineError
from engine.fusion.model import FusionModel
from engine.fusion.plan import execution_order
from engine.fusion.sized import SizedModel

SPLIT_TRIES = 8  # cheapest cuts tried, largest fitting prefix first (the rest half is then smallest): each try
# costs the component's size, so a chain of thousands of equally cheap cuts is settled in a few, or left to the search


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


def whole_plan(at: SizedModel) -> list[int] | None:
    """Group masks in execution order of the covered components and lone uncovered ops, when that partition is
    valid and costs exactly `floor_bytes` (so it is optimal); else None."""
    model = at.model
    covered = sum(1 << i for i in range(model.n) if model.covered[i])
    groups = [1 << i for i in range(model.n) if not model.covered[i]]
    rest = covered
    while rest:
        seen = model.component(rest)  # the components taken so far are whole, so flooding `rest` floods `covered`
        rest &= ~seen
        if not model.is_convex(seen):
            return None
        groups.append(seen)
    if any(g & (g - 1) and not at.fits(g) for g in groups):
        return None
    total, floor = 0, floor_bytes(model)
    for g in groups:
        cost = at.dram_bytes(g)
        if cost is None or total + cost > floor:
            return None
        total += cost
    if total != floor:
        return None
    try:
        return execution_order(model, groups)
    except EngineError:  # the components form a cycle through a lone op
        return None


def split_plan(at: SizedModel) -> list[int] | None:
    """The covered ops (one component) in two groups cut where a cut costs least, with the lone ops, when that
    plan costs exactly the least any partition can: min(the component whole, floor + the cheapest cut); else None.

    A partition that splits the component has a first group of it in execution order, a down-set D of the
    component; each tensor D makes that an op of the component outside D reads is written once more and read
    once more than `floor_bytes` counts, so the partition pays at least the floor plus the cheapest such cut
    (`_cheapest_cut`, a minimum closure by max-flow, cached with the model: it does not depend on the buffer).
    Candidates are the prefixes of the topological order whose cut costs least among prefixes and that fit (a
    leading run, found by bisection), the largest first, at most SPLIT_TRIES of them; the max-flow runs only
    once one of them reaches the floor plus its cut. Missing a candidate only leaves the graph to the search.
    """
    model = at.model
    covered = sum(1 << i for i in range(model.n) if model.covered[i])
    if not covered or not model.is_connected(covered):
        return None
    weight = _cut_weights(model, covered)
    cuts = []  # (bytes crossing, prefix) of each proper prefix of the component in topological order
    crossing, prefix = 0, 0
    for i in model.members(covered)[:-1]:
        prefix |= 1 << i
        for j in model.outs[i]:
            crossing += weight.get(j, 0)
        for j in model.ins[i]:
            p = model.producer[j]
            if p >= 0 and (prefix >> p) & 1 and not model.consumer_mask[j] & covered & ~prefix:
                crossing -= weight.get(j, 0)  # its last reader in the component joined the prefix
        cuts.append((crossing, prefix))
    if not cuts:
        return None
    cheapest = min(c for c, _ in cuts)
    lone = [1 << i for i in range(model.n) if not model.covered[i]]
    target = floor_bytes(model) + cheapest
    lone_cost = at.plan_bytes(lone)  # an op outside the tile model runs alone at its compulsory traffic
    fitting = _prefixes_that_fit(at, cuts)
    for _, prefix in [cut for cut in cuts[:fitting] if cut[0] == cheapest][::-1][:SPLIT_TRIES]:
        halves = [prefix, covered & ~prefix]
        if not all(model.is_connected(h) and model.is_convex(h) and at.fits(h) for h in halves):
            continue
        first, second = (at.dram_bytes(h) for h in halves)
        if first is None or second is None or lone_cost + first + second != target:
            continue
        if model.cuts.get_or_make(covered, lambda: _cheapest_cut(model, covered, weight)) != cheapest:
            return None  # some down-set that is no prefix cuts cheaper: no proof
        whole = at.dram_bytes(covered) if at.fits(covered) else None
        if whole is not None and lone_cost + whole < target:
            return None  # the component whole is cheaper (the search has it)
        try:
            return execution_order(model, lone + halves)
        except EngineError:
            continue
    return None


def _prefixes_that_fit(at: SizedModel, cuts: list[tuple[int, int]]) -> int:
    """How many of the prefixes in `cuts` (each the one before it plus ops after it) fit, by bisection: fit is
    monotone as a group grows upward, so they are a leading run (each test costs the group's size)."""
    lo, hi = 0, len(cuts)
    while lo < hi:
        mid = (lo + hi) // 2
        if at.fits(cuts[mid][1]):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _cut_weights(model: FusionModel, covered: int) -> dict[int, int]:
    """Tensor -> bytes it adds beyond `floor_bytes` when a cut separates its covered producer from a covered reader:
    one more read, and its write unless the network returns it or the floor counts it already (a lone reader)."""
    weight = {}
    for j, p in enumerate(model.producer):
        readers = model.consumer_mask[j]
        if p < 0 or not (covered >> p) & 1 or not readers & covered:
            continue
        counted = model.is_graph_output[j] or readers & ~covered  # the floor writes it already
        read = model.stream_elems[j] * model.word_bits // 8 if model.stream_elems[j] else model.tbytes[j]
        weight[j] = read + (0 if counted else model.tbytes[j])
    return weight


def _cheapest_cut(model: FusionModel, covered: int, weight: dict[int, int]) -> int:
    """Least `weight` over the tensors crossing any cut of the covered ops into a non-empty down-set D and a
    non-empty rest: a minimum closure, by a max-flow per (op without covered producers in D, op without covered
    consumers outside D). Op v on the source side is in D; v -> each covered producer is uncuttable (D is a
    down-set); producer -> tensor node costs its weight, tensor node -> each covered reader is uncuttable, so a
    tensor is paid for exactly when its producer is in D and a reader is not."""
    flow = nx.DiGraph()
    members = model.members(covered)
    for i in members:
        flow.add_node(("op", i))
        for p in model.members(model.pred[i] & covered):
            flow.add_edge(("op", i), ("op", p))
    for j, w in weight.items():
        flow.add_edge(("op", model.producer[j]), ("t", j), capacity=w)
        for r in model.members(model.consumer_mask[j] & covered):
            flow.add_edge(("t", j), ("op", r))
    sources = [i for i in members if not model.pred[i] & covered]
    sinks = [i for i in members if not model.succ[i] & covered]
    best = None
    for a in sources:
        for z in sinks:
            if a != z:
                cut = nx.minimum_cut_value(flow, ("op", a), ("op", z))
                best = cut if best is None else min(best, cut)
    return 0 if best is None else int(best)
