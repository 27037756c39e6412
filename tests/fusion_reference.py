"""The Python reference of the compiled fusion search (`engine.fusion.core`), used only by the tests as an oracle.

The engine runs one implementation of the down-set search (Optimus Alg. 1, restated in
`engine.fusion.optimus`): the Numba kernel. This module keeps the readable Python it was
compiled from, so that tests can hold the kernel to it group for group: `chain_search`
visits the same down-sets and groups in the same order as `optimus.chain_search`, and
returns the same `Chain` (path "python"); `window_limit` is `online.size_limit`'s table.

`Partial` and `extend` grow a group one op at a time: since each new op comes after every
member in topological order, adding it changes only the tile rows its halo reaches back
to. `Partial` keeps those rows, the fmap footprint without ISOA (`full`), the saving of
one valid ISOA assignment chosen greedily in topological order (`greedy`: full - greedy
bounds the exact footprint from above) and an upper bound on any valid assignment's
saving (`relaxed`: full - relaxed bounds it from below), plus the group's fmap-in,
fmap-out and parameter totals. Only when the bounds straddle the buffer is the exact ISOA
optimum (`FusionModel.isoa`) computed; the group then keeps that assignment (`kept`) and
grows it greedily, a second valid assignment that settles its descendants while
full - max(greedy, kept_saving) stays within the buffer (`fit_upper`).

`relaxed` is every op's saving less, for each pair of a matching of conflicting ops
(Alg. 2: an ISOA op's consumer may not adopt ISOA), the smaller saving of the two. Each
new op is matched when it joins, to the free conflicting member with the largest
whole-image saving, and a pair's term follows the rows as halos raise them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.fusion import online, optimus
from engine.fusion.cost import Capacity, params_stay
from engine.fusion.model import FusionModel
from engine.fusion.sized import dram_bytes

INF = float("inf")
LIMITS = optimus.Limits()  # `optimus.chain_search`'s default limits


def chain_search(model: FusionModel, cap: Capacity, *, whole_fanout: bool = False, max_size: int = 0,
                 limits: optimus.Limits = LIMITS, bound_only: bool = False, start: int = 0,
                 within: int | None = None) -> optimus.Chain:
    """`optimus.chain_search` in Python: the same down-sets and groups in the same order, so the same `Chain`
    (its path "python"); the arguments are `optimus.chain_search`'s."""
    n = model.n
    ops = (1 << n) - 1 if within is None else within
    # interchangeable ops run in index order (a symmetry of the whole search only: windows start anywhere)
    twin = optimus._twins(model) if within is None and not start and not bound_only else [-1] * n
    twinned = any(t >= 0 for t in twin) and not whole_fanout and not max_size
    bound = optimus._known_plan(model, cap) if twinned else INF  # fans: most down-sets cannot beat the layer-wise plan
    full = start | ops
    best = {start: 0}  # down-set -> least cost of a chain reaching it (final once its level is reached)
    back: dict[int, tuple[int, int]] = {}  # down-set -> (previous down-set, last group)
    sources = {start: optimus._first_ready(model, start, ops, twin)}  # down-set -> ops ready
    levels: list[list[int]] = [[] for _ in range(n + 1)]  # down-sets by size
    levels[start.bit_count()].append(start)
    evaluated = 0
    room, shared = cap.fmap, cap.shared
    batch = 1 if cap.per_band else model.batch  # images that multiply parameter reloads
    pending: dict[int, list] = {}  # down-set -> [(lower bound, previous down-set, group)] not yet costed
    still = {start: optimus._owed(model)}  # down-set -> bytes the rest must still move at least once
    exact = True
    covered, links, succ, pred, word_bits = model.covered, model.link, model.succ, model.pred, model.word_bits
    for level in levels:
        for done in level:
            _settle(model, cap, done, pending.pop(done, []), best, back)
        if bound < INF:  # down-sets that cannot beat a known plan
            kept = [d for d in level if not best.get(d, INF) + still[d] > bound]
            if level and not kept:  # keep a way to the end (the beam may have dropped the optimum's)
                kept = [min(level, key=lambda d: best.get(d, INF) + still[d])]
            level[:] = kept
        narrow = evaluated > limits.total
        width = limits.narrow_states if narrow else limits.states
        if len(level) > width:
            level.sort(key=lambda d: best.get(d, INF) + still[d])
            del level[width:]
            exact = False
        for done in level:
            if done not in best:
                continue
            base = best[done]
            alone = _runs_alone(model, sources[done])
            if alone >= 0:  # an op that only runs alone goes first: every partition has such an order
                b = 1 << alone
                evaluated += 1
                after = done | b
                cost = dram_bytes(model, b, cap)
                if after not in sources:
                    levels[after.bit_count()].append(after)
                    sources[after] = _ready(model, sources[done], b, after, ops, twin)
                    still[after] = _still(model, still[done], done, b)
                if base + cost < best.get(after, INF):
                    best[after], back[after] = base + cost, (done, b)
                continue
            stack = [(Partial(), -1, (), sources[done])]  # (group, last op, components, ops that may join)
            quota = evaluated + (limits.narrow_groups if narrow else limits.groups)
            fanned = {0: 0}  # group -> ops that must join it (rule 1 of the on-line variant)
            while stack:
                if evaluated > quota:  # lone ops were all tried first, so the chain still completes
                    exact = False
                    break
                part, last, comps, cand = stack.pop()
                m = cand >> (last + 1) << (last + 1)
                while m:
                    b = m & -m
                    m ^= b
                    x = b.bit_length() - 1
                    if part.mask and not covered[x]:
                        continue
                    grown = part.mask | b
                    evaluated += 1
                    if whole_fanout and _left_out(model, fanned, grown, x):
                        continue
                    node = extend(model, part, x)
                    lower, upper = node.bounds()
                    if not covered[x]:
                        grows = False
                    elif upper <= room or node.fit_upper() <= room:
                        grows = True
                    elif lower > room:
                        grows = False
                    else:  # the bounds straddle: settle it exactly, and grow on from the optimum
                        saving, chosen, footprint = model.isoa(grown)
                        grows = footprint <= room
                        node.keep(model, chosen, saving)
                    if not grows and part.mask:
                        continue
                    link = links[x]
                    merged = b
                    rest = []
                    for c in comps:
                        if c & link:
                            merged |= c
                        else:
                            rest.append(c)
                    parts = (*rest, merged)
                    after = done | grown
                    pbytes = -(-node.params * word_bits // 8)
                    once = node.fin + node.fout + pbytes  # Eq. 3 with the parameters loaded once
                    least = once
                    resident = not node.params or (upper + node.params <= room if shared else node.params <= cap.param)
                    streamed = (bool(part.mask) or bound_only) and not resident and (
                        lower + node.params > room if shared else True)
                    if streamed:
                        least += pbytes * (node.least_subgroups(batch, room) - 1)  # surely reloaded
                    if not part.mask and model.folds[x]:
                        once = least = 0  # a layout op alone folds into its neighbours
                    if bound_only and not part.mask:  # a lone op's own schedule bounds any group's share of it
                        alone = dram_bytes(model, grown, cap)
                        least = INF if alone is None else alone
                    if (len(parts) == 1 or bound_only) and base + least < best.get(after, INF) and (
                            not whole_fanout or not fanned[grown] & ~grown):
                        if after not in sources:
                            levels[after.bit_count()].append(after)
                            sources[after] = _ready(model, sources[done], grown, after, ops, twin)
                            still[after] = _still(model, still[done], done, grown)
                        if part.mask and not resident and not bound_only:
                            pending.setdefault(after, []).append((base + least, done, grown, once, streamed))
                        else:
                            cost = least if part.mask or bound_only else dram_bytes(model, grown, cap)
                            if cost is not None and base + cost < best.get(after, INF):
                                best[after] = base + cost
                                back[after] = (done, grown)
                    if grows and (not max_size or grown.bit_count() < max_size):
                        nxt = cand & ~b
                        s = (succ[x] | _twin_after(twin, x)) & ops
                        while s:
                            sb = s & -s
                            s ^= sb
                            y = sb.bit_length() - 1
                            if not pred[y] & ~after and (twin[y] < 0 or after >> twin[y] & 1):
                                nxt |= sb
                        stack.append((node, x, parts, nxt))
    if full not in best:
        return optimus.Chain((), evaluated, exact, INF, "python")
    chain = []
    state = full
    while state != start:
        state, group = back[state]
        chain.append(group)
    return optimus.Chain(tuple(chain[::-1]), evaluated, exact, best[full], "python")


def _left_out(model: FusionModel, fanned: dict, group: int, last: int) -> bool:
    """Whether a consumer of a member that must join `group` (all consumers or none) lies below its newest
    op `last`, so that no group grown from it can take it; records the group's must-join set in `fanned`."""
    part = group & ~(1 << last)
    fan = fanned[part] | model.succ_of(model.pred[last] & part)
    fanned[group] = fan
    return bool(fan & ~group & ((1 << last) - 1))


def _settle(model: FusionModel, cap: Capacity, state: int, waiting: list, best: dict, back: dict) -> None:
    """Cost the groups still waiting to reach `state`, cheapest lower bound first, while one can still win.

    Each waits as (bound, previous down-set, group, bytes with parameters loaded once, surely streamed).
    A group whose parameters may stay on chip costs exactly its once-bytes when they do; a streamed
    one must first beat the reload bound of `FusionModel.whole_lower` before its schedule is computed.
    """
    waiting.sort(key=lambda w: w[0])
    batch = 1 if cap.per_band else model.batch
    for bound, done, group, once, streamed in waiting:
        if bound >= best.get(state, INF):
            break
        if not streamed and params_stay(model, group, cap):
            total = best[done] + once
        else:
            pbytes = -(-model.io(group)[2] * model.word_bits // 8)
            reloads = least_subgroups(model.whole_lower(group), batch, cap.fmap) - 1
            if best[done] + once + pbytes * reloads >= best.get(state, INF):
                continue
            total = best[done] + dram_bytes(model, group, cap)
        if total < best.get(state, INF):
            best[state] = total
            back[state] = (done, group)


def _still(model: FusionModel, before: int, done: int, group: int) -> int:
    """A lower bound on the traffic left after `done` then `group`.

    The weights of ops not yet run (a weight two ops share is left out: one load may
    serve both), every tensor made or read before that an op still to run reads (it
    waits off chip, or is a network input), and network outputs not yet made.
    """
    after = done | group
    left = before
    members = model.members(group)
    for j in {j for i in members for j in model.ins[i]}:
        p = model.producer[j]
        if (p < 0 or (done >> p) & 1) and not model.consumer_mask[j] & ~after:
            left -= model.tbytes[j]  # its last reader ran
    for i in members:
        if not model.shares_weights[i]:
            left -= model.own_weight_bytes[i]
        for j in model.outs[i]:
            if model.consumer_mask[j] & ~after:
                left += model.tbytes[j]  # written out, to be read back
            if model.is_graph_output[j]:
                left -= model.tbytes[j]
    return left


def _runs_alone(model: FusionModel, ready: int) -> int:
    """The first ready op outside the tile model (a group of its own in every partition), or -1."""
    while ready:
        b = ready & -ready
        ready ^= b
        i = b.bit_length() - 1
        if not model.covered[i]:
            return i
    return -1


def _ready(model: FusionModel, ready: int, group: int, done: int, ops: int, twin: list[int]) -> int:
    """Ops of `ops` whose predecessors (and twin) are all in `done`, from the ready set before `group` ran."""
    out = ready & ~group
    m = group
    while m:
        b = m & -m
        m ^= b
        i = b.bit_length() - 1
        s = (model.succ[i] | _twin_after(twin, i)) & ~done & ops
        while s:
            sb = s & -s
            s ^= sb
            y = sb.bit_length() - 1
            if not model.pred[y] & ~done and (twin[y] < 0 or done >> twin[y] & 1):
                out |= sb
    return out


def _twin_after(twin: list[int], i: int) -> int:
    """The op whose twin is `i` (always i + 1), as a mask; 0 if none."""
    return 1 << (i + 1) if i + 1 < len(twin) and twin[i + 1] == i else 0


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

def window_limit(model: FusionModel, cap: Capacity) -> int:
    """`online.size_limit` grown in Python: the reference the tests hold `core.window_limit` to."""
    fitting = set()  # sizes n with some connected n-op window that fits
    for start in range(model.n):
        part, comps = Partial(steps=online.QUARTER), []
        for j in range(start, model.n):
            if not model.covered[j]:
                break
            part = extend(model, part, j)
            if part.full - part.greedy > cap.fmap:
                break
            joined, apart = 1 << j, []  # the window's weakly connected components, kept as it grows
            for c in comps:
                if c & model.link[j]:
                    joined |= c
                else:
                    apart.append(c)
            comps = apart + [joined]
            if len(comps) == 1:
                fitting.add(j - start + 1)
    limit = 1
    while limit + 1 in fitting:
        limit += 1
    return limit


def finest_rows(model: FusionModel, part: Partial) -> tuple[dict[int, int], dict[int, int]]:
    """`FusionModel.rows(part.mask, 0)` as the grown group has them: member rows, and group-input rows."""
    in_rows = {j: min(model.tgeo[j].h, need) for j, need in part.demand.items()
               if model.producer[j] < 0 or not (part.mask >> model.producer[j]) & 1}
    return part.rows, in_rows
