"""MIP starts: the baselines' plans, and a no-spill packing, written as values of COSMA's variables.

Starting HiGHS from the best baseline of the same problem means the ILP begins with a
solution in hand: a time-out still returns something no worse than the baselines it was
started from, and the search only has to improve on it. A packing that fits costs 0,
which no plan beats: the solve is then skipped.
"""

from __future__ import annotations

import math

from engine.allocation import baselines
from engine.allocation.lifetimes import OutOfTime
from engine.allocation.model import Model
from engine.allocation.packing import pack
from engine.graph import Graph


def best_baseline(m: Model, graph: Graph, orders, *, include_params: bool, word_bits: int,
                  deadline: float = math.inf) -> dict | None:
    """Values of the cheapest plan the model can represent over `orders`: the baselines' (each policy) and the
    no-spill packing's (`packing.pack`, where it fits), of those done by `deadline` (a perf_counter time), or None."""
    p = m.problem
    best, cost = None, math.inf
    for order in orders:
        plans = []
        for policy in baselines.POLICIES:
            try:
                plans.append(baselines.run(graph, p.budget, order, policy, include_params=include_params,
                                           word_bits=word_bits, carry=p.carry, later=p.keep, deadline=deadline))
            except OutOfTime:
                break
        placements = pack(p, order, deadline=deadline)
        if placements is not None:
            plans.insert(0, (placements, [], []))
        for placements, spills, retrievals in plans:
            values = values_of(m, order, placements, spills, retrievals)
            if values is not None and objective_at(m, values) < cost:
                best, cost = values, objective_at(m, values)
            if cost <= 0:
                return best  # nothing is cheaper than no traffic
    return best


def objective_at(m: Model, values: dict) -> float:
    """The model's objective at the given values (absent variables are 0)."""
    expr = m.lp.objective
    return expr.constant + sum(c * values.get(v.name, 0.0) for v, c in expr.items())


def values_of(m: Model, order, placements, spills, retrievals) -> dict | None:
    """Variable name -> value for a plan over the model's ops, or None where the plan leaves the model."""
    p, n = m.problem, len(order)
    values = {}

    def put(table, key, value=1.0):
        if key not in table:
            raise KeyError(key)
        values[table[key].name] = value

    try:
        for t, op in enumerate(order):
            for a in p.writes[op]:
                put(m.C, (a, t))
        on_chip: dict[int, list] = {}
        back = set(retrievals)
        stays: dict[str, list] = {}
        for pl in placements:
            carried = pl.first_step == 0 and p.carry.resident.get(pl.tensor) == pl.address
            made = (pl.tensor, pl.first_step) in m.C and p.producer.get(pl.tensor) == order[pl.first_step]
            if not made:
                if carried and (pl.tensor, pl.first_step) not in back:
                    put(m.P, (pl.tensor, 0))
                else:
                    put(m.R, (pl.tensor, pl.first_step))
            for t in range(pl.first_step + 1, pl.last_step + 1):
                put(m.P, (pl.tensor, t))
            for t in range(pl.first_step, pl.last_step + 1):
                put(m.L, (pl.tensor, t), pl.address / p.unit)
                on_chip.setdefault(t, []).append(pl)
            stays.setdefault(pl.tensor, []).append(pl)
        spilled = dict(spills)
        for a, t in spills:
            put(m.S, (a, t))
        for a, group in stays.items():  # a network output dropped and read again passes through DRAM (free)
            if a in p.free_spill and a not in spilled and len(group) > 1:
                put(m.S, (a, min(g.last_step for g in group) + 1))
        for t, here in on_chip.items():
            at = {pl.tensor: pl.address for pl in here}
            for a, b in m.life.pairs.get(t, ()):
                if a in at and b in at:
                    ia, ib = m.idx[a], m.idx[b]
                    side = "u" if at[a] > at[b] else "d"
                    values[f"{side}_{ia}_{ib}_{t}"] = 1.0
    except KeyError:
        return None
    if n != len(p.ops):
        return None
    return values
