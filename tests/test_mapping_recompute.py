"""Recompute or retain (engine.mapping.recompute, `map_plan(..., objective=...)`): the recompute schedule's rows, MACs
and footprint against brute force over explicit bands, the choice against every option, and the bound over both."""

from __future__ import annotations

from dataclasses import replace

import pytest

import engine
from engine.blocking.hierarchy import Hierarchy, Memory, pe_array
from engine.energy import vector_cost
from engine.mapping import lone_nest, map_group, map_plan, plan_bound, recompute_options, tile_nest
from engine.mapping.bound import group_bound
from engine.mapping.plan import SCORES
from engine.mapping.recompute import schedule
from engine.zoo._builder import Net


def small(buffer_bytes: int) -> engine.Accelerator:
    """A 2 x 2 array with 16-byte RFs and a buffer of `buffer_bytes` (16-bit words)."""
    return engine.Accelerator(name="small", buffer_bytes=buffer_bytes, pe_rows=2, pe_cols=2, rf_bytes=16,
                              dataflow="Ow|Cout")


def chain(kinds: tuple[str, ...], size: int = 6, width: int = 3):
    """input (2 x size x width) -> each of `kinds`: a 3x3 conv ("conv"), a 3x3 stride-2 conv ("conv/2"), a 3x3
    max pool ("pool"), padding 1, or a ReLU on the vector unit ("relu")."""
    net = Net("chain", 1)
    x = net.input((2, size, width))
    for k, kind in enumerate(kinds):
        if kind == "pool":
            x = net.pool(x, f"op{k}", "MaxPool", 3, stride=1, padding=1)
        elif kind == "relu":
            x = net.activation(x, f"op{k}")
        else:
            x = net.conv(x, f"op{k}", 2, 3, stride=2 if kind == "conv/2" else 1, padding=1)
    return net.graph()


def two_levels(acc: engine.Accelerator) -> Hierarchy:
    return Hierarchy.from_accelerator(acc)


def three_levels(acc: engine.Accelerator) -> Hierarchy:
    """An RF, a local buffer and the accelerator's buffer over DRAM, with its 2 x 2 array."""
    return Hierarchy((Memory.sram("RF", 8), Memory.sram("local", 64), Memory.sram("global", acc.buffer_bytes),
                      Memory.dram()), 16, name="three", array=pe_array(acc, (0.5,) * 3), array_level=1)


def brute_rows(graph, ops: tuple[str, ...], bands: int) -> list[dict[str, set[int]]]:
    """Per band, the set of output rows every op of a chain computes when nothing outlives the band: the last op its
    own ceil(H / bands) rows, each earlier op every row a later window reads, row by row."""
    out = []
    for b in range(bands):
        last = graph.op(ops[-1])
        height = graph.tensors[last.outputs[0]].shape[2]
        size = -(-height // bands)
        need = set(range(b * size, min(height, (b + 1) * size)))
        rows = {ops[-1]: need}
        for name in reversed(ops):
            op = graph.op(name)
            rows[name] = need
            h_in = graph.tensors[op.inputs[0]].shape[2]
            kernel, stride, top = (op.kernel[0], op.stride[0], op.padding[0]) if op.kernel else (1, 1, 0)
            need = {y * stride - top + k for y in need for k in range(kernel)} & set(range(h_in))
        rows["input"] = need
        out.append(rows)
    return out


def brute_live(graph, ops: tuple[str, ...], bands: list[dict[str, set[int]]]) -> tuple[tuple[int, ...], ...]:
    """The elements live at each op's step of each band of a chain: op k's rows from its step to its consumer's,
    the input's rows at the first step, and the input rows the next band reads too at every later step (and before
    the first step of the next band)."""
    def per_row(t: str) -> int:
        n, c, h, w = graph.tensors[t].shape
        return c * w

    first = graph.op(ops[0]).inputs[0]
    out = []
    for b, rows in enumerate(bands):
        carried = len(rows["input"] & bands[b + 1]["input"]) if b + 1 < len(bands) else 0
        steps = []
        for s in range(len(ops)):
            live = per_row(first) * (len(rows["input"]) if s == 0 else carried)
            for k, name in enumerate(ops):
                if k <= s <= k + 1:
                    live += per_row(graph.op(name).outputs[0]) * len(rows[name])
            steps.append(live)
        out.append(tuple(steps))
    return tuple(out)


def fused(kinds: tuple[str, ...], size: int, buffer_bytes: int):
    """(graph, accelerator, optimus's plan, its one group's cost) of a chain that fuses whole."""
    g, acc = chain(kinds, size), small(buffer_bytes)
    plan = engine.fuse(g, acc, method="optimus")
    (cost,) = plan.costs
    return g, acc, plan, cost


CHAINS = [(("conv", "conv"), 6, 288), (("conv", "pool"), 6, 224), (("conv", "conv", "conv"), 6, 448),
          (("conv/2", "conv"), 12, 352), (("conv", "relu", "conv"), 6, 288)]


@pytest.mark.parametrize("kinds, size, buffer_bytes", CHAINS)
@pytest.mark.parametrize("levels", [two_levels, three_levels])
def test_every_row_an_op_computes_and_every_live_row_match_brute_force(kinds, size, buffer_bytes, levels):
    g, acc, plan, cost = fused(kinds, size, buffer_bytes)
    assert len(cost.ops) == len(kinds) and cost.row_steps > 1 and not cost.isoa
    hierarchy = levels(acc)
    word = acc.word_bits // 8
    params = sum(g.tensors[w].elements for name in cost.ops for w in g.op(name).weights) if cost.params_resident else 0
    for r in range(1, cost.row_steps + 1):
        s = schedule(g, cost, acc, r)
        bands = brute_rows(g, cost.ops, r)
        computed = {name: sum(len(band[name]) for band in bands) for name in cost.ops}
        assert dict(s.computed) == computed
        assert [set(range(a, b)) for a, b in s.spans[0]] == [band[cost.ops[0]] for band in bands]
        read = len(set().union(*(band["input"] for band in bands)))
        assert s.input_rows == (("input", read, size),)
        assert s.live == brute_live(g, cost.ops, bands)
        assert s.footprint_bytes == (s.peak_elements + params) * word
    options = recompute_options(g, cost, acc, hierarchy)
    assert options and all(o.halos == "recomputed" for o in options)
    for o in options:
        bands = brute_rows(g, cost.ops, o.row_steps)
        for name in cost.ops:
            nest = o.nest(name)  # its `useful_macs`: the op's own (a pool's window operations too)
            height = g.tensors[g.op(name).outputs[0]].shape[2]
            rows = sum(len(band[name]) for band in bands)
            assert nest.macs == nest.useful_macs // height * rows  # every MAC of every row computed, again or not
            assert nest.recomputed_macs == nest.useful_macs // height * (rows - height)
        assert o.footprint_bytes <= acc.buffer_bytes
    assert any(o.recomputed_macs > 0 for o in options)


def residual():
    """input (2 x 6 x 3) -> 3x3 conv -> 3x3 conv -> + input: the input lives from the first conv to the add."""
    net = Net("residual", 1)
    x = net.input((2, 6, 3))
    y = net.conv(net.conv(x, "conv1", 2, 3, padding=1), "conv2", 2, 3, padding=1)
    net.eltwise([x, y], "add")
    return net.graph()


def branches():
    """input -> a 3x3 conv and a 1x1 conv -> channel concat (in place: a view of both) -> 3x3 conv."""
    net = Net("branches", 1)
    x = net.input((2, 6, 3))
    cat = net.concat([net.conv(x, "a", 2, 3, padding=1), net.conv(x, "b", 2, 1)], "cat")
    net.conv(cat, "out", 2, 3, padding=1)
    return net.graph()


def two_inputs():
    """Two inputs, each through a 3x3 conv, added: the second input is first read at the second step, so the rows it
    keeps for the next band are live before it (at the first step of that band)."""
    net = Net("two_inputs", 1)
    x, z = net.input((2, 6, 3)), net.input((2, 6, 3), name="second")
    net.eltwise([net.conv(x, "a", 2, 3, padding=1), net.conv(z, "b", 2, 3, padding=1)], "add")
    return net.graph()


def brute_dag_live(graph, ops: tuple[str, ...], bands: int) -> tuple[tuple[tuple[int, ...], ...], dict[str, int]]:
    """(the elements live at each op's step of each band, the rows each op computes over every band) of a group
    whose ops read rows through windows (conv, pool) or row for row (add, concat), found with row sets, band by
    band: a tensor lives from its producer's step to its last reader's (a concat's inputs to its readers': it is a
    view of them, and holds nothing of its own), a group input from its first reader to its last, and outside that
    only the rows the next band reads too."""
    step = {name: s for s, name in enumerate(ops)}
    maker = {graph.op(name).outputs[0]: name for name in ops}
    readers = {t: [name for name in ops if t in graph.op(name).inputs] for t in {t for n in ops for t in graph.op(n).inputs}}

    def last(t: str) -> int:
        return max((last(graph.op(r).outputs[0]) if graph.op(r).kind.value == "concat" else step[r])
                   for r in readers[t]) if readers.get(t) else step[maker[t]]

    def per_row(t: str) -> int:
        n, c, h, w = graph.tensors[t].shape
        return 0 if t in maker and graph.op(maker[t]).kind.value == "concat" else c * w

    sets = []
    for b in range(bands):
        rows: dict[str, set[int]] = {}
        for name in reversed(ops):
            op = graph.op(name)
            out = op.outputs[0]
            height = graph.tensors[out].shape[2]
            size = -(-height // bands)
            if not readers.get(out):
                rows[out] = set(range(b * size, min(height, (b + 1) * size)))
            for t in op.inputs:
                if op.kernel:
                    need = {y * op.stride[0] - op.padding[0] + k for y in rows[out] for k in range(op.kernel[0])}
                else:
                    need = set(rows[out])
                rows[t] = rows.get(t, set()) | (need & set(range(graph.tensors[t].shape[2])))
        sets.append(rows)
    inputs = [t for t in readers if t not in maker]
    out = []
    for b, rows in enumerate(sets):
        steps = []
        for s in range(len(ops)):
            live = sum(per_row(t) * len(rows[t]) for t in maker if step[maker[t]] <= s <= last(t))
            for t in inputs:
                first = min(step[r] for r in readers[t])
                if first <= s <= last(t):
                    live += per_row(t) * len(rows[t])
                elif s > last(t) and b + 1 < len(sets):
                    live += per_row(t) * len(rows[t] & sets[b + 1][t])
                elif s < first and b:
                    live += per_row(t) * len(rows[t] & sets[b - 1][t])
            steps.append(live)
        out.append(tuple(steps))
    computed = {name: sum(len(rows[graph.op(name).outputs[0]]) for rows in sets) for name in ops}
    return tuple(out), computed


@pytest.mark.parametrize("make, buffer_bytes", [(residual, 288), (branches, 384), (two_inputs, 288)])
def test_branches_and_an_in_place_concat_keep_what_their_readers_need(make, buffer_bytes):
    g, acc = make(), small(buffer_bytes)
    plan = engine.fuse(g, acc, method="optimus")
    (cost,) = plan.costs
    assert len(cost.ops) == len(g.ops) and cost.row_steps == 6 and not cost.isoa and cost.params_resident
    params = sum(g.tensors[w].elements for op in g.ops for w in op.weights)
    for r in range(1, cost.row_steps + 1):
        s = schedule(g, cost, acc, r)
        live, computed = brute_dag_live(g, cost.ops, r)
        assert (s.live, dict(s.computed)) == (live, computed)
        assert s.footprint_bytes == (max(map(max, live)) + params) * acc.word_bits // 8


@pytest.mark.parametrize("kinds, size, buffer_bytes", CHAINS)
@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_the_mapping_takes_the_cheapest_of_keeping_and_recomputing_by_the_objective(kinds, size, buffer_bytes,
                                                                                    objective):
    g, acc, plan, cost = fused(kinds, size, buffer_bytes)
    hierarchy = Hierarchy.from_accelerator(acc)
    options = (map_group(g, cost, acc, hierarchy), *recompute_options(g, cost, acc, hierarchy))
    score = SCORES[objective]
    best = min(score(o.total_pj, o.latency_s) for o in options)
    mapped = map_plan(g, plan, acc, objective=objective)
    (chosen,) = mapped.groups
    assert score(chosen.total_pj, chosen.latency_s) == pytest.approx(best, rel=1e-9)
    assert mapped.recomputed_macs == chosen.recomputed_macs and mapped.objective == objective
    kept = map_plan(g, plan, acc)  # DRAM bytes: fusion's line buffer, whatever recomputing would save
    assert kept.groups[0].halos == "kept" and kept.recomputed_macs == 0 and kept.dram_bytes == plan.dram_bytes


def test_a_vector_ops_recomputed_rows_cost_what_its_first_pass_costs_per_row():
    """conv -> ReLU -> conv under recompute: the ReLU (no loop nest, on the vector unit) computes the rows conv2's
    windows read in every band; its buffer, array and RF words, its energy, vector operations and cycles are its one
    pass's per row times those rows (2 bands: rows [0, 4) and [2, 6), 8 of 6; 1 band: one pass)."""
    g, acc, plan, cost = fused(("conv", "relu", "conv"), 6, 288)
    relu = g.op("op1")
    first = lone_nest(g, relu, acc, Hierarchy.from_accelerator(acc))  # its one pass, as the kept schedule prices it
    vector = vector_cost(g, relu, acc)
    rows = {}
    for o in recompute_options(g, cost, acc, Hierarchy.from_accelerator(acc)):
        computed = sum(len(band["op1"]) for band in brute_rows(g, cost.ops, o.row_steps))
        rows[o.row_steps] = computed
        nest = o.nest("op1")
        assert nest.macs == vector.operations // 6 * computed and nest.useful_macs == vector.operations
        assert nest.mac_pj == pytest.approx(vector.energy_pj / 6 * computed)
        assert nest.cycles == -(-vector.cycles * computed // 6)
        for lv, once in zip(nest.levels, first.levels):
            assert (lv.reads, lv.energy_pj) == (once.reads // 6 * computed, pytest.approx(once.energy_pj / 6 * computed))
    assert rows[1] == 6 and rows[2] == 8 and max(rows.values()) > 8


def test_recompute_wins_where_keeping_the_halos_needs_more_bands():
    """ResNet-50's conv1 and max pool at 512 KB (optimus preset): keeping the halos needs 3 bands, recomputing them
    runs 2, 1.05 M MACs again for less energy (fewer passes of the band's weights through the levels below)."""
    g = engine.load_network("resnet50")
    acc = engine.Accelerator.preset("optimus").with_buffer(512 * 1024)
    cost = engine.fusion.group_cost(g, ("conv1", "maxpool"), acc)
    hierarchy = Hierarchy.from_accelerator(acc)
    kept = map_group(g, cost, acc, hierarchy)
    best = min(recompute_options(g, cost, acc, hierarchy), key=lambda o: o.total_pj)
    assert (kept.row_steps, best.row_steps) == (3, 2)
    assert best.recomputed_macs == 1_053_696 and best.total_pj < kept.total_pj
    assert best.dram_bytes == kept.dram_bytes  # the weights stay beside the band: the same DRAM bytes


def test_recompute_loses_where_its_only_fit_is_fusions_own_band_count():
    """Two 3x3 convs at 256 bytes: only at fusion's 6 bands does a recompute schedule fit, and there it runs
    1,080 MACs again for nothing: the mapping keeps the halos."""
    g, acc, plan, cost = fused(("conv", "conv"), 6, 256)
    hierarchy = Hierarchy.from_accelerator(acc)
    (only,) = recompute_options(g, cost, acc, hierarchy)
    assert only.row_steps == cost.row_steps == 6 and only.recomputed_macs == 1080
    kept = map_group(g, cost, acc, hierarchy)
    assert only.total_pj > kept.total_pj
    assert map_plan(g, plan, acc, objective="energy").groups[0].halos == "kept"


@pytest.mark.parametrize("kinds, size, buffer_bytes", CHAINS)
@pytest.mark.parametrize("levels", [two_levels, three_levels])
def test_the_bound_stays_below_every_schedule_kept_or_recomputed(kinds, size, buffer_bytes, levels):
    g, acc, plan, cost = fused(kinds, size, buffer_bytes)
    hierarchy = levels(acc)
    kept = map_group(g, cost, acc, hierarchy)
    options = recompute_options(g, cost, acc, hierarchy)
    bound = group_bound(g, cost, kept, acc, hierarchy, choices=True)
    fixed = kept.total_pj - sum(n.mac_pj + sum(lv.energy_pj for lv in n.levels) for n in kept.nests)
    for r in range(cost.row_steps, size + 1):  # keeping the halos, at every band count that fits
        nests = [tile_nest(g, g.op(name), acc, hierarchy, size, r, cost.batch_tile) for name in cost.ops]
        assert fixed + sum(n.mac_pj + sum(lv.energy_pj for lv in n.levels) for n in nests) >= bound.bound_pj * (1 - 1e-9)
    for o in options:
        assert o.total_pj >= bound.bound_pj * (1 - 1e-9)
    assert bound.bound_pj <= group_bound(g, cost, kept, acc, hierarchy).bound_pj * (1 + 1e-9)


def test_a_plans_bound_covers_what_its_objective_lets_the_mapping_choose():
    g, acc, plan, _ = fused(("conv", "conv"), 6, 288)
    mapped = map_plan(g, plan, acc, objective="energy")
    assert mapped.groups[0].halos == "recomputed" and mapped.groups[0].row_steps < plan.costs[0].row_steps
    bound = plan_bound(g, plan, mapped, acc)
    assert bound.bound_pj <= mapped.energy.total_pj * (1 + 1e-9) and bound.gap >= 0
    assert replace(mapped, objective="dram_bytes") != mapped
