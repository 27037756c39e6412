"""The bound from the pieces a partition cuts the single-reader trees into (`engine.fusion.pieces`).

Against the brute-force optimum on small Add trees of ReLUs (balanced and random, with unary ops between) and on the
random DAGs of `tests.test_fusion_search`: optimum >= bound; the fewest pieces against every way of cutting a tree.
"""

import itertools
import random

import pytest

import engine
from benchmarks.bench_size import fan_out_tree
from engine.fusion import crossing, dataflow, fewest, pieces
from engine.fusion.cost import Capacity
from engine.fusion.model import tensor_views
from engine.graph import OpKind
from engine.zoo._builder import Net
from tests.test_fusion_search import CASES, brute_force, solved_case

ACC = engine.Accelerator.preset("optimus")


def _most(graph, acc) -> int:
    return fewest.most_ops(graph, acc.word_bits, dataflow.of(acc), Capacity.of(acc).fmap, tensor_views(graph))


def _bound(graph, acc) -> int:
    return pieces.pieces_bytes(graph, acc.word_bits, _most(graph, acc))


def random_tree(seed: int, leaves: int):
    """A conv whose output `leaves` ReLUs read, summed by Adds of randomly chosen pairs, with a ReLU now and then
    on a partial sum (an op of one link in)."""
    rng = random.Random(seed)
    net = Net(f"tree{seed}", 1)
    x = net.conv(net.input((4, 4, 4), "x"), "conv", 4, 3, padding=1)
    pending = [net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 4, 4, 4),))[0] for k in range(leaves)]
    while len(pending) > 1:
        a, b = sorted(rng.sample(range(len(pending)), 2), reverse=True)
        pair = (pending.pop(a), pending.pop(b))
        pending.append(net.eltwise(pair, f"add{len(net.ops)}"))
        if rng.random() < 0.3:
            pending[-1] = net.add_op(f"act{len(net.ops)}", OpKind.ELTWISE, "Relu", (pending[-1],), ((1, 4, 4, 4),))[0]
    return net.graph()


def test_a_tree_of_10000_relus_cuts_ten_pieces_and_ten_groups_read_the_convs_output_or_input():
    """At 128 KB a group holds at most 2,048 ops. The tree of 19,999 ReLUs and Adds splits into at least 10 pieces
    (9 whole subtrees of 1,024 ReLUs, 2,047 ops, each cut from the Add above it; the Adds above them with the last
    784 ReLUs), the conv into 1: 11 pieces over 2 trees, 9 links cut (9 x 2 x 512 B). 10,001 leaves (the ReLUs and
    the conv), at most 1,024 + pieces / 2 in a group: 10 groups hold leaves, and none is spared a read (the conv's
    group reads its input). Plus the weights (288 B), the sum returned and the conv's output written (512 B each)."""
    graph, tp, cap = fan_out_tree(10_000), dataflow.of(ACC), Capacity.of(ACC)
    views = tensor_views(graph)
    assert fewest.most_ops(graph, ACC.word_bits, tp, cap.fmap, views) == 2048
    assert pieces.pieces_bytes(graph, ACC.word_bits, 2048) == 288 + 2 * 512 + 9 * 1024 + 10 * 512
    assert _bound(graph, ACC) == 15_648 > fewest.fewest_groups_bytes(graph, ACC.word_bits, 2048)


def _piece_sizes(graph, kept) -> list[int]:
    """The ops of each connected piece of the graph's ops joined by the links `kept` (union-find)."""
    root = {op.name: op.name for op in graph.ops}

    def find(a):
        while root[a] != a:
            a = root[a]
        return a

    for a, b in kept:
        root[find(a)] = find(b)
    sizes: dict[str, int] = {}
    for op in graph.ops:
        sizes[find(op.name)] = sizes.get(find(op.name), 0) + 1
    return list(sizes.values())


@pytest.mark.parametrize("seed", range(40))
def test_the_fewest_pieces_are_the_fewest_of_every_way_to_cut_a_tree(seed):
    graph = random_tree(seed, 3 + seed % 5)
    links = {op.name: [] for op in graph.ops}
    edges = []
    for op in graph.ops:
        readers = graph.consumers(op.outputs[0])
        if len(readers) == 1 and op.outputs[0] not in graph.returned:
            links[readers[0]].append(op.name)
            edges.append((op.name, readers[0]))
    most = 1 + seed % 6
    best = None
    for cut in itertools.product((False, True), repeat=len(edges)):
        sizes = _piece_sizes(graph, [e for e, gone in zip(edges, cut) if not gone])
        if max(sizes) <= most and (best is None or sum(cut) < best):
            best = sum(cut)
    assert pieces._cuts(graph, links, most) == best


@pytest.mark.parametrize("readers,buffer", [(4, 64), (4, 128), (5, 64), (5, 128), (6, 128), (6, 256)])
def test_the_bound_of_a_balanced_add_tree_never_passes_the_brute_force_optimum(readers, buffer):
    graph = fan_out_tree(readers)
    acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
    assert 0 < _bound(graph, acc) <= brute_force(graph, acc)


TREES = [(seed, 3 + seed % 3, (48, 64, 96, 128, 192)[seed % 5]) for seed in range(20)]


@pytest.mark.parametrize("seed,leaves,buffer", TREES)
def test_the_bound_of_a_random_add_tree_never_passes_the_brute_force_optimum(seed, leaves, buffer):
    graph = random_tree(seed, leaves)
    acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
    best = brute_force(graph, acc)
    if best is None:
        return
    assert 0 < _bound(graph, acc) <= best


def test_the_bound_is_above_the_fewest_groups_on_some_random_trees_and_the_optimum_where_one_group_fits():
    """Not vacuous: above the fewest groups' bound on some small trees; where the whole tree fits one group (1 KB),
    the optimum (its input, the conv's weights and the sum: 544 B)."""
    above = 0
    for seed, leaves, buffer in TREES:
        graph = random_tree(seed, leaves)
        acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
        above += _bound(graph, acc) > fewest.fewest_groups_bytes(graph, acc.word_bits, _most(graph, acc))
    assert above >= 5
    for seed in range(3):
        graph, acc = random_tree(seed, 4), ACC.with_buffer(1024).with_pe_array(4, 4)
        assert _bound(graph, acc) == brute_force(graph, acc) == 128 + 288 + 128


@pytest.mark.parametrize("seed,n_ops,buffer", CASES)
def test_the_bound_of_a_random_dag_never_passes_the_brute_force_optimum(seed, n_ops, buffer):
    graph, acc, expect = solved_case(seed, n_ops, buffer)
    if expect is None:
        return
    got = _bound(graph, acc)
    assert got <= expect
    if any(op.kind not in crossing.PLAIN for op in graph.ops):
        assert got == 0


def test_a_network_input_no_op_reads_is_not_counted():
    """A graph may declare an input no op reads (`z`); the bound counts what is read (x, 128 B) and written (y)."""
    from engine.graph import Graph, Op, Tensor

    graph = Graph.build("unread", [Op("r", OpKind.ELTWISE, ("x",), ("y",))],
                        [Tensor(t, (1, 4, 4, 4)) for t in ("x", "z", "y")], ("x", "z"), ("y",))
    acc = ACC.with_buffer(1024).with_pe_array(4, 4)
    assert _bound(graph, acc) == brute_force(graph, acc) == 128 + 128
    # the fewest groups' bound too (it counted z as read: 384 B, above the optimum)
    assert fewest.fewest_groups_bytes(graph, acc.word_bits, _most(graph, acc)) == 256
