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
    of one), in a topological order: edges to ops outside it are ignored."""
    pos = {op: i for i, op in enumerate(order)}
    n = len(order)
    desc = [0] * n  # bitset of descendants per position (within `order`: a segment's, or a part of one)
    for i in range(n - 1, -1, -1):
        bits = 0
        for s in {r for t in graph.op(order[i]).outputs for r in graph.consumers(t) if r in pos}:  # its successors
            bits |= desc[pos[s]] | (1 << pos[s])
        desc[i] = bits
    flags, common = [], -1
    for p in range(n - 1):
        common &= desc[p]
        after = ((1 << n) - 1) ^ ((1 << (p + 1)) - 1)
        flags.append(common & after == after)
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
