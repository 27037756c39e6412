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
    paths (Edmonds-Karp) over edge arrays (edge e and its reverse e ^ 1)."""
    n = 2 + max((max(u, v) for u, v, _ in edges), default=0)
    head: list[int] = []
    cap: list[int] = []
    nxt: list[int] = []
    first = [-1] * n
    for u, v, c in edges:
        for a, b, room in ((u, v, UNBOUNDED if c < 0 else c), (v, u, 0)):
            head.append(b)
            cap.append(room)
            nxt.append(first[a])
            first[a] = len(head) - 1
    total = 0
    while True:
        via = [-1] * n  # the edge each node was reached by (-2: the source)
        via[0] = -2
        queue = [0]
        for u in queue:
            e = first[u]
            while e != -1:
                v = head[e]
                if via[v] == -1 and cap[e] > 0:
                    via[v] = e
                    queue.append(v)
                e = nxt[e]
            if via[1] != -1:
                break
        if via[1] == -1:
            return total
        push, v = UNBOUNDED * 4, 1
        while v:
            push = min(push, cap[via[v]])
            v = head[via[v] ^ 1]
        v = 1
        while v:
            cap[via[v]] -= push
            cap[via[v] ^ 1] += push
            v = head[via[v] ^ 1]
        total += push
