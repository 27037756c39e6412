"""A lower bound from how many groups every valid partition needs, for graphs the windows' bound sees little of.

Every member of a group of more than one op holds, in Eq. 4's finest tiles, rows of its own output at
min(T_c, C) channels, at least min(T_h, H) of them (`crossing.own_footprint`, the same rows the crossing term
reads), so no such group holds more ops than the smallest own tiles that fit the fmap buffer together: at most
`most_ops` ops, and every valid partition has at least n / `most_ops` groups. On a graph of plain ops (conv,
depthwise conv, pool, element-wise: none folds away or streams) each group then moves at least:

* one write: a member no other member reads makes a tensor another group reads or the network returns;
* one read back: such a tensor, unless the network returns it, is read by another group (at most one group per
  returned tensor writes only returned tensors).

And a tensor read by more ops than the group making it can hold beside its maker is read by every other group
holding a reader, at least (readers - (`most_ops` - 1)) / `most_ops` of them (`_fan_reads`). The reads counted
are of distinct tensors or by distinct groups, the writes of distinct tensors; with each network input read once
and each weight loaded once, that is a lower bound on every valid partition (a tree of Adds summing 10,000 ReLUs
of one tensor needs 10 groups of at most 2,048 ops: every group writes a sum, and the ReLUs' input is read by
at least 4 groups and the sums by 8 more).
"""

from __future__ import annotations

from engine.fusion import crossing
from engine.fusion.dataflow import Throughput
from engine.graph import Graph


def most_ops(graph: Graph, word_bits: int, tp: Throughput, fmap: int, views) -> int:
    """The most ops a group of more than one op can hold on `fmap` elements: the smallest own tiles that fit."""
    row = crossing.rows_of(graph, word_bits, tp.t_c, views)
    tiles = sorted(crossing.own_footprint(op, row, tp.t_h) for op in graph.ops)
    held, room = 0, fmap
    for tile in tiles:
        if tile > room:
            break
        held, room = held + 1, room - tile
    return max(1, held)


def fewest_groups_bytes(graph: Graph, word_bits: int, most: int) -> int:
    """A lower bound on every valid partition's traffic from its fewest groups (module docstring), when no group holds
    more than `most` ops (`most_ops`); 0 where an op is not plain or makes a tensor nothing reads and the network does
    not return."""
    made = [t for op in graph.ops for t in op.outputs]
    if (not graph.ops or any(op.kind not in crossing.PLAIN for op in graph.ops)
            or any(not graph.consumers(t) and t not in graph.returned for t in made)):
        return 0
    groups = -(-len(graph.ops) // most)
    size = {t: graph.tensors[t].nbytes(word_bits) for t in made}
    weights = {w for op in graph.ops for w in op.weights}
    total = sum(graph.tensors[t].nbytes(word_bits) for t in dict.fromkeys(graph.inputs) if graph.consumers(t))
    total += -(-sum(graph.tensors[w].elements for w in weights) * word_bits // 8)
    total += groups * min(size.values())
    fans = {t: _fan_reads(len(graph.consumers(t)), most) for t in made}
    total += sum(size[t] * k for t, k in fans.items())
    others = [size[t] for t in made if graph.consumers(t) and not fans[t]]  # read back, not yet counted
    short = groups - len(graph.returned) - sum(1 for k in fans.values() if k)  # read-back tensors still owed
    if others and short > 0:
        total += short * min(others)
    return total


def _fan_reads(readers: int, most: int) -> int:
    """Groups that must read a tensor of `readers` readers from DRAM when a group holds at most `most` ops: those
    holding a reader but not its maker (which holds at most `most` - 1 readers beside itself)."""
    return max(0, -(-(readers - (most - 1)) // most))
