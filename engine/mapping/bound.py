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

Where the mapping may recompute halos (an objective other than DRAM bytes, `plan.map_plan`), the bound covers those
schedules too. A recompute schedule runs each op's nest for its tallest band of h rows R / h times, R >= H the rows
it computes (`recompute.schedule`), so its nests cost at least H / h times one band's, which is what the op's nests
cost at band height h without recomputing: the least over the heights also takes each fitting recompute schedule's
band height of the op. Its other terms differ from fusion's only where it reads fewer group-input rows or streams its
weights fewer times, so the bound takes the least of those terms over fusion's schedule and every recompute one.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.fusion.cost import GroupCost
from engine.fusion.plan import FusionPlan
from engine.graph import Graph
from engine.mapping.nest import OpNest, height_of, tile_nest
from engine.mapping.plan import GroupMapping, MappedPlan, map_group, recompute_mapping, streams
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


def op_least(graph: Graph, cost: GroupCost, name: str, acc: Accelerator, hierarchy: Hierarchy,
             heights: tuple[int, ...] = ()) -> tuple[float, int]:
    """(pJ, band count) of the op's least nest energy over every band count from its group's to one band per
    row, and over the band `heights` given (recompute schedules' tallest bands); its nests depend only on the band's
    height ceil(H / r), so one count per height (about 2 sqrt(H) of them)."""
    op = graph.op(name)
    height = height_of(graph.tensors[op.outputs[0]].shape)
    counts = {-(-height // r): r for r in range(height, cost.row_steps - 1, -1)} or {1: cost.row_steps}
    for h in heights:
        counts.setdefault(min(h, height), -(-height // max(1, h)))
    rows = dict(cost.tile_rows).get(name, 1 << 62)
    return min((nest_pj(tile_nest(graph, op, acc, hierarchy, rows, r, cost.batch_tile,
                                  weights_streamed=streams(graph, name, cost), recompute=(h, height))), r)
               for h, r in counts.items())


def group_bound(graph: Graph, cost: GroupCost, mapping: GroupMapping, acc: Accelerator,
                hierarchy: Hierarchy | None = None, *, recompute: bool = False) -> GroupBound:
    """The bound of one group's mapping (`mapping = map_group(graph, cost, acc, hierarchy)`, or the schedule
    `map_plan` chose for it), over fusion's band counts and, with `recompute`, every recompute schedule that fits
    (see the module)."""
    mapped = mapping.total_pj
    if mapping.schedule != "fused":
        return GroupBound(cost.ops, mapped, mapped)
    hierarchy = hierarchy or Hierarchy.from_accelerator(acc)
    kept = mapping if mapping.halos == "kept" else map_group(graph, cost, acc, hierarchy)
    schedules = fitting(graph, cost, acc) if recompute else ()
    options = (kept, *(recompute_mapping(graph, cost, acc, hierarchy, s) for s in schedules))
    # what no band count changes, at its least over the schedules: passes over the buffer, feature maps, parameters
    fixed = min(o.total_pj - sum(nest_pj(n) for n in o.nests if n.layer is not None) for o in options)
    least = {n.op: op_least(graph, cost, n.op, acc, hierarchy, tuple(dict(s.band_rows)[n.op] for s in schedules))
             for n in kept.nests if n.layer is not None}
    return GroupBound(cost.ops, mapped, fixed + sum(pj for pj, _ in least.values()),
                      tuple((op, r) for op, (_, r) in least.items()))


def plan_bound(graph: Graph, plan: FusionPlan, mapped: MappedPlan, acc: Accelerator) -> PlanBound:
    """Every group's bound of `mapped` (`map_plan(graph, plan, acc, objective=...)`), in the plan's order, over the
    schedules its objective lets the mapping choose (recompute too, unless it is "dram_bytes"). Computed on demand,
    not by `map_plan`: each fused op is blocked once per distinct band height (about 2 sqrt(H) heights)."""
    hierarchy = Hierarchy.from_accelerator(acc)
    again = mapped.objective != "dram_bytes"
    return PlanBound(tuple(group_bound(graph, cost, group, acc, hierarchy, recompute=again)
                           for cost, group in zip(plan.costs, mapped.groups)))
