"""Addresses for stays of fixed steps; a plan with no spills, every tensor on chip from first to last use.

Two heuristics for this dynamic storage allocation problem, the cheap one first. The sweep walks the steps once,
releasing the stays that end and placing those that begin by best fit in an address-ordered free list
(`freelist.py`): a logarithmic search per stay, so a Concat of 25,000 inputs packs in a fraction of a second. Where
it does not fit, TensorFlow Lite's greedy-by-size arena planner (the whole order's lifetimes are known before any
address is chosen; the largest tensor is placed first, each at the lowest address free over its lifetime; ties in
size are broken two ways, and the first that fits is kept), which sees every stay beside the one it places: its
work grows with the square of the stays live together. Where a packing fits the budget it costs nothing beyond
the compulsory loads, so as a MIP start it meets the spill bound 0 and the solve ends before it begins. `arrange`
places any set of stays: these first, then the exact ILP of `place.py`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from engine.allocation import place
from engine.allocation.freelist import FreeList
from engine.allocation.occupancy import Occupancy
from engine.allocation.place import Stay
from engine.allocation.problem import Problem
from engine.allocation.record import Placement, live_per_step, peak_of


def pack(problem: Problem, order, *, deadline: float = math.inf) -> tuple[Placement, ...] | None:
    """No-spill placements of `problem` run in `order`, in its own steps; None when they exceed the budget or the
    packing is still going at `deadline` (a perf_counter time)."""
    unit = problem.unit
    resident = {a: at for a, at in problem.carry.resident.items() if a in problem.tensors}
    return pack_steps([(problem.reads[op], problem.writes[op]) for op in order], problem.size,
                      problem.budget // unit * unit,  # the ILP counts whole units (model._add_capacity)
                      resident=resident, keep=problem.keep, deadline=deadline)


def pack_steps(steps, sizes: Mapping[str, int], room: int, *, resident: dict | None = None, keep=frozenset(),
               deadline: float = math.inf) -> tuple[Placement, ...] | None:
    """No-spill placements of ops whose (reads, writes) are `steps` (`record.op_table`), each tensor on chip from
    its first use to its last, within `room` bytes; None when they do not fit or at `deadline`. `resident`:
    tensors on chip before the first step, at their address; `keep`: tensors read later, kept to the end."""
    resident = resident or {}
    first, last = dict.fromkeys(resident, 0), dict.fromkeys(resident, 0)
    for t, (reads, writes) in enumerate(steps):
        for a in reads + writes:
            first.setdefault(a, t)
            last[a] = t
    for a in keep & first.keys():
        last[a] = len(steps) - 1  # later segments read it: it stays to the end
    stays = [Stay(a, first[a], last[a], sizes[a]) for a in first]
    if peak_of(((s.first, s.last, s.size) for s in stays), len(steps)) > room or time.perf_counter() >= deadline:
        return None  # more bytes live at one step than the room holds: no packing fits
    pinned = {i: resident[s.tensor] for i, s in enumerate(stays) if s.tensor in resident}
    at = pack_stays(stays, room, pinned=pinned, deadline=deadline)
    if at is None:
        return None
    return tuple(sorted((Placement(s.tensor, s.first, s.last, at[i], s.size) for i, s in enumerate(stays)),
                        key=lambda p: (p.first_step, p.address)))


CLOCK_EVERY = 64  # stays placed between two looks at the clock
TIES = (lambda lo, hi: lo, lambda lo, hi: lo - hi)  # among equal sizes: earliest first, or longest-lived first


def pack_stays(stays, room: int, *, pinned: dict | None = None, deadline: float = math.inf) -> list[int] | None:
    """An address per stay within `room` by the heuristics, the cheap one first: the sweep (`sweep`) forward in
    time, then backward (a large tensor that ends the order, as a Concat's, is then placed first), then
    greedy-by-size (`greedy_by_size`); None when none fits, or at `deadline`. `pinned`: stay index -> its fixed
    address."""
    pinned = pinned or {}
    end = max((s.last for s in stays), default=0)
    for way in (stays, [s._replace(first=end - s.last, last=end - s.first) for s in stays]):  # forward, backward
        at = sweep(way, room, pinned=pinned, deadline=deadline)
        if at is not None:
            return at
    return greedy_by_size(stays, room, pinned=pinned, deadline=deadline)


def greedy_by_size(stays, room: int, *, pinned: dict | None = None, deadline: float = math.inf) -> list[int] | None:
    """TensorFlow Lite's arena planner: the largest stay first, each at the lowest address free over its steps (ties
    in size broken each way of `TIES` until one fits); None when none fits, or at `deadline`. It costs the stays
    live together squared (a fan of N readers joined by one op: N outputs beside each other)."""
    pinned = pinned or {}
    rest = [i for i in range(len(stays)) if i not in pinned]
    for tie in TIES:
        ranked = sorted(rest, key=lambda i: (-stays[i].size, tie(stays[i].first, stays[i].last), stays[i].tensor, i))
        at = _lowest_fit(stays, ranked, pinned, room, deadline)
        if at is not None:
            return at
    return None


def sweep(stays, room: int, *, pinned: dict | None = None, deadline: float = math.inf) -> list[int] | None:
    """An address per stay from one pass over the steps, or None when a stay finds no gap in `room` (or at
    `deadline`). At each step the stays that ended are released, then the stays that begin are placed, largest
    first (longest-lived among equals), each by best fit (`FreeList.take`). A pinned stay (index -> address)
    holds its address from the first step to its last: a restriction, so what fits is valid."""
    pinned = pinned or {}
    free = FreeList(room)
    at = [0] * len(stays)
    for i, address in pinned.items():
        if stays[i].size and not free.reserve(address, stays[i].size):
            return None  # pinned stays that share addresses at different steps: greedy-by-size places those
        at[i] = address
    arrivals = sorted((i for i in range(len(stays)) if i not in pinned),
                      key=lambda i: (stays[i].first, -stays[i].size, -stays[i].last, stays[i].tensor, i))
    departures = sorted(range(len(stays)), key=lambda i: stays[i].last)
    gone = 0
    for k, i in enumerate(arrivals):
        if k % CLOCK_EVERY == CLOCK_EVERY - 1 and time.perf_counter() > deadline:
            return None
        s = stays[i]
        while gone < len(departures) and stays[departures[gone]].last < s.first:
            j = departures[gone]  # ended before s begins, so placed before it
            if stays[j].size:
                free.release(at[j], stays[j].size)
            gone += 1
        if s.size:
            address = free.take(s.size)
            if address is None:
                return None
            at[i] = address
    return at


def _lowest_fit(stays, ranked, pinned: dict, room: int, deadline: float) -> list[int] | None:
    """Each stay of `ranked` in turn at the lowest address free over its steps; None past `room` or `deadline`
    (the clock read every CLOCK_EVERY stays)."""
    at = dict(pinned)
    placed = Occupancy(1 + max((s.last for s in stays), default=0))
    for j in pinned:
        placed.add(j, stays[j].first, stays[j].last)
    for k, i in enumerate(ranked):
        if k % CLOCK_EVERY == CLOCK_EVERY - 1 and time.perf_counter() > deadline:
            return None
        s = stays[i]
        address = 0
        for j in sorted(placed.beside(s.first, s.last), key=at.__getitem__):
            if address + s.size <= at[j]:
                break
            address = max(address, at[j] + stays[j].size)
        if address + s.size > room:
            return None
        at[i] = address
        placed.add(i, s.first, s.last)
    return [at[i] for i in range(len(stays))]


def arrange(stays, room: int, *, pinned: dict | None = None, solver: str = "highs",
            deadline: float) -> Sequence[float] | None:
    """Addresses for `stays` within `room` by `deadline`, or None when no method below finds them.

    The heuristics (`pack_stays`) first; else window by window (cut where at most one stay crosses,
    earlier windows' stays pinned), each by the heuristics or the ILP of `place.py`, a window
    that does not fit being merged with the one before and both solved again; the whole
    is the last window. The ILP is tried with stays of equal steps glued into one block
    (far fewer pairs; a restriction, so what it finds is valid), then as it is.
    """
    pinned = dict(pinned or {})
    at = pack_stays(stays, room, pinned=pinned, deadline=deadline)
    if at is not None:
        return at
    solved: list[tuple[list[int], dict]] = []  # (window's stays, their addresses), in order
    todo = _windows(stays)
    while todo:
        members = todo.pop(0)
        fixed = dict(pinned)
        for _, placed in solved:
            fixed.update(placed)
        lo, hi = min(stays[i].first for i in members), max(stays[i].last for i in members)
        near = [i for i in fixed if i not in members and stays[i].first <= hi and lo <= stays[i].last]
        local = list(members) + near
        got = _exact([stays[i] for i in local], room, {k: fixed[i] for k, i in enumerate(local) if i in fixed},
                     solver, deadline)
        if got is not None:
            solved.append((members, {i: got[k] for k, i in enumerate(local) if i in members}))
        elif solved and time.perf_counter() < deadline:
            todo.insert(0, solved.pop()[0] + members)  # the window before placed its stays badly: redo both
        else:
            return None
    out = dict(pinned)
    for _, placed in solved:
        out.update(placed)
    return [out[i] for i in range(len(stays))]


def _exact(stays, room: int, pinned: dict, solver: str, deadline: float) -> Sequence[float] | None:
    """The heuristics, else the placement ILP with equal stays glued, else the ILP as it is, by `deadline`."""
    at = pack_stays(stays, room, pinned=pinned, deadline=deadline)
    if at is not None:
        return at
    glued, parts = _glue(stays, pinned)
    if len(glued) < len(stays):
        got = place.place(glued, room, pinned={k: pinned[m[0]] for k, m in enumerate(parts) if m[0] in pinned},
                          solver=solver, time_limit_s=deadline - time.perf_counter())
        if got is not None:
            return _unglue(stays, parts, got)
    return place.place(stays, room, pinned=pinned, solver=solver, time_limit_s=deadline - time.perf_counter())


def _windows(stays) -> list[list[int]]:
    """Stay indices grouped by window of their first step, windows cut between steps that at most one stay spans."""
    if not stays:
        return []
    end = max(s.last for s in stays)
    crossing = live_per_step(((s.first, s.last - 1, 1) for s in stays), end + 1)  # t -> stays on chip at t and t + 1
    window, k = [0] * (end + 1), 0
    for t in range(end + 1):
        window[t] = k
        k += crossing[t] <= 1
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(stays):
        groups.setdefault(window[s.first], []).append(i)
    return [groups[w] for w in sorted(groups)]


def _glue(stays, pinned: dict) -> tuple[list[Stay], list[tuple[int, ...]]]:
    """Stays of identical steps (none pinned) merged into one stay each: (merged stays, member indices of each)."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(stays):
        groups.setdefault((s.first, s.last) if i not in pinned else ("pinned", i), []).append(i)
    parts = [tuple(members) for members in groups.values()]
    merged = [Stay(stays[m[0]].tensor, stays[m[0]].first, stays[m[0]].last, sum(stays[i].size for i in m))
              for m in parts]
    return merged, parts


def _unglue(stays, parts, at) -> list[float]:
    """Each member of a merged stay at the block's address plus the sizes of the members before it."""
    out = [0.0] * len(stays)
    for members, base in zip(parts, at):
        for i in members:
            out[i] = base
            base += stays[i].size
    return out
