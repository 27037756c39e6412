"""A lower bound on COSMA's off-chip bytes (Eq. 12) that needs no addresses: live bytes beyond the budget.

When an op runs, its own tensors are on chip (Eq. 5), and so is every other tensor that
is *surely live* then: used before the op and read after it, in every order the problem
allows (DAG ancestry for a free schedule, positions for a fixed one). Where these exceed
the budget, some surely-live tensors are off chip at that step. Each such tensor was
spilled once (Eq. 3, 4, 8: free when DRAM already holds it or it is a network output) and
is retrieved before its next read (or, for a tensor later segments read, charged as
ending off chip). In a fixed order the reads of a tensor are ordered, so being off chip
in two gaps between reads costs two retrievals; in a free one only one is sure.

A small covering ILP (one binary per tensor and gap) picks the cheapest way to cover
every step's excess. Its optimum, or HiGHS's bound on it at a time-out, is at most the
optimum of Eq. 12 over all schedules and placements: a plan that meets it is optimal,
and the full ILP can be given the bound as a valid row without changing its optimum.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pulp

from engine.allocation import model, solve
from engine.allocation.lifetimes import ancestors
from engine.allocation.problem import Problem

END = "<end>"  # the reader standing for later segments, after every op


def spill_bound(problem: Problem, *, solver: str = "highs", time_limit_s: float = 5.0) -> int:
    """A lower bound on the problem's Eq. 12 objective, in units of `problem.unit` (0 when nothing is forced)."""
    cover = cover_model(problem)
    if cover is None:
        return 0
    stats = solve.run(cover.lp, solver=solver, time_limit_s=time_limit_s)
    if stats.status == "optimal":
        return max(round(cover.lp.objective.value()), 0)
    if stats.bound is None or not math.isfinite(stats.bound):
        return 0
    return max(math.ceil(stats.bound - 1e-6), 0)  # the objective is whole: round the bound up


def relaxed_bound(problem: Problem, *, solver: str = "highs", time_limit_s: float = 5.0,
                  life=None) -> tuple[int, tuple[str, ...] | None]:
    """(A lower bound on Eq. 12 in units, the order of the relaxation's best plan or None): COSMA without addresses.

    Eq. 1-8 and 12 with the capacity row but not Eq. 9-11: every plan is a plan of this
    relaxation, so its optimum (or HiGHS's bound on it at a time-out) bounds COSMA's from
    below. Unlike `spill_bound` it chooses the order, so over a free schedule it sees the
    traffic every order pays (ResNet-50 with weights at M_R: 602 112 B, where what is
    live in every order forces 401 408 B). Its plan's order is a good order to place.
    `life` is `lifetimes.analyse(problem)` when the caller has it already.
    """
    deadline = time.perf_counter() + time_limit_s
    try:
        m = model.build(problem, addresses=False, deadline=deadline, life=life)
    except model.OutOfTime:
        return 0, None
    stats = solve.run(m.lp, solver=solver, time_limit_s=max(deadline - time.perf_counter(), 0.01))
    order = None
    if stats.has_solution:
        at = sorted((t, op) for (op, t), x in m.X.items() if x.varValue is not None and x.varValue > 0.5)
        order = tuple(op for _, op in at) if len(at) == len(problem.ops) else None
    if stats.status == "optimal":
        return max(round(m.lp.objective.value()), 0), order
    if stats.bound is None or not math.isfinite(stats.bound):
        return 0, order
    return max(math.ceil(stats.bound - 1e-6), 0), order


@dataclass(frozen=True)
class Cover:
    """The covering ILP: `off[a, rest]` = tensor a off chip in the gap before its reads `rest` (its next read
    first); `spilled[a]` = a written to DRAM (absent when that is free)."""

    lp: pulp.LpProblem
    off: dict
    spilled: dict


def cover_model(problem: Problem) -> Cover | None:
    """The covering ILP of the problem's over-budget steps, unsolved; None when no step is over budget."""
    cover = _excess_cover(problem)
    if not cover:
        return None
    lp = pulp.LpProblem("spill_bound", pulp.LpMinimize)
    p, unit = problem, problem.unit
    gap_var: dict[tuple[str, frozenset], pulp.LpVariable] = {}  # (tensor, readers still to come) -> off chip there
    spilled: dict[str, pulp.LpVariable] = {}  # tensor -> spilled at some step
    for _, live in cover:
        for a, rest in live:
            if (a, rest) not in gap_var:
                gap_var[a, rest] = lp.add_variable(f"y_{len(gap_var)}", cat=pulp.LpBinary)
            if a not in spilled and a not in p.carry.host and a not in p.free_spill:
                spilled[a] = lp.add_variable(f"z_{len(spilled)}", cat=pulp.LpBinary)
    for (a, rest), y in gap_var.items():
        if a in spilled:
            lp += y <= spilled[a], f"spill_{y.name}"
    lp += (pulp.lpSum((p.size[a] // unit) * y for (a, _), y in gap_var.items())
           + pulp.lpSum((p.size[a] // unit) * z for a, z in spilled.items())), "offchip"
    for k, (excess, live) in enumerate(cover):
        lp += pulp.lpSum((p.size[a] // unit) * gap_var[a, rest] for a, rest in live) >= excess, f"cover_{k}"
    return Cover(lp, gap_var, spilled)


def _excess_cover(p: Problem) -> list[tuple[int, list[tuple[str, frozenset]]]]:
    """Per op whose step is over budget: (excess units, [(surely-live tensor, its reads still to come)])."""
    unit, budget = p.unit, p.budget // p.unit
    if p.order is not None:
        pos = {op: t for t, op in enumerate(p.order)}
        before = lambda x, y: pos[x] < pos[y]  # noqa: E731
    else:
        anc, index = ancestors(p), {op: i for i, op in enumerate(p.ops)}
        before = lambda x, y: bool(anc[y] >> index[x] & 1)  # noqa: E731
    reads = {a: p.consumers.get(a, ()) + ((END,) if a in p.keep else ()) for a in p.tensors}
    out = []
    for op in p.ops:
        mine = set(p.reads[op]) | set(p.writes[op])
        load = sum(p.size[a] // unit for a in mine)
        live = []
        for a in p.tensors:
            if a in mine:
                continue
            after = frozenset(r for r in reads[a] if r == END or before(op, r))
            if after and _started(p, a, op, before):
                load += p.size[a] // unit
                live.append((a, after if p.order is not None else frozenset()))
        if load > budget:
            out.append((load - budget, live))
    return out


def _started(p: Problem, a: str, op: str, before) -> bool:
    """Tensor `a` has surely been on chip before `op` runs: carried on chip, made or read by an earlier op."""
    if a in p.carry.resident:
        return True
    if a in p.producer:
        return before(p.producer[a], op)
    return any(before(r, op) for r in p.consumers.get(a, ()))
