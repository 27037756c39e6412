"""The tile grid of one layer: every temporal tile as numpy columns, with footprints and the words refilled between a
tile and its parent (Yang et al. Table 2), shared by the exact search, its bounds and co-design.

The loop order of a block matters only through which tensor its innermost loops reuse: K reuses the input,
X/Y/N the kernels, C/Fw/Fh the outputs, and each tensor is indexed by the other two groups. So the order that puts
one group first dominates every order whose first loop lies in that group: three canonical orders per block
suffice (`CANONICAL`).
"""

from __future__ import annotations

import itertools
import math
from functools import cached_property, lru_cache

import numpy as np

from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, RELEVANT, REUSE_GROUP, TENSORS, Layer, span
from engine.blocking.model import SpatialView, lane_copies, window_sum

# Canonical block orders, innermost first: the reuse group of one tensor first (see module doc).
CANONICAL = {"I": ("K", "X", "Y", "N", "C", "Fw", "Fh"),
             "W": ("X", "Y", "N", "K", "C", "Fw", "Fh"),
             "O": ("C", "Fw", "Fh", "K", "X", "Y", "N")}


# Group order of each canonical order, as keys of REUSE_GROUP (the tensor each group reuses).
GROUP_ORDER = {"I": ("I", "W", "O"), "W": ("W", "I", "O"), "O": ("O", "I", "W")}


@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@lru_cache(maxsize=64)
def tile_grid(layer: Layer, unroll: tuple[int, ...] | None = None) -> TileGrid:
    """The tile grid of a layer (under a spatial unrolling), shared by the searches over many hierarchies."""
    return TileGrid(layer, unroll)


class TileGrid:
    """Every temporal tile (a divisor of each temporal bound), with footprints, as numpy columns.

    `fp[T]` are the words of the whole array's tile (the layer's own footprint without an array), `per_pe[T]`
    one PE's (what levels store); `moved[T]` and `moved_pe[T]` the real words one load of a tile moves, on
    average over its positions (a padded dim's last tile is partial), into the array's or every busy PE's tiles;
    `moved_dram`, `moved_pe_dram`, `full_dram` and `full_pe_dram` the same without the input's zero border (what DRAM
    moves: the border is made on chip).
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
        self.moved_dram, self.moved_pe_dram, self.full_dram, self.full_pe_dram = \
            self.moved, self.moved_pe, self.full, self.full_pe
        if any(layer.pad):
            self.moved_dram = {**self.moved, "I": self._moved("I", False, True)}
            self.moved_pe_dram = {**self.moved_pe, "I": self._moved("I", True, True)}
            self.full_dram = {**self.full, "I": float(self.view.real("I", dims, False, True))}
            self.full_pe_dram = {**self.full_pe, "I": float(self.view.real("I", dims, True, True))}
        self.above = np.prod(np.array(dims) // self.val, axis=1).astype(np.float64)  # such tiles in the layer
        # per tensor T: product of the tile's bounds over the loops that reuse T (REUSE_GROUP)
        cols = {d: self.val[:, j].astype(np.float64) for j, d in enumerate(DIMS)}
        self.group = {T: np.prod([cols[d] for d in REUSE_GROUP[T]], axis=0) for T in TENSORS}
        self.full_group = {T: float(math.prod(dims[DIMS.index(d)] for d in REUSE_GROUP[T])) for T in TENSORS}

    @cached_property
    def divides(self) -> list[np.ndarray]:
        """Per dim: divides[j][a, b] is True when divisor a divides divisor b (the DP's pairing; bounds need none)."""
        return [(d[None, :] % d[:, None]) == 0 for d in self.divs]

    def _moved(self, T: str, inside: bool, clip: bool = False) -> np.ndarray:
        """Real words of T per load of each tile (see `SpatialView.real`), on average over the tile's positions."""
        view, dims = self.view, self.view.dims
        positions = np.prod([dims[j] / self.val[:, j] for j, d in enumerate(DIMS) if d in RELEVANT[T]], axis=0)
        if T != "I":
            return view.real(T, dims, inside) / positions
        # every PE lane its own copy
        real: float | np.ndarray = float(lane_copies(view.unroll, T, inside) * self.layer.N * self.layer.C)
        for axis, (out, win) in enumerate((("X", "Fw"), ("Y", "Fh"))):
            i, k = DIMS.index(out), DIMS.index(win)
            table = np.array([[window_sum(self.layer, view.unroll, axis, int(a), int(f), inside, clip)
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


def capacity_ok(hierarchy: Hierarchy, level: int, layer: Layer, used: dict) -> np.ndarray:
    """Whether the words kept at `level` (tensor -> array; the operands it holds) fit its shared or split capacity."""
    mem = hierarchy.levels[level]
    held = [T for T in layer.tensors if mem.keeps(T)]
    if not held:  # a level holding none of this layer's operands (weights on a pooling layer)
        return np.ones(len(next(iter(used.values()))), dtype=bool)
    if mem.split_bytes:
        ok = np.ones(len(next(iter(used.values()))), dtype=bool)
        for T in held:
            ok = ok & (used[T] <= hierarchy.capacity_words(level, T))
        return ok
    return sum(used[T] for T in held) <= hierarchy.capacity_words(level)


def refill_words(layer: Layer, grid: TileGrid, a, b, *, pe: bool = False, raw: bool = False, clip: bool = False):
    """Words of each tensor moved into tiles `a` from their parents `b`, one dict per canonical order, and per
    tensor whether its tile changes from `a` to `b` (it is stored in the parent, rather than passing through).

    `b` are the parent tiles (grid indices), or None for the whole layer (the DRAM block). A tile of
    `a` is loaded `above(a) / run` times, where run is the reuse by the block's first loops (Table 2);
    outputs move both ways (written back, and read again except the first fill; with `raw` only the fills
    are given). Words are those of the array's whole tile, or with `pe` those of every busy PE's own tile; with
    `clip` without the input's zero border (loads from DRAM).
    """
    if b is None:
        group = {T: grid.full_group[T] / grid.group[T][a] for T in TENSORS}
    else:
        group = {T: grid.group[T][b] / grid.group[T][a] for T in TENSORS}
    if clip:
        moved, full = (grid.moved_pe_dram, grid.full_pe_dram) if pe else (grid.moved_dram, grid.full_dram)
    else:
        moved, full = (grid.moved_pe, grid.full_pe) if pe else (grid.moved, grid.full)
    base = {T: moved[T][a] * grid.above[a] for T in layer.tensors}  # words moved with no reuse in the block
    changed = {}
    for T in layer.tensors:
        o1, o2 = (X for X in TENSORS if X != T)  # the groups of loops that index T
        changed[T] = (group[o1] * group[o2]) > 1
    words = []
    for order in CANONICAL:
        g = GROUP_ORDER[order]
        first = np.where(group[g[0]] > 1, 0, np.where(group[g[1]] > 1, 1, np.where(group[g[2]] > 1, 2, -1)))
        per = {}
        for T in layer.tensors:
            fills = base[T] / np.where(first == g.index(T), group[T], 1.0)
            per[T] = 2 * fills - full[T] if T == "O" and not raw else fills
        words.append(per)
    return words, changed


def _unbeaten(combos: list[tuple[int, ...]], block: int = 256) -> list[tuple[int, ...]]:
    """The distinct `combos` that no other one equals or exceeds in every factor, in their order (compared a block of
    rows at a time, so that memory stays at block x len(combos))."""
    if len(combos) < 2:
        return combos
    factors = np.array(combos).reshape(len(combos), -1)
    lost = np.zeros(len(combos), bool)
    for lo in range(0, len(combos), block):
        rows = factors[lo:lo + block]
        beaten: np.ndarray = np.all(factors[None, :, :] >= rows[:, None, :], axis=2)  # [i, j]: combo j >= combo lo + i
        beaten[np.arange(len(rows)), lo + np.arange(len(rows))] = False  # not by itself
        lost[lo:lo + block] = beaten.any(axis=1)
    return [c for c, out in zip(combos, lost) if not out]


def unrollings(layer: Layer, hierarchy: Hierarchy) -> list[tuple[int, ...]]:
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
            combos = _unbeaten(combos)
        per_axis.append([dict(zip(dims, c)) for c in combos])
    out = []
    for combo in itertools.product(*per_axis):
        u = {k: v for part in combo for k, v in part.items()}
        out.append(tuple(u.get(d, 1) for d in DIMS))
    return out
