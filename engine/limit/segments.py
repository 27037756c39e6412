"""The fused limit by segmentation: chains of single-reader tensors cut into fused pieces, each piece priced at least.

Orojenesis (Huang et al., "Mind the Gap", ISCA 2024, Sec. V-VI) fuses a chain of Einsums in row tiles
and segments it where fusing loses: a segment boundary sends its tensor out and back, a fused segment
reloads its weights once per row tile, and the tile the buffer allows shrinks with what the segment
must hold at once. Here the same analysis runs in the fusion cost model's own terms, so that it bounds
every plan the engine prices (`docs/limit.md`, "The tight fused limit", has the argument):

* a *link* is a tensor an op makes and other ops read (not streamed, not a network output; a reshape,
  transpose or head split that folds is looked through). Links join ops into *components*: every link read
  by one op, and a link read by several where the component stays small (`MAX_LINKS`; a residual stream
  between layers is left out). Every plan's groups cut each component into *pieces* (the ops a group holds
  of it, joined by uncut links: a link is uncut when its maker and every reader share a group);
* a cut link costs its bytes twice (the producer's group writes it, some other group reads it);
* a piece of several ops holds, at each row step, its members' output tiles (a member chunked under ISOA
  holds T_c channels, and no consumer of a chunked member chunks, Alg. 2) and the links it reads from outside
  at full depth; with k row steps of t_n images, t_n * whole / k <= buffer, so its group runs at least
  ceil(N * whole / buffer) sub-groups, and its weights, unless they fit beside the finest tiles, load that
  often (Eq. 3); a streamed operand (keys, values) that neither fits nor can be made whole beside the
  tiles loads that often too;
* a piece of one op pays the smaller of its ski-slope's excess (run alone) and that in-group bound.

The least sum over every way to cut each component is a lower bound on every plan: a plan's groups are
convex, so they cut each component somewhere, and each piece pays at least its bound whatever else its
group holds (a larger group holds more, never less). Links left out of every component count as free,
as in the per-op bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import product

import numpy as np

from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel
from engine.limit.einsum import at
from engine.limit.ops import OpTable
from engine.limit.ops import tables as op_tables

MAX_LINKS = 10  # links of a component whose 2^links cuts are tried (a transformer layer's pieces have 1-8)
INF = float("inf")
BIG = 1e30  # INF in the cut sums (0 * inf is not 0); bit counts stay below 2^53, exact in float64


@dataclass(frozen=True)
class Link:
    """A tensor one op makes and `readers` read (folded layout ops looked through)."""

    producer: int
    readers: tuple[int, ...]
    nbytes: int  # its bytes (the smaller of the tensor made and the view read)
    whole: int  # elements of one image its one reader holds at full depth when it reads it from outside
    finest: int  # elements of one row of it held so


@dataclass(frozen=True)
class Component:
    """Ops joined by links, and a key shared by every component alike (a model's identical layers)."""

    ops: tuple[int, ...]
    links: tuple[Link, ...]
    kind: int


@dataclass(frozen=True)
class Streamed:
    """A streamed operand (keys, values, a KV cache) one op reads: loaded as parameters are unless made whole on chip."""

    nbytes: int
    elems: int  # elements of every image
    made: bool  # made by an op (no read counted in the once-term) or a network input (one read counted)
    written: bool  # its maker's group must write it when another group reads it (one reader all along)
    need: int | float  # elements of one image any group that makes it whole holds (`_needs`)
    producer: int  # the op that makes the tensor read (-1: a network input); it and its ancestors are the cone


@dataclass(frozen=True, eq=False)
class Segments:
    """What the segmentation bound reads of one graph, independent of the buffer (compared by identity)."""

    components: tuple[Component, ...]
    tables: tuple[OpTable, ...]
    whole: tuple[tuple[int, int], ...]  # per op: (output elements of one image, chunked under ISOA) at full rows
    finest: tuple[tuple[int, int], ...]  # per op: the same at its least tile rows
    streamed: tuple[tuple[Streamed, ...], ...]  # per op
    read: tuple[tuple[tuple[int, int, int], ...], ...]  # per op: (tensor, whole, finest) of inputs no group makes
    passes: tuple[bool, ...]  # per op: may chunk whatever its producers keep (element-wise on token matrices)
    inplace: tuple[bool, ...]
    covered: tuple[bool, ...]
    cone: tuple[int, ...]  # per op: the mask of it and its ancestors
    free_links: int  # links left out of every component (counted free)
    cuts: tuple[Cuts, ...] = ()  # per kind of component: its pieces under every subset of cut links


@dataclass(frozen=True)
class Piece:
    """Ops of a component one group holds, and lower bounds on the elements of its tiles (one image; finest)."""

    ops: tuple[int, ...]
    whole: int
    finest: int
    # per streamed operand its members read, in order: (whole-image, finest) elements of the tiles outside the
    # operand's cone, which shrink with the row steps while a cone that makes the operand whole does not
    rest: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, eq=False)
class Cuts:
    """Every way to cut a component: row s cuts links `cut_bits[s]` bits' worth (twice their bytes) and leaves
    the pieces `uses[s]` marks (buffer-independent; priced per size by `_piece_bits`)."""

    pieces: tuple[Piece, ...]
    uses: np.ndarray  # (subsets, pieces) of 0 / 1
    cut_bits: np.ndarray  # (subsets,)


@lru_cache(maxsize=16)
def segments_of(model: FusionModel) -> Segments:
    """The links, components and per-op tables of a graph's cost model (cached per model)."""
    n = model.n
    tables = op_tables(model.graph, model.word_bits, model.tp)
    links = _links(model)
    comps, free = _components(model, links)
    whole, finest = [], []
    for i in range(n):
        full, chunk = model.full_row[i], model.full_row[i] - model.save_row[i]
        whole.append((full * model.out_h[i], chunk * model.out_h[i]))
        finest.append((full * model.floor[i], chunk * model.floor[i]))
    needs = _needs(model)
    streamed = tuple(tuple(Streamed(*_source(model, j), needs[j], model.producer[j]) for j in model.ins[i]
                           if model.stream_elems[j]) for i in range(n))
    read = tuple(tuple((j, model.held[j] * model.geo(j).h, model.held[j]) for j in model.ins[i]
                       if model.covered[i] and (model.producer[j] < 0 or not model.covered[model.producer[j]]))
                 for i in range(n))
    cone = tuple(model.anc[i] | 1 << i for i in range(n))
    seg = Segments((), tables, tuple(whole), tuple(finest), streamed, read, tuple(model.passes), tuple(model.inplace),
                   tuple(model.covered), cone, free)
    kinds: dict[tuple, int] = {}
    keyed: list[Component] = []
    cuts: list[Cuts] = []
    for ops, own in comps:
        kind = kinds.setdefault(_signature(seg, ops, own), len(kinds))
        if kind == len(cuts):
            cuts.append(_cuts(seg, ops, own))
        keyed.append(Component(ops, own, kind))
    return replace(seg, components=tuple(keyed), cuts=tuple(cuts))


def _signature(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...]) -> tuple:
    """What `_component_bits` reads of a component, with its ops numbered from 0 (equal for identical layers)."""
    pos = {i: k for k, i in enumerate(ops)}
    local: dict[int, int] = {}  # tensors read from outside, numbered in the component (two ops may read one)
    per_op = tuple((seg.whole[i], seg.finest[i],
                    tuple((st.nbytes, st.elems, st.made, st.written, st.need) for st in seg.streamed[i]),
                    tuple(tuple(pos[k] for k in ops if _in_cone(seg, st, k)) for st in seg.streamed[i]),
                    tuple((local.setdefault(j, len(local)), w, f) for j, w, f in seg.read[i]),
                    seg.passes[i], seg.inplace[i], seg.covered[i],
                    seg.tables[i].params, seg.tables[i].whole, seg.tables[i].compulsory, seg.tables[i].steps)
                   for i in ops)
    return per_op, tuple((pos[ln.producer], tuple(pos[r] for r in ln.readers), ln.nbytes, ln.whole, ln.finest)
                         for ln in links)


def _components(model: FusionModel, links: list[Link]) -> tuple[list[tuple[tuple[int, ...], tuple[Link, ...]]], int]:
    """Ops joined by single-reader links, then by links of several readers (largest first) while a component keeps
    at most `MAX_LINKS` links; (components with their links, links left out)."""
    parent = list(range(model.n))
    count = [0] * model.n  # links of the component rooted here

    def root(i: int) -> int:
        return _find(parent, i)

    kept: list[Link] = []
    free = 0
    for ln in sorted(links, key=lambda ln: (len(ln.readers) > 1, -ln.nbytes)):
        roots = {root(ln.producer)} | {root(r) for r in ln.readers}
        total = sum(count[r] for r in roots) + 1
        if len(ln.readers) > 1 and total > MAX_LINKS:
            free += 1
            continue
        top = roots.pop()
        for r in roots:
            parent[r] = top
        count[top] = total
        kept.append(ln)
    members: dict[int, list[int]] = {}
    for i in range(model.n):
        if not model.folds[i]:
            members.setdefault(root(i), []).append(i)
    own: dict[int, list[Link]] = {}
    for ln in kept:
        own.setdefault(root(ln.producer), []).append(ln)
    out: list[tuple[tuple[int, ...], tuple[Link, ...]]] = []
    for r, ops in members.items():
        mine = tuple(own.get(r, ()))
        if len(mine) > MAX_LINKS:  # a long chain of single-reader links: its ops alone, its links free
            free += len(mine)
            out.extend(((i,), ()) for i in ops)
        else:
            out.append((tuple(ops), mine))
    return out, free


def _find(parent, i: int) -> int:
    """The root of i in a union-find forest (`parent`: a list or dict), halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _links(model: FusionModel) -> list[Link]:
    """Every link: a tensor made by an op (with no other output) and read by other ops, as they read it through
    folded layout ops (a one-in, one-out view read alone); not streamed, not a network output. A folded split read
    alone (a packed QKV projection's heads) gives one link per part it passes on, each its own bytes: the maker's
    group writes at least that part and its reader's group reads it when they differ."""
    out = []
    for p in range(model.n):
        if not model.folds[p] and len(model.outs[p]) == 1:
            out.extend(_follow(model, p, model.outs[p][0], model.tbytes[model.outs[p][0]]))
    return out


def _follow(model: FusionModel, p: int, j: int, nbytes: int) -> list[Link]:
    """The links of tensor j (made by op p, or a view of what it made) through folded layout ops read alone."""
    while True:
        readers = model.consumer_mask[j]
        if model.is_graph_output[j] or model.stream[j] or not readers or not nbytes:
            return []
        c = readers.bit_length() - 1
        if readers.bit_count() > 1 or not (model.folds[c] and len(model.ins[c]) == 1):
            break
        if len(model.outs[c]) > 1:  # a split: each part its own link
            return [ln for o in model.outs[c] for ln in _follow(model, p, o, min(nbytes, model.tbytes[o]))]
        j = model.outs[c][0]
        nbytes = min(nbytes, model.tbytes[j])
    ops = FusionModel.members(model.consumer_mask[j])
    if any(model.folds[c] for c in ops):
        return []  # a layout op that does not fold away alone (it has other inputs) leaves its tensors free
    geo = model.tgeo[j]
    rows = geo.h if geo is not None else 1
    return [Link(p, tuple(ops), nbytes, model.held[j] * rows, model.held[j])]


def _source(model: FusionModel, j: int) -> tuple[int, int, bool, bool]:
    """(bytes, elements, made by an op, written) a group loads at least when it reads streamed tensor j from
    outside: an in-place op's output (a repeat of grouped-query heads, a KV-cache append) may be read as its inputs
    instead, which can be fewer (the cache of the KV heads, not its repeat); `made` is False once a network input is
    among them (its one read is in the once-term); `written` when one op makes it and one reads it, all along."""
    p = model.producer[j]
    single = model.consumer_mask[j].bit_count() == 1
    if p < 0 or not model.inplace[p]:
        return model.tbytes[j], model.stream_elems[j], p >= 0, p >= 0 and single
    parts = [_source(model, k) for k in model.ins[p]]
    made = all(m for _, _, m, _ in parts)
    written = single and len(parts) == 1 and parts[0][3]
    nbytes, elems = sum(b for b, _, _, _ in parts), sum(e for _, e, _, _ in parts)
    if nbytes >= model.tbytes[j]:
        return model.tbytes[j], model.stream_elems[j], made, written
    return nbytes, elems, made, written


def _needs(model: FusionModel) -> list[int | float]:
    """Per tensor: a lower bound on the elements of one image a group holds when it makes the tensor whole (every
    row, as a streamed operand made in its group is): its producer's output at every row (T_c channels if chunked),
    plus for each input the less of holding it whole from outside and making it whole inside; a streamed input
    must be made inside (else it is loaded, the other case), a network input or an uncovered op's output read."""
    def outside(j: int) -> int | float:
        geo = model.tgeo[j]
        return INF if model.stream[j] else model.held[j] * (geo.h if geo else 1)

    need: list[int | float] = [outside(j) if model.producer[j] < 0 else 0 for j in range(len(model.tnames))]
    for i in range(model.n):
        for j in model.outs[i]:
            if not model.covered[i]:
                need[j] = outside(j)
                continue
            total: int | float = 0 if model.inplace[i] else (model.full_row[i] - model.save_row[i]) * model.out_h[i]
            for k in model.ins[i]:
                total += min(outside(k), need[k])
            need[j] = total
    return need


def excess_bits(seg: Segments, cap: Capacity, reach: int, batch: int, word_bits: int) -> int:
    """Bits every plan moves beyond the once-term (network inputs, outputs and weights once) at this capacity:
    per component, the cheapest cut into pieces (computed once per kind of component)."""
    done: dict[int, int] = {}
    total = 0
    for comp in seg.components:
        bits = done.get(comp.kind)
        if bits is None:
            cuts = seg.cuts[comp.kind]
            costs = np.array([_piece_bits(seg, p, cap, reach, batch, word_bits) for p in cuts.pieces], dtype=np.float64)
            costs[np.isinf(costs)] = BIG
            least = float((cuts.cut_bits + cuts.uses @ costs).min())
            if least >= BIG:
                raise ValueError("a component with no piece that runs: its ops alone always run")
            bits = done[comp.kind] = int(least)
        total += bits
    return total


def _cuts(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...]) -> Cuts:
    """The pieces of a component under every subset of its links cut (a link is uncut when its maker and all its
    readers share a group), with their footprint bounds."""
    pieces: dict[frozenset[int], int] = {}
    rows, cut_bits = [], []
    for cuts in product((False, True), repeat=len(links)):
        parent = {i: i for i in ops}
        for ln, cut in zip(links, cuts):
            if not cut:
                for r in ln.readers:
                    parent[_find(parent, r)] = _find(parent, ln.producer)
        members: dict[int, list[int]] = {}
        for i in ops:
            members.setdefault(_find(parent, i), []).append(i)
        rows.append([pieces.setdefault(frozenset(m), len(pieces)) for m in members.values()])
        cut_bits.append(sum(2 * ln.nbytes * 8 for ln, cut in zip(links, cuts) if cut))
    uses = np.zeros((len(rows), len(pieces)))
    for s, row in enumerate(rows):
        uses[s, row] = 1
    return Cuts(tuple(_piece(seg, tuple(sorted(key)), links) for key in pieces), uses,
                np.array(cut_bits, dtype=np.float64))


def _piece(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...]) -> Piece:
    """A piece's footprint bounds: its members' output tiles (`_footprint`), the links it reads from another group
    and the tensors no group makes, at full depth; at least the per-op whole rows of `OpTable.whole`."""
    key = set(ops)
    inner = tuple(ln for ln in links if ln.producer in key and all(r in key for r in ln.readers))
    fed = tuple(ln for ln in links if ln.readers[0] in key and ln.producer not in key
                and len(ln.readers) == 1)  # read from another group (several readers: maybe from its own)
    whole, finest = _footprint(seg, ops, inner)
    outside = {j: (w, f) for i in ops for j, w, f in seg.read[i]}  # network inputs, outputs of ops run alone
    whole = max(whole + sum(ln.whole for ln in fed) + sum(w for w, _ in outside.values()),
                max((seg.tables[i].whole for i in ops), default=0))
    finest += sum(ln.finest for ln in fed) + sum(f for _, f in outside.values())
    rest = []
    for st in (st for i in ops for st in seg.streamed[i]):
        out = [i for i in ops if not _in_cone(seg, st, i)]
        apart = [ln for ln in fed if not _in_cone(seg, st, ln.readers[0])]
        rest.append((sum(seg.whole[i][1] for i in out) + sum(ln.whole for ln in apart),
                     sum(seg.finest[i][1] for i in out) + sum(ln.finest for ln in apart)))
    return Piece(ops, whole, finest, tuple(rest))


def _in_cone(seg: Segments, st: Streamed, i: int) -> bool:
    """Whether op i makes streamed operand `st` or is one of its ancestors."""
    return st.producer >= 0 and bool(seg.cone[st.producer] >> i & 1)


def _piece_bits(seg: Segments, piece: Piece, cap: Capacity, reach: int, batch: int, word_bits: int) -> float:
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
    ops, finest = piece.ops, piece.finest
    if len(ops) > 1 and not all(seg.covered[i] for i in ops):
        return INF
    if finest > cap.fmap:
        return INF
    base = max(1, -(-batch * piece.whole // max(1, cap.fmap)))
    params = sum(seg.tables[i].params for i in ops)
    streams = list(zip((st for i in ops for st in seg.streamed[i]), piece.rest))
    best = INF
    for inside in product((False, True), repeat=len(streams)):
        loads, held, loaded = base, finest, params
        for (st, (r_whole, r_finest)), made in zip(streams, inside):
            if not made:
                loaded += st.elems
                continue
            if st.need + r_finest > cap.fmap:
                break  # the cone and the tiles beside it do not fit
            loads = max(loads, -(-batch * r_whole // max(1, int(cap.fmap - st.need))))
            held = max(held, int(st.need) + r_finest)
        else:
            stays = loaded <= (cap.fmap - held if cap.shared else cap.param)
            bits = 0 if stays else (loads - 1) * params * word_bits
            for (st, _), made in zip(streams, inside):
                if not made:  # read once if it stays (none counted yet if an op makes it), else once per sub-group
                    reads = 1 if stays else loads
                    bits += (reads - (not st.made) + st.written) * st.nbytes * 8
            best = min(best, bits)
    return best


def _footprint(seg: Segments, ops: tuple[int, ...], inner: tuple[Link, ...]) -> tuple[int, int]:
    """(whole-image, finest) lower bounds on the output tiles the piece's ops hold together: the least over which
    ops chunk (Alg. 2: no reader of a chunked op chunks unless it passes chunks on), with each op's rule kept
    towards one reader only (an in-forest: fewer rules, a bound no larger)."""
    reader: dict[int, int] = {}
    for ln in inner:
        reader.setdefault(ln.producer, ln.readers[0])
    children: dict[int, list[int]] = {}
    for p, c in reader.items():
        children.setdefault(c, []).append(p)
    return _tree_min(seg.whole, seg, ops, reader, children), _tree_min(seg.finest, seg, ops, reader, children)


def _tree_min(width, seg: Segments, ops: tuple[int, ...], reader: dict[int, int],
              children: dict[int, list[int]]) -> int:
    """Least sum of `width[i][chunked]` over an in-forest where no op that neither passes chunks nor is in place
    chunks an input another member chunked (Alg. 2); an in-place op is chunked when an input it carries is."""
    best: dict[int, tuple[int, int]] = {}  # op -> (least of its subtree unchunked, chunked)
    for i in sorted(ops):  # producers first: topological order
        kids = children.get(i, [])
        free = sum(min(best[c]) for c in kids)
        plain = sum(best[c][0] for c in kids)
        if seg.inplace[i]:
            best[i] = (plain, free)
        elif seg.passes[i]:
            best[i] = (width[i][0] + free, width[i][1] + free)
        else:
            best[i] = (width[i][0] + free, width[i][1] + plain)
    return sum(min(best[i]) for i in ops if i not in reader)
