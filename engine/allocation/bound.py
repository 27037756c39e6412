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
from types import MappingProxyType

import pulp

from engine.allocation import model, solve
from engine.allocation.lifetimes import ancestors
from engine.allocation.problem import Carry, Problem
from engine.allocation.record import live_per_step

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


def staged_bound(problem: Problem, life, *, solver: str = "highs",
                 time_limit_s: float = 5.0) -> tuple[int, tuple[str, ...] | None]:
    """(A lower bound on Eq. 12 in units, an order) for a free schedule in forced stages: the sum of the stages' bounds.

    An op whose window is one step (`life.ops`: every op before it is an ancestor, every op
    after a descendant) runs at that step in every order, so every order is a concatenation
    of orders of the stages these ops close (an LLM's layers, its attention and MLP halves).
    A step's spills and retrievals belong to its stage, and a plan's part in one stage is a
    plan of that stage alone in which the tensors it brings in load free once and tensors
    read later may leave free: a relaxation of the stage, so the better of its `spill_bound`
    and `relaxed_bound` is at most that part's cost, and their sum is at most the whole's.
    A tensor that waits across stages it is not used in (an LLM's residual stream across
    attention) is on chip there or comes back later at the cost of its size: each such gap is
    given to the first stage of more than one op inside it, as a tensor resident at its start
    that later stages read (off chip, it is charged its retrieval, which no stage counts
    otherwise). DRAM holds it there, so its spill is free, except in the first gap given to a
    stage of a tensor made on chip: no stage before can have charged a way off chip, so the
    spill it needs is charged there, once.
    Stages equal up to tensor names (the layers of one model) are bounded once. The order
    runs each stage in the order of its relaxation's plan (a good order to place, as for
    `relaxed_bound`). (0, None) when the problem has a fixed order or starts with tensors on chip.
    """
    p = problem
    if p.order is not None or p.carry.resident:
        return 0, None
    deadline = time.perf_counter() + time_limit_s
    ends = [i + 1 for i, op in enumerate(p.ops) if life.ops[op] == (i, i)]
    stages = [p.ops[lo:hi] for lo, hi in zip([0, *ends], [*ends, len(p.ops)]) if hi > lo]
    stage_of = {op: k for k, ops in enumerate(stages) for op in ops}
    made = {a: stage_of[op] for a, op in p.producer.items()}
    read_in = {a: stage_of[readers[-1]] for a, readers in p.consumers.items()}  # the stage of its last reader
    waits: dict[int, list[str]] = {}  # stage -> tensors waiting across it, each gap given to one stage
    unsaved: set[str] = set()  # waits DRAM cannot hold yet: made on chip and never charged a way off before
    for a in p.tensors:
        used = sorted({*(stage_of[r] for r in p.consumers.get(a, ())), *((made[a],) if a in made else ())})
        used += [len(stages)] if a in p.keep else []
        first = a in made and a not in p.free_spill and a not in p.carry.host
        for lo, hi in zip(used, used[1:]):
            k = next((k for k in range(lo + 1, hi) if len(stages[k]) > 1), None)
            if k is not None:
                waits.setdefault(k, []).append(a)
                if first:
                    unsaved.add(a)
                first = False
    shapes: dict[tuple, Problem] = {}  # a stage's shape (ops' tensors by first appearance, sizes, flags) -> a stage
    keys = []
    for k, ops in enumerate(stages):
        touched = dict.fromkeys(a for op in ops for a in (*p.reads[op], *p.writes[op]))
        brought = {a for a in touched if made.get(a, -1) < k} | (p.carry.fresh & touched.keys())
        leaves = {a for a in touched if read_in.get(a, -1) > k or a in p.keep} | (p.free_spill & touched.keys())
        host = brought | (p.carry.host & touched.keys())
        wait = waits.get(k, [])
        local = {a: i for i, a in enumerate(touched)}
        key = (tuple((tuple(local[a] for a in p.reads[op]), tuple(local[a] for a in p.writes[op])) for op in ops),
               tuple(p.size[a] for a in touched), *(frozenset(local[a] for a in s) for s in (brought, leaves, host)),
               tuple(sorted((p.size[a], a in unsaved) for a in wait)))
        keys.append(key)
        saved = {a for a in wait if a not in unsaved}
        shapes.setdefault(key, Problem(ops, p.reads, p.writes, p.size, frozenset(leaves),
                                       Carry(MappingProxyType(dict.fromkeys(wait, 0)), frozenset(host | saved),
                                             frozenset(brought)), frozenset(wait), p.budget))
    # a lone op's tensors fit any budget the problem admits: its stage costs nothing
    known = dict.fromkeys(shapes, 0)  # shape -> the stage's bound in bytes (0 until bounded: still a bound)
    ranks = {key: tuple(range(len(stage.ops))) for key, stage in shapes.items()}  # shape -> its plan's op positions
    todo = [(key, stage) for key, stage in shapes.items() if len(stage.ops) > 1 or stage.keep]
    for j, (key, stage) in enumerate(todo):
        if time.perf_counter() >= deadline:
            break  # the stages left keep 0
        left = max(deadline - time.perf_counter(), 0.0) / (len(todo) - j)
        units = spill_bound(stage, solver=solver, time_limit_s=max(left / 4, 0.01))
        relaxed, order = relaxed_bound(stage, solver=solver, time_limit_s=max(deadline - time.perf_counter(), 0.0)
                                       / (len(todo) - j))
        known[key] = max(units, relaxed) * stage.unit
        if order is not None:
            ranks[key] = tuple(stage.ops.index(op) for op in order)
    order = tuple(ops[i] for ops, key in zip(stages, keys) for i in ranks[key])
    return sum(known[key] for key in keys) // p.unit, order


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
    for (a, _rest), y in gap_var.items():
        if a in spilled:
            lp += y <= spilled[a], f"spill_{y.name}"
    lp += (pulp.lpSum((p.size[a] // unit) * y for (a, _), y in gap_var.items())
           + pulp.lpSum((p.size[a] // unit) * z for a, z in spilled.items())), "offchip"
    for k, (excess, live) in enumerate(cover):
        lp += pulp.lpSum((p.size[a] // unit) * gap_var[a, rest] for a, rest in live) >= excess, f"cover_{k}"
    return Cover(lp, gap_var, spilled)


def _excess_cover(p: Problem) -> list[tuple[int, list[tuple[str, frozenset]]]]:
    """Per op whose step is over budget: (excess units, [(surely-live tensor, its reads still to come)]).

    A tensor is surely live at an op it does not touch when it has surely been on chip before
    (`_started`) and is read after. In a fixed order these ops are an interval of positions: a running sum
    gives every step's load and one sweep lists the tensors live at the steps over budget, so the work is
    linear in the ops and tensors plus the cover's own size (a Concat of 25,000 inputs: no step over budget
    at M_P, and none of its 3 x 10^8 live pairs listed). In a free one each tensor's set of such ops is a
    bitset over `p.ops` (descendants of its start and ancestors of its readers), so the work follows the live
    pairs, not ops x tensors.
    """
    reads = {a: p.consumers.get(a, ()) + ((END,) if a in p.keep else ()) for a in p.tensors}
    if p.order is not None:
        return _excess_in_order(p, reads)
    unit, budget, n = p.unit, p.budget // p.unit, len(p.ops)
    index = {op: i for i, op in enumerate(p.ops)}
    every = (1 << n) - 1
    anc = ancestors(p)
    desc = dict.fromkeys(p.ops, 0)
    for op in reversed(p.ops):  # topological order reversed: successors first
        for q in p.preds[op]:
            desc[q] |= desc[op] | 1 << index[op]

    def live_ops(a: str) -> int:
        later = every if END in reads[a] else _union(anc[r] for r in reads[a])
        if a in p.carry.resident:
            return later
        starts = (p.producer[a],) if a in p.producer else reads[a]
        return later & _union(desc[r] for r in starts if r != END)

    touched = dict.fromkeys(p.tensors, 0)
    for op in p.ops:
        for a in (*p.reads[op], *p.writes[op]):
            touched[a] |= 1 << index[op]
    load = [sum(p.size[a] for a in {*p.reads[op], *p.writes[op]}) // unit for op in p.ops]
    live: list[list[str]] = [[] for _ in p.ops]
    for a in p.tensors:
        bits = live_ops(a) & ~touched[a]
        while bits:
            low = bits & -bits
            i = low.bit_length() - 1
            live[i].append(a)
            load[i] += p.size[a] // unit
            bits ^= low
    return [(load[i] - budget, [(a, frozenset()) for a in live[i]]) for i in range(n) if load[i] > budget]


def _excess_in_order(p: Problem, reads: dict) -> list[tuple[int, list[tuple[str, frozenset]]]]:
    """`_excess_cover` of a fixed order: a tensor is surely live at the steps strictly between its start (made,
    first read, or on chip before the segment) and its last read, but those it is used at."""
    assert p.order is not None
    unit, budget, n = p.unit, p.budget // p.unit, len(p.order)
    pos = {op: t for t, op in enumerate(p.order)}
    starting: list[list[str]] = [[] for _ in range(n + 1)]  # step -> tensors whose span starts there
    span = {}  # tensor -> (first, stop): surely live at first <= t < stop, the steps it is used at aside
    for a in p.tensors:
        stop = n if END in reads[a] else max((pos[r] for r in reads[a]), default=-1)
        first = (-1 if a in p.carry.resident else pos[p.producer[a]] if a in p.producer
                 else min((pos[r] for r in reads[a] if r != END), default=n)) + 1
        if first < stop:
            span[a] = (first, stop)
            starting[first].append(a)
    # step -> units the surely-live tensors take, then its own tensors too
    load = live_per_step(((first, stop - 1, p.size[a] // unit) for a, (first, stop) in span.items()), n + 1)
    for t, op in enumerate(p.order):
        for a in {*p.reads[op], *p.writes[op]}:
            if not (a in span and span[a][0] <= t < span[a][1]):  # already counted when surely live
                load[t] += p.size[a] // unit
    rank = {a: k for k, a in enumerate(p.tensors)}
    index = {op: i for i, op in enumerate(p.ops)}
    rows = []
    active: dict[str, None] = {}  # tensors whose span has begun (those ended leave lazily)
    rests: dict[tuple[str, int], frozenset] = {}  # (tensor, its next read) -> its reads from then on: a gap's key
    for t, op in enumerate(p.order):
        active.update(dict.fromkeys(starting[t]))
        if load[t] <= budget:
            continue
        own = {*p.reads[op], *p.writes[op]}
        live = []
        for a in list(active):
            if span[a][1] <= t:
                del active[a]
            elif a not in own:
                nxt = min((pos[r] for r in reads[a] if r != END and pos[r] > t), default=n)
                if (a, nxt) not in rests:
                    rests[a, nxt] = frozenset(r for r in reads[a] if r == END or pos[r] > t)
                live.append((rank[a], a, rests[a, nxt]))
        rows.append((index[op], load[t] - budget, [(a, rest) for _, a, rest in sorted(live)]))
    return [(excess, live) for _, excess, live in sorted(rows)]


def _union(masks) -> int:
    out = 0
    for m in masks:
        out |= m
    return out
