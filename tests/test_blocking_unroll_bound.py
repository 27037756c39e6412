"""The per-unrolling lower bound that lets the exact search over every spatial unrolling skip most of them: never
above brute force's optimum under its unrolling (whatever the level order), tight where the capacities leave one
way to block, and the search with it equal to the search without it on ZigZag's accelerators."""

from dataclasses import replace

import pytest

from engine.blocking import Hierarchy, Layer, Memory, SpatialArray, block, evaluate
from engine.blocking.bounds import refill_bound
from engine.blocking.dp import exact_unrolled
from engine.blocking.exhaustive import every_blocking
from engine.blocking.grid import unrollings
from engine.blocking.routes import level_orders


def tpu_one(sram=64):
    """Weight-stationary 2 x 2 array: a one-word accumulator and a two-word weight register per PE, an I/O SRAM."""
    arr = SpatialArray((("rows", 2), ("cols", 2)), (("C", "rows"), ("K", "cols")), noc_pj=(0.5, 0.7, 0.9))
    return Hierarchy((Memory("O-reg", split_bytes=(0, 0, 2), energy_pj=(0, 0, 0.2), holds="O"),
                      Memory("W-reg", split_bytes=(0, 4, 0), energy_pj=(0, 0.1, 0), holds="W", write_pj=(0, 0.3, 0)),
                      Memory("SRAM", size_bytes=sram, energy_pj=(3, 3, 4), holds="IO", write_pj=(2, 2, 5)),
                      Memory.dram()), array=arr, array_level=2, name="tpu-one", stationary=True)


def eyeriss_small():
    """Eyeriss-like: per-PE RFs for each operand, W/O SRAMs that inputs bypass, an I/O SRAM; C x K over 2 x 3 PEs."""
    arr = SpatialArray((("rows", 2), ("cols", 3)), (("C", "rows"), ("K", "cols")))
    return Hierarchy((Memory("RFs", split_bytes=(4, 4, 2), energy_pj=(1, 1, 1.5), write_pj=(1.5, 1.5, 2)),
                      Memory("W/O", split_bytes=(0, 16, 8), holds="WO", energy_pj=(0, 1.25, 0.6),
                             write_pj=(0, 1.5, 0.9)),
                      Memory("SRAM", size_bytes=96, holds="IO", energy_pj=(2, 0, 2), write_pj=(2.7, 0, 2.7)),
                      Memory("DRAM", energy_pj=(125,) * 3)), array=arr, array_level=1, name="eyeriss-small",
                     stationary=True)


def zigzag(h):
    """`h` priced as ZigZag prices: 32-bit partial sums of 16-bit words, both ends of every transfer charged."""
    return replace(h, psum_bits=32, charge="both-ends", name=h.name + "-zz")


def brute(layer, h, unroll):
    """Least memory energy (pJ, one group) over every tile chain and loop order under one unrolling."""
    best = float("inf")
    for _, blockings in every_blocking(layer, len(h.on_chip), unroll, inner=h.stationary):
        for b in blockings:
            cost = evaluate(layer, h, b)
            if cost.fits:
                best = min(best, cost.memory_pj / layer.groups)
    return best


# (layer, hierarchy, least and greatest tight bound / brute force's optimum over the unrollings and level orders)
CASES = [(Layer(X=2, Y=2, C=3, K=2, name="c3"), tpu_one(), 0.97443, 1.0),
         (Layer(X=3, C=2, K=3, Fw=2, name="fw2"), tpu_one(), 0.98982, 1.0),
         (Layer(Y=2, C=2, K=3, Fh=2, name="fh2"), eyeriss_small(), 0.99058, 0.99937),
         (Layer(X=3, C=3, K=2, Fw=2, stride=(2, 1), name="strided"), eyeriss_small(), 0.98224, 0.99438),
         # priced as ZigZag prices: 32-bit partial sums of 16-bit words, both ends charged, borders made on chip
         (Layer(X=2, Y=2, C=3, K=2, name="c3-zz"), zigzag(tpu_one()), 0.94583, 1.0),
         (Layer(X=3, C=2, K=3, Fw=3, pad=(1, 1, 0, 0), name="padded-zz"), zigzag(tpu_one()), 0.95348, 0.95708),
         (Layer(Y=2, C=2, K=3, Fh=2, name="fh2-zz"), zigzag(eyeriss_small()), 0.97914, 0.9958),
         (Layer(X=3, C=3, K=2, Fw=3, pad=(1, 1, 0, 0), stride=(2, 1), name="strided-padded-zz"),
          zigzag(eyeriss_small()), 0.95917, 0.98412)]


@pytest.mark.parametrize("layer, h, low, high", CASES, ids=lambda x: getattr(x, "name", ""))
def test_bounds_never_exceed_brute_force(layer, h, low, high):
    """Each unrolling's quick and tight bound lie at or below the least energy brute force finds under it, in every
    level order; the tight one within 3 % of it (equal on the one-word accumulator's best unrollings); and the
    search that skips unrollings by them finds brute force's optimum."""
    ratios, optimum = [], float("inf")
    for order in level_orders(h):
        for unroll in unrollings(layer, order):
            best = brute(layer, order, unroll)
            quick, tight = refill_bound(layer, order, unroll, False), refill_bound(layer, order, unroll)
            assert quick <= best * (1 + 1e-12) and tight <= best * (1 + 1e-12), (order.levels[0].name, unroll)
            ratios.append(tight / best)
            optimum = min(optimum, best)
    assert (min(ratios), max(ratios)) == (pytest.approx(low, abs=1e-5), pytest.approx(high, abs=1e-5))
    assert block(layer, h).energy_pj == pytest.approx(optimum, rel=1e-12)


def test_bound_on_zigzag_eyeriss_layer():
    """ResNet-18's layer3 conv (K = C = 256, 14 x 14, 3 x 3) on ZigZag's eyeriss_like priced as ZigZag prices (16-bit
    partial sums, both ends), every unrolling: the optimum (C8 x K8, 672.37 uJ of memory) is bounded exactly, and no
    other of the 168 unrollings bounds below it, though every floor (`unroll_floors`, 624.07 uJ and up) does: one DP.
    (Priced as Yang's Eq. 1 it was 630.91 uJ, bounded at 628.82, two unrollings below it.)"""
    from benchmarks.bench_zigzag import like_for_like
    from engine.blocking.bounds import unroll_floors

    h = like_for_like("eyeriss_like", "all")
    layer = Layer(X=14, Y=14, C=256, K=256, Fw=3, Fh=3)
    result = block(layer, h)
    assert result.energy_pj == pytest.approx(672_371_754.67) and result.blocking.unroll == (1, 1, 8, 8, 1, 1, 1)
    floors = unroll_floors(layer, h)
    bounds = {u: refill_bound(layer, h, u) for _, _, u in floors}
    assert bounds[1, 1, 8, 8, 1, 1, 1] == pytest.approx(result.energy_pj, rel=1e-9)
    assert {u for u, b in bounds.items() if b < result.energy_pj * (1 - 1e-9)} == set()
    assert len(floors) == 168 and min(f for f, _, _ in floors) == pytest.approx(624_071_082.67)
    assert sum(f < result.energy_pj for f, _, _ in floors) == 168
    other = exact_unrolled(layer, h, (1, 1, 8, 11, 1, 1, 1))[0]  # the next best bound, and worse
    assert evaluate(layer, h, other).memory_pj > result.energy_pj
