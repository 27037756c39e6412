"""Every way to cut a component into pieces (2^links subsets of its links, the convex ones), with their pieces."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from engine.limit.parts import Cuts, Link, Segments
from engine.limit.pieces import piece_of


def cuts_of(seg: Segments, ops: tuple[int, ...], links: tuple[Link, ...], loose: tuple[Link, ...] = ()) -> Cuts:
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
    return Cuts(tuple(piece_of(seg, tuple(i for k, i in enumerate(ops) if g >> k & 1), links) for g in masks), uses,
                cut_bits, masks, owner)


@lru_cache(maxsize=64)
def _rows(joins: tuple[int, ...], cone: tuple[int, ...], below: tuple[int, ...], nbytes: tuple[int, ...],
          apart: tuple[tuple[int, int], ...] = ()) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """`cuts_of`' subsets of a component's shape (ops as bits: k, the k-th op; `joins`: per link the mask of its maker
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
