"""Co-design (Sec. 3.5-3.6): the blocking string decides the memories, one SRAM per buffer it creates.

"From the string we first compute the size and number of levels of memory in the design,
determine the number of accesses each memory will need to serve, and then estimate the total
energy" (Sec. 3.5). A blocking with m on-chip levels keeps at level l a buffer for each tensor
whose tile grows there (Table 2's IB_l, KB_l, OB_l; level 0 keeps all three). Each buffer is
its own memory, exactly the size of its tile, priced by Table 3 at that size; together they must
fit the on-chip budget. So the energy of a (child tile, parent tile) boundary depends only on
the two tiles, as in the fixed-hierarchy search, but its price now comes from the parent tile
and a byte budget couples the levels.

Search: one on-chip level is enumerated; two are exact (branch and bound over (child, parent)
tile pairs, every pair that could beat the best found is scored); three or more start from the
best design with one level fewer, that level duplicated at each position, and move one level's
tile at a time to the best choice between its neighbours until no move helps (the paper's
inner-to-outer iterative search is also a heuristic). `method="exhaustive"` scores every
blocking string with `evaluate` on its own fitted memories (the oracle, small layers only).

With a PE array (`array=`, e.g. DianNao's 16 x 16 `Cin|Cout` NFU, which the paper keeps: "keeping the
same core datapath design"), every co-designed level sits outside the array, as DianNao's NBin, SB and
NBout feed its NFU: level 0 serves each step's unrolled words (16 inputs multicast over 16 lanes, 256
weights, 16 partial sums reduced by the adder trees), each buffer holds the whole array's tile, and the
search runs per unrolling (least floor first; an unrolling whose floor cannot beat the best is skipped).
With `stationary` (a sensitivity: DianNao's NFU reads its 256 weights from SB every cycle), an input or weight
word stays at the multiplier over the loops inside level 0's tile that do not index it (`Hierarchy.stationary`),
so level 0 serves it once per such run; the best of the three canonical orders of those loops is kept per tile.

Several layers (Sec. 3.6): each layer's own design, and the union of them (each buffer at its
largest size) when it fits the budget, are the candidate common designs; every layer is blocked
on each candidate with the fixed-hierarchy optimizer and the candidate of least total energy wins.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from engine.blocking.bounds import mac_words
from engine.blocking.dp import tile_pairs
from engine.blocking.exhaustive import every_blocking, every_unroll
from engine.blocking.grid import CANONICAL, GROUP_ORDER, refill_words, tile_grid, unrollings
from engine.blocking.hierarchy import Hierarchy, Memory, SpatialArray
from engine.blocking.layer import DIMS, TENSORS, Layer
from engine.blocking.model import BUFFER_NAMES, INNER_ORDER, Blocking, SpatialView, evaluate, stored_levels
from engine.blocking.optimizer import BlockingResult, block
from engine.errors import EngineError, UnknownNameError
from engine.memory_energy import TABLE3, TABLE3_DRAM_PJ, TABLE3_WIDTHS, access_energy_pj

KB = 1024
SMALL_RULES = ("floor", "extrapolate")
METHODS = ("exact", "exhaustive")
SEED_TILES = 32  # children and parents of least lower bound whose best partners give the first upper bound
PAIR_CHUNK = 1_000_000  # (child, parent) pairs scored per numpy batch
MAX_SWEEPS = 50  # level-move sweeps of the search above two levels (it stops earlier when no move helps)


@dataclass(frozen=True)
class BufferPricing:
    """Table 3 energy of one word access to a buffer of a given size, at one memory width.

    Table 3 starts at 1 KB. `small="floor"` prices smaller buffers at the 1 KB row;
    `small="extrapolate"` continues the 1-2 KB slope down to 0.25 KB (the caption's smallest
    SRAM) and stays flat below it: a stand-in for the register files whose energies the paper
    does not print (Sec. 4.2).
    """

    width_bits: int = 512
    word_bits: int = 16
    small: str = "floor"

    def __post_init__(self):
        if self.small not in SMALL_RULES:
            raise UnknownNameError("small-buffer pricing rule", self.small, SMALL_RULES)
        if self.width_bits not in TABLE3_WIDTHS:
            raise UnknownNameError("Table 3 memory width (bits)", str(self.width_bits), [str(w) for w in TABLE3_WIDTHS])

    def energy(self, nbytes: float) -> float:
        """pJ per word access of a buffer of `nbytes`."""
        if self.small == "extrapolate" and nbytes < KB:
            col = TABLE3_WIDTHS.index(self.width_bits)
            e1, e2 = TABLE3[0][1][col], TABLE3[1][1][col]
            return (e1 - (e2 - e1) * math.log2(KB / max(nbytes, KB / 4))) * self.word_bits / 16
        return access_energy_pj(nbytes, width_bits=self.width_bits, word_bits=self.word_bits)

    def bytes_of(self, words):
        """Bytes of a buffer of `words` words (an int, or a numpy array)."""
        return np.ceil(np.asarray(words, dtype=np.float64) * self.word_bits / 8)

    @property
    def dram_pj(self) -> float:
        return TABLE3_DRAM_PJ * self.word_bits / 16


@dataclass(frozen=True)
class Buffer:
    """One memory of a co-designed hierarchy: a tensor's tile at one level (Table 2's IB_l, KB_l or OB_l)."""

    name: str
    level: int
    tensor: str
    nbytes: int
    energy_pj: float  # per word access


@dataclass(frozen=True)
class CodesignResult:
    """The co-designed memories (one per buffer) of least total energy over the layers, and their blockings."""

    hierarchy: Hierarchy  # every on-chip level split into IB/KB/OB buffers (0 bytes: the tensor passes through)
    results: tuple[BlockingResult, ...]  # one per layer, on `hierarchy`
    points: tuple[tuple[tuple[int, ...], float], ...]  # candidate designs: (buffer bytes, level by level IB KB OB; pJ)
    total_bytes: int
    seconds: float
    optimal: bool  # every layer's design is proven least energy (one layer, at most two levels)
    evaluated: int  # (child tile, parent tile) pairs and level moves scored

    @property
    def sizes(self) -> tuple[int, ...]:
        """Bytes of each on-chip level (its buffers together)."""
        return tuple(m.bounded_bytes for m in self.hierarchy.on_chip)

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """The buffers that exist (more than 0 bytes), innermost level first."""
        return tuple(Buffer(f"{BUFFER_NAMES[T]}{l}", l, T, b, m.energy(T))
                     for l, m in enumerate(self.hierarchy.on_chip) for T, b in zip(TENSORS, m.split_bytes or ()) if b)

    @property
    def energy_pj(self) -> float:
        """Memory energy (pJ) of all layers."""
        return sum(r.energy_pj for r in self.results)


def fitted_hierarchy(layer: Layer, blocking: Blocking, pricing: BufferPricing = BufferPricing(),
                     array: SpatialArray | None = None, stationary: bool = False) -> Hierarchy:
    """The memories a blocking string creates (Sec. 3.5): at each level, an IB/KB/OB buffer exactly the size of the
    tile of each tensor kept there (Table 2's buffer sizes; with an `array`, the whole array's tile, every level
    outside the PEs), priced by Table 3 at that size; then DRAM."""
    view = SpatialView.of(layer, blocking.unroll)
    levels = []
    for l, tile in enumerate(blocking.tiles):
        words = [view.stored(T, tile, False) if T in layer.tensors and l in stored_levels(T, blocking) else 0
                 for T in TENSORS]
        nbytes = tuple(int(b) for b in pricing.bytes_of(words))
        levels.append(Memory(f"L{l}", split_bytes=nbytes, energy_pj=tuple(pricing.energy(b) for b in nbytes)))
    return Hierarchy((*levels, Memory.dram(word_bits=pricing.word_bits)), pricing.word_bits, name="codesign",
                     array=array, stationary=stationary)


def codesign(layers, *, total_bytes: int, levels: int = 2, word_bits: int = 16, width_bits: int = 512,
             small: str = "floor", method: str = "exact", array: SpatialArray | None = None,
             stationary: bool = False) -> CodesignResult:
    """The buffers (one SRAM per tensor and level, each its tile's size) and blockings of least total memory energy
    for `layers` (one Layer or several) with `levels` on-chip levels and at most `total_bytes` of on-chip memory,
    on a given PE `array` (the buffers then feed the whole array) or without one; `stationary`: MAC inputs and
    weights are reused at the multipliers over the innermost loops that skip them."""
    layers = (layers,) if isinstance(layers, Layer) else tuple(layers)
    if not layers:
        raise EngineError("co-design needs at least one layer")
    if not isinstance(levels, int) or levels < 1:
        raise EngineError(f"co-design needs at least one on-chip level, got levels={levels!r}")
    if method not in METHODS:
        raise UnknownNameError("co-design method", method, METHODS)
    start = time.perf_counter()
    pricing = BufferPricing(width_bits, word_bits, small)
    own = [design(layer, total_bytes=total_bytes, levels=levels, pricing=pricing, method=method, array=array,
                  stationary=stationary) for layer in layers]
    if len(layers) == 1:
        r = own[0]
        return CodesignResult(r.hierarchy, (r,), ((_buffer_bytes(r.hierarchy), r.energy_pj),), total_bytes,
                              time.perf_counter() - start, r.optimal, r.evaluated)
    candidates = [r.hierarchy for r in own]
    union = _union(candidates, pricing)
    if sum(union.levels[l].bounded_bytes for l in range(levels)) <= total_bytes:
        candidates.append(union)
    points, best = [], None
    for h in dict.fromkeys(candidates):
        try:
            results = tuple(block(layer, h) for layer in layers)
        except EngineError:  # some layer has no blocking within these buffers
            continue
        energy = sum(r.energy_pj for r in results)
        points.append((_buffer_bytes(h), energy))
        if best is None or energy < best[1]:
            best = (h, energy, results)
    if best is None:
        raise EngineError(f"no design within {total_bytes} bytes blocks every layer")
    return CodesignResult(best[0], best[2], tuple(points), total_bytes, time.perf_counter() - start, False,
                          sum(r.evaluated for r in own))


def design(layer: Layer, *, total_bytes: int, levels: int = 2, pricing: BufferPricing = BufferPricing(),
           method: str = "exact", array: SpatialArray | None = None, stationary: bool = False) -> BlockingResult:
    """One layer's co-design: its least-energy blocking with `levels` on-chip levels on its own fitted buffers
    (around `array`, if given: every unrolling it searches, least floor first)."""
    start = time.perf_counter()
    if method == "exhaustive":
        blocking, evaluated, optimal = *_exhaustive(layer, total_bytes, levels, pricing, array, stationary), True
    else:
        found, evaluated, optimal = None, 0, True
        noc = array.noc_pj if array else (0.0, 0.0, 0.0)
        tables = [_Tables(layer, pricing, u, noc, stationary) for u in _array_unrolls(layer, array, every=False)]
        for c in sorted(tables, key=lambda c: c.floor(total_bytes)):
            if found is not None and c.floor(total_bytes) >= found[0] * (1 - 1e-12):
                break
            try:
                chain, n, exact = _search(c, total_bytes, levels)
            except EngineError:  # nothing fits the budget under this unrolling
                continue
            evaluated, optimal = evaluated + n, optimal and exact
            energy = c.chain_cost(chain)[0]
            if found is None or energy < found[0] * (1 - 1e-12):
                found = (energy, c.blocking(chain))
        if found is None:
            raise EngineError(f"layer '{layer.name}' has no {levels}-level design within {int(total_bytes)} bytes; "
                              "allow more bytes")
        blocking = found[1]
    h = fitted_hierarchy(layer, blocking, pricing, array, stationary)
    return BlockingResult(layer, h, blocking, evaluate(layer, h, blocking), method, optimal, evaluated,
                          time.perf_counter() - start)


# ---- the search -----------------------------------------------------------------------
def _array_unrolls(layer: Layer, array: SpatialArray | None, *, every: bool) -> list[tuple[int, ...]]:
    """The unrollings the search tries (the optimizer's, following `array.unrolling`), or with `every` each factor
    of each mapped dim (the oracle's); one (none) without an array."""
    if array is None:
        return [(1,) * len(DIMS)]
    shell = Hierarchy((Memory("PEs", size_bytes=1), Memory.dram()), array=array)  # the optimizer reads only the array
    return every_unroll(layer, shell) if every else unrollings(layer, shell)


class _Tables:
    """Per-tile tables of one layer under one pricing and spatial unrolling (one group): buffer prices and bytes,
    the cost of level 0 (the operand words of every step, priced at each level-0 buffer's size, and the array's
    network) and of the last level's refills from DRAM. Tiles count temporal steps; words are the whole array's."""

    def __init__(self, layer: Layer, pricing: BufferPricing, unroll=None, noc_pj=(0.0, 0.0, 0.0),
                 stationary: bool = False):
        self.layer, self.grid = layer, tile_grid(layer, unroll)
        g, view = self.grid, self.grid.view
        self.price, self.nbytes = {}, {}
        for T in layer.tensors:
            uniq, inv = np.unique(g.fp[T], return_inverse=True)
            self.price[T] = np.array([pricing.energy(b) for b in pricing.bytes_of(uniq)])[inv.ravel()]
            self.nbytes[T] = pricing.bytes_of(g.fp[T])
        noc = dict(zip(TENSORS, noc_pj))  # the array's network: every busy PE's words (fixed for the unrolling)
        u = np.array([view.unroll], dtype=np.float64)
        self.mac = {(T, inside): float(mac_words(layer, [view.unroll], u, T, inside)[0][0])
                    for T in layer.tensors for inside in (False, True)}  # real words the MACs take over all steps
        self.level0 = sum(self.price[T] * self.mac[T, False] * (2 if T == "O" else 1)
                          - (self.price[T] * g.full[T] if T == "O" else 0.0)
                          + noc[T] * (2 * self.mac[T, True] - g.full_pe[T] if T == "O" else self.mac[T, True])
                          for T in layer.tensors)
        # per tile, the canonical order of the loops inside level 0 (None: operands are not stationary)
        self.inner = self._stationary(noc) if stationary else None
        self.bytes0 = sum(self.nbytes[T] for T in layer.tensors)
        words, _ = refill_words(layer, g, np.arange(g.size), None)
        dram = np.stack([sum(pricing.dram_pj * w[T] for T in layer.tensors) for w in words])
        self.top, self.top_order = dram.min(axis=0), dram.argmin(axis=0)
        self.dram_pj = pricing.dram_pj

    def _stationary(self, noc) -> np.ndarray:
        """Lower `level0` by the MAC reads a stationary input or weight saves (one per run of the innermost loops of
        the level-0 tile that skip it) under the best canonical order of those loops, and return that order."""
        g = self.grid
        mac = {T: self.price[T] * self.mac[T, False] + noc[T] * self.mac[T, True] for T in "IW" if T in self.layer.tensors}
        saving = []
        for order in CANONICAL:
            groups = GROUP_ORDER[order]
            first = np.select([g.group[G] > 1 for G in groups], [0, 1, 2], -1)  # the innermost group that loops
            saving.append(sum((mac[T] * (1 / np.where(first == groups.index(T), g.group[T], 1.0) - 1) for T in mac),
                              np.zeros(g.size)))
        stacked = np.stack(saving)
        self.level0 = self.level0 + stacked.min(axis=0)
        return stacked.argmin(axis=0)

    def pair(self, a, b):
        """Energy of refilling child tiles `a` from parent tiles `b` (best canonical order), that order, and the
        bytes of the buffers the parents keep (tensors whose tile grows from child to parent)."""
        words, changed = refill_words(self.layer, self.grid, a, b)
        costs = np.stack([sum(np.where(changed[T], self.price[T][b] * w[T], 0.0) for T in self.layer.tensors)
                          for w in words])
        kept = sum(np.where(changed[T], self.nbytes[T][b], 0.0) for T in self.layer.tensors)
        return costs.min(axis=0), costs.argmin(axis=0), kept

    def chain_cost(self, chain) -> tuple[float, float]:
        """(energy pJ, bytes) of a chain of tile indices, innermost first."""
        energy, nbytes = self.level0[chain[0]] + self.top[chain[-1]], self.bytes0[chain[0]]
        for a, b in zip(chain, chain[1:]):
            e, _, k = self.pair(np.array([a]), np.array([b]))
            energy, nbytes = energy + e[0], nbytes + k[0]
        return float(energy), float(nbytes)

    def floor(self, budget: float) -> float:
        """A lower bound on any design under this unrolling: the least level-0 cost that fits `budget`, plus
        every word loaded once from DRAM."""
        fits = self.bytes0 <= budget
        least = self.level0[fits].min() if fits.any() else np.inf
        return float(least + self.dram_pj * sum(self.grid.full[T] for T in self.layer.tensors))

    def blocking(self, chain) -> Blocking:
        names = tuple(CANONICAL)
        orders = [CANONICAL[names[int(self.pair(np.array([a]), np.array([b]))[1][0])]] for a, b in zip(chain, chain[1:])]
        orders.append(CANONICAL[names[int(self.top_order[chain[-1]])]])
        view = self.grid.view
        inner = INNER_ORDER if self.inner is None else CANONICAL[names[int(self.inner[chain[0]])]]
        return Blocking(view.dims, tuple(self.grid.tile(i) for i in chain), tuple(orders), view.unroll, inner)

    def child_floor(self, *, above_dram: bool = True) -> np.ndarray:
        """A lower bound on the energy of any blocking whose level-0 tile is each tile (two or more levels).

        Each distinct tile of a tensor is loaded at least once from a buffer above, no cheaper than
        this one (it holds a larger tile and Table 3 grows with size). With `above_dram` (level 1 is the
        last on-chip level) that load comes from level 1 while DRAM still sends every word once, or
        straight from DRAM when the tensor passes through level 1.
        """
        g, floor = self.grid, self.level0.copy()
        for T in self.layer.tensors:
            distinct = g.moved[T] * g.above * g.group[T] / g.full_group[T]
            size = g.full[T]
            moved = 2 * distinct - size if T == "O" else distinct
            if above_dram:
                floor += np.minimum(self.price[T] * moved + self.dram_pj * size, self.dram_pj * moved)
            else:
                floor += self.price[T] * moved
        return floor


def _search(c: _Tables, budget: float, levels: int) -> tuple[tuple[int, ...], int, bool]:
    """The chain of tiles of least energy within `budget` bytes, pairs scored, and whether it is proven optimal."""
    if levels == 1:
        total = np.where(c.bytes0 <= budget, c.level0 + c.top, np.inf)
        return (_argmin(c, total),), c.grid.size, True
    if levels == 2:
        pair, evaluated = _two_levels(c, budget)
        return pair, evaluated, True
    chain, evaluated, _ = _search(c, budget, levels - 1)
    best = None
    for pos in range(levels - 1):  # the design with one level fewer, one level doubled (nothing kept there)
        seed, n = _descend(c, budget, (*chain[:pos + 1], chain[pos], *chain[pos + 1:]))
        evaluated += n
        cost = c.chain_cost(seed)[0]
        if best is None or cost < best[0]:
            best = (cost, seed)
    assert best is not None  # levels > 2: at least one seed
    return best[1], evaluated, False


def _argmin(c: _Tables, total: np.ndarray) -> int:
    i = int(np.argmin(total))
    if not np.isfinite(total[i]):
        raise EngineError(f"layer '{c.layer.name}': not even one-element tiles fit the budget; allow more bytes")
    return i


def _two_levels(c: _Tables, budget: float, outer=None) -> tuple[tuple[int, int], int]:
    """Exact: the best (level-0 tile, level-1 tile) pair within `budget` bytes.

    `outer` = (energy, bytes, allowed) per level-1 tile replaces the refills from DRAM when
    levels above are fixed (then level 1 must divide their tile: `allowed`). Branch and bound:
    the best partners of the `SEED_TILES` children and parents of least lower bound give a feasible
    energy U; then every pair whose child bound (`child_floor`) and parent bound (its refills from
    above plus the least level-0 cost) are both within U is scored.
    """
    top, top_bytes, allowed = outer or (c.top, np.zeros(c.grid.size), np.ones(c.grid.size, dtype=bool))
    ok0 = c.bytes0 <= budget
    if not ok0.any():
        _argmin(c, np.full(1, np.inf))
    child_lb = np.where(ok0 & allowed, c.child_floor(above_dram=outer is None), np.inf)
    parent_lb = np.where(allowed, top + c.level0[ok0].min(), np.inf)
    seeds_a, seeds_b = (np.zeros(c.grid.size, dtype=bool) for _ in range(2))
    seeds_a[np.argsort(child_lb)[:SEED_TILES]] = True
    seeds_b[np.argsort(parent_lb)[:SEED_TILES]] = True
    best, evaluated = (np.inf, None), 0
    for child_ok, parent_ok in ((seeds_a & np.isfinite(child_lb), allowed), (np.isfinite(child_lb), seeds_b & allowed)):
        best, n = _score_pairs(c, budget, child_ok, parent_ok, best, top, top_bytes)
        evaluated += n
    cap = best[0] * (1 + 1e-9)
    best, n = _score_pairs(c, budget, child_lb <= cap, parent_lb <= cap, best, top, top_bytes)
    if best[1] is None:
        raise EngineError(f"layer '{c.layer.name}' has no two-level design within {int(budget)} bytes; allow more bytes")
    return best[1], evaluated + n


def _score_pairs(c: _Tables, budget: float, child_ok, parent_ok, best, top, top_bytes):
    """Score every (child, parent) pair allowed with the child dividing the parent; keep the best under budget."""
    a, b = tile_pairs(c.grid, child_ok, parent_ok, prune=False)
    for s in range(0, len(a), PAIR_CHUNK):
        ca, cb = a[s:s + PAIR_CHUNK], b[s:s + PAIR_CHUNK]
        e, _, kept = c.pair(ca, cb)
        total = np.where(c.bytes0[ca] + kept + top_bytes[cb] <= budget, c.level0[ca] + e + top[cb], np.inf)
        i = int(np.argmin(total)) if len(total) else 0
        if len(total) and total[i] < best[0]:
            best = (float(total[i]), (int(ca[i]), int(cb[i])))
    return best, len(a)


def _inner_pair(c: _Tables, budget: float, chain: list) -> tuple[list, int]:
    """Re-solve levels 0 and 1 exactly with the levels above fixed (a move the one-level moves cannot make)."""
    g, rest = c.grid, chain[2:]
    e_rest, b_rest = _terms_without(c, [None, *rest], 0)
    allowed = np.all(g.val[rest[0]] % g.val == 0, axis=1)
    e, _, kept = c.pair(np.arange(g.size), np.full(g.size, rest[0]))
    outer = (np.where(allowed, e + e_rest, np.inf), np.where(allowed, kept + b_rest, np.inf), allowed)
    pair, n = _two_levels(c, budget, outer)
    return [*pair, *rest], n


def _descend(c: _Tables, budget: float, start: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Move one level's tile at a time to its best choice between its neighbours' tiles, until no move helps."""
    g, m = c.grid, len(start)
    chain, evaluated = list(start), 0
    energy, _ = c.chain_cost(chain)
    for _ in range(MAX_SWEEPS):
        moved = False
        for l in range(m):
            lower = g.val[chain[l - 1]] if l else np.ones(len(DIMS), dtype=np.int64)
            upper = g.val[chain[l + 1]] if l + 1 < m else np.array(g.view.dims)
            t = np.flatnonzero(np.all(g.val % lower == 0, axis=1) & np.all(upper % g.val == 0, axis=1))
            rest: list[int | None] = [*chain[:l], None, *chain[l + 1:]]
            e, nbytes = _terms_without(c, rest, l)
            if l == 0:
                e_t, b_t = c.level0[t].copy(), c.bytes0[t].copy()
            else:
                e_t, _, b_t = c.pair(np.full(len(t), chain[l - 1]), t)
            if l + 1 < m:
                e2, _, b2 = c.pair(t, np.full(len(t), chain[l + 1]))
                e_t, b_t = e_t + e2, b_t + b2
            else:
                e_t = e_t + c.top[t]
            total = np.where(nbytes + b_t <= budget, e + e_t, np.inf)
            evaluated += len(t)
            i = int(np.argmin(total))
            if total[i] < energy * (1 - 1e-12):
                chain[l], energy, moved = int(t[i]), float(total[i]), True
        if not moved and m > 2:  # stuck: move levels 0 and 1 together
            pair, n = _inner_pair(c, budget, chain)
            evaluated += n
            e_pair = c.chain_cost(pair)[0]
            if e_pair < energy * (1 - 1e-12):
                chain, energy, moved = pair, e_pair, True
        if not moved:
            break
    return tuple(chain), evaluated


def _terms_without(c: _Tables, chain, l: int) -> tuple[float, float]:
    """(energy, bytes) of the chain's terms that do not involve level `l` (whose entry is None)."""
    m = len(chain)
    energy = (c.level0[chain[0]] if l != 0 else 0.0) + (c.top[chain[-1]] if l != m - 1 else 0.0)
    nbytes = c.bytes0[chain[0]] if l != 0 else 0.0
    for k in range(m - 1):
        if l not in (k, k + 1):
            e, _, b = c.pair(np.array([chain[k]]), np.array([chain[k + 1]]))
            energy, nbytes = energy + e[0], nbytes + b[0]
    return float(energy), float(nbytes)


# ---- brute force (the oracle) ------------------------------------------------------
def _exhaustive(layer: Layer, budget: float, levels: int, pricing: BufferPricing,
                array: SpatialArray | None = None, stationary: bool = False) -> tuple[Blocking, int]:
    """Every unrolling (every factor of every mapped dim), chain of divisor tiles and order of each block's non-unit
    loops, scored with `evaluate` on the blocking's own fitted buffers (Sec. 3.5's first optimizer, with the
    memories following the string)."""
    best, best_pj, evaluated = None, None, 0
    for unroll in _array_unrolls(layer, array, every=True):
        for base, blockings in every_blocking(layer, levels, unroll, inner=stationary):
            h = fitted_hierarchy(layer, base, pricing, array, stationary)
            if sum(m.bounded_bytes for m in h.on_chip) > budget:
                continue
            for blocking in blockings:
                cost = evaluate(layer, h, blocking)
                evaluated += 1
                if best_pj is None or cost.memory_pj < best_pj - 1e-9 * abs(best_pj):
                    best, best_pj = blocking, cost.memory_pj
    if best is None:
        raise EngineError(f"layer '{layer.name}': no {levels}-level design within {int(budget)} bytes")
    return best, evaluated


def _buffer_bytes(h: Hierarchy) -> tuple[int, ...]:
    return tuple(b for m in h.on_chip for b in m.split_bytes or ())


def _union(hierarchies, pricing: BufferPricing) -> Hierarchy:
    """Each buffer at its largest size over the designs (a design that can hold every layer's tiles)."""
    levels = []
    for l in range(len(hierarchies[0].on_chip)):
        nbytes = tuple(max(h.on_chip[l].split_bytes[i] for h in hierarchies) for i in range(3))
        levels.append(Memory(f"L{l}", split_bytes=nbytes, energy_pj=tuple(pricing.energy(b) for b in nbytes)))
    return Hierarchy((*levels, Memory.dram(word_bits=pricing.word_bits)), pricing.word_bits, name="codesign union",
                     array=hierarchies[0].array, stationary=hierarchies[0].stationary)
