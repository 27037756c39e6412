"""A piece's bound: the least excess bits of ops one group holds of a component, from the tiles, streamed operands
and shared inputs they must hold at once (`segments.py` has the argument)."""

from __future__ import annotations

from functools import lru_cache

from engine.fusion.cost import Capacity
from engine.limit.closure import UNBOUNDED, least_closure
from engine.limit.einsum import at
from engine.limit.parts import INF, Link, Piece, Segments, Streamed

HORIZON = 10  # producer steps above a piece within which `_supply` looks for what its shared inputs cost to hold


def above(seg: Segments, start: set[int], depth: int, via: tuple[tuple[int, ...], ...]) -> set[int]:
    """Covered ops within `depth` producer steps above `start` (not in it), through the tensors they read (`via`:
    `seg.feeds` or `seg.ins`); an in-place op (a layout view, a split) takes no step."""
    found: dict[int, int] = {}
    todo = [(i, 0) for i in start]
    while todo:
        i, d = todo.pop()
        for j in via[i]:
            p = seg.maker[j]
            step = d + (not seg.inplace[p])
            if p < 0 or p in start or step > depth or found.get(p, depth + 1) <= step:
                continue
            found[p] = step
            todo.append((p, step))
    return set(found)


def piece_of(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...]) -> Piece:
    """A piece's footprint bounds: its members' output tiles (`_footprint`), the links it reads from another group
    and the tensors no group makes, at full depth; at least the per-op whole rows of `OpTable.whole`."""
    key = set(ops)
    inner = tuple(ln for ln in links if ln.producer in key and all(r in key for r in ln.readers))
    # read from another group: a cut link all of whose readers are here (its maker in the group would uncut it)
    # (one of an op run alone that a member reads straight, as `read` counts it, counted there)
    outside = {j: (w, f) for i in ops for j, w, f in seg.read[i]}  # network inputs, outputs of ops run alone
    counted = {(seg.source[j], i) for i in ops for j, _, _ in seg.read[i]}
    fed = tuple(ln for ln in links if ln.producer not in key and all(r in key for r in ln.readers)
                and not any((ln.producer, r) in counted for r in ln.readers))
    whole, finest = _footprint(seg, ops, inner)
    fed_pairs = {(ln.producer, r) for ln in fed for r in ln.readers}
    shared = {j for i in ops for j in seg.feeds[i] if seg.maker[j] >= 0 and seg.maker[j] not in key
              and seg.source[j] not in key and (seg.source[j], i) not in fed_pairs}  # made by a group we may share
    more_whole, more_finest = (_supply(seg, key, shared, set(outside), width) for width in (0, 1))
    whole = max(whole + sum(ln.whole for ln in fed) + sum(w for w, _ in outside.values()) + more_whole,
                max((seg.tables[i].whole for i in ops), default=0))
    finest += sum(ln.finest for ln in fed) + sum(f for _, f in outside.values()) + more_finest
    streams = [st for i in ops for st in seg.streamed[i]]
    mask = sum(1 << i for i in ops)
    # an operand made from a member's output is made in the group: every op between two members is in it (convex);
    # unless a network input is part of it (a KV cache read beside the new token's keys: read, as parameters are)
    forced = sum(1 << k for k, st in enumerate(streams)
                 if st.made and st.producer >= 0 and seg.cone[st.producer] & mask)
    # a streamed operand whose link is cut comes from another group: the link counts its write and one read
    linked = tuple(any(ln.streamed and ln.readers[0] == i and seg.cone[st.producer] >> ln.producer & 1
                       for ln in links) for i in ops for st in seg.streamed[i])
    barred = sum(1 << k for k, (st, cut) in enumerate(zip(streams, linked))
                 if cut and not seg.cone[st.producer] & mask)
    rest: list[tuple[int | float, int, int]] = []
    producers, kept = _producers(inner), {}  # the least full depth of the members in some cones, per such set
    for made in range(1 << len(streams)):
        if forced & ~made or barred & made:
            rest.append((INF, 0, 0))
            continue
        chosen = [st for k, st in enumerate(streams) if made >> k & 1]
        cones = 0
        for st in chosen:
            cones |= seg.cone[st.producer] if st.producer >= 0 else 0
        out = [i for i in ops if not cones >> i & 1]
        apart = [ln for ln in fed if not any(cones >> r & 1 for r in ln.readers)]
        within = [i for i in ops if cones >> i & 1]  # members in the cones: Alg. 2 keeps some at full depth
        key_within = tuple(within)
        if key_within not in kept:
            kept[key_within] = _least_chunks(seg.whole, seg, within, producers) - sum(
                seg.whole[i][1] for i in within if not seg.inplace[i])
        full = kept[key_within]
        rest.append((_need(seg, key, chosen) + full, sum(seg.whole[i][1] for i in out) + sum(ln.whole for ln in apart),
                     sum(seg.finest[i][1] for i in out) + sum(ln.finest for ln in apart)))
    return Piece(ops, whole, finest, tuple(rest), linked, sum(seg.tables[i].params for i in ops), tuple(streams),
                 len(ops) == 1 or all(seg.covered[i] for i in ops))


def _need(seg: Segments, piece: set[int], made: list[Streamed]) -> int | float:
    """A lower bound on the elements of one image a group holding the piece holds at every row step when it makes
    the streamed operands `made` whole (every row of them, before the first row of their readers): their makers'
    outputs at every row (T_c channels if chunked) and each input held whole from outside or made whole inside in
    turn, the piece's own ops always inside, every op counted once however many of the cones read it
    (`least_closure` over the covered ops within `HORIZON` steps above; nothing beyond them). A streamed input must
    be made inside (else it is loaded, the other case); a network input or an uncovered op's output is read."""
    producers = frozenset(st.producer for st in made)
    if not made or any(p < 0 or not seg.covered[p] for p in producers):
        return INF if made else 0
    near = _near_makers(seg, producers)
    return _need_value(seg, producers, near, frozenset(piece & near))


@lru_cache(maxsize=4096)
def _near_makers(seg: Segments, producers: frozenset[int]) -> frozenset[int]:
    """The covered ops within `HORIZON` steps above `producers` (not them), through every input."""
    return frozenset(above(seg, set(producers), HORIZON, seg.ins))


@lru_cache(maxsize=65536)
def _need_value(seg: Segments, producers: frozenset[int], near: frozenset[int], inside: frozenset[int]) -> int | float:
    """`_need` with the makers it may choose (`near`) and those it must (`inside`: the piece's)."""
    def width(q: int) -> int:
        return 0 if seg.inplace[q] else seg.whole[q][1]

    value = sum(width(p) for p in producers) + least_closure(
        [j for p in sorted(producers) for j in seg.ins[p]], seg.maker, seg.ins, width,
        lambda j: UNBOUNDED if seg.maker[j] in inside else seg.hold[j], near,
        lambda j: seg.hold[j] if seg.maker[j] < 0 else 0)
    return INF if value >= UNBOUNDED else value


def _supply(seg: Segments, piece: set[int], tensors: set[int], counted: set[int], at: int) -> int:
    """Least elements (one image, whole rows if `at` is 0, finest if 1) a group holding the piece keeps for `tensors`,
    inputs made outside the piece and not read from another group for sure (a residual stream read by several ops):
    each either held from another group at full depth or made in the group by its maker at its narrower tile, whose
    own inputs are then held or made in turn. A minimum cut over the makers within `HORIZON` steps (a closure:
    every chosen maker's tile counted once, whatever reads it); a network input or an uncovered op's output held at
    full depth, unless the piece reads it too (`counted`: the piece holds it); beyond the horizon and piece members
    (counted in the piece): nothing."""
    if not tensors:
        return 0
    key = frozenset(tensors)
    near = _near(seg, key)
    return _cut_value(seg, key, near - piece, frozenset(counted), at)


@lru_cache(maxsize=4096)
def _near(seg: Segments, tensors: frozenset[int]) -> frozenset[int]:
    """The makers of `tensors` and the covered ops within `HORIZON` - 1 steps above them."""
    makers = {seg.maker[j] for j in tensors} - {-1}
    return frozenset(makers | above(seg, makers, HORIZON - 1, seg.feeds))


@lru_cache(maxsize=65536)
def _cut_value(seg: Segments, tensors: frozenset[int], near: frozenset[int], counted: frozenset[int], at: int) -> int:
    """`_supply`'s minimum cut with the makers it may choose (`near`)."""
    return least_closure(tensors, seg.maker, seg.feeds, lambda p: min(seg.whole[p] if at == 0 else seg.finest[p]),
                         lambda j: seg.outside[j][at], near,
                         lambda j: seg.outside[j][at] if seg.maker[j] < 0 and j not in counted else 0)


def in_cone(seg: Segments, st: Streamed, i: int) -> bool:
    """Whether op i makes streamed operand `st` or is one of its ancestors."""
    return st.producer >= 0 and bool(seg.cone[st.producer] >> i & 1)


def piece_bits(seg: Segments, piece: Piece, cap: Capacity, reach: int, batch: int, word_bits: int) -> float:
    """The least excess bits of a piece: one op alone or in a group; several ops in one group (INF if they cannot)."""
    grouped = _grouped_bits(seg, piece, cap, batch, word_bits)
    if len(piece.ops) > 1:
        return grouped
    op = seg.tables[piece.ops[0]]
    lone = at(op.steps, reach)
    alone = INF if lone is None else (lone - op.compulsory) * 8
    return max(0.0, min(alone, grouped))


def _grouped_bits(seg: Segments, piece: Piece, cap: Capacity, batch: int, word_bits: int) -> float:
    """Excess bits of ops held in one group: weights and streamed operands loaded once per sub-group (Eq. 3)
    unless they all stay beside the tiles (the cost model keeps a group's parameters and streamed operands
    together or not at all), and a streamed operand's write by the group that makes it.

    A streamed operand is either read from outside or made whole in the group: then its cone holds `need`
    elements at every row step and the piece's tiles outside the cone share what is left, which forces more
    sub-groups (the least over both choices of every operand)."""
    finest, params, streams = piece.finest, piece.params, piece.streams
    if not piece.runs or finest > cap.fmap:
        return INF
    base = max(1, -(-batch * piece.whole // max(1, cap.fmap)))
    best = INF
    for made, (need, r_whole, r_finest) in enumerate(piece.rest):
        loads, held = base, finest
        if need + r_finest > cap.fmap:
            continue  # the cones and the tiles beside them do not fit (or an operand made in the group is read)
        if made:
            loads = max(loads, -(-batch * r_whole // max(1, int(cap.fmap - need))))
            held = max(held, int(need) + r_finest)
        loaded = params + sum(st.elems for k, st in enumerate(streams) if not made >> k & 1)
        stays = loaded <= (cap.fmap - held if cap.shared else cap.param)
        bits = 0 if stays else (loads - 1) * params * word_bits
        for k, st in enumerate(streams):
            if not made >> k & 1:  # read once if it stays (none counted yet if an op makes it), else per sub-group
                reads = 1 if stays else loads
                bits += (reads - 1 if piece.linked[k] else reads - (not st.made) + st.written) * st.nbytes * 8
        best = min(best, bits)
    return best


def _footprint(seg: Segments, ops: tuple[int, ...], inner: tuple[Link, ...]) -> tuple[int, int]:
    """(whole-image, finest) lower bounds on the output tiles the piece's ops hold together: the least over which
    ops chunk under Alg. 2's rule towards every reader in the piece (an in-place op chunked when any producer is;
    a group holding the piece has at least these rules, and tiles at least these rows)."""
    order = sorted(ops)  # producers first: topological order
    producers = _producers(inner)
    return _least_chunks(seg.whole, seg, order, producers), _least_chunks(seg.finest, seg, order, producers)


def _producers(inner: tuple[Link, ...]) -> dict[int, list[int]]:
    """Per op, the ops whose outputs it reads through `inner` links."""
    producers: dict[int, list[int]] = {}
    for ln in inner:
        for r in ln.readers:
            producers.setdefault(r, []).append(ln.producer)
    return producers


def _least_chunks(width, seg: Segments, order: list[int], producers: dict[int, list[int]]) -> int:
    """Least sum of `width[i][chunked]` over the ops in `order` where no op that neither passes chunks nor is in
    place chunks while one of its producers is chunked (Alg. 2), searched depth first, cut at the best so far."""
    best = [sum(width[i][0] for i in order if not seg.inplace[i])]
    chunked: dict[int, bool] = {}
    rest = [0] * (len(order) + 1)  # least width of the ops from position k on, every one chunked
    for k in range(len(order) - 1, -1, -1):
        i = order[k]
        rest[k] = rest[k + 1] + (0 if seg.inplace[i] else min(width[i]))
    prods = [producers.get(i, ()) for i in order]

    def visit(k: int, total: int) -> None:
        if total + rest[k] >= best[0]:
            return
        if k == len(order):
            best[0] = total
            return
        i = order[k]
        fed = False
        for p in prods[k]:
            if chunked.get(p, False):
                fed = True
                break
        if seg.inplace[i]:
            chunked[i] = fed
            visit(k + 1, total)
            return
        if width[i][1] < width[i][0] and (seg.passes[i] or not fed):
            chunked[i] = True
            visit(k + 1, total + width[i][1])
        chunked[i] = False
        visit(k + 1, total + width[i][0])

    visit(0, 0)
    return best[0]
