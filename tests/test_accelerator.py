"""Accelerator presets carry their papers' figures; bad values raise clear errors."""

import dataclasses

import pytest

import engine
from engine.memory_energy import access_energy_pj

KB = 1024


def test_every_preset_loads_and_cites_a_source():
    names = engine.Accelerator.presets()
    assert {"optimus", "eyeriss", "shidiannao", "diannao", "exynos-npu"} <= set(names)
    assert {f"optimus-config{i}" for i in range(1, 9)} <= set(names)
    for name in names:
        acc = engine.Accelerator.preset(name)
        assert acc.source, name


def test_optimus_table2():
    acc = engine.Accelerator.preset("optimus")
    assert (acc.buffer_bytes, acc.pe_rows, acc.pe_cols, acc.rf_bytes, acc.word_bits) == (128 * KB, 16, 16, 64, 16)
    assert acc.clock_hz == 800e6


@pytest.mark.parametrize("i,pe,rf,buf", [(1, 16, 64, 128), (2, 32, 64, 128), (3, 16, 64, 256), (4, 32, 64, 256),
                                          (5, 8, 64, 512), (6, 16, 64, 512), (7, 32, 32, 512), (8, 64, 32, 512)])
def test_optimus_table3(i, pe, rf, buf):
    acc = engine.Accelerator.preset(f"optimus-config{i}")
    assert (acc.pe_rows, acc.pe_cols, acc.rf_bytes, acc.buffer_bytes) == (pe, pe, rf, buf * KB)


def test_split_buffers():
    dn = engine.Accelerator.preset("diannao")
    assert (dn.input_buffer_bytes, dn.weight_buffer_bytes, dn.output_buffer_bytes) == (2 * KB, 32 * KB, 2 * KB)
    assert dn.buffer_bytes == 36 * KB and dn.pes == 256
    assert [lv.name for lv in dn.levels] == ["RF", "IB", "KB", "OB", "DRAM"]
    npu = engine.Accelerator.preset("exynos-npu")
    assert (npu.buffer_bytes, npu.pes, npu.word_bits) == (1024 * KB, 1024, 8)


def test_with_copies_are_frozen_and_validated():
    acc = engine.Accelerator.preset("optimus")
    big = acc.with_buffer(256 * KB)
    assert big.buffer_bytes == 256 * KB and acc.buffer_bytes == 128 * KB
    assert acc.with_pe_array(32, 8).pes == 256
    with pytest.raises(dataclasses.FrozenInstanceError):
        acc.buffer_bytes = 1
    unified = engine.Accelerator.preset("shidiannao").with_buffer(64 * KB)
    assert not unified.split_buffers and unified.buffer_bytes == 64 * KB


@pytest.mark.parametrize("change", [
    lambda a: a.with_buffer(0), lambda a: a.with_buffer(-5), lambda a: a.with_buffer(2**40),
    lambda a: a.with_pe_array(0, 16), lambda a: a.with_rf(-1), lambda a: a.with_word_bits(0),
    lambda a: a.with_bandwidth(0), lambda a: a.with_buffer(1.5), lambda a: a.with_buffer(True)])
def test_bad_values_raise(change):
    with pytest.raises(engine.AcceleratorError, match="accelerator 'optimus'"):
        change(engine.Accelerator.preset("optimus"))


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(engine.UnknownNameError, match="optimus-config3"):
        engine.Accelerator.preset("tpu-v9")


def test_yang_table3_energies():
    assert access_energy_pj(32 * KB) == pytest.approx(5.82)  # the 64-bit column
    assert access_energy_pj(1024 * KB) == pytest.approx(36.32)
    assert access_energy_pj(64 * 1024 * KB) == 320.0
    assert 5.82 < access_energy_pj(48 * KB) < 8.10  # interpolated between the 32 KB and 64 KB rows
    levels = engine.Accelerator.preset("diannao").levels
    assert [round(lv.energy_pj, 2) for lv in levels[1:]] == [1.54, 5.82, 1.54, 320.0]
