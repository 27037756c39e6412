"""The result of an allocation: op order, tensor placements, spills and retrievals, and their check."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd

from engine.errors import EngineError
from engine.graph import Graph

STATUSES = ("optimal", "feasible", "time_limit", "infeasible")


class Placement(NamedTuple):
    """Tensor `tensor` sits on chip at `address` (bytes) for steps `first_step`..`last_step` inclusive."""

    tensor: str
    first_step: int
    last_step: int
    address: int
    size: int


@dataclass(frozen=True)
class Allocation:
    """Schedule, scratchpad placement and spill/retrieve decisions for one graph and budget.

    Timestep t runs `order[t]`. `spills` and `retrievals` list only the non-compulsory
    transfers as (tensor, step) pairs: a spill at step s writes a tensor that was on chip
    at s-1 to DRAM (it is off chip at s); a retrieval at step s brings it back for step s.
    The first load of a network input (or weight) and the write-back of a network output
    are compulsory and not listed. `offchip_bytes` sums the listed transfers (COSMA Eq. 12);
    `peak_bytes` is the most bytes on chip at any one step. A result without a plan
    (status "infeasible", or "time_limit" with no solution found) has an empty `order` and
    says why in `message`. `gap` is the relative gap (cost - bound) / cost to the best proven
    lower bound, the solver's or the spill bound of `bound.py` (None if unknown).
    """

    order: tuple[str, ...]
    placements: tuple[Placement, ...]
    spills: tuple[tuple[str, int], ...]
    retrievals: tuple[tuple[str, int], ...]
    offchip_bytes: int
    peak_bytes: int
    status: str
    gap: float | None
    solve_time_s: float
    method: str
    budget_bytes: int
    message: str = ""
    include_params: bool = False
    word_bits: int = 16
    graph: Graph | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise EngineError(f"allocation status must be one of {STATUSES}, got '{self.status}'")

    @property
    def has_plan(self) -> bool:
        return bool(self.order)

    def validate(self) -> None:
        """Check the plan against the graph and budget; raise EngineError naming the first violation."""
        if not self.has_plan:
            if self.status not in ("infeasible", "time_limit") or not self.message:
                raise EngineError(f"{self.method}: status '{self.status}' without a plan or an explanation")
            return
        if self.graph is None:
            raise EngineError("this Allocation carries no graph to validate against")
        _check(self, self.graph)

    def timeline(self) -> pd.DataFrame:
        """Tidy memory timeline: one row per (placement, step) plus one row per spill.

        Columns: tensor, step, address, size, event ("create", "load", "retrieve", "keep",
        "spill"), and placement (index into `placements`, so one tensor's separate stays
        can be told apart).
        """
        cols = ["tensor", "step", "address", "size", "event", "placement"]
        if not self.has_plan:
            return pd.DataFrame(columns=cols)
        if self.graph is None:
            raise EngineError("this Allocation carries no graph to tell created tensors from loaded ones")
        starts = _start_events(self, self.graph)
        rows = []
        for i, p in enumerate(self.placements):
            for step in range(p.first_step, p.last_step + 1):
                event = starts[i] if step == p.first_step else "keep"
                rows.append((p.tensor, step, p.address, p.size, event, i))
        ends = {(p.tensor, p.last_step + 1): i for i, p in enumerate(self.placements)}
        for tensor, step in self.spills:
            i = ends[(tensor, step)]
            rows.append((tensor, step, self.placements[i].address, self.placements[i].size, "spill", i))
        return pd.DataFrame(rows, columns=cols).sort_values(["step", "address"], kind="stable").reset_index(drop=True)


def needs(graph: Graph, op: str, include_params: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tensors `op` reads, tensors it writes); weights count as reads when parameters are placed."""
    o = graph.op(op)
    reads = tuple(dict.fromkeys(o.inputs + (o.weights if include_params else ())))
    return reads, tuple(dict.fromkeys(o.outputs))


def op_table(graph: Graph, order, *, include_params: bool, word_bits: int):
    """(`needs` of each op of `order`, tensor -> bytes for every tensor they touch): one pass that the
    requirement scan and the plans built without a search share."""
    steps = [needs(graph, op, include_params) for op in order]
    tensors = graph.tensors
    sizes = {a: tensors[a].nbytes(word_bits) for reads, writes in steps for a in reads + writes}
    return steps, sizes


def peak_bytes(placements, steps: int) -> int:
    """The most bytes on chip at any of `steps` steps of `placements`."""
    return peak_of(((p.first_step, p.last_step, p.size) for p in placements), steps)


def live_per_step(spans, steps: int) -> list[int]:
    """The weight live at each of `steps` steps, of (first step, last step, weight) spans (one that ends before it
    begins adds nothing): a running sum of what each step brings and lets go, linear however long the spans are."""
    change = [0] * (steps + 1)
    for first, last, weight in spans:
        change[first] += weight
        change[last + 1] -= weight
    return list(itertools.accumulate(change[:steps]))


def peak_of(spans, steps: int) -> int:
    """The most bytes live at any of `steps` steps, of (first step, last step, bytes) spans."""
    return max(live_per_step(spans, steps), default=0)


def _start_events(alloc: Allocation, g: Graph) -> list[str]:
    """How each placement begins: created by its op, loaded (compulsory), or retrieved."""
    created: dict[str, int] = {}
    for t, op in enumerate(alloc.order):
        for a in g.op(op).outputs:
            created[a] = t
    back = set(alloc.retrievals)
    return ["create" if created.get(p.tensor) == p.first_step else
            "retrieve" if (p.tensor, p.first_step) in back else "load" for p in alloc.placements]


def _check(alloc: Allocation, g: Graph) -> None:
    """The invariants DESIGN.md states for an Allocation, each with its own message."""
    name = alloc.method
    order = alloc.order
    if sorted(order) != sorted(op.name for op in g.ops):
        raise EngineError(f"{name}: order must run every op of '{g.name}' exactly once")
    step_of = {op: t for t, op in enumerate(order)}
    for op in order:
        for pred in filter(None, map(g.producer, g.op(op).inputs)):
            if step_of[pred] > step_of[op]:
                raise EngineError(f"{name}: op '{op}' runs at step {step_of[op]} before its producer '{pred}'")
    n = len(order)
    by_tensor: dict[str, list[Placement]] = {}
    for p in alloc.placements:
        size = g.tensor(p.tensor).nbytes(alloc.word_bits)
        if p.size != size:
            raise EngineError(f"{name}: placement of '{p.tensor}' has size {p.size}, the tensor has {size} bytes")
        if not 0 <= p.first_step <= p.last_step < n:
            raise EngineError(f"{name}: placement of '{p.tensor}' spans steps {p.first_step}..{p.last_step}")
        if p.address < 0 or p.address + p.size > alloc.budget_bytes:
            raise EngineError(f"{name}: '{p.tensor}' at {p.address}+{p.size} lies outside the budget "
                              f"{alloc.budget_bytes}")
        by_tensor.setdefault(p.tensor, []).append(p)
    for stays in by_tensor.values():
        stays.sort(key=lambda p: p.first_step)
        for a, b in zip(stays, stays[1:]):
            if b.first_step <= a.last_step:
                raise EngineError(f"{name}: '{a.tensor}' has two placements at step {b.first_step}")
    _check_uses(alloc, step_of, by_tensor)
    _check_transfers(alloc, step_of, by_tensor)
    _check_overlap(alloc)
    peak = peak_bytes(alloc.placements, n)
    if alloc.peak_bytes != peak:
        raise EngineError(f"{name}: peak_bytes {alloc.peak_bytes} but {peak} bytes are on chip at the peak")


def _covering(stays: list[Placement], t: int) -> Placement | None:
    """The stay of `stays` (sorted by first step, none overlapping) on chip at step `t`, or None."""
    k = bisect.bisect_right(stays, t, key=lambda p: p.first_step) - 1
    return stays[k] if k >= 0 and stays[k].last_step >= t else None


def _check_uses(alloc, step_of, by_tensor) -> None:
    """Every op finds its inputs on chip and creates its outputs on chip at its own step."""
    g, name = alloc.graph, alloc.method
    for op, t in step_of.items():
        reads, writes = needs(g, op, alloc.include_params)
        for a in reads:
            if _covering(by_tensor.get(a, []), t) is None:
                raise EngineError(f"{name}: op '{op}' at step {t} reads '{a}', which is not on chip")
        for a in writes:
            stays = by_tensor.get(a, [])
            if not stays or stays[0].first_step != t:
                raise EngineError(f"{name}: op '{op}' at step {t} must create '{a}' on chip at that step")


def _check_transfers(alloc, step_of, by_tensor) -> None:
    """Every later stay starts with a listed retrieval of a tensor DRAM holds; the bytes add up."""
    g, name = alloc.graph, alloc.method
    outputs, produced = set(g.outputs), {a: step_of[g.producer(a)] for a in by_tensor if g.producer(a)}
    spills, back = dict(), set(alloc.retrievals)
    for a, s in alloc.spills:
        if a in spills:
            raise EngineError(f"{name}: '{a}' is spilled twice; DRAM already holds it after the first")
        if a not in produced or a in outputs:
            raise EngineError(f"{name}: spill of '{a}' listed, but only intermediate tensors need a spill")
        if not any(p.last_step == s - 1 for p in by_tensor[a]):
            raise EngineError(f"{name}: '{a}' is spilled at step {s} but was not on chip at step {s - 1}")
        spills[a] = s
    for a, stays in by_tensor.items():
        for i, p in enumerate(stays):
            if a in produced and i == 0:
                continue  # created: checked with the op's uses
            if a not in produced and i == 0 and (a, p.first_step) not in back:
                continue  # compulsory first load of a network input or weight
            if (a, p.first_step) not in back:
                raise EngineError(f"{name}: '{a}' reappears on chip at step {p.first_step} without a retrieval")
            if a in produced and a not in outputs and spills.get(a, len(step_of)) > p.first_step:
                raise EngineError(f"{name}: '{a}' is retrieved at step {p.first_step} before any spill wrote it to DRAM")
    for a, s in alloc.retrievals:
        if not any(p.first_step == s for p in by_tensor.get(a, [])):
            raise EngineError(f"{name}: retrieval of '{a}' at step {s} does not start a placement")
    lost = [a for a, stays in by_tensor.items() if a in produced and a not in outputs and a not in spills
            and len(stays) > 1]
    if lost:
        raise EngineError(f"{name}: '{lost[0]}' leaves the chip unspilled and comes back")
    total = sum(g.tensor(a).nbytes(alloc.word_bits) for a, _ in alloc.spills + alloc.retrievals)
    if total != alloc.offchip_bytes:
        raise EngineError(f"{name}: offchip_bytes is {alloc.offchip_bytes}, the listed transfers add to {total}")


def _check_overlap(alloc) -> None:
    """No two placements share an address at a common step: a sweep over steps keeping the stays on chip sorted
    by address (they never overlap, so a new stay need only be checked against its two neighbours)."""
    arrivals = sorted(alloc.placements, key=lambda p: (p.first_step, p.address))
    departures = sorted(alloc.placements, key=lambda p: p.last_step)
    here: list[tuple[int, int, Placement]] = []  # (address, id, placement) of the stays on chip
    gone = 0
    for p in arrivals:
        while gone < len(departures) and departures[gone].last_step < p.first_step:
            q = departures[gone]
            del here[bisect.bisect_left(here, (q.address, id(q)))]
            gone += 1
        i = bisect.bisect_left(here, (p.address, id(p)))
        below = here[i - 1][2] if i else None
        above = here[i][2] if i < len(here) else None
        for a, b in ((below, p), (p, above)):
            if a is not None and b is not None and a.address + a.size > b.address:
                raise EngineError(f"{alloc.method}: '{a.tensor}' and '{b.tensor}' overlap in address at step "
                                  f"{max(a.first_step, b.first_step)}")
        here.insert(i, (p.address, id(p), p))
