"""Minimum peak memory footprint order (COSMA Sec. III-E1, Eq. 13-15) and the budgets M_R, M_H, M_P.

The graph is cut only where cuts are lossless (`divide.lossless_cuts`), so the order
found per segment joins into a globally optimal one: the peak is the largest segment
peak, each segment counting what is live across it.
"""

from __future__ import annotations

import math
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from types import MappingProxyType

from engine.allocation import model, solve
from engine.allocation.divide import lossless_cuts
from engine.allocation.problem import Carry, make_problem, requirement
from engine.allocation.record import needs
from engine.bitmask import bits
from engine.graph import Graph


@dataclass(frozen=True)
class Footprint:
    """An order of minimum peak footprint (bytes on chip, no spilling), and how sure the solver is."""

    order: tuple[str, ...]
    peak_bytes: int
    status: str  # "optimal", or "time_limit" when some segment's solve stopped early (peak is then an upper bound)
    seconds: float


def footprint(graph: Graph, order, *, include_params: bool = False, word_bits: int = 16) -> int:
    """Peak bytes on chip when `order` runs with every tensor on chip from first to last use (no spills)."""
    last: dict[str, int] = {}
    first: dict[str, int] = {}
    for t, op in enumerate(order):
        reads, writes = needs(graph, op, include_params)
        for a in reads + writes:
            first.setdefault(a, t)
            last[a] = t
    on_chip = [0] * len(order)
    for a, t0 in first.items():
        for t in range(t0, last[a] + 1):
            on_chip[t] += graph.tensor(a).nbytes(word_bits)
    return max(on_chip, default=0)


DP_STATES = 200_000  # down-sets a segment may have before the DP gives way to the ILP
DP_GRACE_S = 0.05  # the DPs run until this long after the search began, past the deadline too: a small segment's
# exact order is cheap (once per search, not per segment: NASNet-A Mobile's cells overran a 0.02 s limit by 0.19 s)
CACHE_SIZE = 64
_cache: OrderedDict = OrderedDict()  # (graph, include_params, word_bits, solver) -> (time limit used, Footprint)


def mpmf(graph: Graph, *, include_params: bool = False, word_bits: int = 16, time_limit_s: float = 60.0,
         solver: str = "highs") -> Footprint:
    """An op order of minimum peak footprint, exact per lossless segment, found within `time_limit_s`.

    Each segment is solved by dynamic programming over its down-sets (sets of ops closed
    under predecessors, Serenity's formulation) while there are few of them, else by the
    ILP of Eq. 13-15 in the time left. Results are cached per graph and setting; a cached
    one is reused when it is proven optimal or was given at least `time_limit_s`.
    """
    key = (graph, include_params, word_bits, solver)
    hit = _cache.get(key)
    if hit is not None and (hit[1].status == "optimal" or hit[0] >= time_limit_s):
        _cache.move_to_end(key)
        return hit[1]
    got = _search(graph, include_params, word_bits, solver, time.perf_counter() + time_limit_s)
    _cache[key] = (time_limit_s, got)
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return got


mpmf.cache_clear = _cache.clear  # type: ignore[attr-defined]  # as lru_cache offers: tests start cold with it


def _search(graph: Graph, include_params: bool, word_bits: int, solver: str, deadline: float) -> Footprint:
    """`mpmf` uncached: segment by segment, each by the DP or the ILP, all by `deadline` (then the given order)."""
    began = time.perf_counter()
    order = tuple(op.name for op in graph.ops)
    flags = lossless_cuts(graph, order)
    bounds, start = [], 0
    for p, ok in enumerate(flags):
        if ok:
            bounds.append((start, p + 1))
            start = p + 1
    bounds.append((start, len(order)))
    carry = Carry.start(graph, include_params)
    last_read: dict[str, int] = {}  # tensor -> position of the last op that reads it
    for p, op in enumerate(order):
        for a in needs(graph, op, include_params)[0]:
            last_read[a] = p
    loose = _loose_budget(graph, word_bits)
    result: list[str] = []
    status = "optimal"
    for lo, hi in bounds:  # each segment costs its own size: a graph of thousands of segments stays linear
        ops = order[lo:hi]
        touched = _touched(graph, ops, include_params)
        later = frozenset(a for a in touched | set(carry.resident) if last_read.get(a, -1) >= hi)
        prob = make_problem(graph, ops, loose, carry, include_params=include_params, word_bits=word_bits, later=later)
        picked = _downset_dp(prob, deadline=max(deadline, began + DP_GRACE_S)) if len(ops) > 1 else ops
        if picked is None:
            picked, optimal = _ilp_order(prob, solver=solver, deadline=deadline)
            status = status if optimal else "time_limit"
        result.extend(picked)
        carry = Carry(MappingProxyType({a: 0 for a in later}), carry.host, carry.fresh - touched)
    peak = footprint(graph, result, include_params=include_params, word_bits=word_bits)
    return Footprint(tuple(result), peak, status, time.perf_counter() - began)


def _ilp_order(prob, *, solver: str, deadline: float) -> tuple[tuple[str, ...], bool]:
    """Eq. 13-15 on one segment by `deadline`: (order, proven optimal); the given order if no solution came back."""
    if time.perf_counter() >= deadline:  # building the model alone can take seconds
        return prob.ops, False
    try:
        m = model.build(prob, objective=model.PEAK, deadline=deadline)
    except model.OutOfTime:
        return prob.ops, False
    left = deadline - time.perf_counter()
    if left <= 0:
        return prob.ops, False
    stats = solve.run(m.lp, solver=solver, time_limit_s=left)
    if not stats.has_solution:
        return prob.ops, False
    picked = sorted((t, op) for (op, t), x in m.X.items() if x.varValue > 0.5)
    return tuple(op for _, op in picked), stats.status == "optimal"


def _downset_dp(prob, *, deadline: float = math.inf) -> tuple[str, ...] | None:
    """Order of minimum peak over all schedules of `prob` by DP over down-sets; None past DP_STATES states
    or `deadline`.

    After a down-set D has run, a tensor is on chip if it is carried in or touched by D and
    still read later (in the segment or after it); running op o next adds o's own tensors
    that are not on chip yet (its outputs, first loads). best[D] = min over ready o of
    max(bytes at o's step, best[D | o]). Branches reaching the given order's peak are cut
    (a fixed bound keeps the memo exact below it); if none beats it, the given order is optimal.
    """
    ops = prob.ops
    bit = {op: 1 << i for i, op in enumerate(ops)}
    full = (1 << len(ops)) - 1
    pred_mask = {op: sum(bit[p] for p in prob.preds[op]) for op in ops}
    for op, twin in _twins(prob).items():  # interchangeable ops run in the given order: no optimum is lost
        pred_mask[op] |= bit[twin]
    succ_mask = dict.fromkeys(ops, 0)  # the ops each op's running may make ready (twins' order included)
    for op in ops:
        for i in bits(pred_mask[op]):
            succ_mask[ops[i]] |= bit[op]
    readers = {a: sum(bit[c] for c in prob.consumers.get(a, ())) for a in prob.tensors}
    touch = {op: tuple(dict.fromkeys(prob.reads[op] + prob.writes[op])) for op in ops}
    size, later = prob.size, prob.keep

    def needed(a: str, done: int) -> bool:
        return a in later or readers[a] & ~done != 0

    start_live = frozenset(a for a in prob.carry.resident if a in prob.tensors)
    start_bytes = sum(size[a] for a in start_live)
    best: dict[int, tuple[float, str | None]] = {full: (0, None)}
    calls = [0]

    def step(done: int, live: frozenset, live_bytes: int, op: str):
        """(bytes while `op` runs, state after it)."""
        new = [a for a in touch[op] if a not in live]
        after = done | bit[op]
        gone = [a for a in touch[op] if a in live and not needed(a, after)]
        kept_new = [a for a in new if needed(a, after)]
        return (live_bytes + sum(size[a] for a in new), after, (live - set(gone)) | set(kept_new),
                live_bytes - sum(size[a] for a in gone) + sum(size[a] for a in kept_new))

    bound, state = 0, (0, start_live, start_bytes)
    for op in ops:  # the given order's peak: the bound to beat
        here, *state = step(*state, op)
        bound = max(bound, here)

    def solve_from(done: int, live: frozenset, live_bytes: int, ready: int) -> float:
        """Least peak from the down-set `done` on; `ready`: its ops whose predecessors have all run (kept as the
        state grows, not found again among every op)."""
        if done in best:
            return best[done][0]
        calls[0] += 1  # the clock is read every 64 new states (a few ms), however deep the descent
        if len(best) > DP_STATES or (calls[0] & 63 == 0 and time.perf_counter() > deadline):
            raise _TooWide
        choice = (math.inf, None)
        moves = sorted((step(done, live, live_bytes, ops[i]), ops[i]) for i in bits(ready))
        for (here, after, live2, bytes2), op in moves:  # cheapest step first tightens the cut sooner
            if here >= min(choice[0], bound):
                break
            now = ready & ~after
            for i in bits(succ_mask[op]):  # successors of op whose last predecessor op was
                if not pred_mask[ops[i]] & ~after:
                    now |= 1 << i
            value = max(here, solve_from(after, live2, bytes2, now))
            if value < choice[0]:
                choice = (value, op)
        best[done] = choice
        return choice[0]

    depth = sys.getrecursionlimit()
    sys.setrecursionlimit(max(depth, 4 * len(ops) + 100))
    try:
        if solve_from(0, start_live, start_bytes, sum(bit[op] for op in ops if not pred_mask[op])) == math.inf:
            return ops
    except _TooWide:
        return None
    finally:
        sys.setrecursionlimit(depth)
    picked: list[str] = []
    done = 0
    while done != full:
        nxt = best[done][1]
        assert nxt is not None, "a solved state without its next op"  # only the full state has none
        picked.append(nxt)
        done |= bit[nxt]
    return tuple(picked)


def _twins(prob) -> dict[str, str]:
    """Op -> the op before it in the given order that it is interchangeable with (same predecessors and reads,
    outputs alike in size, readers and being kept): swapping two such ops' names maps every schedule to one
    of the same footprint, so the DP may fix their relative order (one tensor read by N alike ops: N + 1
    down-sets of them instead of 2^N)."""
    consumers = prob.consumers

    def alike(op: str):
        writes = prob.writes[op]
        if set(writes) & set(prob.reads[op]) or set(writes) & set(prob.carry.resident):
            return None
        return (frozenset(prob.preds[op]), frozenset(prob.reads[op]),
                tuple(sorted((prob.size[a], frozenset(consumers.get(a, ())), a in prob.keep) for a in writes)))

    last: dict = {}
    twin = {}
    for op in prob.ops:
        key = alike(op)
        if key is None:
            continue
        if key in last:
            twin[op] = last[key]
        last[key] = op
    return twin


class _TooWide(Exception):
    """The segment has more down-sets than the DP may visit, or the time is up."""


def _loose_budget(graph: Graph, word_bits: int) -> int:
    return sum(t.nbytes(word_bits) for t in graph.tensor_list)


def _touched(graph: Graph, ops, include_params: bool) -> set[str]:
    """Tensors `ops` read or write (their weights too with `include_params`)."""
    touched: set[str] = set()
    for op in ops:
        o = graph.op(op)
        touched.update(o.inputs + o.outputs + (o.weights if include_params else ()))
    return touched


def budgets(graph: Graph, word_bits: int = 16, *, include_params: bool = False, time_limit_s: float = 60.0,
            solver: str = "highs") -> tuple[int, int, int]:
    """COSMA's budgets (Sec. V-A2): M_R (largest single-op need), M_P (minimum peak footprint), M_H = (M_R+M_P)/2.

    M_P is exact when the footprint solve finishes within `time_limit_s`, else an upper bound.
    """
    m_r = max(requirement(graph, op.name, include_params=include_params, word_bits=word_bits) for op in graph.ops)
    m_p = mpmf(graph, include_params=include_params, word_bits=word_bits, time_limit_s=time_limit_s,
               solver=solver).peak_bytes
    return m_r, (m_r + m_p) // 2, m_p
