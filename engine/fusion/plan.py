"""`FusionPlan`: the groups a search chose, in execution order, with their costs and totals."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.errors import EngineError
from engine.fusion.cost import GroupCost, runs_alone, smallest_buffer_bytes
from engine.fusion.model import FusionModel
from engine.fusion.sized import SizedModel


@dataclass(frozen=True)
class FusionPlan:
    """A partition of the graph's ops into fused groups, in an order they can run, with DRAM traffic.

    `dram_bytes` is the sum of the groups' `GroupCost.dram_bytes`, split into
    `fmap_in_bytes + fmap_out_bytes + param_bytes`. `status` says what the result
    is: "optimal" (minimum over the whole fusion space), "restricted" (best a
    baseline or the on-line variant finds in its own smaller space), "unfused", or
    "beam" (the down-set search outgrew `optimus.Limits` and kept its most promising
    states, and `fuse` re-solved optimus's window by window unless `polish=False`: a valid plan,
    not a proven optimum), "windowed" (a graph of more than `windowed.WINDOW_ABOVE` ops fused window by window,
    `engine.fusion.windowed`: a valid plan whose groups never cross a window's edge), or "refined" (moved from a method's plan to a local optimum of the energy,
    latency or energy-delay product of its mapping, `engine.mapping.refine`). `lower_bound_bytes` is a proven lower bound on the least
    traffic over the whole fusion space: `dram_bytes` itself when "optimal", the windows
    bound of `engine.fusion.bound` when "beam" or "windowed", None otherwise.
    """

    method: str
    groups: tuple[tuple[str, ...], ...]
    costs: tuple[GroupCost, ...]
    dram_bytes: int
    fmap_in_bytes: int
    fmap_out_bytes: int
    param_bytes: int
    buffer_bytes: int
    groups_evaluated: int
    search_seconds: float
    status: str
    lower_bound_bytes: int | None = None

    @property
    def gap(self) -> float | None:
        """(dram_bytes - bound) / dram_bytes, the convention of MIP solvers and of `Allocation.gap` (0 when optimal)."""
        if self.lower_bound_bytes is None:
            return None
        return (self.dram_bytes - self.lower_bound_bytes) / self.dram_bytes if self.dram_bytes else 0.0

    def group_of(self, op: str) -> int:
        """Index in `groups` of the group holding `op`."""
        for g, ops in enumerate(self.groups):
            if op in ops:
                return g
        raise EngineError(f"op '{op}' is in no group of this plan")


def build_plan(at: SizedModel, masks: list[int], *, method: str, buffer_bytes: int,
               evaluated: int, seconds: float, status: str, lower_bound: int | None = None) -> FusionPlan:
    """The plan of the groups `masks`, put in an order that respects every data dependency.

    `lower_bound`: a proven bound for a "beam" plan; an "optimal" plan is its own bound.
    """
    costs = tuple(at.records(execution_order(at.model, masks)))
    total = sum(c.dram_bytes for c in costs)
    return FusionPlan(method, tuple(c.ops for c in costs), costs, total,
                      sum(c.fmap_in_bytes for c in costs), sum(c.fmap_out_bytes for c in costs),
                      sum(c.param_bytes for c in costs), buffer_bytes, evaluated, seconds, status,
                      total if status == "optimal" else lower_bound)


def execution_order(model: FusionModel, masks: list[int], *, rank: Callable[[int], int] | None = None) -> list[int]:
    """The groups in a topological order of the contracted graph (stable: least `rank(mask)`, else first op, first)."""
    owner = {i: g for g, m in enumerate(masks) for i in model.members(m)}
    after: list[set[int]] = [set() for _ in masks]
    waiting = [0] * len(masks)
    for g, m in enumerate(masks):
        for i in model.members(m):
            for s in model.members(model.succ[i]):
                h = owner[s]
                if h != g and h not in after[g]:
                    after[g].add(h)
                    waiting[h] += 1
    first = [rank(m) if rank else (m & -m).bit_length() - 1 for m in masks]
    ready = [(first[g], g) for g in range(len(masks)) if not waiting[g]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, g = heapq.heappop(ready)
        order.append(masks[g])
        for h in after[g]:
            waiting[h] -= 1
            if not waiting[h]:
                heapq.heappush(ready, (first[h], h))
    if len(order) != len(masks):
        raise EngineError("the groups form a cycle once contracted; no execution order exists")
    return order


def check_runnable(at: SizedModel, acc: Accelerator) -> None:
    """Raise an actionable error when some op cannot run even alone on this buffer (a fit test, no schedule costed):
    it names the op (a group of one: a larger group is formed only where it fits), the level and the bytes."""
    model, cap = at.model, at.cap
    for i in range(model.n):
        if not runs_alone(model, i, cap):
            level = Hierarchy.from_accelerator(acc).on_chip[-1].name  # the level fusion's groups keep their tiles in
            need = smallest_buffer_bytes(model, i)
            raise EngineError(f"accelerator '{acc.name}': op '{model.names[i]}' cannot run even alone on "
                              f"{cap.fmap * model.word_bits // 8} bytes of fmap buffer (memory level '{level}'); "
                              f"it needs at least {need} bytes there (use a larger buffer)")
