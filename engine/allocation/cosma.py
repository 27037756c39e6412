"""COSMA end to end: cut the graph into segments (one, unless dividing), solve each ILP, join the plans."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TypedDict

from engine.allocation import atbound, model, solution, solve
from engine.allocation import divide as dnc
from engine.allocation.bound import relaxed_bound, spill_bound, staged_bound
from engine.allocation.lifetimes import analyse, forced
from engine.allocation.mpmf import mpmf
from engine.allocation.packing import pack
from engine.allocation.problem import Carry, make_problem
from engine.allocation.record import Placement, needs
from engine.allocation.start import best_baseline, objective_at, values_of
from engine.graph import Graph


class _Scope(TypedDict):
    """What a plan's bytes count: the keywords every stage passes on."""
    include_params: bool
    word_bits: int


class _Opts(_Scope):
    solver: str


class _SolveOpts(_Opts):
    known: dict  # order -> the plan atbound built in it, or None

PRESOLVE_SHARE = 0.05  # of the time left, for a free schedule's first fixed order when its free model follows
SETUP_FACTOR = 5  # build, hand-over to HiGHS and presolve of a large model, in build times (Transformer: 8.7+2.5+23 s)
RELAX_MAX_STEPS = 4000  # tensor-steps of a free schedule up to which the relaxation without addresses is tried
# (ResNet-50: 216 steps, 486 variables, solved in 0.05 s; the Transformer: 8 503 steps, 31 003 variables, 2.3 s to
# build and no bound from HiGHS in 10 s)


@dataclass(frozen=True)
class Joined:
    """Segment plans joined into one: what `allocate` turns into an Allocation."""

    order: tuple[str, ...]
    placements: tuple[Placement, ...]
    spills: tuple[tuple[str, int], ...]
    retrievals: tuple[tuple[str, int], ...]
    status: str
    gap: float | None
    message: str


def segments_for(graph: Graph, order, divide, *, fixed: bool, include_params: bool, word_bits: int):
    """(start, stop) bounds of the segments of `order`: one, automatic break nodes, or named ones."""
    if divide is None:
        return [(0, len(order))]
    if divide == "auto":
        reads = {op: needs(graph, op, include_params)[0] for op in order}
        sizes = {t.name: t.nbytes(word_bits) for t in graph.tensor_list}
        return dnc.auto_segments(dnc.lossless_cuts(graph, order), dnc.crossing_bytes(graph, order, sizes, reads),
                                 dnc.MAX_OPS_FIXED if fixed else dnc.MAX_OPS_FREE)
    return dnc.manual_segments(order, divide)


def solve_cosma(graph: Graph, budget: int, order, *, fixed: bool, include_params: bool, divide, time_limit_s: float,
                solver: str, word_bits: int, mpmf_order: tuple[str, ...] | None = None,
                deadline: float = math.inf) -> Joined:
    """Solve COSMA over `order`'s segments (a free schedule inside each when not `fixed`) within the time limit.

    Every stage shares one deadline: `time_limit_s` from now, or the caller's `deadline`
    (a perf_counter time) when sooner. `mpmf_order` is the graph's minimum peak footprint
    order when the caller has it already; otherwise it is found only if a stage needs it.
    """
    deadline = min(deadline, time.perf_counter() + time_limit_s)
    opts = _Opts(include_params=include_params, word_bits=word_bits, solver=solver)
    need_order = _order_source(graph, mpmf_order, deadline, **opts)
    if not fixed and divide is not None:
        order = need_order(0.5)  # segments of a low-footprint order: each is still a down-set, and starts agree
    bounds = segments_for(graph, order, divide, fixed=fixed, include_params=include_params, word_bits=word_bits)
    carry = Carry.start(graph, include_params)
    plans, statuses, gaps, notes = [], [], [], []
    floor = None  # a divided plan's gap: the whole graph's spill bound, first (in a tenth of the time, at most 1 s)
    if len(bounds) > 1 and time.perf_counter() < deadline:
        whole = make_problem(graph, order, budget, Carry.start(graph, include_params), include_params=include_params,
                             word_bits=word_bits, order=order if fixed else None)
        floor = spill_bound(whole, solver=solver, time_limit_s=_seconds(deadline, 1.0, 0.1)) * whole.unit
    for k, (lo, hi) in enumerate(bounds):
        later = frozenset(a for op in order[hi:] for a in needs(graph, op, include_params)[0])
        ops = order[lo:hi]
        prob = make_problem(graph, ops, budget, carry, include_params=include_params, word_bits=word_bits,
                            later=later, order=ops if fixed else None)
        if prob.order is None and forced(prob):
            prob = replace(prob, order=prob.ops)  # a chain: the free model would repeat the fixed one
        share = max(deadline - time.perf_counter(), 0.0) / (len(bounds) - k)  # what is left, shared fairly
        until = deadline - share * (len(bounds) - k - 1)
        plan, stats = _solve_problem(graph, prob, need_order, share, until, whole=divide is None, **opts)
        if plan is None:
            where = f" in segment {k + 1} of {len(bounds)} (ops {ops[0]}..{ops[-1]})" if len(bounds) > 1 else ""
            if stats.status == "infeasible":
                why = (f"no placement fits {budget} bytes{where}: fragmentation leaves no contiguous room; "
                       "raise the budget")
                return Joined((), (), (), (), "infeasible", None, why)
            return Joined((), (), (), (), "time_limit", None,
                          f"{stats.solver} found no solution within {time_limit_s:g} s{where}; "
                          "raise time_limit_s or use divide='auto'")
        plans.append((lo, plan))
        statuses.append(stats.status)
        gaps.append(stats.gap)
        notes += [f"segment {k + 1}: {stats.note}" if len(bounds) > 1 else stats.note] if stats.note else []
        carry = plan.carry
    joined = _join(plans, statuses, gaps, notes)
    if len(plans) > 1 and floor is not None:  # the whole graph's spill bound gives a gap, or proves it optimal
        cost = sum(graph.tensor(a).nbytes(word_bits) for a, _ in joined.spills + joined.retrievals)
        joined = (replace(joined, status="optimal", gap=0.0) if cost <= floor
                  else replace(joined, gap=(cost - floor) / cost))
    return joined


def _order_source(graph: Graph, known, deadline: float, *, include_params: bool, word_bits: int, solver: str):
    """A function giving the MPMF order (`known`, or found in `fraction` of the time left) and remembering it."""
    found = [known]

    def order(fraction: float) -> tuple[str, ...]:
        if found[0] is None:
            found[0] = mpmf(graph, include_params=include_params, word_bits=word_bits, solver=solver,
                            time_limit_s=_seconds(deadline, math.inf, fraction)).order
        return found[0]
    return order


def _seconds(until: float, cap: float, fraction: float = 1.0) -> float:
    """A stage's time limit: `fraction` of what is left before `until`, at most `cap`, and positive."""
    return max(min(cap, fraction * (until - time.perf_counter())), 0.01)


def _solve_problem(graph: Graph, prob, need_order, share: float, until: float, *, whole: bool, include_params: bool,
                   word_bits: int, solver: str) -> tuple[solution.Plan | None, solve.SolveStats]:
    """Solve one problem by `until` (about `share` seconds): the plan (None without a solution) and how it ended.

    The spill bound (bound.py) comes first, then the plan built from its cover in the
    first order tried (`atbound.py`): when that costs the bound it is optimal for every
    order and no model is built at all. A free schedule then gets the relaxation without
    addresses (`bound.relaxed_bound`, in a tenth of the share), a bound that sees its
    choice of order, and the cover's plan in the relaxation's order. Otherwise the ILPs
    follow (`_solve_models`), in the order whose plan was cheapest. When the time is up after the cover,
    no model is built: the cover's plan, if any, is the answer (`_plan_now`).
    """
    began = time.perf_counter()
    if began >= until:  # an earlier segment or the set-up took the time: no stage may start past it
        return None, solve.SolveStats("time_limit", False, None, 0.0, "start")
    lb = spill_bound(prob, solver=solver, time_limit_s=_seconds(until, min(share / 10, 2.0)))
    free_first = prob.order is None and time.perf_counter() < until
    orders = [prob.order if prob.order is not None
              else _first_order(prob, lb, need_order, until) if free_first else prob.ops]
    known: dict = {}  # order -> the cover's plan in it (or None): MIP starts later, not built twice
    for order in orders:  # the relaxation's order joins the list after the first
        here = replace(prob, order=order)
        known[order] = (atbound.plan_at_bound(here, solver=solver, time_limit_s=_seconds(until, share / 3))
                        if (whole or prob.order is not None) and time.perf_counter() < until
                        else None)  # see _start on free segments
        if known[order] is not None and atbound.cost(here, known[order]) <= lb:
            return (solution.plan_of(here, *known[order]),
                    solve.SolveStats("optimal", True, 0.0, time.perf_counter() - began, "bound", lb))
        if time.perf_counter() >= until:  # no time left for a model: building one alone can take seconds
            return _plan_now(here, known[order], lb, began)
        if prob.order is None and whole and len(orders) == 1:
            try:
                lb, best = _relaxation(prob, lb, until, share, solver)
            except model.OutOfTime:  # the limit came while its lifetimes were found: the plans so far
                return _plan_now(here, known[order], lb, began)
            orders += [best] if best is not None and best != order else []
    price = lambda o: math.inf if known[o] is None else atbound.cost(replace(prob, order=o), known[o])  # noqa: E731
    first = min(known, key=price)
    try:
        m, stats = _solve_models(graph, prob, lb, need_order, share, until, known, first, whole=whole,
                                 include_params=include_params, word_bits=word_bits, solver=solver)
    except model.OutOfTime:  # the limit came while the first model was built: the plans so far
        return _plan_now(replace(prob, order=first), known[first], lb, began)
    return (solution.read(m) if stats.has_solution else None), stats


def _plan_now(prob, cover, lb: int, began: float) -> tuple[solution.Plan | None, solve.SolveStats]:
    """The cover's plan in `prob`'s order (None without one) when the time is up before any model is built:
    status "time_limit" with its gap to the spill bound `lb` ("optimal" at it). Nothing else runs past the
    deadline: without a plan, `allocate` answers with a plan it can build in the time it kept back."""
    if cover is None:
        return None, solve.SolveStats("time_limit", False, None, time.perf_counter() - began, "start", lb)
    value = atbound.cost(prob, cover)
    gap = 0.0 if value <= lb else (value - max(lb, 0)) / value
    return solution.plan_of(prob, *cover), solve.SolveStats("optimal" if gap == 0.0 else "time_limit", True, gap,
                                                            time.perf_counter() - began, "start", lb)


def _relaxation(prob, lb: int, until: float, share: float, solver: str) -> tuple[int, tuple[str, ...] | None]:
    """(The better of `lb` and the bound of the relaxation without addresses, its plan's order or None), in a
    tenth of the share; over RELAX_MAX_STEPS tensor-steps, the relaxation stage by stage (`staged_bound`, in
    half the share: an LLM's 32 layers are one attention and one MLP stage to solve), whose order
    joins its stages' relaxed plans."""
    life = analyse(prob, deadline=until)
    if sum(w.last - w.first + 1 for w in life.tensors.values()) > RELAX_MAX_STEPS:
        staged, order = staged_bound(prob, life, solver=solver, time_limit_s=_seconds(until, share / 2))
        return max(lb, staged), order
    relaxed, best = relaxed_bound(prob, solver=solver, time_limit_s=_seconds(until, share / 10), life=life)
    return max(lb, relaxed), best


def _solve_models(graph: Graph, prob, lb: int, need_order, share: float, until: float, known: dict, first, *,
                  whole: bool, include_params: bool, word_bits: int,
                  solver: str) -> tuple[model.Model, solve.SolveStats]:
    """The ILPs of one problem, with the lower bound `lb` as a row: the solved model and how the solve ended.

    A free schedule is first solved in the order `first`; when that meets the bound it is
    optimal for every order, and the far larger free model is never built. Nor is it when
    its setup would take half the time left (SETUP_FACTOR times its build time, estimated
    as the fixed model's scaled by `model.size`): the MPMF order is then solved as a second
    fixed order. Otherwise the full model, with the bound as a row, starts from the best
    plan found. A stage that runs out of time leaves the best plan so far. `known` maps an
    order to the plan `atbound` built in it (or None), so none is built twice.
    """
    opts = _SolveOpts(include_params=include_params, word_bits=word_bits, solver=solver, known=known)
    if prob.order is not None:
        return _solve_model(graph, model.build(prob, deadline=until), lb, until, share, need_order, None,
                            whole=whole, **opts)
    began = time.perf_counter()
    fixed = model.build(replace(prob, order=first), deadline=until)
    life = analyse(prob, deadline=until)  # the free model's windows and pairs, before deciding to build it
    guess = (time.perf_counter() - began) * model.size(life) / max(model.size(fixed.life), 1)
    left = until - time.perf_counter()
    hopeless = SETUP_FACTOR * guess > left / 2  # no search before half the time is gone
    fixed, stats = _solve_model(graph, fixed, _own_bound(fixed.problem, lb, until, share, solver), until, share,
                                need_order, None, whole=whole and hopeless,
                                fraction=0.5 if hopeless else PRESOLVE_SHARE, **opts)
    if stats.has_solution and fixed.lp.objective.value() <= lb + 1e-6:
        return fixed, replace(stats, status="optimal", gap=0.0)  # the fixed order meets a bound for all orders
    if hopeless:
        why = (f"the free-order ILP was not built: building and presolving it would take about "
               f"{SETUP_FACTOR * guess:.0f} s, over half of the {max(left, 0.0):.0f} s left (it is built when "
               f"twice that is left: a time_limit_s of about {2 * SETUP_FACTOR * guess:.0f} s or more)")
        return _fallback(graph, prob, fixed, stats, lb, need_order, until, share, why=why, whole=whole, **opts)
    try:
        m = model.build(prob, deadline=until, life=life)
    except model.OutOfTime:  # the free model is too big for the time left: the fixed orders' plans stand
        why = "the free-order ILP was still being built when the time limit came"
        return _fallback(graph, prob, fixed, replace(stats, status="time_limit"), lb, need_order, until, share,
                         why=why, whole=whole, **opts)
    fixed_values = {v.name: v.varValue for v in fixed.lp.variables()} if stats.has_solution else None
    return _solve_model(graph, m, lb, until, share, need_order, fixed_values, whole=whole, **opts)


def _own_bound(fixed, lb: int, until: float, share: float, solver: str) -> int:
    """The spill bound of one order of a free schedule (at least the free one, `lb`): it holds for that order's
    model only, and ends its solve as soon as a start meets it (the cover's plan often does)."""
    return max(lb, spill_bound(fixed, solver=solver, time_limit_s=_seconds(until, min(share / 10, 2.0))))


def _first_order(prob, lb: int, need_order, until: float) -> tuple[str, ...]:
    """The order a free schedule is solved in first: the given one, or the MPMF order when only that one
    packs without spills (`packing.pack`, by `until`) and the bound allows a plan costing nothing."""
    if lb > 0 or pack(prob, prob.ops, deadline=until) is not None:
        return prob.ops
    ops = set(prob.ops)
    spread = tuple(op for op in need_order(0.25) if op in ops)
    return spread if pack(prob, spread, deadline=until) is not None else prob.ops


def _fallback(graph: Graph, prob, fixed: model.Model, stats: solve.SolveStats, lb: int, need_order, until: float,
              share: float, *, why: str, whole: bool, **opts) -> tuple[model.Model, solve.SolveStats]:
    """A free schedule's answer without its model: the better of the first order's plan and the MPMF order's
    (solved in the time left; its best baseline at least, so a time-out is never above a baseline), judged
    against the spill bound alone.

    Status "time_limit" only when the clock stopped a search (`stats` of the first order, the MPMF
    order's solve, or the free model's build); when every fixed order was solved to its own optimum
    before the limit, the plan is "feasible": the search was cut short by the model's size, which
    `why` and the note say, with what the user can do.
    """
    ops = set(prob.ops)
    spread = tuple(op for op in need_order(0.5) if op in ops)
    stopped, tried = stats.status == "time_limit", 1
    other = None
    if spread != fixed.problem.order:
        try:
            other = model.build(replace(prob, order=spread), deadline=until)
        except model.OutOfTime:  # no time left for the second order: the first order's plan stands
            stopped = True
    if other is not None:
        other, got = _solve_model(graph, other, _own_bound(other.problem, lb, until, share, opts["solver"]), until,
                                  share, need_order, None, whole=whole, **opts)
        stopped, tried = stopped or got.status == "time_limit", 2
        if got.has_solution and (not stats.has_solution
                                 or other.lp.objective.value() < fixed.lp.objective.value() - 1e-9):
            fixed, stats = other, got
    if not stats.has_solution:
        return fixed, replace(stats, status="time_limit")
    value = fixed.lp.objective.value()
    if value <= lb + 1e-6:
        return fixed, replace(stats, status="optimal", gap=0.0, bound=lb)
    gap = (value - lb) / value
    same = ", also the graph's" if spread == prob.ops else ""
    orders = ("two fixed orders (the graph's and the MPMF order), each" if tried == 2
              else f"one fixed order (the MPMF order{same}),")
    note = (f"{why}. The plan is the best found in {orders} "
            + ("searched until the time limit" if stopped else "solved to optimality for that order")
            + f"; it is {gap:.0%} above the spill bound ({lb * prob.unit} B), a bound that may be loose for a free "
            "order. To search further: a longer time_limit_s, divide='auto', or schedule=[...] (a fixed order)")
    status = "time_limit" if stopped else "feasible"
    return fixed, replace(stats, status=status, gap=gap, bound=lb, note=note)


def _solve_model(graph: Graph, m: model.Model, lb: int, until: float, share: float, need_order, fixed_values, *,
                 whole: bool, include_params: bool, word_bits: int, solver: str, known: dict,
                 fraction: float = 1.0) -> tuple[model.Model, solve.SolveStats]:
    """Solve a built model, with the spill bound as a row, from the best start, in `fraction` of the time left."""
    model.add_lower_bound(m, lb)
    start = _start(m, graph, need_order, fixed_values, until, share / 3, lb, known, whole=whole, solver=solver,
                   include_params=include_params, word_bits=word_bits)
    left = fraction * (until - time.perf_counter())
    if left <= 0 and start is not None:  # out of time before the solve: the start is the answer
        return m, solve.take_start(m.lp, start, bound=lb)
    return m, solve.run(m.lp, solver=solver, time_limit_s=max(left, 0.01 if start is not None else 0.2), start=start,
                        bound=lb)


def _start(m: model.Model, graph: Graph, need_order, fixed_values: dict | None, until: float, cap: float, lb: int,
           known: dict, *, whole: bool, include_params: bool, word_bits: int, solver: str) -> dict | None:
    """The cheapest MIP start found, trying costlier sources only while none is at the bound `lb`.

    Sources (past `until`, only the first that gives a plan): the best baseline and the plan built from that order's spill bound cover
    (`atbound.py`, in at most `cap` seconds, or taken from `known`), both in the model's
    order, or the MPMF order when the schedule is free; for a free
    schedule, `fixed_values`, the same problem solved in its given order (its variables
    share names, and any the fixed model lacks are 0 in the free one, so it is a feasible
    start); for a whole graph too long for one segment, the automatic divide-and-conquer
    plan, in at most `cap` seconds. The cover's plan is not tried in a segment of a divided
    free schedule: a segment's optimum leaves a state the next segments must live with, and
    on the NAS-like net the cover's segment optima left worse states than HiGHS's (M_R:
    1 155 072 B joined against 360 448 B).
    """
    prob = m.problem
    opts = _Scope(include_params=include_params, word_bits=word_bits)
    ops = set(prob.ops)
    spread = prob.order or tuple(op for op in need_order(0.25) if op in ops)
    sources = [lambda: best_baseline(m, graph, [spread], **opts, deadline=until)]
    if whole or prob.order is not None:
        sources.append(lambda: _at_bound_start(m, spread, solver, _seconds(until, cap), known))
    if fixed_values is not None:
        sources.append(lambda: fixed_values)
    if whole and len(prob.ops) > (dnc.MAX_OPS_FIXED if prob.order else dnc.MAX_OPS_FREE):
        sources.append(lambda: _divided_start(m, graph, solver, _seconds(until, cap), opts,
                                              mpmf_order=None if prob.order else need_order(0.25)))
    best, cost = None, math.inf
    for source in sources:
        if best is not None and time.perf_counter() >= until:
            break  # out of time: the costlier sources would only overrun the limit
        found = source()
        if found is not None and objective_at(m, found) < cost:
            best, cost = found, objective_at(m, found)
        if cost <= max(lb, 0) + 1e-9:
            break
    return best


def _at_bound_start(m: model.Model, order, solver: str, time_limit_s: float, known: dict) -> dict | None:
    """Values of the plan built in `order` from its spill bound's cover (`atbound.plan_at_bound`; `known` has
    it for the orders already tried), or None."""
    if order not in known:
        known[order] = atbound.plan_at_bound(replace(m.problem, order=order), solver=solver,
                                             time_limit_s=time_limit_s)
    got = known[order]
    return None if got is None else values_of(m, order, *got)


def _divided_start(m: model.Model, graph: Graph, solver: str, time_limit_s: float, opts: _Scope, *,
                   mpmf_order=None) -> dict | None:
    """Values of the whole problem's divide-and-conquer plan: segments solve fast, and the whole ILP then
    only has to improve on their joint plan (and prove a bound on it)."""
    prob = m.problem
    fixed = prob.order is not None
    got = solve_cosma(graph, prob.budget, prob.order or prob.ops, fixed=fixed, divide="auto",
                      time_limit_s=time_limit_s, solver=solver, mpmf_order=mpmf_order or None, **opts)
    if not got.order:
        return None
    return values_of(m, got.order, got.placements, got.spills, got.retrievals)


def _proven(statuses) -> str:
    """How many segments the ILP proved optimal: a segment stopped by the time limit keeps its best plan so far."""
    optimal = sum(status == "optimal" for status in statuses)
    return "each proven optimal by the ILP" if optimal == len(statuses) else \
        f"{optimal} of {len(statuses)} proven optimal by the ILP"


def _join(plans, statuses, gaps, notes=()) -> Joined:
    """Shift each segment's steps by its start and fuse stays that continue across a boundary (same address, not
    written out there), dropping the next segment's retrieval of a tensor that stayed."""
    order: list[str] = []
    placements: list[Placement] = []
    spills: list[tuple[str, int]] = []
    retrievals: list[tuple[str, int]] = []
    open_at: dict[str, int] = {}  # tensor -> index in placements of its stay reaching the previous boundary
    for lo, plan in plans:
        order.extend(plan.order)
        reaching: dict[str, int] = {}
        stayed: set[str] = set()
        written_out = {a for a, t in plan.spills if t == 0}
        for p in plan.placements:
            shifted = Placement(p.tensor, p.first_step + lo, p.last_step + lo, p.address, p.size)
            j = open_at.get(p.tensor)
            if (j is not None and p.first_step == 0 and placements[j].address == p.address
                    and p.tensor not in written_out):  # continues across the boundary
                prev = placements[j]
                placements[j] = prev._replace(last_step=shifted.last_step)
                stayed.add(p.tensor)  # it never left the chip: a retrieval the segment lists here is not needed
                idx = j
            else:
                placements.append(shifted)
                idx = len(placements) - 1
            if p.last_step == len(plan.order) - 1:
                reaching[p.tensor] = idx
        open_at = reaching
        spills += [(a, t + lo) for a, t in plan.spills]
        retrievals += [(a, t + lo) for a, t in plan.retrievals if not (t == 0 and a in stayed)]
    if len(plans) == 1:
        status, gap = statuses[0], gaps[0]
    else:
        status = "time_limit" if "time_limit" in statuses else "feasible"
        gap = None
    message = "" if len(plans) == 1 else f"divide-and-conquer over {len(plans)} segments, {_proven(statuses)}"
    message = "; ".join(([message] if message else []) + list(notes))
    return Joined(tuple(order), tuple(sorted(placements, key=lambda p: (p.first_step, p.address))), tuple(spills),
                  tuple(retrievals), status, gap, message)
