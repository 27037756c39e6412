"""Energy breakdown and latency: hand-counted accesses for one conv, totals and ordering on real plans."""

from __future__ import annotations

import pytest
from test_fusion_cost import convnet

import engine
from engine import zoo
from engine.energy import energy_breakdown, op_accesses
from engine.fusion import fuse

ACC = engine.Accelerator.preset("optimus")  # 16x16 PEs, Ow|Cout: T_h = 1, T_w = 16, T_c = 16


def test_conv_access_counts_by_hand():
    g = convnet([("a", "x", 16, 32, 3, 1)], (1, 16, 8, 8))
    a = op_accesses(g, g.op("a"), ACC)
    blocks = 8 * 1 * 2  # ceil(8/1) rows x ceil(8/16) columns x ceil(32/16) channel blocks
    in_block, w_block = 16 * 3 * (7 + 3), 16 * 16 * 9
    macs = 32 * 64 * 16 * 9
    assert a.macs == a.mac == macs
    assert a.buffer == blocks * (in_block + w_block) + 32 * 64
    assert a.array == blocks * (in_block * 16 + w_block * 1 * 8) + 32 * 64
    assert a.rf == 3 * macs
    assert a.cycles == 8 * 1 * 2 * 16 * 3 * 3
    plan = fuse(g, ACC)
    e = energy_breakdown(g, plan, ACC)
    assert e.utilisation == pytest.approx(macs / (a.cycles * 256)) == pytest.approx(0.5)
    words = plan.dram_bytes / 2
    assert e.dram_pj == pytest.approx(words * 200)
    assert e.buffer_pj == pytest.approx((a.buffer + words) * 6)
    assert e.array_pj == pytest.approx(a.array * 2)
    assert e.rf_pj == pytest.approx(a.rf * 1) and e.mac_pj == pytest.approx(macs * 1)
    assert e.latency_s == pytest.approx(max(a.cycles / 800e6, plan.dram_bytes / 6.4e9))


def test_fusion_cuts_dram_energy_and_latency_on_squeezenet():
    g = zoo.build("squeezenet1_0", 4)
    base, best = (energy_breakdown(g, fuse(g, ACC, method=m), ACC) for m in ("none", "optimus"))
    assert best.dram_pj < base.dram_pj / 3
    assert best.total_pj < base.total_pj and best.latency_s <= base.latency_s
    assert best.rf_pj == base.rf_pj and best.mac_pj == base.mac_pj  # on-chip work does not depend on grouping
    assert best.latency_s == pytest.approx(sum(best.group_latency_s))
    assert best.latency_s >= max(best.compute_s, best.memory_s)


def test_yang_table_prices_levels_by_size():
    g = zoo.build("alexnet", 1)
    acc = engine.Accelerator.preset("diannao")
    e = energy_breakdown(g, fuse(g, acc, method="none"), acc)
    words = dict(e.accesses)
    assert e.dram_pj == pytest.approx(words["dram"] * 320, rel=1e-6)
    assert e.buffer_pj == pytest.approx(words["buffer"] * acc.energy_pj("buffer"))
