"""The blocking model and optimizer (Yang et al.): paper tables, a loop-walking oracle, brute force."""

import itertools
import math
import random

import pytest

import engine
from engine.blocking import (
    DIMS,
    Blocking,
    Hierarchy,
    Layer,
    Memory,
    access_energy_pj,
    block,
    describe,
    evaluate,
    table4,
)
from engine.blocking.exhaustive import divisor_chains
from engine.blocking.layer import RELEVANT
from engine.blocking.model import stored_levels
from engine.errors import EngineError

KB = 1024


# ---- the paper's tables ------------------------------------------------------------
@pytest.mark.parametrize("name, dims", [
    ("Conv1", (256, 256, 256, 384, 11, 11)), ("Conv2", (500, 375, 32, 48, 9, 9)), ("Conv3", (32, 32, 108, 200, 4, 4)),
    ("Conv4", (56, 56, 128, 256, 3, 3)), ("Conv5", (28, 28, 256, 512, 3, 3)),
    ("FC1", (1, 1, 200, 100, 1, 1)), ("FC2", (1, 1, 4096, 4096, 1, 1))])
def test_table4_layers(name, dims):
    layer = table4()[name]
    assert (layer.X, layer.Y, layer.C, layer.K, layer.Fw, layer.Fh) == dims
    assert layer.macs == math.prod(dims)


def test_table4_pool_and_lrn():
    t = table4()
    assert (t["Pool"].groups, t["Pool"].X * t["Pool"].stride[0], t["Pool"].Fw) == (128, 56, 2)
    assert (t["LRN"].X, t["LRN"].Y, t["LRN"].N) == (96, 55, 55)
    assert not t["Pool"].has_weights and not t["LRN"].has_weights


@pytest.mark.parametrize("kb, width, pj", [(1, 64, 1.20), (2, 128, 1.37), (32, 256, 3.52), (256, 64, 15.60),
                                           (1024, 512, 25.22), (1024, 64, 36.32), (8, 512, 1.33)])
def test_table3_energies(kb, width, pj):
    assert access_energy_pj(kb * KB, width_bits=width) == pytest.approx(pj)


def test_table3_interpolation_and_dram():
    e = [access_energy_pj(s) for s in (KB, 3 * KB // 2, 2 * KB, 3 * KB, 4 * KB)]
    assert e == sorted(e) and 1.20 < e[1] < 1.54
    assert access_energy_pj(32 * 1024 * KB) == 320.0
    assert 36.32 < access_energy_pj(8 * 1024 * KB) < 320.0
    assert access_energy_pj(KB, word_bits=32) == pytest.approx(2.40)


def test_diannao_hierarchy():
    h = Hierarchy.diannao()
    assert [h.capacity_words(0, T) for T in "IWO"] == [1024, 16384, 1024]
    assert h.levels[0].energy_pj == pytest.approx((0.91, 2.64, 0.91))
    assert h.levels[1].energy("W") == 320.0


# ---- the model against a walk of the loop nest ----------------------------------------
def simulate(layer, hierarchy, blocking):
    """Walk every iteration of the blocked loops; count a refill whenever a stored tile's indices change."""
    m = len(blocking.tiles)
    loops = [(b, d, blocking.trips(b)[d]) for b in reversed(range(m)) for d in reversed(blocking.orders[b])]
    reads = {(l, T): 0 for l in range(m + 1) for T in "IWO"}
    writes = dict.fromkeys(reads, 0)
    keep = {T: stored_levels(T, blocking) for T in layer.tensors}
    last, seen = {}, set()
    for point in itertools.product(*(range(t) for _, _, t in loops)):
        for T in layer.tensors:
            for i, l in enumerate(keep[T]):
                key = tuple(p for p, (b, d, _) in zip(point, loops) if b >= l and d in RELEVANT[T])
                if last.get((T, l)) == key:
                    continue
                last[T, l] = key
                src = keep[T][i + 1] if i + 1 < len(keep[T]) else m
                fp = layer.footprint(T, blocking.tiles[l])
                if T == "O":
                    writes[src, T] += fp
                    if (l, key) in seen:
                        reads[src, T] += fp
                    seen.add((l, key))
                else:
                    reads[src, T] += fp
    return reads, writes


def random_blocking(layer, m, rng):
    chains = [rng.choice(list(divisor_chains(n, m))) for n in layer.dims]
    tiles = tuple(tuple(c[l] for c in chains) for l in range(m))
    orders = tuple(tuple(rng.sample(DIMS, len(DIMS))) for _ in range(m))
    return Blocking(layer.dims, tiles, orders)


SMALL = [Layer(X=4, Y=2, C=2, K=4, Fw=3, Fh=1, name="conv"), Layer(X=6, C=4, K=2, N=2, name="fc-batch"),
         Layer(X=4, Y=4, C=2, K=2, Fw=2, Fh=2, stride=(2, 2), name="strided"),
         Layer(X=4, Y=2, Fw=3, Fh=2, groups=3, has_weights=False, name="pool")]


@pytest.mark.parametrize("layer", SMALL, ids=lambda l: l.name)
@pytest.mark.parametrize("m", [1, 2, 3])
def test_evaluate_matches_loop_walk(layer, m):
    rng = random.Random(7 * m)
    h = Hierarchy.from_sizes([10 ** 6] * m)
    for _ in range(12):
        b = random_blocking(layer, m, rng)
        cost = evaluate(layer, h, b)
        reads, writes = simulate(layer, h, b)
        names = [x.name for x in h.levels]
        for a in cost.accesses:
            l = names.index(a.level)
            macs = math.prod(layer.dims)
            mac_reads = (macs - layer.size("O") if a.tensor == "O" else macs) if l == 0 else 0
            assert a.reads == layer.groups * (reads[l, a.tensor] + mac_reads), (b, a)
            assert a.writes == layer.groups * (writes[l, a.tensor] + (macs if l == 0 and a.tensor == "O" else 0))


def test_table2_refetch_rates():
    """K outermost reuses the input tile (IB refetch with halo); X, Y refetch the kernels (KB rate X1 Y1 / X0 Y0)."""
    layer = Layer(X=8, Y=8, C=4, K=6, Fw=3, Fh=3)
    b = Blocking.of(layer, dict(X=4, Y=2, C=4, K=2, Fw=3, Fh=3), orders=["KXYC"])
    cost = evaluate(layer, Hierarchy.from_sizes([64 * KB]), b)
    assert cost.at("DRAM", "I") == 4 * (4 + 2) * (2 + 2) * (8 // 4) * (8 // 2)  # C (X0+Fw-1)(Y0+Fh-1) x tiles
    assert cost.at("DRAM", "W") == layer.size("W") * (8 // 4) * (8 // 2)
    assert cost.at("DRAM", "O") == layer.size("O")  # C is whole inside: each output leaves once, never read back
    assert cost.at("M0", "O") == 2 * layer.macs - layer.size("O")
    assert cost.at("M0", "I") == cost.at("M0", "W") == layer.macs


def test_dram_accesses_at_least_compulsory():
    rng = random.Random(3)
    for layer in SMALL:
        for m in (1, 2):
            h = Hierarchy.from_sizes([10 ** 6] * m)
            for _ in range(20):
                cost = evaluate(layer, h, random_blocking(layer, m, rng))
                for T in layer.tensors:
                    assert cost.at("DRAM", T) >= layer.groups * layer.size(T)


def test_overflow_reported():
    layer = table4()["Conv5"]
    b = Blocking.of(layer, dict(X=28, Y=28, C=256, K=512, Fw=3, Fh=3))
    cost = evaluate(layer, Hierarchy.diannao(), b)
    assert not cost.fits and any("KB" in msg for msg in cost.overflow)


def test_blocking_validation():
    layer = Layer(X=6, C=4)
    with pytest.raises(EngineError, match="divisor"):
        Blocking.of(layer, dict(X=4))
    with pytest.raises(EngineError, match="once"):
        Blocking(layer.dims, ((1,) * 7,), (("X", "X", "C", "K", "N", "Fw", "Fh"),))
    with pytest.raises(EngineError, match="on-chip levels"):
        evaluate(layer, Hierarchy.from_sizes([KB, 4 * KB]), Blocking.of(layer, dict(X=2)))


# ---- the optimizer against brute force -----------------------------------------------
HIERARCHIES = {
    "one shared": Hierarchy.from_sizes([64]),
    "split": Hierarchy((Memory.split("buf", (24, 48, 16)), Memory.dram())),
    "two shared": Hierarchy.from_sizes([32, 256]),
    "three shared": Hierarchy.from_sizes([16, 64, 512]),
    "rf + split": Hierarchy((Memory.sram("RF", 24), Memory.split("buf", (64, 96, 32)), Memory.dram())),
}
TINY = [Layer(X=4, Y=2, C=2, K=4, Fw=3, name="conv"), Layer(X=4, C=6, K=4, name="fc"),
        Layer(X=2, Y=4, C=2, K=2, Fw=2, Fh=2, stride=(2, 1), name="strided"),
        Layer(X=4, Y=2, Fw=2, Fh=3, groups=2, has_weights=False, name="pool")]


# three on-chip levels multiply the orders to enumerate: smaller layers there
DEEP = [Layer(X=4, C=2, K=2, Fw=2, name="conv-1d"), Layer(X=2, Y=2, C=2, K=2, name="fc-2x2"),
        Layer(X=2, Y=2, Fw=2, Fh=2, groups=2, has_weights=False, name="pool-2x2")]
CASES = [(layer, h) for h in ("one shared", "split", "two shared", "rf + split") for layer in TINY] + \
        [(layer, "three shared") for layer in DEEP]


@pytest.mark.parametrize("layer, hname", CASES, ids=[f"{h}-{l.name}" for l, h in CASES])
def test_exact_equals_exhaustive(layer, hname):
    h = HIERARCHIES[hname]
    exact = block(layer, h)
    brute = block(layer, h, method="exhaustive")
    assert exact.cost.fits
    assert exact.energy_pj == pytest.approx(brute.energy_pj, rel=1e-12)
    assert brute.evaluated > exact.evaluated / 100  # the brute force really enumerated


def test_block_reports_levels_and_time():
    r = engine.block(table4()["Conv5"], "diannao")
    assert r.optimal and r.cost.fits and r.seconds > 0
    assert set(r.accesses) == {"buffer", "DRAM"}
    assert r.accesses["DRAM"] >= sum(table4()["Conv5"].size(T) for T in "IWO")
    assert r.energy_pj == pytest.approx(r.cost.memory_pj)


def test_levels_restricts_hierarchy():
    h = Hierarchy((Memory.sram("RF", 64), Memory.sram("SRAM", 32 * KB), Memory.dram()))
    r = block(Layer(X=8, Y=8, C=8, K=8, Fw=3, Fh=3), h, levels=["SRAM"])
    assert [m.name for m in r.hierarchy.levels] == ["SRAM", "DRAM"]
    with pytest.raises(engine.UnknownNameError):
        block(Layer(X=8), h, levels=["L9"])


def test_too_small_innermost_level_says_what_to_do():
    with pytest.raises(EngineError, match="levels="):
        block(Layer(X=4, C=4, K=4), Hierarchy.from_sizes([4]))


def test_describe_renders_loop_nest():
    layer = Layer(X=8, Y=8, C=4, K=6, Fw=3, Fh=3)
    b = Blocking.of(layer, dict(X=4, Y=2, C=4, K=2, Fw=3, Fh=3), orders=["KXYC"])
    lines = describe(b, ["buffer", "DRAM"])
    assert lines[-1].strip().startswith("output[")
    loops = [ln.strip() for ln in lines if ln.strip().startswith("for")]
    assert loops[:3] == ["for y1 in range(0, 8, 2):", "for x1 in range(0, 8, 4):", "for k1 in range(0, 6, 2):"]
    assert "for fw0 in range(3):" in loops
    assert any("buffer holds the tile" in ln for ln in lines)
