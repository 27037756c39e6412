"""Co-design: choose the memory hierarchy and the blockings together under a total on-chip size (Sec. 3.6).

The paper explores each layer's energy over candidate hierarchies with the single-layer
optimizer, keeps each layer's ten best points under the budget, then picks a point common
to the layers. Here every candidate hierarchy on a geometric size grid is scored for every
layer with the exact optimizer, so the common choice is the true best of the grid.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

from engine.blocking.hierarchy import Hierarchy, Memory
from engine.blocking.layer import TENSORS, Layer
from engine.blocking.optimizer import BlockingResult, block
from engine.errors import EngineError

KB = 1024


@dataclass(frozen=True)
class CodesignResult:
    """The hierarchy of least total energy over the layers, its blockings, and every point scored."""

    hierarchy: Hierarchy
    results: tuple[BlockingResult, ...]  # one per layer, on `hierarchy`
    points: tuple[tuple[tuple[int, ...], float], ...]  # (level sizes in bytes, total memory energy pJ)
    total_bytes: int
    seconds: float

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(m.total_bytes for m in self.hierarchy.on_chip)

    @property
    def energy_pj(self) -> float:
        return sum(r.energy_pj for r in self.results)


def size_grid(total_bytes: int, *, levels: int, smallest: int = 256, ratio: int = 4,
              innermost_max: int = 1 * KB) -> list[tuple[int, ...]]:
    """Level sizes to try: powers of `ratio` times `smallest`, strictly growing outwards, summing to at most
    `total_bytes`; the innermost level (a register file in the paper) at most `innermost_max`."""
    sizes = []
    s = smallest
    while s <= total_bytes:
        sizes.append(s)
        s *= ratio
    if total_bytes not in sizes:
        sizes.append(total_bytes)
    return [c for c in itertools.combinations(sizes, levels) if sum(c) <= total_bytes and c[0] <= innermost_max]


def codesign(layers, *, total_bytes: int, levels: int = 3, word_bits: int = 16, width_bits: int = 64,
             ratio: int = 4) -> CodesignResult:
    """The on-chip hierarchy (sizes of `levels` shared SRAM levels, Table 3 energies) and blockings of least
    total memory energy for `layers` (one Layer or several) within `total_bytes` of on-chip memory."""
    layers = (layers,) if isinstance(layers, Layer) else tuple(layers)
    if not layers:
        raise EngineError("co-design needs at least one layer")
    start = time.perf_counter()
    grid = size_grid(total_bytes, levels=levels, ratio=ratio)
    if not grid:
        raise EngineError(f"no {levels}-level hierarchy fits in {total_bytes} bytes; allow more bytes or fewer levels")
    points, best = [], None
    for sizes in grid:
        h = Hierarchy.from_sizes(sizes, word_bits=word_bits, width_bits=width_bits, name="codesign")
        try:
            results = tuple(block(layer, h) for layer in layers)
        except EngineError:  # some layer has no tile that fits the innermost level
            continue
        energy = sum(r.energy_pj for r in results)
        points.append((sizes, energy))
        if best is None or energy < best[1]:
            best = (h, energy, results)
    if best is None:
        raise EngineError(f"no hierarchy on the grid holds every layer within {total_bytes} bytes")
    return CodesignResult(best[0], best[2], tuple(points), total_bytes, time.perf_counter() - start)


def split_last_level(result: BlockingResult, *, width_bits: int = 512) -> Hierarchy:
    """`result`'s hierarchy with its last on-chip level replaced by IB/KB/OB buffers sized to the tiles its
    blocking keeps there (Table 2's buffer sizes, rounded up to a power of two bytes), each priced by Table 3."""
    h, last = result.hierarchy, len(result.hierarchy.on_chip) - 1
    name = h.levels[last].name
    words = {a.tensor: a.stored_words for a in result.cost.accesses if a.level == name}
    nbytes = tuple(1 << max(0, math.ceil(math.log2(max(1, words.get(T, 0) * h.word_bits // 8)))) for T in TENSORS)
    split = Memory.split(name, nbytes, widths=(width_bits,) * 3, word_bits=h.word_bits)
    return Hierarchy((*h.on_chip[:-1], split, h.levels[-1]), h.word_bits, h.mac_pj, f"{h.name} split")
