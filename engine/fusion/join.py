"""Consecutive groups of a windowed plan joined across the windows' edges while the union fits and moves less.

Two groups next to each other in a plan's execution order, linked by a tensor (one reads what the other makes, or
both read it), are a valid group together: it is connected, and no path leaves it and comes back (an op between
them on a path would run between them). Contracting it leaves the groups in an order that runs, so the joined plan
is valid, and a group's traffic depends on the group alone (Eq. 3), so each union is priced on a graph of its own
ops (`subgraph.part`) as the whole graph prices it. A window of `engine.fusion.windowed` ends where its search must
stop, not where the optimum cuts: a subtree of Adds over thousands of ReLUs fits one group but spans many windows.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.accelerator import Accelerator
from engine.fusion import crossing, dataflow, subgraph
from engine.fusion.cost import Capacity, GroupCost, compute_schedule, fits, record
from engine.fusion.model import FusionModel, tensor_views
from engine.graph import Graph

RECUT_TRIES = 3  # cuts tried per pair of groups in `recut`: the narrowest below the pair's own boundary


def joined(graph: Graph, costs: tuple[GroupCost, ...], acc: Accelerator, cap: Capacity, *,
           most_ops: int) -> tuple[GroupCost, ...]:
    """`costs` (a plan's groups in execution order) with runs of consecutive groups joined where the union moves less
    than its groups apart. From each group a run grows while the next group is linked to it and the union fits (a
    union of more than `most_ops` ops never does; nor does any run grown from a misfit); it ends where the fewest
    bytes cross among the last half of its possible ends (the latest such end), as `windowed.cuts` places a
    window's end. A run does not grow where it would likely reload parameters (`_reloads`). The run's groups are
    priced on one model of theirs, made for twice as many groups each time the run outgrows it."""
    group = {op: g for g, c in enumerate(costs) for op in c.ops}
    cross = subgraph.crossings(graph, acc.word_bits, [group[op.name] for op in graph.ops])
    tensors = [_tensors(graph, c) for c in costs]
    out: list[GroupCost] = []
    i = 0
    while i < len(costs):
        k, ops, seen = i + 1, len(costs[i].ops), set(tensors[i])
        model, covered = None, i  # a model of the groups i..covered-1
        while (k < len(costs) and ops + len(costs[k].ops) <= most_ops and not seen.isdisjoint(costs[k].inputs)
               and not _reloads(costs[i:k], costs[k], acc.buffer_bytes)):
            if k >= covered:
                covered, room = i, most_ops
                while covered < len(costs) and covered < i + 2 * (k - i) and len(costs[covered].ops) <= room:
                    room -= len(costs[covered].ops)
                    covered += 1
                model = _model(graph, costs[i:covered], acc)
            assert model is not None
            if not fits(model, model.mask_of([op for c in costs[i:k + 1] for op in c.ops]), cap):
                break
            ops, k = ops + len(costs[k].ops), k + 1
            seen |= tensors[k - 1]
        end = min(range(i + max(1, (k - i) // 2), k + 1), key=lambda e: (cross[e], -e))
        union = (_priced(model, tuple(op for c in costs[i:end] for op in c.ops), cap)
                 if model is not None and end > i + 1 else None)
        if union is not None and union.dram_bytes < sum(c.dram_bytes for c in costs[i:end]):
            out.append(union)
        else:
            out.extend(costs[i:end])
        i = end
    return tuple(out)


def recut(graph: Graph, costs: tuple[GroupCost, ...], acc: Accelerator, cap: Capacity) -> tuple[GroupCost, ...]:
    """`costs` (a plan's groups in execution order) with each pair of consecutive groups cut again, in the order
    they run, where fewer bytes cross than between them (the `RECUT_TRIES` narrowest such cuts), both sides are
    connected and fit, and they move less than the pair. Two consecutive groups of a valid plan form a convex set
    (a path leaving and re-entering it would pass a group running between them), and a prefix of a topological
    order of a convex set is convex, so both sides are valid groups that run in the pair's place (a run joined
    from a conv and half the subtree it could not hold whole gives the conv up: the conv alone, the subtree
    whole)."""
    out = list(costs)
    alone = crossing.lone(graph, acc.word_bits, dataflow.of(acc), cap.fmap, tensor_views(graph))
    for i in range(len(out) - 1):
        better = _recut_pair(graph, out[i], out[i + 1], acc, cap, alone)
        if better is not None:
            out[i:i + 2] = better
    return tuple(out)


def _recut_pair(graph: Graph, a: GroupCost, b: GroupCost, acc: Accelerator, cap: Capacity,
                alone: Callable[[str], bool]) -> tuple[GroupCost, GroupCost] | None:
    """Groups `a` then `b` cut again where fewer bytes cross and they move less (`recut`), or None; no side of more
    than one op holds an op of `alone` (which runs alone in every valid partition). The pair's model is built only
    for a cut worth pricing."""
    names = a.ops + b.ops
    ops = tuple(graph.op(n) for n in names)
    cross = subgraph.crossings(graph, acc.word_bits, ops=ops)  # within the pair: what later groups read is written
    here = len(a.ops)
    narrower = [p for p in range(1, len(names)) if cross[p] < cross[here]]
    lone = [q for q, n in enumerate(names) if narrower and alone(n)]
    tries = sorted((p for p in narrower if all((q == 0 and p == 1) or (q == len(names) - 1 and p == q)
                                               for q in lone)), key=lambda p: (cross[p], -p))[:RECUT_TRIES]
    tries = [p for p in tries if _connected(graph, names[:p]) and _connected(graph, names[p:])]
    if not tries:
        return None
    sub = subgraph.part(graph, ops, f"{graph.name}[{len(names)} ops]")
    model = FusionModel(sub, dataflow.of(acc), acc.word_bits)
    for p in tries:
        first, second = _priced(model, names[:p], cap), _priced(model, names[p:], cap)
        if first and second and first.dram_bytes + second.dram_bytes < a.dram_bytes + b.dram_bytes:
            return first, second
    return None


def _connected(graph: Graph, names: tuple[str, ...]) -> bool:
    """Whether the ops are linked into one piece by the activations they read or make (one reads what another
    makes, or both read it): a group's requirement."""
    root: dict[str, str] = {}

    def find(x: str) -> str:
        while root.setdefault(x, x) != x:
            x = root[x]
        return x

    for name in names:
        for t in graph.op(name).inputs + graph.op(name).outputs:
            root[find(name)] = find(t)
    return len({find(name) for name in names}) == 1


def _reloads(run: tuple[GroupCost, ...], nxt: GroupCost, buffer_bytes: int) -> bool:
    """Whether joining `nxt` to `run` would likely reload parameters both keep on chip: their tiles and parameters
    together pass the buffer, so the union runs in more row steps, each loading what is not resident (Eq. 3). Such
    a union is not priced (a residual chain's windows: 2 x 18 KB of weights, resident apart, twice as much joined)."""
    return (any(c.params_resident and c.param_bytes for c in run) and nxt.params_resident and nxt.param_bytes > 0
            and sum(c.footprint_bytes for c in run) + nxt.footprint_bytes > buffer_bytes)


def _tensors(graph: Graph, cost: GroupCost) -> set[str]:
    """The activations a group's ops read or make."""
    return {t for name in cost.ops for op in (graph.op(name),) for t in op.inputs + op.outputs}


def _model(graph: Graph, costs: tuple[GroupCost, ...], acc: Accelerator) -> FusionModel:
    """A model of the groups' ops as a graph of their own (`subgraph.part`, in the graph's order)."""
    inside = {op for c in costs for op in c.ops}
    ops = tuple(op for op in graph.ops if op.name in inside)
    return FusionModel(subgraph.part(graph, ops, f"{graph.name}[{len(ops)} ops]"), dataflow.of(acc), acc.word_bits)


def _priced(model: FusionModel, ops: tuple[str, ...], cap: Capacity) -> GroupCost | None:
    """The ops (fitting) as one group of `model`, priced by the cost model `group_cost` runs."""
    mask = model.mask_of(ops)
    return record(model, mask, cap, compute_schedule(model, mask, cap))
