"""COSMA's ILP (Eq. 1-12) and its minimum-peak-footprint variant (Eq. 13-15), built with PuLP.

Constants come first (windows, pairs, sizes in units of `Problem.unit`), then one small
function per constraint group; every constraint is named after its equation. Variables
exist only inside the windows `lifetimes` computes, so a fixed schedule (Eq. 16) is a
problem whose op windows are single steps. Three additions keep the model exact and
small: one op runs per step (the paper's timestep semantics); a tensor leaves the chip
once its last reader has run and is retrieved only at a reader's step (what makes the
overlap pruning sound, and never worse); and, for a segment of a divided graph, tensors
later segments read must end on chip or in DRAM, with a retrieval charged when they end
off chip. One implied row makes it fast: the bytes on chip at a step fit the budget
(`_add_capacity`), which gives the LP relaxation a real bound where Eq. 10's big-M rows
give none. Eq. 11's V variable equals P under Eq. 2, so P stands in for it. Addresses L
are continuous: for fixed relative positions Eq. 9-11 are difference constraints with
integer data, so `solution.compact` recovers integer addresses without loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pulp

from engine.allocation.lifetimes import Lifetimes, OutOfTime, analyse
from engine.allocation.problem import Problem

OFFCHIP, PEAK = "offchip", "peak"
CHECK_EVERY = 1024  # Eq. 10 pairs between two looks at the clock while building


@dataclass
class Model:
    """The PuLP problem plus its variables, keyed (tensor, step) or (op, step)."""

    problem: Problem
    life: Lifetimes
    objective: str
    lp: pulp.LpProblem
    C: dict = field(default_factory=dict)  # created
    P: dict = field(default_factory=dict)  # preserved
    S: dict = field(default_factory=dict)  # spilled
    R: dict = field(default_factory=dict)  # retrieved (or loaded)
    L: dict = field(default_factory=dict)  # base address, in units
    X: dict = field(default_factory=dict)  # op runs at step: its first output's C
    peak: pulp.LpVariable | None = None
    idx: dict = field(default_factory=dict)  # tensor -> number used in variable and constraint names
    deadline: float = math.inf  # perf_counter time past which building gives up (OutOfTime)
    addresses: bool = True  # False: Eq. 9-11 left out, a relaxation (no L, u, d)

    def check_time(self) -> None:
        """Raise OutOfTime once the deadline has passed."""
        if time.perf_counter() > self.deadline:
            raise OutOfTime(f"model of {len(self.problem.ops)} ops not built by the deadline")

    def spills_of(self, a: str, upto: int | None = None) -> list:
        """Spill variables of `a` at steps up to `upto` (all steps when None)."""
        last = len(self.problem.ops) - 1 if upto is None else upto
        return [self.S[a, t] for t in range(last + 1) if (a, t) in self.S]

    def res(self, a: str, t: int) -> list:
        """Variables whose sum says tensor `a` is on chip at step `t` (res in Eq. 10)."""
        return [v[a, t] for v in (self.C, self.P, self.R) if (a, t) in v]


def build(problem: Problem, *, objective: str = OFFCHIP, deadline: float = math.inf,
          life: Lifetimes | None = None, addresses: bool = True) -> Model:
    """The ILP of `problem`: min off-chip bytes (Eq. 12/17) or min peak footprint (Eq. 15).

    Raises OutOfTime when `deadline` (a perf_counter time) passes first: a free schedule's
    model can take longer to build than a whole time limit (the Transformer's: 17 s).
    `life` is `lifetimes.analyse(problem)` when the caller has it already. Without
    `addresses` Eq. 9-11 are left out (the capacity row stays): a relaxation whose
    optimum is a lower bound on Eq. 12 (`bound.relaxed_bound`).
    """
    life = life or analyse(problem, deadline=deadline)
    m = Model(problem, life, objective, pulp.LpProblem("cosma", pulp.LpMinimize),
              idx={a: i for i, a in enumerate(problem.tensors)}, deadline=deadline, addresses=addresses)
    groups = [_add_variables, _add_single_action, _add_preserve_after_resident, _add_creation, _add_one_op_per_step,
              _add_data_dependency, _add_liveness]
    if objective == PEAK:
        groups += [_add_single_load, _add_keep_resident, _add_peak]
    else:
        groups += [_add_spill_after_resident, _add_retrieve_after_spill, _add_single_spill, _add_keep_or_spill,
                   _add_capacity]
        groups += [_add_no_overlap, _add_persistence] if addresses else []
        groups += [_add_offchip_objective]
    for add in groups:
        m.check_time()
        add(m)
    return m


# ---- variables ------------------------------------------------------------
def _add_variables(m: Model) -> None:
    p, life, peak, idx = m.problem, m.life, m.objective == PEAK, m.idx
    reader_steps = {}
    for a in p.tensors:
        steps: set[int] = set()
        for c in p.consumers.get(a, ()):
            lo, hi = life.ops[c]
            steps.update(range(lo, hi + 1))
        reader_steps[a] = steps
    for a, w in life.tensors.items():
        i, size = idx[a], p.size[a] // p.unit
        lasting = a in p.keep or bool(p.consumers.get(a))
        host, resident = a in p.carry.host, a in p.carry.resident
        if w.create is not None:
            for t in range(w.create[0], w.create[1] + 1):
                m.C[a, t] = m.lp.add_variable(f"C_{i}_{t}", cat=pulp.LpBinary)
        if lasting:
            _add_stay_variables(m, a, i, w, host, resident, reader_steps[a])
        if not peak and m.addresses:
            for t in range(w.first, w.last + 1):
                if m.res(a, t):  # Eq. 9 as the variable's bounds
                    m.L[a, t] = m.lp.add_variable(f"L_{i}_{t}", 0, max(p.budget // p.unit - size, 0))
    for op in p.ops:
        first_out = p.writes[op][0]
        lo, hi = life.ops[op]
        for t in range(lo, hi + 1):
            m.X[op, t] = m.C[first_out, t]


def _add_stay_variables(m: Model, a: str, i: int, w, host: bool, resident: bool, reader_steps: set) -> None:
    """P, R and S of a tensor that outlives its creation step (read later, or kept for later segments)."""
    peak = m.objective == PEAK
    p_from = 0 if resident else w.first + 1
    for t in range(p_from, w.last + 1):
        m.P[a, t] = m.lp.add_variable(f"P_{i}_{t}", cat=pulp.LpBinary)
    if host or not peak:
        r_from = w.first if host else (0 if resident else w.first + 1)
        for t in sorted(s for s in reader_steps if r_from <= s <= w.last):
            m.R[a, t] = m.lp.add_variable(f"R_{i}_{t}", cat=pulp.LpBinary)
    if not host and not peak:
        s_from, s_to = (0 if resident else w.first + 1), w.last
        for t in range(s_from, s_to + 1):
            m.S[a, t] = m.lp.add_variable(f"S_{i}_{t}", cat=pulp.LpBinary)


# ---- scheduling and replacement (Sec. III-B) --------------------------------
def _add_single_action(m: Model) -> None:
    """Eq. 1, split in two: one of create/preserve/spill, and one of create/preserve/retrieve, per tensor and step.

    The split lets a spill and a retrieval share a step: the tensor moves through DRAM to a
    new address at the cost of both (Eq. 4 already counts spills up to step t inclusive).
    The baselines need this move when an op's own tensors fragment the arena, so allowing
    it keeps every baseline plan inside COSMA's space.
    """
    idx = m.idx
    for a, t in set(m.C) | set(m.P) | set(m.S) | set(m.R):
        for tag, extra in (("s", m.S), ("r", m.R)):
            acts = [v[a, t] for v in (m.C, m.P, extra) if (a, t) in v]
            if len(acts) > 1:
                m.lp += pulp.lpSum(acts) <= 1, f"eq1{tag}_{idx[a]}_{t}"


def _add_preserve_after_resident(m: Model) -> None:
    """Eq. 2: a tensor is preserved only if it was on chip the step before (carried tensors: at step -1)."""
    idx = m.idx
    for (a, t), v in m.P.items():
        if t == 0:
            continue  # only carried-in tensors have P at step 0, and they were on chip at step -1
        m.lp += v <= pulp.lpSum(m.res(a, t - 1)), f"eq2_{idx[a]}_{t}"


def _add_spill_after_resident(m: Model) -> None:
    """Eq. 3: a tensor is spilled only if it was created or preserved the step before."""
    idx = m.idx
    for (a, t), v in m.S.items():
        if t == 0:
            continue  # carried-in tensors were on chip at step -1
        prev = [x[a, t - 1] for x in (m.C, m.P) if (a, t - 1) in x]
        m.lp += v <= pulp.lpSum(prev), f"eq3_{idx[a]}_{t}"


def _add_retrieve_after_spill(m: Model) -> None:
    """Eq. 4: a tensor is retrieved only if DRAM holds it (spilled earlier, or held from the start)."""
    idx = m.idx
    for (a, t), v in m.R.items():
        if a in m.problem.carry.host:
            continue
        m.lp += v <= pulp.lpSum(m.spills_of(a, t)), f"eq4_{idx[a]}_{t}"


def _add_data_dependency(m: Model) -> None:
    """Eq. 5: when an op runs, each tensor it reads is preserved or retrieved at that step."""
    idx = m.idx
    for (op, t), x in m.X.items():
        for b in m.problem.reads[op]:
            on = [v[b, t] for v in (m.P, m.R) if (b, t) in v]
            m.lp += x <= pulp.lpSum(on), f"eq5_{idx[b]}_{t}_{m.problem.ops.index(op)}"


def _add_creation(m: Model) -> None:
    """Eq. 6-7: sibling outputs are created together, and every tensor exactly once."""
    idx, p = m.idx, m.problem
    for op in p.ops:
        first, lo_hi = p.writes[op][0], m.life.ops[op]
        for b in p.writes[op][1:]:
            for t in range(lo_hi[0], lo_hi[1] + 1):
                m.lp += m.C[b, t] == m.C[first, t], f"eq6_{idx[b]}_{t}"
        for a in p.writes[op]:
            m.lp += pulp.lpSum(m.C[a, t] for t in range(lo_hi[0], lo_hi[1] + 1)) == 1, f"eq7_{idx[a]}"


def _add_single_spill(m: Model) -> None:
    """Eq. 8: at most one spill per tensor; DRAM keeps the copy."""
    _at_most_one_per_tensor(m, m.S, "eq8")


def _at_most_one_per_tensor(m: Model, variables: dict, tag: str) -> None:
    """sum over steps of variables[(tensor, step)] <= 1 for every tensor with more than one."""
    per: dict[str, list] = {}
    for (a, _), v in variables.items():
        per.setdefault(a, []).append(v)
    for a, vs in per.items():
        if len(vs) > 1:
            m.lp += pulp.lpSum(vs) <= 1, f"{tag}_{m.idx[a]}"


def _add_one_op_per_step(m: Model) -> None:
    """Each timestep runs exactly one op (Sec. III-A: a timestep is one operator's execution)."""
    per: dict[int, list] = {}
    for (_op, t), x in m.X.items():
        per.setdefault(t, []).append(x)
    for t, xs in per.items():
        m.lp += pulp.lpSum(xs) == 1, f"step_{t}"


def _add_liveness(m: Model) -> None:
    """Retrieve only at a reader's step; leave the chip after the last reader (sound overlap pruning)."""
    p, life, idx = m.problem, m.life, m.idx
    for (a, t), v in m.R.items():
        runs = [m.X[c, t] for c in p.consumers.get(a, ()) if (c, t) in m.X]
        m.lp += v <= pulp.lpSum(runs), f"use_{idx[a]}_{t}"
    if p.order is not None:
        return  # windows already end at the last reader's step
    runs_from: dict[str, list] = {}  # op -> its X variables, by step
    for (op, t), x in sorted(m.X.items(), key=lambda kv: kv[0][1]):
        runs_from.setdefault(op, []).append((t, x))
    for a, w in life.tensors.items():
        readers = p.consumers.get(a, ())
        if a in p.keep or not readers:
            continue
        earliest = min(life.ops[c][0] for c in readers)
        for t in range(max(w.first, earliest + 1), w.last + 1):
            res = m.res(a, t)
            if res:
                later = [x for c in readers for k, x in runs_from[c] if k >= t]
                m.lp += pulp.lpSum(res) <= pulp.lpSum(later), f"live_{idx[a]}_{t}"


def _add_keep_or_spill(m: Model) -> None:
    """A tensor later segments read ends on chip or in DRAM (never lost)."""
    p, idx, last = m.problem, m.idx, len(m.problem.ops) - 1
    for a in p.keep:
        if a in p.carry.host:
            continue
        m.lp += pulp.lpSum(m.res(a, last) + m.spills_of(a)) >= 1, f"keep_{idx[a]}"


# ---- memory allocation (Sec. III-C) ----------------------------------------
def _add_no_overlap(m: Model) -> None:
    """Eq. 10: two tensors on chip at the same step do not overlap in address.

    With d = 1 (a below b): L_a + size_a <= L_b; with u = 1 the reverse. The big-M is the
    budget, the most L_a + size_a - L_b can be under Eq. 9. Rows are written as term
    lists: PuLP's operators dominate the build time of models with 10^5 pairs.
    """
    p, idx = m.problem, m.idx
    big = p.budget // p.unit
    le, ge = pulp.LpConstraintLE, pulp.LpConstraintGE
    done = 0
    for t, pairs in m.life.pairs.items():
        for a, b in pairs:
            done += 1
            if done % CHECK_EVERY == 0:
                m.check_time()
            la, lb = m.L.get((a, t)), m.L.get((b, t))
            if la is None or lb is None:
                continue
            ia, ib = idx[a], idx[b]
            u = m.lp.add_variable(f"u_{ia}_{ib}_{t}", cat=pulp.LpBinary)
            d = m.lp.add_variable(f"d_{ia}_{ib}_{t}", cat=pulp.LpBinary)
            key = f"{ia}_{ib}_{t}"
            _row(m, [(u, 1), (d, 1)], le, 1, f"eq10a_{key}")
            _row(m, [(u, 1), (d, 1)] + [(v, -1) for v in m.res(a, t) + m.res(b, t)], ge, -1, f"eq10b_{key}")
            _row(m, [(la, 1), (lb, -1), (d, big)], le, big - p.size[a] // p.unit, f"eq10c_{key}")
            _row(m, [(lb, 1), (la, -1), (u, big)], le, big - p.size[b] // p.unit, f"eq10d_{key}")


def _row(m: Model, terms: list, sense: int, rhs: float, name: str) -> None:
    """Add the row sum(coef * var) `sense` rhs; each variable appears once in `terms`."""
    m.lp.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(terms), sense, name, rhs))


def _add_capacity(m: Model) -> None:
    """Bytes on chip at a step fit the budget: implied by Eq. 9-10, stated so the LP relaxation bounds spills.

    Eq. 10's big-M rows let the relaxation overlap tensors freely (u = d = 1/2), so without
    this row its bound is 0 and every spill must be proven necessary by branching.
    """
    p = m.problem
    per: dict[int, list] = {}
    for v in (m.C, m.P, m.R):
        for (a, t), x in v.items():
            per.setdefault(t, []).append((p.size[a] // p.unit) * x)
    for t, terms in per.items():
        m.lp += pulp.lpSum(terms) <= p.budget // p.unit, f"cap_{t}"


def _add_persistence(m: Model) -> None:
    """Eq. 11: a preserved tensor keeps its address (P plays V's part; carried tensors keep theirs)."""
    p, idx = m.problem, m.idx
    for (a, t), keep in m.P.items():
        before = m.L.get((a, t - 1)) if t > 0 else p.carry.resident[a] // p.unit
        if before is None:
            continue  # not on chip at t-1, so Eq. 2 keeps P at 0
        big = max(p.budget // p.unit - p.size[a] // p.unit, 0)  # the widest an address of `a` can move (Eq. 9)
        m.lp += before <= m.L[a, t] + big * (1 - keep), f"eq11a_{idx[a]}_{t}"
        m.lp += m.L[a, t] <= before + big * (1 - keep), f"eq11b_{idx[a]}_{t}"


def _add_offchip_objective(m: Model) -> None:
    """Eq. 12: spilled plus retrieved bytes, less compulsory first loads, plus a retrieval per tensor
    later segments read that ends off chip (zero for a whole graph)."""
    p, last = m.problem, len(m.problem.ops) - 1
    unit = p.unit
    terms = [(p.size[a] // unit) * v for (a, _), v in m.S.items() if a not in p.free_spill]
    terms += [(p.size[a] // unit) * v for (a, _), v in m.R.items()]
    const = -sum(p.size[a] // unit for a in p.carry.fresh if a in p.consumers)
    for a in p.keep:
        const += p.size[a] // unit
        terms += [-(p.size[a] // unit) * v for v in m.res(a, last)]
    m.lp += pulp.lpSum(terms) + const, "eq12_offchip"


def size(life: Lifetimes) -> int:
    """Tensor-steps plus co-resident pairs: what the model's variables and rows grow with (Eq. 10 dominates)."""
    return sum(w.last - w.first + 1 for w in life.tensors.values()) + sum(map(len, life.pairs.values()))


def add_lower_bound(m: Model, units: int) -> None:
    """State Eq. 12 >= `units`, a proven lower bound (`bound.spill_bound`): the optimum is unchanged, and the
    LP relaxation starts from the bound, so a solution meeting it ends the search at once."""
    if units > 0:
        m.lp += m.lp.objective >= units, "bound_offchip"


# ---- minimum peak footprint (Sec. III-E1) ------------------------------------
def _add_single_load(m: Model) -> None:
    """Eq. 13: no spills or retrievals; only the compulsory load of a DRAM-held tensor, once."""
    _at_most_one_per_tensor(m, m.R, "eq13")


def _add_keep_resident(m: Model) -> None:
    """Without spills, tensors later segments read stay on chip to the segment's end."""
    idx, last = m.idx, len(m.problem.ops) - 1
    for a in m.problem.keep:
        m.lp += pulp.lpSum(m.res(a, last)) == 1, f"keepres_{idx[a]}"


def _add_peak(m: Model) -> None:
    """Eq. 14-15: the bytes on chip at every step stay under M_peak, which is minimised."""
    p = m.problem
    m.peak = m.lp.add_variable("M_peak", 0)
    per: dict[int, list] = {}
    for v in (m.C, m.P, m.R):
        for (a, t), x in v.items():
            per.setdefault(t, []).append((p.size[a] // p.unit) * x)
    for t, terms in per.items():
        m.lp += pulp.lpSum(terms) <= m.peak, f"eq14_{t}"
    m.lp += pulp.lpSum([m.peak]), "eq15_peak"
