"""Find the blocking of least memory energy: exact dynamic programming over the levels (Sec. 3.5).

The paper enumerates loop strings exhaustively (24 hours for one 4-level layer) or searches
them heuristically, inner level first, from 128 seeds. Under the model of `model.py` the
problem has more structure, which makes an exact search fast:

* The loop order of a block matters only through which tensor its innermost loops reuse:
  K reuses the input, X/Y/N the kernels, C/Fw/Fh the outputs, and each tensor is indexed by
  the other two groups. So the order that puts one group first dominates every order whose
  first loop lies in that group: three canonical orders per block suffice.
* The cost is a sum over level boundaries; the term of boundary l depends only on the tiles
  of levels l and l + 1 and the order of the block between them (a tensor that passes
  through level l + 1 is charged at the next boundary, with the same count). Level l + 1's
  capacity check needs the same two tiles. Hence a dynamic program from DRAM inwards over
  tile choices (divisors of each bound) is exact.

`method="exhaustive"` enumerates every tile chain and every loop order with `evaluate`,
as the paper's first optimizer did; the tests check the two agree.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, REUSE_GROUP, TENSORS, Layer
from engine.blocking.model import Blocking, Cost, describe, evaluate
from engine.errors import EngineError, UnknownNameError

# Canonical block orders, innermost first: the reuse group of one tensor first (see module doc).
CANONICAL = {"I": ("K", "X", "Y", "N", "C", "Fw", "Fh"),
             "W": ("X", "Y", "N", "K", "C", "Fw", "Fh"),
             "O": ("C", "Fw", "Fh", "K", "X", "Y", "N")}
# Group order of each canonical order, as keys of REUSE_GROUP (the tensor each group reuses).
_GROUP_ORDER = {"I": ("I", "W", "O"), "W": ("W", "I", "O"), "O": ("O", "I", "W")}
PAIR_CHUNK = 2_000_000  # (child, parent) tile pairs scored per numpy batch
PARENT_CAP = 64  # parents per level in the quick search that bounds the exact one
EXHAUSTIVE_LIMIT = 2_000_000  # blockings `method="exhaustive"` agrees to score one by one
METHODS = ("exact", "exhaustive")


@dataclass(frozen=True)
class BlockingResult:
    """The best blocking found for one layer on one hierarchy, with its cost and how it was found."""

    layer: Layer
    hierarchy: Hierarchy
    blocking: Blocking
    cost: Cost
    method: str
    optimal: bool  # proven least energy under the model (exact DP or full enumeration)
    evaluated: int  # (tiles, order) combinations scored
    seconds: float

    @property
    def energy_pj(self) -> float:
        """Memory energy (pJ): accesses times per-word energy, summed over levels (Eq. 1)."""
        return self.cost.memory_pj

    @property
    def accesses(self) -> dict[str, int]:
        """Level name -> words read from or written back to it."""
        return {name: self.cost.at(name) for name in self.cost.level_names}

    def describe(self) -> list[str]:
        return describe(self.blocking, [m.name for m in self.hierarchy.levels])


def as_hierarchy(hierarchy) -> Hierarchy:
    """A Hierarchy from a Hierarchy, an Accelerator, or the names 'diannao' / 'cpu' / an accelerator preset."""
    if isinstance(hierarchy, Hierarchy):
        return hierarchy
    if isinstance(hierarchy, Accelerator):
        return Hierarchy.from_accelerator(hierarchy)
    if isinstance(hierarchy, str):
        if hierarchy == "diannao":
            return Hierarchy.diannao()
        if hierarchy == "cpu":
            return Hierarchy.cpu()
        if hierarchy in Accelerator.presets():
            return Hierarchy.from_accelerator(Accelerator.preset(hierarchy))
        raise UnknownNameError("hierarchy", hierarchy, ("diannao", "cpu", *Accelerator.presets()))
    raise EngineError(f"cannot block on {type(hierarchy).__name__}; give a Hierarchy, an Accelerator or a name")


def block(layer: Layer, hierarchy, *, levels=None, method: str = "exact") -> BlockingResult:
    """The least-energy blocking of `layer` on `hierarchy`, using only the on-chip `levels` named (default all).

    `method="exact"` is the dynamic program (fast, optimal under the model); "exhaustive"
    scores every blocking one by one (the oracle, small layers only).
    """
    hierarchy = as_hierarchy(hierarchy)
    if levels is not None:
        hierarchy = hierarchy.keep(levels)
    if method not in METHODS:
        raise UnknownNameError("blocking method", method, METHODS)
    start = time.perf_counter()
    search = exact_blocking if method == "exact" else _exhaustive
    blocking, evaluated = search(layer, hierarchy)
    cost = evaluate(layer, hierarchy, blocking)
    return BlockingResult(layer, hierarchy, blocking, cost, method, True, evaluated, time.perf_counter() - start)


# ---- shared tables ---------------------------------------------------------------
@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _min_level0_words(layer: Layer, hierarchy: Hierarchy) -> None:
    """Raise when even a one-element tile cannot sit in the innermost level."""
    one = (1,) * len(DIMS)
    mem = hierarchy.levels[0]
    need = {T: layer.footprint(T, one) for T in layer.tensors}
    if mem.split_bytes:
        bad = [T for T in layer.tensors if need[T] > hierarchy.capacity_words(0, T)]
    else:
        bad = ["all"] if sum(need.values()) > hierarchy.capacity_words(0) else []
    if bad:
        raise EngineError(f"layer '{layer.name}': level '{mem.name}' ({mem.total_bytes} bytes) cannot hold even a "
                          f"one-element tile ({sum(need.values())} words); leave it out with levels=...")


@lru_cache(maxsize=32)
def _grid(layer: Layer) -> "_Grid":
    """The tile grid of a layer, shared by the searches of co-design and multi-core over many hierarchies."""
    return _Grid(layer)


class _Grid:
    """Every tile (a divisor of each bound), with footprints, as numpy columns."""

    def __init__(self, layer: Layer):
        self.layer = layer
        self.divs = [np.array(divisors(n), dtype=np.int64) for n in layer.dims]
        shape = tuple(len(d) for d in self.divs)
        self.idx = np.indices(shape).reshape(len(DIMS), -1).T  # (G, 7) divisor positions
        self.val = np.stack([self.divs[j][self.idx[:, j]] for j in range(len(DIMS))], axis=1)  # (G, 7) bounds
        self.size = len(self.val)
        self.fp = {T: _footprints(layer, T, self.val) for T in TENSORS}
        self.above = np.prod(np.array(layer.dims) // self.val, axis=1).astype(np.float64)  # such tiles in the layer
        # per tensor T: product of the tile's bounds over the loops that reuse T (REUSE_GROUP)
        cols = {d: self.val[:, j].astype(np.float64) for j, d in enumerate(DIMS)}
        self.group = {T: np.prod([cols[d] for d in REUSE_GROUP[T]], axis=0) for T in TENSORS}
        self.full_group = {T: float(math.prod(getattr(layer, d) for d in REUSE_GROUP[T])) for T in TENSORS}
        # per dim: divides[j][a, b] is True when divisor a divides divisor b
        self.divides = [(d[None, :] % d[:, None]) == 0 for d in self.divs]

    def tile(self, i: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self.val[i])


def _footprints(layer: Layer, tensor: str, val: np.ndarray) -> np.ndarray:
    """`Layer.footprint` over an array of tiles (float64: exact below 2**53)."""
    x, y, c, k, n, fw, fh = (val[:, j].astype(np.float64) for j in range(len(DIMS)))
    if tensor == "I":
        (sx, sy), (dx, dy) = layer.stride, layer.dilation
        span_x = np.minimum((x - 1) * sx + (fw - 1) * dx + 1, x * fw)
        span_y = np.minimum((y - 1) * sy + (fh - 1) * dy + 1, y * fh)
        return n * c * span_x * span_y
    if tensor == "W":
        return c * k * fw * fh if layer.has_weights else np.zeros(len(val))
    return n * k * x * y


def _capacity_ok(hierarchy: Hierarchy, level: int, layer: Layer, used: dict) -> np.ndarray:
    """Whether the words kept at `level` (tensor -> array) fit its shared or split capacity."""
    mem = hierarchy.levels[level]
    if mem.split_bytes:
        ok = True
        for T in layer.tensors:
            ok = ok & (used[T] <= hierarchy.capacity_words(level, T))
        return ok
    return sum(used[T] for T in layer.tensors) <= hierarchy.capacity_words(level)


def _refill_words(layer: Layer, grid: _Grid, a, b):
    """Words of each tensor moved into tiles `a` from their parents `b`, one dict per canonical order, and per
    tensor whether its tile changes from `a` to `b` (it is stored in the parent, rather than passing through).

    `b` are the parent tiles (grid indices), or None for the whole layer (the DRAM block). A tile of
    `a` is loaded `above(a) / run` times, where run is the reuse by the block's first loops (Table 2);
    outputs move both ways (written back, and read again except the first fill).
    """
    if b is None:
        group = {T: grid.full_group[T] / grid.group[T][a] for T in TENSORS}
    else:
        group = {T: grid.group[T][b] / grid.group[T][a] for T in TENSORS}
    base = {T: grid.fp[T][a] * grid.above[a] for T in layer.tensors}  # words moved with no reuse in the block
    changed = {}
    for T in layer.tensors:
        o1, o2 = (X for X in TENSORS if X != T)  # the groups of loops that index T
        changed[T] = (group[o1] * group[o2]) > 1
    words = []
    for order in CANONICAL:
        g = _GROUP_ORDER[order]
        first = np.where(group[g[0]] > 1, 0, np.where(group[g[1]] > 1, 1, np.where(group[g[2]] > 1, 2, -1)))
        per = {}
        for T in layer.tensors:
            fills = base[T] / np.where(first == g.index(T), group[T], 1.0)
            per[T] = 2 * fills - layer.size(T) if T == "O" else fills
        words.append(per)
    return words, changed


def _refill_costs(layer: Layer, hierarchy: Hierarchy, grid: _Grid, a, b, parent_level: int, charge_all: bool):
    """Energy (pJ) of keeping tiles `a` (level parent_level - 1) filled from `parent_level`.

    Returns one cost array per canonical order, and the words each tensor keeps in the parent.
    A tensor whose tile does not change passes through the parent (charge_all=False): it is
    charged at the next boundary, with the same count.
    """
    words, changed = _refill_words(layer, grid, a, b)
    mem = hierarchy.levels[parent_level]
    kept = {} if charge_all else {T: np.where(changed[T], grid.fp[T][b], 0.0) for T in layer.tensors}
    costs = []
    for per in words:
        cost = np.zeros(len(a))
        for T in layer.tensors:
            moved = mem.energy(T) * per[T]
            cost += moved if charge_all else np.where(changed[T], moved, 0.0)
        costs.append(cost)
    return costs, kept


def exact_blocking(layer: Layer, hierarchy: Hierarchy) -> tuple[Blocking, int]:
    """Dynamic program over levels, DRAM inwards; value[l][tile] = least energy above level l.

    Branch and bound (three or more levels): feasible blockings found first cap the energy
    (`_upper_bound`), so tiles whose energy above them, or whose refills alone (`_refill_floor`),
    already exceed that cap minus level 0's fixed MAC operand reads are never paired. The
    optimum is kept.
    """
    _min_level0_words(layer, hierarchy)
    grid = _grid(layer)
    cand = _candidates(layer, hierarchy, grid)
    # with two levels the only pairing step is level 0's, already pruned by `_growable`: no bound needed
    cap, evaluated = _upper_bound(layer, hierarchy, grid, cand) if len(hierarchy.on_chip) > 2 else (np.inf, 0)
    budget = cap - _level0_pj(layer, hierarchy)
    budget += 1e-9 * abs(budget)
    cand = [ok & (_refill_floor(layer, hierarchy, grid, l) <= budget) for l, ok in enumerate(cand)]
    blocking, n = _dp(layer, hierarchy, grid, cand, budget)
    if blocking is None:
        raise EngineError(f"layer '{layer.name}' has no blocking that fits hierarchy '{hierarchy.name}'")
    return blocking, evaluated + n


def _dp(layer, hierarchy, grid: _Grid, cand, budget: float, *, parents: int | None = None):
    """The dynamic program over candidate tiles: the best blocking within `budget` (pJ above level 0), or None.

    `parents` limits each inner step to that many parent tiles of least energy above them
    (a quick, inexact search whose result is an upper bound).
    """
    m = len(hierarchy.on_chip)
    value = [None] * m
    parent = [None] * m
    best_order = [None] * m
    evaluated = 0
    # last on-chip level: its block iterates over DRAM
    a = np.flatnonzero(cand[m - 1])
    costs, _ = _refill_costs(layer, hierarchy, grid, a, None, m, charge_all=True)
    costs = np.stack(costs)
    evaluated += costs.size
    value[m - 1] = np.full(grid.size, np.inf)
    value[m - 1][a] = costs.min(axis=0)
    best_order[m - 1] = np.zeros(grid.size, dtype=np.int64)
    best_order[m - 1][a] = costs.argmin(axis=0)
    for l in range(m - 2, -1, -1):
        value[l + 1][value[l + 1] > budget] = np.inf  # cannot be part of a blocking under the cap
        if parents is not None and np.isfinite(value[l + 1]).sum() > parents:
            value[l + 1][value[l + 1] > np.partition(value[l + 1], parents)[parents]] = np.inf
        value[l], parent[l], best_order[l], n = _inner_step(layer, hierarchy, grid, cand[l], cand[l + 1], value[l + 1], l)
        evaluated += n
    # level 0 keeps every tensor; the MAC operand reads are the same for every tile
    total = np.where(cand[0], value[0], np.inf)
    start = int(np.argmin(total))
    if not np.isfinite(total[start]):
        return None, evaluated
    tiles, orders, i = [], [], start
    order_names = tuple(CANONICAL)
    for l in range(m):
        tiles.append(grid.tile(i))
        orders.append(CANONICAL[order_names[int(best_order[l][i])]])
        if l < m - 1:
            i = int(parent[l][i])
    return Blocking(layer.dims, tuple(tiles), tuple(orders)), evaluated


def _level0_pj(layer: Layer, hierarchy: Hierarchy) -> float:
    """Energy (pJ, one group) of the MAC operand reads and partial-sum writes at level 0: the same for every blocking."""
    macs, mem = math.prod(layer.dims), hierarchy.levels[0]
    return sum(mem.energy(T) * (2 * macs - layer.size(T) if T == "O" else macs) for T in layer.tensors)


def _upper_bound(layer: Layer, hierarchy: Hierarchy, grid: _Grid, cand) -> tuple[float, int]:
    """Energy (pJ, one group) of a good feasible blocking, inf when none is found; and the pairs scored.

    Two quick searches: the exact optimum with one level above level 0 left out (that level
    gets the tile of the level below, so every tensor passes through it and the blocking is
    valid at the same cost), and the DP restricted to the `PARENT_CAP` cheapest parents per level.
    """
    m, found, evaluated = len(hierarchy.on_chip), [], 0
    for j in range(1, m):
        sub = hierarchy.keep([x.name for i, x in enumerate(hierarchy.on_chip) if i != j])
        try:
            b, n = exact_blocking(layer, sub)
        except EngineError:
            continue
        evaluated += n
        found.append(Blocking(layer.dims, (*b.tiles[:j], b.tiles[j - 1], *b.tiles[j:]),
                              (*b.orders[:j - 1], DIMS, *b.orders[j - 1:])))
    if m > 1:
        b, n = _dp(layer, hierarchy, grid, cand, np.inf, parents=PARENT_CAP)
        evaluated += n
        found += [b] if b is not None else []
    costs = [evaluate(layer, hierarchy, b) for b in found]
    return min([c.memory_pj / layer.groups for c in costs if c.fits], default=np.inf), evaluated


def _refill_floor(layer: Layer, hierarchy: Hierarchy, grid: _Grid, l: int) -> np.ndarray:
    """A lower bound (pJ, one group) on the refills of each level-l tile from the levels above it.

    Whatever the order and the levels above, each distinct tile of a tensor (the input with its
    halo) is loaded at least once, at no less than the cheapest per-word energy above level l.
    This holds also when the tensor passes through level l: the tile below has the same extent.
    """
    total = np.zeros(grid.size)
    above = hierarchy.levels[l + 1:]
    for T in layer.tensors:
        distinct = grid.above * grid.group[T] / grid.full_group[T]
        fills = grid.fp[T] * distinct
        words = 2 * fills - layer.size(T) if T == "O" else fills
        total += min(mem.energy(T) for mem in above) * words
    return total


def _candidates(layer: Layer, hierarchy: Hierarchy, grid: _Grid) -> list[np.ndarray]:
    """Tiles each level might hold: level 0 keeps all of its tile; a higher level must keep each
    tensor whose tile is too big for every level below it (a smaller one could have stayed below)."""
    out = [_capacity_ok(hierarchy, 0, layer, grid.fp)]
    below = {T: hierarchy.capacity_words(0, T) for T in TENSORS}
    for l in range(1, len(hierarchy.on_chip)):
        must = {T: np.where(grid.fp[T] > below[T], grid.fp[T], 0.0) for T in TENSORS}
        out.append(_capacity_ok(hierarchy, l, layer, must))
        below = {T: max(below[T], hierarchy.capacity_words(l, T)) for T in TENSORS}
    return out


def _inner_step(layer, hierarchy, grid: _Grid, child_ok, parent_ok, parent_value, l):
    """value[l] from value[l + 1]: for each child tile, the best parent tile and block order."""
    value = np.full(grid.size, np.inf)
    best_parent = np.full(grid.size, -1, dtype=np.int64)
    best_order = np.zeros(grid.size, dtype=np.int64)
    a, b = _pairs(grid, child_ok, parent_ok & np.isfinite(parent_value), prune=(l == 0))
    for s in range(0, len(a), PAIR_CHUNK):
        ca, cb = a[s:s + PAIR_CHUNK], b[s:s + PAIR_CHUNK]
        costs, kept = _refill_costs(layer, hierarchy, grid, ca, cb, l + 1, charge_all=False)
        costs = np.stack(costs)
        arg = costs.argmin(axis=0)
        best = np.where(_capacity_ok(hierarchy, l + 1, layer, kept),
                        costs[arg, np.arange(len(ca))] + parent_value[cb], np.inf)
        # pairs come grouped by child: take each group's first minimum
        starts = np.flatnonzero(np.r_[True, ca[1:] != ca[:-1]])
        low = np.minimum.reduceat(best, starts)
        hits = np.flatnonzero(best == np.repeat(low, np.diff(np.r_[starts, len(ca)])))
        pick = hits[np.searchsorted(hits, starts)]
        sel = pick[best[pick] < value[ca[pick]]]
        value[ca[sel]] = best[sel]
        best_parent[ca[sel]] = cb[sel]
        best_order[ca[sel]] = arg[sel]
    return value, best_parent, best_order, 3 * len(a)


def _pairs(grid: _Grid, child_ok, parent_ok, *, prune: bool):
    """All (child, parent) tile pairs with the child dividing the parent in every bound, grouped by child.

    With `prune` (children at level 0) a child is paired only with parents it cannot grow
    inside (see `_growable`). Otherwise the pairs are listed from whichever side has fewer
    candidates (few parents survive the bound when the cap is tight).
    """
    children = np.flatnonzero(child_ok)
    n = len(DIMS)
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
            for k, (p, (grow, step)) in enumerate(_growable(grid, child_ok, children, j).items()):
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


def _growable(grid: _Grid, ok, tiles, j: int) -> dict:
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


# ---- brute force (the oracle) ------------------------------------------------------
def every_blocking(layer: Layer, levels: int):
    """Every chain of divisor tiles, as (tiles in canonical order, the blockings of every order of each block's
    non-unit loops): the space the brute-force oracles score. A caller may skip a chain before its orders."""
    per_dim = [list(_chains(n, levels)) for n in layer.dims]
    n_chains = math.prod(len(c) for c in per_dim)
    if n_chains > EXHAUSTIVE_LIMIT:
        raise EngineError(f"layer '{layer.name}': {n_chains} tile chains is too many to enumerate; use method='exact'")
    for combo in itertools.product(*per_dim):
        tiles = tuple(tuple(combo[j][l] for j in range(len(DIMS))) for l in range(levels))
        base = Blocking(layer.dims, tiles, (DIMS,) * levels)
        block_orders = []
        for b in range(levels):
            moving = [d for d, t in base.trips(b).items() if t > 1]
            rest = tuple(d for d in DIMS if d not in moving)
            block_orders.append([p + rest for p in itertools.permutations(moving)])
        yield base, (Blocking(layer.dims, tiles, orders) for orders in itertools.product(*block_orders))


def _exhaustive(layer: Layer, hierarchy: Hierarchy) -> tuple[Blocking, int]:
    """Score every blocking of `every_blocking` with `evaluate`."""
    best, best_key, evaluated = None, None, 0
    for _, blockings in every_blocking(layer, len(hierarchy.on_chip)):
        for blocking in blockings:
            cost = evaluate(layer, hierarchy, blocking)
            evaluated += 1
            if cost.fits and (best_key is None or cost.memory_pj < best_key - 1e-9 * abs(best_key)):
                best, best_key = blocking, cost.memory_pj
    if best is None:
        raise EngineError(f"layer '{layer.name}' has no blocking that fits hierarchy '{hierarchy.name}'")
    return best, evaluated


def _chains(n: int, m: int):
    """Non-decreasing divisor chains t_0 | t_1 | ... | t_(m-1) | n."""
    if m == 0:
        yield ()
        return
    for top in divisors(n):
        for rest in _chains(top, m - 1):
            yield (*rest, top)
