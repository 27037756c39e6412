"""The bound on a fused group's energy over every band count that fits (engine.mapping.bound), against brute force
over every band count and every nest of small groups on a two- and a three-level hierarchy with a PE array."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

import engine
from engine.blocking import block
from engine.blocking.hierarchy import Hierarchy, Memory, pe_array
from engine.blocking.layer import Layer
from engine.mapping import below_fusion_level, map_group, map_plan, tile_nest
from engine.mapping.bound import group_bound, nest_pj, plan_bound
from engine.zoo._builder import Net

pytestmark = pytest.mark.xdist_group("mapping-bound")  # one worker: the cases share their brute force (`_brute_pj`)


def small(buffer_bytes: int) -> engine.Accelerator:
    """A 2 x 2 array with 16-byte RFs and a buffer of `buffer_bytes`."""
    return engine.Accelerator(name="small", buffer_bytes=buffer_bytes, pe_rows=2, pe_cols=2, rf_bytes=16,
                              dataflow="Ow|Cout")


def conv_then(second: str, width: int = 3):
    """input (2 x 6 x width) -> 3x3 conv -> a 3x3 conv or a 3x3 max pool (stride 1, padding 1): a chain fusion runs
    in row bands (3 wide: narrow enough for the brute force on three levels)."""
    net = Net(f"conv_{second}", 1)
    x = net.conv(net.input((2, 6, width)), "conv1", 2, 3, padding=1)
    if second == "conv":
        net.conv(x, "conv2", 2, 3, padding=1)
    else:
        net.pool(x, "pool", "MaxPool", 3, stride=1, padding=1)
    return net.graph()


def two_levels(acc: engine.Accelerator) -> Hierarchy:
    """The accelerator's RF and buffer over DRAM, its array searched over every unrolling (so the blocking is exact
    over every nest, as the brute force)."""
    h = Hierarchy.from_accelerator(acc)
    return replace(h, array=replace(h.array, unrolling="all"))


def three_levels(acc: engine.Accelerator) -> Hierarchy:
    """An RF, a local buffer and the accelerator's buffer over DRAM, with its array (every unrolling)."""
    array = replace(pe_array(acc, (0.5,) * 3), unrolling="all")
    return Hierarchy((Memory.sram("RF", 8), Memory.sram("local", 64), Memory.sram("global", acc.buffer_bytes),
                      Memory.dram()),
                     16, name="three", array=array, array_level=1)


# (second op, width, buffer bytes: it keeps the group's weights beside its bands, the fewest 2), hierarchy, whether
# the mapping at fusion's bands is above the bound (6 wide, 448 B: conv1 costs least in 3 bands, the pool in 2)
CASES = [(("conv", 3, 320), two_levels, False), (("pool", 3, 256), two_levels, False),
         (("conv", 3, 320), three_levels, False), (("pool", 3, 256), three_levels, False),
         (("pool", 6, 448), two_levels, True)]


@cache
def _brute_pj(shape: Layer, inner: Hierarchy) -> float:
    """Brute force: the least energy of every blocking of a band below the fusion level, under every unrolling. Once a
    shape and levels: two convs' bands differ in name alone, and the cases share their levels below the fusion level
    (the buffer sizes differ above it), so the cases run on one worker (the file's `xdist_group`)."""
    return block(shape, inner, method="exhaustive").energy_pj


@pytest.mark.parametrize("case, levels, above", CASES)
def test_no_band_count_and_no_nest_prices_a_group_below_its_bound(case, levels, above):
    second, width, buffer_bytes = case
    g, acc = conv_then(second, width), small(buffer_bytes)
    hierarchy = levels(acc)
    plan = engine.fuse(g, acc, method="optimus")
    (cost,) = plan.costs
    assert len(cost.ops) == 2 and cost.row_steps > 1 and cost.params_resident
    mapping = map_group(g, cost, acc, hierarchy)
    bound = group_bound(g, cost, mapping, acc, hierarchy)
    inner = below_fusion_level(hierarchy)
    fixed = mapping.total_pj - sum(nest_pj(n) for n in mapping.nests)  # what no band count changes
    least_group, least_op = float("inf"), dict.fromkeys(cost.ops, float("inf"))
    # every band count that fits: fusion's fewest steps up to a row per band, one count per band height (the nests
    # of counts with the same height ceil(6 / r) are the same)
    for r in {-(-6 // r): r for r in range(6, cost.row_steps - 1, -1)}.values():
        group = fixed
        for name in cost.ops:
            nest = tile_nest(g, g.op(name), acc, hierarchy, 6, r, cost.batch_tile)
            brute = _brute_pj(replace(nest.layer, name=""), inner) * nest.tiles + nest.mac_pj
            assert brute >= nest_pj(nest) * (1 - 1e-9)  # the mapping's nest is no dearer than any nest of the band
            if r == cost.row_steps:  # at fusion's bands, the mapping's energy is the brute-force least
                assert nest_pj(mapping.nest(name)) == pytest.approx(brute, rel=1e-9)
            group += brute
            least_op[name] = min(least_op[name], brute)
        least_group = min(least_group, group)
        assert group >= bound.bound_pj * (1 - 1e-9)
    assert bound.bound_pj <= least_group * (1 + 1e-9) and least_group <= bound.mapped_pj * (1 + 1e-9)
    # the bound is the sum of each op's brute-force least over the counts, and the mapping is above it where an op's
    # least is at another count than fusion's
    assert bound.bound_pj == pytest.approx(fixed + sum(least_op.values()), rel=1e-9)
    assert (bound.gap_pj > 1e-6 * bound.mapped_pj) == above
    assert bound.mapped_pj == pytest.approx(mapping.total_pj) and bound.gap_pj >= 0
    assert {op for op, _ in bound.best_steps} == set(cost.ops)
    assert all(cost.row_steps <= r <= 6 for _, r in bound.best_steps)


def test_a_plans_bound_sums_its_groups_and_a_lone_op_is_its_own_bound():
    g, acc = conv_then("conv"), small(320)
    plan = engine.fuse(g, acc, method="none")  # each conv alone
    mapped = map_plan(g, plan, acc)
    bound = plan_bound(g, plan, mapped, acc)
    assert [b.ops for b in bound.groups] == [c.ops for c in plan.costs] and len(bound.groups) == 2
    assert all(b.bound_pj == b.mapped_pj for b in bound.groups) and bound.gap == 0.0
    assert bound.mapped_pj == pytest.approx(mapped.energy.total_pj)
