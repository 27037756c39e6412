"""The least closure: which producers a group holding some tensors must also hold, at the least footprint.

A group that needs a tensor either holds it as read from another group or holds its maker, which needs its own
inputs in turn; every op chosen counts once, however many chosen ops read it. That is the minimum closure problem,
a minimum cut (Picard 1976). The graphs are small (a layer's ops above a piece, ~150 edges) and many have one
shape (identical layers), so the cut is a short augmenting-path max-flow, memoised per shape; networkx's general
max-flow took five times as long on them, which the first limit curve of a process paid.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from functools import lru_cache

UNBOUNDED = 1 << 62  # an edge no cut takes


def least_closure(sources: Iterable[int], maker: Sequence[int], inputs: Sequence[Sequence[int]],
                  width: Callable[[int], int], hold: Callable[[int], int], allowed: Collection[int],
                  end: Callable[[int], int]) -> int:
    """Least `width` of a set of ops in `allowed` plus `hold` of the tensors it needs and does not make, where the
    tensors `sources` are needed and every chosen op needs its `inputs`; a tensor whose maker is not allowed costs
    its `end`. Tensors and ops are numbered by the caller (`maker[tensor]`: an op, or -1)."""
    label: dict[tuple[str, int], int] = {}

    def node(kind: str, x: int) -> int:
        return label.setdefault((kind, x), len(label) + 2)  # 0: the source, 1: the sink

    todo = sorted(sources)
    seen, done = set(todo), set()
    edges = [(0, node("t", j), -1) for j in todo]
    for j in todo:  # grows as it goes: breadth first, in the caller's order, so equal shapes give equal edges
        p = maker[j]
        if p not in allowed:
            if end(j):
                edges.append((node("t", j), 1, end(j)))
            continue
        edges.append((node("t", j), node("o", p), hold(j)))
        if p in done:
            continue
        done.add(p)
        if width(p):
            edges.append((node("o", p), 1, width(p)))
        for k in inputs[p]:
            edges.append((node("o", p), node("t", k), -1))
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return min_cut(tuple(edges))


@lru_cache(maxsize=4096)
def min_cut(edges: tuple[tuple[int, int, int], ...]) -> int:
    """The minimum cut from node 0 to node 1 of (tail, head, capacity) edges (-1: unbounded), by shortest augmenting
    paths (Edmonds-Karp)."""
    cap: dict[tuple[int, int], int] = {}
    adj: dict[int, list[int]] = {}
    for u, v, c in edges:
        if (u, v) not in cap:
            adj.setdefault(u, []).append(v)
            if (v, u) not in cap:
                adj.setdefault(v, []).append(u)
                cap[v, u] = 0
            cap[u, v] = 0
        cap[u, v] += UNBOUNDED if c < 0 else c
    total = 0
    while 1 in adj:
        prev: dict[int, int] = {0: 0}
        queue = [0]
        for u in queue:
            if u == 1:
                break
            for v in adj[u]:
                if v not in prev and cap[u, v] > 0:
                    prev[v] = u
                    queue.append(v)
        if 1 not in prev:
            break
        path, v = [], 1
        while v:
            path.append((prev[v], v))
            v = prev[v]
        push = min(cap[e] for e in path)
        for u, v in path:
            cap[u, v] -= push
            cap[v, u] += push
        total += push
    return total
