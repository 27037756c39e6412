"""The schedules the paper compares against: DianNao's own loop nest and im2col + GEMM lowering."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from engine.blocking.grid import CANONICAL, divisors, unrollings
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, Layer
from engine.blocking.model import INNER_ORDER, Blocking, Cost, SpatialView, evaluate
from engine.blocking.optimizer import block
from engine.errors import EngineError

# DianNao's conv pseudo-code (Chen et al., ASPLOS 2014), outside its buffered tile: the kernel
# blocks (nnn) innermost, so a tile of input neurons in NBin serves every kernel; then the
# channel blocks our tiling adds when a full column of channels does not fit; then x, then y.
DIANNAO_ORDER = ("K", "C", "Fw", "Fh", "X", "Y", "N")
NFU_LANES = 16


def diannao_baseline(layer: Layer, hierarchy: Hierarchy | None = None) -> Blocking:
    """DianNao's loop order on its IB/KB/OB buffers, with the tile sizes that suit that order best.

    Sec. 5.2's baseline is DianNao's pseudo-code, re-blocked in x until the input tile fits the
    2 KB IB. We keep DianNao's order (kernel blocks innermost around a buffered tile of outputs,
    channels and window) and its datapath's 16-channel blocks (a tile holds at least 16 input
    and 16 output channels), and give it the best tile under those rules, so the comparison with
    `block` isolates what the paper credits the optimizer with: interchanging the loops. On a hierarchy with a PE
    array (DianNao's 16 x 16 `Cin|Cout` NFU) the 16-channel blocks are the array's fullest unrolling (most busy PEs)
    and the tiles count temporal steps; with stationary MAC operands the loops inside the tile take the best canonical order.
    """
    hierarchy = hierarchy or Hierarchy.diannao()
    if len(hierarchy.on_chip) != 1:
        raise EngineError("the DianNao baseline schedules one on-chip level (IB/KB/OB) and DRAM")
    best, best_pj = None, None
    # DianNao's NFU takes Tn = 16 input and 16 output channels a cycle: tiles hold at least that many
    unroll = max(unrollings(layer, hierarchy), key=math.prod) if hierarchy.array else (1,) * len(DIMS)
    dims = dict(zip(DIMS, SpatialView.of(layer, unroll).dims))
    lanes = 1 if hierarchy.array else NFU_LANES  # the array's unrolling already takes the 16 channels
    options = [divisors(dims["X"]), divisors(dims["Y"])] + [
        [v for v in divisors(n) if v >= min(lanes, n)] or [n] for n in (dims["C"], dims["K"])]
    inners = CANONICAL.values() if hierarchy.stationary else (INNER_ORDER,)
    for x, y, c, k in itertools.product(*options):
        for fw, fh in ((dims["Fw"], dims["Fh"]), (1, dims["Fh"]), (1, 1)):
            tile = dict(X=x, Y=y, C=c, K=k, N=1, Fw=fw, Fh=fh)
            fits = False
            for inner in inners:
                b = Blocking(tuple(dims.values()), (tuple(tile[d] for d in DIMS),), (DIANNAO_ORDER,), unroll, inner)
                cost = evaluate(layer, hierarchy, b)
                fits = cost.fits
                if cost.fits and (best_pj is None or cost.memory_pj < best_pj):
                    best, best_pj = b, cost.memory_pj
            if fits:
                break  # a smaller window tile only adds refetches
    if best is None:
        raise EngineError(f"layer '{layer.name}' has no tile that fits DianNao's buffers")
    return best


def im2col(layer: Layer) -> Layer:
    """The GEMM a lowering to im2col computes: (X Y N) rows x (C Fw Fh) reduction x K columns.

    Lowering copies every input pixel once per window position that reads it, which is the
    locality the paper says GEMM gives up (Sec. 2.2).
    """
    return Layer(X=layer.X * layer.Y * layer.N, C=layer.C * layer.Fw * layer.Fh, K=layer.K, groups=layer.groups,
                 has_weights=layer.has_weights, name=f"{layer.name} as im2col GEMM")


@dataclass(frozen=True)
class LoweredCost:
    """Accesses per level of a lowered convolution: the copy into im2col form plus the best-blocked GEMM."""

    gemm: Cost
    lowering_words: int  # input words read plus lowered words written by the copy

    def at(self, level: str) -> int:
        """Cache accesses at `level`: the GEMM's (`Cost.through`) plus the copy streaming through every
        level above the first."""
        first = self.gemm.level_names[0]
        return self.gemm.through(level) + (0 if level == first else self.lowering_words)


def lowered_cost(layer: Layer, hierarchy: Hierarchy) -> LoweredCost:
    """im2col + GEMM: the GEMM blocked optimally on `hierarchy` (a perfectly tuned BLAS) plus the copy."""
    gemm = im2col(layer)
    best = block(gemm, hierarchy)
    copy = layer.groups * (layer.size("I") + math.prod((layer.X, layer.Y, layer.N, layer.C, layer.Fw, layer.Fh)))
    return LoweredCost(best.cost, copy)
