"""Windowed plans of Add trees: the depth-first window order, groups joined across windows, the fewest-groups bound.

Small Add trees (`benchmarks.bench_size.fan_out_tree`) against the brute-force optimum: windowed plan >= optimum >=
bound; the depth-first order lists every subtree whole; joining never costs more than the windows' own groups.
"""

import pytest

import engine
from benchmarks.bench_size import chain, fan_out, fan_out_tree
from engine.fusion import crossing, dataflow, fewest, join, windowed
from engine.fusion.cost import Capacity
from engine.fusion.model import tensor_views
from tests.test_fusion_search import CASES, brute_force, solved_case

ACC = engine.Accelerator.preset("optimus")


def _subtree(graph, op):
    """The ops of the subtree of Adds and ReLUs under `op` (the conv excluded)."""
    found, todo = set(), [op]
    while todo:
        name = todo.pop()
        found.add(name)
        todo += [p for t in graph.op(name).inputs if (p := graph.producer(t)) is not None and p != "conv"]
    return found


def test_the_depth_first_order_lists_every_subtree_whole_and_is_topological():
    graph = fan_out_tree(100)
    ordered = windowed.depth_first(graph, whole=len(graph.ops))
    assert sorted(op.name for op in ordered.ops) == sorted(op.name for op in graph.ops)
    place = ordered.position
    assert all(place[graph.producer(t)] < place[op.name] for op in ordered.ops for t in op.inputs
               if graph.producer(t) is not None)
    for op in ordered.ops:
        spots = sorted(place[name] for name in _subtree(graph, op.name))
        assert spots == list(range(spots[0], spots[0] + len(spots))), op.name  # one range, ending at the op
        assert spots[-1] == place[op.name]
    # the graph's own order lists all 100 ReLUs first: a window of it holds no subtree
    assert [op.name for op in graph.ops[1:101]] == [f"relu{k}" for k in range(100)]


def test_the_depth_first_order_lists_the_ops_above_subtrees_too_large_for_a_group_last():
    """A tree of 100 ReLUs, groups of at most 15 ops: its subtrees of 8 ReLUs (15 ops) come whole, in post-order,
    then the Adds over them; the order is topological."""
    graph = fan_out_tree(100)
    ordered = windowed.depth_first(graph, whole=15)
    size, place = windowed.subtree_sizes(graph), ordered.position
    assert sorted(op.name for op in ordered.ops) == sorted(op.name for op in graph.ops)
    assert all(place[graph.producer(t)] < place[op.name] for op in ordered.ops for t in op.inputs
               if graph.producer(t) is not None)
    late = [size[op.name] > 15 for op in ordered.ops]
    first_late = late.index(True)
    assert not any(late[:first_late]) and all(late[first_late:])
    assert len(ordered.ops) - first_late == 12  # the Adds joining 13 whole subtrees: 12 of 8 ReLUs, 1 of 4
    for op in ordered.ops[:first_late]:
        spots = sorted(place[name] for name in _subtree(graph, op.name))
        assert spots == list(range(place[op.name] + 1 - len(spots), place[op.name] + 1)), op.name
    assert sorted(size.values())[-1] == len(graph.ops) - 1  # the root's subtree: every op but the conv
    assert windowed.depth_first(graph, whole=len(graph.ops)).ops[-1].name == graph.ops[-1].name


def test_a_tree_of_3000_relus_is_planned_as_whole_subtrees_and_the_adds_above_them_together():
    """At 128 KB a group holds a subtree of 1,024 ReLUs (2,047 ops) but not with the conv. The plan: the conv alone
    (input 512 B and weights 288 B read, its output written: 1,312 B); two whole subtrees of 1,024 (the conv's
    output read, the sum written: 1,024 B each); the last 952 ReLUs' subtree with the two Adds above all (the conv's
    output and two sums read, the network's output written: 2,048 B). The join made the conv's group the conv with
    512 ReLUs' subtree and the other 512 with the Add over both (1,824 + 1,536 B); `join.recut` cuts that pair again
    after the conv, where only the conv's output crosses. Before the Adds came last, 5 groups moved 7,968 B."""
    graph = fan_out_tree(3000)
    plan = engine.fuse(graph, ACC)
    size = windowed.subtree_sizes(graph)
    assert plan.status == "windowed" and plan.dram_bytes == 1312 + 1024 + 1024 + 2048 == 5408
    assert plan.dram_bytes == sum(engine.fusion.group_cost(graph, g, ACC).dram_bytes for g in plan.groups)
    tops = [[n for n in g if not any(r in g for t in graph.op(n).outputs for r in graph.consumers(t))]
            for g in plan.groups]
    assert all(len(t) == 1 for t in tops)
    assert [(len(g), size[t[0]]) for g, t in zip(plan.groups, tops)] == [
        (1, 1), (2047, 2047), (2047, 2047), (1905, len(graph.ops) - 1)]


def test_recutting_a_pair_of_groups_moves_the_conv_out_of_a_half_subtree_and_never_costs_more():
    graph = fan_out_tree(3000)
    plan = engine.fuse(graph, ACC)
    cap = Capacity.of(ACC)
    conv_half = engine.fusion.group_cost(graph, ["conv", *plan.groups[1][:1023]], ACC)  # the join's groups
    rest = engine.fusion.group_cost(graph, plan.groups[1][1023:], ACC)
    assert (conv_half.dram_bytes, rest.dram_bytes) == (1824, 1536)
    again = join.recut(graph, (conv_half, rest), ACC, cap)
    assert [c.ops for c in again] == [("conv",), plan.groups[1]] and sum(c.dram_bytes for c in again) == 2336
    assert join.recut(graph, again, ACC, cap) == again  # nothing narrower to cut: as it was
    whole = engine.fusion.group_cost(graph, plan.groups[1], ACC)
    assert join.recut(graph, (whole, plan.costs[2]), ACC, cap) == (whole, plan.costs[2])


def test_windows_follow_the_depth_first_order_where_fewer_bytes_cross_and_the_graphs_own_on_a_chain():
    tree = fan_out_tree(3000)
    assert windowed.plan_order(tree, 16, whole=2048).ops == windowed.depth_first(tree, whole=2048).ops
    line = chain(3000)
    assert windowed.plan_order(line, 16, whole=2048) is line  # the same order either way: the graph's own
    # each window of the tree's order is at most two whole subtrees (and the conv): cut where few sums are pending
    ordered = windowed.plan_order(tree, 16, whole=2048)
    for lo, hi in windowed.cuts(ordered, 16, max_ops=windowed.WINDOW_OPS):
        inside = {op.name for op in ordered.ops[lo:hi]}
        tops = [name for name in inside if not any(r in inside for t in ordered.op(name).outputs
                                                    for r in ordered.consumers(t))]
        assert len(tops) <= 2 and set().union(*(_subtree(ordered, t) for t in tops)) >= inside - {"conv"}


@pytest.mark.parametrize("readers,buffer", [(4, 64), (4, 128), (4, 256), (5, 128), (6, 256)])
def test_a_windowed_add_tree_plan_is_above_the_optimum_and_its_bound_below(readers, buffer, monkeypatch):
    """Windows of 2-3 ops: plan (groups joined across them) >= brute-force optimum >= bound (with the fewest-groups
    term), and the plan costs what the whole graph's cost model says."""
    graph = fan_out_tree(readers)
    acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
    best = brute_force(graph, acc)
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 1)
    for width in (2, 3):
        monkeypatch.setattr(windowed, "WINDOW_OPS", width)
        plan = engine.fuse(graph, acc)
        assert plan.status == "windowed"
        assert plan.dram_bytes == sum(engine.fusion.group_cost(graph, g, acc).dram_bytes for g in plan.groups)
        assert sorted(op for g in plan.groups for op in g) == sorted(op.name for op in graph.ops)
        assert plan.lower_bound_bytes <= best <= plan.dram_bytes


def test_joining_never_costs_more_than_the_windows_groups_and_joins_a_trees_windows(monkeypatch):
    graph = fan_out_tree(300)
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 100)
    monkeypatch.setattr(windowed, "WINDOW_OPS", 40)
    joined = engine.fuse(graph, ACC)
    monkeypatch.setattr(join, "joined", lambda graph, costs, acc, cap, most_ops: costs)
    apart = engine.fuse(graph, ACC)
    assert joined.dram_bytes < apart.dram_bytes and len(joined.groups) < len(apart.groups)
    assert joined.dram_bytes == sum(engine.fusion.group_cost(graph, g, ACC).dram_bytes for g in joined.groups)
    # 600 ops fit one group at 128 KB (a row of 32 elements each): conv, ReLUs and Adds run together
    assert joined.dram_bytes == engine.fusion.group_cost(graph, [op.name for op in graph.ops], ACC).dram_bytes


def test_the_fewest_groups_of_a_tree_of_10000_relus_and_what_they_move():
    """At 128 KB (65,536 fmap elements) a group holds at most 2,048 ops of a row of 4 channels x 8 columns each:
    20,000 ops need 10 groups. Each writes a 512 B tensor (ten writes); the conv's output, read by 10,000 ReLUs of
    which its own group holds at most 2,047, is read by at least 4 other groups, and 10 - 1 returned - 1 = 8
    other tensors are read back; plus the input (512 B) and the conv's weights (4 x 4 x 3 x 3 x 2 B = 288 B)."""
    graph, tp, cap = fan_out_tree(10_000), dataflow.of(ACC), Capacity.of(ACC)
    views = tensor_views(graph)
    assert cap.fmap == 65_536 and fewest.most_ops(graph, ACC.word_bits, tp, cap.fmap, views) == 2048
    assert fewest.fewest_groups_bytes(graph, ACC.word_bits, 2048) == 512 + 288 + 10 * 512 + (4 + 8) * 512


@pytest.mark.parametrize("seed,n_ops,buffer", CASES)
def test_the_fewest_groups_bound_never_passes_the_brute_force_optimum(seed, n_ops, buffer):
    graph, acc, expect = solved_case(seed, n_ops, buffer)
    if expect is None:
        return
    most = fewest.most_ops(graph, acc.word_bits, dataflow.of(acc), Capacity.of(acc).fmap, tensor_views(graph))
    got = fewest.fewest_groups_bytes(graph, acc.word_bits, most)
    assert got <= expect
    assert (got == 0) == any(op.kind not in crossing.PLAIN for op in graph.ops)


@pytest.mark.parametrize("readers,most,reads", [(2047, 2048, 0), (2048, 2048, 1), (10_000, 2048, 4),
                                                (4096, 2048, 2), (5, 1, 5)])
def test_a_wide_tensor_is_read_by_every_group_holding_a_reader_but_its_maker(readers, most, reads):
    assert fewest._fan_reads(readers, most) == reads


def test_recut_tries_no_cut_that_puts_an_op_running_alone_beside_others():
    """The Sum of 3,000 ReLUs holds a row of each input (3,000 x 32 elements, past the 65,536 of 128 KB): it runs
    alone in every partition, so a pair of groups ending with it is left as it is (pricing the ReLUs with it cost
    `fuse` 8 CPU s of 13 on a fan of 10,000)."""
    graph, cap = fan_out(3000), Capacity.of(ACC)
    names = [op.name for op in graph.ops]
    alone = crossing.lone(graph, ACC.word_bits, dataflow.of(ACC), cap.fmap, tensor_views(graph))
    assert [n for n in names if alone(n)] == ["sum"]
    relus = engine.fusion.group_cost(graph, [f"relu{k}" for k in range(2000, 3000)], ACC)
    total = engine.fusion.group_cost(graph, ["sum"], ACC)
    assert join.recut(graph, (relus, total), ACC, cap) == (relus, total)
