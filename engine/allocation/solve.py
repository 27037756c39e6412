"""Run a PuLP model on a named solver with a time limit and report what came back."""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import pulp

from engine.errors import EngineError, UnknownNameError

SOLVERS = ("highs", "cbc")


@dataclass(frozen=True)
class SolveStats:
    """How a solve ended: "optimal", "time_limit" (with or without a solution), "feasible" or "infeasible".

    `bound` is the solver's proven lower bound on the objective, when it reports one.
    "feasible" is a plan the search stopped at before the limit without proof; `note`
    says why, in the user's terms (it becomes the Allocation's message).
    """

    status: str
    has_solution: bool
    gap: float | None
    seconds: float
    solver: str
    bound: float | None = None
    note: str = ""


class _HiGHSWithStart(pulp.HiGHS):
    """pulp.HiGHS that passes the model in bulk and hands HiGHS the variables' initial values as a MIP start.

    PuLP's own class adds columns and rows one call at a time (20 s for a model of 5 x 10^5
    rows) and passes no start.
    """

    def buildSolverModel(self, lp):
        import highspy

        variables = lp.variables()
        for i, v in enumerate(variables):
            v.index = i
        inf = highspy.kHighsInf
        lower = np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=np.float64)
        upper = np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=np.float64)
        cost = np.array([lp.objective.get(v, 0.0) for v in variables], dtype=np.float64)
        sign = -1.0 if lp.sense == pulp.LpMaximize else 1.0
        h = lp.solverModel
        h.addCols(len(variables), sign * cost, lower, upper, 0, np.zeros(len(variables), dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64))
        h.changeObjectiveOffset(sign * lp.objective.constant)
        ints = np.array([v.index for v in variables if v.cat == pulp.LpInteger], dtype=np.int32)
        if self.mip and len(ints):
            h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
        starts: list[int] = []
        index: list[int] = []
        value: list[float] = []
        row_lo: list[float] = []
        row_hi: list[float] = []
        for i, c in enumerate(lp._constraints.values()):
            c.index = i
            starts.append(len(index))
            for v, coef in c.items():
                if coef != 0:
                    index.append(v.index)
                    value.append(coef)
            lo, hi = c.getLb(), c.getUb()
            row_lo.append(-inf if lo is None else lo)
            row_hi.append(inf if hi is None else hi)
        h.addRows(len(starts), np.array(row_lo, dtype=np.float64), np.array(row_hi, dtype=np.float64), len(index),
                  np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32),
                  np.array(value, dtype=np.float64))

    deadline: float | None = None  # perf_counter time by which HiGHS must stop (run() sets it)

    def callSolver(self, lp):
        start = [(v.index, v.varValue) for v in lp.variables() if v.varValue is not None]
        if start:
            idx, val = zip(*start)
            lp.solverModel.setSolution(len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64))
        if self.deadline is not None:  # handing a big model over takes seconds: HiGHS gets what is left
            lp.solverModel.setOptionValue("time_limit", max(self.deadline - time.perf_counter(), 0.1))
        super().callSolver(lp)


def solver_for(name: str, time_limit_s: float):
    """The PuLP solver object for `name`: HiGHS through highspy (else its binary), or CBC; both take MIP starts."""
    if name not in SOLVERS:
        raise UnknownNameError("solver", name, SOLVERS)
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise EngineError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    if name == "highs":
        api = _HiGHSWithStart(msg=False, timeLimit=float(time_limit_s))
        if api.available():
            _quiet_highs()
            return api
        cmd = pulp.HiGHS_CMD(msg=False, timeLimit=float(time_limit_s), warmStart=True)
        if cmd.available():
            return cmd
        name = "cbc"  # documented fallback when HiGHS is missing
    cbc = pulp.PULP_CBC_CMD(msg=False, timeLimit=float(time_limit_s), warmStart=True)
    if not cbc.available():
        raise EngineError("no ILP solver available: install highspy (pip install highspy) or CBC")
    return cbc


@cache
def _quiet_highs() -> None:
    """Construct HiGHS once with stdout closed: its first instance prints a banner to the C-level stdout,
    before any option can turn output off, and a library call must print nothing."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def run(lp: pulp.LpProblem, *, solver: str, time_limit_s: float, start: dict | None = None,
        bound: float | None = None) -> SolveStats:
    """Solve `lp` in place; the variables hold the best solution found when `has_solution`.

    `start` (variable name -> value, others 0) is a feasible solution to begin from.
    `bound` is a known lower bound on the objective: a start that reaches it is optimal
    and is returned without calling the solver (presolve alone takes seconds on large
    models), and a time-out's gap is measured to the better of it and the solver's bound.
    """
    engine = solver_for(solver, time_limit_s)
    began = time.perf_counter()
    if isinstance(engine, _HiGHSWithStart):
        engine.deadline = began + time_limit_s
    if start is not None:
        _set_start(lp, start)
        if bound is not None and lp.objective.value() <= bound + 1e-9:
            return SolveStats("optimal", True, 0.0, time.perf_counter() - began, "start", bound)
    lp.solve(engine)
    seconds = time.perf_counter() - began
    if isinstance(engine, pulp.HiGHS):
        return _with_bound(lp, _highs_stats(lp, seconds), bound)
    sol = lp.sol_status
    if sol == pulp.LpSolutionOptimal:
        return SolveStats("optimal", True, 0.0, seconds, engine.name, lp.objective.value())
    if sol == pulp.LpSolutionIntegerFeasible:
        return _with_bound(lp, SolveStats("time_limit", True, None, seconds, engine.name), bound)
    if sol in (pulp.LpSolutionInfeasible, pulp.LpSolutionUnbounded):
        return SolveStats("infeasible", False, None, seconds, engine.name)
    return SolveStats("time_limit", False, None, seconds, engine.name)


def take_start(lp: pulp.LpProblem, start: dict, *, bound: float | None = None) -> SolveStats:
    """The start as the solution when no time is left to solve (a big model's presolve alone would overrun
    the limit by seconds): optimal if it reaches `bound`, else with its gap to `bound`."""
    began = time.perf_counter()
    _set_start(lp, start)
    return _with_bound(lp, SolveStats("time_limit", True, None, time.perf_counter() - began, "start"), bound)


def _with_bound(lp: pulp.LpProblem, stats: SolveStats, bound: float | None) -> SolveStats:
    """A time-out's stats judged against the better of the solver's bound and a known `bound` as well.

    The objective is whole (sizes in units), so a solution within 1e-6 of the bound is optimal.
    """
    if stats.status != "time_limit" or not stats.has_solution or bound is None:
        return stats
    best = bound if stats.bound is None else max(stats.bound, bound)
    value = lp.objective.value()
    if value <= best + 1e-6:
        return replace(stats, status="optimal", gap=0.0, bound=best)
    return replace(stats, gap=(value - best) / abs(value), bound=best)


def _set_start(lp: pulp.LpProblem, start: dict) -> None:
    """Give every variable its value in `start` (name -> value, others 0), within its bounds."""
    for v in lp.variables():
        value = start.get(v.name) or 0.0
        value = round(value) if v.cat == pulp.LpInteger else value
        lo = -math.inf if v.lowBound is None else v.lowBound
        hi = math.inf if v.upBound is None else v.upBound
        v.setInitialValue(min(max(value, lo), hi))  # solver tolerance can overshoot a bound


def _highs_stats(lp: pulp.LpProblem, seconds: float) -> SolveStats:
    import highspy

    h = lp.solverModel
    status, info = h.getModelStatus(), h.getInfo()
    feasible = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if status == highspy.HighsModelStatus.kOptimal:
        return SolveStats("optimal", True, 0.0, seconds, "HiGHS", lp.objective.value())
    if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        return SolveStats("infeasible", False, None, seconds, "HiGHS")
    gap = info.mip_gap if feasible and math.isfinite(info.mip_gap) else None
    bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    return SolveStats("time_limit", feasible, gap, seconds, "HiGHS", bound)
