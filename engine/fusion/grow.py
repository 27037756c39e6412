"""A group grown one op at a time, with its finest-tile footprint bounds and traffic kept up to date.

The searches grow groups upward (each new op comes after every member in
topological order), so adding an op changes only the tile rows its halo reaches
back to. `Partial` keeps those rows, the fmap footprint without ISOA (`full`),
the saving of one valid ISOA assignment chosen greedily in topological order
(`greedy`: full - greedy is an upper bound on the exact footprint) and an upper
bound on any valid assignment's saving (`relaxed`: full - relaxed is a lower bound),
plus the group's fmap-in, fmap-out and parameter totals. Only when the bounds
straddle the buffer does the search need the exact ISOA optimum (`FusionModel.isoa`).

When the bounds straddle the buffer and the exact optimum is computed, the group keeps
that assignment (`kept`, its saving `kept_saving`) and grows it greedily like the first:
a second valid assignment, so the groups grown from it are settled by
full - max(greedy, kept_saving) without the exact program while that stays within the
buffer (`fit_upper`). `bounds` (the greedy assignment alone) still decides whether
parameters surely stay, which keeps the order in which the search costs groups, and so
its tie-breaks, as it was.

`relaxed` is every op's saving less, for each pair of a matching of conflicting ops
(Alg. 2: an ISOA op's consumer may not adopt ISOA), the smaller saving of the two:
of a matched pair at most one saves. Any matching gives a valid bound; each new op is
matched when it joins, to the free conflicting member with the largest whole-image
saving, and a pair's term follows the rows as halos raise them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.fusion.model import FusionModel


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
    kept: int = 0  # members chunked in the assignment inherited from the last exactly settled ancestor
    kept_saving: int = 0

    def bounds(self) -> tuple[int, int]:
        """(lower, upper) bound on the exact finest footprint (upper: the greedy assignment's)."""
        return self.full - self.relaxed, self.full - self.greedy

    def fit_upper(self) -> int:
        """The upper bound of `bounds` tightened by the kept assignment."""
        return self.full - max(self.greedy, self.kept_saving)

    def keep(self, model: FusionModel, chosen: int, saving: int) -> None:
        """Grow on from the exact ISOA optimum (`FusionModel.isoa`): ops `chosen`, and the concats/splits they feed."""
        kept = chosen
        for i in model.members(self.mask):
            if model.inplace[i] and model.pred[i] & kept:
                kept |= 1 << i
        self.kept, self.kept_saving = kept, saving

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
    b = 1 << x
    mask = part.mask | b
    demand = part.demand
    fin, fout, whole = part.fin, part.fout + model.grow_out[x], part.whole + model.whole_row[x]
    members = part.rows  # its keys are the members
    streamed = 0
    for j, p, nbytes, readers, returned, held, elems in model.grow_ins[x]:
        if p in members:
            if not returned and not readers & ~mask:
                fout -= nbytes  # x was its last outside reader
        elif j not in demand:
            if elems:
                streamed += elems  # loaded as parameters are
            else:
                fin += nbytes
                whole += held
    params = model.io(mask)[2] if model.shares_weights[x] else part.params + model.own_weight_elems[x] + streamed
    qk, spill = model.spill_on[x]
    if qk in members:
        fout += spill  # scores written out and read back: the context matmul is not (yet) in the group
    s = model.spill_off[x]
    if s in members and model.spill_on[s][0] in members:
        fout -= model.spill_on[s][1]  # the softmax runs online beside the context matmul
    preds = model.pred[x] & mask
    chunked, kept, save = part.chunked, part.kept, model.save_row[x]
    if model.inplace[x]:
        chunked |= b if chunked & preds else 0
        kept |= b if kept & preds else 0
    elif save > 0:
        passes = model.passes[x]
        chunked |= b if passes or not chunked & preds else 0
        kept |= b if passes or not kept & preds else 0
    new = Partial(mask, dict(part.rows), dict(demand), part.full, part.relaxed, part.greedy, chunked, fin, fout,
                  params, whole, part.steps, part.mate, kept, part.kept_saving)
    h, steps = model.out_h[x], part.steps
    _set_rows(model, new, x, min(h, max(model.floor[x], -(-h // steps) if steps else 1)))
    if save > 0 and not model.inplace[x] and not model.passes[x]:
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
    """Give `op` tile rows r (first time or larger) and push the halo back to its inputs.

    `rows` holds exactly the members, so it also says whether a producer is one.
    """
    rows, demand, mate, chunked, kept, steps = part.rows, part.demand, part.mate, part.chunked, part.kept, part.steps
    full_row, save_row, feeds = model.full_row, model.save_row, model.feeds
    full, relaxed, greedy, kept_saving = part.full, part.relaxed, part.greedy, part.kept_saving
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
            if (kept >> i) & 1:
                kept_saving += save * delta
        for j, a, c, p, p_rows, h, row in feeds[i]:
            need = a * r + c
            old = demand.get(j, 0)
            if need <= old:
                continue
            demand[j] = need
            made = rows.get(p)  # None unless a member makes tensor j
            if made is not None:
                if need > p_rows:
                    need = p_rows
                if need > made:
                    work.append((p, need))
            elif steps:
                base = -(-h // steps)
                full += row * (min(h, max(base, need)) - (min(h, max(base, old)) if old else 0))
            else:
                full += row * (min(h, need) - min(h, old))
    part.full, part.relaxed, part.greedy, part.kept_saving = full, relaxed, greedy, kept_saving
