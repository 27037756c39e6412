"""A lower bound from the pieces every valid partition cuts the graph's single-reader trees into.

A tensor with one reader that the network does not return links its maker to that reader; these links form a
forest F (each op has one output, so at most one link out). A group meets an F tree in connected pieces; with
K pieces over T trees, K - T links are cut, each written by one group and read by another: 2 x its bytes. So:

* *Pieces.* A piece lies in a group of at most `fewest.most_ops` ops, so each tree has at least the fewest
  connected pieces of at most that many ops (the greedy of Kundu and Misra, "A Linear Tree Partitioning
  Algorithm", SIAM J. Comput. 6(1), 1977: bottom up, cut the heaviest child's piece while the op's piece is too
  large; `_fewest_pieces`). K >= their sum, and the K - T cut links move at least the K - T smallest 2 x bytes.
* *Leaf groups.* An op no link enters (a leaf of F) reads only tensors that are network inputs or read by several
  ops or returned. A piece of a group G is a subtree: its ops less one are each linked to a parent inside it, so
  |G| - k_G <= the links entering G's ops <= D x (|G| - l_G), with k_G its pieces, l_G its leaves, D the most
  links entering one op; so k_G >= D l_G - (D - 1) |G| >= D l_G - (D - 1) x `most_ops`. Over the h groups holding
  leaves, L leaves in all: K >= D L - (D - 1) x `most_ops` x h, so h >= (D L - K) / ((D - 1) `most_ops`), and
  h >= L / `most_ops`. Each such group reads at least one of its leaves' inputs from DRAM, but a group that makes
  them all: it holds a maker of one, which is not a leaf reading a network input; at most Q groups (the number of
  such makers) are spared. (A tree of 10,000 ReLUs of a conv's output summed by Adds: D = 2, and every group
  holding ReLUs but not the conv reads the conv's output, which the conv's group also pays for its input.)

Besides: each weight once, each returned tensor written once, a tensor read by more ops than its maker's group can
hold written once; the leaf groups' reads or, where more, each network input once and each wide tensor read by
every other group holding a reader (`fewest._fan_reads`). Every term counts distinct transfers (links, other
tensors' reads, other tensors' writes, weights), so their sum, least over K, bounds every valid partition from
below. The bound applies to graphs of plain ops (conv, depthwise conv, pool, element-wise) of one output each whose
tensors are all read or returned, as `fewest`'s does; elsewhere it is 0.
"""

from __future__ import annotations

from itertools import accumulate

from engine.fusion import crossing, fewest
from engine.graph import Graph


def pieces_bytes(graph: Graph, word_bits: int, most: int) -> int:
    """A lower bound on every valid partition's traffic from the pieces it cuts F into (module docstring), when no
    group holds more than `most` ops (`fewest.most_ops`); 0 where an op is not plain, has other than one output or no
    input, or makes a tensor nothing reads and no one returns."""
    if (not graph.ops or any(op.kind not in crossing.PLAIN or len(op.outputs) != 1 or not op.inputs
                             for op in graph.ops)
            or any(not graph.consumers(op.outputs[0]) and op.outputs[0] not in graph.returned for op in graph.ops)):
        return 0
    size = {t: graph.tensors[t].nbytes(word_bits) for op in graph.ops for t in op.inputs + op.outputs}
    links: dict[str, list[str]] = {op.name: [] for op in graph.ops}  # op -> the ops linked into it (its F children)
    link_bytes, shared = [], []  # 2 x the bytes of each link; the other tensors ops make
    for op in graph.ops:
        t = op.outputs[0]
        if graph.read_once(t):
            links[graph.consumers(t)[0]].append(op.name)
            link_bytes.append(2 * size[t])
        else:
            shared.append(t)
    roots, fan = len(shared), {t: fewest._fan_reads(len(graph.consumers(t)), most) for t in shared}
    total = -(-sum(graph.tensors[w].elements for w in {w for op in graph.ops for w in op.weights}) * word_bits // 8)
    total += sum(size[t] for t in shared if t in graph.returned or len(graph.consumers(t)) > most - 1)  # written
    each = (sum(size[t] for t in dict.fromkeys(graph.inputs) if t in size)  # each input an op reads, once
            + sum(size[t] * k for t, k in fan.items()))

    leaves = [op for op in graph.ops if not links[op.name]]
    read = dict.fromkeys(t for op in leaves for t in op.inputs)  # what leaves read: no link
    inputs = set(graph.inputs)
    spared = sum(1 for p in dict.fromkeys(graph.producer(t) for t in read)
                 if p is not None and (links[p] or not inputs.intersection(graph.op(p).inputs)))
    d, n_leaves, least = max(len(c) for c in links.values()), len(leaves), min(size[t] for t in read)
    floor_h = -(-n_leaves // most)
    cut = [0, *accumulate(sorted(link_bytes))]  # the least bytes of k cut links

    def bound(k: int) -> int:
        """The links' and the reads' least bytes with k pieces."""
        h = floor_h if d < 2 else max(floor_h, -(-(d * n_leaves - k) // ((d - 1) * most)))
        return cut[k - roots] + max(least * max(0, h - spared), each)

    start = roots + _cuts(graph, links, most)
    steps = range(floor_h, n_leaves + 1) if d >= 2 else range(0)  # where the leaf groups' least count drops
    return total + min(bound(k) for k in (start, *(d * n_leaves - j * (d - 1) * most for j in steps))
                       if start <= k <= len(graph.ops))


def _cuts(graph: Graph, links: dict[str, list[str]], most: int) -> int:
    """The fewest links cut to split F's trees into connected pieces of at most `most` ops (Kundu and Misra's
    greedy, exact for ops of weight one): bottom up in the graph's order, an op's piece is it and its children's,
    and while that is too large the largest child's piece is cut off."""
    piece: dict[str, int] = {}
    count = 0
    for op in graph.ops:
        kids = sorted((piece[c] for c in links[op.name]), reverse=True)
        held = 1 + sum(kids)
        for k in kids:
            if held <= most:
                break
            held, count = held - k, count + 1
        piece[op.name] = held
    return count
