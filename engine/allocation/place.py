"""Addresses for stays whose steps are already fixed, by a small ILP (dynamic storage allocation).

Once the order and the spills are chosen, each stay (tensor, first step, last step) needs
one address for all its steps, and stays that share a step must not overlap: the
allocation half of COSMA (Eq. 9-10) with the time half fixed, as in TelaMalloc. The
greedy packing (`packing.py`) solves most instances; this one is exact. One binary per
pair of stays that share a step says which lies below (Eq. 10 with a single address per
stay, Eq. 11 holding by construction). Its big-M rows relax to nothing, so every
distinct set of stays on chip at one step adds the cut that makes the relaxation see
fragmentation: what lies below a stay there fits under its address, and what lies above
fits between its top and the budget.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import pulp

from engine.allocation import solve

MAX_TERMS = 4_000_000  # terms of the cut rows (each set on chip: its size squared) past which no model is built:
# a fan of 500 readers joined by one op has 500 sets of up to 500 stays, 10^8 terms, gigabytes of PuLP expressions


class Stay(NamedTuple):
    """A tensor on chip for steps `first`..`last` at one address; `size` in the caller's units."""

    tensor: str
    first: int
    last: int
    size: int


def place(stays, room: int, *, pinned: dict | None = None, solver: str = "highs",
          time_limit_s: float = 5.0) -> list[float] | None:
    """An address (in units) per stay within [0, room), no two stays sharing a step overlapping; None when the
    solver proves there is none or finds none in `time_limit_s` (the model's build included), or when the model
    would have more than MAX_TERMS terms in its cuts. `pinned` maps a stay's index to its fixed address.
    Addresses are the solver's (within its tolerance): `solution.compact` makes them whole."""
    stays, pinned = list(stays), pinned or {}
    if any(s.size > room for s in stays) or time_limit_s <= 0:
        return None
    deadline = time.perf_counter() + time_limit_s
    by_step: dict[int, list[int]] = {}
    for i, s in enumerate(stays):
        for t in range(s.first, s.last + 1):
            by_step.setdefault(t, []).append(i)
    sets = sorted({tuple(sorted(h)) for h in by_step.values()})
    if sum(len(h) ** 2 for h in sets) > MAX_TERMS:  # the cuts alone would outgrow the time and the memory
        return None
    lp = pulp.LpProblem("place", pulp.LpMinimize)
    x = [lp.add_variable(f"x_{i}", 0, room - s.size) for i, s in enumerate(stays)]
    for i, at in pinned.items():
        x[i].lowBound = x[i].upBound = at
    below: dict[tuple[int, int], pulp.LpAffineExpression] = {}  # (i, j) -> 1 when i lies below j
    for here in by_step.values():
        if time.perf_counter() > deadline:
            return None
        for k, i in enumerate(here):
            for j in here[k + 1:]:
                if (i, j) not in below:
                    below[i, j] = _order_pair(lp, x, stays, i, j, room)
                    below[j, i] = 1 - below[i, j]
    for k, on_chip in enumerate(sets):  # one cut pair per set on chip
        if time.perf_counter() > deadline:
            return None
        for i in on_chip:
            under = [(below[j, i], stays[j].size) for j in on_chip if j != i]
            if under:
                lp += x[i] >= pulp.lpSum(size * b for b, size in under), f"under_{i}_{k}"
                lp += x[i] + stays[i].size + pulp.lpSum(size * (1 - b) for b, size in under) <= room, \
                    f"over_{i}_{k}"
    lp += pulp.lpSum([]), "feasibility"
    stats = solve.run(lp, solver=solver, time_limit_s=max(deadline - time.perf_counter(), 0.01))
    if not stats.has_solution:
        return None
    return [v.lowBound if v.varValue is None else v.varValue for v in x]  # alone at its steps: unconstrained


def _order_pair(lp, x, stays, i: int, j: int, room: int):
    """The binary 'stay i lies below stay j' with Eq. 10's two rows; equal stays are ordered by index."""
    b = lp.add_variable(f"b_{i}_{j}", cat=pulp.LpBinary)
    lp += x[i] + stays[i].size <= x[j] + room * (1 - b), f"below_{i}_{j}"
    lp += x[j] + stays[j].size <= x[i] + room * b, f"above_{i}_{j}"
    if stays[i][1:] == stays[j][1:]:  # interchangeable stays: fix their order (symmetry)
        lp += b == 1, f"sym_{i}_{j}"
    return b
