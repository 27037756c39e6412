"""Yang et al. Sec. 5.2-5.3 on DianNao's datapath: its 16 x 16 NFU under DianNao's own schedule and under multi-core."""

import dataclasses

import pytest

from engine.accelerator import Accelerator
from engine.blocking import Hierarchy, block, codesign, diannao_baseline, evaluate, multicore, table4
from engine.blocking.hierarchy import pe_array

MB = 1024 * 1024
NFU = pe_array(Accelerator.preset("diannao"), (0.0, 0.0, 0.0))


def test_diannao_schedule_on_the_nfu():
    """DianNao's own loop order with its 16-channel blocks as the NFU's unrolling: all 256 lanes busy, never better
    than the optimal schedule on the same buffers and array (figures: BENCHMARKS.md, Fig. 6-7 baselines)."""
    h = dataclasses.replace(Hierarchy.diannao(), array=NFU)
    layer = table4()["Conv5"]
    b = diannao_baseline(layer, h)
    cost = evaluate(layer, h, b)
    assert b.unroll == (1, 1, 16, 16, 1, 1, 1) and cost.fits and cost.utilisation == 1.0
    assert cost.memory_pj / layer.macs == pytest.approx(18.68, abs=5e-3)
    assert block(layer, h).energy_pj / layer.macs == pytest.approx(8.318, abs=5e-4)
    # without the array the same order reads every operand once per MAC from the buffers: dearer
    assert evaluate(layer, Hierarchy.diannao(), diannao_baseline(layer)).memory_pj > cost.memory_pj


def test_multicore_keeps_a_pe_array_per_core():
    """Fig. 9 with an NFU per core: Conv1's co-designed 8 MB chip, its last level shared by 4 cores."""
    layer = table4()["Conv1"]
    chip = codesign(layer, total_bytes=8 * MB, levels=3, array=NFU).hierarchy
    one = multicore(layer, chip, cores=1, unroll="K", partition_last=True)
    assert one.per_core.hierarchy.array == NFU
    assert one.energy_pj == pytest.approx(block(layer, chip).energy_pj)
    k, xy = (multicore(layer, chip, cores=4, unroll=u, partition_last=True) for u in ("K", "XY"))
    assert k.per_core.hierarchy.array == NFU and k.per_core.blocking.unroll == (1, 1, 16, 16, 1, 1, 1)
    assert k.per_core.layer.K == 96 and xy.per_core.layer.Y == 64
    assert k.per_core.hierarchy.on_chip[-1].split_bytes[1] == chip.on_chip[-1].split_bytes[1] // 4  # KB partitioned
    assert xy.per_core.hierarchy.on_chip[-1].split_bytes[1] == chip.on_chip[-1].split_bytes[1]  # KB shared
    assert (one.energy_pj / layer.macs, k.energy_pj / layer.macs, xy.energy_pj / layer.macs) == \
        pytest.approx((1.008, 1.041, 1.244), abs=5e-4)  # BENCHMARKS.md, Fig. 9
