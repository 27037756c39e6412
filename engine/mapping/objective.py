"""`refine`: a fusion plan improved for energy, latency or energy-delay product, every group priced by its mapping.

Fusion's searches minimise DRAM bytes. The mapping prices a group in energy and time too: a band is a smaller
layer than the whole (the array's multicast reuses less), and a group's time is the larger of its compute and its
DRAM time, so fusing a memory-bound group with a compute-bound one hides one behind the other. `refine` starts from
a method's plan and climbs: at each step it takes the move that lowers the objective most, of merging two groups
next to each other in the execution order (the merged group runs where they ran: no cycle can form) and splitting
a group into a first part and the rest in topological order; a move must leave connected groups that fit. It stops
when no move helps or after `WORK` group mappings. The result is a local optimum of the objective ("refined"), not
a proven one.
"""

from __future__ import annotations

import time

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.errors import EngineError
from engine.fusion import FusionPlan
from engine.fusion.cost import Capacity, model_of
from engine.fusion.memo import Memo
from engine.fusion.plan import build_plan, execution_order
from engine.fusion.sized import SizedModel, of
from engine.graph import Graph
from engine.mapping.nest import nest_memo
from engine.mapping.plan import OBJECTIVES, SCORES, check_objective, map_group

__all__ = ["OBJECTIVES", "check_objective", "refine"]
WORK = 4000  # group mappings one refinement may price


def refine(graph: Graph, plan: FusionPlan, acc: Accelerator, objective: str, *, work: int = WORK,
           mapped: Memo | None = None) -> FusionPlan:
    """`plan` (found on `acc`) moved group by group to a local optimum of `objective` (see the module docstring);
    `mapped` (as `map_plan`'s) keeps the band nests of the groups priced for later calls on `acc`."""
    check_objective(objective)
    if objective == "dram_bytes":
        return plan
    start = time.perf_counter()
    at = of(model_of(graph, acc), Capacity.of(acc))
    price = _Prices(graph, at, acc, mapped or Memo(1))
    score = SCORES[objective]
    position = graph.position
    order = execution_order(at.model, [sum(1 << position[name] for name in group) for group in plan.groups])
    while price.evaluated < work:
        held = {m: price.sure(m) for m in order}
        energy, latency = sum(e for e, _ in held.values()), sum(t for _, t in held.values())
        best, best_order = score(energy, latency), None
        for old, new in _moves(at, order):
            if price.evaluated >= work:
                break
            costs = [price(m) for m in new]
            if any(c is None for c in costs):
                continue
            e = energy - sum(held[m][0] for m in old) + sum(c[0] for c in costs if c)
            t = latency - sum(held[m][1] for m in old) + sum(c[1] for c in costs if c)
            if score(e, t) < best * (1 - 1e-9):
                best, best_order = score(e, t), _replace(order, old, new)
        if best_order is None:
            break
        order = best_order
    return build_plan(at, order, method=plan.method, buffer_bytes=plan.buffer_bytes,
                      evaluated=plan.groups_evaluated + price.evaluated,
                      seconds=plan.search_seconds + time.perf_counter() - start, status="refined")


class _Prices:
    """(energy pJ, latency s) of each group's mapping, by mask, counting the groups priced; None where it cannot run."""

    def __init__(self, graph: Graph, at: SizedModel, acc: Accelerator, mapped: Memo):
        self.graph, self.at, self.acc = graph, at, acc
        self.hierarchy = Hierarchy.from_accelerator(acc)
        self.nests = nest_memo(mapped, acc, self.hierarchy)  # band nests of the groups priced: most ops recur in many
        self.known: dict[int, tuple[float, float] | None] = {}
        self.evaluated = 0

    def __call__(self, mask: int) -> tuple[float, float] | None:
        if mask not in self.known:
            self.evaluated += 1
            cost = self.at.record(mask) if self.at.model.is_connected(mask) else None
            mapped = None if cost is None else map_group(self.graph, cost, self.acc, self.hierarchy, nests=self.nests)
            self.known[mask] = None if mapped is None else (mapped.total_pj, mapped.latency_s)
        return self.known[mask]

    def sure(self, mask: int) -> tuple[float, float]:
        """The price of a group of a valid plan (one that runs)."""
        found = self(mask)
        if found is None:
            raise EngineError(f"a plan's group of ops {mask:#x} cannot run on chip")
        return found


def _moves(at: SizedModel, order: list[int]):
    """(groups taken out, groups put in) of every merge of two neighbours in `order` and every split of a group."""
    for a, b in zip(order, order[1:]):
        yield (a, b), (a | b,)
    for m in order:
        members = list(at.model.members(m))
        first = 0
        for i in members[:-1]:
            first |= 1 << i
            yield (m,), (first, m & ~first)


def _replace(order: list[int], old: tuple[int, ...], new: tuple[int, ...]) -> list[int]:
    """`order` with the groups `old` (consecutive) replaced by `new`, in place."""
    i = order.index(old[0])
    return [*order[:i], *new, *order[i + len(old):]]
