"""A fused group's choices under an objective other than DRAM bytes (`map_plan(..., objective=...)`): its halos kept
at every band count that fits or recomputed, against brute force over every (band count, kept or recomputed)
option, the bound below all of them, and `fusion.cost.at_steps` (a group's Eq. 3 and 4 at another count)."""

from __future__ import annotations

import pytest

import engine
from engine.blocking.hierarchy import Hierarchy
from engine.errors import EngineError
from engine.fusion.cost import at_steps
from engine.mapping import map_group, map_plan, plan_bound
from engine.mapping.plan import SCORES, choices, recompute_mapping
from engine.mapping.recompute import schedule
from tests.test_mapping_recompute import CHAINS, chain, small

# chains where keeping the halos in more bands than fusion's is the least energy (found by the brute force below):
# fusion runs 2 (3, 2) bands, each conv's band blocked cheaper at 3 (4, 3): a band of fewer rows keeps more of itself
# in the RF
MORE_BANDS = [(("conv", "conv"), 8, 416, 2, 3), (("conv", "conv"), 12, 416, 3, 4), (("conv", "pool"), 8, 352, 2, 3),
              (("conv", "conv", "conv"), 8, 576, 2, 3)]
CASES = [*CHAINS, *((kinds, size, buffer_bytes) for kinds, size, buffer_bytes, _, _ in MORE_BANDS)]


def every_option(g, cost, acc):
    """(halos, band count, mapping) of the group at every band count from one to a row per band, kept (Eq. 4's
    footprint at that count) or recomputed (`recompute.schedule`), wherever the footprint fits the buffer."""
    hierarchy = Hierarchy.from_accelerator(acc)
    height = max(g.tensors[g.op(name).outputs[0]].shape[2] for name in cost.ops)
    out = []
    for r in range(1, height + 1):
        kept = at_steps(g, cost, acc, r)
        if kept.footprint_bytes <= acc.buffer_bytes:
            out.append(("kept", r, map_group(g, kept, acc, hierarchy)))
        again = schedule(g, cost, acc, r)
        if again.footprint_bytes <= acc.buffer_bytes:
            out.append(("recomputed", r, recompute_mapping(g, cost, acc, hierarchy, again)))
    return out


def one_group(kinds, size, buffer_bytes):
    g, acc = chain(kinds, size), small(buffer_bytes)
    plan = engine.fuse(g, acc, method="optimus")
    (cost,) = plan.costs
    assert len(cost.ops) == len(kinds) and cost.row_steps > 1
    return g, acc, plan, cost


@pytest.mark.parametrize("kinds, size, buffer_bytes", CASES)
@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_the_chosen_mapping_is_the_least_of_every_band_count_kept_or_recomputed(kinds, size, buffer_bytes, objective):
    g, acc, plan, cost = one_group(kinds, size, buffer_bytes)
    options = every_option(g, cost, acc)
    score = SCORES[objective]
    best = min(score(m.total_pj, m.latency_s) for _, _, m in options)
    mapped = map_plan(g, plan, acc, objective=objective)
    (chosen,) = mapped.groups
    assert score(chosen.total_pj, chosen.latency_s) == pytest.approx(best, rel=1e-12)
    assert any(chosen == m for _, _, m in options)  # one of them, not a price of its own
    bound = plan_bound(g, plan, mapped, acc)
    assert all(m.total_pj >= bound.bound_pj * (1 - 1e-12) for _, _, m in options)
    assert 0 <= bound.gap and bound.mapped_pj == pytest.approx(chosen.total_pj)
    kept = map_plan(g, plan, acc)  # DRAM bytes: fusion's bands, halos kept
    assert (kept.groups[0].halos, kept.groups[0].row_steps, kept.dram_bytes) == ("kept", cost.row_steps,
                                                                                  plan.dram_bytes)


@pytest.mark.parametrize("kinds, size, buffer_bytes, fusions, best", MORE_BANDS)
def test_the_energy_objective_keeps_the_halos_in_more_bands_where_that_costs_less(kinds, size, buffer_bytes, fusions,
                                                                                  best):
    g, acc, plan, cost = one_group(kinds, size, buffer_bytes)
    assert cost.row_steps == fusions
    (chosen,) = map_plan(g, plan, acc, objective="energy").groups
    (kept,) = map_plan(g, plan, acc).groups
    assert (chosen.halos, chosen.row_steps) == ("kept", best)
    assert chosen.total_pj < kept.total_pj and chosen.recomputed_macs == 0
    assert chosen.dram_bytes == kept.dram_bytes  # weights beside the band: the same bytes in more bands
    assert chosen.footprint_bytes <= kept.footprint_bytes


def test_llamas_mlp_group_runs_13_bands_for_less_energy_and_4_times_the_weight_traffic():
    """Llama-3-8B prefill on the optimus preset at 8 MB: fusion runs each gate/up/mul group in 3 bands of 683 tokens;
    the energy objective keeps its halos in 13 bands of 158 (each projection's weights read from DRAM 13 times, not 3:
    176 M -> 761 M words each) for 10 % less energy (the buffer reads of a band of 683 rows blocked on the array)."""
    g = engine.load_network("llama3_8b_prefill")
    acc = engine.Accelerator.preset("optimus").with_buffer(8 * 1024 * 1024)
    ops = tuple(f"model.layers.0.mlp.{name}" for name in ("gate_proj", "up_proj", "mul"))
    cost = engine.fusion.group_cost(g, ops, acc)
    assert cost.row_steps == 3 and not cost.params_resident
    hierarchy = Hierarchy.from_accelerator(acc)
    kept = map_group(g, cost, acc, hierarchy)
    best = min(choices(g, cost, acc, hierarchy), key=lambda m: m.total_pj)
    assert (best.halos, best.row_steps) == ("kept", 13)
    weights = [sum(lv.reads for lv in m.nest(ops[0]).levels if lv.kind == "dram") for m in (kept, best)]
    assert weights == [176_074_794, 761_133_445]
    assert best.total_pj / 1e9 == pytest.approx(1854.150, abs=1e-3) and kept.total_pj / 1e9 == pytest.approx(
        2060.638, abs=1e-3)


@pytest.mark.parametrize("network, buffer_bytes", [("resnet50", 512 * 1024), ("mobilenet_v2", 1024 * 1024)])
def test_at_steps_is_fusions_record_at_its_own_count_and_never_grows_with_more(network, buffer_bytes):
    g = engine.load_network(network)
    acc = engine.Accelerator.preset("optimus").with_buffer(buffer_bytes)
    plan = engine.fuse(g, acc, method="optimus")
    fused = [c for c in plan.costs if c.schedule == "fused" and len(c.ops) > 1]
    assert len(fused) > 3
    for cost in fused:
        assert at_steps(g, cost, acc, cost.row_steps) == cost
        more = [at_steps(g, cost, acc, r) for r in range(cost.row_steps, cost.row_steps + 4)]
        assert all(a.footprint_bytes >= b.footprint_bytes for a, b in zip(more, more[1:]))
        assert {(m.fmap_in_bytes, m.fmap_out_bytes) for m in more} == {(cost.fmap_in_bytes, cost.fmap_out_bytes)}
        once = cost.param_bytes if cost.params_resident else cost.param_bytes // cost.subgroups
        assert [m.param_bytes for m in more] == [once if cost.params_resident else once * m.subgroups for m in more]


def test_at_steps_names_what_is_wrong():
    g, acc, _, cost = one_group(("conv", "conv"), 6, 288)
    with pytest.raises(EngineError, match="at least one row step"):
        at_steps(g, cost, acc, 0)
