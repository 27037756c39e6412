"""A lower bound on a fused group's energy over every band count that fits, and the gap of its mapping to it.

A fused group runs fusion's bands (the least DRAM traffic), so its mapping is exact for those bands only. Fusion
runs a group in the fewest row steps whose tiles fit (`engine.fusion.cost._fewest_steps`; the footprint never grows
with the steps), so every band count that fits is at least the plan's. The energy of each op's nests (every level, and
the DRAM reads of weights that pass by, once per band) depends on the band count r only through that op's own band
(ceil(H / r) of its H rows, blocked exactly below the fusion level, `nest.tile_nest`); the group's other terms
(passes over the buffer, its feature maps' DRAM traffic, which fusion's line buffer moves once) do not depend on r.
So the least energy of the group over every such r is at least the sum over its ops of each op's own least over r,
which is this bound: no band count that fits, with any of the nests the
mapping may give a band (the blocking's exact nests, the two-nest SPLITS alternative), prices the group below it.
The whole layer blocked as one band is not such a bound (docs/mapping.md): a band of fewer rows can cost less per
row, and one band does not fit.

Where the mapping may choose (an objective other than DRAM bytes, `plan.map_plan`), the bound covers every option.
The halos kept in more bands than fusion's (`plan.kept_options`) are the band counts above; their terms outside the
nests (streamed parameters once per band) take their least over those counts too. The recompute schedules that fit
(`recompute.fitting`) are few and each is priced exactly, so the bound is the least of the kept one and of each.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.fusion.cost import GroupCost
from engine.fusion.memo import Memo
from engine.fusion.plan import FusionPlan
from engine.graph import Graph
from engine.mapping.nest import NESTS, OpNest, band_counts, height_of, tile_nest
from engine.mapping.plan import GroupMapping, MappedPlan, kept_options, map_group, recompute_mapping, streams
from engine.mapping.recompute import fitting


@dataclass(frozen=True)
class GroupBound:
    """A group's energy as mapped (fusion's bands) and the least it can reach over every band count that fits.

    `best_steps` is, per op of a fused group, the band count at which its nests cost least (ops may differ: the
    bound is the sum of each op's least). A lone op counts as mapped (`bound_pj == mapped_pj`): its blocking alone
    is exact on the whole hierarchy, and its banded option keeps the plan's bands.
    """

    ops: tuple[str, ...]
    mapped_pj: float
    bound_pj: float
    best_steps: tuple[tuple[str, int], ...] = ()

    @property
    def gap_pj(self) -> float:
        return self.mapped_pj - self.bound_pj


@dataclass(frozen=True)
class PlanBound:
    """Every group's bound of a mapped plan, and the plan's energy against their sum."""

    groups: tuple[GroupBound, ...]

    @property
    def mapped_pj(self) -> float:
        return sum(g.mapped_pj for g in self.groups)

    @property
    def bound_pj(self) -> float:
        return sum(g.bound_pj for g in self.groups)

    @property
    def gap(self) -> float:
        """The mapping's energy above the bound, as a share of the bound."""
        return self.mapped_pj / self.bound_pj - 1 if self.bound_pj else 0.0


def nest_pj(nest: OpNest) -> float:
    """An op's nests' energy: every level (streamed weights' DRAM reads included) and the MACs."""
    return sum(lv.energy_pj for lv in nest.levels) + nest.mac_pj


def op_least(graph: Graph, cost: GroupCost, name: str, acc: Accelerator, hierarchy: Hierarchy, *,
             nests: Memo | None = None) -> tuple[float, int]:
    """(pJ, band count) of the op's least nest energy with the halos kept, over every band count from its group's to
    one band per row; its nests depend only on the band's height ceil(H / r), so one count per height (about
    2 sqrt(H) of them, `band_counts`)."""
    op = graph.op(name)
    height = height_of(graph.tensors[op.outputs[0]].shape)
    rows = dict(cost.tile_rows).get(name, 1 << 62)
    return min((nest_pj(tile_nest(graph, op, acc, hierarchy, rows, r, cost.batch_tile,
                                  weights_streamed=streams(graph, name, cost), recompute=(h, height), memo=nests)), r)
               for h, r in band_counts(height, cost.row_steps).items())


def group_bound(graph: Graph, cost: GroupCost, mapping: GroupMapping, acc: Accelerator,
                hierarchy: Hierarchy | None = None, *, choices: bool = False, nests: Memo | None = None) -> GroupBound:
    """The bound of one group's mapping (`mapping = map_group(graph, cost, acc, hierarchy)`, or the schedule
    `map_plan` chose for it), over every band count that fits with the halos kept and, with `choices`, every
    recompute schedule that fits too (see the module). `nests`: band nests made before (`nest.nest_memo`)."""
    mapped = mapping.total_pj
    if mapping.schedule != "fused":
        return GroupBound(cost.ops, mapped, mapped)
    hierarchy = hierarchy or Hierarchy.from_accelerator(acc)
    own = (mapping.halos, mapping.row_steps) == ("kept", cost.row_steps)
    kept = mapping if own else map_group(graph, cost, acc, hierarchy, nests=nests)
    options = (kept, *(kept_options(graph, cost, acc, hierarchy, nests=nests) if choices else ()))
    # what no band count changes, at its least over the counts: passes over the buffer, feature maps, parameters
    fixed = min(o.total_pj - sum(nest_pj(n) for n in o.nests if n.layer is not None) for o in options)
    least = {n.op: op_least(graph, cost, n.op, acc, hierarchy, nests=nests) for n in kept.nests if n.layer is not None}
    bound = GroupBound(cost.ops, mapped, fixed + sum(pj for pj, _ in least.values()),
                       tuple((op, r) for op, (_, r) in least.items()))
    again = (recompute_mapping(graph, cost, acc, hierarchy, s, nests=nests) for s in fitting(graph, cost, acc)) \
        if choices else ()
    cheapest = min(again, key=lambda o: o.total_pj, default=None)  # the recompute schedules, each priced exactly
    if cheapest is None or cheapest.total_pj >= bound.bound_pj:
        return bound
    return GroupBound(cost.ops, mapped, cheapest.total_pj, tuple((op, cheapest.row_steps) for op, _ in bound.best_steps))


def plan_bound(graph: Graph, plan: FusionPlan, mapped: MappedPlan, acc: Accelerator) -> PlanBound:
    """Every group's bound of `mapped` (`map_plan(graph, plan, acc, objective=...)`), in the plan's order, over the
    schedules its objective lets the mapping choose (recompute too, unless it is "dram_bytes"). Computed on demand,
    not by `map_plan`: each fused op is blocked once per distinct band height (about 2 sqrt(H) heights)."""
    hierarchy = Hierarchy.from_accelerator(acc)
    again = mapped.objective != "dram_bytes"
    nests = Memo(NESTS)  # the groups' band nests, shared by alike ops and the counts of one band height
    return PlanBound(tuple(group_bound(graph, cost, group, acc, hierarchy, choices=again, nests=nests)
                           for cost, group in zip(plan.costs, mapped.groups)))
