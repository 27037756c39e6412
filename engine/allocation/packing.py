"""A plan with no spills: every tensor on chip from first to last use, packed offline by decreasing size.

This is TensorFlow Lite's greedy-by-size arena planner (the whole order's lifetimes are
known before any address is chosen; the largest tensor is placed first, each at the
lowest address free over its lifetime; ties in size are broken two ways, and the
first that fits is kept). Where it fits the budget it costs nothing beyond
the compulsory loads, so as a MIP start it meets the spill bound 0 and the solve ends
before it begins. Where it does not fit, the ILP is needed.
"""

from __future__ import annotations

from engine.allocation.problem import Problem
from engine.allocation.record import Placement


def pack(problem: Problem, order) -> tuple[Placement, ...] | None:
    """No-spill placements of `problem` run in `order`, in its own steps; None when they exceed the budget."""
    n, unit = len(order), problem.unit
    room = problem.budget // unit * unit  # the ILP counts whole units (model._add_capacity)
    first, last = {}, {}
    for a in problem.carry.resident:
        if a in problem.tensors:
            first[a] = last[a] = 0
    for t, op in enumerate(order):
        for a in problem.reads[op] + problem.writes[op]:
            first.setdefault(a, t)
            last[a] = t
    for a in problem.keep & first.keys():
        last[a] = n - 1  # later segments read it: it stays to the end
    pinned = [Placement(a, 0, last[a], problem.carry.resident[a], problem.size[a])
              for a in first if a in problem.carry.resident]
    rest = [a for a in first if a not in problem.carry.resident]
    for tie in TIES:
        placed = _greedy(pinned, sorted(rest, key=lambda a: (-problem.size[a], tie(first[a], last[a]), a)),
                         problem.size, first, last, room)
        if placed is not None:
            return tuple(sorted(placed, key=lambda p: (p.first_step, p.address)))
    return None


TIES = (lambda lo, hi: lo, lambda lo, hi: lo - hi)  # among equal sizes: earliest first, or longest-lived first


def _greedy(pinned, ranked, size, first, last, room) -> list[Placement] | None:
    """Each tensor of `ranked` in turn at the lowest address free over its lifetime; None past `room`."""
    placed = list(pinned)
    for a in ranked:
        lo, hi, need = first[a], last[a], size[a]
        address = 0
        for p in sorted((p for p in placed if p.first_step <= hi and lo <= p.last_step), key=lambda p: p.address):
            if address + need <= p.address:
                break
            address = max(address, p.address + p.size)
        if address + need > room:
            return None
        placed.append(Placement(a, lo, hi, address, need))
    return placed
