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

from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, RELEVANT, TENSORS, Layer
from engine.errors import EngineError

INNER_ORDER = ("Fw", "Fh", "X", "Y", "C", "K", "N")  # how the loops inside level 0 are written out
BUFFER_NAMES = {"I": "IB", "W": "KB", "O": "OB"}


@dataclass(frozen=True)
class Blocking:
    """Loop tiles per on-chip level and the loop order of each block above them.

    `tiles[l]` gives, in `DIMS` order, the bounds of the loops inside memory level l
    (cumulative: X_l in the paper's notation); `dims` are the layer's full bounds.
    `orders[l]` orders (innermost first) the loops of the block between level l and
    level l + 1, the last block iterating over DRAM.
    """

    dims: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...]
    orders: tuple[tuple[str, ...], ...]

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "tiles", tuple(tuple(t) for t in self.tiles))
        object.__setattr__(self, "orders", tuple(tuple(o) for o in self.orders))
        if len(self.tiles) != len(self.orders) or not self.tiles:
            raise EngineError("blocking: give one tile and one loop order per on-chip level")
        for o in self.orders:
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
    def of(cls, layer: Layer, *tiles: dict, orders=None) -> "Blocking":
        """A blocking from one dict per on-chip level (dim -> bound); a dim left out keeps the bound below.

        `orders` are strings or tuples of dim names, innermost first; a block's missing
        dims follow in `DIMS` order. Default: `DIMS` order for every block.
        """
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
        return cls(layer.dims, tuple(rows), tuple(full))

    def trips(self, block: int) -> dict[str, int]:
        """Iterations of each loop of block `block` (the loops between level `block` and the next)."""
        outer = self.tiles[block + 1] if block + 1 < len(self.tiles) else self.dims
        return {d: b // a for d, a, b in zip(DIMS, self.tiles[block], outer)}


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
    reads: int  # words this level serves to the level below or to the MACs
    writes: int  # partial outputs written back into it from below
    fills: int  # words it receives from the level above
    stored_words: int  # the tile it keeps (0 where the tensor passes through)
    energy_pj: float  # (reads + writes) x per-word energy (Eq. 1)
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

    @property
    def memory_pj(self) -> float:
        return sum(a.energy_pj for a in self.accesses)

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


def stored_levels(tensor: str, blocking: Blocking) -> list[int]:
    """On-chip levels that keep `tensor`: level 0, and each level whose tile of it differs from the one below."""
    idx = [DIMS.index(d) for d in RELEVANT[tensor]]
    t = blocking.tiles
    return [0] + [l for l in range(1, len(t)) if any(t[l][i] != t[l - 1][i] for i in idx)]


def evaluate(layer: Layer, hierarchy: Hierarchy, blocking: Blocking) -> Cost:
    """Accesses and energy per level and tensor of `blocking` for `layer` on `hierarchy`."""
    m = len(hierarchy.on_chip)
    if len(blocking.tiles) != m:
        raise EngineError(f"blocking has {len(blocking.tiles)} tile levels but hierarchy '{hierarchy.name}' has "
                          f"{m} on-chip levels ({', '.join(x.name for x in hierarchy.on_chip)})")
    if blocking.dims != layer.dims:
        raise EngineError(f"blocking was made for bounds {blocking.dims}, layer '{layer.name}' has {layer.dims}")
    loops = [[(d, blocking.trips(b)[d]) for d in blocking.orders[b]] for b in range(m)]
    macs = math.prod(layer.dims)
    g = layer.groups
    reads = {(l, T): 0 for l in range(m + 1) for T in TENSORS}
    writes, fills, stored, passing = (dict.fromkeys(reads, 0) for _ in range(4))
    for T in layer.tensors:
        size = layer.size(T)
        keep = stored_levels(T, blocking)
        for i, l in enumerate(keep):
            src = keep[i + 1] if i + 1 < len(keep) else m
            above = [lp for b in range(l, m) for lp in loops[b]]
            fp = layer.footprint(T, blocking.tiles[l])
            stored[l, T] = fp
            f = fp * math.prod(t for _, t in above) // run_length(T, above)
            moved = 2 * f - size if T == "O" else f
            for k in range(l + 1, src):
                passing[k, T] += moved
            if T == "O":
                reads[src, T] += f - size
                writes[src, T] += f
                fills[l, T] += f - size
            else:
                reads[src, T] += f
                fills[l, T] += f
        if T == "O":
            reads[0, T] += macs - size
            writes[0, T] += macs
        else:
            reads[0, T] += macs
    overflow = _overflow(layer, hierarchy, stored, m)
    acc = tuple(LevelAccess(hierarchy.levels[l].name, T, g * reads[l, T], g * writes[l, T], g * fills[l, T],
                            stored[l, T], g * (reads[l, T] + writes[l, T]) * hierarchy.levels[l].energy(T),
                            g * passing[l, T])
                for l in range(m + 1) for T in layer.tensors)
    return Cost(acc, g * macs, g * macs * hierarchy.mac_pj, not overflow, overflow)


def _overflow(layer: Layer, hierarchy: Hierarchy, stored: dict, m: int) -> tuple[str, ...]:
    """Messages for each on-chip level (or IB/KB/OB) whose tiles do not fit."""
    out = []
    for l in range(m):
        mem = hierarchy.levels[l]
        if mem.split_bytes:
            for T in layer.tensors:
                cap = hierarchy.capacity_words(l, T)
                if stored[l, T] > cap:
                    out.append(f"{mem.name} {BUFFER_NAMES[T]}: tile of {stored[l, T]} words > {cap} words")
        else:
            used, cap = sum(stored[l, T] for T in layer.tensors), hierarchy.capacity_words(l)
            if used > cap:
                out.append(f"{mem.name}: tiles of {used} words > {cap} words")
    return tuple(out)


def describe(blocking: Blocking, level_names=None) -> list[str]:
    """The loop nest as text lines, outermost first and the MAC innermost (the paper's pseudo-code)."""
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
        tile = ", ".join(f"{d}={v}" for d, v in zip(DIMS, blocking.tiles[b]) if v > 1) or "one element"
        lines.append("  " * depth + f"# {names[b]} holds the tile {tile}")
    for d in reversed(INNER_ORDER):
        v = blocking.tiles[0][DIMS.index(d)]
        if v > 1:
            lines.append("  " * depth + f"for {d.lower()}0 in range({v}):")
            depth += 1
    lines.append("  " * depth + "output[n, k, y, x] += input[n, c, y + fh, x + fw] * kernel[k, c, fh, fw]")
    return lines
