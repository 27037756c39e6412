"""The band nests a mapping call keeps (`nest.nest_memo`): an op alike (`alike.op_key`) or a band count of the same
band height takes the nest made before, renamed, and every mapping, choice and bound is what it is without them."""

from __future__ import annotations

import pytest

import engine
from engine.blocking.hierarchy import Hierarchy
from engine.fusion.memo import Memo
from engine.mapping import map_group, plan_bound
from engine.mapping.bound import group_bound
from engine.mapping.nest import NESTS, nest_memo
from engine.mapping.plan import choices


def resnet50_at_512_kb():
    g = engine.load_network("resnet50")
    acc = engine.Accelerator.preset("optimus").with_buffer(512 * 1024)
    return g, acc, engine.fuse(g, acc, method="optimus")


def test_shared_nests_change_no_mapping_choice_or_bound_and_are_made_once_per_shape():
    g, acc, plan = resnet50_at_512_kb()
    hierarchy = Hierarchy.from_accelerator(acc)
    nests = nest_memo(Memo(8), acc, hierarchy)
    built = 0
    fused = [c for c in plan.costs if c.schedule == "fused" and len(c.ops) > 1]
    assert len(fused) == 25  # BENCHMARKS.md, "Keep the halos in more bands": 25 fused groups at 512 KB
    for cost in fused:
        alone = (map_group(g, cost, acc, hierarchy), *choices(g, cost, acc, hierarchy))
        shared = (map_group(g, cost, acc, hierarchy, nests=nests), *choices(g, cost, acc, hierarchy, nests=nests))
        assert shared == alone  # every nest, its names, energies, counts and text
        built += sum(len(m.nests) for m in alone)
        mapped = shared[0]
        assert group_bound(g, cost, mapped, acc, hierarchy, choices=True, nests=nests) == \
            group_bound(g, cost, mapped, acc, hierarchy, choices=True)
    # the residual blocks' alike groups and the counts of one band height share their nests
    assert len(nests) < built / 2  # 301 nests for the 740 of the mappings, the bounds' included (measured)
    assert len(nests) <= NESTS


def test_a_nest_memo_is_one_accelerators():
    g, acc, plan = resnet50_at_512_kb()
    mapped = Memo(8)
    hierarchy = Hierarchy.from_accelerator(acc)
    other = acc.with_buffer(1024 * 1024)
    assert nest_memo(mapped, acc, hierarchy) is nest_memo(mapped, acc, hierarchy)
    assert nest_memo(mapped, other, Hierarchy.from_accelerator(other)) is not nest_memo(mapped, acc, hierarchy)
    bound = plan_bound(g, plan, engine.mapping.map_plan(g, plan, acc), acc)
    assert bound.mapped_pj >= bound.bound_pj > 0


def test_a_bands_blocking_searched_once_at_its_own_sizes_is_as_cheap_as_the_resizable_one():
    from engine.blocking.counts import hierarchy_counts
    from engine.mapping.nest import below_fusion_level, op_layer

    g = engine.load_network("resnet50")
    acc = engine.Accelerator.preset("tpu-v4i")
    inner = below_fusion_level(Hierarchy.from_accelerator(acc))
    for name in ("conv1", "layer1.0.conv2", "layer3.0.conv1", "fc"):
        layer = op_layer(g, g.op(name))
        alone, reusable = hierarchy_counts(layer, inner, resized=False), hierarchy_counts(layer, inner)
        assert sum(lv.energy_pj for lv in alone.levels) == pytest.approx(sum(lv.energy_pj for lv in reusable.levels),
                                                                        rel=1e-12)
        assert alone.macs == reusable.macs == layer.macs
