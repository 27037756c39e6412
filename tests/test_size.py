"""Size stress: long chains, wide fan-outs and joins, huge dims give a plan or an EngineError, never another exception.

Small versions of the cases `benchmarks/bench_size.py` times (each here runs in a second or two); the benchmark
holds the curve of time and memory against ops, these hold the behaviour.
"""

import pytest

import engine
from benchmarks.bench_size import chain, concat, fan_out, fan_out_tree, wide_depthwise
from engine.fusion import bound, fewest, optimus, subgraph, windowed
from engine.fusion.cost import least_bytes, model_of

ACC = engine.Accelerator.preset("optimus")


def _costs_add_up(graph, plan):
    return plan.dram_bytes == sum(engine.fusion.group_cost(graph, g, ACC).dram_bytes for g in plan.groups)


@pytest.fixture
def small_windows(monkeypatch):
    """Windowed fusion from 100 ops on, in windows of at most 40: the benchmark's regime at a test's size."""
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 100)
    monkeypatch.setattr(windowed, "WINDOW_OPS", 40)


@pytest.mark.parametrize("graph", [chain(300), fan_out(60), concat(300), wide_depthwise(2**24)],
                         ids=lambda g: g.name)
def test_big_shapes_give_a_plan_for_every_method(graph, small_windows):
    """The chain and the Concat fused in windows (Efficient-S on the whole of either: 11 CPU s, all within its
    work limit); the fan and the depthwise Conv whole."""
    for method in ("dnnvm", "efficient_s", "optimus"):
        plan = engine.fuse(graph, ACC, method=method)
        assert plan.status in ("optimal", "restricted", "beam", "windowed") and _costs_add_up(graph, plan)
        assert sorted(op for g in plan.groups for op in g) == sorted(op.name for op in graph.ops)


def test_a_tensor_past_the_cost_models_integers_is_an_engine_error_not_a_wrong_plan():
    with pytest.raises(engine.EngineError, match="tensor 'x' of shape \\[1, 4, 6, 2147483648\\] is too large to cost"):
        engine.fuse(wide_depthwise(2**31), ACC, method="dnnvm")


def test_evaluate_on_a_wide_fan_out_returns_every_plan():
    report = engine.evaluate(fan_out(60), ACC, methods=("dnnvm", "efficient_s", "optimus"))
    assert set(report.plans) == {"dnnvm", "efficient_s", "optimus"} and not report.errors


@pytest.mark.parametrize("graph", [chain(300), fan_out(150), concat(240)], ids=lambda g: g.name)
def test_a_graph_past_the_window_limit_gets_a_valid_plan_within_its_proven_gap(graph, small_windows, monkeypatch):
    """Windowed: every op in one group, costs as the whole graph's cost model says, and bound <= optimum <= plan."""
    plan = engine.fuse(graph, ACC)
    assert plan.status == "windowed" and _costs_add_up(graph, plan)
    assert sorted(op for g in plan.groups for op in g) == sorted(op.name for op in graph.ops)
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 10_000)
    best = engine.fuse(graph, ACC)  # the whole search: exact on these
    assert best.status == "optimal"
    assert 0 < plan.lower_bound_bytes <= best.dram_bytes <= plan.dram_bytes and plan.gap >= 0


def test_windows_cut_where_least_crosses_and_every_window_is_a_range(small_windows):
    graph = fan_out(150)  # the fan's readers and the conv: the Sum's inputs pile up until the last window
    found = windowed.cuts(graph, ACC.word_bits, max_ops=40)
    assert found[0][0] == 0 and found[-1][1] == len(graph.ops) and all(a[1] == b[0] for a, b in zip(found, found[1:]))
    assert all(20 <= hi - lo <= 40 for lo, hi in found[:-1]) and found[-1][1] - found[-1][0] <= 40
    cross = subgraph.crossings(graph, ACC.word_bits)
    x = graph.tensors[graph.ops[0].outputs[0]].nbytes(ACC.word_bits)
    assert cross[1] == x and cross[41] == x + 40 * x  # the conv's output, then 40 Relu outputs besides it
    for lo, hi in found[:-1]:
        assert cross[hi] == min(cross[c] for c in range(lo + 20, lo + 41))
    # by steps of several ops (a plan's groups): the conv with 9 Relus, groups of 10 Relus, the Sum with the last 11
    steps = [min(i // 10, 15) for i in range(len(graph.ops))]
    assert subgraph.crossings(graph, ACC.word_bits, steps) == [
        sum(t.nbytes(ACC.word_bits) for t in graph.tensors.values() if not t.is_weight and any(
            steps[graph.position[r]] >= b for r in graph.consumers(t.name))
            and (graph.producer(t.name) is None or steps[graph.position[graph.producer(t.name)]] < b))
        for b in range(17)]


def test_a_windowed_transformer_costs_as_the_whole_graph_says(small_windows):
    """Cuts avoid layout ops and attention's matmuls, so each group costs in its window what it does in the graph."""
    graph = engine.load_network("transformer")
    for method in ("optimus", "dnnvm", "efficient_s"):
        plan = engine.fuse(graph, ACC, method=method)
        assert _costs_add_up(graph, plan), method
    assert plan.status in ("restricted", "beam")


def test_efficient_s_shares_its_work_among_the_windows_and_says_when_it_stopped(small_windows, monkeypatch):
    from engine.fusion import efficient_s

    monkeypatch.setattr(efficient_s, "WINDOWED_WORK", 300)
    plan = engine.fuse(chain(300), ACC, method="efficient_s")
    assert plan.status == "beam" and _costs_add_up(chain(300), plan)


def test_a_bound_window_of_ops_that_share_no_tensor_is_their_once_loaded_bytes(small_windows):
    """The shortcut for apart ops is never above the search it replaces (a proven bound stays proven)."""
    from engine.fusion.cost import Capacity

    model = model_of(concat(12), ACC)
    cap = Capacity.of(ACC)
    assert bound._unlinked(model, 0, 12) and not bound._unlinked(model, 0, 13)
    sub = bound.window_model(model, 0, 12)
    searched = optimus.chain_search(sub, cap, limits=bound.EXACT, bound_only=True).total
    assert sum(least_bytes(sub, 1 << i) for i in range(12)) == searched  # each ReLU's input and output, once


def test_window_crossings_match_their_definition_and_long_graphs_get_windows_greedily(monkeypatch):
    model = model_of(engine.load_network("googlenet"), ACC)
    for cut, got in enumerate(bound._crossings(model)):  # made before op `cut`, read from it on
        later = ~((1 << cut) - 1)
        assert got == sum(model.tbytes[j] for j, p in enumerate(model.producer)
                          if 0 <= p < cut and model.consumer_mask[j] & later)
    monkeypatch.setattr(bound, "PLACE_DP_OPS", 10)
    cuts = bound._place(model, 50)
    assert cuts[0][0] == 0 and cuts[-1][1] == model.n and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(hi == bound._ends(model, lo, 50)[-1] for lo, hi in cuts)  # each window as long as the budget allows


def test_band_sizes_are_the_distinct_ceiling_quotients_without_visiting_every_column():
    from engine.fusion.cost import ceil_quotients

    for n in (1, 2, 3, 7, 97, 1000, 4099):
        for first in (1, 2):
            assert ceil_quotients(n, first) == sorted({-(-n // j) for j in range(first, n + 1)}, reverse=True)
    assert len(ceil_quotients(2**31, 2)) < 2 * 2**16  # 2 sqrt(n) values, found one per value


def test_a_search_that_runs_out_of_memory_is_an_engine_error(monkeypatch):
    def exhausted(at):
        raise MemoryError

    monkeypatch.setitem(engine.fusion.METHODS, "dnnvm", (exhausted, "restricted"))
    with pytest.raises(engine.EngineError, match="graph 'chain_20' \\(20 ops\\) needs more memory .* method 'dnnvm'"):
        engine.fuse(chain(20), ACC, method="dnnvm")


@pytest.mark.parametrize("name", ["inception_v3", "transformer"])
def test_the_limits_tables_read_window_by_window_are_the_whole_graphs(name, small_windows, monkeypatch):
    """Past the window limit each op's ski-slope, compulsory bytes and reload inputs come from its window's model:
    the same as from one model of the whole graph (no weight here is shared across windows)."""
    from engine.limit import ops

    graph = engine.load_network(name)
    assert len(graph.ops) > windowed.WINDOW_ABOVE
    ops.tables.cache_clear()
    windowed_tables = ops.tables(graph, ACC.word_bits)
    ops.tables.cache_clear()
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 10_000)
    assert ops.tables(graph, ACC.word_bits) == windowed_tables
    ops.tables.cache_clear()


def test_evaluate_past_the_window_limit_shares_window_models_and_never_goes_below_its_limit(small_windows):
    """One model per window serves every method: the plans are those `fuse` gives each method alone; the limit is
    the per-op bound (no model of the whole graph), below every plan."""
    graph = chain(300)
    report = engine.evaluate(graph, ACC)
    assert not report.errors and report.limit.fused_kind == "valid"
    for method, plan in report.plans.items():
        alone = engine.fuse(graph, ACC, method=method)
        assert plan.groups == alone.groups and plan.dram_bytes == alone.dram_bytes and _costs_add_up(graph, plan)
        assert plan.dram_bytes >= report.limit.fused_bytes > 0
    assert report.plans["optimus"].status == "windowed" and report.plans["optimus"].gap >= 0
    assert report.mappings["dnnvm"].dram_bytes >= report.limit.fused_bytes


@pytest.mark.parametrize("name", ["resnet18", "transformer"])
def test_a_plans_groups_that_map_alike_get_the_mapping_each_would_get_alone(name):
    """`map_plan` maps each distinct group once (`engine.mapping.alike`): every group's mapping is what mapping it
    on its own gives, names included."""
    from engine.blocking.hierarchy import Hierarchy
    from engine.mapping import alike
    from engine.mapping.plan import map_group, map_plan

    graph = engine.load_network(name)
    hierarchy = Hierarchy.from_accelerator(ACC)
    for method in ("none", "optimus"):
        plan = engine.fuse(graph, ACC, method=method)
        mapped = map_plan(graph, plan, ACC)
        assert mapped.groups == tuple(map_group(graph, cost, ACC, hierarchy) for cost in plan.costs)
    assert len({alike.key(graph, cost) for cost in plan.costs}) < len(plan.costs)  # some groups did map alike


@pytest.mark.parametrize("readers,buffer", [(5, 128), (6, 128), (6, 256), (6, 1024)])
def test_the_windowed_bound_with_crossing_tensors_charged_stays_below_the_brute_force_optimum(readers, buffer):
    """`crossing`: the fan's outputs crossing to the Sum are charged unless the Sum's least footprint fits (a row
    of each input and of its output), and the bound, for plan windows of 1-3 ops, never passes the brute-force
    optimum (nor charges where everything fits, at 1 KB)."""
    from engine.fusion import crossing, dataflow
    from engine.fusion.cost import Capacity
    from engine.fusion.model import tensor_views
    from tests.test_fusion_search import brute_force

    graph = fan_out(readers)
    acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
    best, cap = brute_force(graph, acc), Capacity.of(acc)
    most = fewest.most_ops(graph, acc.word_bits, dataflow.of(acc), cap.fmap, tensor_views(graph))
    charged = []
    for width in (1, 2, 3):
        windows = tuple((lo, min(lo + width, len(graph.ops))) for lo in range(0, len(graph.ops), width))
        assert windowed.lower_bound_bytes(graph, acc, cap, windows, most) <= best
        charged.append(crossing.crossing_bytes(graph, acc.word_bits, dataflow.of(acc), cap.fmap, windows, tensor_views(graph)))
    # a row of 4 channels x 8 columns per input and for the Sum's output: (readers + 1) x 32 elements, past the
    # 64 and 128 of 128 B and 256 B (each output written and read back), within the 512 of 1 KB (nothing charged)
    alone = (readers + 1) * 32 > buffer // 2
    assert charged[0] == (readers * 2 * 512 if alone else 0) and dataflow.of(acc).t_c == 4


@pytest.mark.parametrize("build,ops,buffer,optimum", [  # optimum: `brute_force`'s, each regenerated by it
    (concat, 6, 32, 768), (concat, 6, 48, 768), (concat, 6, 128, 384),
    (fan_out_tree, 4, 64, 17664), (fan_out_tree, 4, 128, 12416), (fan_out_tree, 4, 256, 6208)])
def test_the_windowed_bound_of_joins_and_add_trees_stays_below_the_brute_force_optimum(build, ops, buffer, optimum):
    """A Concat (or an Add) whose least footprint, a row of each input and of its own output, passes the buffer runs
    alone in every partition: each input crossing to it from an earlier window is written and read back. The bound
    never passes the brute-force optimum; on the Concat of 6 at 32 B (6 rows of 4 elements past 16) it is the
    optimum for every window width (384 B before: the ReLUs' outputs given away), and at 48 B, where 6 rows fit,
    nothing is charged."""
    from engine.fusion import crossing, dataflow
    from engine.fusion.cost import Capacity
    from engine.fusion.model import tensor_views
    from tests.test_fusion_search import brute_force

    graph = build(ops)
    acc = ACC.with_buffer(buffer).with_pe_array(4, 4)
    cap = Capacity.of(acc)
    most = fewest.most_ops(graph, acc.word_bits, dataflow.of(acc), cap.fmap, tensor_views(graph))
    assert brute_force(graph, acc) == optimum
    for width in (1, 2, 3):
        windows = tuple((lo, min(lo + width, len(graph.ops))) for lo in range(0, len(graph.ops), width))
        found = windowed.lower_bound_bytes(graph, acc, cap, windows, most)
        assert found <= optimum
        charged = crossing.crossing_bytes(graph, acc.word_bits, dataflow.of(acc), cap.fmap, windows,
                                          tensor_views(graph))
        if build is concat:
            assert (found, charged) == ((768, 384) if buffer == 32 else (384, 0))


def test_a_wide_fans_windowed_gap_is_what_its_sum_cannot_keep_on_chip(small_windows, monkeypatch):
    """400 readers at 4 KB: the Sum's tiles would hold a row of each of its 400 inputs, past the buffer, so it runs
    alone and every output crossing to its window moves 1 KB (gap 99 % before the crossing tensors were charged,
    22 % while the Sum was thought to keep 64 of them); bound <= exact optimum <= plan."""
    graph, acc = fan_out(400), ACC.with_buffer(4096)
    plan = engine.fuse(graph, acc)
    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 10_000)
    best = engine.fuse(graph, acc)
    assert best.status == "optimal" and plan.lower_bound_bytes <= best.dram_bytes <= plan.dram_bytes
    assert plan.gap < 0.07 and plan.lower_bound_bytes > (400 - 40) * 1024


def test_partition_of_a_wide_fan_and_a_long_chain_keeps_the_papers_parts():
    """The post-prune's parts, found without rebuilding the contraction per lone op (a fan of 10,000: 107 s -> 0.4 s
    with every op supported; a chain of 10,000 grown in 49 s -> 0.4 s): the conv alone (its output leaves to every
    reader), each Relu alone, the Sum on the CPU; a supported chain in two parts (the first conv's input is also
    read by the first add, so the rest is dominated by that add)."""
    from engine.partition import partition

    fan = partition(fan_out(3000), lambda op: op.name != "sum")
    assert len(fan.parts) == 3002 and [p.device for p in fan.parts].count("cpu") == 1
    assert all(len(p.input_ops) <= 1 and len(p.output_ops) <= 1 for p in fan.parts if p.device == "accelerator")
    whole = partition(fan_out(3000), lambda op: True)
    assert len(whole.parts) == 1 and len(whole.parts[0].ops) == 3002
    line = partition(chain(4000), lambda op: True)
    assert [len(p.ops) for p in line.parts] == [1, 3999]
