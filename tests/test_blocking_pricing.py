"""Complete pricing of the blocking model: the zero border made on chip (DRAM moves only real input positions),
partial sums at their own width, both ends of every transfer (ZigZag's charging), the vector unit, per-level
bandwidth and area, and the tpu-v4i preset. The exact search under the new prices is checked against brute force
in tests/test_blocking_spatial.py (the walk of every PE's data, and every tile chain, order and unrolling)."""

import dataclasses
import itertools
import random

import pytest

import engine
from engine.blocking import Hierarchy, Layer, Memory, area_mm2, block, evaluate
from engine.blocking.layer import DIMS
from engine.blocking.model import Blocking, window_sum
from engine.energy import vector_cost
from engine.errors import AcceleratorError, EngineError, UnknownNameError


# ---- the zero border ---------------------------------------------------------------------------------------
def real_positions(layer, unroll, axis, a, f, inside):
    """Real input positions along `axis` that every tile of `a` output and `f` window steps touches (per PE lane
    inside the array), summed over the tiles: enumerated index by index."""
    out, win = (("X", "Fw"), ("Y", "Fh"))[axis]
    s = dict(zip(DIMS, unroll))
    so, sw, n_out, n_win = s[out], s[win], getattr(layer, out), getattr(layer, win)
    lo, hi = layer.real_range(axis)
    stride, dilation = layer.stride[axis], layer.dilation[axis]
    total = 0
    for p, q in itertools.product(range(-(-n_out // so) // a), range(-(-n_win // sw) // f)):
        for j, k in itertools.product(range(so), range(sw)) if inside else [(None, None)]:
            if inside:
                outs = [(p * a + i) * so + j for i in range(a)]
                taps = [(q * f + i) * sw + k for i in range(f)]
            else:
                outs, taps = range(p * a * so, (p + 1) * a * so), range(q * f * sw, (q + 1) * f * sw)
            total += len({o * stride + t * dilation for o in outs if o < n_out for t in taps if t < n_win
                          if lo <= o * stride + t * dilation < hi})
    return total


def test_border_words_match_an_enumeration_of_real_input_positions():
    rng = random.Random(7)
    for _ in range(150):
        x, fw, stride, dilation = rng.randint(1, 9), rng.randint(1, 5), rng.randint(1, 3), rng.randint(1, 2)
        extent = (x - 1) * stride + (fw - 1) * dilation + 1
        begin = rng.randint(0, min(3, extent - 1))
        end = rng.randint(0, max(0, min(3, extent - begin - 1)))
        layer = Layer(X=x, Fw=fw, stride=(stride, 1), dilation=(dilation, 1), pad=(begin, end, 0, 0))
        unroll = (rng.randint(1, 4), 1, 1, 1, 1, rng.randint(1, 3), 1)
        steps_x, steps_w = -(-x // unroll[0]), -(-fw // unroll[5])
        a = rng.choice([d for d in range(1, steps_x + 1) if steps_x % d == 0])
        f = rng.choice([d for d in range(1, steps_w + 1) if steps_w % d == 0])
        for inside in (False, True):
            assert window_sum(layer, unroll, 0, a, f, inside, True) == real_positions(layer, unroll, 0, a, f, inside)


def test_dram_moves_only_the_real_input_of_a_padded_depthwise_layer():
    """MobileNet-V2's features.15.conv.1.0 (3x3 depthwise, 960 channels, 7x7, pad 1): ZigZag 3.9.1 reads 47,040
    input words from DRAM on eyeriss_like, the real input (960 x 7 x 7); the padded tile is 77,760 words."""
    g = engine.load_network("mobilenet_v2")
    layer = Layer.from_op(g, "features.15.conv.1.0")
    assert layer.pad == (1, 1, 1, 1) and layer.groups == 960
    assert layer.groups * layer.footprint("I", layer.dims) == 77_760
    assert layer.groups * layer.size("I") == 47_040
    result = block(layer, Hierarchy.preset("eyeriss-like"))
    assert result.cost.at("DRAM", "I") == 47_040


def test_stride_two_border_ends_where_the_windows_end():
    """ResNet-18's layer2.0.conv1 (3x3, stride 2, 56 -> 28, pads 1 and 1): the windows reach 57 positions, the
    input has 56, so the end pad is never read; DRAM moves 64 x 56 x 56 input words, as ZigZag counts them."""
    g = engine.load_network("resnet18")
    layer = Layer.from_op(g, "layer2.0.conv1")
    assert layer.pad == (1, 0, 1, 0) and layer.size("I") == 64 * 56 * 56
    assert block(layer, Hierarchy.preset("tpu-like")).cost.at("DRAM", "I") == 64 * 56 * 56


def test_on_chip_levels_still_move_and_hold_the_padded_tile():
    """The border is made on chip: a tile read from an on-chip level includes it (the MACs read zeros)."""
    layer = Layer(X=4, C=2, K=2, Fw=3, pad=(1, 1, 0, 0))
    h = Hierarchy((Memory("RF", size_bytes=64, energy_pj=(1, 1, 1)), Memory.dram()))
    tile = {"X": 4, "C": 2, "K": 2, "Fw": 3}
    cost = evaluate(layer, h, Blocking.of(layer, tile))
    assert cost.at("DRAM", "I") == 2 * 4  # the real input only
    assert cost.at("RF", "I") == layer.macs  # one input read per MAC, the border's zeros too
    rf = next(a for a in cost.accesses if a.level == "RF" and a.tensor == "I")
    assert rf.stored_words == 2 * 6


# ---- partial sums and both ends ----------------------------------------------------------------------------
def accumulate(psum_bits=None, charge="served"):
    """Two outputs (X = 2) each reduced over C = 4 in two passes of an RF tile of C = 2, X innermost above the RF,
    so the partial sums spill to the buffer once; 16-bit words."""
    layer = Layer(X=2, C=4)
    h = Hierarchy((Memory("RF", size_bytes=16, energy_pj=(1, 1, 2), write_pj=(1, 1, 3)),
                   Memory("buf", size_bytes=64, energy_pj=(10, 10, 20), write_pj=(10, 10, 30)),
                   Memory.dram()), psum_bits=psum_bits, charge=charge)
    return evaluate(layer, h, Blocking.of(layer, {"C": 2}, {"X": 2, "C": 4}, orders=["XC", "XC"]))


def energies(cost):
    return {(a.level, a.tensor): a.energy_pj for a in cost.accesses if a.energy_pj}


def test_partial_sums_at_their_own_width_by_hand():
    """Served (Yang's Eq. 1): the RF's outputs take 8 MAC writes and 6 reads (the first of each is a free zero), the
    buffer 4 partial sums written and 2 read back, DRAM the 2 final outputs. 32-bit partial sums double every output
    transfer but the final one to DRAM; inputs and weights keep their price."""
    served = energies(accumulate())
    assert served["RF", "O"] == 8 * 3 + 6 * 2 and served["buf", "O"] == 4 * 30 + 2 * 20
    assert served["DRAM", "O"] == 2 * 320
    wide = energies(accumulate(psum_bits=32))
    assert wide["RF", "O"] == 2 * served["RF", "O"] and wide["buf", "O"] == 2 * served["buf", "O"]
    assert wide["DRAM", "O"] == 2 * 320  # final outputs, at the word's width
    assert wide["RF", "I"] == served["RF", "I"] == 8 and wide["buf", "W"] == served["buf", "W"] == 4 * 10


def test_both_ends_charges_fills_read_outs_and_zero_reads_by_hand():
    """Both ends (ZigZag): a level also writes the fills it receives (the RF 4 loads of 2 inputs and 2 of 2 weights,
    the buffer the 8 inputs and 4 weights from DRAM) and reads its outputs out upwards (the RF 4 partial sums, the
    buffer the 2 final outputs), the RF writes the 2 partial sums brought back, and partial sums read their zero."""
    both = energies(accumulate(psum_bits=32, charge="both-ends"))
    assert both["RF", "I"] == 8 + 8 and both["RF", "W"] == 8 + 4
    assert both["buf", "I"] == 8 * 10 + 8 * 10 and both["buf", "W"] == 4 * 10 + 4 * 10
    assert both["RF", "O"] == 2 * (8 * 3 + 8 * 2) + 2 * (4 * 2 + 2 * 3)  # MACs (zeros too), then read-outs, refills
    assert both["buf", "O"] == 2 * (4 * 30 + 4 * 20) + 2 * 20  # partial sums written and read, the finals read out
    assert both["DRAM", "O"] == 2 * 320


def test_zigzag_pricing_on_tpu_like_matches_its_per_level_energies():
    """layer4.0.conv2 on tpu_like: ZigZag's LOMA mapping and ours agree on the loops that matter, and with 16-bit
    partial sums and both ends charged the O-reg's energy is ZigZag's 4,956,586 pJ to 1 %, the DRAM's exactly."""
    from benchmarks.bench_zigzag import best_of_mappers, layer_of, like_for_like
    row = next(r for r in best_of_mappers("tpu_like") if "layer4.0/conv2" in r["name"])
    cost = block(layer_of(row), like_for_like("tpu_like")).cost
    zz = {(lv["memory"], T): lv["energy_pj"] for T, lvs in row["operands"].items() for lv in lvs}
    assert cost.energy_at("O-reg", "O") == pytest.approx(zz["rf_2B", "O"], rel=0.01)
    assert cost.energy_at("DRAM") == pytest.approx(sum(v for (m, _), v in zz.items() if m == "dram"), rel=1e-9)


def test_bad_pricing_input_names_what_is_wrong():
    with pytest.raises(EngineError, match="psum_bits"):
        Hierarchy((Memory("RF", size_bytes=8), Memory.dram()), word_bits=16, psum_bits=8)
    with pytest.raises(UnknownNameError, match="both-ends"):
        Hierarchy((Memory("RF", size_bytes=8), Memory.dram()), charge="zigzag")
    with pytest.raises(EngineError, match="read_bw"):
        Memory("RF", size_bytes=8, read_bw=0)
    with pytest.raises(EngineError, match="area_mm2"):
        Memory("RF", size_bytes=8, area_mm2=-1.0)
    with pytest.raises(EngineError, match="pad"):
        Layer(X=2, Fw=3, pad=(1, -1, 0, 0))
    with pytest.raises(EngineError, match="no real input"):
        Layer(X=1, Fw=3, pad=(2, 1, 0, 0))
    with pytest.raises(AcceleratorError, match="partial-sum bits"):
        dataclasses.replace(engine.Accelerator.preset("tpu-like"), psum_bits=4)


# ---- the vector unit ---------------------------------------------------------------------------------------
def test_vector_cost_of_an_add_on_tpu_v4i_and_on_the_pe_array():
    """ResNet-18's first residual add: 2 x 64 x 56 x 56 = 401,408 operations. tpu-v4i's four 128-lane scalar units
    take 784 cycles at 0 pJ (AccelForge's figure); optimus has no vector unit, so its 256 PEs do it at a MAC's 1 pJ."""
    g = engine.load_network("resnet18")
    v4i = vector_cost(g, "layer1.0.add", engine.Accelerator.preset("tpu-v4i"))
    assert (v4i.operations, v4i.cycles, v4i.energy_pj) == (401_408, 784, 0.0)
    optimus = vector_cost(g, "layer1.0.add", engine.Accelerator.preset("optimus"))
    assert (optimus.operations, optimus.cycles, optimus.energy_pj) == (401_408, 1568, 401_408.0)
    with pytest.raises(EngineError, match="PE array"):
        vector_cost(g, "layer1.0.conv1", engine.Accelerator.preset("tpu-v4i"))


# ---- tpu-v4i, bandwidth and area ---------------------------------------------------------------------------
def test_tpu_v4i_levels_as_accelforge_gives_them():
    """AccelForge 1.0.467's tpu_v4i.yaml, per 8-bit word: LocalBuffer 0.249 / 0.293 pJ a bit, GlobalBuffer 1.88 /
    2.36, MainMemory 7.03; GlobalBuffer ports 2048 and 1024 GB/s at 1.05 GHz; 128 x 128 PEs, C over the rows."""
    acc = engine.Accelerator.preset("tpu-v4i")
    h = Hierarchy.from_accelerator(acc)
    assert [m.name for m in h.levels] == ["Register", "LocalBuffer", "GlobalBuffer", "MainMemory"]
    local, glob, main = h.levels[1:]
    assert local.size_bytes == 4 * 2**20 and glob.size_bytes == acc.buffer_bytes == 128 * 2**20
    assert local.energy("I") == pytest.approx(1.992) and local.write_energy("O") == pytest.approx(2.344)
    assert glob.energy("W") == pytest.approx(15.04) and glob.write_energy("W") == pytest.approx(18.88)
    assert main.energy("O") == pytest.approx(56.24) and h.mac_pj == pytest.approx(0.084)
    assert glob.read_bw == pytest.approx(2048e9 / 1.05e9) and glob.write_bw == pytest.approx(1024e9 / 1.05e9)
    assert local.read_bw is None and h.array.pes == 128 * 128 and h.array.dataflow == (("C", "rows"), ("K", "cols"))
    assert h.both_ends and h.array_level == 1


def test_tpu_v4i_evaluates_with_the_blocking_access_model():
    g = engine.load_network("resnet18")
    acc = engine.Accelerator.preset("tpu-v4i")
    report = engine.evaluate(g, acc, methods=("none",), access_model="blocking")
    assert report.energy["none"].total_pj > 0
    assert "tpu-v4i" in engine.Accelerator.presets()


def test_area_per_component():
    """tpu-v4i: GlobalBuffer 112 mm2, four LocalBuffers of 51 together and four scalar units of 8.7 (AccelForge, from
    the paper's Fig. 6 and die photo), 65,536 PEs of 850 um2 and their 85 um2 weight registers: 259.1 mm2, FFM's
    area of tpu_v4i.yaml component by component (benchmarks/data/ffm_gpt3.json). optimus at
    Orojenesis's 40 nm figures: 128 KB at 2.59 um2 a byte, 256 PEs of 332.25 um2 and 64 B registers each."""
    v4i = area_mm2(engine.Accelerator.preset("tpu-v4i"))
    assert v4i == pytest.approx({"Register": 5.57056, "LocalBuffer": 51.0, "GlobalBuffer": 112.0,
                                 "PE array": 55.7056, "vector unit": 34.8})
    assert sum(v4i.values()) == pytest.approx(259.07616)
    optimus = area_mm2(engine.Accelerator.preset("optimus"))
    assert optimus == pytest.approx({"RF": 256 * 64 * 2.59e-6, "buffer": 131072 * 2.59e-6, "PE array": 256 * 332.25e-6})
    for name in engine.Accelerator.presets():
        assert all(v > 0 for v in area_mm2(engine.Accelerator.preset(name)).values()), name


def test_a_preset_missing_an_area_figure_says_which():
    acc = engine.Accelerator.preset("optimus")
    with pytest.raises(AcceleratorError, match="sram_um2_per_byte"):
        area_mm2(dataclasses.replace(acc, sram_um2_per_byte=None))
    with pytest.raises(AcceleratorError, match="mac_um2"):
        area_mm2(dataclasses.replace(acc, mac_um2=None))
    with pytest.raises(AcceleratorError, match="vector_mm2"):
        area_mm2(dataclasses.replace(acc, vector_lanes=64))
