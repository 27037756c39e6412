"""A plan that meets the spill bound, when fragmentation allows one: the bound's cover turned into a plan.

The covering ILP of `bound.py` says which surely-live tensors are off chip in which gap
between two of their accesses. Read as a plan, each tensor chosen is spilled once after
the access before its first gap (nothing to write when DRAM holds it or it is a network
output) and retrieved at the read ending each gap; its life is cut there into stays,
each free to take a new address. That is exactly what the cover's objective counts, so
if the stays fit the budget (`packing.arrange`: greedy, then the exact placement ILP)
the plan costs the bound and is optimal. Where fragmentation stops them, that cover is
excluded and the next cheapest one tried, a few times: those plans cost more than the
bound and are only MIP starts.
"""

from __future__ import annotations

import time

import pulp

from engine.allocation import solve
from engine.allocation.bound import END, cover_model
from engine.allocation.packing import arrange
from engine.allocation.place import Stay
from engine.allocation.problem import Problem
from engine.allocation.record import Placement
from engine.allocation.solution import compact

TRIES = 3  # covers tried before giving up


def plan_at_bound(problem: Problem, *, solver: str = "highs", time_limit_s: float = 10.0,
                  tries: int = TRIES) -> tuple[tuple[Placement, ...], list, list] | None:
    """(placements, spills, retrievals) of a plan built from the cheapest cover whose stays fit, within
    `time_limit_s`; None when the problem's order is free or no cover tried fits. A segment's carried-in
    tensors keep their addresses until they first leave; tensors later segments read stay to its end unless
    the cover sends them off (each then charged a retrieval, as Eq. 12 of the segment charges it)."""
    p, deadline = problem, time.perf_counter() + time_limit_s
    if p.order is None:
        return None
    n, pos = len(p.order), {op: t for t, op in enumerate(p.order)}
    accesses = {}  # tensor -> steps it is used at; -1 = on chip before the segment, n = read after it
    for a in p.tensors:
        steps = {pos[r] for r in p.consumers.get(a, ())}
        steps |= {pos[p.producer[a]]} if a in p.producer else set()
        steps |= {-1} if a in p.carry.resident else set()
        steps |= {n} if a in p.keep else set()
        accesses[a] = sorted(steps)
    cover = cover_model(p)
    for k in range(tries):
        chosen = set()
        if cover is not None:
            left = deadline - time.perf_counter()
            if left <= 0 or not solve.run(cover.lp, solver=solver, time_limit_s=left).has_solution:
                return None
            chosen = {key for key, y in cover.off.items() if y.varValue is not None and y.varValue > 0.5}
        stays, spills, retrievals = _cut(p, pos, accesses, chosen)
        pinned = {i: p.carry.resident[a] // p.unit for i, (a, lo, _) in enumerate(stays)
                  if lo == 0 and a in p.carry.resident and accesses[a][0] == -1}
        at = arrange([Stay(a, lo, hi, p.size[a] // p.unit) for a, lo, hi in stays], p.budget // p.unit,
                     pinned=pinned, solver=solver, deadline=deadline)
        if at is not None:
            placed = compact([[a, lo, hi, at[i], pinned.get(i)] for i, (a, lo, hi) in enumerate(stays)],
                             {a: p.size[a] // p.unit for a in p.tensors}, p.unit)
            return placed, spills, retrievals
        if cover is None or not chosen:
            return None
        cover.lp.addConstraint(pulp.lpSum(cover.off[key] for key in chosen) <= len(chosen) - 1, f"not_{k}")
    return None


def cost(problem: Problem, plan) -> int:
    """Eq. 12 of a plan from `plan_at_bound`, in the problem's units: its listed spills and retrievals, and a
    retrieval charged for each tensor later segments read that it leaves off chip."""
    p, (placements, spills, retrievals) = problem, plan
    assert p.order is not None, "plan_at_bound plans a fixed order"
    last = len(p.order) - 1
    kept = {pl.tensor for pl in placements if pl.last_step == last}
    return (sum(p.size[a] // p.unit for a, _ in list(spills) + list(retrievals))
            + sum(p.size[a] // p.unit for a in p.keep - kept))


def _cut(p: Problem, pos: dict, accesses: dict, chosen: set) -> tuple[list, list, list]:
    """Stays (tensor, first, last), spills and retrievals of every tensor, its life cut at the `chosen` gaps.

    A stay starting at a read of a tensor nobody here makes is a load: compulsory the first
    time for a network input or weight (`carry.fresh`), a listed retrieval otherwise.
    """
    n = len(pos)
    ends: dict[str, set[int]] = {}  # tensor -> the steps that end its chosen gaps (its next read, or n)
    for a, rest in chosen:
        ends.setdefault(a, set()).add(min((pos[r] for r in rest if r != END), default=n))
    stays, spills, retrievals = [], [], []
    for a, steps in accesses.items():
        if not steps:
            continue
        written = a in p.carry.host or a in p.free_spill  # DRAM has it, or writing it costs nothing
        lo = steps[0]
        if lo >= 0 and a not in p.producer and a not in p.carry.fresh:
            retrievals.append((a, lo))
        for prev, nxt in zip(steps, steps[1:]):
            if nxt not in ends.get(a, ()):  # a gap is keyed by the reads after it: the first of them ends it
                continue
            if prev >= 0:
                stays.append((a, max(lo, 0), prev))
            if not written:
                spills.append((a, prev + 1))
                written = True
            if nxt < n:
                retrievals.append((a, nxt))
            lo = nxt
        if lo < n and min(steps[-1], n - 1) >= max(lo, 0):
            stays.append((a, max(lo, 0), min(steps[-1], n - 1)))
    return stays, spills, retrievals
