"""Lifetime and overlap analysis: which steps an op or tensor can occupy, which tensor pairs can meet.

This keeps COSMA's O(|T| x |A|^2) encoding small (Sec. III-F): variables exist only for
steps inside a tensor's window, and no-overlap constraints (Eq. 10) only for pairs that
can be on chip together at that step. An op runs no earlier than its ancestor count and
no later than n-1 minus its descendant count. A tensor is on chip from its creation (or,
for one held in DRAM, from its first reader's step: the model retrieves only at a
reader's step) until its last reader (the model frees it then, see `model`), or to the
end when later segments read it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import accumulate, combinations

from engine.allocation.problem import Problem


@dataclass(frozen=True)
class Window:
    """Steps `first`..`last` a tensor may be on chip; `create` the steps its op may run (None: not made here)."""

    first: int
    last: int
    create: tuple[int, int] | None


@dataclass(frozen=True)
class Lifetimes:
    """Windows of every op and tensor of a problem, and the tensor pairs that may share the chip per step."""

    ops: dict[str, tuple[int, int]]
    tensors: dict[str, Window]
    pairs: dict[int, list[tuple[str, str]]]


MAX_PAIRS = 10_000_000  # tensor pairs sharing a step, counted step by step (NASNet-A Mobile with weights: 7.8 x 10^6)
CLOCK_EVERY = 1 << 16  # pairs looked at between two looks at the clock


class OutOfTime(Exception):
    """The deadline passed while a model (or its lifetimes) was being built (the caller falls back to a plan it has)."""


def analyse(problem: Problem, *, deadline: float = math.inf) -> Lifetimes:
    """Windows and co-residency pairs of `problem` (exact lifetimes when its order is fixed).

    Raises OutOfTime once `deadline` (a perf_counter time) has passed: the pairs are quadratic in the tensors live
    at a step (NASNet-A Mobile's free schedule: seconds); at once when more than MAX_PAIRS pairs would be looked at
    (a model that size is never built in time, and their table alone would outgrow the memory: a fan of 2,000
    readers joined by one op has 2,000 tensors live at each of 2,000 steps, 4 x 10^9 pairs)."""
    anc = ancestors(problem)
    ops = _op_windows(problem, anc)
    tensors = _tensor_windows(problem, ops)
    return Lifetimes(ops, tensors, _pairs(problem, tensors, anc, deadline))


def forced(problem: Problem) -> bool:
    """True when the dependencies allow one order only (every op window is a single step), as in a chain."""
    return all(lo == hi for lo, hi in _op_windows(problem, ancestors(problem)).values())


def ancestors(problem: Problem) -> dict[str, int]:
    """Op -> bitset of its strict ancestors (bit i stands for problem.ops[i])."""
    index = {op: i for i, op in enumerate(problem.ops)}
    anc: dict[str, int] = {}
    for op in problem.ops:  # topological, so predecessors come first
        bits = 0
        for p in problem.preds[op]:
            bits |= anc[p] | (1 << index[p])
        anc[op] = bits
    return anc


def _op_windows(problem: Problem, anc: dict[str, int]) -> dict[str, tuple[int, int]]:
    if problem.order is not None:
        return {op: (t, t) for t, op in enumerate(problem.order)}
    n, index = len(problem.ops), {op: i for i, op in enumerate(problem.ops)}
    desc = {op: 0 for op in problem.ops}  # op -> bitset of its strict descendants, built from the sinks back
    for op in reversed(problem.ops):
        for p in problem.preds[op]:
            desc[p] |= desc[op] | (1 << index[op])
    return {op: (anc[op].bit_count(), n - 1 - desc[op].bit_count()) for op in problem.ops}


def _tensor_windows(problem: Problem, ops: dict[str, tuple[int, int]]) -> dict[str, Window]:
    n, out = len(problem.ops), {}
    for a in problem.tensors:
        readers = problem.consumers.get(a, ())
        prod = problem.producer.get(a)
        if prod is not None:
            first = ops[prod][0]
        elif a in problem.carry.resident:
            first = 0
        else:
            first = min(ops[c][0] for c in readers)
        if a in problem.keep:
            last = n - 1
        elif readers:
            last = max(ops[c][1] for c in readers)
        else:
            last = ops[prod][1] if prod is not None else -1
        out[a] = Window(first, last, ops[prod] if prod is not None else None)
    return out


def _ends(problem: Problem, a: str):
    """Ops after all of which `a` is surely gone (None: it may stay to the end)."""
    if a in problem.keep:
        return None
    readers = problem.consumers.get(a, ())
    return readers or (problem.producer[a],)


def _starts(problem: Problem, a: str):
    """Ops before all of which `a` is surely not yet on chip (None: on chip from the start)."""
    if a in problem.producer:
        return (problem.producer[a],)
    if a in problem.carry.resident:
        return None
    return problem.consumers[a]


def _pairs(problem: Problem, tensors: dict[str, Window], anc: dict[str, int],
           deadline: float) -> dict[int, list[tuple[str, str]]]:
    index = {op: i for i, op in enumerate(problem.ops)}
    ends = {a: _ends(problem, a) for a in tensors}
    starts = {a: _starts(problem, a) for a in tensors}

    def before(a: str, b: str) -> bool:  # a is surely freed before b can appear, in every order
        e, s = ends[a], starts[b]
        return e is not None and s is not None and all(anc[y] >> index[x] & 1 for x in e for y in s)

    change = [0] * (max((w.last for w in tensors.values()), default=0) + 2)  # tensors each step adds and drops
    for w in tensors.values():
        change[w.first] += 1
        change[w.last + 1] -= 1
    count = sum(k * (k - 1) // 2 for k in accumulate(change))
    if count > MAX_PAIRS:
        raise OutOfTime(f"lifetimes of {len(problem.ops)} ops: {count:,} tensor pairs share a step, over "
                        f"{MAX_PAIRS:,}; a model this size is not built")
    live: dict[int, list[str]] = {}
    for a, w in tensors.items():
        for t in range(w.first, w.last + 1):
            live.setdefault(t, []).append(a)
    apart: dict[tuple[str, str], bool] = {}
    pairs = {}
    seen = 0
    for t, here in live.items():
        if time.perf_counter() > deadline:
            raise OutOfTime(f"lifetimes of {len(problem.ops)} ops not found by the deadline")
        keep = []
        for a, b in combinations(here, 2):
            seen += 1
            if seen % CLOCK_EVERY == 0 and time.perf_counter() > deadline:  # one step can hold millions
                raise OutOfTime(f"lifetimes of {len(problem.ops)} ops not found by the deadline")
            if (a, b) not in apart:
                apart[a, b] = before(a, b) or before(b, a)
            if not apart[a, b]:
                keep.append((a, b))
        pairs[t] = keep
    return pairs
