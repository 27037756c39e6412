"""Where each operand goes at each level boundary of a hierarchy, and what a boundary charges for it: the
per-operand part of the search's cost (levels an operand bypasses, tiles passed on through the array's
network), and the level orders a hierarchy allows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from engine.blocking.grid import TileGrid, capacity_ok, refill_words
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import TENSORS, Layer


def level_orders(hierarchy: Hierarchy) -> list[Hierarchy]:
    """The hierarchy, then each reordering of its on-chip levels that keeps every operand's own chain of levels
    (and which levels sit inside the PEs): levels holding disjoint operands may cut the loop nest in either order."""
    on_chip, k = hierarchy.on_chip, hierarchy.array_level
    out = [hierarchy]
    for perm in itertools.permutations(range(len(on_chip))):
        if list(perm) == sorted(perm) or sorted(perm[:k]) != list(range(k)):
            continue
        pos = {lv: i for i, lv in enumerate(perm)}
        if all(pos[i] < pos[j] for i in range(len(on_chip)) for j in range(i + 1, len(on_chip))
               if set(on_chip[i].holds) & set(on_chip[j].holds)):
            out.append(replace(hierarchy, levels=(*(on_chip[i] for i in perm), hierarchy.levels[-1])))
    return out


@dataclass(frozen=True)
class Routes:
    """Where each operand goes at each level boundary of a hierarchy (the per-operand model's static part).

    A tile of T is charged at the first boundary above its last holder where it grows, to the
    next level up that holds T (a level in between that bypasses T does not see it). So the DP
    carries, per level and per operand the level bypasses, one bit: whether T's tile is still the
    one its last holder keeps ("clean"); operands a level holds are always clean there. A holder outside
    the array whose tile of T has not grown since T's innermost holder inside it passes T on, and the
    words then cross the array's network when they are charged: one more bit ("through") per such
    operand and level, with its own coefficients.
    """

    h0: dict  # T -> its innermost holder (m when only DRAM holds it)
    flags: tuple  # per on-chip level: the operands with a clean bit there (held below, bypassing this level)
    through: tuple  # per on-chip level: the operands with a through bit there (after its clean bits)
    coef: dict  # (boundary l, T) -> (a_pe, b_pe, a_arr, b_arr): a charge costs a x fills - b x the layer's words
    coef_through: dict  # (boundary l, T) -> the same with the network's words, for a tile passed on from the PEs
    # (boundary l, "O") -> `coef` and `coef_through` where outputs cross the boundary more than once (partial sums at
    # their own width, and both-ends their zero reads); `coef` alone is then a lower bound
    coef_psum: dict
    coef_through_psum: dict
    from_dram: frozenset  # (boundary l, T) charged to DRAM: only real input positions move (the border is made on chip)


@lru_cache(maxsize=256)
def operand_routes(layer: Layer, hierarchy: Hierarchy) -> Routes:
    m = len(hierarchy.on_chip)
    held = {T: [l for l, mem in enumerate(hierarchy.levels) if mem.keeps(T)] for T in layer.tensors}
    h0 = {T: held[T][0] for T in layer.tensors}
    flags = tuple(tuple(T for T in layer.tensors if h0[T] < l and not hierarchy.levels[l].keeps(T))
                  for l in range(m))
    noc = dict(zip(TENSORS, hierarchy.array.noc_pj)) if hierarchy.array else dict.fromkeys(TENSORS, 0.0)
    network = {T: (2 * noc[T], noc[T]) if T == "O" else (noc[T], 0.0) for T in TENSORS}  # (a_pe, b_pe) of a crossing
    inside = hierarchy.inside
    through = tuple(tuple(T for T in layer.tensors if noc[T] and h0[T] < l and inside(h0[T])
                          and not inside(max(h for h in held[T] if h <= l))) for l in range(m))
    coef: dict = {}
    coef_through: dict = {}
    coef_psum: dict = {}
    coef_through_psum: dict = {}
    for l in range(m):
        for T in layer.tensors:
            if h0[T] > l:
                continue
            below = max(h for h in held[T] if h <= l)
            up = min(h for h in held[T] if h > l)
            variants = [(coef, coef_through, 1.0, False)]
            if T == "O" and (hierarchy.psum_scale != 1 or hierarchy.both_ends):
                variants.append((coef_psum, coef_through_psum, hierarchy.psum_scale, hierarchy.both_ends))
            for into, into_through, x, zero_reads in variants:
                c = _charge(hierarchy, T, below, up, x, zero_reads)
                if hierarchy.array is not None and inside(below) and not inside(up):
                    c[0], c[1] = c[0] + network[T][0], c[1] + network[T][1]  # every busy PE's words cross the network
                into[l, T] = tuple(c)
                if T in through[l]:
                    into_through[l, T] = (c[0] + network[T][0], c[1] + network[T][1], c[2], c[3])
    from_dram = frozenset((l, T) for l in range(m) for T in layer.tensors
                          if h0[T] <= l and min(h for h in held[T] if h > l) == m)
    return Routes(h0, flags, through, coef, coef_through, coef_psum, coef_through_psum, from_dram)


def _charge(hierarchy: Hierarchy, T: str, below: int, up: int, x: float, zero_reads: bool) -> list[float]:
    """(a_pe, b_pe, a_arr, b_arr) of moving T's tile between holders `below` and `up` (`model.evaluate`'s prices):
    the parent serves the fills; outputs are written up and read back except their first fill (with `zero_reads`,
    that too), at `x` times a word's energy; both-ends, the child writes the fills (the partial sums brought back)
    and reads the outputs out."""
    c = [0.0] * 4
    parent, child = hierarchy.levels[up], hierarchy.levels[below]
    r, w = parent.energy(T), parent.write_energy(T)
    side = 0 if hierarchy.inside(up) else 2
    if T == "O":
        c[side], c[side + 1] = x * (w + r), 0.0 if zero_reads else x * r
    else:
        c[side] = r
    if hierarchy.both_ends:
        low = 0 if hierarchy.inside(below) else 2
        if T == "O":
            c[low] += x * child.energy(T)
            c[side] += x * child.write_energy(T)
            c[side + 1] += x * child.write_energy(T)
        else:
            c[low] += child.write_energy(T)
    return c


def boundary_charges(layer, grid: TileGrid, routes: Routes, a, b, l: int):
    """Per canonical order, per operand: the energy (pJ) of charging T's refills at boundary l (keyed (T, True)
    too where T may come through the array's network); and `changed`."""
    fills, changed = refill_words(layer, grid, a, b, raw=True)
    dram = [T for T in layer.tensors if (l, T) in routes.from_dram and grid.moved_dram[T] is not grid.moved[T]]
    priced = [((T, False), routes.coef[l, T]) for T in layer.tensors if (l, T) in routes.coef]
    priced += [((T, True), routes.coef_through[l, T]) for T in routes.through[l]]
    psum = {(T, False): routes.coef_psum[l, T] for T in layer.tensors if (l, T) in routes.coef_psum}
    psum.update({(T, True): routes.coef_through_psum[l, T] for T in routes.through[l] if (l, T) in routes.coef_psum})
    need_pe = any(c[0] for c in (*(c for _, c in priced), *psum.values()))
    fills_pe = refill_words(layer, grid, a, b, pe=True, raw=True)[0] if need_pe else None
    if dram:  # loads from DRAM move only the real input, not its zero border
        real = refill_words(layer, grid, a, b, raw=True, clip=True)[0]
        real_pe = refill_words(layer, grid, a, b, pe=True, raw=True, clip=True)[0] if need_pe else None
        for o in range(len(fills)):
            fills[o] = {**fills[o], **{T: real[o][T] for T in dram}}
            if fills_pe is not None and real_pe is not None:
                fills_pe[o] = {**fills_pe[o], **{T: real_pe[o][T] for T in dram}}
    full = {T: (grid.full_dram if T in dram else grid.full)[T] for T in layer.tensors}
    full_pe = {T: (grid.full_pe_dram if T in dram else grid.full_pe)[T] for T in layer.tensors}

    def price(coefs, o, T):
        a_pe, b_pe, a_arr, b_arr = coefs
        cost = a_arr * per[T] - b_arr * full[T]
        if a_pe:
            assert fills_pe is not None  # computed whenever some a_pe is nonzero
            cost = cost + a_pe * fills_pe[o][T] - b_pe * full_pe[T]
        return cost

    out = []
    for o, per in enumerate(fills):
        costs = {}
        for key, coefs in priced:
            costs[key] = price(coefs, o, key[0])
            if key in psum:  # outputs crossing more than once: partial sums
                costs[key] = np.where(per[key[0]] > full[key[0]] * (1 + 1e-9), price(psum[key], o, key[0]),
                                      costs[key])
        out.append(costs)
    return out, changed


def level_states(routes: Routes, l: int) -> range:
    return range(2 ** (len(routes.flags[l]) + len(routes.through[l])))


def is_clean(routes: Routes, hierarchy: Hierarchy, l: int, state: int, T: str) -> bool:
    """Whether T's tile at level l is still its last holder's, under the clean bits `state` of level l."""
    if hierarchy.levels[l].keeps(T):
        return True
    return bool(state >> routes.flags[l].index(T) & 1)


def passes_through(routes: Routes, l: int, state: int, T: str) -> bool:
    """Whether T's tile at level l is still its innermost holder's inside the array, under `state` of level l."""
    return T in routes.through[l] and bool(state >> (len(routes.flags[l]) + routes.through[l].index(T)) & 1)


def level_charge(c: dict, routes: Routes, hierarchy: Hierarchy, l: int, state: int, changed=None):
    """The charges at boundary l under `state` (one array per tile), summed over operands: none for a bypassed
    operand already charged below, a passed-on tile's with the network's words, only where a tile changes."""
    total: float | np.ndarray = 0.0
    for T in (T for T, crossing in c if not crossing and is_clean(routes, hierarchy, l, state, T)):
        cost = c[T, passes_through(routes, l, state, T)]
        total = total + (cost if changed is None else np.where(changed[T], cost, 0.0))
    return total


def tile_candidates(layer: Layer, hierarchy: Hierarchy, grid: TileGrid, routes: Routes) -> list[np.ndarray]:
    """Tiles each level might hold: a level keeps (at least) each operand whose innermost holder it is, and
    each it holds whose tile is too big for every holder below (a smaller one could have stayed below)."""
    out = []
    below = dict.fromkeys(layer.tensors, -1)
    for l in range(len(hierarchy.on_chip)):
        mem = hierarchy.levels[l]
        must = {}
        for T in layer.tensors:
            kept = grid.kept(hierarchy, l, T)
            if not mem.keeps(T):
                must[T] = np.zeros(grid.size)
            elif routes.h0[T] == l:
                must[T] = kept
            else:
                must[T] = np.where(below[T] < 0, 0.0, np.where(grid.kept(hierarchy, below[T], T)
                                                                > hierarchy.capacity_words(below[T], T), kept, 0.0))
        out.append(capacity_ok(hierarchy, l, layer, must))
        below.update({T: l for T in layer.tensors if mem.keeps(T)})
    return out
