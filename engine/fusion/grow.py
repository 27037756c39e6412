"""A group grown one op at a time, with its finest-tile footprint bounds and traffic kept up to date.

The searches grow groups upward (each new op comes after every member in
topological order), so adding an op changes only the tile rows its halo reaches
back to. `Partial` keeps those rows, the fmap footprint without ISOA (`full`),
the saving of one valid ISOA assignment chosen greedily in topological order
(`greedy`: full - greedy is an upper bound on the exact footprint) and of every
op adopting ISOA at once (`relaxed`: full - relaxed is a lower bound), plus the
group's fmap-in, fmap-out and parameter totals. Only when the bounds straddle the
buffer does the search need the exact ISOA optimum (`FusionModel.isoa`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.fusion.model import SAME, WINDOW, FusionModel


@dataclass(slots=True)
class Partial:
    """Running totals of a group under construction (elements for tiles, bytes for traffic)."""

    mask: int = 0
    rows: dict = field(default_factory=dict)  # member op -> finest ofmap tile rows
    demand: dict = field(default_factory=dict)  # tensor read by a member -> rows its readers need
    full: int = 0
    relaxed: int = 0
    greedy: int = 0
    chunked: int = 0  # members whose ofmap is held T_c channels at a time in the greedy assignment
    fin: int = 0
    fout: int = 0
    params: int = 0  # parameter elements
    whole: int = 0  # lower bound on the footprint of whole images (every op under ISOA)
    steps: int = 0  # tiles for this many row steps; 0 = the finest tiles

    def bounds(self) -> tuple[int, int]:
        """(lower, upper) bound on the exact finest footprint."""
        return self.full - self.relaxed, self.full - self.greedy

    def least_subgroups(self, batch: int, room: int) -> int:
        """Lower bound on Eq. 3's sub-group count (see `least_subgroups`)."""
        return least_subgroups(self.whole, batch, room)


def least_subgroups(whole: int, batch: int, room: int) -> int:
    """Lower bound on Eq. 3's sub-group count of a group whose whole-image footprint is at least `whole`.

    A tile of t_n images in k row steps holds >= t_n / k of an image, so t_n * whole <= k * room
    and the count k * ceil(N / t_n) >= N * whole / room.
    """
    return max(1, -(-batch * whole // room))


def extend(model: FusionModel, part: Partial, x: int) -> Partial:
    """The group `part` plus op x, which must come after every member in topological order."""
    mask = part.mask | (1 << x)
    rows, demand = dict(part.rows), dict(part.demand)
    new = Partial(mask, rows, demand, part.full, part.relaxed, part.greedy, part.chunked, part.fin, part.fout,
                  part.params, part.whole + (model.full_row[x] - model.save_row[x]) * model.out_h[x], part.steps)
    for j in model.ins[x]:
        p = model.producer[j]
        if p >= 0 and (mask >> p) & 1:
            if not model.is_graph_output[j] and not model.consumer_mask[j] & ~mask:
                new.fout -= model.tbytes[j]  # x was its last outside reader
        elif j not in demand:
            new.fin += model.tbytes[j]
            if model.covered[x]:
                new.whole += model.tgeo[j].row * model.tgeo[j].h
    for j in model.outs[x]:
        if model.is_graph_output[j] or model.consumer_mask[j]:
            new.fout += model.tbytes[j]
    new.params = model.io(mask)[2] if model.shares_weights[x] else part.params + model.own_weight_elems[x]
    preds = model.pred[x] & mask
    if model.inplace[x]:
        if part.chunked & preds:
            new.chunked |= 1 << x
    elif model.save_row[x] > 0 and not part.chunked & preds:
        new.chunked |= 1 << x
    h = model.out_h[x]
    _set_rows(model, new, x, min(h, max(model.floor[x], -(-h // part.steps) if part.steps else 1)))
    return new


def _set_rows(model: FusionModel, part: Partial, op: int, r: int) -> None:
    """Give `op` tile rows r (first time or larger) and push the halo back to its inputs."""
    work = [(op, r)]
    while work:
        i, r = work.pop()
        delta = r - part.rows.get(i, 0)
        if delta <= 0:  # a stale item: a larger demand reached this op (and its inputs) first
            continue
        part.rows[i] = r
        part.full += model.full_row[i] * delta
        part.relaxed += model.save_row[i] * delta
        if (part.chunked >> i) & 1:
            part.greedy += model.save_row[i] * delta
        for j, (mode, kern, stride) in zip(model.ins[i], model.rules[i]):
            need = (r - 1) * stride + kern if mode == WINDOW else (r if mode == SAME else kern)
            old = part.demand.get(j, 0)
            if need <= old:
                continue
            part.demand[j] = need
            p = model.producer[j]
            h = model.tgeo[j].h
            if p >= 0 and (part.mask >> p) & 1:
                grown = min(model.out_h[p], need)
                if grown > part.rows[p]:
                    work.append((p, grown))
            else:
                base = -(-h // part.steps) if part.steps else 1
                part.full += model.tgeo[j].row * (min(h, max(base, need)) - (min(h, max(base, old)) if old else 0))
