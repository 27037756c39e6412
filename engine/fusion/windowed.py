"""Fusion of graphs past what one search holds: windows of the topological order cut where least crosses.

A graph of more than `WINDOW_ABOVE` ops is cut, in a topological order (its own, or a depth-first one where
fewer bytes cross the cuts: `plan_order`), into ranges of at most `WINDOW_OPS` ops (so every prefix of windows
is a down-set), each cut placed where the fewest bytes cross it (`cuts`). The depth-first order lists the ops
above subtrees too large for one group last, so one window holds them together. Each window becomes a graph of its
own (`window_graph`): the tensors made in earlier windows are its inputs, the tensors read in later ones or
returned are its outputs. The method asked for fuses each window alone, and the windows' groups, in
order, are a valid plan of the whole graph: each group lies in one window and is valid
there, and contracting them leaves the graph acyclic because the windows run in order. A
group costs in its window what it costs in the whole graph (Eq. 3 depends on the group
alone; the tensors at a cut are a group's inputs and outputs), so the traffic at the cuts
is counted in full. An optimus plan's groups are then joined across the cuts where that moves less
(`engine.fusion.join`).

The optimum may group across a cut. `engine.fusion.bound`'s windows bound it from below
with the tensors made in earlier windows free; run inside each plan window, with the
tensors from earlier plan windows free as well (`bound_model`), their sums plus the weights
several ops share are a proven lower bound on every valid partition of the whole graph (or, where
more, what the fewest groups any partition has must move, `engine.fusion.fewest`, or the pieces it cuts the
single-reader trees into, `engine.fusion.pieces`). So
an optimus plan found this way says "windowed" with that bound, and its gap is what the cuts
may cost. Every count here is of ops and down-sets, never of seconds: the plan does not
depend on the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from engine.accelerator import Accelerator
from engine.fusion import crossing, dataflow, fewest, join, pieces, subgraph
from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel, tensor_geo, tensor_views
from engine.fusion.plan import FusionPlan
from engine.graph import Graph, OpKind

WINDOW_ABOVE = 2048  # graphs with more ops (no zoo network: ResNet-1202 has 1,807) are fused window by window
WINDOW_OPS = 128  # ops per window at most
_CUT_AVOID = frozenset({OpKind.RESHAPE, OpKind.SPLIT, OpKind.CONCAT, OpKind.SOFTMAX, OpKind.MATMUL})
# kinds whose cost reads their neighbours (a layout op folds into them unless its output is returned, attention
# keys its softmax on its matmuls, a token view follows its reshape): no cut beside one while another cut is as narrow


def spans(graph: Graph) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Per activation: the index of the op that makes it (absent for network inputs), of its first and last reader."""
    made: dict[str, int] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            first.setdefault(t, i)
            last[t] = i
        for t in op.outputs:
            made[t] = i
    return made, first, last


def cuts(graph: Graph, word_bits: int, *, max_ops: int) -> tuple[tuple[int, int], ...]:
    """Consecutive op ranges [lo, hi) of at most `max_ops` ops, each ending where the fewest bytes cross among the
    last half of its possible ends (the latest such end; an op of `_CUT_AVOID` starts or ends a window only if
    every end there has one on either side)."""
    n, cross = len(graph.ops), subgraph.crossings(graph, word_bits)
    found, lo = [], 0
    while lo < n:
        if n - lo <= max_ops:
            found.append((lo, n))
            break
        ends = range(lo + max(1, max_ops // 2), lo + max_ops + 1)
        hi = min(ends, key=lambda c: (graph.ops[c].kind in _CUT_AVOID or graph.ops[c - 1].kind in _CUT_AVOID,
                                      cross[c], -c))
        found.append((lo, hi))
        lo = hi
    return tuple(found)


def subtree_sizes(graph: Graph) -> dict[str, int]:
    """Per op: the ops of its subtree, it and the subtrees of the producers only it reads from (no other reader, not
    returned). A chain's op holds every op before it; a residual block's Add only its block."""
    size: dict[str, int] = {}
    for op in graph.ops:
        size[op.name] = 1 + sum(size[p] for t in op.inputs
                                if (p := graph.producer(t)) is not None and graph.read_once(t))
    return size


def depth_first(graph: Graph, *, whole: int) -> Graph:
    """`graph` with its ops in a depth-first post-order from its last op back: each op right after the ops it reads
    from that no earlier op needed (a topological order that lists each subtree of a tree of joins whole, where the
    graph's own order may list every leaf before the first join). The ops whose subtree holds more than `whole` ops
    (what one group can hold at most), and every op reading from one, come last in the same post-order: no group
    holds one of them with its whole subtree, so each is grouped with others reading several sums, and listed
    together they fall in one window, which can group them (the Adds above a tree's subtrees of 1,024 ReLUs)."""
    listed: set[str] = set()
    order = []
    for root in reversed(graph.ops):
        if root.name in listed:
            continue
        listed.add(root.name)
        todo = [(root, iter(root.inputs))]
        while todo:
            op, reads = todo[-1]
            for t in reads:
                p = graph.producer(t)
                if p is not None and p not in listed:
                    listed.add(p)
                    todo.append((graph.op(p), iter(graph.op(p).inputs)))
                    break
            else:
                todo.pop()
                order.append(op)
    size, late = subtree_sizes(graph), set()
    for op in graph.ops:
        if size[op.name] > whole or any(graph.producer(t) in late for t in op.inputs):
            late.add(op.name)
    return replace(graph, ops=tuple(op for op in order if op.name not in late) + tuple(op for op in order
                                                                                      if op.name in late))


def plan_order(graph: Graph, word_bits: int, *, whole: int) -> Graph:
    """`graph` in the order whose `cuts` leave the fewest bytes crossing in all: its own or `depth_first` with
    subtrees of at most `whole` ops listed whole (its own on ties). The cuts are where a windowed plan pays what the
    optimum may not."""
    def crossed(g: Graph) -> int:
        cross = subgraph.crossings(g, word_bits)
        return sum(cross[hi] for _, hi in cuts(g, word_bits, max_ops=WINDOW_OPS))

    other = depth_first(graph, whole=whole)
    return other if crossed(other) < crossed(graph) else graph


def window_graph(graph: Graph, lo: int, hi: int, *, lower: bool = False) -> Graph:
    """Ops lo..hi-1 as a graph (`subgraph.part` of a range): what earlier ops made (and network inputs) are its
    inputs; its outputs are what the network returns and, unless `lower`, what later ops read."""
    return subgraph.part(graph, graph.ops[lo:hi], f"{graph.name}[{lo}:{hi}]", lower=lower)


def bound_model(graph: Graph, lo: int, hi: int, lives, acc: Accelerator, views, shared: set[str]) -> FusionModel:
    """The window's model for `engine.fusion.bound`: tensors made in earlier windows (or network inputs read in
    other windows too) free and held at min(T_c, C) channels (none where a layout op made them, which shares
    its input's buffer), and the weights several ops of the network share free (the caller counts them once)."""
    made, first, last = lives
    sub = window_graph(graph, lo, hi, lower=True)
    tp = dataflow.of(acc)
    free = {w: 0 for op in sub.ops for w in op.weights if w in shared}
    for t in sub.inputs:
        p = made.get(t, -1)
        if p < 0 and first[t] >= lo and last[t] < hi:
            continue  # a network input read in this window only: read here, at full depth
        geo = tensor_geo(views.get(t, graph.tensors[t].shape), acc.word_bits)
        layout = p >= 0 and graph.ops[p].kind in (OpKind.CONCAT, OpKind.SPLIT, OpKind.RESHAPE)
        free[t] = 0 if geo is None or layout else min(tp.t_c, geo.channels) * geo.w
    return FusionModel(sub, tp, acc.word_bits, free=free, views=views)


def shared_weights(graph: Graph) -> set[str]:
    """Weights read by more than one op."""
    users: dict[str, int] = {}
    for op in graph.ops:
        for w in set(op.weights):
            users[w] = users.get(w, 0) + 1
    return {w for w, k in users.items() if k > 1}


def lower_bound_bytes(graph: Graph, acc: Accelerator, cap: Capacity, windows, most: int) -> int:
    """A proven lower bound on every valid partition's traffic: each window's `bound` windows, with what earlier
    windows made free, plus the shared weights once, plus what the tensors crossing windows must cost (`crossing`:
    the windows charge them nowhere); or, where more, what the fewest groups any partition has must move
    (`fewest`) or the pieces it cuts its single-reader trees into (`pieces`). `windows` are any ranges of the graph's
    order; `most`: `fewest.most_ops`, the most ops a group holds."""
    from engine.fusion import bound  # the compiled search, loaded on first use (the limits' tables need none)

    lives, views, shared, tp = spans(graph), tensor_views(graph), shared_weights(graph), dataflow.of(acc)
    total = -(-sum(graph.weight_reads[w] for w in shared) * acc.word_bits // 8)
    total += crossing.crossing_bytes(graph, acc.word_bits, tp, cap.fmap, windows, views)
    for lo, hi in windows:
        total += bound.lower_bound_of(bound_model(graph, lo, hi, lives, acc, views, shared), cap).bytes
    return max(total, fewest.fewest_groups_bytes(graph, acc.word_bits, most),
               pieces.pieces_bytes(graph, acc.word_bits, most))


def fuse_windows(graph: Graph, acc: Accelerator, methods: tuple[str, ...],
                 solve: Callable[[Graph, FusionModel, str], FusionPlan], *, cap: Capacity,
                 with_bound: bool) -> dict[str, FusionPlan]:
    """`solve` (one method's `fuse` of one window's graph, given its model) on each window of `cuts`, joined into
    one plan of `graph` per method.

    Every method runs on a window before the next window is made, so each window's model (and the group costs it
    caches) is built once and shared by the methods, and dropped once they are done with it. An optimus plan says
    "windowed" and, when `with_bound`, carries `lower_bound_bytes`; another method's keeps its status ("beam" if
    any window's was).
    """
    tp = dataflow.of(acc)
    most = fewest.most_ops(graph, acc.word_bits, tp, cap.fmap, tensor_views(graph))
    ordered = plan_order(graph, acc.word_bits, whole=most)
    windows = cuts(ordered, acc.word_bits, max_ops=WINDOW_OPS)
    plans: dict[str, list[FusionPlan]] = {m: [] for m in methods}
    for lo, hi in windows:
        part = window_graph(ordered, lo, hi)
        model = FusionModel(part, tp, acc.word_bits)
        for m in methods:
            plans[m].append(solve(part, model, m))
    # the bound's windows in the graph's own order (any order's are sound; these keep its searches' cost and figures)
    bound_windows = windows if ordered is graph else cuts(graph, acc.word_bits, max_ops=WINDOW_OPS)
    return {m: _joined(graph, acc, m, plans[m], bound_windows, cap, with_bound, most) for m in methods}


def _joined(graph: Graph, acc: Accelerator, method: str, plans: list[FusionPlan], windows, cap: Capacity,
            with_bound: bool, most: int) -> FusionPlan:
    """The windows' plans of one method as one plan of `graph` (an optimus plan's groups joined across the windows'
    edges, `join`, runs of at most `most` ops), with the lower bound an optimus plan carries."""
    start = time.perf_counter()
    costs = tuple(c for p in plans for c in p.costs)
    statuses = {p.status for p in plans}
    status = "windowed" if method == "optimus" else "beam" if "beam" in statuses else plans[0].status
    if method == "optimus":
        costs = join.recut(graph, join.joined(graph, costs, acc, cap, most_ops=most), acc, cap)
    floor = lower_bound_bytes(graph, acc, cap, windows, most) if with_bound and method == "optimus" else None
    seconds = sum(p.search_seconds for p in plans) + time.perf_counter() - start
    return replace(plans[0], groups=tuple(c.ops for c in costs), costs=costs,
                   dram_bytes=sum(c.dram_bytes for c in costs), fmap_in_bytes=sum(c.fmap_in_bytes for c in costs),
                   fmap_out_bytes=sum(c.fmap_out_bytes for c in costs), param_bytes=sum(c.param_bytes for c in costs),
                   groups_evaluated=sum(p.groups_evaluated for p in plans), search_seconds=seconds,
                   status=status, lower_bound_bytes=floor)
