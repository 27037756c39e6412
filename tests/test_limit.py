"""The attainable limit: exact ski-slopes (brute force, the GEMM first principle) and bounds under every plan."""

from __future__ import annotations

import math
import random
from itertools import permutations, product

import numpy as np
import pytest

import engine
from engine import zoo
from engine.explore import CURVE_BUFFERS_KB
from engine.fusion import fuse, group_cost, oracle_bytes
from engine.fusion.cost import model_of
from engine.limit import Einsum, Rank, at, gemm, op_curve, ski_slope
from engine.limit.einsum import SAME, WINDOW

KB = 1024


def brute_force(e: Einsum, word_bits: int, stream: int = 0) -> tuple[tuple[int, int], ...]:
    """Pareto steps over every tile size of every rank, every order of the outer loops, every streamed operand."""
    ranks = [("s", d) for d in range(len(e.spatial))] + [("c", 0), ("k", 0)]
    sizes = [r.out for r in e.spatial] + [e.c, e.k]
    uses = {"A": "sc", "W": "ck", "B": "sk"}  # the ranks each tensor is indexed by
    points: dict[int, int] = {}
    for tiles in product(*(range(1, s + 1) for s in sizes)):
        trips = [-(-s // t) for s, t in zip(sizes, tiles)]
        a = math.prod(int(r.need(np.array([t]))[0]) for r, t in zip(e.spatial, tiles))
        b = math.prod(tiles[:len(e.spatial)])
        c0, k0 = tiles[-2], tiles[-1]
        held_tiles = {"A": a * c0, "W": c0 * k0 * e.window, "B": b * k0}
        for order, streamed in product(permutations(range(len(ranks))), "AWB"):
            held = sum(held_tiles.values()) - held_tiles[streamed] + stream  # groups one at a time
            need = -(-held * word_bits // 8)
            live = [i for i in order if trips[i] > 1]  # loops of one iteration reload nothing
            factor = {}
            for t, idx in uses.items():
                if t == streamed:  # not held: re-read on every iteration of the loops it is not indexed by
                    factor[t] = math.prod(trips[i] for i in range(len(ranks)) if ranks[i][0] not in idx)
                    continue
                last = max((n for n, i in enumerate(live) if ranks[i][0] in idx), default=-1)
                factor[t] = math.prod(trips[live[n]] for n in range(last) if ranks[live[n]][0] not in idx)
            cost = e.a_bytes * factor["A"] + e.w_bytes * factor["W"] + e.b_bytes * (2 * factor["B"] - 1)
            if cost < points.get(need, cost + 1):
                points[need] = cost
    steps, best = [], None
    for need in sorted(points):
        if best is None or points[need] < best:
            best = points[need]
            steps.append((need, best))
    return tuple(steps)


@pytest.mark.parametrize("m,k,n", [(4, 4, 4), (3, 4, 5), (2, 6, 3), (5, 2, 4), (16, 8, 32), (64, 16, 8)])
def test_gemm_reaches_full_reuse_at_smallest_operand_plus_smallest_rank_plus_one(m, k, n):
    # Huang et al. Sec. IV-1: the maximal effectual buffer of a GEMM is its smallest operand + smallest rank + 1
    # elements (one element of the streamed operand); the cost model streams parameters in no room (the + 0)
    for stream in (1, 0):
        steps = ski_slope(gemm(m, k, n, 8), 8, stream)  # 8-bit words: bytes are elements
        full, traffic = steps[-1]
        assert traffic == m * k + k * n + m * n
        assert full == min(m * k, k * n, m * n) + min(m, k, n) + stream


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 4, 5), (4, 4, 4), (2, 6, 3), (7, 3, 2), (5, 5, 1)])
def test_gemm_ski_slope_matches_brute_force(m, k, n):
    for stream in (0, 1):
        e = gemm(m, k, n, 16)
        assert ski_slope(e, 16, stream) == brute_force(e, 16, stream)


def _random_conv(rng: random.Random) -> Einsum:
    kern, stride = rng.choice([1, 2, 3]), rng.choice([1, 2])
    h, w = rng.randint(1, 4), rng.randint(1, 3)
    rows = Rank(h, max(1, (h - 1) * stride + kern - rng.choice([0, 1])), (WINDOW, kern, stride))  # padding caps
    cols = Rank(w, (w - 1) * stride + kern, (WINDOW, kern, stride))
    images = rng.choice([1, 2])
    return Einsum((Rank(images, images, (SAME, 1, 1)), rows, cols), rng.randint(1, 3), rng.randint(1, 3), kern * kern,
                  rng.choice([1, 2]), rng.randint(1, 500), rng.randint(1, 500), rng.randint(0, 500))


@pytest.mark.parametrize("seed", range(8))
def test_conv_ski_slope_matches_brute_force(seed):
    # windows with halos and strides, padding that caps the input, batches, groups, a dead output (0 bytes)
    e = _random_conv(random.Random(seed))
    assert ski_slope(e, 16) == brute_force(e, 16)


def test_steps_rise_in_buffer_and_fall_in_traffic_to_compulsory():
    g = zoo.build("resnet18", 1)
    for op in g.ops:
        steps = op_curve(g, op.name)
        assert all(b0 < b1 and t0 > t1 for (b0, t0), (b1, t1) in zip(steps, steps[1:])), op.name
        fin = g.bytes_of([t for t in op.inputs], 16)
        fout = g.bytes_of(op.outputs, 16)
        assert steps[-1][1] == fin + fout + g.weight_bytes(op.name, 16), op.name


def test_a_lone_op_never_costs_less_than_its_curve():
    # every schedule the cost model gives one op (tiled or layer-wise) sits on or above the op's ski-slope
    for name in ("resnet18", "mobilenet_v2", "vit_b_16"):
        g = zoo.build(name, 2)
        for kb in (2, 8, 32, 128, 1024):
            acc = engine.Accelerator.preset("optimus").with_buffer(kb * KB)
            for op in g.ops:
                cost = group_cost(g, [op.name], acc)
                bound = at(op_curve(g, op.name), acc.buffer_bytes)
                assert cost is None or bound is not None and cost.dram_bytes >= bound, (name, kb, op.name)


def test_uncovered_ops_have_a_flat_curve_at_compulsory_traffic():
    g = zoo.build("vit_b_16", 1)
    op = next(o for o in g.ops if o.kind == engine.OpKind.SOFTMAX)
    (buffer, traffic), = op_curve(g, op.name)
    assert buffer == 0 and traffic == 2 * g.bytes_of(op.inputs, 16)


METHODS = ("none", "dnnvm", "efficient_s", "optimus")
# networks whose four plans take seconds per buffer size: a few sizes of the curve (the NAS cells' beams, ResNet-1202's
# 1,807 ops, the beams of the 6+6-layer Transformer and of Llama decode: one to three; ResNet-152 one, 2.6 CPU s a size:
# its bottleneck blocks are ResNet-50's, which runs at every size, so what it adds is depth)
FEW_SIZES = {"transformer": (16, 256, 4096), "resnet152": (256,), "llama3_8b_decode": (16, 4096),
             "llama3_8b_decode_kv8191": (256,),
             "amoebanet_d": (256,), "darts": (256,), "nasnet_a_mobile": (256,), "pnasnet5_large": (256,),
             "resnet1202": (256,), "densenet121": (16, 256, 4096), "deeplabv3_resnet50": (16, 256, 4096),
             "inception_v3": (16, 256, 4096), "googlenet": (16, 256, 4096)}


@pytest.mark.parametrize("name", zoo.names())
def test_every_plan_sits_above_the_limits_on_every_zoo_network(name):
    # batch 1, every buffer of the what-if curve where the network runs (FEW_SIZES for the slow ones)
    g = zoo.build(name, 1)
    base = engine.Accelerator.preset("optimus")
    sizes = FEW_SIZES.get(name, CURVE_BUFFERS_KB)
    oracle = oracle_bytes(g, base)
    ran = 0
    for kb in sizes:
        acc = base.with_buffer(kb * KB)
        lim = engine.limit.network(g, acc)
        assert oracle <= lim.fused_bytes <= lim.layerwise_bytes, kb
        try:
            plans = {method: fuse(g, acc, method=method, bound=False) for method in METHODS}
        except engine.EngineError as err:
            assert "cannot run even alone" in str(err)
            continue
        ran += 1
        for method, plan in plans.items():
            assert plan.dram_bytes >= lim.fused_bytes, (kb, method)
        assert plans["none"].dram_bytes >= lim.layerwise_bytes, kb
    assert ran >= max(1, len(sizes) - 3)


@pytest.mark.parametrize("preset", ["shidiannao", "diannao", "exynos-npu", "eyeriss"])
def test_split_buffers_and_other_word_widths_keep_every_plan_above_the_limits(preset):
    acc = engine.Accelerator.preset(preset)
    for name in ("resnet18", "squeezenet1_0", "vit_b_16"):
        g = zoo.build(name, 1)
        lim = engine.limit.network(g, acc)
        for method in METHODS:
            plan = fuse(g, acc, method=method, bound=False)
            assert plan.dram_bytes >= (lim.layerwise_bytes if method == "none" else lim.fused_bytes), method


def _folds(g: engine.Graph, op: engine.Op, covered: bool) -> bool:
    """Whether a layout op folds into its neighbours (docs/fusion.md): a reshape, transpose or split the tile model
    reads, between two ops (its input made by an op, its outputs not the network's)."""
    return covered and op.kind in (engine.OpKind.RESHAPE, engine.OpKind.SPLIT) and not any(
        t in g.inputs for t in op.inputs) and not any(t in g.outputs for t in op.outputs)


def test_limits_reach_the_oracle_once_the_buffer_holds_everything():
    for name in ("resnet18", "vit_b_16", "transformer"):
        g = zoo.build(name, 1)
        acc = engine.Accelerator.preset("optimus").with_buffer(1024 * 1024 * KB)
        lim = engine.limit.network(g, acc)
        assert lim.valid_bytes == lim.oracle_bytes == oracle_bytes(g, acc)
        # the segmentation adds what no plan avoids: ViT-B/16's patch flatten and class-token slice run alone (outside
        # the tile model), so the tensors around them go out and back in; optimus reaches it (1.81 MB above the Oracle)
        assert lim.fused_bytes == fuse(g, acc, method="optimus").dram_bytes
        assert lim.fused_bytes - lim.oracle_bytes == {"vit_b_16": 1_812_480}.get(name, 0)
        covered = model_of(g, acc).covered
        compulsory = sum(g.bytes_of(op.inputs, 16) + g.bytes_of(
            [t for t in op.outputs if g.consumers(t) or t in g.outputs], 16) + g.weight_bytes(op.name, 16)
            for op in g.ops if not _folds(g, op, covered[g.position[op.name]]))  # a layout op between two ops moves nothing
        assert lim.layerwise_bytes == compulsory


def test_the_limit_curve_falls_with_buffer_size():
    g = zoo.build("resnet50", 1)
    lims = engine.limit.curve(g, engine.Accelerator.preset("optimus"), [kb * KB for kb in CURVE_BUFFERS_KB])
    for a, b in zip(lims, lims[1:]):
        assert a.layerwise_bytes >= b.layerwise_bytes and a.fused_bytes >= b.fused_bytes
    assert lims[0].fused_bytes > lims[-1].fused_bytes and lims[0].layerwise_bytes > lims[-1].layerwise_bytes
    assert "ski-slope" in lims[0].layerwise_meaning and "fused" in lims[0].fused_meaning


def test_bad_input_names_the_op_and_the_bytes():
    g = zoo.build("resnet18", 1)
    with pytest.raises(engine.EngineError, match="no op 'nope'"):
        op_curve(g, "nope")
    with pytest.raises(engine.EngineError, match="word_bits"):
        op_curve(g, g.ops[0].name, word_bits=0)
    with pytest.raises(engine.EngineError, match="needs at least .* bytes"):
        engine.limit.network(g, engine.Accelerator.preset("optimus").with_buffer(1))


def test_the_report_and_the_curve_carry_the_limits():
    from engine.explore import LIMIT_ROWS, buffer_curve, evaluate

    g = zoo.build("resnet18", 1)
    acc = engine.Accelerator.preset("optimus")
    rep = evaluate(g, acc, methods=("none", "optimus"))
    assert rep.limit == engine.limit.network(g, acc)
    frame = rep.summary_frame().set_index("method")
    for method, plan in rep.plans.items():
        assert frame.loc[method, "x_limit"] == round(plan.dram_bytes / rep.limit.fused_bytes, 2) >= 1
    curve = buffer_curve(g, acc, ("optimus",), buffers_kb=(16, 256), limits=True)
    for kb in (16, 256):
        rows = curve[curve["buffer_kb"] == kb].set_index("method")["dram_mb"]
        lim = engine.limit.network(g, acc.with_buffer(kb * KB))
        assert rows[LIMIT_ROWS[0]] == lim.layerwise_bytes / 1e6 and rows[LIMIT_ROWS[1]] == lim.fused_bytes / 1e6
        assert rows["optimus"] >= rows[LIMIT_ROWS[1]]
        # the per-op bound beside the tight one only where it is lower
        assert rows.get(LIMIT_ROWS[2]) == (lim.valid_bytes / 1e6 if lim.valid_bytes < lim.fused_bytes else None)


def test_gpt3_block_and_attention_reproduce_orojenesis():
    # Huang et al. Sec. VII (GPT-3-6.7B block, 2048 tokens x batch 16, 2-byte words), the paper's templates
    # (Fig. 16-17) and its sequential buffer rule (Sec. V-B): fusion 2.5x fewer accesses at 50 MB, 4.7 G fewer;
    # up to 5.6x above 320 MB; FlashAttention-style tiling > 6x fewer than FLAT's at 16 MB, equal at 32 MB
    from benchmarks.bench_limit import MIB, gpt3_block
    from engine.limit.chain import fused_bytes, segmented_bytes, unfused_bytes

    chain, side = gpt3_block(flash=True)

    def ratio_and_saving(nbytes):
        un = unfused_bytes(chain + side, nbytes)
        fu = segmented_bytes(chain, nbytes) + unfused_bytes(side, nbytes)
        return un / fu, (un - fu) / 2  # two-byte accesses saved

    ratio, saving = ratio_and_saving(50 * MIB)
    assert ratio == pytest.approx(2.5, rel=0.08) and saving == pytest.approx(4.7e9, rel=0.03)
    ratio, saving = ratio_and_saving(512 * MIB)
    assert ratio == pytest.approx(5.6, rel=0.05) and saving == pytest.approx(6e9, rel=0.03)
    assert ratio_and_saving(352 * MIB)[0] < 4.9 < 5.8 < ratio_and_saving(369_139_712)[0]  # 352.04 MiB on
    flash, flat = gpt3_block(flash=True)[0][1:3], gpt3_block(flash=False)[0][1:3]
    for nbytes in (16_000_000, 16 * MIB):
        assert fused_bytes(flat, nbytes) / fused_bytes(flash, nbytes) == 6.0
    assert fused_bytes(flat, 32 * MIB) / fused_bytes(flash, 32 * MIB) == 5.0
    assert fused_bytes(flat, 33 * MIB) == fused_bytes(flash, 33 * MIB)  # K and V of a sequence (32 MiB) + a row tile
    # with row tiles that divide the 2048 tokens (perfect factors, as the paper's Timeloop-style mapper tiles)
    assert [fused_bytes(f, 16 * MIB, factors=True) for f in (flat, flash)] == [17_716_740_096, 1_610_612_736]


def test_a_fused_chain_reaches_its_inputs_outputs_and_weights_once_and_segments_never_lose_to_unfused():
    from engine.limit.chain import Stage, fused_bytes, segmented_bytes, unfused_bytes

    chain = (Stage("a", 64, 32, 128), Stage("b", 64, 128, 16), Stage("c", 64, 16, 48))
    once = 2 * (64 * 32 + 32 * 128 + 128 * 16 + 16 * 48 + 64 * 48)
    assert fused_bytes(chain, 1 << 30) == once
    for nbytes in (64, 256, 1024, 4096, 16384, 65536):
        seg = segmented_bytes(chain, nbytes)
        assert seg <= unfused_bytes(chain, nbytes)
        assert seg >= once


LANGUAGE_MODELS = ("bert_base", "gpt2", "gpt3_6.7b_block", "llama3_8b_prefill", "llama3_8b_decode")


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_none_prices_every_lone_matmul_on_its_ski_slope(name):
    # every op of `none` at or above its ski-slope point (the invariant); every matmul, attention's scores and
    # context included (batched GEMMs, grouped-query heads stacked), within 5 % of it: the tile model reaches it
    g = zoo.build(name, 1)
    attention = 0
    for kb in (16, 128, 1024, 8192):
        acc = engine.Accelerator.preset("optimus").with_buffer(kb * KB)
        plan = fuse(g, acc, method="none")
        for (op_name,), cost in zip(plan.groups, plan.costs):
            point = at(op_curve(g, op_name), acc.buffer_bytes)
            assert cost.dram_bytes >= point, (kb, op_name)
            op = g.op(op_name)
            if op.kind == engine.OpKind.MATMUL:
                assert cost.dram_bytes <= 1.05 * point, (kb, op_name, cost.dram_bytes / point)
                attention += not op.weights
    assert attention >= 8  # scores and context of at least one layer at each size


def _gpt3_block_8192() -> engine.Graph:
    """The GPT-3-6.7B block of the zoo at 8,192 tokens in one sequence (AccelForge's workload; GPT-3's own context
    is 2,048, which the zoo's name checks)."""
    from engine.zoo._builder import Net
    from engine.zoo.llm import _gpt_block

    net = Net("gpt3_6.7b_block_8192", 1)
    _gpt_block(net, net.input((8192, 4096), "hidden_states"), "block", 32, 4 * 4096, packed=False,
               mlp=("mm_1", "mm_2"))
    return net.graph()


def test_gpt3_attention_matmuls_alone_cost_their_ski_slope_point():
    # 8,192 tokens, 8-bit words, 64 KB (65,536 words): the scores Q K^T keep 508 query rows of a head beside 7 key
    # columns and read K once per 17 row bands; the context P V keeps one key column of 508 rows of P beside its
    # 508 x 128 accumulator and reads V 17 times: Q (or the context) 33.6 MB + scores (or P) 2,147.5 MB + 17 x K
    # (or V) 33.6 MB. Before the tile model tiled a lone GEMM's columns and reduction: 20,535.3 and 13,186.9 MB
    g = _gpt3_block_8192()
    acc = engine.Accelerator.preset("optimus").with_buffer(64 * KB).with_word_bits(8)
    head = 8192 * 4096
    for name, (m, k, n) in (("block.attn.scores", (8192, 128, 8192)), ("block.attn.context", (8192, 8192, 128))):
        cost = group_cost(g, [name], acc)
        assert cost.dram_bytes == head + 32 * 8192 * 8192 + 17 * head == 2_751_463_424
        assert cost.dram_bytes == at(op_curve(g, name, word_bits=8), 64 * KB)
        assert cost.dram_bytes == at(ski_slope(gemm(m, k, n, 8, batch=32), 8), 64 * KB)
