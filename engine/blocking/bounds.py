"""Lower bounds on one layer's least blocking energy, which let the exact search skip unrollings and tiles: the
MAC operand words (less what a stationary operand can save), every word loaded once from DRAM, and the refills
of each operand under one unrolling (`refill_bound`) or above one tile (`refill_floor`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from functools import cache, lru_cache

import numpy as np

from engine.blocking.grid import CANONICAL, GROUP_ORDER, TileGrid, capacity_ok, divisors, tile_grid, unrollings
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, RELEVANT, REUSE_GROUP, TENSORS, Layer
from engine.blocking.model import SpatialView, window_sum
from engine.blocking.routes import Routes, level_orders, operand_routes, tile_candidates


def unroll_floors(layer: Layer, hierarchy: Hierarchy) -> list:
    """(floor, -busy PEs, unrolling) of every unrolling worth searching, least floor (then most PEs) first.

    Every level order of a hierarchy shares these floors (each operand's innermost holder stays the same), so
    they are cached under one of its orders.
    """
    first = min(level_orders(hierarchy), key=lambda h: tuple(mem.name for mem in h.levels))
    return _floors_of(layer, replace(first, name=""))


@lru_cache(maxsize=1024)
def _floors_of(layer: Layer, hierarchy: Hierarchy) -> list:
    """`unroll_floors` for one order of the levels: the MAC floor of every unrolling (`mac_floors`) plus every real word
    of each operand held on chip loaded once from DRAM (outputs written once into it, at its write price)."""
    unrolls = unrollings(layer, hierarchy)
    floors = mac_floors(layer, hierarchy, unrolls) + once_pj(layer, hierarchy)
    return sorted((float(f), -math.prod(u), u) for f, u in zip(floors, unrolls))


def once_pj(layer: Layer, hierarchy: Hierarchy) -> float:
    """Energy (pJ, one group) of every real word of each operand held on chip loaded once from DRAM (outputs
    written once into it, at its write price); real words outside the array do not depend on the unrolling."""
    view = SpatialView.of(layer, (1,) * len(DIMS))
    return sum(_dram_once_pj(hierarchy, T) * view.real(T, view.dims, False, True)
               for T in layer.tensors if any(mem.keeps(T) for mem in hierarchy.on_chip))


def _dram_once_pj(hierarchy: Hierarchy, T: str) -> float:
    """DRAM's price of a word of T (held on chip) moved once: read (inputs, weights) or written (outputs); with both
    ends charged, plus the outermost on-chip holder's write of it (or read of an output out to DRAM)."""
    dram = hierarchy.levels[-1]
    pj = dram.write_energy(T) if T == "O" else dram.energy(T)
    if hierarchy.both_ends:
        last = hierarchy.levels[max(l for l, mem in enumerate(hierarchy.on_chip) if mem.keeps(T))]
        pj += last.energy(T) if T == "O" else last.write_energy(T)
    return pj


def mac_floors(layer: Layer, hierarchy: Hierarchy, unrolls) -> np.ndarray:
    """Per unrolling, a lower bound (pJ, one group) on the MACs' operand words: all of them, less the most a
    stationary operand can save (one of I and W is reused over the innermost loops of level 0's tile, by at most
    `_max_run`)."""
    pj = {T: _level0_pj(layer, hierarchy, unrolls, (T,)) for T in layer.tensors}
    total = sum(pj.values(), np.zeros(len(unrolls)))  # (a zero array to start: the sum is an array)
    if not hierarchy.stationary:
        return total
    views = [SpatialView.of(layer, u) for u in unrolls]
    own = _own_capacities(layer, hierarchy)
    saving = [pj[T] * (1 / np.array([_max_run(view, T, own) for view in views]) - 1)
              for T in "IW" if T in pj]
    return total + np.min(saving, axis=0) if saving else total


def _max_run(view: SpatialView, T: str, own) -> int:
    """An upper bound on the run of the loops inside level 0's tile that reuse `T` (its reuse group): level 0's
    tile lies inside every operand's innermost holder's tile, so the group's loops together can take at most the
    largest tile of them alone (the other loops one step) that each such holder keeps within its capacity
    (`own`: `_own_capacities`)."""
    group = [DIMS.index(d) for d in REUSE_GROUP[T]]
    best = 1

    def fits(tile) -> bool:
        for inside, caps, shared in own:
            kept = [view.stored(X, tile, inside) for X, _ in caps]
            if any(k > c for k, (_, c) in zip(kept, caps)) or sum(kept) > shared:
                return False
        return True

    def grow(tile, k):
        nonlocal best
        if k == len(group):
            best = max(best, math.prod(tile[j] for j in group))
            return
        j = group[k]
        for v in divisors(view.dims[j]):  # footprints grow with v: stop at the first that does not fit
            t = tile[:j] + (v,) + tile[j + 1:]
            if v > 1 and not fits(t):
                break
            grow(t, k + 1)

    grow((1,) * len(DIMS), 0)
    return best


@lru_cache(maxsize=256)
def _own_capacities(layer: Layer, hierarchy: Hierarchy) -> tuple:
    """Per on-chip level: whether it is inside the array, (operand, its own capacity in words) for each operand
    it is the innermost holder of, and the capacity they share (inf where each has its own)."""
    out: list[tuple[bool, tuple[tuple[str, float], ...], float]] = []
    for level, mem in enumerate(hierarchy.on_chip):
        mine = [T for T in layer.tensors if mem.keeps(T) and not any(m.keeps(T) for m in hierarchy.levels[:level])]
        if mem.split_bytes:
            out.append((hierarchy.inside(level), tuple((T, hierarchy.capacity_words(level, T)) for T in mine), np.inf))
        else:
            out.append((hierarchy.inside(level), tuple((T, np.inf) for T in mine), hierarchy.capacity_words(level)))
    return tuple(out)


@lru_cache(maxsize=4096)
def refill_bound(layer: Layer, hierarchy: Hierarchy, unroll, tight: bool = True) -> float:
    """A lower bound (pJ, one group) on the best blocking under one unrolling, tighter than `unroll_floors`: the MAC
    words of level 0's tile (with its stationary saving) plus the refills of each operand held on chip.

    Each such operand T is refilled from level l, its innermost holder, at the first boundary where its tile
    grows: either into an on-chip holder (then also loaded once from DRAM), or straight from DRAM, when it
    passes every holder up to its last on chip, L (their tiles are then l's, within l's capacity). The block
    above a level reuses (run > 1) at most one of the operands charged from that level's tile (those whose
    innermost holder it is and that go on chip, and those that pass up to it and go to DRAM): the one whose
    reuse group its first moving loop is in (or, when it has none, the first such block above). Every other
    one is refilled once per iteration of all loops above the tile (`above`); the reused one moves at least
    its real words. Each choice of operands that go straight to DRAM bounds its blockings, levels apart except
    where the blocks between them move one reuse group only (then they share the one operand reused).
    `tight=False`: the quick version, each operand by its cheaper route, every level apart.
    """
    grid = tile_grid(layer, unroll)
    routes = operand_routes(layer, hierarchy)
    cand = tile_candidates(layer, hierarchy, grid, routes)
    m = len(hierarchy.on_chip)
    saving, _ = stationary_saving(layer, hierarchy, grid)
    on_chip = [T for T in layer.tensors if routes.h0[T] < m]
    last = {T: max(l for l in range(m) if hierarchy.levels[l].keeps(T)) for T in on_chip}
    # a level's tile lies inside every tile above it, so it also fits where those levels keep their own operands
    inner = [capacity_ok(hierarchy, k, layer, {T: grid.kept(hierarchy, k, T) if routes.h0[T] == k
                                                 else np.zeros(grid.size) for T in layer.tensors}) for k in range(m)]
    cand = [np.logical_and.reduce([cand[j], *inner[j + 1:]]) for j in range(m)]
    charge = {}
    for T in on_chip:
        l = routes.h0[T]
        # without the input's zero border: what DRAM moves, no more than what an on-chip level moves
        once = _dram_once_pj(hierarchy, T) * grid.full_dram[T]
        moved = (grid.moved_dram[T] * grid.above, grid.moved_pe_dram[T] * grid.above, grid.full_dram[T],
                 grid.full_pe_dram[T])
        full = (grid.full_dram[T], grid.full_pe_dram[T], grid.full_dram[T], grid.full_pe_dram[T])
        for route, ks, extra in (("chip", range(l, last[T]), once), ("dram", range(last[T], m), 0.0)):
            charge[T, route] = tuple(_least_charge(routes, T, ks, *words) + extra for words in (moved, full))
            if T == "O" and any((k, T) in routes.coef_psum for k in ks):  # refilled more than once: partial sums
                psum = _least_charge(routes, T, ks, *moved, coefs=routes.coef_psum) + extra
                charge[T, route] = (np.where(moved[0] > full[0] * (1 + 1e-9), psum, charge[T, route][0]),
                                    charge[T, route][1])
    macs = sum(_level0_of(layer, hierarchy, grid.view.unroll, T) for T in layer.tensors)
    if not tight:  # each operand by its cheaper route, each level's operands alone
        total = macs
        for j in range(m):
            cheaper = [[np.minimum(charge[T, "chip"][r], charge[T, "dram"][r]) for r in (0, 1)]
                       for T in on_chip if routes.h0[T] == j]
            if cheaper or j == 0:
                per = saving if j == 0 else 0.0
                if cheaper:
                    per = per + sum(c[0] for c in cheaper) - np.max([c[0] - c[1] for c in cheaper], axis=0)
                total += float(np.min(np.where(cand[j], per, np.inf)))
        return total
    fits = {}
    for T in on_chip:
        l, mem = routes.h0[T], hierarchy.levels[routes.h0[T]]
        cap = hierarchy.capacity_words(l, T) if mem.split_bytes else hierarchy.capacity_words(l)
        fits[T] = grid.kept(hierarchy, l, T) <= cap
    best, memo = np.inf, {}

    @cache
    def allowed(j, restrict):
        """Level j's tiles: candidates within the capacities of the operands in `restrict`, which go to DRAM past it."""
        return np.logical_and.reduce([cand[j], *(fits[T] for T in restrict)])

    @cache
    def spread(j, restrict):
        """The dims an allowed tile of level j may have more than one step of."""
        ok = allowed(j, restrict)
        top = grid.val[ok].max(axis=0) if ok.any() else np.ones(len(DIMS))
        return frozenset(d for d, v in zip(DIMS, top) if v > 1)

    def least(j, mine, reused, restrict):
        """The least over level j's tiles (within the capacities of the operands in `restrict`, which go to DRAM
        past it) of its MAC saving plus the charges of the operands `mine`, `reused` reused."""
        key = (j, mine, reused, restrict)
        if key not in memo:
            per = saving if j == 0 else np.zeros(grid.size)
            per = per + sum((charge[k][k == reused] for k in mine), np.zeros(grid.size))
            memo[key] = float(np.min(np.where(allowed(j, restrict), per, np.inf)))
        return memo[key]

    for n in range(len(on_chip) + 1):
        for direct in itertools.combinations(on_chip, n):
            if any(routes.h0[T] == last[T] for T in on_chip if T not in direct):
                continue  # held at one level only: it can only go to DRAM
            restrict = [tuple(T for T in direct if routes.h0[T] < j <= last[T]) for j in range(m)]
            moving = [spread(j, restrict[j]) for j in range(m)]
            bounds = []
            for at_last in (False, True):  # charge those that go to DRAM from their innermost level's tile, or last
                mine = [tuple((T, "dram" if T in direct else "chip") for T in on_chip
                              if (last[T] if T in direct and at_last else routes.h0[T]) == j) for j in range(m)]
                slot = list(range(m))

                def merge(i, j, slot=slot):  # this pass's slots, bound now (B023)
                    slot[:] = [slot[i] if s == slot[j] else s for s in slot]
                for j in range(m - 1):
                    # the block above level j moves only dims of level j + 1 that may move; when those lie in the
                    # reuse group of an operand not charged from level j, level j's ones are reused (if at all)
                    # by the first moving block above level j + 1, as level j + 1's are
                    reusers = [X for X in TENSORS if moving[j + 1] <= set(REUSE_GROUP[X])]
                    if any(X not in [T for T, _ in mine[j]] for X in reusers):
                        merge(j, j + 1)
                if at_last:
                    # between the innermost and last holders of an operand that goes to DRAM its tile does not
                    # change: those blocks move only its reuse group, and it is charged from its last holder's tile
                    for T in direct:
                        for j in range(routes.h0[T], last[T] + 1):
                            merge(routes.h0[T], j)
                total = macs
                for levels in ([j for j in range(m) if slot[j] == s] for s in set(slot)):
                    options: list[tuple[str, str] | None] = [k for j in levels for k in mine[j]] or [None]
                    total += min(sum(least(j, mine[j], reused, restrict[j]) for j in levels) for reused in options)
                bounds.append(total)
            best = min(best, max(bounds))
    return best


def _least_charge(routes: Routes, T: str, boundaries, words, words_pe, full, full_pe, *, coefs=None):
    """The least energy (pJ) of moving `words` of T (`words_pe` into the PEs) across any of `boundaries`, by their
    coefficients (`coefs`, `Routes.coef` by default; inf with none)."""
    best = np.inf
    for k in boundaries:
        a_pe, b_pe, a_arr, b_arr = (coefs or routes.coef).get((k, T), routes.coef[k, T])
        best = np.minimum(best, a_arr * words - b_arr * full + a_pe * words_pe - b_pe * full_pe)
    return best


@lru_cache(maxsize=16384)
def _level0_of(layer: Layer, hierarchy: Hierarchy, unroll: tuple[int, ...], T: str) -> float:
    """`_level0_pj` of one unrolling and one operand, kept for the bounds and DPs of that unrolling."""
    return float(_level0_pj(layer, hierarchy, [unroll], (T,))[0])


def _level0_pj(layer: Layer, hierarchy: Hierarchy, unrolls, operands=TENSORS) -> np.ndarray:
    """Per unrolling, the energy (pJ, one group) of the MACs' operand reads and partial-sum writes: one word per busy
    PE per step from each operand's innermost holder (multicast across the array when that holder is outside it)."""
    noc = dict(zip(TENSORS, hierarchy.array.noc_pj)) if hierarchy.array else dict.fromkeys(TENSORS, 0.0)
    u = np.array(unrolls, dtype=np.float64).reshape(-1, len(DIMS))
    total = np.zeros(len(u))
    for T in (T for T in layer.tensors if T in operands):
        h0 = next(l for l, mem in enumerate(hierarchy.levels) if mem.keeps(T))
        inside = hierarchy.inside(h0)
        mem = hierarchy.levels[h0]
        words, copies = mac_words(layer, unrolls, u, T, inside, h0 == len(hierarchy.on_chip))
        if T == "O":  # partial sums at their width; an output's first write reads no zero (but both-ends)
            final = copies * layer.size(T)
            psum = words > final
            back = np.where(psum & hierarchy.both_ends, words, words - final)
            total += np.where(psum, hierarchy.psum_scale, 1.0) * (mem.energy(T) * back + mem.write_energy(T) * words)
        else:
            total += mem.energy(T) * words
        if hierarchy.array is not None and not inside and noc[T]:
            words, copies = mac_words(layer, unrolls, u, T, True, h0 == len(hierarchy.on_chip))
            total += noc[T] * (2 * words - copies * layer.size(T) if T == "O" else words)
    return total


def mac_words(layer: Layer, unrolls, u: np.ndarray, T: str, inside: bool,
              clip: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per unrolling, the real words of T the MACs take over all steps (one word per busy PE per step: each real
    index once per step of the loops that do not index it; `SpatialView.moved` of a one-step tile, in closed
    form), and the copies of each real word (busy PEs along the loops that do not index T, inside the array);
    `clip`: without the input's zero border (MACs reading straight from DRAM)."""
    if T == "W" and not layer.has_weights:
        return np.zeros(len(u)), np.ones(len(u))
    steps = np.ceil(np.array(layer.dims) / u)
    irrelevant = [j for j, d in enumerate(DIMS) if d not in RELEVANT[T]]
    copies = np.prod(u[:, irrelevant], axis=1) if inside else np.ones(len(u))
    per_step = np.prod(steps[:, irrelevant], axis=1) * copies
    if T != "I":
        return per_step * layer.size(T), copies
    windows = np.array([window_sum(layer, v, 0, 1, 1, inside, clip) * window_sum(layer, v, 1, 1, 1, inside, clip)
                        for v in unrolls], dtype=np.float64)
    return per_step * layer.N * layer.C * windows, copies


def stationary_saving(layer: Layer, hierarchy: Hierarchy, grid: TileGrid) -> tuple[np.ndarray, np.ndarray]:
    """Per level-0 tile, the energy (pJ, one group, <= 0) the MACs save when an input or weight word is reused
    over the innermost loops of the tile that skip it (`Hierarchy.stationary`), and the canonical order of those
    loops that saves most. Only the loops of one tensor's reuse group can come first, so the three canonical
    orders cover every order."""
    if not hierarchy.stationary:
        return np.zeros(grid.size), np.zeros(grid.size, dtype=np.int64)
    full = [_level0_of(layer, hierarchy, grid.view.unroll, T) for T in "IW"]
    saving = []
    for order in CANONICAL:
        g = GROUP_ORDER[order]
        first = np.where(grid.group[g[0]] > 1, 0, np.where(grid.group[g[1]] > 1, 1, np.where(grid.group[g[2]] > 1, 2, -1)))
        total = np.zeros(grid.size)
        for T, pj in zip("IW", full):
            if T in layer.tensors:
                run = np.where(first == g.index(T), grid.group[T], 1.0)
                total += pj * (1 / run - 1)
        saving.append(total)
    stacked = np.stack(saving)
    return stacked.min(axis=0), stacked.argmin(axis=0)


def refill_floor(layer: Layer, hierarchy: Hierarchy, grid: TileGrid, l: int) -> np.ndarray:
    """A lower bound (pJ, one group) on the refills of each level-l tile from the levels above it.

    Whatever the order and the levels above, each distinct tile of a tensor (the input with its
    halo) is loaded at least once, at no less than the cheapest per-word energy above level l.
    This holds also when the tensor passes through level l: the tile below has the same extent.
    (Used only when every level holds every operand and there is no array.)
    """
    total = np.zeros(grid.size)
    above = hierarchy.levels[l + 1:]
    for T in layer.tensors:
        distinct = grid.above * grid.group[T] / grid.full_group[T]
        fills = grid.moved_dram[T] * distinct  # no more than any level moves
        words = 2 * fills - grid.full_dram[T] if T == "O" else fills
        total += min(mem.energy(T) for mem in above) * words
    return total
