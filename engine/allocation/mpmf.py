"""Minimum peak memory footprint order (COSMA Sec. III-E1, Eq. 13-15) and the budgets M_R, M_H, M_P.

The graph is cut only where cuts are lossless (`divide.lossless_cuts`), so the order
found per segment joins into a globally optimal one: the peak is the largest segment
peak, each segment counting what is live across it. A segment whose ops fall into independent parts (a
residual chain beside a block, a fan of readers of one tensor) is solved part by part, recursively, so a graph
of tens of thousands of ops in series-parallel blocks costs about its size.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from types import MappingProxyType

from engine.allocation import model, solve
from engine.allocation.divide import lossless_cuts
from engine.allocation.problem import Carry, make_problem, requirement
from engine.allocation.record import needs, peak_of
from engine.bitmask import bits
from engine.graph import Graph


@dataclass(frozen=True)
class Footprint:
    """An order of minimum peak footprint (bytes on chip, no spilling), and how sure the search is.

    status: "optimal" (no order peaks lower: every part solved exactly, or the order meets `lower_bytes`),
    "time_limit" (a solve was stopped by the clock) or "feasible" (parts composed in time but not proven
    optimal); under either of the last two `peak_bytes` is an upper bound and `lower_bytes` a lower one.
    """

    order: tuple[str, ...]
    peak_bytes: int
    status: str
    seconds: float
    lower_bytes: int = 0


def footprint(graph: Graph, order, *, include_params: bool = False, word_bits: int = 16) -> int:
    """Peak bytes on chip when `order` runs with every tensor on chip from first to last use (no spills)."""
    last: dict[str, int] = {}
    first: dict[str, int] = {}
    for t, op in enumerate(order):
        reads, writes = needs(graph, op, include_params)
        for a in reads + writes:
            first.setdefault(a, t)
            last[a] = t
    return peak_of(((t0, last[a], graph.tensor(a).nbytes(word_bits)) for a, t0 in first.items()), len(order))


DP_STATES = 200_000  # down-sets a segment may have before the DP gives way to the ILP
DP_MAX_OPS = 2_000  # ops a segment may have for the DP: its descent holds one set of live tensors per op run, so
# memory grows with ops x live tensors (12,000 readers of one tensor: past 3.7 GB in the DP before this limit)
DP_GRACE_S = 0.05  # the DPs run until this long after the search began, past the deadline too: a small segment's
# exact order is cheap (once per search, not per segment: NASNet-A Mobile's cells overran a 0.02 s limit by 0.19 s)
MAX_DEPTH = 40  # parts within parts followed at most (Python's recursion: about 3 frames per level)
PERMUTE_PARTS = 6  # a segment of at most this many independent parts tries every order of them; more are sorted
CACHE_SIZE = 64
_cache: OrderedDict = OrderedDict()  # (graph, include_params, word_bits, solver) -> (time limit used, Footprint)


def mpmf(graph: Graph, *, include_params: bool = False, word_bits: int = 16, time_limit_s: float = 60.0,
         solver: str = "highs") -> Footprint:
    """An op order of minimum peak footprint, exact per lossless segment, found within `time_limit_s`.

    Each segment is solved by dynamic programming over its down-sets (sets of ops closed
    under predecessors, Serenity's formulation) while there are few of them; a segment of
    independent parts (sharing only tensors made before it) is solved part by part, recursively,
    and the parts run one after another, proven optimal when the order meets the largest part's
    own minimum; else by the ILP of Eq. 13-15 in the time left. Results are cached per graph and
    setting; a cached one is reused when it is proven optimal or was given at least `time_limit_s`.
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


@dataclass(frozen=True)
class _Search:
    """What every part of one `mpmf` search shares."""

    graph: Graph
    include_params: bool
    word_bits: int
    solver: str
    deadline: float  # perf_counter time the ILPs stop at
    dp_deadline: float  # the DPs': the deadline, or DP_GRACE_S after the search began if later
    budget: int  # room for every tensor: the search never spills


@dataclass(frozen=True)
class _Part:
    """An order of some ops (a segment, a part of one, or all) from the memory state they start in."""

    order: tuple[str, ...]
    peak: int  # bytes on chip at its highest step, no spills
    lower: int  # no order of these ops peaks below this (== peak when solved exactly)
    stopped: bool  # a solve inside was stopped by the clock
    states: float  # down-sets of these ops (what a DP over all of them would visit; inf when unknown)


def _search(graph: Graph, include_params: bool, word_bits: int, solver: str, deadline: float) -> Footprint:
    """`mpmf` uncached: segment by segment, each by the DP, by its parts or by the ILP, all by `deadline`."""
    began = time.perf_counter()
    s = _Search(graph, include_params, word_bits, solver, deadline, max(deadline, began + DP_GRACE_S),
                sum(t.nbytes(word_bits) for t in graph.tensor_list))
    part = _solve_ops(s, tuple(op.name for op in graph.ops), Carry.start(graph, include_params), frozenset())
    peak = footprint(graph, part.order, include_params=include_params, word_bits=word_bits)
    status = "optimal" if peak <= part.lower else "time_limit" if part.stopped else "feasible"
    return Footprint(part.order, peak, status, time.perf_counter() - began, min(part.lower, peak))


def _solve_ops(s: _Search, ops: tuple[str, ...], carry: Carry, after: frozenset[str], depth: int = 0) -> _Part:
    """Least-peak order of `ops` (in a topological order, closed under the paths between them) from `carry`,
    tensors in `after` being read once they have run: lossless segment by lossless segment; `depth`: how many
    parts this one lies within."""
    if len(ops) <= 1:
        return _segment(s, make_problem(s.graph, ops, s.budget, carry, include_params=s.include_params,
                                        word_bits=s.word_bits, later=after), depth)
    flags = lossless_cuts(s.graph, ops)
    bounds, start = [], 0
    for p, ok in enumerate(flags):
        if ok:
            bounds.append((start, p + 1))
            start = p + 1
    bounds.append((start, len(ops)))
    last_read: dict[str, int] = {}  # tensor -> position of the last op that reads it
    for p, op in enumerate(ops):
        for a in needs(s.graph, op, s.include_params)[0]:
            last_read[a] = p
    parts = []
    for lo, hi in bounds:  # each segment costs its own size: a graph of thousands of segments stays linear
        seg = ops[lo:hi]
        touched = _touched(s.graph, seg, s.include_params)
        later = frozenset(a for a in touched | set(carry.resident) if last_read.get(a, -1) >= hi or a in after)
        prob = make_problem(s.graph, seg, s.budget, carry, include_params=s.include_params, word_bits=s.word_bits,
                            later=later)
        parts.append(_segment(s, prob, depth))
        carry = Carry(MappingProxyType({a: 0 for a in later}), carry.host, carry.fresh - touched)
    return _Part(tuple(op for p in parts for op in p.order), max(p.peak for p in parts),
                 max(p.lower for p in parts), any(p.stopped for p in parts), sum(p.states for p in parts))


def _segment(s: _Search, prob, depth: int) -> _Part:
    """One lossless segment: its parts run one after another when that meets their bound, else the DP over
    its down-sets, else those parts unproven, else the ILP of Eq. 13-15. Parts within MAX_DEPTH parts only: each
    level walks what it holds again (a chain with a side output at every op nests a part per op)."""
    ops = prob.ops
    if len(ops) <= 1:
        peak = _peak(prob, ops)
        return _Part(ops, peak, peak, False, len(ops) + 1)
    if time.perf_counter() > s.dp_deadline:  # the time is up: the given order, and a bound that costs one pass
        return _Part(ops, _peak(prob, ops), _floor(prob), True, math.inf)
    composed = None
    groups = _components(prob)
    if len(groups) > 1 and depth < MAX_DEPTH:
        composed = _compose(s, prob, groups, depth + 1)
        if composed.peak <= composed.lower or composed.states > DP_STATES:
            return composed
    got = _downset_dp(prob, deadline=s.dp_deadline) if len(ops) <= DP_MAX_OPS else None
    if got is not None:
        peak = _peak(prob, got[0])
        return _Part(got[0], peak, peak, False, got[1])
    if composed is not None:
        return composed
    order, optimal = _ilp_order(prob, solver=s.solver, deadline=s.deadline)
    peak = _peak(prob, order)
    return _Part(order, peak, peak if optimal else _floor(prob), not optimal, math.inf)


def _components(prob) -> list[tuple[str, ...]]:
    """The segment's weakly connected parts (joined through tensors made in it), each in the segment's order;
    parts share only tensors made before the segment."""
    root = {op: op for op in prob.ops}

    def find(op: str) -> str:
        while root[op] != op:
            root[op] = root[root[op]]
            op = root[op]
        return op

    for a, readers in prob.consumers.items():
        maker = prob.producer.get(a)
        if maker is not None:
            for r in readers:
                root[find(r)] = find(maker)
    groups: dict[str, list[str]] = {}
    for op in prob.ops:
        groups.setdefault(find(op), []).append(op)
    return [tuple(g) for g in groups.values()]


def _compose(s: _Search, prob, groups: list[tuple[str, ...]], depth: int) -> _Part:
    """Independent parts of a segment, each solved alone, run one after another in the order of least estimated peak.

    Any order of the segment, restricted to one part, is an order of that part alone in which every tensor the
    part touches is on chip at least as long, so the largest part's own minimum bounds the segment's from below
    (with `_ends`: a fan's readers' outputs all wait for their join). The part orders are tried all ways for a few
    parts, else sorted by peak less what each leaves on chip (Liu's rule for merging independent sequences at their
    valleys); a part's peak in a sequence is estimated from its own, the shared tensors it must keep for parts after
    it, those waiting across it and what earlier parts leave for later segments.
    """
    parts = [_solve_ops(s, g, prob.carry, prob.keep, depth) for g in groups]  # each alone: their bounds hold here
    size = prob.size
    leaves = [sum(size[a] for op in g for a in prob.writes[op] if a in prob.keep) for g in groups]
    readers: dict[str, set[int]] = {}  # a tensor made before the segment -> the parts reading it
    for k, g in enumerate(groups):
        for op in g:
            for a in prob.reads[op]:
                if a not in prob.producer:
                    readers.setdefault(a, set()).add(k)
    shared = {a: ks for a, ks in readers.items() if len(ks) > 1 and a not in prob.keep}
    if len(groups) > PERMUTE_PARTS:
        perm = tuple(sorted(range(len(groups)), key=lambda k: leaves[k] - parts[k].peak))
        return _sequence(prob, parts, perm)
    holding = [_peak(make_problem(s.graph, p.order, s.budget, prob.carry, include_params=s.include_params,
                                  word_bits=s.word_bits, later=prob.keep | {a for a, ks in shared.items() if k in ks}),
                     p.order) for k, p in enumerate(parts)]  # each part's peak keeping the shared tensors it reads
    spans = [(size[a], a in prob.carry.resident, ks) for a, ks in shared.items()]

    def estimate(perm) -> int:
        at = {k: i for i, k in enumerate(perm)}
        worst, left = 0, 0
        for i, k in enumerate(perm):
            waiting, keeps = 0, False
            for b, resident, ks in spans:
                lo, hi = (0 if resident else min(at[j] for j in ks)), max(at[j] for j in ks)
                if k in ks:
                    keeps |= i < hi
                    waiting += b if lo < i and not resident else 0  # on chip before k first reads it
                elif lo <= i <= hi:
                    waiting += b
            worst = max(worst, (holding[k] if keeps else parts[k].peak) + left + waiting)
            left += leaves[k]
        return worst

    return _sequence(prob, parts, min(itertools.permutations(range(len(groups))), key=estimate))


def _sequence(prob, parts: list[_Part], perm) -> _Part:
    """The segment's parts run one after another in the order `perm`."""
    order = tuple(op for k in perm for op in parts[k].order)
    states = math.prod(p.states for p in parts) if len(parts) < 64 else math.inf
    return _Part(order, _peak(prob, order), max(_ends(prob), *(p.lower for p in parts)),
                 any(p.stopped for p in parts), states)


def _peak(prob, order) -> int:
    """Bytes on chip at the highest step of `order` (ops of `prob`) with no spills, as the DP counts them: what is
    carried in and still needed, plus each op's tensors, each leaving after its last read (or at the end if kept)."""
    size, keep = prob.size, prob.keep
    reads_left = {a: len(r) for a, r in prob.consumers.items()}
    known = set(prob.tensors)
    live = {a for a in prob.carry.resident if a in known}
    live_bytes = sum(size[a] for a in live)
    peak = 0
    for op in order:
        touch = tuple(dict.fromkeys(prob.reads[op] + prob.writes[op]))
        for a in prob.reads[op]:
            reads_left[a] -= 1
        peak = max(peak, live_bytes + sum(size[a] for a in touch if a not in live))
        for a in touch:
            needed = a in keep or reads_left.get(a, 0) > 0
            if needed and a not in live:
                live.add(a)
                live_bytes += size[a]
            elif not needed and a in live:
                live.remove(a)
                live_bytes -= size[a]
    return peak


def _floor(prob) -> int:
    """A peak no order of `prob` goes below: its largest op's own tensors, plus what waits across it untouched;
    or what its first and last steps must hold (`_ends`)."""
    touched = {a for op in prob.ops for a in prob.reads[op] + prob.writes[op]}
    waiting = sum(prob.size[a] for a in prob.carry.resident if a in prob.keep and a not in touched)
    return max(_ends(prob), waiting + max(sum(prob.size[a] for a in dict.fromkeys(prob.reads[op] + prob.writes[op]))
                                          for op in prob.ops))


def _ends(prob) -> int:
    """A peak no order of `prob` goes below, from its first and last steps: the first op (one without
    predecessors here) runs with everything carried in and still needed on chip, the last (one without
    successors here) with everything kept for later (a fan's readers' outputs all waiting for their join)."""
    size, keep = prob.size, prob.keep
    known = set(prob.tensors)
    carried = {a for a in prob.carry.resident if a in known}
    kept = set(keep)  # on chip from their first use here (or the start) to the end
    has_succ = {p for op in prob.ops for p in prob.preds[op]}

    def own(op: str, counted: set[str]) -> int:
        return sum(size[a] for a in dict.fromkeys(prob.reads[op] + prob.writes[op]) if a not in counted)

    first = min(own(op, carried) for op in prob.ops if not prob.preds[op])
    last = min(own(op, kept) for op in prob.ops if op not in has_succ)
    return max(sum(size[a] for a in carried) + first, sum(size[a] for a in kept) + last)


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


def _downset_dp(prob, *, deadline: float = math.inf) -> tuple[tuple[str, ...], int] | None:
    """(Order of minimum peak over all schedules of `prob`, down-sets visited) by DP over down-sets; None past
    DP_STATES states or `deadline`.

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

    bound = _peak(prob, ops)  # the given order's peak: the bound to beat

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
            return ops, len(best)
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
    return tuple(picked), len(best)


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

    M_P is exact when `mpmf` proves its order optimal within `time_limit_s` (its status), else an upper bound
    (`mpmf(...).lower_bytes` is then a lower one).
    """
    m_r = max(requirement(graph, op.name, include_params=include_params, word_bits=word_bits) for op in graph.ops)
    m_p = mpmf(graph, include_params=include_params, word_bits=word_bits, time_limit_s=time_limit_s,
               solver=solver).peak_bytes
    return m_r, (m_r + m_p) // 2, m_p
