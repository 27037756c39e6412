"""Components in a row joined by residual streams, their cuts chosen together: a stream kept on chip priced as the
pieces it joins (`chain_bits`, a dynamic programme along the chain)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.limit.parts import BIG, INF, Link, Piece, Segments
from engine.limit.pieces import piece_of

CHAIN_ROUNDS = 40  # rounds of `chain_bits` pricing the links its best cuts keep (a lower bound after any round)


FREE, PAID = -1, -2  # states of a component's piece that makes the next link: unpriced, or priced with the one before


def chain_bits(seg: Segments, chain: tuple[int, ...], rows: dict[int, np.ndarray], costs: dict[int, np.ndarray],
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
    """One link of `chain_bits`: from the states of the component before (per gathering: state -> (bits, back)) to
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
    return piece_of(seg, tuple(sorted(ops)), links)


@lru_cache(maxsize=4096)
def _joint(seg: Segments, pair: int, before: int, after: int) -> Piece:
    """Piece `before` of the component that makes the loose link into component `pair` and piece `after` of `pair`,
    as one piece (the link and both components' links inside it)."""
    a_index, ln, _ = seg.joined[pair]
    a, b = seg.components[a_index], seg.components[pair]
    ops = [i for k, i in enumerate(a.ops) if seg.cuts[a.kind].masks[before] >> k & 1]
    ops += [i for k, i in enumerate(b.ops) if seg.cuts[b.kind].masks[after] >> k & 1]
    return piece_of(seg, tuple(sorted(ops)), a.links + b.links + (ln,))
