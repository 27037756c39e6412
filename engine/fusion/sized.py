"""`SizedModel`: one graph's fusion model at one on-chip capacity, the buffer bound once.

A `FusionModel` holds what does not depend on the buffer (tables, footprints by group);
a `SizedModel` adds the capacity and answers what does: a group's schedule (Eq. 3 at the
largest tile of Eq. 4), its DRAM bytes, whether it fits, its record, a plan's records.
It owns the caches keyed by that capacity (schedules by group, the lower bound, the
on-line size limit) as bounded, thread-safe `Memo`s, so that nothing keyed by a buffer
sits in the model beside what is not, and `clear()` forgets them.

`of(model, cap)` returns the one `SizedModel` the model keeps for `cap` (its
`capacities`), so every caller at that capacity shares its caches; `dram_bytes(model, mask,
cap)` goes through it. It builds on `engine.fusion.cost`'s schedules, which never call back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.errors import EngineError
from engine.fusion import cost
from engine.fusion.memo import Memo
from engine.fusion.model import MEMO_SIZE, FusionModel

_MISSING = object()  # a schedule may be None


@dataclass(frozen=True)
class SizedModel:
    """A graph's `FusionModel` at one `Capacity`, with the caches keyed by that capacity."""

    model: FusionModel
    cap: cost.Capacity
    # group mask -> its cheapest schedule (`cost.compute_schedule`), None where none fits
    schedules: Memo = field(default_factory=lambda: Memo(MEMO_SIZE), compare=False, repr=False)
    # down-set budget -> `bound.LowerBound`; "size limit" -> the on-line variant's largest group (Alg. 3)
    results: Memo = field(default_factory=lambda: Memo(16), compare=False, repr=False)

    def schedule(self, mask: int):
        """The cheapest schedule of the group `mask`, or None when none fits."""
        hit = self.schedules.get(mask, _MISSING)
        return self.schedules.put(mask, cost.compute_schedule(self.model, mask, self.cap)) if hit is _MISSING else hit

    def dram_bytes(self, mask: int) -> int | None:
        """DRAM bytes of the group `mask`, or None when it cannot run on chip."""
        model, cap = self.model, self.cap
        if mask & (mask - 1) and cost.fits(model, mask, cap) and cost.params_stay(model, mask, cap):
            return cost.least_bytes(model, mask)  # Eq. 3 with parameters loaded once
        best = self.schedule(mask)
        return None if best is None else best.dram

    def plan_bytes(self, masks: Iterable[int]) -> int:
        """DRAM bytes of groups that each run (a plan's groups, lone ops), added up; EngineError when one cannot."""
        total = 0
        for mask in masks:
            nbytes = self.dram_bytes(mask)
            if nbytes is None:
                raise EngineError(f"group {[self.model.names[i] for i in self.model.members(mask)]} cannot run "
                                  "on this buffer")
            total += nbytes
        return total

    def fits(self, mask: int) -> bool:
        """Whether the finest tiles of the group fit (monotone as a group grows upward)."""
        return cost.fits(self.model, mask, self.cap)

    def params_stay(self, mask: int) -> bool:
        """Whether the group's parameters stay on chip beside its finest tiles."""
        return cost.params_stay(self.model, mask, self.cap)

    def record(self, mask: int) -> cost.GroupCost | None:
        """The group's `GroupCost` from the Python cost model (`path` "python"), or None when it cannot run."""
        return cost.record(self.model, mask, self.cap, self.schedule(mask))

    def records(self, masks: list[int]) -> list[cost.GroupCost]:
        """A plan's `GroupCost`s, scheduled by the compiled kernel (`cost.records`)."""
        return cost.records(self.model, masks, self.cap)

    def clear(self) -> None:
        """Forget the schedules and results cached at this capacity."""
        self.schedules.clear()
        self.results.clear()


def of(model: FusionModel, cap: cost.Capacity) -> SizedModel:
    """The `SizedModel` the model keeps for `cap` (made on first use), shared by every caller at that capacity."""
    hit = model.capacities.get(cap)
    return model.capacities.put(cap, SizedModel(model, cap)) if hit is None else hit


def dram_bytes(model: FusionModel, mask: int, cap: cost.Capacity) -> int | None:
    """DRAM bytes of the group `mask`, or None when it cannot run on chip (`SizedModel.dram_bytes` at `cap`)."""
    return of(model, cap).dram_bytes(mask)
