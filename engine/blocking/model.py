"""The blocking model: a `Blocking` (tiles per memory level, loop order per block), scored by `evaluate`.

Yang et al. Sec. 3.2-3.4. Memory level l holds, for each tensor, the data its tile of the
loop nest touches (Table 2's buffer sizes). A level where a tensor's tile is the same as the
level below adds no reuse, so the tensor passes through it ("a buffer must be added anytime
the added loop reuses the same data"). A stored tile is refilled each time an enclosing loop
that indexes the tensor moves on; enclosing loops that do not index it, innermost first,
reuse it (Table 2's refetch rates, halo refetches included). The words a level serves to
the level below (or to the MACs), times its per-word energy, summed over levels, is the
memory energy (Eq. 1 and Sec. 3.4). Outputs move both ways: partial sums are written back
and read again, except the first fill of each output, which starts from zero (Table 2 counts
2 C_i / C_(i-1), i.e. also that first read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, RELEVANT, TENSORS, Layer, span
from engine.errors import EngineError

INNER_ORDER = ("Fw", "Fh", "X", "Y", "C", "K", "N")  # how the loops inside level 0 are written out
BUFFER_NAMES = {"I": "IB", "W": "KB", "O": "OB"}


@dataclass(frozen=True)
class Blocking:
    """Loop tiles per on-chip level, the loop order of each block above them, and the spatial unrolling.

    `tiles[l]` gives, in `DIMS` order, the bounds of the loops inside memory level l
    (cumulative: X_l in the paper's notation); `dims` are the temporal bounds (the layer's
    bounds, or with an array ceil(bound / unroll)). `orders[l]` orders (innermost first) the
    loops of the block between level l and level l + 1, the last block iterating over DRAM.
    `unroll` gives the factor each dim is unrolled by over the PE array (all 1 without one);
    the spatial loops sit below every temporal loop, so a PE's tile of a dim is strided.
    """

    dims: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...]
    orders: tuple[tuple[str, ...], ...]
    unroll: tuple[int, ...] = (1,) * len(DIMS)
    inner: tuple[str, ...] = INNER_ORDER  # order (innermost first) of the loops inside level 0's tile

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "tiles", tuple(tuple(t) for t in self.tiles))
        object.__setattr__(self, "orders", tuple(tuple(o) for o in self.orders))
        object.__setattr__(self, "unroll", tuple(self.unroll))
        if len(self.unroll) != len(DIMS) or any(isinstance(f, bool) or not isinstance(f, int) or f < 1
                                                for f in self.unroll):
            raise EngineError(f"blocking: unroll must give a whole factor >= 1 for each of {', '.join(DIMS)}, "
                              f"got {self.unroll!r}")
        if len(self.tiles) != len(self.orders) or not self.tiles:
            raise EngineError("blocking: give one tile and one loop order per on-chip level")
        object.__setattr__(self, "inner", tuple(self.inner))
        for o in (*self.orders, self.inner):
            if sorted(o) != sorted(DIMS):
                raise EngineError(f"blocking: loop order {o} must list each of {', '.join(DIMS)} once")
        bounds = (*self.tiles, self.dims)
        for l, (inner, outer) in enumerate(zip(bounds, bounds[1:])):
            if len(inner) != len(DIMS):
                raise EngineError(f"blocking: tile of level {l} needs {len(DIMS)} bounds ({', '.join(DIMS)})")
            for d, a, b in zip(DIMS, inner, outer):
                if not isinstance(a, int) or a < 1 or b % a:
                    raise EngineError(f"blocking: {d} tile {a!r} at level {l} must be a positive divisor of "
                                      f"the enclosing bound {b}")

    @classmethod
    def of(cls, layer: Layer, *tiles: dict, orders=None, unroll: dict | None = None) -> Blocking:
        """A blocking from one dict per on-chip level (dim -> bound); a dim left out keeps the bound below.

        `orders` are strings or tuples of dim names, innermost first; a block's missing
        dims follow in `DIMS` order. Default: `DIMS` order for every block. `unroll` maps
        dims to their factor over the PE array (tiles are then in temporal steps).
        """
        unknown = set(unroll or {}) - set(DIMS)
        if unknown:
            raise EngineError(f"blocking: unknown unrolled loop(s) {sorted(unknown)}; use {', '.join(DIMS)}")
        factors = tuple((unroll or {}).get(d, 1) for d in DIMS)
        rows, prev = [], dict.fromkeys(DIMS, 1)
        for t in tiles:
            unknown = set(t) - set(DIMS)
            if unknown:
                raise EngineError(f"blocking: unknown loop(s) {sorted(unknown)}; use {', '.join(DIMS)}")
            prev = {**prev, **t}
            rows.append(tuple(prev[d] for d in DIMS))
        orders = orders or [DIMS] * len(rows)
        full = []
        for o in orders:
            o = _split_order(o) if isinstance(o, str) else tuple(o)
            full.append(o + tuple(d for d in DIMS if d not in o))
        return cls(SpatialView.of(layer, factors).dims, tuple(rows), tuple(full), factors)

    def trips(self, block: int) -> dict[str, int]:
        """Iterations of each loop of block `block` (the loops between level `block` and the next)."""
        outer = self.tiles[block + 1] if block + 1 < len(self.tiles) else self.dims
        return {d: b // a for d, a, b in zip(DIMS, self.tiles[block], outer)}


@dataclass(frozen=True)
class SpatialView:
    """A layer seen through a spatial unrolling: temporal bounds, one PE's loop nest, the padded whole.

    The unrolled loops are innermost, so PE j of a dim unrolled by s handles indices j, j + s, ...:
    its nest has the temporal bounds with stride (or dilation) times s. Bounds that the factor
    does not divide are padded up (ceil): the padded steps keep PEs idle (cycles count them), a
    level stores the whole padded tile, but only real words move: the last, partial tile of a
    dim loads only the indices that exist (`real`).
    """

    layer: Layer
    unroll: tuple[int, ...]
    pe: Layer  # one PE's loop nest (temporal bounds, strided)

    @classmethod
    def of(cls, layer: Layer, unroll) -> SpatialView:
        return _view(layer, tuple(unroll))

    @cached_property
    def padded(self) -> Layer:
        """The layer padded to multiples of the unrolling (made on first use: most searches never ask)."""
        dims: dict[str, Any] = {d: n * f for d, n, f in zip(DIMS, self.dims, self.unroll)}
        return Layer(**dims, stride=self.layer.stride,
                     dilation=self.layer.dilation, has_weights=self.layer.has_weights)

    @cached_property
    def dims(self) -> tuple[int, ...]:
        return self.pe.dims

    @cached_property
    def lanes(self) -> int:
        """PEs the unrolling keeps busy (padded lanes included)."""
        return math.prod(self.unroll)

    def stored(self, tensor: str, tile, inside: bool) -> int:
        """Words of `tensor` a level keeps for a temporal tile: per PE (inside), or the array's whole (padded) tile."""
        if inside:
            return self.pe.footprint(tensor, tile)
        return self.padded.footprint(tensor, tuple(a * f for a, f in zip(tile, self.unroll)))

    def positions(self, tensor: str, tile) -> int:
        """Distinct tiles of `tensor` in the layer: the tile's positions along the loops that index it."""
        return math.prod(n // a for d, n, a in zip(DIMS, self.dims, tile) if d in RELEVANT[tensor])

    def real(self, tensor: str, tile, inside: bool, clip: bool = False) -> int:
        """Real words of `tensor` summed over every position of a temporal tile (per busy PE inside the array,
        the array's whole tile outside): padded indices move nothing, so one load of each tile moves this. With
        `clip` the input's zero border is left out too (what DRAM moves: the border is made on chip)."""
        return _real_words(self.layer, self.unroll, tensor, tuple(tile), inside, clip)

    def moved(self, tensor: str, count: int, tile, inside: bool, clip: bool = False) -> int:
        """Real words `count` loads of a temporal tile move (every position is loaded equally often)."""
        return count // self.positions(tensor, tile) * self.real(tensor, tile, inside, clip)


@lru_cache(maxsize=65536)
def _view(layer: Layer, unroll: tuple[int, ...]) -> SpatialView:
    t = {d: -(-getattr(layer, d) // f) for d, f in zip(DIMS, unroll)}
    s = dict(zip(DIMS, unroll))
    (sx, sy), (dx, dy) = layer.stride, layer.dilation
    pe = Layer(**t, stride=(sx * s["X"], sy * s["Y"]), dilation=(dx * s["Fw"], dy * s["Fh"]),
               has_weights=layer.has_weights)
    return SpatialView(layer, unroll, pe)


def lane_copies(unroll: tuple[int, ...], tensor: str, inside: bool) -> int:
    """Copies of each word of `tensor` inside the array (one per PE lane of a loop that does not index it), 1 outside."""
    return math.prod(s for d, s in zip(DIMS, unroll) if d not in RELEVANT[tensor]) if inside else 1


@lru_cache(maxsize=65536)
def _real_words(layer: Layer, unroll: tuple[int, ...], tensor: str, tile: tuple[int, ...], inside: bool,
                clip: bool) -> int:
    """`SpatialView.real`: every real index of a loop that does not slide a window appears once over the positions,
    so the product of the real bounds, times the input's column and row spans with their windows (`window_sum`);
    inside the array each PE lane of a loop that does not index the tensor holds its own copy."""
    if tensor == "W" and not layer.has_weights:
        return 0
    copies = lane_copies(unroll, tensor, inside)
    if tensor != "I":
        return copies * math.prod(getattr(layer, d) for d in DIMS if d in RELEVANT[tensor])
    t = dict(zip(DIMS, tile))
    return copies * layer.N * layer.C * math.prod(window_sum(layer, unroll, axis, t[out], t[win], inside, clip)
                                                  for axis, (out, win) in enumerate((("X", "Fw"), ("Y", "Fh"))))


@lru_cache(maxsize=65536)
def window_sum(layer: Layer, unroll: tuple[int, ...], axis: int, a: int, f: int, inside: bool,
               clip: bool = False) -> int:
    """Real input positions along `axis` (0: X with Fw, 1: Y with Fh) summed over the positions of a temporal tile
    of `a` output and `f` window steps (and over the busy PEs inside the array): the last tile of a padded dim is
    partial, and a PE lane past the bound touches nothing."""
    out, win = (("X", "Fw"), ("Y", "Fh"))[axis]
    s = dict(zip(DIMS, unroll))
    stride, dilation = layer.stride[axis], layer.dilation[axis]
    if inside:
        stride, dilation = stride * s[out], dilation * s[win]
    padded = sum(m * n * (span(x, w, stride, dilation) if x and w else 0)
                 for x, m in _extents(getattr(layer, out), s[out], a, inside)
                 for w, n in _extents(getattr(layer, win), s[win], f, inside))
    return padded - _border_words(layer, unroll, axis, a, f, inside) if clip else padded


def _border_words(layer: Layer, unroll: tuple[int, ...], axis: int, a: int, f: int, inside: bool) -> int:
    """Zero-border positions along `axis` that the tiles of `window_sum` cover, summed like it: padding is made on
    chip, so these are never moved. Only tiles that reach the border are enumerated (a few per layer)."""
    if not any(layer.pad[2 * axis:2 * axis + 2]):
        return 0
    out, win = (("X", "Fw"), ("Y", "Fh"))[axis]
    s = dict(zip(DIMS, unroll))
    outs = _index_groups(getattr(layer, out), s[out], a, inside)
    taps = _index_groups(getattr(layer, win), s[win], f, inside)
    stride, dilation = layer.stride[axis], layer.dilation[axis]
    lo, hi = layer.real_range(axis)
    o_lo, o_hi = (np.array([g[i] for g in outs]) for i in (0, -1))
    t_lo, t_hi = (np.array([g[i] for g in taps]) for i in (0, -1))
    near = ((o_lo[:, None] * stride + t_lo[None, :] * dilation < lo)
            | (o_hi[:, None] * stride + t_hi[None, :] * dilation >= hi))
    total = 0
    for i, j in zip(*np.nonzero(near)):
        coords = np.unique(outs[i][:, None] * stride + taps[j][None, :] * dilation)
        total += int(np.count_nonzero((coords < lo) | (coords >= hi)))
    return total


def _index_groups(bound: int, s: int, a: int, inside: bool) -> list[np.ndarray]:
    """The indices of a dim each tile of `a` temporal steps (unrolled by `s`) covers: the array's whole tile outside
    the array, one PE lane's strided share inside (empty lanes past the bound left out), as `_extents` counts them."""
    t = -(-bound // s)
    starts = range(0, (t // a) * a * s, a * s)
    if not inside:
        return [np.arange(p, min(p + a * s, bound)) for p in starts]
    return [g for p in starts for j in range(s) if len(g := np.arange(p + j, min(p + a * s, bound), s))]


def _extents(bound: int, s: int, a: int, inside: bool) -> list[tuple[int, int]]:
    """(real extent, how many) of a dim's tiles of `a` temporal steps, unrolled by `s` (per PE lane inside)."""
    t = -(-bound // s)
    n, r = t // a, bound - (t - 1) * s  # positions; real lanes of the last step
    out = [(a, (n - 1) * s + r), (a - 1, s - r)] if inside else [(a * s, n - 1), (a * s - s + r, 1)]
    return [(x, k) for x, k in out if k]


def _split_order(text: str) -> tuple[str, ...]:
    """'FwFhXYCK' or 'Fw Fh X Y' -> ('Fw', 'Fh', 'X', 'Y', ...)."""
    out, i = [], 0
    text = text.replace(" ", "")
    while i < len(text):
        step = 2 if text[i] == "F" else 1
        out.append(text[i:i + step])
        i += step
    if any(d not in DIMS for d in out):
        raise EngineError(f"blocking: cannot read loop order '{text}'; use the names {', '.join(DIMS)}")
    return tuple(out)


@dataclass(frozen=True)
class LevelAccess:
    """One tensor's traffic at one memory level, in words (all groups)."""

    level: str
    tensor: str
    reads: int  # words this level serves to the level below or to the MACs (and, both-ends, reads out upwards)
    writes: int  # partial outputs written back into it from below (and, both-ends, the fills it receives)
    fills: int  # words it receives from the level above
    stored_words: int  # the tile it keeps (0 where the tensor passes through)
    energy_pj: float  # reads x read energy + writes x write energy (Eq. 1), partial sums at their width
    passing: int = 0  # words that cross this level between a level below and one above without stopping

    @property
    def accesses(self) -> int:
        return self.reads + self.writes


@dataclass(frozen=True)
class Cost:
    """A blocking's accesses and energy on a hierarchy; `fits` is False when a tile overflows a level."""

    accesses: tuple[LevelAccess, ...]
    macs: int
    mac_pj: float
    fits: bool
    overflow: tuple[str, ...]
    cycles: int = 0  # temporal steps of the nest, all groups (one MAC per busy PE per step)
    pes: int = 1  # PEs of the array (1 without one)

    @property
    def memory_pj(self) -> float:
        """Energy of the memory accesses and of the array's multicast and reduction (pJ)."""
        return sum(a.energy_pj for a in self.accesses)

    @property
    def utilisation(self) -> float:
        """Useful MACs / (PEs x steps): below 1 when the unrolling leaves PEs idle or pads a bound."""
        return self.macs / (self.pes * self.cycles) if self.cycles else 1.0

    @property
    def total_pj(self) -> float:
        return self.memory_pj + self.mac_pj

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.level for a in self.accesses))

    def at(self, level: str, tensor: str | None = None) -> int:
        """Accesses (reads + writes) of `level`, of one tensor or all."""
        return sum(a.accesses for a in self.accesses if a.level == level and tensor in (None, a.tensor))

    def through(self, level: str, tensor: str | None = None) -> int:
        """Accesses a cache at `level` would see: its own plus the words crossing it (a cache cannot be bypassed)."""
        return sum(a.accesses + a.passing for a in self.accesses if a.level == level and tensor in (None, a.tensor))

    def energy_at(self, level: str | None = None, tensor: str | None = None) -> float:
        return sum(a.energy_pj for a in self.accesses if level in (None, a.level) and tensor in (None, a.tensor))


def run_length(tensor: str, loops) -> int:
    """Reuse of a tile: trips of the enclosing loops, innermost first, until one indexes `tensor`.

    Loops of one iteration neither reuse nor break reuse.
    """
    rel, run = RELEVANT[tensor], 1
    for dim, trip in loops:
        if trip == 1:
            continue
        if dim in rel:
            break
        run *= trip
    return run


def holders(hierarchy: Hierarchy, tensor: str) -> list[int]:
    """The levels that hold `tensor`, innermost first, ending with the last (DRAM)."""
    return [l for l, mem in enumerate(hierarchy.levels) if mem.keeps(tensor)]


def stored_levels(tensor: str, blocking: Blocking, hierarchy: Hierarchy | None = None) -> list[int]:
    """On-chip levels that keep `tensor`: its innermost holder, and each holder whose tile of it differs from
    the previous holder's (with no hierarchy: every level holds every tensor)."""
    idx = [DIMS.index(d) for d in RELEVANT[tensor]]
    t, m = blocking.tiles, len(blocking.tiles)
    held = [l for l in holders(hierarchy, tensor) if l < m] if hierarchy else list(range(m))
    return held[:1] + [h for p, h in zip(held, held[1:]) if any(t[h][i] != t[p][i] for i in idx)]


def evaluate(layer: Layer, hierarchy: Hierarchy, blocking: Blocking) -> Cost:
    """Accesses and energy per level and tensor of `blocking` for `layer` on `hierarchy`.

    Each operand moves through the levels that hold it; the MACs read it from its innermost
    holder (through the array's network when that holder is outside the PEs), and a stored tile
    is refilled from the next level up that keeps the operand.
    """
    m = len(hierarchy.on_chip)
    if len(blocking.tiles) != m:
        raise EngineError(f"blocking has {len(blocking.tiles)} tile levels but hierarchy '{hierarchy.name}' has "
                          f"{m} on-chip levels ({', '.join(x.name for x in hierarchy.on_chip)})")
    if hierarchy.array is not None:
        hierarchy.array.check(blocking.unroll)
    elif any(f > 1 for f in blocking.unroll):
        raise EngineError(f"blocking unrolls {dict(zip(DIMS, blocking.unroll))} but hierarchy '{hierarchy.name}' "
                          "has no PE array")
    view = SpatialView.of(layer, blocking.unroll)
    if blocking.dims != view.dims:
        raise EngineError(f"blocking was made for bounds {blocking.dims}, layer '{layer.name}' has {view.dims} "
                          f"(unrolled by {blocking.unroll})")
    loops = [[(d, blocking.trips(b)[d]) for d in blocking.orders[b]] for b in range(m)]
    cycles = math.prod(view.dims)
    g = layer.groups
    inside = hierarchy.inside
    reads = {(l, T): 0 for l in range(m + 1) for T in TENSORS}
    writes, fills, stored, passing, noc = (dict.fromkeys(reads, 0) for _ in range(5))
    pj = dict.fromkeys(reads, 0.0)
    def moved(T, count, tile, level, clip):
        """(words, first-fill words) of `count` loads of a tile of T into `level`'s side of the array (`clip`: without
        the input's zero border, which only DRAM transfers leave out)."""
        return view.moved(T, count, tile, inside(level), clip), view.real(T, view.dims, inside(level), clip)

    for T in layer.tensors:
        held = holders(hierarchy, T)

        # the MACs read their operands from the innermost holder, one word per busy PE per step
        keep = stored_levels(T, blocking, hierarchy)
        chain = [(None, held[0]), *zip(keep, [*keep[1:], m])]
        for child, src in chain:
            if child is None:
                count, tile, side = cycles, (1,) * len(DIMS), 0
                if hierarchy.stationary and T != "O":  # reused over the innermost loops that skip it
                    count //= run_length(T, [(d, blocking.tiles[0][DIMS.index(d)]) for d in blocking.inner])
            else:
                above = [lp for b in range(child, m) for lp in loops[b]]
                count = math.prod(t for _, t in above) // run_length(T, above)
                tile, side = blocking.tiles[child], child
                stored[child, T] = view.stored(T, tile, inside(child))
            clip = src == m  # DRAM moves only real input positions: the zero border is made on chip
            f_child, size_child = moved(T, count, tile, side, clip)
            f_src, size_src = (f_child, size_child) if inside(side) == inside(src) else moved(T, count, tile, src, clip)
            psum = T == "O" and f_src > size_src  # some output crosses this boundary more than once
            x = hierarchy.psum_scale if psum else 1.0
            mem = hierarchy.levels[src]
            if T == "O":  # written up; read back down, but for each output's first fill (its zero, but both-ends)
                back = f_src if hierarchy.both_ends and psum else f_src - size_src
                reads[src, T] += back
                writes[src, T] += f_src
                pj[src, T] += x * (back * mem.energy(T) + f_src * mem.write_energy(T))
                if child is not None:
                    fills[child, T] += f_child - size_child
            else:
                reads[src, T] += f_src
                pj[src, T] += f_src * mem.energy(T)
                if child is not None:
                    fills[child, T] += f_child
            if hierarchy.both_ends and child is not None:  # the level the tile lands in pays its end too
                below = max(h for h in held if h < src)
                f_below = f_child if inside(below) == inside(side) else view.moved(T, count, tile, inside(below), clip)
                low = hierarchy.levels[below]
                if T == "O":  # outputs read out on their way up, partial sums written back in
                    reads[below, T] += f_below
                    writes[below, T] += f_src - size_src
                    pj[below, T] += x * (f_below * low.energy(T) + (f_src - size_src) * low.write_energy(T))
                else:
                    writes[below, T] += f_below
                    pj[below, T] += f_below * low.write_energy(T)
            if hierarchy.array is not None and (child is None or inside(child)) and not inside(src):
                f_pe, size_pe = view.moved(T, count, tile, True, clip), view.real(T, view.dims, True, clip)
                noc[src, T] += 2 * f_pe - size_pe if T == "O" else f_pe  # every busy PE's words cross the network
            for k in range(side + 1 if child is not None else 0, src):
                if hierarchy.levels[k].keeps(T):
                    passing[k, T] += 2 * f_src - size_src if T == "O" else f_src
    overflow = _overflow(layer, hierarchy, stored, m)
    acc = [LevelAccess(hierarchy.levels[l].name, T, g * reads[l, T], g * writes[l, T], g * fills[l, T],
                       stored[l, T], g * pj[l, T], g * passing[l, T])
           for l in range(m + 1) for T in layer.tensors]
    if hierarchy.array is not None:
        e = dict(zip(TENSORS, hierarchy.array.noc_pj))
        acc += [LevelAccess(hierarchy.array.name, T, g * sum(noc[l, T] for l in range(m + 1)), 0, 0, 0,
                            g * sum(noc[l, T] for l in range(m + 1)) * e[T]) for T in layer.tensors]
    macs = g * math.prod(layer.dims)
    pes = hierarchy.array.pes if hierarchy.array else 1
    return Cost(tuple(acc), macs, macs * hierarchy.mac_pj, not overflow, overflow, g * cycles, pes)


def _overflow(layer: Layer, hierarchy: Hierarchy, stored: dict, m: int) -> tuple[str, ...]:
    """Messages for each on-chip level (or IB/KB/OB) whose tiles do not fit (per PE inside the array)."""
    out = []
    for l in range(m):
        mem = hierarchy.levels[l]
        held = [T for T in layer.tensors if mem.keeps(T)]
        per = " per PE" if hierarchy.inside(l) else ""
        if mem.split_bytes:
            for T in held:
                cap = hierarchy.capacity_words(l, T)
                if stored[l, T] > cap:
                    out.append(f"{mem.name} {BUFFER_NAMES[T]}: tile of {stored[l, T]} words > {cap} words{per}")
        else:
            used, cap = sum(stored[l, T] for T in held), hierarchy.capacity_words(l)
            if used > cap:
                out.append(f"{mem.name}: tiles of {used} words > {cap} words{per}")
    return tuple(out)


def describe(blocking: Blocking, level_names=None, hierarchy: Hierarchy | None = None) -> list[str]:
    """The loop nest as text lines, outermost first and the MAC innermost (the paper's pseudo-code).

    With the `hierarchy`, each level lists the tile of each operand it holds (per PE inside the array,
    the whole array's outside it; "passes" where the tile is the one below), and the spatial unrolling
    is written out; loop bounds count temporal steps.
    """
    m = len(blocking.tiles)
    names = list(level_names) if level_names else [f"level {l}" for l in range(m)] + ["DRAM"]
    lines, depth = [], 0
    for b in reversed(range(m)):
        trips = blocking.trips(b)
        outer = blocking.tiles[b + 1] if b + 1 < m else blocking.dims
        lines.append("  " * depth + f"# block over {names[b + 1]}")
        for d in reversed(blocking.orders[b]):
            if trips[d] > 1:
                step = blocking.tiles[b][DIMS.index(d)]
                lines.append("  " * depth + f"for {d.lower()}{b + 1} in range(0, {outer[DIMS.index(d)]}, {step}):")
                depth += 1
        if hierarchy is None:
            tile = ", ".join(f"{d}={v}" for d, v in zip(DIMS, blocking.tiles[b]) if v > 1) or "one element"
            lines.append("  " * depth + f"# {names[b]} holds the tile {tile}")
        else:
            lines.append("  " * depth + f"# {names[b]} holds{' (per PE)' if hierarchy.inside(b) else ''}: "
                         + "; ".join(_operand_tile(blocking, hierarchy, b, T) for T in TENSORS
                                     if hierarchy.levels[b].keeps(T)))
    for d in reversed(blocking.inner):
        v = blocking.tiles[0][DIMS.index(d)]
        if v > 1:
            lines.append("  " * depth + f"for {d.lower()}0 in range({v}):")
            depth += 1
    if hierarchy is not None and hierarchy.array is not None:
        spatial = [f"{d}={f} on {hierarchy.array.axis_of(d)}" for d, f in zip(DIMS, blocking.unroll) if f > 1]
        size = "x".join(str(n) for _, n in hierarchy.array.axes)
        busy = math.prod(blocking.unroll)
        lines.append("  " * depth + f"# spatial over the {size} {hierarchy.array.name}: "
                     f"{', '.join(spatial) or 'nothing unrolled'} ({busy} of {hierarchy.array.pes} PEs busy)")
        lines.append("  " * depth + "parallel for each busy PE:")
        depth += 1
    lines.append("  " * depth + "output[n, k, y, x] += input[n, c, y + fh, x + fw] * kernel[k, c, fh, fw]")
    return lines


def _operand_tile(blocking: Blocking, hierarchy: Hierarchy, level: int, T: str) -> str:
    """'I X=4 C=2' (the bounds of the loops that index T), or 'I passes' where the tile is the one below."""
    if level not in stored_levels(T, blocking, hierarchy):
        return f"{T} passes"
    tile = blocking.tiles[level] if hierarchy.inside(level) else [v * f for v, f in zip(blocking.tiles[level],
                                                                                        blocking.unroll)]
    dims = " ".join(f"{d}={v}" for d, v in zip(DIMS, tile) if v > 1 and d in RELEVANT[T])
    return f"{T} {dims or 'one element'}"
