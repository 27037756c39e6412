"""The fused-group cost model: Eq. 3 traffic, Eq. 4 tiles, Alg. 2 ISOA, batch, and the honest edge cases."""

from __future__ import annotations

import itertools
import random

import pytest

import engine
from engine import zoo
from engine.errors import GraphError
from engine.fusion import fuse, group_cost, oracle_bytes
from engine.fusion.cost import model_of
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs
from tests.fusion_reference import Partial, extend
from tests.test_fusion_search import random_graph

ACC = engine.Accelerator.preset("optimus")


def conv(name, src, cin, cout, k, shape_out, *, stride=1):
    return Op(name, OpKind.CONV, (src,), (name,), weights=(f"{name}.w",), kernel=(k, k), stride=(stride, stride),
              padding=(k // 2,) * 4, macs=conv_macs(shape_out, cin, (k, k)))


def convnet(specs, x_shape, *, batch=1, outputs=None):
    """A graph of convs given as (name, input, C_in, C_out, K, stride); spatial size follows the strides."""
    shapes = {"x": x_shape}
    ops, tensors = [], [Tensor("x", x_shape)]
    for name, src, cin, cout, k, s in specs:
        n, _, h, w = shapes[src]
        shapes[name] = (n, cout, (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1)
        ops.append(conv(name, src, cin, cout, k, shapes[name], stride=s))
        tensors += [Tensor(name, shapes[name]), Tensor(f"{name}.w", (cout, cin, k, k), is_weight=True)]
    read = {op.inputs[0] for op in ops}
    return Graph.build("net", ops, tensors, ("x",), outputs or tuple(op.name for op in ops if op.name not in read),
                       batch=batch)


def test_single_conv_is_inputs_outputs_parameters_once():
    g = convnet([("a", "x", 16, 32, 3, 1)], (1, 16, 8, 8))
    c = group_cost(g, ["a"], ACC)
    assert (c.fmap_in_bytes, c.fmap_out_bytes, c.param_bytes) == (16 * 64 * 2, 32 * 64 * 2, 32 * 16 * 9 * 2)
    assert c.dram_bytes == 2048 + 4096 + 9216 and c.params_resident and c.subgroups == 1
    assert c.dram_bytes == oracle_bytes(g, ACC)


def test_tiles_propagate_backward_through_strides_and_kernels():
    # Sec. 2.3: t(l-1) = t(l) * S + K - S; the finest tiles give one row to the last op
    g = convnet([("a", "x", 8, 8, 3, 1), ("b", "a", 8, 8, 3, 2), ("c", "b", 8, 8, 1, 1)], (1, 8, 32, 32))
    model = model_of(g, ACC)
    op_rows, in_rows = model.rows(model.mask_of(["a", "b", "c"]), 0)
    rows = {model.names[i]: r for i, r in op_rows.items()}
    assert rows == {"c": 1, "b": 1 * 1 + 1 - 1, "a": 1 * 2 + 3 - 2}
    assert in_rows == {model.tindex["x"]: 3 * 1 + 3 - 1}
    # with 4 row steps every tensor advances a quarter of its height at least
    op_rows, in_rows = model.rows(model.mask_of(["a", "b", "c"]), 4)
    assert {model.names[i]: r for i, r in op_rows.items()} == {"c": 4, "b": 4, "a": 4 * 2 + 3 - 2}
    assert in_rows == {model.tindex["x"]: 9 * 1 + 3 - 1}


def test_branches_take_the_larger_demand():
    g = convnet([("a", "x", 8, 8, 1, 1), ("b", "a", 8, 8, 5, 1), ("c", "a", 8, 8, 1, 1)], (1, 8, 16, 16))
    model = model_of(g, ACC)
    op_rows, _ = model.rows(model.mask_of(["a", "b", "c"]), 0)
    assert op_rows[model.index["a"]] == 5  # the 5x5 consumer wins over the 1x1 one


def test_parameters_reload_once_per_subgroup_when_they_do_not_fit():
    # Eq. 3: 3x3 convs with 64 channels at 32x32: 73 KB of weights do not fit beside the tiles in 64 KB
    g = convnet([("a", "x", 64, 64, 3, 1), ("b", "a", 64, 64, 3, 1)], (2, 64, 32, 32), batch=2)
    acc = ACC.with_buffer(64 * 1024)
    c = group_cost(g, ["a", "b"], acc)
    params = 2 * 64 * 64 * 9 * 2
    assert not c.params_resident
    assert c.subgroups == c.row_steps * -(-2 // c.batch_tile) > 1
    assert c.param_bytes == params * c.subgroups
    assert c.footprint_bytes <= acc.buffer_bytes
    big = group_cost(g, ["a", "b"], ACC.with_buffer(2 * 1024 * 1024))
    assert big.params_resident and big.param_bytes == params and big.batch_tile == 2


def test_batch_scales_fmaps_and_shares_resident_parameters():
    specs = [("a", "x", 16, 32, 3, 1), ("b", "a", 32, 16, 1, 1)]
    one, four = convnet(specs, (1, 16, 16, 16)), convnet(specs, (4, 16, 16, 16), batch=4)
    acc = ACC.with_buffer(256 * 1024)
    c1, c4 = group_cost(one, ["a", "b"], acc), group_cost(four, ["a", "b"], acc)
    assert c4.fmap_in_bytes == 4 * c1.fmap_in_bytes and c4.fmap_out_bytes == 4 * c1.fmap_out_bytes
    assert c4.param_bytes == c1.param_bytes  # loaded once for all four images


def test_a_group_output_read_outside_goes_off_chip_once():
    g = convnet([("a", "x", 8, 8, 1, 1), ("b", "a", 8, 8, 1, 1), ("c", "a", 8, 8, 1, 1)], (1, 8, 8, 8))
    c = group_cost(g, ["a", "b"], ACC)
    assert c.outputs == ("a", "b")  # a is also read by c, outside the group
    assert c.fmap_out_bytes == 2 * 8 * 64 * 2
    whole = group_cost(g, ["a", "b", "c"], ACC)
    assert whole.outputs == ("b", "c") and whole.fmap_in_bytes == 8 * 64 * 2


def test_a_group_split_by_an_outside_op_cannot_run():
    g = convnet([("a", "x", 8, 8, 1, 1), ("b", "a", 8, 8, 1, 1), ("c", "b", 8, 8, 1, 1)], (1, 8, 8, 8))
    with pytest.raises(GraphError, match="path leaves"):
        group_cost(g, ["a", "c"], ACC)


def test_no_tile_fits_returns_none_and_a_lone_op_falls_back_to_channel_blocks():
    g = convnet([("a", "x", 256, 256, 3, 1), ("b", "a", 256, 256, 3, 1)], (1, 256, 32, 32))
    acc = ACC.with_buffer(8 * 1024)  # one input row band alone is 3 x 32 x 256 x 2 B = 48 KB
    assert group_cost(g, ["a", "b"], acc) is None
    alone = group_cost(g, ["a"], acc)
    assert alone.schedule == "layerwise" and alone.input_passes > 1
    assert alone.fmap_in_bytes >= alone.input_passes * 256 * 32 * 32 * 2
    assert alone.footprint_bytes <= acc.buffer_bytes


def _band_reference(model, i, cap, images, t, tw):
    """DRAM bytes of op i's layer-wise schedule on tiles of `images` x t rows x tw columns, or None if it does not fit.

    Written out from the definition (docs/fusion.md, "A lone op"): one input channel's window and a block of
    output channels on chip; the input re-read once per block, halos of neighbouring bands re-read, weights
    loaded per band and image tile.
    """
    def need(rule, r, size):  # rows (or columns) of an input that r output rows need: window, same, whole
        mode, kern, stride = rule
        return min(size, (r - 1) * stride + kern if mode == 0 else (r if mode == 1 else kern))

    ins = [(model.tgeo[j], model.tbytes[j], need(rh, t, model.tgeo[j].h), need(rw, tw, model.tgeo[j].w))
           for j, rh, rw in zip(model.ins[i], model.rules[i], model.wrules[i])]
    outs = [model.tgeo[j] for j in model.outs[i]]
    c_out, per_in = sum(g.channels for g in outs), sum(rows * cols for _, _, rows, cols in ins)
    if model.channelwise[i]:
        passes, fits = 1, (per_in + t * tw) * images <= cap.fmap
    else:
        block = min(c_out, (cap.fmap - per_in * images) // (t * tw * images))
        per_group = max(1, c_out // model.graph.ops[i].groups)
        passes, fits = -(-per_group // max(1, min(block, per_group))), block >= 1
    if not fits:
        return None
    steps, cols = -(-model.out_h[i] // t), -(-max(g.w for g in outs) // tw)
    fin = sum(-(-nbytes * passes * max(g.h, steps * rows) * max(g.w, cols * wide) // (g.h * g.w))
              for g, nbytes, rows, wide in ins)
    fin_once, fout, p_elems, _ = model.io(1 << i)
    tiles = 1 if cap.per_band else -(-model.batch // images)
    return fin + fout + -(-p_elems * model.word_bits // 8) * steps * cols * tiles


def _layerwise_reference(model, i, cap, beat):
    """Every (images, rows, columns) tile in order: full-width bands, column cuts only if none fits and no beat."""
    h, w = model.out_h[i], max(model.tgeo[j].w for j in model.outs[i])
    heights = sorted({-(-h // j) for j in range(1, h + 1)}, reverse=True)
    for widths in ([w], sorted({-(-w // j) for j in range(2, w + 1)}, reverse=True)):
        found = [(cost, images, t, tw) for images in range(1, 2 if cap.per_band else model.batch + 1)
                 for t in heights for tw in widths
                 if (cost := _band_reference(model, i, cap, images, t, tw)) is not None]
        if found or beat is not None:
            break
    below = [f for f in found if beat is None or f[0] < beat]
    return min(below, key=lambda f: f[0]) if below else None  # min keeps the first of equal costs


@pytest.mark.parametrize("name,kbs", [("vgg16", (16, 128, 512)), ("resnet50", (32, 128)), ("googlenet", (64, 256)),
                                      ("mobilenet_v1", (8, 128)), ("alexnet", (4, 32))])
def test_layerwise_search_finds_the_exhaustive_minimum(name, kbs):
    # the lone-op search skips tiles by bisection and bounds; it must return the exhaustive loop's first minimum
    from engine.fusion.cost import Capacity, _layerwise, _tiled

    graph = zoo.build(name, 4)
    checked = 0
    for kb in kbs:
        acc = ACC.with_buffer(kb * 1024)
        model = model_of(graph, acc)
        for reloads in ("tile", "band"):
            cap = Capacity.of(acc, reloads)
            for i in range(model.n):
                if not model.covered[i] or model.inplace[i]:
                    continue
                tiled = _tiled(model, 1 << i, cap)
                for beat in {None, tiled.dram if tiled else None}:
                    want = _layerwise_reference(model, i, cap, beat)
                    got = _layerwise(model, i, cap, beat)
                    got = got if got is not None and (beat is None or got.dram < beat) else None
                    assert (got and (got.dram, got.batch_tile, got.rows)) == (want and want[:3]), (name, kb, i)
                    checked += want is not None
    assert checked > 20


@pytest.mark.parametrize("name", ["vgg16", "squeezenet1_0", "mobilenet_v1"])
def test_the_runnable_check_agrees_with_costing_each_op_alone(name):
    from engine.fusion.cost import Capacity, runs_alone
    from engine.fusion.sized import dram_bytes

    graph = zoo.build(name, 1)
    seen = set()
    for size in (8, 16, 24, 96, 128, 512, 4096):
        acc = ACC.with_buffer(size)
        model, cap = model_of(graph, acc), Capacity.of(acc)
        for i in range(model.n):
            alone = runs_alone(model, i, cap)
            assert alone == (dram_bytes(model, 1 << i, cap) is not None), (size, model.names[i])
            seen.add(alone)
    assert seen == {True, False}


def _footprint(model, mask, chosen, k):
    """Eq. 4's left side for one ISOA assignment, recomputed from the tiles."""
    op_rows, in_rows = model.rows(mask, k)
    total = sum(model.tgeo[j].row * r for j, r in in_rows.items())
    return total + sum((model.full_row[i] - (model.save_row[i] if chosen >> i & 1 else 0)) * r
                       for i, r in op_rows.items())


def _assignments(model, mask):
    """Every ISOA assignment Alg. 2's rule allows: no op under ISOA reads (through concat/split) one under ISOA."""
    ops = [i for i in model.members(mask) if not model.inplace[i] and model.save_row[i] > 0]
    for bits in itertools.product((0, 1), repeat=len(ops)):
        chosen = sum(b << i for b, i in zip(bits, ops))
        chunked = 0
        ok = True
        for i in model.members(mask):
            fed = model.pred[i] & mask & chunked
            if model.inplace[i]:
                chunked |= (1 << i) if fed else 0
            elif chosen >> i & 1:
                ok = ok and not fed
                chunked |= 1 << i
        if ok:
            yield chosen


@pytest.mark.parametrize("seed", range(12))
def test_isoa_decisions_minimise_the_finest_footprint(seed):
    g = random_graph(seed, 8)
    acc = ACC.with_pe_array(4, 4)
    model = model_of(g, acc)
    rng = random.Random(seed)
    for _ in range(20):
        mask = rng.randrange(1, 1 << model.n)
        if not model.is_convex(mask) or not all(model.covered[i] for i in model.members(mask)):
            continue
        best = min(_footprint(model, mask, chosen, 0) for chosen in _assignments(model, mask))
        saving, chosen, fp = model.isoa(mask)
        assert fp == best == _footprint(model, mask, chosen, 0)


@pytest.mark.parametrize("seed", range(12))
def test_growing_a_group_keeps_exact_totals_and_bounds(seed):
    g = random_graph(seed, 9)
    model = model_of(g, ACC.with_pe_array(4, 4))
    rng = random.Random(seed)
    for _ in range(10):
        part, last = Partial(), -1
        while True:
            options = [i for i in range(last + 1, model.n)
                       if not model.pred[i] & ~part.mask and model.covered[i]]
            if not options:
                break
            x = rng.choice(options)
            part, last = extend(model, part, x), x
            fin, fout, p_elems, _ = model.io(part.mask)
            assert (part.fin, part.fout, part.params) == (fin, fout, p_elems)
            op_rows, _ = model.rows(part.mask, 0)
            assert part.rows == op_rows
            lower, upper = part.bounds()
            exact = model.footprint(part.mask, 0)
            assert lower <= exact <= part.fit_upper() <= upper
            assert part.whole <= model.footprint(part.mask, 1)
            # the kept assignment (the last exact optimum, grown greedily) is a valid one, at its saving
            kept = part.kept & ~sum(1 << i for i in range(model.n) if model.inplace[i])
            assert kept in set(_assignments(model, part.mask))
            assert part.full - part.kept_saving == _footprint(model, part.mask, kept, 0)
            if rng.random() < 0.4:
                saving, chosen, _ = model.isoa(part.mask)
                part.keep(model, chosen, saving)
                assert part.fit_upper() == exact


def test_ops_outside_the_tile_model_run_alone_at_compulsory_traffic():
    x, y = Tensor("x", (1, 4, 8, 16, 16)), Tensor("y", (1, 8, 8, 16, 16))
    w = Tensor("c3.w", (8, 4, 3, 3, 3), is_weight=True)
    q, k, s = Tensor("q", (1, 16, 32)), Tensor("k", (1, 16, 32)), Tensor("s", (1, 16, 16))
    ops = [Op("c3", OpKind.CONV, ("x",), ("y",), weights=("c3.w",), kernel=(3, 3, 3), stride=(1, 1, 1),
              padding=(1,) * 6),
           Op("proj", OpKind.MATMUL, ("q",), ("k",), weights=("p.w",)),
           Op("attn", OpKind.MATMUL, ("q", "k"), ("s",)),
           Op("soft", OpKind.SOFTMAX, ("s",), ("p",))]
    tensors = [x, y, w, q, k, s, Tensor("p", (1, 16, 16)), Tensor("p.w", (32, 32), is_weight=True)]
    g = Graph.build("odd", ops, tensors, ("x", "q"), ("y", "p"))
    c3 = group_cost(g, ["c3"], ACC)
    assert c3.schedule == "unmodelled"
    assert c3.dram_bytes == (x.elements + y.elements + w.elements) * 2
    # a matmul of two activations and a softmax are in the tile model now (docs/fusion.md, "Transformer
    # blocks"): k, the second operand, is loaded as parameters are (here resident), q and p once
    fused = group_cost(g, ["attn", "soft"], ACC)
    assert (fused.schedule, fused.fmap_in_bytes, fused.param_bytes, fused.fmap_out_bytes) == ("fused", 1024, 1024, 512)
    made = group_cost(g, ["proj", "attn"], ACC)  # a group that makes k holds all of it
    assert dict(made.tile_rows)["proj"] == 16 and made.param_bytes == 32 * 32 * 2
    for method in ("none", "dnnvm", "efficient_s", "optimus", "online"):
        assert ("c3",) in fuse(g, ACC, method=method).groups


def test_split_buffers_keep_parameters_in_the_weight_buffer():
    # ShiDianNao: 64 KB in + 64 KB out hold fmaps, 128 KB hold weights; these 146 KB of weights
    # cannot stay, while one unified buffer of the same 256 KB keeps them beside the tiles
    split = engine.Accelerator.preset("shidiannao")
    g = convnet([("a", "x", 64, 128, 3, 1), ("b", "a", 128, 8, 1, 1)], (1, 64, 16, 16))
    params = (64 * 128 * 9 + 128 * 8) * 2
    c = group_cost(g, ["a", "b"], split)
    assert not c.params_resident and c.param_bytes == params * c.subgroups
    unified = group_cost(g, ["a", "b"], split.with_buffer(256 * 1024))
    assert unified.params_resident and unified.param_bytes == params


@pytest.mark.parametrize("kb", [4, 8, 12, 24])
def test_batch_tile_and_row_band_give_the_fewest_subgroups(kb):
    # streamed weights load once per (row band, batch tile): on 7-row fmaps, bands of several images beat
    # one image's bands (4 images x 7 one-row bands = 7 loads against 4 x 2 bands = 8 at 8 KB)
    g = convnet([("a", "x", 64, 256, 1, 1), ("b", "a", 256, 64, 1, 1)], (4, 64, 7, 7), batch=4)
    acc = ACC.with_buffer(kb * 1024)
    c = group_cost(g, ["a", "b"], acc)
    model = model_of(g, acc)
    mask, room = model.mask_of(["a", "b"]), kb * 1024 // 2
    fits = [(k * -(-4 // n), n) for n in range(1, 5) for k in range(1, 8) if n * model.footprint(mask, k) <= room]
    assert not c.params_resident and c.subgroups == min(fits)[0] < min(s for s, n in fits if n == 1)
    assert c.batch_tile > 1 and c.param_bytes == 2 * 64 * 256 * 2 * c.subgroups
    assert c.footprint_bytes <= acc.buffer_bytes


def test_printed_eq3_loads_streamed_weights_once_per_row_band_for_the_whole_batch():
    g = convnet([("a", "x", 16, 64, 3, 1), ("b", "a", 64, 64, 3, 1)], (4, 16, 28, 28), batch=4)
    acc = ACC.with_buffer(40 * 1024)
    tile, band = (group_cost(g, ["a", "b"], acc, reloads=r) for r in ("tile", "band"))
    model = model_of(g, acc)
    mask = model.mask_of(["a", "b"])
    fewest = min(k for k in range(1, 29) if model.footprint(mask, k) <= 20 * 1024)  # one image's tiles (Eq. 4)
    assert band.row_steps == band.subgroups == fewest and band.batch_tile == 4
    assert band.param_bytes == 2 * (16 * 64 + 64 * 64) * 9 * fewest < tile.param_bytes
    assert band.fmap_in_bytes == tile.fmap_in_bytes and band.fmap_out_bytes == tile.fmap_out_bytes
    with pytest.raises(engine.errors.UnknownNameError):
        group_cost(g, ["a", "b"], acc, reloads="image")
