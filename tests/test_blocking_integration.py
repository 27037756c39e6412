"""Blocking meets the rest of the engine: layers from graph ops, per-op counts, baselines, co-design, cores."""

from dataclasses import replace

import pytest

import engine
from engine.blocking import (
    Hierarchy,
    Layer,
    Memory,
    block,
    diannao_baseline,
    evaluate,
    im2col,
    layer_access_counts,
    lowered_cost,
    multicore,
    table4,
)
from engine.blocking.counts import _counts
from engine.blocking.hierarchy import access_energy_pj
from engine.errors import EngineError, GraphError
from engine.graph import Graph, Op, OpKind, Tensor

KB = 1024


@pytest.fixture(scope="module")
def small_graph():
    t = [Tensor("x", (2, 8, 16, 16)), Tensor("w1", (12, 4, 3, 3), True), Tensor("c1", (2, 12, 8, 8)),
         Tensor("wd", (12, 1, 3, 3), True), Tensor("d", (2, 12, 8, 8)), Tensor("p", (2, 12, 4, 4)),
         Tensor("n", (2, 12, 4, 4)), Tensor("f", (2, 192)), Tensor("wf", (10, 192), True), Tensor("y", (2, 10)),
         Tensor("q", (2, 3, 5, 7)), Tensor("k", (2, 3, 7, 5)), Tensor("s", (2, 3, 5, 5)), Tensor("e", (2, 10))]
    ops = [Op("conv", OpKind.CONV, ("x",), ("c1",), ("w1",), kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1),
              dilation=(1, 1), groups=2, macs=2 * 12 * 64 * 4 * 9),
           Op("dw", OpKind.DWCONV, ("c1",), ("d",), ("wd",), kernel=(3, 3), stride=(1, 1), dilation=(1, 1),
              groups=12, macs=2 * 12 * 64 * 9),
           Op("pool", OpKind.POOL, ("d",), ("p",), kernel=(2, 2), stride=(2, 2), dilation=(1, 1)),
           Op("lrn", OpKind.NORM, ("p",), ("n",), kernel=(5,), source_type="LRN"),
           Op("flat", OpKind.RESHAPE, ("n",), ("f",)),
           Op("fc", OpKind.MATMUL, ("f",), ("y",), ("wf",), macs=2 * 10 * 192, source_type="Gemm"),
           Op("att", OpKind.MATMUL, ("q", "k"), ("s",), macs=2 * 3 * 5 * 5 * 7, source_type="MatMul"),
           Op("relu", OpKind.ELTWISE, ("y",), ("e",))]
    return Graph.build("small", ops, t, ("x", "q", "k"), ("e", "s"), batch=2)


def test_layers_from_ops(small_graph):
    g = small_graph
    conv = Layer.from_op(g, "conv")
    assert (conv.X, conv.Y, conv.C, conv.K, conv.N, conv.Fw, conv.groups, conv.stride) == (8, 8, 4, 6, 2, 3, 2, (2, 2))
    assert conv.macs == g.op("conv").macs
    dw = Layer.from_op(g, "dw")
    assert (dw.C, dw.K, dw.groups) == (1, 1, 12) and dw.macs == g.op("dw").macs
    pool = Layer.from_op(g, "pool")
    assert (pool.X, pool.groups, pool.Fw, pool.has_weights) == (4, 12, 2, False)
    lrn = Layer.from_op(g, "lrn")
    assert (lrn.X, lrn.Fw, lrn.Y, lrn.N) == (12, 5, 4, 8)
    fc = Layer.from_op(g, "fc")
    assert (fc.C, fc.K, fc.N, fc.X) == (192, 10, 2, 1) and fc.macs == g.op("fc").macs
    att = Layer.from_op(g, "att")
    assert (att.X, att.C, att.K, att.groups) == (5, 7, 5, 6) and att.macs == g.op("att").macs
    with pytest.raises(GraphError, match="loop nest"):
        Layer.from_op(g, "relu")


def test_access_counts_on_accelerator(small_graph):
    acc = engine.Accelerator.preset("optimus")
    counts = layer_access_counts(small_graph, "conv", acc)
    assert [c.level for c in counts.levels] == ["RF", "buffer", "DRAM", "PE array"]
    assert [c.kind for c in counts.levels] == ["rf", "buffer", "dram", "array"]
    layer = counts.layer
    dram = counts.level("DRAM")
    assert dram.reads >= layer.groups * (layer.size("I") + layer.size("W"))
    assert dram.writes >= layer.groups * layer.size("O")
    assert counts.level("RF").reads == layer.macs * 3 - layer.groups * layer.size("O")
    assert counts.loop_nest[-1].strip().startswith("output[")
    assert layer_access_counts(small_graph, "relu", acc) is None
    assert layer_access_counts(small_graph, "flat", acc) is None


def test_access_counts_skip_a_too_small_rf(small_graph):
    counts = layer_access_counts(small_graph, "conv", engine.Accelerator.preset("diannao"))
    assert counts.rf_skipped and counts.level("RF").reads == 0 and counts.level("buffer").reads > 0


def test_access_counts_cached_by_shape():
    from engine.zoo import build

    g = build("resnet50", 1)
    acc = engine.Accelerator.preset("optimus")
    _counts.cache_clear()
    results = [layer_access_counts(g, op, acc) for op in g.ops]
    convs = [r for r in results if r is not None]
    assert len(convs) == sum(op.kind in (OpKind.CONV, OpKind.MATMUL, OpKind.POOL) for op in g.ops)
    assert _counts.cache_info().currsize < len(convs)  # repeated bottleneck shapes searched once
    for r in convs:
        assert r.level("DRAM").writes >= r.layer.groups * r.layer.size("O")


def test_diannao_baseline_fits_and_optimum_beats_it():
    h = Hierarchy.diannao()
    for name in ("Conv3", "Conv5"):
        layer = table4()[name]
        base = evaluate(layer, h, diannao_baseline(layer, h))
        best = block(layer, h)
        assert base.fits
        assert best.energy_pj <= base.memory_pj
        assert best.cost.energy_at("DRAM", "W") < base.energy_at("DRAM", "W")


def test_im2col_gemm_shape_and_cost():
    layer = Layer(X=8, Y=8, C=4, K=8, Fw=3, Fh=3)
    gemm = im2col(layer)
    assert (gemm.X, gemm.C, gemm.K, gemm.Fw) == (64, 36, 8, 1) and gemm.macs == layer.macs
    h = Hierarchy.from_sizes([256, 4 * KB, 64 * KB])
    lowered = lowered_cost(layer, h)
    direct = block(layer, h).cost
    assert lowered.lowering_words == layer.size("I") + 64 * 36
    assert lowered.at("M1") > direct.through("M1")


def test_multicore_one_core_is_single_core_and_broadcast_counts_once():
    layer = Layer(X=8, Y=8, C=8, K=8, Fw=3, Fh=3)
    h = Hierarchy.from_sizes([256, 8 * KB])
    one = multicore(layer, h, cores=1, unroll="K")
    single = block(layer, h)
    assert one.energy_pj == pytest.approx(single.energy_pj)
    four = multicore(layer, h, cores=4, unroll="K")
    dram_in = [e for lv, t, e in four.energy if lv == "DRAM" and t == "I"][0]
    assert dram_in == pytest.approx(four.per_core.cost.energy_at("DRAM", "I"))
    with pytest.raises(EngineError, match="split"):
        multicore(layer, h, cores=3, unroll="K")


@pytest.mark.parametrize("unroll, shared", [("K", 0), ("XY", 1)])
def test_multicore_partition_last_shares_the_chip(unroll, shared):
    """Cores share one chip's last level: partitioned buffers shrink, the shared one stays whole, memory is fixed."""
    layer = Layer(X=8, Y=8, C=8, K=8, Fw=3, Fh=3)
    chip = Hierarchy((Memory.sram("RF", 256, width_bits=512),
                      Memory.split("LL", (4 * KB, 8 * KB, 2 * KB), widths=(512,) * 3), Memory.dram()))
    one = multicore(layer, chip, cores=1, unroll=unroll, partition_last=True)
    assert one.energy_pj == pytest.approx(block(layer, chip).energy_pj)
    four = multicore(layer, chip, cores=4, unroll=unroll, partition_last=True)
    split = four.per_core.hierarchy.on_chip[-1].split_bytes
    assert split[shared] == chip.on_chip[-1].split_bytes[shared]
    assert [b * 4 for i, b in enumerate(split) if i != shared] == \
        [b for i, b in enumerate(chip.on_chip[-1].split_bytes) if i != shared]
    assert four.broadcast_pj == pytest.approx(access_energy_pj(4 * 256 + 14 * KB, width_bits=512))
    with pytest.raises(EngineError, match="split"):
        multicore(layer, Hierarchy.from_sizes([256, 8 * KB]), cores=2, partition_last=True)


def test_per_operand_presets_count_each_level_at_its_own_energy(small_graph):
    acc = engine.Accelerator.preset("tpu-like")
    assert acc.hierarchy == "tpu-like" and acc.word_bits == 8 and acc.energy_pj("dram") == pytest.approx(87.5)
    counts = layer_access_counts(small_graph, "conv", acc)
    assert [(c.level, c.kind) for c in counts.levels] == [
        ("O-reg", "rf"), ("W-reg", "rf"), ("SRAM", "buffer"), ("DRAM", "dram"), ("PE array", "array")]
    best = block(counts.layer, acc)
    assert sum(c.energy_pj for c in counts.levels) == pytest.approx(best.energy_pj)
    sram = counts.level("SRAM")
    assert sram.energy_pj == pytest.approx(sum(a.reads * 1.6256 + a.writes * 1.478125 for a in best.cost.accesses
                                               if a.level == "SRAM"))
    assert counts.loop_nest[0].startswith("# utilisation") and any("W-reg holds (per PE)" in x for x in counts.loop_nest)
    eyeriss = Hierarchy.preset("eyeriss-like")
    assert [m.holds for m in eyeriss.levels] == ["IWO", "WO", "IO", "IWO"] and eyeriss.array.pes == 168


def test_cli_blocks_every_layer_on_a_preset_and_prints_a_loop_nest(capsys):
    """`python -m engine block`: one row per layer with a loop nest, totals equal to the sum of `engine.block`'s."""
    from engine.__main__ import main

    graph = engine.load_network("resnet18")
    hierarchy = Hierarchy.from_accelerator(engine.Accelerator.preset("tpu-like"))
    assert main(["block", "resnet18", "--accelerator", "tpu-like"]) == 0
    rows = capsys.readouterr().out.splitlines()
    layers = [op for op in graph.ops if op.kind.value in ("conv", "matmul", "pool")]
    assert len(rows) == 2 + 2 + len(layers) + 1  # title, head, rule, layers, rule, total
    dram = sum(block(Layer.from_op(graph, op), hierarchy).cost.at("DRAM") for op in layers)
    assert rows[-1].split()[4] == f"{dram:,}"
    assert main(["block", "resnet18", "--accelerator", "eyeriss-like", "--layer", "layer1.0.conv1"]) == 0
    maximal = capsys.readouterr().out
    assert "PE array" in maximal
    assert main(["block", "resnet18", "--accelerator", "eyeriss-like", "--layer", "fc"]) == 0
    maximal = capsys.readouterr().out.splitlines()
    assert main(["block", "resnet18", "--accelerator", "eyeriss-like", "--layer", "fc", "--unrolling", "all"]) == 0
    preset = Hierarchy.from_accelerator(engine.Accelerator.preset("eyeriss-like"))
    every = block(Layer.from_op(graph, graph.op("fc")), replace(preset, array=replace(preset.array, unrolling="all")))
    assert capsys.readouterr().out.splitlines() == every.describe() != maximal  # the fc leaves rows idle: cheaper
    assert main(["block", "resnet18", "--accelerator", "no-such"]) == 2
    assert "no-such" in capsys.readouterr().err
