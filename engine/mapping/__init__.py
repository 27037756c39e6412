"""One mapping of a fusion plan from DRAM to the MACs: each fused group's tile loop at the level that keeps its
tiles, each op's loop nest below it on the PE array, priced in energy per level and in latency.

`refine(graph, plan, acc, objective)` moves a plan's groups toward the least energy, latency or energy-delay
product of its mapping. `map_plan(graph, plan, acc)` returns a `MappedPlan` (its `GroupMapping`s, each with its ops' `OpNest`s, and the
plan's `EnergyBreakdown`); `engine.evaluate(..., access_model="mapping")` prices every method's plan with it.
`plan_bound(graph, plan, mapped, acc)` bounds each fused group's energy over every band count that fits, and reports
the mapping's gap to it. With an objective other than DRAM bytes, `map_plan` lets each fused group keep its halos in
more bands than fusion's or recompute them instead (LoopTree's choice, `recompute`) where that lowers the objective.
"""

from engine.mapping.bound import GroupBound, PlanBound, group_bound, plan_bound
from engine.mapping.nest import OpNest, below_fusion_level, fusion_level, lone_nest, tile_nest
from engine.mapping.objective import OBJECTIVES, refine
from engine.mapping.plan import GroupMapping, MappedPlan, choices, kept_options, map_group, map_plan, recompute_options
from engine.mapping.recompute import RecomputeSchedule

__all__ = ["OpNest", "GroupMapping", "MappedPlan", "map_plan", "map_group", "lone_nest", "tile_nest", "fusion_level",
           "below_fusion_level", "refine", "OBJECTIVES", "GroupBound", "PlanBound", "group_bound", "plan_bound",
           "recompute_options", "kept_options", "choices", "RecomputeSchedule"]
