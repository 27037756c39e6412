"""Multi-core under the paper's Fig. 9 assumption: a fixed single-core schedule with its last-level loop unrolled over
cores that share the chip's last level (Yang et al. Sec. 3.3-3.4), checked against direct counts."""

import pytest

from engine.accelerator import Accelerator
from engine.blocking import Blocking, Hierarchy, Layer, Memory, access_energy_pj, codesign, evaluate, multicore, table4
from engine.blocking.codesign import fitted_hierarchy
from engine.blocking.hierarchy import pe_array
from engine.errors import EngineError

KB = 1024
MB = 1024 * KB
LAYER = Layer(X=4, Y=8, C=4, K=8, Fw=1, Fh=1, name="tiny")
CHIP = Hierarchy((Memory.sram("RF", 64, width_bits=512),
                  Memory.split("LL", (2 * KB, 2 * KB, 2 * KB), widths=(512,) * 3), Memory.dram()))


def schedule(order: str) -> Blocking:
    """Level 0 keeps X2 Y2 C2 K2, the last level the whole layer: its block loops X 2, Y 4, C 2, K 4 trips."""
    return Blocking.of(LAYER, dict(X=2, Y=2, C=2, K=2), dict(X=4, Y=8, C=4, K=8), orders=[order, "XYCK"])


@pytest.mark.parametrize("order, saved", [("CXYK", 2), ("KCXY", 1)])
def test_fixed_schedule_k_equals_a_direct_count(order, saved):
    """K over 2 cores: each core's RF and its half of KB and OB count once per core at the half-size price, the input
    is broadcast from the whole IB at the price of a memory of all on-chip bytes, DRAM is the single core's."""
    single = evaluate(LAYER, CHIP, schedule(order))
    r = multicore(LAYER, CHIP, cores=2, unroll="K", partition_last=True, schedule=schedule(order))
    core = r.per_core.cost
    assert r.loops == "K2" and r.per_core.layer.K == 4
    assert r.per_core.hierarchy.on_chip[-1].split_bytes == (2 * KB, KB, KB)
    # K outermost in the block: each core's input refills are half the single core's; K innermost: all of them
    broadcast = core.at("LL", "I")
    assert broadcast * saved == single.at("LL", "I")
    assert 2 * core.at("LL", "W") == single.at("LL", "W") and 2 * core.at("LL", "O") == single.at("LL", "O")
    wire = access_energy_pj(2 * 64 + 2 * KB + 2 * KB + 2 * KB, width_bits=512)
    half = access_energy_pj(KB, width_bits=512)
    expected = (2 * core.energy_at("RF") + broadcast * wire + 2 * (core.at("LL", "W") + core.at("LL", "O")) * half
                + single.energy_at("DRAM"))
    assert r.broadcast_pj == pytest.approx(wire)
    assert r.energy_pj == pytest.approx(expected)


@pytest.mark.parametrize("unroll", ["K", "XY"])
def test_fixed_schedule_on_one_core_is_the_schedule(unroll):
    r = multicore(LAYER, CHIP, cores=1, unroll=unroll, partition_last=True, schedule=schedule("CXYK"))
    assert r.energy_pj == pytest.approx(evaluate(LAYER, CHIP, schedule("CXYK")).memory_pj)


def test_fixed_schedule_xy_keeps_each_cores_halo_and_spills_onto_x():
    """XY on a 3x3 layer with tile-sized buffers: Y's 4 trips take 4 cores, X's 2 the rest; each core's IB holds its
    rows and columns with their halo (more than 1/cores of the chip's), KB stays whole, DRAM is the single core's."""
    layer = Layer(X=4, Y=8, C=4, K=8, Fw=3, Fh=3, name="halo")
    sched = Blocking.of(layer, dict(X=2, Y=2, C=2, K=2, Fw=3, Fh=3), dict(X=4, Y=8, C=4, K=8), orders=["CXYK", "XYCK"])
    chip = fitted_hierarchy(layer, sched)
    ib, kb, ob = chip.on_chip[-1].split_bytes
    assert (ib, kb, ob) == (2 * 6 * 10 * 4, 2 * 8 * 4 * 9, 2 * 4 * 8 * 8)
    single = evaluate(layer, chip, sched)
    four = multicore(layer, chip, cores=4, unroll="XY", partition_last=True, schedule=sched)
    eight = multicore(layer, chip, cores=8, unroll="XY", partition_last=True, schedule=sched)
    assert (four.loops, eight.loops) == ("Y4", "Y4 X2")
    assert four.per_core.hierarchy.on_chip[-1].split_bytes == (2 * 6 * 4 * 4, kb, ob // 4)
    assert eight.per_core.hierarchy.on_chip[-1].split_bytes == (2 * 4 * 4 * 4, kb, ob // 8)
    assert four.broadcast_pj == pytest.approx(access_energy_pj(4 * sum(chip.on_chip[0].split_bytes) + kb
                                                               + 4 * (2 * 6 * 4 * 4 + ob // 4), width_bits=512))
    for r in (four, eight):
        assert [e for lv, _, e in r.energy if lv == "DRAM"] == pytest.approx(
            [a.energy_pj for a in single.accesses if a.level == "DRAM"])
        assert r.per_core.cost.fits
    with pytest.raises(EngineError, match=r"'halo'.*XY over 16 cores at last level 'L1': its Y loop 4 and its X loop 2"):
        multicore(layer, chip, cores=16, unroll="XY", partition_last=True, schedule=sched)


def test_fixed_schedule_bad_input():
    sched = schedule("CXYK")
    with pytest.raises(EngineError, match=r"layer 'tiny'.*K over 8 cores at last level 'LL': its K loop 4 trips"):
        multicore(LAYER, CHIP, cores=8, unroll="K", partition_last=True, schedule=sched)
    with pytest.raises(EngineError, match="partition_last=True"):
        multicore(LAYER, CHIP, cores=2, unroll="K", schedule=sched)
    with pytest.raises(EngineError, match="cores must be"):
        multicore(LAYER, CHIP, cores=0, unroll="K", partition_last=True, schedule=sched)
    with pytest.raises(EngineError, match="bounds"):  # a schedule made for another layer
        multicore(Layer(X=4, Y=8, C=4, K=16, Fw=1, Fh=1), CHIP, cores=2, partition_last=True, schedule=sched)
    small = Hierarchy((Memory.sram("RF", 64, width_bits=512), Memory.split("LL", (KB, KB, 256)), Memory.dram()))
    with pytest.raises(EngineError, match="does not fit chip.*LL OB"):
        multicore(LAYER, small, cores=2, partition_last=True, schedule=sched)


def test_fig9_conv1_fixed_schedule_on_the_nfu():
    """Fig. 9 under the paper's assumption on Conv1's co-designed 3-level 8 MB chip (sched4 in BENCHMARKS.md): XY over
    X falls below one core from 4 cores on; K's loop has 2 trips at the last level, so 4 cores cannot take it."""
    layer = table4()["Conv1"]
    res = codesign(layer, total_bytes=8 * MB, levels=3, array=pe_array(Accelerator.preset("diannao"), (0.0,) * 3))
    chip, sched = res.hierarchy, res.results[0].blocking
    xy = [multicore(layer, chip, cores=n, unroll="XY", partition_last=True, schedule=sched) for n in (1, 2, 4, 8)]
    assert [r.loops for r in xy] == ["", "X2", "X4", "X8"]
    assert [r.energy_pj / layer.macs for r in xy] == pytest.approx([1.008, 1.023, 0.979, 0.957], abs=5e-4)
    k2 = multicore(layer, chip, cores=2, unroll="K", partition_last=True, schedule=sched)
    assert k2.energy_pj / layer.macs == pytest.approx(1.008, abs=5e-4)
    with pytest.raises(EngineError, match="its K loop 2 trips"):
        multicore(layer, chip, cores=4, unroll="K", partition_last=True, schedule=sched)
