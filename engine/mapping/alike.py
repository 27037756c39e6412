"""Groups that map alike: a group's mapping as a function of what it reads, so that repeated blocks map once.

A group's mapping (`plan.map_group`) reads its ops (kind, loop attributes, tensor shapes, weights) and its
`GroupCost`, and nothing else of the graph. `key` writes that down with every op and tensor name replaced by
the order it first appears in: two groups with equal keys get the same mapping up to their names, and `renamed`
gives one group's mapping the other's names. The residual blocks of a ResNet, a decoder's layers, the 50,000
identical Convs of a long chain are mapped once each (`plan.map_plan` keeps them in a bounded `Memo`).
"""

from __future__ import annotations

from dataclasses import replace

from engine.fusion.cost import GroupCost
from engine.graph import Graph


def key(graph: Graph, cost: GroupCost) -> tuple:
    """What mapping the group `cost` reads, its names replaced by their order of first appearance."""
    index: dict[str, int] = {}

    def at(name: str) -> int:
        return index.setdefault(name, len(index))

    reads = graph.weight_reads
    ops = []
    for name in cost.ops:
        op = graph.op(name)
        ops.append((at(name), op.kind, op.source_type, op.kernel, op.stride, op.padding, op.dilation, op.groups,
                    op.macs, tuple(kind for _, kind in op.merged),
                    tuple((at(t), graph.tensors[t].shape) for t in op.inputs),
                    tuple((at(t), graph.tensors[t].shape) for t in op.outputs),
                    tuple((at(w), graph.tensors[w].shape, reads[w]) for w in op.weights)))
    named = (tuple(at(t) for t in cost.inputs), tuple(at(t) for t in cost.outputs),
             tuple((at(op), rows) for op, rows in cost.tile_rows), tuple(at(op) for op in cost.isoa),
             tuple(at(t) for t in cost.streamed), tuple((at(op), keys) for op, keys in cost.key_tiles))
    return (tuple(ops), named, cost.dram_bytes, cost.fmap_in_bytes, cost.fmap_out_bytes, cost.param_bytes,
            cost.schedule, cost.footprint_bytes, cost.params_resident, cost.row_steps, cost.batch_tile,
            cost.subgroups, cost.input_passes)


def renamed(mapping, ops: tuple[str, ...]):
    """`mapping` (a `GroupMapping`) of a group with equal `key`, given the ops `ops` in place of its own."""
    if mapping.ops == ops:
        return mapping
    names = dict(zip(mapping.ops, ops))
    nests = tuple(replace(n, op=names[n.op], layer=n.layer if n.layer is None or n.layer.name != n.op
                          else replace(n.layer, name=names[n.op])) for n in mapping.nests)
    return replace(mapping, ops=ops, nests=nests)
