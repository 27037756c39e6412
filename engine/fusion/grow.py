"""A group grown one op at a time, with its finest-tile footprint bounds and traffic kept up to date.

The searches grow groups upward (each new op comes after every member in
topological order), so adding an op changes only the tile rows its halo reaches
back to. `Partial` keeps those rows, the fmap footprint without ISOA (`full`),
the saving of one valid ISOA assignment chosen greedily in topological order
(`greedy`: full - greedy is an upper bound on the exact footprint) and an upper
bound on any valid assignment's saving (`relaxed`: full - relaxed is a lower bound),
plus the group's fmap-in, fmap-out and parameter totals. Only when the bounds
straddle the buffer does the search need the exact ISOA optimum (`FusionModel.isoa`).

`relaxed` is every op's saving less, for each pair of a matching of conflicting ops
(Alg. 2: an ISOA op's consumer may not adopt ISOA), the smaller saving of the two:
of a matched pair at most one saves. Any matching gives a valid bound; each new op is
matched when it joins, to the free conflicting member with the largest whole-image
saving, and a pair's term follows the rows as halos raise them.
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
    whole: int = 0  # lower bound on the footprint of whole images (ISOA savings less the matched pairs')
    steps: int = 0  # tiles for this many row steps; 0 = the finest tiles
    mate: dict = field(default_factory=dict)  # member -> the conflicting member it is matched with

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
                  part.params, part.whole + (model.full_row[x] - model.save_row[x]) * model.out_h[x], part.steps,
                  part.mate)
    for j in model.ins[x]:
        p = model.producer[j]
        if p >= 0 and (mask >> p) & 1:
            if not model.is_graph_output[j] and not model.consumer_mask[j] & ~mask:
                new.fout -= model.tbytes[j]  # x was its last outside reader
        elif j not in demand:
            new.fin += model.tbytes[j]
            if model.covered[x]:
                new.whole += model.held[j] * model.tgeo[j].h
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
    if model.save_row[x] > 0 and not model.inplace[x]:
        _match(model, new, x, preds)
    return new


def _match(model: FusionModel, part: Partial, x: int, preds: int) -> None:
    """Match the new op x with the free member of largest whole-image saving whose ofmap x reads (through concat/split)."""
    best, mate = 0, -1
    todo = preds
    while todo:
        b = todo & -todo
        todo ^= b
        p = b.bit_length() - 1
        if model.inplace[p]:
            todo |= model.pred[p] & part.mask
        elif model.save_row[p] > 0 and p not in part.mate and model.save_row[p] * model.out_h[p] > best:
            best, mate = model.save_row[p] * model.out_h[p], p
    if mate < 0:
        return
    part.mate = {**part.mate, x: mate, mate: x}
    part.whole += min(best, model.save_row[x] * model.out_h[x])
    part.relaxed -= min(model.save_row[x] * part.rows[x], model.save_row[mate] * part.rows[mate])


def _set_rows(model: FusionModel, part: Partial, op: int, r: int) -> None:
    """Give `op` tile rows r (first time or larger) and push the halo back to its inputs."""
    rows, demand, mask, mate, chunked, steps = part.rows, part.demand, part.mask, part.mate, part.chunked, part.steps
    full_row, save_row, feeds = model.full_row, model.save_row, model.feeds
    full, relaxed, greedy = part.full, part.relaxed, part.greedy
    work = [(op, r)]
    while work:
        i, r = work.pop()
        delta = r - rows.get(i, 0)
        if delta <= 0:  # a stale item: a larger demand reached this op (and its inputs) first
            continue
        rows[i] = r
        full += full_row[i] * delta
        save = save_row[i]
        if save:
            relaxed += save * delta
            other = mate.get(i)
            if other is not None:  # the pair's smaller saving, at the new rows
                other = save_row[other] * rows[other]
                relaxed -= min(save * r, other) - min(save * (r - delta), other)
            if (chunked >> i) & 1:
                greedy += save * delta
        for j, mode, kern, stride, p, p_rows, h, row in feeds[i]:
            need = (r - 1) * stride + kern if mode == WINDOW else (r if mode == SAME else kern)
            old = demand.get(j, 0)
            if need <= old:
                continue
            demand[j] = need
            if p >= 0 and (mask >> p) & 1:
                if need > p_rows:
                    need = p_rows
                if need > rows[p]:
                    work.append((p, need))
            elif steps:
                base = -(-h // steps)
                full += row * (min(h, max(base, need)) - (min(h, max(base, old)) if old else 0))
            else:
                full += row * (min(h, need) - min(h, old))
    part.full, part.relaxed, part.greedy = full, relaxed, greedy
