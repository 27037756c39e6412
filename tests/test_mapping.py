"""One mapping from DRAM to the MACs (engine.mapping): lone ops are today's per-layer blocking, fused ops are blocked
exactly below the fusion level, and the mapping's counts keep every capacity and every MAC."""

from __future__ import annotations

import math

import pytest

import engine
from engine.blocking import block, layer_access_counts
from engine.blocking.counts import hierarchy_counts
from engine.blocking.hierarchy import Hierarchy, Memory, pe_array
from engine.blocking.layer import Layer
from engine.energy import COMPONENTS
from engine.mapping import below_fusion_level, map_plan
from engine.zoo._builder import Net

TINY = engine.Accelerator(name="tiny", buffer_bytes=352, pe_rows=2, pe_cols=2, rf_bytes=16, dataflow="Ow|Cout")


def two_convs(channels: int = 2, size: int = 6):
    """input -> 3x3 conv -> 3x3 conv: a chain fusion tiles in row bands."""
    net = Net("two_convs", 1)
    x = net.input((channels, size, size))
    x = net.conv(x, "conv1", channels, 3, padding=1)
    net.conv(x, "conv2", channels, 3, padding=1)
    return net.graph()


@pytest.fixture(scope="module")
def resnet18():
    return engine.load_network("resnet18")


@pytest.fixture(scope="module")
def fused_pair():
    g = two_convs()
    plan = engine.fuse(g, TINY, method="optimus")
    assert plan.groups == (("conv1", "conv2"),) and plan.costs[0].row_steps > 1  # fused, in several bands
    return g, plan, map_plan(g, plan, TINY)


def _own_blocking(graph, op, acc, counts):
    """(pJ, DRAM bytes) of the op's own blocking on the whole hierarchy, its bias read once beside it."""
    weights = sum(graph.tensors[w].elements for w in graph.op(op).weights)
    bias = max(0, weights - counts.layer.groups * counts.layer.footprint("W", counts.layer.dims))
    dram = counts.level("DRAM")
    pj = sum(level.energy_pj for level in counts.levels) + counts.mac_pj + bias * acc.levels[-1].energy_pj
    return pj, (dram.reads + dram.writes + bias) * acc.word_bits // 8


def test_a_lone_op_is_todays_per_layer_blocking_or_fusions_own_bands_where_those_cost_less(resnet18):
    acc = engine.Accelerator.preset("optimus")
    plan = engine.fuse(resnet18, acc, method="none")
    mapped = map_plan(resnet18, plan, acc)
    schedules, why = [], set()
    for group, cost in zip(mapped.groups, plan.costs):
        (nest,) = group.nests
        counts = layer_access_counts(resnet18, nest.op, acc)
        if counts is None:
            continue
        schedules.append(group.schedule)
        own_pj, own_bytes = _own_blocking(resnet18, nest.op, acc, counts)
        if group.schedule == "alone":
            assert nest.levels == counts.levels and nest.macs == counts.macs and nest.cycles == counts.cycles
            assert group.total_pj == pytest.approx(own_pj) and group.dram_bytes == own_bytes <= cost.dram_bytes
        else:  # fusion's bands, each blocked below the buffer: cheaper than the layer's blocking on its own, or that
            # blocking moves more DRAM bytes than the plan counts (the mapping keeps the plan's traffic)
            assert group.schedule == "bands" and nest.macs == counts.macs and group.dram_bytes == cost.dram_bytes
            assert group.total_pj < own_pj or own_bytes > cost.dram_bytes
            why.add("cheaper" if group.total_pj < own_pj else "fewer bytes")
    assert len(schedules) == 23  # 20 convs (3 of them 1x1 shortcuts), two pools and the classifier
    assert {"alone", "bands"} <= set(schedules) and why == {"cheaper", "fewer bytes"}


def test_the_none_plans_energy_is_at_most_the_sum_of_the_layers_own_blockings_that_keep_its_traffic(resnet18):
    acc = engine.Accelerator.preset("optimus")
    plan = engine.fuse(resnet18, acc, method="none")
    mapped = map_plan(resnet18, plan, acc)
    dram_pj = acc.levels[-1].energy_pj
    for group, cost in zip(mapped.groups, plan.costs):
        op = resnet18.op(cost.ops[0])
        counts = layer_access_counts(resnet18, op, acc)
        if counts is None:  # no loop nest: the dataflow model's pass over the buffer, and fusion's DRAM bytes
            a = engine.energy.op_accesses(resnet18, op, acc)
            today = sum(getattr(a, k) * acc.energy_pj(k) for k in ("buffer", "array", "rf", "mac"))
            today += cost.dram_bytes / (acc.word_bits / 8) * dram_pj
            assert group.total_pj == pytest.approx(today, rel=1e-12)
        elif _own_blocking(resnet18, op.name, acc, counts)[1] <= cost.dram_bytes:
            assert group.total_pj <= _own_blocking(resnet18, op.name, acc, counts)[0] * (1 + 1e-12)


def test_mappings_kept_for_one_accelerator_are_not_handed_to_another(fused_pair, resnet18):
    """A `mapped` memo shared by plans on two accelerators gives each plan its own accelerator's mapping."""
    from dataclasses import replace

    from engine.fusion.memo import Memo
    from engine.mapping.plan import ALIKE

    acc = engine.Accelerator.preset("optimus")
    cases = [(*fused_pair[:2], TINY, replace(TINY, name="tiny-wide", pe_rows=4, pe_cols=4, rf_bytes=64)),
             (resnet18, engine.fuse(resnet18, acc, method="optimus"), acc, replace(acc, name="half", pe_rows=acc.pe_rows // 2))]
    for graph, plan, one, other in cases:
        shared = Memo(ALIKE)
        first = map_plan(graph, plan, one, mapped=shared)
        second = map_plan(graph, plan, other, mapped=shared)
        assert first == map_plan(graph, plan, one) and second == map_plan(graph, plan, other)
        assert first.energy != second.energy  # the two accelerators do price it differently


def test_fused_ops_read_their_inputs_on_chip_and_are_blocked_exactly_below_the_buffer(fused_pair):
    g, plan, mapped = fused_pair
    (group,) = mapped.groups
    assert group.schedule == "fused" and group.dram_bytes == plan.dram_bytes
    streamed = not plan.costs[0].params_resident  # no room for the weights beside the band: they pass by
    assert streamed and group.dram_bytes == plan.dram_bytes  # each weight read once per band, as fusion counts
    inner = below_fusion_level(Hierarchy.from_accelerator(TINY), weights_streamed=streamed)
    for nest in group.nests:  # from DRAM, only the weights as the nest reads them
        assert all(level.reads == level.weight_reads and not level.writes for level in nest.levels
                   if level.kind == "dram")
        # the dynamic program's nest is the least energy of every blocking of the band (brute force; here that
        # blocking reads each weight once already)
        oracle = block(nest.layer, inner, method="exhaustive")
        assert sum(level.energy_pj for level in nest.levels) == pytest.approx(oracle.energy_pj * nest.tiles, rel=1e-9)


@pytest.mark.parametrize("with_array", [False, True])
def test_streamed_weights_are_read_once_per_band_by_the_least_energy_nest_that_does(with_array):
    from engine.blocking.exhaustive import every_blocking
    from engine.blocking.grid import unrollings
    from engine.blocking.model import evaluate

    # weights dear at the store, but not so dear that the unconstrained nest keeps each one while the rows pass
    array = dict(array=pe_array(TINY, (0.5,) * 3), array_level=1) if with_array else {}
    inner = Hierarchy((Memory.sram("RF", 12), Memory("store", energy_pj=(6.0, 7.0, 6.0))), 16, name="t", **array)
    band = Layer(X=8, C=4, K=2)
    weights = band.footprint("W", band.dims)
    free, once = hierarchy_counts(band, inner), hierarchy_counts(band, inner, weights_once=True)
    assert free.levels[-1 - with_array].weight_reads > weights  # left free, the best nest re-reads weights
    assert once.levels[-1 - with_array].weight_reads == weights
    # brute force: every blocking that fits and reads each weight once from the store, under the unrollings the
    # search takes (the array's maximal ones); the least energy of them
    best = min(cost.memory_pj for unroll in unrollings(band, inner)
               for _, blockings in every_blocking(band, len(inner.on_chip), unroll, inner=inner.stationary)
               for cost in map(lambda b: evaluate(band, inner, b), blockings)
               if cost.fits and sum(a.reads for a in cost.accesses if a.level == "store" and a.tensor == "W") == weights)
    assert sum(level.energy_pj for level in once.levels) == pytest.approx(best, rel=1e-12)
    assert best > sum(level.energy_pj for level in free.levels)


def test_halos_are_kept_not_recomputed_and_every_mac_runs_once(fused_pair):
    g, _, mapped = fused_pair
    assert mapped.macs == sum(op.macs for op in g.ops) and mapped.recomputed_macs == 0
    (group,) = mapped.groups
    for nest in group.nests:
        assert nest.layer.Y == math.ceil(6 / group.row_steps)  # each band computes its share of new rows


def test_every_level_holds_what_the_mapping_keeps_there(fused_pair, resnet18):
    acc = engine.Accelerator.preset("optimus")
    for mapped in (fused_pair[2], map_plan(resnet18, engine.fuse(resnet18, acc, method="optimus"), acc)):
        for group in mapped.groups:
            assert group.footprint_bytes <= group.capacity_bytes
            for nest in group.nests:
                for level in nest.levels:
                    if level.capacity_words is not None:
                        assert level.stored_words <= level.capacity_words, (nest.op, level)


def test_a_fused_plans_on_chip_energy_belongs_to_its_own_mapping(resnet18):
    acc = engine.Accelerator.preset("optimus")
    none, fused = (map_plan(resnet18, engine.fuse(resnet18, acc, method=m), acc) for m in ("none", "optimus"))
    assert any(len(g.ops) > 1 for g in fused.groups)
    # the bands are smaller layers: the array's multicast reuses less, so the on-chip energies differ
    assert fused.energy.array_pj != none.energy.array_pj
    assert fused.energy.dram_pj < none.energy.dram_pj


def test_group_energies_add_up_to_the_plans(resnet18):
    acc = engine.Accelerator.preset("optimus")
    mapped = map_plan(resnet18, engine.fuse(resnet18, acc, method="optimus"), acc)
    totals = mapped.energy.as_dict()
    for i, component in enumerate(COMPONENTS):
        assert sum(g.energy_pj[i][1] for g in mapped.groups) == pytest.approx(totals[component], rel=1e-12)
    assert mapped.energy.latency_s == pytest.approx(sum(g.latency_s for g in mapped.groups))
    assert {g.bottleneck for g in mapped.groups} <= {"compute", "DRAM"}


@pytest.mark.parametrize("with_array", [False, True])
def test_below_the_fusion_level_of_three_levels_a_band_is_blocked_exactly(with_array):
    array = dict(array=pe_array(TINY, (0.5,) * 3), array_level=1) if with_array else {}
    three = Hierarchy((Memory.sram("RF", 8), Memory.sram("local", 64), Memory.sram("global", 4096), Memory.dram()),
                      16, name="three", **array)
    inner = below_fusion_level(three)
    assert [m.name for m in inner.levels] == ["RF", "local", "global"] and not inner.levels[-1].bounded
    assert inner.array == three.array and inner.array_level == three.array_level
    layer = Layer(X=4, C=2, K=2, Fw=3)  # a one-row band of a 1x3 conv, small enough to enumerate
    oracle = block(layer, inner, method="exhaustive")
    levels = hierarchy_counts(layer, inner).levels
    assert sum(lv.energy_pj for lv in levels) == pytest.approx(oracle.energy_pj)


def test_evaluate_prices_every_method_by_its_mapping(resnet18):
    acc = engine.Accelerator.preset("optimus")
    report = engine.evaluate(resnet18, acc, methods=("none", "optimus"), access_model="mapping")
    for method in ("none", "optimus"):
        assert report.energy[method] is report.mappings[method].energy
    assert engine.evaluate(resnet18, acc, methods=("none",), access_model="dataflow").mappings is None


def chain_of_convs(n: int = 4):
    net = Net("conv_chain", 1)
    x = net.input((2, 6, 6))
    for i in range(n):
        x = net.conv(x, f"conv{i}", 2, 3, padding=1)
    return net.graph()


def _score(mapped, objective):
    e, t = mapped.energy.total_pj, mapped.energy.latency_s
    return {"energy": e, "latency": t, "edp": e * t}[objective]


@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_refine_reaches_the_best_partition_of_a_small_chain(objective):
    g = chain_of_convs()
    acc = TINY.with_buffer(512)
    ops = [op.name for op in g.ops]
    best = math.inf
    for cuts in range(1 << (len(ops) - 1)):  # every partition of the chain into consecutive groups
        groups, current = [], [ops[0]]
        for i, name in enumerate(ops[1:]):
            if cuts >> i & 1:
                groups.append(tuple(current))
                current = []
            current.append(name)
        groups.append(tuple(current))
        costs = [engine.fusion.group_cost(g, grp, acc) for grp in groups]
        if all(c is not None for c in costs):
            plan = engine.fuse(g, acc, method="none")
            plan = type(plan)("brute", tuple(groups), tuple(costs), sum(c.dram_bytes for c in costs), 0, 0, 0,
                              acc.buffer_bytes, 0, 0.0, "restricted")
            best = min(best, _score(map_plan(g, plan, acc), objective))
    start = engine.fuse(g, acc, method="optimus")
    refined = engine.mapping.refine(g, start, acc, objective)
    assert refined.status == "refined" and refined.dram_bytes == sum(c.dram_bytes for c in refined.costs)
    assert _score(map_plan(g, refined, acc), objective) == pytest.approx(best, rel=1e-9)
    assert _score(map_plan(g, refined, acc), objective) <= _score(map_plan(g, start, acc), objective)


def test_an_objective_refines_each_methods_plan_and_dram_bytes_leaves_it_alone(resnet18):
    acc = engine.Accelerator.preset("optimus")
    plain = engine.evaluate(resnet18, acc, methods=("optimus",))
    assert plain.objective == "dram_bytes" and plain.plans["optimus"].status == "optimal"
    fast = engine.evaluate(resnet18, acc, methods=("optimus",), objective="latency")
    assert fast.plans["optimus"].status == "refined"
    assert fast.energy["optimus"].latency_s < plain.energy["optimus"].latency_s
    assert fast.plans["optimus"].dram_bytes >= plain.plans["optimus"].dram_bytes  # the optimum in bytes stays one
    with pytest.raises(engine.EngineError, match="objective 'energy' is the plan's mapping's"):
        engine.evaluate(resnet18, acc, methods=("optimus",), access_model="blocking", objective="energy")
    with pytest.raises(engine.UnknownNameError, match="dram_bytes, edp, energy, latency"):
        engine.evaluate(resnet18, acc, methods=("optimus",), objective="power")


def test_a_band_of_a_prime_number_of_rows_runs_as_two_nests_when_that_costs_less():
    from engine.mapping.nest import _cheapest_parts

    inner = below_fusion_level(Hierarchy.from_accelerator(engine.Accelerator.preset("optimus")))
    band = Layer(X=683, C=256, K=512)  # ceil(2048 / 3) tokens of a projection: 683 is prime
    parts = _cheapest_parts(band, "X", inner)
    assert sum(p.X for p in parts) == 683 and len(parts) == 2 and parts[0].X % 16 == 0

    def energy(layers):
        return sum(sum(lv.energy_pj for lv in hierarchy_counts(p, inner).levels) for p in layers)
    assert energy(parts) < 0.8 * energy((band,))  # as one nest the RF keeps one row: every weight read per row
    even = Layer(X=512, C=256, K=512)
    assert _cheapest_parts(even, "X", inner) == (even,)


def test_a_convolution_by_a_computed_kernel_is_priced_as_a_pass_over_the_buffer():
    from pathlib import Path

    path = Path(__file__).parent / "data" / "exports" / "timm_xcit_nano_12_p16_224.onnx"
    g = engine.load_network(str(path))
    op = g.op("/pos_embed/token_projection/Conv")  # its kernel is computed; its one weight is the bias
    with pytest.raises(engine.GraphError, match="computed kernel"):
        Layer.from_op(g, op)
    acc = engine.Accelerator.preset("optimus")
    mapped = map_plan(g, engine.fuse(g, acc, method="dnnvm"), acc)
    assert mapped.group_of(op.name).nest(op.name).layer is None


def test_a_folded_layout_op_costs_nothing_in_the_mapping():
    g = engine.load_network("gpt2")
    acc = engine.Accelerator.preset("optimus")
    plan = engine.fuse(g, acc, method="none")
    folded = [c for c in plan.costs if c.schedule == "folded"]
    assert folded and all(c.dram_bytes == 0 for c in folded)
    mapped = map_plan(g, plan, acc)
    for cost in folded:
        group = mapped.group_of(cost.ops[0])
        assert group.total_pj == 0 and group.dram_bytes == 0 and group.latency_s == 0


def test_a_level_whose_ports_cannot_keep_up_bounds_the_groups_latency():
    from dataclasses import replace

    from benchmarks.bench_ffm import ffm_block
    from engine.mapping import map_group

    g, acc = ffm_block(1024), engine.Accelerator.preset("tpu-v4i")
    cost = engine.fuse(g, acc, method="none").costs[0]
    hierarchy = Hierarchy.from_accelerator(acc)
    free = map_group(g, cost, acc, hierarchy)
    starved = replace(hierarchy, levels=tuple(replace(m, read_bw=1.0, write_bw=1.0) if m.name == "GlobalBuffer" else m
                                              for m in hierarchy.levels))
    slow = map_group(g, cost, acc, starved)
    assert cost.ops == ("Q",) and free.schedule == slow.schedule == "alone" and free.bottleneck == "compute"
    (nest,) = slow.nests
    words = next(level for level in nest.levels if level.level == "GlobalBuffer")
    assert slow.bottleneck == "GlobalBuffer"  # one word a cycle each way: its accesses take longer than the MACs
    assert slow.latency_s == pytest.approx(max(words.reads, words.writes) / acc.clock_hz, rel=1e-12)
    assert slow.latency_s > free.latency_s == pytest.approx(free.compute_s)


@pytest.mark.parametrize("network, kb", [("llama3_8b_prefill", 8192), ("resnet50", 1024), ("gpt3_6.7b_block", 64),
                                         ("llama3_8b_decode_kv8191", 1024), ("shufflenet_v2_x1_0", 1024)])
def test_the_mapping_moves_the_bytes_the_plan_counts(network, kb):
    """Every group of more than one op, and every lone op in fusion's own bands, moves exactly fusion's DRAM bytes;
    a lone op takes its own blocking on the whole hierarchy only where that moves no more (it may move fewer). An op
    fusion does not model is counted at its compulsory traffic, a floor its blocking may need more than."""
    g, acc = engine.load_network(network), engine.Accelerator.preset("optimus").with_buffer(kb * 1024)
    for method in ("none", "optimus"):
        plan = engine.fuse(g, acc, method=method)
        mapped = map_plan(g, plan, acc)
        above = []
        for group, cost in zip(mapped.groups, plan.costs):
            if cost.schedule == "unmodelled":
                assert group.schedule == "alone" and group.dram_bytes >= cost.dram_bytes
                above += [group.ops] if group.dram_bytes > cost.dram_bytes else []
            elif group.schedule == "alone":
                assert group.dram_bytes <= cost.dram_bytes, group.ops
            else:
                assert group.dram_bytes == cost.dram_bytes, (group.ops, group.schedule)
        # ShuffleNet-V2's two depthwise convolutions reading a 5-D view of their input (outside fusion's tile model)
        assert len(above) == (2 if network == "shufflenet_v2_x1_0" else 0)
        if network == "llama3_8b_prefill" and method == "optimus":
            # the fused MLP bands re-read no weight: 51.3 GB, as fusion counts (the mapping used to move 144 GB)
            assert mapped.dram_bytes == plan.dram_bytes == 51_316_021_760
            mlp = mapped.group_of("model.layers.0.mlp.gate_proj")
            assert mlp.schedule == "fused" and mlp.row_steps == 3 and "pass by from DRAM" in "".join(mlp.tile_loop())
