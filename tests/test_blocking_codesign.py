"""Co-design (Yang et al. Sec. 3.5-3.6): one SRAM per buffer the blocking string creates, under a byte budget."""

import dataclasses

import pytest

from engine.accelerator import Accelerator
from engine.blocking import Hierarchy, Layer, Memory, SpatialArray, block, codesign, evaluate, table4
from engine.blocking.codesign import BufferPricing, design, fitted_hierarchy
from engine.blocking.hierarchy import access_energy_pj, pe_array
from engine.blocking.model import stored_levels
from engine.errors import EngineError

KB = 1024

TINY = [Layer(X=4, Y=2, C=2, K=4, Fw=3, name="conv"), Layer(X=4, C=6, K=4, name="fc"),
        Layer(X=2, Y=4, C=2, K=2, Fw=2, Fh=2, stride=(2, 1), name="strided"),
        Layer(X=4, Y=2, Fw=2, Fh=3, groups=2, has_weights=False, name="pool")]
# budgets from tight (the constraint binds) to loose (it does not)
CASES = [(layer, budget, "floor") for layer in TINY for budget in (24, 64, 4 * KB)] + \
        [(layer, 64, "extrapolate") for layer in TINY]


@pytest.mark.parametrize("layer, budget, small", CASES, ids=[f"{l.name}-{b}B-{s}" for l, b, s in CASES])
def test_two_levels_exact_equals_exhaustive(layer, budget, small):
    """Exact two-level co-design against every blocking string, each scored on its own fitted buffers."""
    pricing = BufferPricing(small=small)
    try:
        brute = design(layer, total_bytes=budget, levels=2, pricing=pricing, method="exhaustive")
    except EngineError:
        with pytest.raises(EngineError, match="bytes"):
            design(layer, total_bytes=budget, levels=2, pricing=pricing)
        return
    exact = design(layer, total_bytes=budget, levels=2, pricing=pricing)
    assert exact.optimal and exact.cost.fits
    assert sum(m.total_bytes for m in exact.hierarchy.on_chip) <= budget
    assert exact.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)
    if layer.name == "conv" and budget == 64:  # the budget binds here: a looser one allows a better design
        assert exact.energy_pj > design(layer, total_bytes=4 * KB, levels=2, pricing=pricing).energy_pj


def test_one_level_exact_equals_exhaustive():
    for layer in TINY:
        exact = design(layer, total_bytes=64, levels=1)
        brute = design(layer, total_bytes=64, levels=1, method="exhaustive")
        assert exact.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)


@pytest.mark.parametrize("layer", [Layer(X=4, C=2, K=2, Fw=2, name="conv-1d"), Layer(X=2, Y=2, C=2, K=2, name="fc"),
                                   Layer(X=2, Y=2, Fw=2, Fh=2, groups=2, has_weights=False, name="pool")],
                         ids=lambda l: l.name)
def test_three_levels_search_close_to_exhaustive(layer):
    """Above two levels the search is a heuristic: never below the optimum, and here within 5% of it."""
    for budget in (24, 48, 4 * KB):
        search = design(layer, total_bytes=budget, levels=3)
        brute = design(layer, total_bytes=budget, levels=3, method="exhaustive")
        assert not search.optimal
        assert brute.energy_pj * (1 - 1e-12) <= search.energy_pj <= 1.05 * brute.energy_pj
        # a third level never costs more than the best two-level design (it can keep nothing)
        assert search.energy_pj <= design(layer, total_bytes=budget, levels=2).energy_pj * (1 + 1e-12)


def test_fitted_buffers_are_the_tiles():
    """Each buffer is its tile's size (Table 2), priced by Table 3 at that size; the search's energy is evaluate's."""
    layer = Layer(X=8, Y=8, C=8, K=16, Fw=3, Fh=3, name="small")
    r = design(layer, total_bytes=16 * KB, levels=2)
    h = r.hierarchy
    for l, (mem, tile) in enumerate(zip(h.on_chip, r.blocking.tiles)):
        for T, nbytes in zip("IWO", mem.split_bytes):
            kept = l in stored_levels(T, r.blocking)
            assert nbytes == (2 * layer.footprint(T, tile) if kept else 0)
            if nbytes:
                assert mem.energy(T) == pytest.approx(access_energy_pj(nbytes, width_bits=512))
    assert sum(m.total_bytes for m in h.on_chip) <= 16 * KB
    again = evaluate(layer, fitted_hierarchy(layer, r.blocking), r.blocking)
    assert again.fits and again.memory_pj == pytest.approx(r.energy_pj)
    # the fixed-hierarchy optimizer cannot do better on the co-designed buffers
    assert block(layer, h).energy_pj == pytest.approx(r.energy_pj)


def test_per_buffer_beats_shared_levels_of_the_same_sizes():
    """Sizing each buffer to its tile is never worse than shared levels with the same total bytes per level."""
    layer = table4()["Conv5"]
    r = design(layer, total_bytes=1024 * KB, levels=2)
    shared = Hierarchy.from_sizes([m.total_bytes for m in r.hierarchy.on_chip], width_bits=512)
    assert r.energy_pj <= block(layer, shared).energy_pj * (1 + 1e-12)


def test_small_buffer_rules():
    floor, extra = BufferPricing(), BufferPricing(small="extrapolate")
    assert floor.energy(64) == floor.energy(KB) == pytest.approx(0.57)
    assert extra.energy(KB) == pytest.approx(0.57) and extra.energy(2 * KB) == pytest.approx(0.68)
    assert extra.energy(KB // 4) == pytest.approx(0.57 - 2 * 0.11) == extra.energy(2)
    assert extra.energy(KB // 2) == pytest.approx(0.57 - 0.11)
    assert BufferPricing(width_bits=64, small="extrapolate").energy(KB // 4) == pytest.approx(1.20 - 2 * 0.34)


def test_codesign_several_layers_shares_one_design():
    layers = [Layer(X=8, Y=8, C=8, K=8, Fw=3, Fh=3), Layer(C=64, K=32, N=4)]
    res = codesign(layers, total_bytes=16 * KB, levels=2)
    assert sum(res.sizes) <= 16 * KB and not res.optimal
    assert res.energy_pj == pytest.approx(min(e for _, e in res.points))
    assert len(res.points) >= 2 and all(r.cost.fits and r.hierarchy == res.hierarchy for r in res.results)
    own = [design(layer, total_bytes=16 * KB, levels=2).energy_pj for layer in layers]
    assert res.energy_pj >= sum(own) * (1 - 1e-12)  # a common design cannot beat each layer's own
    assert {b.name for b in res.buffers} >= {"IB0", "KB0", "OB0"}
    with pytest.raises(EngineError, match="bytes"):
        codesign(layers, total_bytes=4, levels=2)


def test_zero_byte_buffers_pass_through():
    m = Memory.split("L1", (0, 64, 0))
    assert m.total_bytes == 64
    with pytest.raises(EngineError, match="negative"):
        Memory.split("L1", (-1, 64, 0))


# ---- co-design on a given PE array (the paper keeps DianNao's datapath) ----------------------------------
ARRAY = SpatialArray((("rows", 2), ("cols", 2)), (("C", "rows"), ("K", "cols")), name="2x2")
ARRAY_NOC = SpatialArray((("rows", 3), ("cols", 2)), (("C", "rows"), ("K", "cols")), noc_pj=(0.1, 0.2, 0.3),
                         name="3x2")
ARRAY_CASES = [(TINY[0], 24, ARRAY), (TINY[1], 24, ARRAY_NOC), (TINY[1], 4 * KB, ARRAY_NOC),
               (Layer(X=2, Y=2, C=3, K=2, Fw=2, name="c3"), 64, ARRAY), (TINY[3], 64, ARRAY)]


@pytest.mark.parametrize("layer, budget, array", ARRAY_CASES,
                         ids=[f"{l.name}-{b}B-{a.name}" for l, b, a in ARRAY_CASES])
def test_two_levels_on_an_array_exact_equals_exhaustive(layer, budget, array):
    """Exact two-level co-design around a PE array against every unrolling (every factor, padded ones too), tile
    chain and loop order, each scored by `evaluate` on its own fitted buffers and the array."""
    brute = design(layer, total_bytes=budget, levels=2, method="exhaustive", array=array)
    exact = design(layer, total_bytes=budget, levels=2, array=array)
    assert exact.optimal and exact.cost.fits and exact.hierarchy.array == array
    assert exact.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)
    assert sum(m.total_bytes for m in exact.hierarchy.on_chip) <= budget


@pytest.mark.parametrize("layer, budget", [(Layer(X=4, C=2, K=2, Fw=2, name="conv-1d"), 64),
                                           (Layer(X=2, C=4, K=4, name="fc"), 4 * KB)], ids=["conv-1d", "fc"])
@pytest.mark.parametrize("stationary", [False, True])
def test_three_levels_on_an_array_search_equals_exhaustive(layer, budget, stationary):
    search = design(layer, total_bytes=budget, levels=3, array=ARRAY_NOC, stationary=stationary)
    brute = design(layer, total_bytes=budget, levels=3, method="exhaustive", array=ARRAY_NOC, stationary=stationary)
    assert not search.optimal and search.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)


def test_array_buffers_hold_the_whole_arrays_tile():
    """With the array every level feeds all PEs: level 0 serves each step's unrolled words (inputs multicast over the
    K lanes, partial sums reduced over the C lanes), and buffers hold the array's (padded) tile; padded words do
    not move."""
    layer = Layer(X=4, C=3, K=4, name="fc-c3")
    maximal = dataclasses.replace(ARRAY, unrolling="maximal")  # C by 2 (padded to 4) and K by 2: the array full
    r = design(layer, total_bytes=4 * KB, levels=2, array=maximal)
    assert r.blocking.unroll == (1, 1, 2, 2, 1, 1, 1) and r.hierarchy.array == maximal
    ib0, kb0, ob0 = r.hierarchy.on_chip[0].split_bytes
    tile = dict(zip("XYCKN", r.blocking.tiles[0]))
    assert kb0 == 2 * (2 * tile["C"]) * (2 * tile["K"])  # padded C: 4 weight rows for 3 channels
    assert ib0 == 2 * tile["X"] * 2 * tile["C"] and ob0 == 2 * tile["X"] * 2 * tile["K"]
    # level 0 serves each step's real words (the padded channel lane idles): per x and K step the 3 real inputs
    # over the 2 C steps, every real weight once per x, and 2 partial sums a step written, read back but the first
    steps = 4 * 2 * 2
    assert r.cost.at("L0", "I") == 4 * 2 * 3 and r.cost.at("L0", "W") == 4 * 3 * 4
    assert r.cost.at("L0", "O") == 2 * steps * 2 - 4 * 4
    again = evaluate(layer, fitted_hierarchy(layer, r.blocking, array=maximal), r.blocking)
    assert again.fits and again.memory_pj == pytest.approx(r.energy_pj)
    # every unrolling includes the maximal ones, so its optimum is never above theirs
    assert design(layer, total_bytes=4 * KB, levels=2, array=ARRAY).energy_pj <= r.energy_pj * (1 + 1e-12)


def test_codesign_on_diannaos_nfu_conv5():
    """Conv5 on DianNao's 16 x 16 NFU: both sides keep the datapath; the co-design beats DianNao's buffers with the
    optimal schedule, and the shared design of several layers keeps the array."""
    nfu = pe_array(Accelerator.preset("diannao"), (0.0, 0.0, 0.0))
    layer = table4()["Conv5"]
    res = codesign(layer, total_bytes=1024 * KB, levels=2, array=nfu)
    assert res.optimal and res.results[0].blocking.unroll == (1, 1, 16, 16, 1, 1, 1)
    diannao = block(layer, dataclasses.replace(Hierarchy.diannao(), array=nfu))
    assert res.energy_pj / layer.macs == pytest.approx(1.743, abs=5e-4)  # pJ/MAC, BENCHMARKS.md Fig. 6-7
    assert diannao.energy_pj / layer.macs == pytest.approx(8.318, abs=5e-4)
    still = codesign(layer, total_bytes=1024 * KB, levels=2, array=nfu, stationary=True)
    assert still.energy_pj / layer.macs == pytest.approx(0.950, abs=5e-4)  # weights held over the X/Y loops
    both = codesign([layer, Layer(X=7, Y=7, C=64, K=32, Fw=3, Fh=3)], total_bytes=256 * KB, levels=2, array=nfu)
    assert all(r.hierarchy.array == nfu for r in both.results)


C3 = Layer(X=2, Y=2, C=3, K=2, Fw=2, name="c3")
STATIONARY_CASES = [(TINY[1], 64, ARRAY_NOC), (C3, 24, ARRAY_NOC), (C3, 4 * KB, None)]


@pytest.mark.parametrize("layer, budget, array", STATIONARY_CASES,
                         ids=[f"{l.name}-{b}B-{a.name if a else 'no array'}" for l, b, a in STATIONARY_CASES])
def test_stationary_two_levels_exact_equals_exhaustive(layer, budget, array):
    """With stationary MAC operands the brute force also tries every order of the loops inside level 0's tile."""
    brute = design(layer, total_bytes=budget, levels=2, method="exhaustive", array=array, stationary=True)
    exact = design(layer, total_bytes=budget, levels=2, array=array, stationary=True)
    assert exact.hierarchy.stationary and exact.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)
    # holding operands at the multipliers never costs more than re-reading them
    assert exact.energy_pj <= design(layer, total_bytes=budget, levels=2, array=array).energy_pj * (1 + 1e-12)
