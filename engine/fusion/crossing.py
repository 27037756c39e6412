"""What the tensors crossing windows must cost: the part of a windowed plan's lower bound the windows leave out.

`engine.fusion.windowed`'s bound prices each plan window with the tensors made in earlier windows free and
the writes read only by later windows uncounted, so a tensor made in one window and read in a later one is
charged nowhere. A fan of thousands of readers joined by one Sum gave its whole traffic away so (99.9 % gap).
This bound charges those tensors what every valid partition must pay for them, in a term of its own.

Take a tensor t made by op p in window A and read by op r in a later window, both plain ops (conv, depthwise
conv, pool, element-wise: no layout op sharing a buffer, no streamed operand). In a partition where r's group
G_r does not hold p, G_r reads t from DRAM and p's group writes it (a consumer is outside): 2 x its bytes, or
its bytes where the write is already charged in A (another reader there, or t is returned). Where G_r holds p,
t is made and read in G_r, whose tiles then hold at least one row of it at min(T_c, C) channels (what the
windows' bound holds a crossing tensor at, `windowed.bound_model`), and G_r fits: those rows, over all the
tensors r keeps so, fit in the fmap buffer. Each tensor is charged at one reader only (its last plain one in
a later window), so per reader the least charge is a 0/1 knapsack (keep the tensors whose charge per element
held is largest); its fractional relaxation can keep no less, so the charge it leaves is a lower bound.
Readers' tensors are disjoint and charged nowhere else: the sum adds to the windows' bound.
"""

from __future__ import annotations

from engine.fusion.cost import Capacity
from engine.fusion.model import tensor_geo
from engine.graph import Graph, OpKind

_PLAIN = frozenset({OpKind.CONV, OpKind.DWCONV, OpKind.POOL, OpKind.ELTWISE})


def crossing_bytes(graph: Graph, word_bits: int, t_c: int, cap: Capacity, windows, views) -> int:
    """A lower bound on the bytes every valid partition moves for plain tensors crossing `windows` (ranges of the
    topological order) to plain readers (module docstring); `views` as the cost model reads shapes."""
    window_of = [0] * len(graph.ops)
    for k, (lo, hi) in enumerate(windows):
        window_of[lo:hi] = [k] * (hi - lo)
    readers: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for t in dict.fromkeys(op.inputs):
            readers.setdefault(t, []).append(i)
    returned = set(graph.outputs)
    items: dict[int, list[tuple[int, int]]] = {}  # reader -> (bytes charged unless kept, elements kept on chip)
    for p, op in enumerate(graph.ops):
        if op.kind not in _PLAIN:
            continue
        for t in op.outputs:
            later = [r for r in readers.get(t, ()) if window_of[r] > window_of[p] and graph.ops[r].kind in _PLAIN]
            geo = tensor_geo(views.get(t, graph.tensors[t].shape), word_bits)
            if not later or geo is None:
                continue
            written = t in returned or any(window_of[r] == window_of[p] for r in readers[t])
            charge = graph.tensors[t].nbytes(word_bits) * (1 if written else 2)
            items.setdefault(later[-1], []).append((charge, min(t_c, geo.channels) * geo.w))
    return sum(_least_charge(found, cap.fmap) for found in items.values())


def _least_charge(items: list[tuple[int, int]], room: int) -> int:
    """The least total charge of `items` (charge, elements) left off chip when those kept fit in `room` elements,
    the fractional relaxation's (rounded down: a lower bound on the 0/1 one)."""
    total = sum(charge for charge, _ in items)
    kept = 0
    for charge, held in sorted(items, key=lambda item: (item[1] > 0, -item[0] / max(1, item[1]))):
        if held <= room:
            room -= held
            kept += charge
        else:  # a fraction of this one, and nothing after it (the rest charge less per element)
            kept += -(-charge * room // held)
            break
    return total - kept
