"""The exact search for one layer's least-energy blocking: dynamic programming over the levels (Sec. 3.5).

The paper enumerates loop strings exhaustively (24 hours for one 4-level layer) or searches
them heuristically, inner level first, from 128 seeds. Under the model of `model.py` the
problem has more structure, which makes an exact search fast:

* Three canonical loop orders per block suffice (`grid.CANONICAL`).
* The cost is a sum over level boundaries; the term of boundary l depends only on the tiles
  of levels l and l + 1 and the order of the block between them (a tensor that passes
  through level l + 1 is charged at the next boundary, with the same count). Level l + 1's
  capacity check needs the same two tiles. Hence a dynamic program from DRAM inwards over
  tile choices (divisors of each bound) is exact.

Unrollings are searched least floor first (`bounds.py`), each DP capped by the best energy so far.
"""

from __future__ import annotations

import heapq

import numpy as np

from engine.blocking.bounds import mac_floors, once_pj, refill_bound, refill_floor, stationary_saving, unroll_floors
from engine.blocking.grid import CANONICAL, TileGrid, capacity_ok, tile_grid
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, Layer
from engine.blocking.model import INNER_ORDER, Blocking, evaluate
from engine.blocking.routes import (
    Routes,
    boundary_charges,
    is_clean,
    level_charge,
    level_states,
    operand_routes,
    passes_through,
    tile_candidates,
)
from engine.errors import EngineError

PAIR_CHUNK = 2_000_000  # (child, parent) tile pairs scored per numpy batch


PARENT_CAP = 64  # parents per level in the quick search that bounds the exact one


def _min_level0_words(layer: Layer, hierarchy: Hierarchy) -> None:
    """Raise when a level cannot hold even a one-element tile of the operands it is the innermost holder of."""
    one = (1,) * len(DIMS)
    first = {T: next(l for l, mem in enumerate(hierarchy.levels) if mem.keeps(T)) for T in layer.tensors}
    for l, mem in enumerate(hierarchy.on_chip):
        mine = [T for T in layer.tensors if first[T] == l]
        need = {T: layer.footprint(T, one) for T in mine}
        if mem.split_bytes:
            bad = [T for T in mine if need[T] > hierarchy.capacity_words(l, T)]
        else:
            bad = mine if sum(need.values()) > hierarchy.capacity_words(l) else []
        if bad:
            caps = ", ".join(f"{T}: {hierarchy.capacity_words(l, T)} words" for T in bad)
            raise EngineError(f"layer '{layer.name}': level '{mem.name}' ({mem.total_bytes} bytes; {caps}) cannot "
                              f"hold even a one-element tile of operand(s) {', '.join(bad)} "
                              f"({sum(need.values())} words); leave it out with levels=...")


def exact_blocking(layer: Layer, hierarchy: Hierarchy, cap: float = np.inf) -> tuple[Blocking | None, int]:
    """Least-energy blocking: for each spatial unrolling (least bound first), the DP over levels, with the best
    energy so far (or `cap`, pJ of one group) as its budget. Without a PE array there is one unrolling (none).

    Raises when nothing fits and no `cap` was given; returns (None, n) when nothing beats `cap`.
    """
    _min_level0_words(layer, hierarchy)
    best, best_pj, evaluated = None, cap, 0
    once = once_pj(layer, hierarchy)
    # every unrolling by its floor (a sorted list is a heap), then refined lazily, least key first: its quick
    # `refill_bound`, its tight one (straight away once a quick one proved no better than its floor), the DP
    heap = [(floor, busy, unroll, floor, 0) for floor, busy, unroll in unroll_floors(layer, hierarchy)]
    if len(heap) == 1:  # one unrolling (no array): nothing to rank, straight to its DP
        heap = [(*heap[0][:4], 2)]
    skip_quick = False
    while heap and heap[0][0] < best_pj * (1 - 1e-12):
        bound, busy, unroll, floor, stage = heapq.heappop(heap)
        if stage == 0 and not skip_quick:
            quick = refill_bound(layer, hierarchy, unroll, False)
            skip_quick = quick <= floor * (1 + 1e-9)
            heapq.heappush(heap, (max(bound, quick), busy, unroll, floor, 1))
            continue
        if stage < 2:
            heapq.heappush(heap, (max(bound, refill_bound(layer, hierarchy, unroll)), busy, unroll, floor, 2))
            continue
        blocking, n = exact_unrolled(layer, hierarchy, unroll, best_pj, floor - once)
        evaluated += n
        if blocking is None:
            continue
        pj = evaluate(layer, hierarchy, blocking).memory_pj / layer.groups
        if pj < best_pj * (1 - 1e-12):
            best, best_pj = blocking, pj
    if best is None and cap == np.inf:
        raise EngineError(f"layer '{layer.name}' has no blocking that fits hierarchy '{hierarchy.name}'")
    return best, evaluated


def exact_unrolled(layer: Layer, hierarchy: Hierarchy, unroll, cap: float = np.inf,
                    mac_floor: float | None = None) -> tuple[Blocking | None, int]:
    """The DP over levels for one unrolling, DRAM inwards; value[l][state, tile] = least energy above level l.

    Branch and bound: a feasible blocking found first (the given `cap`, else a quick search) caps the
    energy, so a tile whose energy above it already exceeds that cap minus the fixed MAC operand words is
    never paired. With three or more levels, each holding every operand, and no array, the tiles whose
    refills alone (`refill_floor`) exceed it are dropped too. The optimum is kept. `mac_floor` is the
    unrolling's `mac_floors`, when the caller has it.
    """
    grid = tile_grid(layer, unroll)
    routes = operand_routes(layer, hierarchy)
    cand = tile_candidates(layer, hierarchy, grid, routes)
    evaluated = 0
    if len(hierarchy.on_chip) > 2 and cap == np.inf:
        cap, evaluated = _upper_bound(layer, hierarchy, grid, routes, cand)
    if cap == np.inf:  # two levels: the only pairing step is level 0's, already pruned by `_growable`
        blocking, n = _dp(layer, hierarchy, grid, routes, cand, np.inf)
        return blocking, evaluated + n
    budget = cap - (mac_floors(layer, hierarchy, [unroll])[0] if mac_floor is None else mac_floor)
    budget += 1e-9 * abs(budget)
    if budget < 0:
        return None, evaluated
    if not hierarchy.per_operand:
        cand = [ok & (refill_floor(layer, hierarchy, grid, l) <= budget) for l, ok in enumerate(cand)]
    blocking, n = _dp(layer, hierarchy, grid, routes, cand, budget)
    return blocking, evaluated + n


def _dp(layer, hierarchy, grid: TileGrid, routes: Routes, cand, budget: float, *, parents: int | None = None):
    """The dynamic program over candidate tiles: the best blocking within `budget` (pJ above level 0), or None.

    `parents` limits each inner step to that many parent tiles of least energy above them
    (a quick, inexact search whose result is an upper bound).
    """
    m = len(hierarchy.on_chip)
    # per level, filled from the last on-chip level down (parent and pstate: below the last only)
    value: list[np.ndarray] = [np.empty(0)] * m
    parent: list[np.ndarray] = [np.empty(0)] * m
    pstate: list[np.ndarray] = [np.empty(0)] * m
    best_order: list[np.ndarray] = [np.empty(0)] * m
    # last on-chip level: its block iterates over DRAM; a clean operand is charged there
    a = np.flatnonzero(cand[m - 1])
    charges, _ = boundary_charges(layer, grid, routes, a, None, m - 1)
    n_states = len(level_states(routes, m - 1))
    value[m - 1] = np.full((n_states, grid.size), np.inf)
    best_order[m - 1] = np.zeros((n_states, grid.size), dtype=np.int64)
    for f in range(n_states):
        costs = np.stack([level_charge(c, routes, hierarchy, m - 1, f) + np.zeros(len(a)) for c in charges])
        value[m - 1][f, a] = costs.min(axis=0)
        best_order[m - 1][f, a] = costs.argmin(axis=0)
    evaluated = 3 * len(a) * n_states
    for l in range(m - 2, -1, -1):
        value[l + 1][value[l + 1] > budget] = np.inf  # cannot be part of a blocking under the cap
        if parents is not None and np.isfinite(value[l + 1]).sum() > parents:
            value[l + 1][value[l + 1] > np.partition(value[l + 1].ravel(), parents)[parents]] = np.inf
        value[l], parent[l], pstate[l], best_order[l], n = _inner_step(layer, hierarchy, grid, routes, cand[l],
                                                                       cand[l + 1], value[l + 1], l)
        evaluated += n
    # level 0 has no clean bits (an operand held below it is held at it); the MAC operand words are fixed,
    # less what stationary operands save
    saving, inner = stationary_saving(layer, hierarchy, grid)
    total = np.where(cand[0], value[0][0] + saving, np.inf)
    start = int(np.argmin(total))
    if not np.isfinite(total[start]):
        return None, evaluated
    tiles, orders, i, f = [], [], start, 0
    order_names = tuple(CANONICAL)
    for l in range(m):
        tiles.append(grid.tile(i))
        orders.append(CANONICAL[order_names[int(best_order[l][f, i])]])
        if l < m - 1:
            i, f = int(parent[l][f, i]), int(pstate[l][f, i])
    inner_order = CANONICAL[order_names[int(inner[start])]] if hierarchy.stationary else INNER_ORDER
    return Blocking(grid.view.dims, tuple(tiles), tuple(orders), grid.view.unroll, inner_order), evaluated


def _upper_bound(layer: Layer, hierarchy: Hierarchy, grid: TileGrid, routes: Routes, cand) -> tuple[float, int]:
    """Energy (pJ, one group) of a good feasible blocking, inf when none is found; and the pairs scored.

    Two quick searches: the exact optimum with one level above level 0 left out (that level
    gets the tile of the level below, so every tensor passes through it and the blocking is
    valid at the same cost), and the DP restricted to the `PARENT_CAP` cheapest parents per level.
    """
    m, found, evaluated = len(hierarchy.on_chip), [], 0
    for j in range(1, 1 if hierarchy.per_operand else m):
        sub = hierarchy.keep([x.name for i, x in enumerate(hierarchy.on_chip) if i != j])
        try:
            b, n = exact_blocking(layer, sub)
        except EngineError:
            continue
        evaluated += n
        if b is None:  # nothing fits without level j
            continue
        found.append(Blocking(layer.dims, (*b.tiles[:j], b.tiles[j - 1], *b.tiles[j:]),
                              (*b.orders[:j - 1], DIMS, *b.orders[j - 1:])))
    if m > 1:
        b, n = _dp(layer, hierarchy, grid, routes, cand, np.inf, parents=PARENT_CAP)
        evaluated += n
        found += [b] if b is not None else []
    costs = [evaluate(layer, hierarchy, b) for b in found]
    return min([c.memory_pj / layer.groups for c in costs if c.fits], default=np.inf), evaluated


def _inner_step(layer, hierarchy, grid: TileGrid, routes: Routes, child_ok, parent_ok, parent_value, l):
    """value[l] from value[l + 1]: for each child tile and clean bits, the best parent tile, its bits and the order."""
    n_states = len(level_states(routes, l))
    value = np.full((n_states, grid.size), np.inf)
    best_parent = np.full((n_states, grid.size), -1, dtype=np.int64)
    best_state = np.zeros((n_states, grid.size), dtype=np.int64)
    best_order = np.zeros((n_states, grid.size), dtype=np.int64)
    up = hierarchy.levels[l + 1]
    a, b = tile_pairs(grid, child_ok, parent_ok & np.isfinite(parent_value).any(axis=0),
                  prune=(l == 0 and not hierarchy.per_operand))
    for s in range(0, len(a), PAIR_CHUNK):
        ca, cb = a[s:s + PAIR_CHUNK], b[s:s + PAIR_CHUNK]
        charges, changed = boundary_charges(layer, grid, routes, ca, cb, l)
        starts = np.flatnonzero(np.r_[True, ca[1:] != ca[:-1]])
        for f in range(n_states):
            clean = {T: is_clean(routes, hierarchy, l, f, T) for T in layer.tensors if routes.h0[T] <= l}
            costs = np.stack([level_charge(c, routes, hierarchy, l, f, changed) + np.zeros(len(ca))
                              for c in charges])
            arg = costs.argmin(axis=0)
            nxt = np.zeros(len(ca), dtype=np.int64)  # the parent's clean bits, then its through bits
            for i, T in enumerate(routes.flags[l + 1]):
                nxt |= ((~changed[T]) & clean[T]).astype(np.int64) << i
            for i, T in enumerate(routes.through[l + 1], start=len(routes.flags[l + 1])):
                passed = passes_through(routes, l, f, T) if T in routes.through[l] else clean[T]
                nxt |= ((~changed[T]) & passed).astype(np.int64) << i
            kept = {}
            for T in layer.tensors:
                if routes.h0[T] == l + 1:
                    kept[T] = grid.kept(hierarchy, l + 1, T)[cb]
                elif routes.h0[T] <= l and up.keeps(T):
                    stored = changed[T] | (not clean[T])
                    kept[T] = np.where(stored, grid.kept(hierarchy, l + 1, T)[cb], 0.0)
                else:
                    kept[T] = np.zeros(len(ca))
            best = np.where(capacity_ok(hierarchy, l + 1, layer, kept),
                            costs[arg, np.arange(len(ca))] + parent_value[nxt, cb], np.inf)
            # pairs come grouped by child: take each group's first minimum
            low = np.minimum.reduceat(best, starts)
            hits = np.flatnonzero(best == np.repeat(low, np.diff(np.r_[starts, len(ca)])))
            pick = hits[np.searchsorted(hits, starts)]
            sel = pick[best[pick] < value[f, ca[pick]]]
            value[f, ca[sel]] = best[sel]
            best_parent[f, ca[sel]] = cb[sel]
            best_state[f, ca[sel]] = nxt[sel]
            best_order[f, ca[sel]] = arg[sel]
    return value, best_parent, best_state, best_order, 3 * len(a) * n_states


def tile_pairs(grid: TileGrid, child_ok, parent_ok, *, prune: bool):
    """All (child, parent) tile pairs with the child dividing the parent in every bound, grouped by child.

    With `prune` (children at level 0) a child is paired only with parents it cannot grow
    inside (see `_growable`). Otherwise the pairs are listed from whichever side has fewer
    candidates (few parents survive the bound when the cap is tight).
    """
    children = np.flatnonzero(child_ok)
    n = len(DIMS)
    if not children.size or not parent_ok.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    radix = [int(np.prod([len(d) for d in grid.divs[j + 1:]])) for j in range(n)]
    if not prune:
        parents = np.flatnonzero(parent_ok)
        up = np.prod([grid.divides[j].sum(axis=1)[grid.idx[children, j]].astype(np.float64) for j in range(n)], axis=0)
        down = np.prod([grid.divides[j].sum(axis=0)[grid.idx[parents, j]].astype(np.float64) for j in range(n)], axis=0)
        if down.sum() < up.sum():
            keys = [grid.idx[parents, j] for j in range(n)]
            b, a = _expand(parents, keys, lambda j, i: np.flatnonzero(grid.divides[j][:, i]) * radix[j], child_ok)
            order = np.argsort(a, kind="stable")  # parents stay in increasing order within a child
            return a[order], b[order]
    free = np.zeros((len(children), n), dtype=np.int64)  # bit k: the k-th prime of bound j may still grow
    steps = {}
    if prune:
        for j in range(n):
            for k, (_p, (grow, step)) in enumerate(_growable(grid, child_ok, children, j).items()):
                free[:, j] |= grow.astype(np.int64) << k
                steps[j, k] = step

    def options(j, key):
        """Parent divisor positions (times the radix) of a child with divisor position and free bits `key`."""
        i, bits = key >> 32, key & 0xFFFFFFFF
        ok = grid.divides[j][i].copy()
        k = 0
        while bits >> k:
            if bits >> k & 1:
                ok &= ~steps[j, k][i]
            k += 1
        return np.flatnonzero(ok) * radix[j]

    return _expand(children, [grid.idx[children, j] * 2 ** 32 + free[:, j] for j in range(n)], options, parent_ok)


def _expand(tiles, keys, options, partner_ok):
    """(tile, partner) pairs: per dim j, a tile with key `keys[j]` combines with `options(j, key)` flat offsets.

    Expanded dim by dim with one CSR table per dim over the distinct keys, in chunks of about
    `PAIR_CHUNK` pairs of whole tiles; partners are listed in increasing order; `partner_ok` filters.
    """
    tables = []
    for j, key in enumerate(keys):
        uniq, inv = np.unique(key, return_inverse=True)
        lists = [options(j, int(k)) for k in uniq]
        lengths = np.array([len(x) for x in lists], dtype=np.int64)
        tables.append((inv.ravel(), lengths, np.cumsum(lengths) - lengths, np.concatenate(lists)))
    per_tile = np.prod([t[1][t[0]].astype(np.float64) for t in tables], axis=0)  # partners before the filter
    bounds = np.searchsorted(np.cumsum(per_tile), np.arange(PAIR_CHUNK, per_tile.sum() + PAIR_CHUNK, PAIR_CHUNK))
    rows_out, cols_out = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for lo, hi in zip(np.r_[0, bounds[:-1] + 1], bounds + 1):
        rows = np.arange(lo, min(hi, len(tiles)), dtype=np.int64)
        flat = np.zeros(len(rows), dtype=np.int64)
        for inv, lengths, starts, data in tables:
            k = inv[rows]
            rep = np.repeat(np.arange(len(rows)), lengths[k])
            within = np.arange(len(rep)) - np.repeat(np.cumsum(lengths[k]) - lengths[k], lengths[k])
            flat = flat[rep] + data[starts[k][rep] + within]
            rows = rows[rep]
        keep = partner_ok[flat]
        rows_out.append(tiles[rows[keep]])
        cols_out.append(flat[keep])
    return np.concatenate(rows_out), np.concatenate(cols_out)


def _growable(grid: TileGrid, ok, tiles, j: int) -> dict:
    """Per prime p of bound j: which `tiles` stay feasible with their j-th bound times p, and
    which (divisor, divisor) pairs differ by a multiple of p.

    Level 0's own cost is the same for every tile and each refill term only shrinks as the
    level-0 tile grows inside a fixed parent (fewer halo and tile refetches, more reuse, more
    tensors passing through), so a parent is only ever served best by a child tile that cannot
    grow inside it. Dropping the other pairs keeps the search exact.
    """
    divs = grid.divs[j]
    radix = int(np.prod([len(d) for d in grid.divs[j + 1:]]))
    out = {}
    for p in _primes(int(divs[-1])):
        pos = {int(v): i for i, v in enumerate(divs)}
        up = np.array([pos.get(int(v) * p, -1) for v in divs])
        step = up[grid.idx[tiles, j]]
        flat = tiles + (step - grid.idx[tiles, j]) * radix
        free = (step >= 0) & ok[np.where(step >= 0, flat, 0)]
        ratio = divs[None, :] // divs[:, None]
        out[p] = (free, grid.divides[j] & (ratio % p == 0))
    return out


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    return out + ([n] if n > 1 else [])
