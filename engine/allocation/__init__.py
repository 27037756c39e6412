"""Scheduling, scratchpad allocation and tensor spilling (the COSMA paper), plus its four baselines.

`allocate(graph, budget_bytes, method=...)` returns an `Allocation`; `budgets(graph)`
returns COSMA's budgets (M_R, M_H, M_P). Methods: "cosma" (the ILP of Eq. 1-12, with
`schedule` "free", "mpmf" or a fixed order, Eq. 16-17) and the comparison schemes
"default-belady", "default-greedy", "mpmf-belady", "mpmf-greedy" (order x TFLite-style
arena x replacement policy).
"""

from __future__ import annotations

import math
import time
from typing import TypedDict

from engine.allocation import baselines, collector
from engine.allocation.cosma import solve_cosma
from engine.allocation.lifetimes import OutOfTime
from engine.allocation.mpmf import budgets, mpmf
from engine.allocation.packing import pack_steps
from engine.allocation.record import Allocation, Placement, op_table, peak_bytes
from engine.allocation.solve import SOLVERS
from engine.allocation.spillall import spill_all
from engine.errors import EngineError, UnknownNameError
from engine.graph import Graph


class _Common(TypedDict):
    """The fields every Allocation of one call shares."""
    method: str
    budget_bytes: int
    include_params: bool
    word_bits: int
    graph: Graph | None

METHODS = ("cosma", "default-belady", "default-greedy", "mpmf-belady", "mpmf-greedy")
SCHEDULES = ("free", "mpmf")
# The time kept back from the search, in units of allocate's first linear pass over the ops (each op's tensors and
# their bytes): the result's check takes about 3 of them, a baseline about 4 and the plan built without a search 1
# (ResNet-1202, 1,807 ops: a pass 2.9-3.8 ms, check 11, baseline 14, spill-everything 2.3 CPU ms on this machine).
RESERVE_SCANS = 12
PACK_RESERVE_SCANS = 4  # the same, for the no-spill packing tried first: its check, or else the plan built without
# a search (no search follows a packing that ran this late); it starts only with 2 more passes left (its set-up)
NO_SPILL = ("no tensor leaves the chip: each stays at one address from its first use to its last (the no-spill "
            "packing of this order), so no plan costs less")

__all__ = ["allocate", "Allocation", "Placement", "budgets", "mpmf", "METHODS", "SCHEDULES"]


def allocate(graph: Graph, budget_bytes: int, *, method: str = "cosma", schedule="free", include_params: bool = False,
             divide=None, time_limit_s: float = 30.0, solver: str = "highs", word_bits: int = 16) -> Allocation:
    """Order the ops, place every tensor in a `budget_bytes` scratchpad and choose spills, by `method`.

    schedule: "free" (COSMA picks the order), "mpmf" (the minimum peak footprint order,
    Eq. 13-15) or a sequence of op names (a fixed order); baselines take their order from
    their name. divide: None (one ILP), "auto" (break nodes chosen automatically) or a
    sequence of break-node op names. A budget below M_R gives status "infeasible" naming
    the op that cannot fit; a time-out gives the best solution found, status "time_limit".
    `time_limit_s` covers the whole call: the search (MPMF order, spill bound, MIP starts, lifetimes, model
    builds, solves) stops early enough to leave time for the answer's fallback and check, a reserve of
    RESERVE_SCANS times the first linear pass over the ops (timed, so it follows the machine's speed and load).
    When the search leaves no plan, the best baseline in the graph's order that finishes in time is the answer,
    or else the plan that spills every tensor a later op reads (`spillall`), status "time_limit" either way.
    Python's cyclic collector is held off during a call whose limit is under `collector.PAUSE_BELOW_S`.
    """
    start = time.perf_counter()
    _check_args(graph, budget_bytes, method, schedule, divide, solver, word_bits, time_limit_s)
    with collector.held_off(time_limit_s):  # a full collection pass alone can take several short limits
        return _allocate(graph, budget_bytes, method, schedule, include_params, divide, time_limit_s, solver,
                         word_bits, start)


def _allocate(graph: Graph, budget_bytes: int, method: str, schedule, include_params: bool, divide,
              time_limit_s: float, solver: str, word_bits: int, start: float) -> Allocation:
    """`allocate` once its arguments are checked, from `start` (perf_counter time)."""
    deadline = start + time_limit_s
    common = _Common(method=method, budget_bytes=budget_bytes, include_params=include_params, word_bits=word_bits,
                  graph=graph)
    scan = time.perf_counter()
    table = op_table(graph, [op.name for op in graph.ops], include_params=include_params, word_bits=word_bits)
    sizes = table[1]
    need, worst = max((sum(sizes[a] for a in reads + writes), -k) for k, (reads, writes) in enumerate(table[0]))
    worst_name = graph.ops[-worst].name
    scan = time.perf_counter() - scan  # one linear pass: the unit the reserve for the fallback and check is in
    if need > budget_bytes:
        what = "inputs, outputs and weights" if include_params else "inputs and outputs"
        return Allocation((), (), (), (), 0, 0, "infeasible", None, time.perf_counter() - start, **common,
                          message=f"op '{worst_name}' needs {need} bytes on chip at once ({what}) but the budget "
                                  f"is {budget_bytes} bytes; M_R = {need}")
    if method == "cosma":
        search_until = deadline - RESERVE_SCANS * scan
        as_given = (None if schedule == "mpmf" or divide is not None  # a division asked for is searched
                    else tuple(op.name for op in graph.ops) if schedule == "free" else tuple(schedule))
        pack_until = deadline - PACK_RESERVE_SCANS * scan
        packed = (None if as_given is None or time.perf_counter() + 2 * scan >= pack_until
                  else pack_steps(_steps_in(graph, table, as_given), sizes, budget_bytes, deadline=pack_until))
        if as_given is not None and packed is not None:  # no traffic at all: nothing is cheaper, whatever the order
            return _checked(Allocation(as_given, packed, (), (), 0, peak_bytes(packed, len(as_given)),
                                       "optimal", 0.0, time.perf_counter() - start, **common,
                                       message=NO_SPILL), graph, start, common)
        got = None
        if time.perf_counter() < search_until:
            order, fixed = _order(graph, schedule, include_params, word_bits,
                                  (search_until - time.perf_counter()) / 2, solver)
            got = solve_cosma(graph, budget_bytes, order, fixed=fixed, include_params=include_params, divide=divide,
                              time_limit_s=time_limit_s, solver=solver, word_bits=word_bits, deadline=search_until)
        if got is None or (not got.order and got.status == "time_limit"):
            fixed_order = None if isinstance(schedule, str) else tuple(schedule)
            return _in_time(graph, table, fixed_order, deadline, start, common,
                            "the time limit passed before the search had a plan" if got is None else got.message)
        order, placements, spills, retrievals = got.order, got.placements, got.spills, got.retrievals
        status, gap, message = got.status, got.gap, got.message
    else:
        which, policy = method.split("-")
        order = _order(graph, which if which == "mpmf" else "default", include_params, word_bits, time_limit_s,
                       solver)[0]
        placements, spills, retrievals = baselines.run(graph, budget_bytes, order, policy,
                                                       include_params=include_params, word_bits=word_bits)
        status, gap, message = "feasible", None, ""
    result = Allocation(tuple(order), tuple(placements), tuple(spills), tuple(retrievals),
                        _bytes(graph, spills + retrievals, word_bits), peak_bytes(placements, len(order)), status, gap,
                        time.perf_counter() - start, **common, message=message)
    return _checked(result, graph, start, common) if method == "cosma" else result


def _checked(result: Allocation, graph: Graph, start: float, common: _Common) -> Allocation:
    """`result` once the validity checker passes it; else the best baseline in its order (never a rejected plan)."""
    if result.has_plan:
        try:
            result.validate()
        except EngineError as err:
            return _baseline_instead(result, graph, str(err), start, common)
    return result


def _steps_in(graph: Graph, table, order) -> list:
    """The (reads, writes) of each op of `order`, from `table` (`record.op_table` in the graph's order)."""
    steps = table[0]
    if order == tuple(op.name for op in graph.ops):
        return steps
    by_name = dict(zip((op.name for op in graph.ops), steps))
    return [by_name[op] for op in order]


def _in_time(graph: Graph, table, order, until: float, start: float, common: _Common, why: str) -> Allocation:
    """The answer when the search left no plan: the cheaper baseline in `order` (the user's fixed schedule, else
    the graph's order) finished by `until`, or else the plan that spills every tensor read later (built in one
    pass from `table`, `record.op_table` in the graph's order), status "time_limit", no gap known."""
    names = tuple(op.name for op in graph.ops)
    order = names if order is None else order
    steps, sizes = _steps_in(graph, table, order), table[1]
    *plan, cost = spill_all(steps, sizes, frozenset(graph.outputs))
    name = "spill-everything"
    for policy in baselines.POLICIES:
        if time.perf_counter() >= until:  # a baseline's set-up alone is a linear pass: none starts past the limit
            break
        try:
            got = baselines.run(graph, common["budget_bytes"], order, policy, deadline=until,
                                include_params=common["include_params"], word_bits=common["word_bits"])
        except OutOfTime:
            break
        moved = _bytes(graph, got[1] + got[2], common["word_bits"])
        if moved < cost:
            plan, cost, name = list(got), moved, policy
    placements, spills, retrievals = plan
    return Allocation(order, tuple(placements), tuple(spills), tuple(retrievals), cost,
                      peak_bytes(placements, len(order)), "time_limit", None, time.perf_counter() - start, **common,
                      message=f"{why}; shown instead: the {name} plan in the "
                              f"{'graph' if order == names else 'given'} order (not searched, no bound)")


def _baseline_instead(rejected: Allocation, graph: Graph, why: str, start: float, common: _Common) -> Allocation:
    """The cheaper baseline plan in the rejected plan's order, saying why (a valid plan, not a proven one)."""
    best = None
    for policy in baselines.POLICIES:
        placements, spills, retrievals = baselines.run(graph, rejected.budget_bytes, rejected.order, policy,
                                                       include_params=rejected.include_params,
                                                       word_bits=rejected.word_bits)
        cost = _bytes(graph, spills + retrievals, rejected.word_bits)
        if best is None or cost < best[0]:
            best = (cost, placements, spills, retrievals, policy)
    assert best is not None, "no baseline policies"
    cost, placements, spills, retrievals, policy = best
    return Allocation(rejected.order, tuple(placements), tuple(spills), tuple(retrievals), cost,
                      peak_bytes(placements, len(rejected.order)), "time_limit", None, time.perf_counter() - start,
                      **common, message=f"the solver's plan failed validation ({why}); shown instead: the "
                                        f"{policy} baseline in the same order")


def _order(graph: Graph, schedule, include_params, word_bits, time_limit_s, solver) -> tuple[tuple[str, ...], bool]:
    """(op order, whether it is fixed): the graph's default order for a free schedule."""
    if schedule in ("free", "default"):
        return tuple(op.name for op in graph.ops), schedule == "default"
    if schedule == "mpmf":
        return mpmf(graph, include_params=include_params, word_bits=word_bits, time_limit_s=time_limit_s,
                    solver=solver).order, True
    return tuple(schedule), True


def _bytes(graph: Graph, transfers, word_bits: int) -> int:
    return sum(graph.tensor(a).nbytes(word_bits) for a, _ in transfers)


def _check_args(graph, budget_bytes, method, schedule, divide, solver, word_bits, time_limit_s) -> None:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise EngineError(f"budget_bytes must be a whole number of bytes, got {budget_bytes!r}")
    if budget_bytes <= 0:
        raise EngineError(f"budget_bytes must be positive, got {budget_bytes}; try engine.allocation.budgets(graph)")
    if method not in METHODS:
        raise UnknownNameError("allocation method", method, METHODS)
    if solver not in SOLVERS:
        raise UnknownNameError("solver", solver, SOLVERS)
    if not (isinstance(time_limit_s, (int, float)) and 0 < time_limit_s < math.inf):
        raise EngineError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    if isinstance(word_bits, bool) or not isinstance(word_bits, int) or not 1 <= word_bits <= 64:
        raise EngineError(f"word_bits must be a whole number between 1 and 64 (as for an Accelerator), "
                          f"got {word_bits!r}")
    if isinstance(schedule, str):
        if schedule not in SCHEDULES:
            raise UnknownNameError("schedule", schedule, SCHEDULES + ("a list of op names",))
    else:
        _check_order(graph, tuple(schedule))
    if method != "cosma" and schedule != "free":
        raise EngineError(f"method '{method}' takes its order from its name; leave schedule at 'free' "
                          "or use method='cosma' with a fixed schedule")
    if divide is not None and divide != "auto":
        if isinstance(divide, str):
            raise EngineError(f"divide must be None, 'auto' or a list of break-node op names, got '{divide}'")
        known = {op.name for op in graph.ops}
        for b in divide:
            if b not in known:
                raise EngineError(f"divide: break node '{b}' is not an op of graph '{graph.name}'")


def _check_order(graph: Graph, order) -> None:
    """A fixed schedule must run every op once, producers first."""
    names = [op.name for op in graph.ops]
    missing = set(names) - set(order)
    extra = [op for op in order if op not in set(names)]
    if extra:
        raise EngineError(f"schedule names '{extra[0]}', which is not an op of graph '{graph.name}'")
    if missing or len(order) != len(names):
        raise EngineError(f"schedule must list every op of '{graph.name}' exactly once"
                          + (f"; missing '{sorted(missing)[0]}'" if missing else ""))
    seen = set()
    for op in order:
        for t in graph.op(op).inputs:
            p = graph.producer(t)
            if p is not None and p not in seen:
                raise EngineError(f"schedule runs '{op}' before its producer '{p}'")
        seen.add(op)
