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
  what holding the tensors it may share with its group costs at least (`pieces._supply`: a least closure over their
  makers); with k row steps of t_n images, t_n * whole / k <= buffer, so its group runs at least
  ceil(N * whole / buffer) sub-groups, and its weights, unless they fit beside the finest tiles, load that often
  (Eq. 3); a streamed operand (keys, values) is loaded that often too unless made whole beside the tiles, its cone
  then held at every row step (`pieces._need`), which it must be when a member makes it;
* a piece of one op pays the smaller of its ski-slope's excess (run alone) and that in-group bound;
* components in a row, each making a loose link the next reads all of (the residual stream between layers), form a
  *chain* whose cuts are chosen together: a stream kept on chip puts the piece making it and the piece reading it
  (and a third, where two in a row are kept) in one group, priced as one piece (`streams.py`).

The least sum over every way to cut each component is a lower bound on every plan: a plan's groups are
convex, so they cut each component somewhere, and each piece pays at least its bound whatever else its
group holds (a larger group holds more, never less). A loose link whose readers span components and is no
chain's counts as free, as in the per-op bound.

This module builds the bound's tables of a graph (`segments_of`) and sums it at a capacity (`excess_bits`); the
parts are `parts.py` (the data), `components.py` (links, components, chains), `pieces.py` (a piece's bound),
`cuts.py` (every cut of a component) and `streams.py` (a chain's cuts together).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel
from engine.limit.closure import UNBOUNDED
from engine.limit.components import chains_of, components_of, links_of, source_of, sources_of
from engine.limit.cuts import cuts_of
from engine.limit.ops import tables as op_tables
from engine.limit.parts import BIG, Component, Cuts, Link, Segments, Streamed
from engine.limit.pieces import HORIZON, above, in_cone, piece_bits
from engine.limit.streams import chain_bits


@lru_cache(maxsize=16)
def segments_of(model: FusionModel) -> Segments:
    """The links, components and per-op tables of a graph's cost model (cached per model)."""
    n = model.n
    tables = op_tables(model.graph, model.word_bits, model.tp)
    links = links_of(model)
    comps, free, loose = components_of(model, links)
    whole, finest = [], []
    for i in range(n):
        full, chunk = model.full_row[i], model.full_row[i] - model.save_row[i]
        whole.append((full * model.out_h[i], chunk * model.out_h[i]))
        finest.append((full * model.floor[i], chunk * model.floor[i]))
    streamed = tuple(tuple(Streamed(*source_of(model, j), model.producer[j]) for j in model.ins[i]
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
                   tuple(model.covered), cone, below, free, feeds, maker, outside, sources_of(model), tuple(model.ins),
                   tuple(UNBOUNDED if model.stream[j] else w for j, (w, _) in enumerate(outside)))
    kinds: dict[tuple, int] = {}
    keyed: list[Component] = []
    cuts: list[Cuts] = []
    for ops, own in comps:
        inside = set(ops)
        near = tuple(ln for ln in loose if all(r in inside for r in ln.readers))  # a residual stream read here
        kind = kinds.setdefault(_signature(seg, ops, own, near), len(kinds))
        if kind == len(cuts):
            cuts.append(cuts_of(seg, ops, own, near))
        keyed.append(Component(ops, own, kind))
    chains, joined = chains_of(keyed, loose)
    return replace(seg, components=tuple(keyed), cuts=tuple(cuts), chains=chains, joined=joined)


def _signature(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...], loose: tuple[Link, ...]) -> tuple:
    """What `_component_bits` reads of a component, with its ops numbered from 0 (equal for identical layers)."""
    pos = {i: k for k, i in enumerate(ops)}
    local: dict[int, int] = {}  # tensors read from outside, numbered in the component (two ops may read one)
    per_op = tuple((seg.whole[i], seg.finest[i],
                    tuple((st.nbytes, st.elems, st.made, st.written) for st in seg.streamed[i]),
                    tuple(tuple(pos[k] for k in ops if in_cone(seg, st, k)) for st in seg.streamed[i]),
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
    near = sorted(above(seg, members, HORIZON + 1, seg.ins) | members)
    pos = {i: k for k, i in enumerate(near)}
    return tuple((i in members, seg.whole[i], seg.finest[i], seg.covered[i], seg.inplace[i],
                  tuple((pos.get(seg.maker[j], -1), seg.outside[j], seg.hold[j], pos.get(seg.source[j], -1))
                        for j in seg.ins[i]))
                 for i in near)


def excess_bits(seg: Segments, cap: Capacity, reach: int, batch: int, word_bits: int) -> int:
    """Bits every plan moves beyond the once-term (network inputs, outputs and weights once) at this capacity:
    per component, the cheapest cut into pieces (computed once per kind of component); along a chain of components
    joined by loose links, the cheapest cuts together, each link paying what keeping it on chip costs (`chain_bits`)."""
    costs: dict[int, np.ndarray] = {}  # per kind: its pieces' least excess bits
    rows: dict[int, np.ndarray] = {}  # per kind: every cut's

    def row_bits(kind: int) -> np.ndarray:
        if kind not in rows:
            cuts = seg.cuts[kind]
            costs[kind] = np.array([piece_bits(seg, p, cap, reach, batch, word_bits) for p in cuts.pieces],
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
        total += int(chain_bits(seg, chain, rows, costs, known,
                                 lambda piece: piece_bits(seg, piece, cap, reach, batch, word_bits)))
    return total
