"""The fused limit by segmentation: chains of single-reader tensors cut into fused pieces, each piece priced at least.

Orojenesis (Huang et al., "Mind the Gap", ISCA 2024, Sec. V-VI) fuses a chain of Einsums in row tiles
and segments it where fusing loses: a segment boundary sends its tensor out and back, a fused segment
reloads its weights once per row tile, and the tile the buffer allows shrinks with what the segment
must hold at once. Here the same analysis runs in the fusion cost model's own terms, so that it bounds
every plan the engine prices (`docs/limit.md`, "The tight fused limit", has the argument):

* a *link* is a tensor an op makes and other ops read (not a network output; a reshape, transpose or head split
  that folds is looked through; a streamed operand one op makes and one reads, K^T or V, too). Links join ops into
  *components*: every link read by one op, and a link read by several while the component keeps `MAX_LINKS`; one
  left out (a residual stream between layers) is *loose*, and costs its bytes twice where its readers, all in one
  component, are not in one group. Every plan's groups cut each component into *pieces* (the ops a group holds of
  it, joined by uncut links: a link is uncut when its maker and every reader share a group); cuts no convex groups
  make are left out;
* a cut link costs its bytes twice (the producer's group writes it, some other group reads it);
* a piece of several ops holds, at each row step, its members' output tiles (a member chunked under ISOA holds T_c
  channels, and no reader of a chunked member chunks, Alg. 2), the links it reads from outside at full depth, and
  what holding the tensors it may share with its group costs at least (`_supply`: a least closure over their
  makers); with k row steps of t_n images, t_n * whole / k <= buffer, so its group runs at least
  ceil(N * whole / buffer) sub-groups, and its weights, unless they fit beside the finest tiles, load that often
  (Eq. 3); a streamed operand (keys, values) is loaded that often too unless made whole beside the tiles, its cone
  then held at every row step (`_need`), which it must be when a member makes it;
* a piece of one op pays the smaller of its ski-slope's excess (run alone) and that in-group bound.

The least sum over every way to cut each component is a lower bound on every plan: a plan's groups are
convex, so they cut each component somewhere, and each piece pays at least its bound whatever else its
group holds (a larger group holds more, never less). A loose link whose readers span components counts as
free, as in the per-op bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel
from engine.limit.closure import UNBOUNDED, least_closure
from engine.limit.einsum import at
from engine.limit.ops import OpTable
from engine.limit.ops import tables as op_tables

MAX_LINKS = 12  # links of a component whose 2^links cuts are tried (a transformer layer's pieces have 1-12)
HORIZON = 10  # producer steps above a piece within which `_supply` looks for what its shared inputs cost to hold
CHAIN_ROUNDS = 40  # rounds of `_chain_bits` pricing the links its best cuts keep (a lower bound after any round)
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
    streamed: bool = False  # a streamed operand (keys, values): read as parameters are, so held nowhere


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
    below: tuple[int, ...]  # per op: the mask of it and its descendants
    free_links: int  # links left out of every component (loose: priced where their readers share one, else free)
    feeds: tuple[tuple[int, ...], ...] = ()  # per op: its input tensors that are not streamed
    maker: tuple[int, ...] = ()  # per tensor: the covered op that makes it (-1: a network input or an uncovered op's)
    outside: tuple[tuple[int, int], ...] = ()  # per tensor: (whole-image, finest) elements held from another group
    source: tuple[int, ...] = ()  # per tensor: the op that makes it, looked back through folded layout ops
    ins: tuple[tuple[int, ...], ...] = ()  # per op: every input tensor
    hold: tuple[int, ...] = ()  # per tensor: whole-image elements a group making a streamed operand whole holds
    # of it when it reads it (a streamed tensor cannot be: `UNBOUNDED`)
    cuts: tuple[Cuts, ...] = ()  # per kind of component: its pieces under every subset of cut links
    chains: tuple[tuple[int, ...], ...] = ()  # components in a row, each the readers' of a loose link the one before
    # makes (a residual stream between layers): per component of a chain but the first, (the one before, the link,
    # the first component of the same kinds and positions: their joint pieces are priced once)
    joined: Mapping[int, tuple[int, Link, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Piece:
    """Ops of a component one group holds, and lower bounds on the elements of its tiles (one image; finest)."""

    ops: tuple[int, ...]
    whole: int
    finest: int
    # per set of the streamed operands its members read (bit k: the k-th, in order) made whole in the group: the
    # elements of one image their cones hold at every row step (`_need`), and (whole-image, finest) elements of the
    # tiles outside the cones, which shrink with the row steps while the cones do not
    rest: tuple[tuple[int | float, int, int], ...] = ()
    linked: tuple[bool, ...] = ()  # per streamed operand: whether a link of the component carries it
    params: int = 0  # elements of its members' own parameters
    streams: tuple[Streamed, ...] = ()  # the streamed operands its members read, in order
    runs: bool = True  # one op, or every member in the tile model (else no group holds them)


@dataclass(frozen=True, eq=False)
class Cuts:
    """Every way to cut a component: row s cuts links `cut_bits[s]` bits' worth (twice their bytes) and leaves
    the pieces `uses[s]` marks (buffer-independent; priced per size by `_piece_bits`)."""

    pieces: tuple[Piece, ...]
    uses: np.ndarray  # (subsets, pieces) of 0 / 1
    cut_bits: np.ndarray  # (subsets,)
    masks: tuple[int, ...]  # per piece: its ops as bits of the component's (k: the k-th)
    owner: np.ndarray  # (subsets, ops): the piece each op is in


@lru_cache(maxsize=16)
def segments_of(model: FusionModel) -> Segments:
    """The links, components and per-op tables of a graph's cost model (cached per model)."""
    n = model.n
    tables = op_tables(model.graph, model.word_bits, model.tp)
    links = _links(model)
    comps, free, loose = _components(model, links)
    whole, finest = [], []
    for i in range(n):
        full, chunk = model.full_row[i], model.full_row[i] - model.save_row[i]
        whole.append((full * model.out_h[i], chunk * model.out_h[i]))
        finest.append((full * model.floor[i], chunk * model.floor[i]))
    streamed = tuple(tuple(Streamed(*_source(model, j), model.producer[j]) for j in model.ins[i]
                           if model.stream_elems[j]) for i in range(n))
    read = tuple(tuple((j, model.held[j] * model.geo(j).h, model.held[j]) for j in model.ins[i]
                       if model.covered[i] and (model.producer[j] < 0 or not model.covered[model.producer[j]]))
                 for i in range(n))
    cone = tuple(model.anc[i] | 1 << i for i in range(n))
    feeds = tuple(tuple(j for j in model.ins[i] if not model.stream[j]) for i in range(n))
    maker = tuple(p if p >= 0 and model.covered[p] else -1 for p in model.producer)
    outside = tuple((model.held[j] * (geo.h if geo is not None else 1), model.held[j])
                    for j, geo in enumerate(model.tgeo))
    below = tuple(model.desc[i] | 1 << i for i in range(n))
    seg = Segments((), tables, tuple(whole), tuple(finest), streamed, read, tuple(model.passes), tuple(model.inplace),
                   tuple(model.covered), cone, below, free, feeds, maker, outside, _sources(model), tuple(model.ins),
                   tuple(UNBOUNDED if model.stream[j] else w for j, (w, _) in enumerate(outside)))
    kinds: dict[tuple, int] = {}
    keyed: list[Component] = []
    cuts: list[Cuts] = []
    for ops, own in comps:
        inside = set(ops)
        near = tuple(ln for ln in loose if all(r in inside for r in ln.readers))  # a residual stream read here
        kind = kinds.setdefault(_signature(seg, ops, own, near), len(kinds))
        if kind == len(cuts):
            cuts.append(_cuts(seg, ops, own, near))
        keyed.append(Component(ops, own, kind))
    chains, joined = _chains(keyed, loose)
    return replace(seg, components=tuple(keyed), cuts=tuple(cuts), chains=chains, joined=joined)


def _chains(comps: list[Component], loose: list[Link]) -> tuple[tuple[tuple[int, ...], ...],
                                                                 dict[int, tuple[int, Link, int]]]:
    """Components in a row joined by loose links, each made in one component and read all in the next (the residual
    stream from one layer's component to the next's), where a component reads one such link and makes one."""
    comp_of = {i: c for c, comp in enumerate(comps) for i in comp.ops}
    pairs = []
    for ln in loose:
        readers = {comp_of.get(r, -1) for r in ln.readers}
        a, b = comp_of.get(ln.producer, -1), min(readers)
        if len(readers) == 1 and a >= 0 and b >= 0 and a != b:
            pairs.append((a, b, ln))
    outs = [a for a, _, _ in pairs]
    ins = [b for _, b, _ in pairs]
    joined: dict[int, tuple[int, Link, int]] = {}
    reps: dict[tuple, int] = {}
    for a, b, ln in pairs:
        if outs.count(a) == 1 and ins.count(b) == 1:
            key = (comps[a].kind, comps[b].kind, comps[a].ops.index(ln.producer),
                   tuple(comps[b].ops.index(r) for r in ln.readers))
            joined[b] = (a, ln, reps.setdefault(key, b))
    after = {a: b for b, (a, _, _) in joined.items()}
    chains = []
    for c in range(len(comps)):
        if c not in joined and c in after:
            chain = [c]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            chains.append(tuple(chain))
    return tuple(chains), joined


def _signature(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...], loose: tuple[Link, ...]) -> tuple:
    """What `_component_bits` reads of a component, with its ops numbered from 0 (equal for identical layers)."""
    pos = {i: k for k, i in enumerate(ops)}
    local: dict[int, int] = {}  # tensors read from outside, numbered in the component (two ops may read one)
    per_op = tuple((seg.whole[i], seg.finest[i],
                    tuple((st.nbytes, st.elems, st.made, st.written) for st in seg.streamed[i]),
                    tuple(tuple(pos[k] for k in ops if _in_cone(seg, st, k)) for st in seg.streamed[i]),
                    tuple((local.setdefault(j, len(local)), w, f) for j, w, f in seg.read[i]),
                    seg.passes[i], seg.inplace[i], seg.covered[i],
                    seg.tables[i].params, seg.tables[i].whole, seg.tables[i].compulsory, seg.tables[i].steps)
                   for i in ops)
    paths = tuple(tuple(pos[k] for k in ops if seg.cone[i] >> k & 1) for i in ops)  # through ops outside too
    return per_op, paths, tuple((pos[ln.producer], tuple(pos[r] for r in ln.readers), ln.nbytes, ln.whole, ln.finest,
                                 ln.streamed)
                         for ln in links), _context(seg, ops), tuple(
        (pos.get(ln.producer, -1), tuple(pos[r] for r in ln.readers), ln.nbytes) for ln in loose)


def _context(seg: Segments, ops: tuple[int, ...]) -> tuple:
    """What `_supply` reads around a component: the ops within `HORIZON` steps above it and the tensors its ops and
    they read, numbered from 0 (equal for identical layers away from the network's ends)."""
    members = set(ops)
    near = sorted(_above(seg, members, HORIZON + 1, seg.ins) | members)
    pos = {i: k for k, i in enumerate(near)}
    return tuple((i in members, seg.whole[i], seg.finest[i], seg.covered[i], seg.inplace[i],
                  tuple((pos.get(seg.maker[j], -1), seg.outside[j], seg.hold[j], pos.get(seg.source[j], -1))
                        for j in seg.ins[i]))
                 for i in near)


def _above(seg: Segments, start: set[int], depth: int, via: tuple[tuple[int, ...], ...]) -> set[int]:
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


def _components(model: FusionModel, links: list[Link]) -> tuple[list[tuple[tuple[int, ...], tuple[Link, ...]]], int,
                                                                 list[Link]]:
    """Ops joined by single-reader links, then by links of several readers (largest first) while a component keeps
    at most `MAX_LINKS` links; (components with their links, how many links are left out, the links of several
    readers among them)."""
    parent = list(range(model.n))
    count = [0] * model.n  # links of the component rooted here

    def root(i: int) -> int:
        return _find(parent, i)

    kept: list[Link] = []
    loose: list[Link] = []
    free = 0
    for ln in sorted(links, key=lambda ln: (len(ln.readers) > 1, -ln.nbytes)):
        roots = {root(ln.producer)} | {root(r) for r in ln.readers}
        total = sum(count[r] for r in roots) + 1
        if len(ln.readers) > 1 and total > MAX_LINKS:
            free += 1
            loose.append(ln)
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
    return out, free, loose


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
    return out + _stream_links(model)


def _stream_links(model: FusionModel) -> list[Link]:
    """A streamed operand one op makes (through layout views and in-place ops of one input) and one op reads, all
    along: cut, the maker's group writes it and the reader's reads it at least once (`_grouped_bits` counts the
    reads beyond); uncut, the reader's group makes it."""
    out = []
    for r in range(model.n):
        for j in model.ins[r]:
            if not model.stream_elems[j] or model.folds[r]:
                continue
            nbytes, _, made, written = _source(model, j)
            p = model.producer[j]
            while p >= 0 and model.inplace[p] and len(model.ins[p]) == 1:
                p = model.producer[model.ins[p][0]]
            if made and written and p >= 0 and model.covered[p] and not model.inplace[p]:
                out.append(Link(p, (r,), nbytes, 0, 0, True))
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


def _sources(model: FusionModel) -> tuple[int, ...]:
    """Per tensor, the op that makes it looked back through folded one-in layout ops (-1: a network input)."""
    out = []
    for j in range(len(model.tnames)):
        p = model.producer[j]
        while p >= 0 and model.folds[p] and len(model.ins[p]) == 1:
            p = model.producer[model.ins[p][0]]
        out.append(p)
    return tuple(out)


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


def excess_bits(seg: Segments, cap: Capacity, reach: int, batch: int, word_bits: int) -> int:
    """Bits every plan moves beyond the once-term (network inputs, outputs and weights once) at this capacity:
    per component, the cheapest cut into pieces (computed once per kind of component); along a chain of components
    joined by loose links, the cheapest cuts together, each link paying what keeping it on chip costs (`_chain_bits`)."""
    costs: dict[int, np.ndarray] = {}  # per kind: its pieces' least excess bits
    rows: dict[int, np.ndarray] = {}  # per kind: every cut's

    def row_bits(kind: int) -> np.ndarray:
        if kind not in rows:
            cuts = seg.cuts[kind]
            costs[kind] = np.array([_piece_bits(seg, p, cap, reach, batch, word_bits) for p in cuts.pieces],
                                   dtype=np.float64)
            rows[kind] = cuts.cut_bits + cuts.uses @ np.minimum(costs[kind], BIG)
            if rows[kind].min() >= BIG:
                raise ValueError("a component with no piece that runs: its ops alone always run")
        return rows[kind]

    chained = {c for chain in seg.chains for c in chain}
    total = sum(int(row_bits(comp.kind).min()) for c, comp in enumerate(seg.components) if c not in chained)
    known: dict[tuple, float] = {}  # pieces kept together (`_price`'s keys) -> bits keeping the link costs
    for chain in seg.chains:
        for c in chain:
            row_bits(seg.components[c].kind)
        total += int(_chain_bits(seg, chain, rows, costs, known,
                                 lambda piece: _piece_bits(seg, piece, cap, reach, batch, word_bits)))
    return total


FREE, PAID = -1, -2  # states of a component's piece that makes the next link: unpriced, or priced with the one before


def _chain_bits(seg: Segments, chain: tuple[int, ...], rows: dict[int, np.ndarray], costs: dict[int, np.ndarray],
                known: dict[tuple, float], price) -> float:
    """The least bits of a chain of components, the cuts of each chosen together with what each loose link between
    two costs. A link made in piece P of one component and read all in piece Q of the next is cut, its bytes out and
    back, or kept: then one group holds P and Q, which pays at least the bound of the two as one piece (`_joint`) and
    at least the two's, so the link adds what the first passes the second by. Where Q makes the next link and that is
    kept too, with piece R after, the group holds P, Q and R: had P and Q added nothing, the second link adds what
    the three as one piece pass their own bounds by (or what Q and R do, the larger); had they added something, Q is
    priced already and the second link adds nothing, so no piece's bound counts twice. A link whose readers are in
    different pieces is cut, counted in the component's cut.

    A dynamic programme along the chain over each component's cuts (gathered by the pieces that read and make its
    links: `_steps`) and the state of the piece that makes the next link (unpriced, priced, or kept free with piece P
    before it) finds the least. The joint pieces are priced lazily: an unpriced one counts 0 (a lower bound), those
    its best choice keeps are priced, and it runs again, until they are all priced (or `CHAIN_ROUNDS` rounds: a lower
    bound still)."""
    comps = seg.components
    steps, kinds = _steps(seg, chain)
    least = [np.minimum.reduceat(rows[comps[c].kind][kind.order], kind.starts).tolist()
             for c, kind in zip(chain, kinds)]
    for _ in range(CHAIN_ROUNDS):
        trail: list[list[dict[int, tuple[float, tuple[int, int, tuple[tuple, ...]]]]]] = [
            [{FREE: (bits, (-1, FREE, ()))} for bits in least[0]]]
        for k, step in enumerate(steps):
            trail.append(_advance(trail[-1], step, kinds[k].makes, kinds[k + 1], least[k + 1], known))
        g = min(range(len(trail[-1])), key=lambda x: min(v for v, _ in trail[-1][x].values()))
        state = min(trail[-1][g], key=lambda x: trail[-1][g][x][0])
        missing: set[tuple] = set()
        for k in range(len(steps), 0, -1):
            _, back = trail[k][g][state]
            g, state, keys = back
            missing.update(key for key in keys if key not in known)
        if not missing:
            break
        for key in missing:
            known[key] = _price(seg, key, costs, price)
    best = min(v for st in trail[-1] for v, _ in st.values())
    if best >= BIG:
        raise ValueError("a chain of components with no pieces that run: its ops alone always run")
    return best


def _advance(states: list[dict[int, tuple[float, tuple[int, int, tuple[tuple, ...]]]]], step: _Step,
             makes: np.ndarray, after: _Kind, least: list[float],
             known: dict[tuple, float]) -> list[dict[int, tuple[float, tuple[int, int, tuple[tuple, ...]]]]]:
    """One link of `_chain_bits`: from the states of the component before (per gathering: state -> (bits, back)) to
    the next one's (back: the gathering and state it came from, and the joint pieces it priced)."""
    offers: dict[tuple[str, int, int], tuple[float, int, int]] = {}  # what a kept link may price (nothing; the
    # maker's piece with the readers'; the piece before, the maker's and the readers') -> the least bits offering it
    cut = (INF, -1, FREE)
    for g, st in enumerate(states):
        w = int(makes[g])
        for state, (bits, _) in st.items():
            offer = ("none", -1, -1) if state == PAID else ("pair", -1, w) if state == FREE else ("three", state, w)
            if bits < offers.get(offer, (INF,))[0]:
                offers[offer] = (bits, g, state)
            if bits < cut[0]:
                cut = (bits, g, state)
    kept: dict[int, list[tuple[float, int, tuple, tuple[float, int, int]]]] = {}  # reader piece -> outcomes
    for q in {int(x) for x in after.reads if x >= 0}:
        out = kept[q] = []
        for offer, src in offers.items():
            if offer[0] == "none":
                out.append((0.0, FREE, (), src))
                continue
            pair_key = ("pair", step.pair, offer[2], q)
            if offer[0] == "pair":
                bits = known.get(pair_key, 0.0)
                out.append((bits, PAID if bits > 0 else offer[2], (pair_key,), src))
            else:
                three_key = ("three", step.three, offer[1], offer[2], q)
                bits = max(known.get(three_key, 0.0), known.get(pair_key, 0.0))
                out.append((bits, PAID if bits > 0 else FREE, (three_key, pair_key), src))
    result = []
    for g, q in enumerate(after.reads.tolist()):
        clash = q >= 0 and q == int(after.makes[g])
        options: dict[int, tuple[float, tuple[int, int, tuple[tuple, ...]]]] = {FREE: (cut[0] + (step.twice if q >= 0 else 0.0) + least[g], (cut[1], cut[2], ()))}
        for bits, state, keys, (before, g0, s0) in kept.get(q, ()):
            if not clash:
                state = FREE  # the readers' piece makes no next link: nothing to keep apart
            total = before + bits + least[g]
            if total < options.get(state, (INF,))[0]:
                options[state] = (total, (g0, s0, keys))
        result.append(options)
    return result


def _price(seg: Segments, key: tuple, costs: dict[int, np.ndarray], price) -> float:
    """Bits a kept link adds: what the pieces of `key` as one piece pass their own bounds by (at least 0)."""
    comps = seg.components
    members: tuple[tuple[int, int], ...]
    if key[0] == "pair":
        _, pair, before, after = key
        members = ((seg.joined[pair][0], before), (pair, after))
        joint = _joint(seg, pair, before, after)
    else:
        _, (a, b, c), first, middle, last = key
        members = ((a, first), (b, middle), (c, last))
        joint = _joint_three(seg, (a, b, c), first, middle, last)
    apart = sum(min(costs[comps[c].kind][piece], BIG) for c, piece in members)
    return max(0.0, price(joint) - apart)


@dataclass(frozen=True, eq=False)
class _Kind:
    """A component's cuts in a chain, gathered by what the chain reads of them: the piece reading the loose link
    before (-1: its readers apart, -2: none) and the piece making the link after (-2: none); only the least of each
    gathering counts."""

    order: np.ndarray  # the cuts, by gathering
    starts: np.ndarray  # where each gathering starts in `order`
    reads: np.ndarray  # per gathering: the piece reading the link before
    makes: np.ndarray  # per gathering: the piece making the link after


@dataclass(frozen=True)
class _Step:
    """A loose link of a chain (buffer-independent)."""

    pair: int  # the component it enters, or the first of the same kinds and positions (its joint pieces priced once)
    three: tuple[int, int, int]  # the components around it and the link before, or the first three of the same pairs
    twice: float  # its bits out and back


def _gather(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct keys, the entries sorted by key, where each key starts among them)."""
    unique, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    order = np.argsort(inv, kind="stable")
    return unique, order, np.r_[0, np.flatnonzero(np.diff(inv[order])) + 1]


@lru_cache(maxsize=64)
def _steps(seg: Segments, chain: tuple[int, ...]) -> tuple[tuple[_Step, ...], tuple[_Kind, ...]]:
    """The links of a chain, and its components' cuts gathered."""
    comps = seg.components
    size = [len(seg.cuts[comps[c].kind].uses) for c in chain]
    reads = [np.full(n, -2) for n in size]
    makes = [np.full(n, -2) for n in size]
    for k in range(len(chain) - 1):
        a, b = comps[chain[k]], comps[chain[k + 1]]
        ln = seg.joined[chain[k + 1]][1]
        makes[k] = seg.cuts[a.kind].owner[:, a.ops.index(ln.producer)]
        held = seg.cuts[b.kind].owner[:, [b.ops.index(r) for r in ln.readers]]
        reads[k + 1] = np.where((held == held[:, :1]).all(axis=1), held[:, 0], -1)
    kinds = []
    for k in range(len(chain)):
        keys, order, starts = _gather(np.stack([reads[k], makes[k]], axis=1))
        kinds.append(_Kind(order, starts, keys[:, 0], keys[:, 1]))
    steps: list[_Step] = []
    threes: dict[tuple[int, int], tuple[int, int, int]] = {}
    for k in range(len(chain) - 1):
        _, ln, pair = seg.joined[chain[k + 1]]
        three = threes.setdefault((steps[-1].pair, pair), (chain[k - 1], chain[k], chain[k + 1])) if k else (-1, -1, -1)
        steps.append(_Step(pair, three, 2.0 * ln.nbytes * 8))
    return tuple(steps), tuple(kinds)


@lru_cache(maxsize=4096)
def _joint_three(seg: Segments, three: tuple[int, int, int], first: int, middle: int, last: int) -> Piece:
    """Pieces of three components in a chain (each joined to the next by a loose link) as one piece."""
    ops: list[int] = []
    links: tuple[Link, ...] = ()
    for c, piece in zip(three, (first, middle, last)):
        comp = seg.components[c]
        ops += [i for k, i in enumerate(comp.ops) if seg.cuts[comp.kind].masks[piece] >> k & 1]
        links += comp.links + ((seg.joined[c][1],) if c != three[0] else ())
    return _piece(seg, tuple(sorted(ops)), links)


@lru_cache(maxsize=4096)
def _joint(seg: Segments, pair: int, before: int, after: int) -> Piece:
    """Piece `before` of the component that makes the loose link into component `pair` and piece `after` of `pair`,
    as one piece (the link and both components' links inside it)."""
    a_index, ln, _ = seg.joined[pair]
    a, b = seg.components[a_index], seg.components[pair]
    ops = [i for k, i in enumerate(a.ops) if seg.cuts[a.kind].masks[before] >> k & 1]
    ops += [i for k, i in enumerate(b.ops) if seg.cuts[b.kind].masks[after] >> k & 1]
    return _piece(seg, tuple(sorted(ops)), a.links + b.links + (ln,))


def _cuts(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...], loose: tuple[Link, ...] = ()) -> Cuts:
    """The pieces of a component under every subset of its links cut (a link is uncut when its maker and all its
    readers share a group), with their footprint bounds; a subset no convex groups make is left out (`_convex`).
    `loose`: links of several readers left out of every component whose readers are all here (the residual stream
    from the layer before): one costs its bytes twice wherever its readers are not all in one group."""
    at = {i: k for k, i in enumerate(ops)}
    joins = tuple(1 << at[ln.producer] | sum(1 << at[r] for r in ln.readers) for ln in links)
    cone = tuple(sum(1 << at[k] for k in ops if seg.cone[i] >> k & 1) for i in ops)
    below = tuple(sum(1 << at[k] for k in ops if seg.below[i] >> k & 1) for i in ops)
    apart = tuple((sum(1 << at[r] for r in ln.readers) | (1 << at[ln.producer] if ln.producer in at else 0),
                   ln.nbytes) for ln in loose)
    masks, uses, cut_bits = _rows(joins, cone, below, tuple(ln.nbytes for ln in links), apart)
    number = np.array([[(k + 1) * (g >> i & 1) for i in range(len(ops))] for k, g in enumerate(masks)])
    owner = np.rint(uses @ number).astype(np.int64) - 1  # a cut's pieces part the component's ops
    return Cuts(tuple(_piece(seg, tuple(i for k, i in enumerate(ops) if g >> k & 1), links) for g in masks), uses,
                cut_bits, masks, owner)


@lru_cache(maxsize=64)
def _rows(joins: tuple[int, ...], cone: tuple[int, ...], below: tuple[int, ...], nbytes: tuple[int, ...],
          apart: tuple[tuple[int, int], ...] = ()) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """`_cuts`' subsets of a component's shape (ops as bits: k, the k-th op; `joins`: per link the mask of its maker
    and readers; `apart`: per loose link, the mask of its ops here and its bytes): the pieces' masks, which each
    subset leaves, and the bits it cuts (the same for identical layers)."""
    pieces: dict[int, int] = {}
    hulls: dict[int, int] = {}  # a group's mask -> the ops on paths between two of its ops, its own included
    rows, cut_bits = [], []

    def walk(n: int, parts: list[int], severed: list[int], bits: int) -> None:
        """Links n.. cut or not, the earlier ones decided (`parts` only merge as links stay uncut, so a cut link whose
        ops already share a part ends the branch)."""
        if n == len(joins):
            groups = _convex(cone, below, severed, parts, hulls)
            if groups is not None:  # else no plan cuts so: its groups are convex
                rows.append([pieces.setdefault(g, len(pieces)) for g in parts])
                cut_bits.append(bits + sum(2 * b * 8 for join, b in apart if not any(join & g == join for g in groups)))
            return
        join = joins[n]
        merged = join
        for g in parts:
            if g & join:
                merged |= g
        if not any(j & merged == j for j in severed):
            walk(n + 1, [g for g in parts if not g & join] + [merged], severed, bits)
        if not any(join & g == join for g in parts):
            walk(n + 1, parts, severed + [join], bits + 2 * nbytes[n] * 8)

    walk(0, [1 << k for k in range(len(cone))], [], 0)
    uses = np.zeros((len(rows), len(pieces)))
    for s, row in enumerate(rows):
        uses[s, row] = 1
    return tuple(pieces), uses, np.array(cut_bits, dtype=np.float64)


def _convex(cone: tuple[int, ...], below: tuple[int, ...], cut: list[int], pieces: list[int],
            hulls: dict[int, int]) -> list[int] | None:
    """The least groups convex groups that cut a component so make (a piece's ops share a group, and so does every
    op on a path between two ops of a group; `cone`, `below`: per op, the ops above and below it, itself included),
    or None when there are none: a link (`cut`: the masks of the cut links' makers and readers, none inside a piece)
    whose ops are then all in one group is uncut."""
    groups = list(pieces)
    changed = True
    while changed:
        changed = False
        for g in groups:
            hull = hulls.get(g)
            if hull is None:
                hull = hulls[g] = g | sum(1 << k for k, (up, down) in enumerate(zip(cone, below)) if up & g and down & g)
            if hull != g:
                merged = hull
                for h in groups:
                    if h & hull:
                        merged |= h
                groups = [h for h in groups if not h & hull] + [merged]
                changed = True
                break
    return None if any(join & g == join for join in cut for g in groups) else groups


def _piece(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...]) -> Piece:
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
    return frozenset(_above(seg, set(producers), HORIZON, seg.ins))


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
    return frozenset(makers | _above(seg, makers, HORIZON - 1, seg.feeds))


@lru_cache(maxsize=65536)
def _cut_value(seg: Segments, tensors: frozenset[int], near: frozenset[int], counted: frozenset[int], at: int) -> int:
    """`_supply`'s minimum cut with the makers it may choose (`near`)."""
    return least_closure(tensors, seg.maker, seg.feeds, lambda p: min(seg.whole[p] if at == 0 else seg.finest[p]),
                    lambda j: seg.outside[j][at], near,
                    lambda j: seg.outside[j][at] if seg.maker[j] < 0 and j not in counted else 0)


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
