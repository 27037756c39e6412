"""Groups that map alike: a group's mapping as a function of what it reads, so that repeated blocks map once.

A group's mapping (`plan.map_group`) reads its ops (kind, loop attributes, tensor shapes, weights) and its
`GroupCost`, and nothing else of the graph. `key` writes that down with every op and tensor name replaced by
the order it first appears in: two groups with equal keys get the same mapping up to their names, and `renamed`
gives one group's mapping the other's names. The residual blocks of a ResNet, a decoder's layers, the 50,000
identical Convs of a long chain are mapped once each (`plan.map_plan` keeps them in a bounded `Memo`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine.fusion.cost import GroupCost
from engine.graph import Graph


def key(graph: Graph, cost: GroupCost) -> tuple:
    """What mapping the group `cost` reads, its names replaced by their order of first appearance."""
    at = _first_seen()
    ops = [op_key(graph, name, at) for name in cost.ops]
    named = (tuple(at(t) for t in cost.inputs), tuple(at(t) for t in cost.outputs),
             tuple((at(op), rows) for op, rows in cost.tile_rows), tuple(at(op) for op in cost.isoa),
             tuple(at(t) for t in cost.streamed), tuple((at(op), keys) for op, keys in cost.key_tiles))
    return (tuple(ops), named, cost.dram_bytes, cost.fmap_in_bytes, cost.fmap_out_bytes, cost.param_bytes,
            cost.schedule, cost.footprint_bytes, cost.params_resident, cost.row_steps, cost.batch_tile,
            cost.subgroups, cost.input_passes)


def op_key(graph: Graph, name: str, at: Callable[[str], int] | None = None) -> tuple:
    """What the mapping reads of the op `name` (kind, loop attributes, tensor shapes, weights), its own and its
    tensors' names replaced by `at` (by default their order of first appearance in this op)."""
    at = at or _first_seen()
    op, reads = graph.op(name), graph.weight_reads
    return (at(name), op.kind, op.source_type, op.kernel, op.stride, op.padding, op.dilation, op.groups,
            op.macs, tuple(kind for _, kind in op.merged),
            tuple((at(t), graph.tensors[t].shape) for t in op.inputs),
            tuple((at(t), graph.tensors[t].shape) for t in op.outputs),
            tuple((at(w), graph.tensors[w].shape, reads[w]) for w in op.weights))


def _first_seen() -> Callable[[str], int]:
    """Names to the order of their first appearance (0, 1, ...), by calls in that order."""
    index: dict[str, int] = {}
    return lambda name: index.setdefault(name, len(index))


def renamed_nest(nest, name: str):
    """`nest` (an `OpNest`) of an op with equal `op_key`, given the name `name` in place of its own."""
    if nest.op == name:
        return nest
    layer = nest.layer if nest.layer is None or nest.layer.name != nest.op else replace(nest.layer, name=name)
    return replace(nest, op=name, layer=layer)


def renamed(mapping, ops: tuple[str, ...]):
    """`mapping` (a `GroupMapping`) of a group with equal `key`, given the ops `ops` in place of its own."""
    if mapping.ops == ops:
        return mapping
    names = dict(zip(mapping.ops, ops))
    nests = tuple(renamed_nest(n, names[n.op]) for n in mapping.nests)
    return replace(mapping, ops=ops, nests=nests)
