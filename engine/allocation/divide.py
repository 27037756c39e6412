"""Divide-and-conquer (COSMA Sec. IV): cut the op order into segments solved one after another.

The paper picks break nodes by hand; here they are chosen automatically. A cut after
position p of a topological order is *lossless* when every op before it is an ancestor
of every op after it (a cut vertex in topological order): then every schedule runs the
two sides in that order, so splitting there forgoes no schedule. Among the rest, cuts
that leave few bytes live across them lose least. Segments are solved in order, each
starting from the memory state the previous one left (`problem.Carry`).
"""

from __future__ import annotations

from engine.errors import EngineError
from engine.graph import Graph

MAX_OPS_FREE = 24  # ops per segment when the schedule is free
MAX_OPS_FIXED = 48  # ops per segment when the schedule is fixed (far easier per op)


def lossless_cuts(graph: Graph, order) -> list[bool]:
    """Flag per position p: cutting after order[p] forgoes no schedule (all before are ancestors of all after).

    `order` may be any set of ops closed under the paths between them (a segment, or a weakly connected part
    of one), in a topological order: edges to ops outside it are ignored. A cut is lossless exactly when every
    op of the prefix with no successor in it has a direct edge to every op of the suffix with no predecessor in
    it (a path from one to the other would otherwise pass through a suffix op before a suffix op without
    predecessors there), so the two frontiers and the edges between them are kept as the cut moves along: linear
    in the edges (a descendant bitset per op cost n^2/64 words: 1.25 GB on a fan of 100,000 readers).
    """
    pos = {op: i for i, op in enumerate(order)}
    succs = [{pos[r] for t in graph.op(op).outputs for r in graph.consumers(t) if r in pos} for op in order]
    preds: list[set[int]] = [set() for _ in order]
    for i, out in enumerate(succs):
        for j in out:
            preds[j].add(i)
    tops: set[int] = set()  # prefix ops with no successor in the prefix
    fronts = {i for i in range(len(order)) if not preds[i]}  # suffix ops with no predecessor in the suffix
    waiting = [len(p) for p in preds]  # predecessors still in the suffix
    links = 0  # edges from `tops` to `fronts`
    flags = []
    for p in range(len(order) - 1):
        fronts.discard(p)  # p leaves the suffix (its predecessors are all before it: it was a front)
        links -= sum(1 for q in preds[p] if q in tops)
        for q in preds[p]:  # p's predecessors now have a successor in the prefix
            if q in tops:
                tops.discard(q)
                links -= sum(1 for r in succs[q] if r in fronts)
        tops.add(p)
        links += sum(1 for r in succs[p] if r in fronts)
        for r in succs[p]:  # p's successors may have no predecessor left in the suffix
            waiting[r] -= 1
            if not waiting[r]:
                fronts.add(r)
                links += sum(1 for q in preds[r] if q in tops)
        flags.append(links == len(tops) * len(fronts))
    return flags


def crossing_bytes(graph: Graph, order, sizes: dict[str, int], reads: dict[str, tuple]) -> list[int]:
    """Bytes live across each cut of `order`: made (or first read) at or before p, read after p."""
    span: dict[str, list[int]] = {}
    for t, op in enumerate(order):
        for a in reads[op] + tuple(graph.op(op).outputs):
            s = span.setdefault(a, [t, t])
            s[1] = t
    diff = [0] * (len(order) + 1)
    for a, (lo, hi) in span.items():
        diff[lo] += sizes[a]
        diff[hi] -= sizes[a]
    out, acc = [], 0
    for p in range(len(order) - 1):
        acc += diff[p]
        out.append(acc)
    return out


def auto_segments(lossless: list[bool], crossing: list[int], max_ops: int) -> list[tuple[int, int]]:
    """Segments (start, stop) of at most `max_ops` ops minimising (lossy cuts, bytes across cuts).

    Dynamic programme over cut positions; each cut adds what it leaves live across it, so
    fewer, cheaper cuts win, and a lossy cut is taken only where no lossless one fits.
    """
    n = len(lossless) + 1
    # best[i]: cost of cutting the prefix of i ops, (lossy cuts, bytes)
    best: list[tuple[int, int] | None] = [(0, 0)] + [None] * n
    prev = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(max(0, i - max_ops), i):
            reached, here = best[j], best[i]
            if reached is None:
                continue
            cut = (0, 0) if j == 0 else (0 if lossless[j - 1] else 1, crossing[j - 1])
            cost = (reached[0] + cut[0], reached[1] + cut[1])
            if here is None or cost < here:
                best[i], prev[i] = cost, j
    bounds, i = [], n
    while i > 0:
        bounds.append((prev[i], i))
        i = prev[i]
    return bounds[::-1]


def manual_segments(order, break_nodes) -> list[tuple[int, int]]:
    """Segments ending at each named break node (the paper's hand-picked division)."""
    pos = {op: i for i, op in enumerate(order)}
    unknown = [b for b in break_nodes if b not in pos]
    if unknown:
        raise EngineError(f"divide: break node '{unknown[0]}' is not an op of the graph")
    cuts = sorted({pos[b] + 1 for b in break_nodes} - {len(order)})
    starts = [0] + cuts
    return list(zip(starts, cuts + [len(order)]))
