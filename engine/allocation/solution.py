"""Read a solved model back into a plan: op order, placements at integer addresses, transfers."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from engine.allocation.model import Model
from engine.allocation.problem import Carry, Problem
from engine.allocation.record import Placement
from engine.allocation.skyline import Skyline


@dataclass(frozen=True)
class Plan:
    """A problem's solution in its own steps (0..n-1), addresses in bytes, and the state it leaves."""

    order: tuple[str, ...]
    placements: tuple[Placement, ...]
    spills: tuple[tuple[str, int], ...]
    retrievals: tuple[tuple[str, int], ...]
    carry: Carry


def read(m: Model) -> Plan:
    """The plan the solved variables describe, with stays trimmed to their last use and addresses compacted."""
    p = m.problem
    n = len(p.ops)
    on = lambda v, key: key in v and v[key].varValue is not None and v[key].varValue > 0.5  # noqa: E731
    order = [""] * n
    for (op, t), x in m.X.items():
        if x.varValue is not None and x.varValue > 0.5:
            order[t] = op
    stays: list = []
    spills: list[tuple[str, int]] = []
    retrievals: list[tuple[str, int]] = []
    loaded: set[str] = set()
    for a, w in m.life.tensors.items():
        cur = None
        for t in range(w.first, w.last + 1):
            key = (a, t)
            if on(m.S, key) and a not in p.free_spill:
                spills.append(key)
            if on(m.C, key) or on(m.R, key):
                cur = _close(stays, cur)
                cur = [a, t, t, m.L[key].varValue if key in m.L else 0.0, None]
                if on(m.R, key):
                    if a in p.carry.fresh and a not in loaded:
                        loaded.add(a)  # compulsory first load
                    else:
                        retrievals.append(key)
            elif on(m.P, key):
                if cur is None:  # carried in on chip, at its fixed address
                    cur = [a, t, t, p.carry.resident[a] / p.unit, p.carry.resident[a] // p.unit]
                cur[2] = t
            else:
                cur = _close(stays, cur)
        _close(stays, cur)
    stays, spills = _trim(m, tuple(order), stays, spills)
    placements = compact(stays, {a: p.size[a] // p.unit for a in p.tensors}, p.unit)
    return plan_of(p, placements, spills, retrievals, order=order, loaded=loaded)


def plan_of(problem: Problem, placements, spills, retrievals, *, order=None, loaded=None) -> Plan:
    """The plan of `problem` run in `order` (its own, if fixed) with these transfers, and the state it leaves:
    tensors later segments read on chip where they end, DRAM holding what was spilled or written back, and
    network inputs and weights loaded (`loaded`: those placed, by default) no longer fresh."""
    p = problem
    order = order if order is not None else p.order
    if order is None:
        raise ValueError("plan_of: a free schedule's plan needs its order")
    order = tuple(order)
    n = len(order)
    if loaded is None:
        loaded = p.carry.fresh & {pl.tensor for pl in placements}
    resident = {pl.tensor: pl.address for pl in placements if pl.last_step == n - 1 and pl.tensor in p.keep}
    host = p.carry.host | {a for a, _ in spills} | (p.free_spill & set(p.producer))
    carry = Carry(MappingProxyType(resident), frozenset(host), p.carry.fresh - loaded)
    return Plan(order, tuple(placements), tuple(sorted(spills, key=lambda s: s[1])),
                tuple(sorted(retrievals, key=lambda r: r[1])), carry)


def _close(stays: list, cur):
    if cur is not None:
        stays.append(cur)
    return None


def _trim(m: Model, order, stays, spills):
    """End each stay at its tensor's last use within it (moving a following spill along).

    Stays of tensors later segments read that reach the last step are left whole; a
    carried-in stay with no use here disappears (the tensor then leaves at step 0).
    """
    p, n = m.problem, len(order)
    uses: dict[str, set[int]] = {}
    for t, op in enumerate(order):
        for a in p.reads[op] + p.writes[op]:
            uses.setdefault(a, set()).add(t)
    spill_at = {a: t for a, t in spills}
    out = []
    for a, first, last, addr, pinned in stays:
        if a in p.keep and last == n - 1:
            out.append([a, first, last, addr, pinned])
            continue
        used = [t for t in uses.get(a, ()) if first <= t <= last]
        new_last = max(used) if used else first - 1
        if spill_at.get(a) == last + 1:
            spill_at[a] = new_last + 1
        if used:
            out.append([a, first, new_last, addr, pinned])
    return out, [(a, t) for a, t in spill_at.items() if a not in p.free_spill]


def compact(stays, size: dict[str, int], unit: int) -> tuple[Placement, ...]:
    """Integer addresses keeping the solved relative positions: each stay sits on the highest stay below it.

    Stays that share a step are ordered by the centre of their solved address range
    (robust to solver tolerance); carried-in stays keep their fixed address. Because the
    solution met every no-overlap constraint, no stay moves up, so the budget still holds.
    """
    ranked = sorted(range(len(stays)), key=lambda i: (stays[i][3] + size[stays[i][0]] / 2, stays[i][0]))
    tops = Skyline(1 + max((s[2] for s in stays), default=0))  # step -> the top of the stays laid down there
    address: dict[int, int] = {}
    for i in ranked:
        a, first, last, _, pinned = stays[i]
        address[i] = pinned if pinned is not None else tops.highest(first, last)
        tops.raise_to(first, last, address[i] + size[a])
    out = [Placement(a, first, last, address[i] * unit, size[a] * unit)
           for i, (a, first, last, _, _) in enumerate(stays)]
    return tuple(sorted(out, key=lambda pl: (pl.first_step, pl.address)))
