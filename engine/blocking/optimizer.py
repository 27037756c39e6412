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

import heapq
import itertools
import math
import time
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, RELEVANT, REUSE_GROUP, TENSORS, Layer, span
from engine.blocking.model import INNER_ORDER, Blocking, Cost, SpatialView, describe, evaluate, lane_copies, window_sum
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
        return describe(self.blocking, [m.name for m in self.hierarchy.levels], self.hierarchy)


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
    best, evaluated = None, 0
    for h in level_orders(hierarchy):
        cap = best[2].memory_pj / layer.groups if best else np.inf  # one group's energy to beat
        try:
            blocking, n = exact_blocking(layer, h, cap) if method == "exact" else _exhaustive(layer, h)
        except EngineError:
            if h is hierarchy:
                raise
            continue
        evaluated += n
        if blocking is None:
            continue
        cost = evaluate(layer, h, blocking)
        if best is None or cost.memory_pj < best[2].memory_pj * (1 - 1e-12):
            best = (h, blocking, cost)
    return BlockingResult(layer, *best, method, True, evaluated, time.perf_counter() - start)


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


# ---- shared tables ---------------------------------------------------------------
@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


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


@lru_cache(maxsize=64)
def _grid(layer: Layer, unroll: tuple[int, ...] | None = None) -> "_Grid":
    """The tile grid of a layer (under a spatial unrolling), shared by the searches over many hierarchies."""
    return _Grid(layer, unroll)


class _Grid:
    """Every temporal tile (a divisor of each temporal bound), with footprints, as numpy columns.

    `fp[T]` are the words of the whole array's tile (the layer's own footprint without an array), `per_pe[T]`
    one PE's (what levels store); `moved[T]` and `moved_pe[T]` the real words one load of a tile moves, on
    average over its positions (a padded dim's last tile is partial), into the array's or every busy PE's tiles.
    """

    def __init__(self, layer: Layer, unroll: tuple[int, ...] | None = None):
        self.layer = layer
        self.view = SpatialView.of(layer, unroll or (1,) * len(DIMS))
        dims = self.view.dims
        self.divs = [np.array(divisors(n), dtype=np.int64) for n in dims]
        shape = tuple(len(d) for d in self.divs)
        self.idx = np.indices(shape).reshape(len(DIMS), -1).T  # (G, 7) divisor positions
        self.val = np.stack([self.divs[j][self.idx[:, j]] for j in range(len(DIMS))], axis=1)  # (G, 7) bounds
        self.size = len(self.val)
        s = np.array(self.view.unroll, dtype=np.int64)
        self.fp = {T: _footprints(self.view.padded, T, self.val * s) for T in TENSORS}
        self.per_pe = {T: _footprints(self.view.pe, T, self.val) for T in TENSORS}
        self.moved = {T: self._moved(T, False) for T in TENSORS}
        self.moved_pe = {T: self._moved(T, True) for T in TENSORS}
        self.full = {T: float(self.view.real(T, dims, False)) for T in layer.tensors}  # words of the whole layer
        self.full_pe = {T: float(self.view.real(T, dims, True)) for T in layer.tensors}
        self.above = np.prod(np.array(dims) // self.val, axis=1).astype(np.float64)  # such tiles in the layer
        # per tensor T: product of the tile's bounds over the loops that reuse T (REUSE_GROUP)
        cols = {d: self.val[:, j].astype(np.float64) for j, d in enumerate(DIMS)}
        self.group = {T: np.prod([cols[d] for d in REUSE_GROUP[T]], axis=0) for T in TENSORS}
        self.full_group = {T: float(math.prod(dims[DIMS.index(d)] for d in REUSE_GROUP[T])) for T in TENSORS}

    @cached_property
    def divides(self) -> list[np.ndarray]:
        """Per dim: divides[j][a, b] is True when divisor a divides divisor b (the DP's pairing; bounds need none)."""
        return [(d[None, :] % d[:, None]) == 0 for d in self.divs]

    def _moved(self, T: str, inside: bool) -> np.ndarray:
        """Real words of T per load of each tile (see `SpatialView.real`), on average over the tile's positions."""
        view, dims = self.view, self.view.dims
        positions = np.prod([dims[j] / self.val[:, j] for j, d in enumerate(DIMS) if d in RELEVANT[T]], axis=0)
        if T != "I":
            return view.real(T, dims, inside) / positions
        real = float(lane_copies(view.unroll, T, inside) * self.layer.N * self.layer.C)  # every PE lane its own copy
        for axis, (out, win) in enumerate((("X", "Fw"), ("Y", "Fh"))):
            i, k = DIMS.index(out), DIMS.index(win)
            table = np.array([[window_sum(self.layer, view.unroll, axis, int(a), int(f), inside)
                               for f in self.divs[k]] for a in self.divs[i]], dtype=np.float64)
            real = real * table[self.idx[:, i], self.idx[:, k]]
        return real / positions

    def tile(self, i: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self.val[i])

    def kept(self, hierarchy: Hierarchy, level: int, T: str) -> np.ndarray:
        """Words of `T` that `level` keeps for each tile: per PE inside the array, the whole tile outside."""
        return self.per_pe[T] if hierarchy.inside(level) else self.fp[T]


def _footprints(layer: Layer, tensor: str, val: np.ndarray) -> np.ndarray:
    """`Layer.footprint` over an array of tiles (float64: exact below 2**53)."""
    x, y, c, k, n, fw, fh = (val[:, j].astype(np.float64) for j in range(len(DIMS)))
    if tensor == "I":
        (sx, sy), (dx, dy) = layer.stride, layer.dilation
        return n * c * span(x, fw, sx, dx) * span(y, fh, sy, dy)
    if tensor == "W":
        return c * k * fw * fh if layer.has_weights else np.zeros(len(val))
    return n * k * x * y


def _capacity_ok(hierarchy: Hierarchy, level: int, layer: Layer, used: dict) -> np.ndarray:
    """Whether the words kept at `level` (tensor -> array; the operands it holds) fit its shared or split capacity."""
    mem = hierarchy.levels[level]
    held = [T for T in layer.tensors if mem.keeps(T)]
    if not held:  # a level holding none of this layer's operands (weights on a pooling layer)
        return np.ones(len(next(iter(used.values()))), dtype=bool)
    if mem.split_bytes:
        ok = True
        for T in held:
            ok = ok & (used[T] <= hierarchy.capacity_words(level, T))
        return ok
    return sum(used[T] for T in held) <= hierarchy.capacity_words(level)


def _refill_words(layer: Layer, grid: _Grid, a, b, *, pe: bool = False, raw: bool = False):
    """Words of each tensor moved into tiles `a` from their parents `b`, one dict per canonical order, and per
    tensor whether its tile changes from `a` to `b` (it is stored in the parent, rather than passing through).

    `b` are the parent tiles (grid indices), or None for the whole layer (the DRAM block). A tile of
    `a` is loaded `above(a) / run` times, where run is the reuse by the block's first loops (Table 2);
    outputs move both ways (written back, and read again except the first fill; with `raw` only the fills
    are given). Words are those of the array's whole tile, or with `pe` those of every busy PE's own tile.
    """
    if b is None:
        group = {T: grid.full_group[T] / grid.group[T][a] for T in TENSORS}
    else:
        group = {T: grid.group[T][b] / grid.group[T][a] for T in TENSORS}
    moved, full = (grid.moved_pe, grid.full_pe) if pe else (grid.moved, grid.full)
    base = {T: moved[T][a] * grid.above[a] for T in layer.tensors}  # words moved with no reuse in the block
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
            per[T] = 2 * fills - full[T] if T == "O" and not raw else fills
        words.append(per)
    return words, changed


@dataclass(frozen=True)
class _Routes:
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


@lru_cache(maxsize=256)
def _routes(layer: Layer, hierarchy: Hierarchy) -> _Routes:
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
    coef, coef_through = {}, {}
    for l in range(m):
        for T in layer.tensors:
            if h0[T] > l:
                continue
            below = max(h for h in held[T] if h <= l)
            up = min(h for h in held[T] if h > l)
            c = [0.0] * 4  # a_pe, b_pe, a_arr, b_arr
            parent = hierarchy.levels[up]
            r, w = parent.energy(T), parent.write_energy(T)
            side = 0 if hierarchy.inside(up) else 2
            # the parent serves the fills; outputs are written up and read back except their first fill
            c[side], c[side + 1] = (w + r, r) if T == "O" else (r, 0.0)
            if hierarchy.array is not None and inside(below) and not inside(up):
                c[0], c[1] = c[0] + network[T][0], c[1] + network[T][1]  # every busy PE's words cross the network
            coef[l, T] = tuple(c)
            if T in through[l]:
                coef_through[l, T] = (c[0] + network[T][0], c[1] + network[T][1], c[2], c[3])
    return _Routes(h0, flags, through, coef, coef_through)


def _charges(layer, grid: _Grid, routes: _Routes, a, b, l: int):
    """Per canonical order, per operand: the energy (pJ) of charging T's refills at boundary l (keyed (T, True)
    too where T may come through the array's network); and `changed`."""
    fills, changed = _refill_words(layer, grid, a, b, raw=True)
    priced = [((T, False), routes.coef[l, T]) for T in layer.tensors if (l, T) in routes.coef]
    priced += [((T, True), routes.coef_through[l, T]) for T in routes.through[l]]
    need_pe = any(c[0] for _, c in priced)
    fills_pe = _refill_words(layer, grid, a, b, pe=True, raw=True)[0] if need_pe else None
    out = []
    for o, per in enumerate(fills):
        costs = {}
        for (T, crossing), (a_pe, b_pe, a_arr, b_arr) in priced:
            cost = a_arr * per[T] - b_arr * grid.full[T]
            if a_pe:
                cost = cost + a_pe * fills_pe[o][T] - b_pe * grid.full_pe[T]
            costs[T, crossing] = cost
        out.append(costs)
    return out, changed


def _states(routes: _Routes, l: int) -> range:
    return range(2 ** (len(routes.flags[l]) + len(routes.through[l])))


def _clean(routes: _Routes, hierarchy: Hierarchy, l: int, state: int, T: str) -> bool:
    """Whether T's tile at level l is still its last holder's, under the clean bits `state` of level l."""
    if hierarchy.levels[l].keeps(T):
        return True
    return bool(state >> routes.flags[l].index(T) & 1)


def _through(routes: _Routes, l: int, state: int, T: str) -> bool:
    """Whether T's tile at level l is still its innermost holder's inside the array, under `state` of level l."""
    return T in routes.through[l] and bool(state >> (len(routes.flags[l]) + routes.through[l].index(T)) & 1)


def _level_charge(c: dict, routes: _Routes, hierarchy: Hierarchy, l: int, state: int, changed=None):
    """The charges at boundary l under `state` (one array per tile), summed over operands: none for a bypassed
    operand already charged below, a passed-on tile's with the network's words, only where a tile changes."""
    total = 0.0
    for T in (T for T, crossing in c if not crossing and _clean(routes, hierarchy, l, state, T)):
        cost = c[T, _through(routes, l, state, T)]
        total = total + (cost if changed is None else np.where(changed[T], cost, 0.0))
    return total


def exact_blocking(layer: Layer, hierarchy: Hierarchy, cap: float = np.inf) -> tuple[Blocking | None, int]:
    """Least-energy blocking: for each spatial unrolling (least bound first), the DP over levels, with the best
    energy so far (or `cap`, pJ of one group) as its budget. Without a PE array there is one unrolling (none).

    Raises when nothing fits and no `cap` was given; returns (None, n) when nothing beats `cap`.
    """
    _min_level0_words(layer, hierarchy)
    best, best_pj, evaluated = None, cap, 0
    once = _once(layer, hierarchy)
    # every unrolling by its floor (a sorted list is a heap), then refined lazily, least key first: its quick
    # `_refill_bound`, its tight one (straight away once a quick one proved no better than its floor), the DP
    heap = [(floor, busy, unroll, floor, 0) for floor, busy, unroll in _floors(layer, hierarchy)]
    if len(heap) == 1:  # one unrolling (no array): nothing to rank, straight to its DP
        heap = [(*heap[0][:4], 2)]
    skip_quick = False
    while heap and heap[0][0] < best_pj * (1 - 1e-12):
        bound, busy, unroll, floor, stage = heapq.heappop(heap)
        if stage == 0 and not skip_quick:
            quick = _refill_bound(layer, hierarchy, unroll, False)
            skip_quick = quick <= floor * (1 + 1e-9)
            heapq.heappush(heap, (max(bound, quick), busy, unroll, floor, 1))
            continue
        if stage < 2:
            heapq.heappush(heap, (max(bound, _refill_bound(layer, hierarchy, unroll)), busy, unroll, floor, 2))
            continue
        blocking, n = _exact_unrolled(layer, hierarchy, unroll, best_pj, floor - once)
        evaluated += n
        if blocking is None:
            continue
        pj = evaluate(layer, hierarchy, blocking).memory_pj / layer.groups
        if pj < best_pj * (1 - 1e-12):
            best, best_pj = blocking, pj
    if best is None and cap == np.inf:
        raise EngineError(f"layer '{layer.name}' has no blocking that fits hierarchy '{hierarchy.name}'")
    return best, evaluated


def _unrolls(layer: Layer, hierarchy: Hierarchy) -> list[tuple[int, ...]]:
    """The spatial unrollings worth searching: per dim on an axis, the least factor for each number of
    temporal steps ceil(bound / factor) (a larger factor with the same steps only pads more), products within each
    axis; with `unrolling="maximal"` only the combinations of an axis that no other one exceeds in every factor."""
    array = hierarchy.array
    if array is None:
        return [(1,) * len(DIMS)]
    per_axis = []
    for axis, size in array.axes:
        dims = [d for d, a in array.dataflow if a == axis]
        options = []
        for d in dims:
            n = getattr(layer, d)
            options.append(sorted({-(-n // -(-n // f)) for f in range(1, min(size, n) + 1)}))
        combos = [c for c in itertools.product(*options) if math.prod(c) <= size]
        if array.unrolling == "maximal":  # only combos no other combo beats in every factor
            combos = [c for c in combos if not any(o != c and all(x >= y for x, y in zip(o, c)) for o in combos)]
        per_axis.append([dict(zip(dims, c)) for c in combos])
    out = []
    for combo in itertools.product(*per_axis):
        u = {k: v for part in combo for k, v in part.items()}
        out.append(tuple(u.get(d, 1) for d in DIMS))
    return out


def _floors(layer: Layer, hierarchy: Hierarchy) -> list:
    """(floor, -busy PEs, unrolling) of every unrolling worth searching, least floor (then most PEs) first.

    Every level order of a hierarchy shares these floors (each operand's innermost holder stays the same), so
    they are cached under one of its orders.
    """
    first = min(level_orders(hierarchy), key=lambda h: tuple(mem.name for mem in h.levels))
    return _floors_of(layer, replace(first, name=""))


@lru_cache(maxsize=1024)
def _floors_of(layer: Layer, hierarchy: Hierarchy) -> list:
    """`_floors` for one order of the levels: the MAC floor of every unrolling (`_mac_floors`) plus every real word
    of each operand held on chip loaded once from DRAM (outputs written once into it, at its write price)."""
    unrolls = _unrolls(layer, hierarchy)
    floors = _mac_floors(layer, hierarchy, unrolls) + _once(layer, hierarchy)
    return sorted((float(f), -math.prod(u), u) for f, u in zip(floors, unrolls))


def _once(layer: Layer, hierarchy: Hierarchy) -> float:
    """Energy (pJ, one group) of every real word of each operand held on chip loaded once from DRAM (outputs
    written once into it, at its write price); real words outside the array do not depend on the unrolling."""
    view = SpatialView.of(layer, (1,) * len(DIMS))
    return sum(_dram_once_pj(hierarchy, T) * view.real(T, view.dims, False)
               for T in layer.tensors if any(mem.keeps(T) for mem in hierarchy.on_chip))


def _dram_once_pj(hierarchy: Hierarchy, T: str) -> float:
    """DRAM's price of a word of T moved once: read (inputs, weights) or written (outputs)."""
    dram = hierarchy.levels[-1]
    return dram.write_energy(T) if T == "O" else dram.energy(T)


def _mac_floors(layer: Layer, hierarchy: Hierarchy, unrolls) -> np.ndarray:
    """Per unrolling, a lower bound (pJ, one group) on the MACs' operand words: all of them, less the most a
    stationary operand can save (one of I and W is reused over the innermost loops of level 0's tile, by at most
    `_max_run`)."""
    pj = {T: _level0_pj(layer, hierarchy, unrolls, (T,)) for T in layer.tensors}
    total = sum(pj.values())
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
    out = []
    for level, mem in enumerate(hierarchy.on_chip):
        mine = [T for T in layer.tensors if mem.keeps(T) and not any(m.keeps(T) for m in hierarchy.levels[:level])]
        if mem.split_bytes:
            out.append((hierarchy.inside(level), tuple((T, hierarchy.capacity_words(level, T)) for T in mine), np.inf))
        else:
            out.append((hierarchy.inside(level), tuple((T, np.inf) for T in mine), hierarchy.capacity_words(level)))
    return tuple(out)


@lru_cache(maxsize=4096)
def _refill_bound(layer: Layer, hierarchy: Hierarchy, unroll, tight: bool = True) -> float:
    """A lower bound (pJ, one group) on the best blocking under one unrolling, tighter than `_floors`: the MAC
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
    grid = _grid(layer, unroll)
    routes = _routes(layer, hierarchy)
    cand = _candidates(layer, hierarchy, grid, routes)
    m = len(hierarchy.on_chip)
    saving, _ = _stationary_saving(layer, hierarchy, grid)
    on_chip = [T for T in layer.tensors if routes.h0[T] < m]
    last = {T: max(l for l in range(m) if hierarchy.levels[l].keeps(T)) for T in on_chip}
    # a level's tile lies inside every tile above it, so it also fits where those levels keep their own operands
    inner = [_capacity_ok(hierarchy, k, layer, {T: grid.kept(hierarchy, k, T) if routes.h0[T] == k
                                                 else np.zeros(grid.size) for T in layer.tensors}) for k in range(m)]
    cand = [np.logical_and.reduce([cand[j], *inner[j + 1:]]) for j in range(m)]
    charge = {}
    for T in on_chip:
        l = routes.h0[T]
        once = _dram_once_pj(hierarchy, T) * grid.full[T]
        moved = (grid.moved[T] * grid.above, grid.moved_pe[T] * grid.above, grid.full[T], grid.full_pe[T])
        full = (grid.full[T], grid.full_pe[T], grid.full[T], grid.full_pe[T])
        for route, ks, extra in (("chip", range(l, last[T]), once), ("dram", range(last[T], m), 0.0)):
            charge[T, route] = tuple(_least_charge(routes, T, ks, *words) + extra for words in (moved, full))
    macs = sum(_level0_of(layer, hierarchy, grid.view.unroll, T) for T in layer.tensors)
    if not tight:  # each operand by its cheaper route, each level's operands alone
        total = macs
        for j in range(m):
            mine = [[np.minimum(charge[T, "chip"][r], charge[T, "dram"][r]) for r in (0, 1)]
                    for T in on_chip if routes.h0[T] == j]
            if mine or j == 0:
                per = saving if j == 0 else 0.0
                if mine:
                    per = per + sum(c[0] for c in mine) - np.max([c[0] - c[1] for c in mine], axis=0)
                total += float(np.min(np.where(cand[j], per, np.inf)))
        return total
    fits = {}
    for T in on_chip:
        l, mem = routes.h0[T], hierarchy.levels[routes.h0[T]]
        cap = hierarchy.capacity_words(l, T) if mem.split_bytes else hierarchy.capacity_words(l)
        fits[T] = grid.kept(hierarchy, l, T) <= cap
    best, memo = np.inf, {}

    @lru_cache(maxsize=None)
    def allowed(j, restrict):
        """Level j's tiles: candidates within the capacities of the operands in `restrict`, which go to DRAM past it."""
        return np.logical_and.reduce([cand[j], *(fits[T] for T in restrict)])

    @lru_cache(maxsize=None)
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

                def merge(i, j):
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
                    options = [k for j in levels for k in mine[j]] or [None]
                    total += min(sum(least(j, mine[j], reused, restrict[j]) for j in levels) for reused in options)
                bounds.append(total)
            best = min(best, max(bounds))
    return best


def _least_charge(routes: _Routes, T: str, boundaries, words, words_pe, full, full_pe):
    """The least energy (pJ) of moving `words` of T (`words_pe` into the PEs) across any of `boundaries`, by their
    coefficients (`_Routes.coef`; inf with none)."""
    best = np.inf
    for k in boundaries:
        a_pe, b_pe, a_arr, b_arr = routes.coef[k, T]
        best = np.minimum(best, a_arr * words - b_arr * full + a_pe * words_pe - b_pe * full_pe)
    return best


def _exact_unrolled(layer: Layer, hierarchy: Hierarchy, unroll, cap: float = np.inf,
                    mac_floor: float | None = None) -> tuple[Blocking | None, int]:
    """The DP over levels for one unrolling, DRAM inwards; value[l][state, tile] = least energy above level l.

    Branch and bound: a feasible blocking found first (the given `cap`, else a quick search) caps the
    energy, so a tile whose energy above it already exceeds that cap minus the fixed MAC operand words is
    never paired. With three or more levels, each holding every operand, and no array, the tiles whose
    refills alone (`_refill_floor`) exceed it are dropped too. The optimum is kept. `mac_floor` is the
    unrolling's `_mac_floors`, when the caller has it.
    """
    grid = _grid(layer, unroll)
    routes = _routes(layer, hierarchy)
    cand = _candidates(layer, hierarchy, grid, routes)
    evaluated = 0
    if len(hierarchy.on_chip) > 2 and cap == np.inf:
        cap, evaluated = _upper_bound(layer, hierarchy, grid, routes, cand)
    if cap == np.inf:  # two levels: the only pairing step is level 0's, already pruned by `_growable`
        blocking, n = _dp(layer, hierarchy, grid, routes, cand, np.inf)
        return blocking, evaluated + n
    budget = cap - (_mac_floors(layer, hierarchy, [unroll])[0] if mac_floor is None else mac_floor)
    budget += 1e-9 * abs(budget)
    if budget < 0:
        return None, evaluated
    if not hierarchy.per_operand:
        cand = [ok & (_refill_floor(layer, hierarchy, grid, l) <= budget) for l, ok in enumerate(cand)]
    blocking, n = _dp(layer, hierarchy, grid, routes, cand, budget)
    return blocking, evaluated + n


def _dp(layer, hierarchy, grid: _Grid, routes: _Routes, cand, budget: float, *, parents: int | None = None):
    """The dynamic program over candidate tiles: the best blocking within `budget` (pJ above level 0), or None.

    `parents` limits each inner step to that many parent tiles of least energy above them
    (a quick, inexact search whose result is an upper bound).
    """
    m = len(hierarchy.on_chip)
    value, parent, pstate, best_order = [None] * m, [None] * m, [None] * m, [None] * m
    # last on-chip level: its block iterates over DRAM; a clean operand is charged there
    a = np.flatnonzero(cand[m - 1])
    charges, _ = _charges(layer, grid, routes, a, None, m - 1)
    n_states = len(_states(routes, m - 1))
    value[m - 1] = np.full((n_states, grid.size), np.inf)
    best_order[m - 1] = np.zeros((n_states, grid.size), dtype=np.int64)
    for f in range(n_states):
        costs = np.stack([_level_charge(c, routes, hierarchy, m - 1, f) + np.zeros(len(a)) for c in charges])
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
    saving, inner = _stationary_saving(layer, hierarchy, grid)
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
        words, copies = _mac_words(layer, unrolls, u, T, inside)  # an output's first write reads no zero
        total += mem.energy(T) * (words - copies * layer.size(T)) + mem.write_energy(T) * words if T == "O" \
            else mem.energy(T) * words
        if hierarchy.array is not None and not inside and noc[T]:
            words, copies = _mac_words(layer, unrolls, u, T, True)
            total += noc[T] * (2 * words - copies * layer.size(T) if T == "O" else words)
    return total


def _mac_words(layer: Layer, unrolls, u: np.ndarray, T: str, inside: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per unrolling, the real words of T the MACs take over all steps (one word per busy PE per step: each real
    index once per step of the loops that do not index it; `SpatialView.moved` of a one-step tile, in closed
    form), and the copies of each real word (busy PEs along the loops that do not index T, inside the array)."""
    if T == "W" and not layer.has_weights:
        return np.zeros(len(u)), np.ones(len(u))
    steps = np.ceil(np.array(layer.dims) / u)
    irrelevant = [j for j, d in enumerate(DIMS) if d not in RELEVANT[T]]
    copies = np.prod(u[:, irrelevant], axis=1) if inside else np.ones(len(u))
    per_step = np.prod(steps[:, irrelevant], axis=1) * copies
    if T != "I":
        return per_step * layer.size(T), copies
    if inside:
        return per_step * layer.N * layer.C * layer.X * layer.Fw * layer.Y * layer.Fh, copies
    windows = np.array([window_sum(layer, v, 0, 1, 1, False) * window_sum(layer, v, 1, 1, 1, False)
                        for v in unrolls], dtype=np.float64)
    return per_step * layer.N * layer.C * windows, copies


def _stationary_saving(layer: Layer, hierarchy: Hierarchy, grid: _Grid) -> tuple[np.ndarray, np.ndarray]:
    """Per level-0 tile, the energy (pJ, one group, <= 0) the MACs save when an input or weight word is reused
    over the innermost loops of the tile that skip it (`Hierarchy.stationary`), and the canonical order of those
    loops that saves most. Only the loops of one tensor's reuse group can come first, so the three canonical
    orders cover every order."""
    if not hierarchy.stationary:
        return np.zeros(grid.size), np.zeros(grid.size, dtype=np.int64)
    full = [_level0_of(layer, hierarchy, grid.view.unroll, T) for T in "IW"]
    saving = []
    for order in CANONICAL:
        g = _GROUP_ORDER[order]
        first = np.where(grid.group[g[0]] > 1, 0, np.where(grid.group[g[1]] > 1, 1, np.where(grid.group[g[2]] > 1, 2, -1)))
        total = np.zeros(grid.size)
        for T, pj in zip("IW", full):
            if T in layer.tensors:
                run = np.where(first == g.index(T), grid.group[T], 1.0)
                total += pj * (1 / run - 1)
        saving.append(total)
    saving = np.stack(saving)
    return saving.min(axis=0), saving.argmin(axis=0)


def _upper_bound(layer: Layer, hierarchy: Hierarchy, grid: _Grid, routes: _Routes, cand) -> tuple[float, int]:
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
        found.append(Blocking(layer.dims, (*b.tiles[:j], b.tiles[j - 1], *b.tiles[j:]),
                              (*b.orders[:j - 1], DIMS, *b.orders[j - 1:])))
    if m > 1:
        b, n = _dp(layer, hierarchy, grid, routes, cand, np.inf, parents=PARENT_CAP)
        evaluated += n
        found += [b] if b is not None else []
    costs = [evaluate(layer, hierarchy, b) for b in found]
    return min([c.memory_pj / layer.groups for c in costs if c.fits], default=np.inf), evaluated


def _refill_floor(layer: Layer, hierarchy: Hierarchy, grid: _Grid, l: int) -> np.ndarray:
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
        fills = grid.moved[T] * distinct
        words = 2 * fills - grid.full[T] if T == "O" else fills
        total += min(mem.energy(T) for mem in above) * words
    return total


def _candidates(layer: Layer, hierarchy: Hierarchy, grid: _Grid, routes: _Routes) -> list[np.ndarray]:
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
        out.append(_capacity_ok(hierarchy, l, layer, must))
        below.update({T: l for T in layer.tensors if mem.keeps(T)})
    return out


def _inner_step(layer, hierarchy, grid: _Grid, routes: _Routes, child_ok, parent_ok, parent_value, l):
    """value[l] from value[l + 1]: for each child tile and clean bits, the best parent tile, its bits and the order."""
    n_states = len(_states(routes, l))
    value = np.full((n_states, grid.size), np.inf)
    best_parent = np.full((n_states, grid.size), -1, dtype=np.int64)
    best_state = np.zeros((n_states, grid.size), dtype=np.int64)
    best_order = np.zeros((n_states, grid.size), dtype=np.int64)
    up = hierarchy.levels[l + 1]
    a, b = _pairs(grid, child_ok, parent_ok & np.isfinite(parent_value).any(axis=0),
                  prune=(l == 0 and not hierarchy.per_operand))
    for s in range(0, len(a), PAIR_CHUNK):
        ca, cb = a[s:s + PAIR_CHUNK], b[s:s + PAIR_CHUNK]
        charges, changed = _charges(layer, grid, routes, ca, cb, l)
        starts = np.flatnonzero(np.r_[True, ca[1:] != ca[:-1]])
        for f in range(n_states):
            clean = {T: _clean(routes, hierarchy, l, f, T) for T in layer.tensors if routes.h0[T] <= l}
            costs = np.stack([_level_charge(c, routes, hierarchy, l, f, changed) + np.zeros(len(ca))
                              for c in charges])
            arg = costs.argmin(axis=0)
            nxt = np.zeros(len(ca), dtype=np.int64)  # the parent's clean bits, then its through bits
            for i, T in enumerate(routes.flags[l + 1]):
                nxt |= ((~changed[T]) & clean[T]).astype(np.int64) << i
            for i, T in enumerate(routes.through[l + 1], start=len(routes.flags[l + 1])):
                passed = _through(routes, l, f, T) if T in routes.through[l] else clean[T]
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
            best = np.where(_capacity_ok(hierarchy, l + 1, layer, kept),
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


def _pairs(grid: _Grid, child_ok, parent_ok, *, prune: bool):
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
def every_blocking(layer: Layer, levels: int, unroll: tuple[int, ...] | None = None, *, inner: bool = False):
    """Every chain of divisor tiles, as (tiles in canonical order, the blockings of every order of each block's
    non-unit loops): the space the brute-force oracles score. A caller may skip a chain before its orders.
    With `unroll`, tiles are over the temporal bounds that unrolling leaves; with `inner`, every order of the
    loops inside level 0's tile is listed too."""
    unroll = unroll or (1,) * len(DIMS)
    dims = SpatialView.of(layer, unroll).dims
    per_dim = [list(_chains(n, levels)) for n in dims]
    n_chains = math.prod(len(c) for c in per_dim)
    if n_chains > EXHAUSTIVE_LIMIT:
        raise EngineError(f"layer '{layer.name}': {n_chains} tile chains is too many to enumerate; use method='exact'")
    for combo in itertools.product(*per_dim):
        tiles = tuple(tuple(combo[j][l] for j in range(len(DIMS))) for l in range(levels))
        base = Blocking(dims, tiles, (DIMS,) * levels, unroll)
        block_orders = []
        for b in range(levels):
            moving = [d for d, t in base.trips(b).items() if t > 1]
            rest = tuple(d for d in DIMS if d not in moving)
            block_orders.append([p + rest for p in itertools.permutations(moving)])
        inside = [d for d, t in zip(DIMS, tiles[0]) if t > 1]
        inners = [p + tuple(d for d in DIMS if d not in inside) for p in itertools.permutations(inside)] \
            if inner else [INNER_ORDER]
        yield base, (Blocking(dims, tiles, orders, unroll, i)
                     for orders in itertools.product(*block_orders) for i in inners)


def every_unroll(layer: Layer, hierarchy: Hierarchy) -> list[tuple[int, ...]]:
    """Every spatial unrolling the array allows: each mapped dim by any factor up to its bound, within each axis."""
    array = hierarchy.array
    if array is None:
        return [(1,) * len(DIMS)]
    sizes = dict(array.axes)
    options = [range(1, min(getattr(layer, d), sizes[array.axis_of(d)]) + 1) if array.axis_of(d) else (1,)
               for d in DIMS]
    out = []
    for u in itertools.product(*options):
        used = dict.fromkeys(sizes, 1)
        for d, f in zip(DIMS, u):
            if f > 1:
                used[array.axis_of(d)] *= f
        if all(used[a] <= sizes[a] for a in sizes):
            out.append(u)
    return out


def _exhaustive(layer: Layer, hierarchy: Hierarchy) -> tuple[Blocking, int]:
    """Score every blocking of `every_blocking`, under every unrolling of `every_unroll`, with `evaluate`."""
    best, best_key, evaluated = None, None, 0
    for unroll in every_unroll(layer, hierarchy):
        for _, blockings in every_blocking(layer, len(hierarchy.on_chip), unroll, inner=hierarchy.stationary):
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
