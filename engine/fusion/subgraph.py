"""Some of a graph's ops as a graph of their own, and the bytes crossing each boundary of an execution order.

Shared by the windows of `engine.fusion.windowed` (ranges of a topological order) and the groups joined or split
by `engine.fusion.join` (any ops that run together).
"""

from __future__ import annotations

from itertools import accumulate

from engine.graph import Graph, Op


def crossings(graph: Graph, word_bits: int, steps: list[int] | None = None, *,
              ops: tuple[Op, ...] | None = None) -> list[int]:
    """Bytes crossing each boundary 0..m between consecutive steps (`steps`: per op of `ops`, the graph's by default,
    the step that runs it, 0..m-1, never before a step running what it reads; each op its own step by default): the
    activations made before the boundary by these ops (or by others, or network inputs) and read after it by these
    ops, in one difference-array pass."""
    listed = graph.ops if ops is None else ops
    at = list(range(len(listed))) if steps is None else steps
    m = max(at, default=-1) + 1
    made: dict[str, int] = {}
    last: dict[str, int] = {}
    for op, s in zip(listed, at):
        for t in op.outputs:
            made[t] = s
        for t in op.inputs:
            last[t] = max(last.get(t, s), s)
    diff = [0] * (m + 2)
    for t, reader in last.items():
        first = made.get(t, -1) + 1
        if reader >= first:
            diff[first] += graph.tensors[t].nbytes(word_bits)
            diff[reader + 1] -= graph.tensors[t].nbytes(word_bits)
    return list(accumulate(diff[:m + 1]))


def part(graph: Graph, ops: tuple[Op, ...], name: str, *, lower: bool = False) -> Graph:
    """`ops` (in an order of the graph's) as a graph: what other ops make (and network inputs) are its inputs; its
    outputs are what the network returns and, unless `lower` (a bound's window: writes to later windows are not
    counted), what other ops read."""
    inside = {op.name for op in ops}
    own = {t for op in ops for t in op.outputs}
    ins = tuple(dict.fromkeys(t for op in ops for t in op.inputs if t not in own))
    returned = graph.returned
    outs = tuple(t for op in ops for t in op.outputs
                 if t in returned or (not lower and any(r not in inside for r in graph.consumers(t))))
    names = {t for op in ops for t in op.inputs + op.outputs + op.weights}
    return Graph(name, ops, tuple(graph.tensors[t] for t in sorted(names)), ins, outs, graph.batch)
