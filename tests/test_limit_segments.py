"""The tight fused limit (engine/limit/segments.py): never above any partition's cost, reached where a plan can."""

from __future__ import annotations

import random

import pytest

import engine
from engine.fusion import fuse
from engine.fusion.cost import model_of
from engine.graph import Graph, OpKind
from engine.limit.segments import segments_of
from tests.test_fusion_search import brute_force
from tests.test_fusion_transformer import SMALL, _acc, _Block, attention_block, ffn_block, random_block, random_ffn

BUFFERS = (256, 1024, 4096)
BLOCKS = [("ffn", seed) for seed in range(20)] + [("attention", seed) for seed in SMALL]


def stacked_mlp(seed: int, layers: int = 2) -> Graph:
    """x0 -> proj -> MLP layers ([norm] -> fc1 -> fc2 -> + the stream): a residual stream made by an op and read
    by two (the next layer's first op and its add), as between the layers of a language model."""
    rng = random.Random(seed)
    n, length, d, ff = rng.choice([1, 2]), rng.choice([4, 8, 16]), rng.choice([4, 8]), rng.choice([8, 16, 32])
    b = _Block(n)
    x = b.linear(b.tensor("x0", (n, length, d)), "proj", d)
    for layer in range(layers):
        h = b.norm(x, f"ln{layer}") if rng.random() < 0.5 else x
        y = b.linear(b.linear(h, f"fc1_{layer}", ff), f"fc2_{layer}", d)
        x = b.op(f"add{layer}", OpKind.ELTWISE, (y, x), (n, length, d))
    return b.graph("stack", ["x0"])


@pytest.mark.parametrize("kind,seed", BLOCKS)
def test_no_partition_of_a_random_block_moves_less_than_the_fused_limit(kind, seed):
    # every valid partition of the block's ops into groups (brute force over set partitions), priced by group_cost
    _assert_no_partition_below_the_limit((random_ffn if kind == "ffn" else random_block)(seed), BUFFERS)


def _assert_no_partition_below_the_limit(g: Graph, buffers) -> None:
    """At each buffer where every op runs, the best partition (brute force) moves at least the fused limit."""
    for buffer in buffers:
        try:
            lim = engine.limit.network(g, _acc(buffer))
        except engine.EngineError:
            continue  # some op fits no tiling
        best = brute_force(g, _acc(buffer))
        assert best is None or lim.valid_bytes <= lim.fused_bytes <= best, buffer


@pytest.mark.parametrize("seed", range(30))
def test_no_partition_of_stacked_mlp_layers_moves_less_than_the_fused_limit(seed):
    # the residual stream between the layers is held by any group holding a reader of it (from outside at full depth,
    # or made in the group by ops that hold their own tiles): every partition, brute force, stays at or above the limit
    g = stacked_mlp(seed)
    _assert_no_partition_below_the_limit(g, (128, 256, 512, 1024))


def window(g: Graph, lo: int, hi: int) -> Graph:
    """Ops lo..hi-1 of a graph as a graph of their own: what they read from earlier ops becomes network inputs, what
    later ops read (or nobody) network outputs."""
    ops = g.ops[lo:hi]
    made = {t for op in ops for t in op.outputs}
    read = {t for op in ops for t in op.inputs}
    later = {t for op in g.ops[hi:] for t in op.inputs}
    names = {t for op in ops for t in op.inputs + op.outputs + op.weights}
    return Graph.build(f"{g.name}[{lo}:{hi}]", ops, [g.tensors[t] for t in names],
                       sorted(read - made), tuple(t for t in made if t not in read or t in later))


@pytest.mark.parametrize("lo,hi", [(0, 12), (20, 32), (48, 60), (124, 136), (152, 165)])
def test_no_partition_of_a_convnext_block_moves_less_than_the_fused_limit(lo, hi):
    # ConvNeXt-T's blocks (a 7x7 depthwise conv, a permute, a norm the tile model leaves alone, the MLP, layer scale,
    # the residual add; the last of a stage with the downsampling norm and conv): 12 links, one component each. A
    # norm run alone writes its output and a reader's group reads it whole: counted once (it was twice, 1.13x above
    # the best partition of ops 124..136 at 1 MB: 8.91 MB against 7.85)
    g = window(engine.load_network("convnext_tiny"), lo, hi)
    for kb in (256, 1024, 4096):
        acc = engine.Accelerator.preset("optimus").with_buffer(kb * 1024)
        lim = engine.limit.network(g, acc)
        assert lim.valid_bytes <= lim.fused_bytes <= brute_force(g, acc), kb


@pytest.fixture
def three_links(monkeypatch):
    """Components of at most 3 links: a residual stream between two layers is left out of every component."""
    from engine.limit import components

    monkeypatch.setattr(components, "MAX_LINKS", 3)
    segments_of.cache_clear()
    yield
    segments_of.cache_clear()


@pytest.mark.parametrize("seed", range(0, 30, 3))
def test_a_link_left_out_of_every_component_costs_its_bytes_where_its_readers_part(seed, three_links):
    # with 3 links a component, the stream x between proj and the layers (read by ln0 or fc1_0, and add0) is left out:
    # it costs its bytes twice wherever its readers are not in one group, and no partition moves less than the limit
    g = stacked_mlp(seed)
    _assert_no_partition_below_the_limit(g, (128, 256, 512, 1024))


def test_a_group_reading_the_residual_stream_holds_it():
    # stacked_mlp(5): 2 images x 16 tokens, d 8, ff 32, no norms, 16-bit, 1 KB (512 words), T_c 4. The Oracle:
    # x0 and the output (512 B each) and the weights (proj 64 words, each layer's fc1 and fc2 512: 2,176 B) once,
    # 3,200 B. The best plan, {proj, fc1_0, fc2_0, add0} {fc1_1, fc2_1, add1}, moves 6,400 B: the stream between the
    # layers out and back (1,024 B) and each group's weights loaded twice (2,176 B), since neither keeps its weights
    # beside its tiles and the two images' tiles need two sub-groups. The second group holds the stream it reads (8
    # words a token at full depth, or add0 and what add0 reads); counted free, as before, a group of the second
    # layer's ops ran one sub-group and the bound said 5,248 B; now it is the optimum
    g = stacked_mlp(5)
    acc = _acc(1024)
    lim = engine.limit.network(g, acc)
    assert (lim.oracle_bytes, lim.fused_bytes, brute_force(g, acc), fuse(g, acc).dram_bytes) == (3200, 6400, 6400, 6400)


def test_the_fused_limit_is_reached_where_the_per_op_bound_is_not():
    # cases where the segmentation sets the bound (above the per-op one) and the best partition sits on it
    reached = []
    for kind, seed in BLOCKS:
        g = (random_ffn if kind == "ffn" else random_block)(seed)
        for buffer in BUFFERS:
            try:
                lim = engine.limit.network(g, _acc(buffer))
            except engine.EngineError:
                continue
            if lim.fused_kind == "tight" and brute_force(g, _acc(buffer)) == lim.fused_bytes:
                reached.append((kind, seed, buffer))
    assert len(reached) >= 8, reached


def test_a_fused_ffn_reloads_its_weights_once_per_token_tile():
    # x (64 tokens x 16) -> fc1 (x 64) -> fc2 (x 16), 16-bit, a 4x4 PE array (T_c = 4), 1 KB = 512 words. Fused,
    # a token holds x's row (16 words, a network input read whole), fc1's chunk (4) and fc2's row (16): 36
    # words, so 64 tokens need ceil(64 * 36 / 512) = 5 token tiles, and the weights (2 x 16 x 64 words = 4 KB)
    # load 5 times. Cut between fc1 and fc2, the hidden tensor (8 KB) goes out and back in; alone, each matmul
    # is on its ski-slope (16 KB). The least: fused, 8 KB once (x, output, weights) + 4 reloads of 4 KB
    g = ffn_block(1, 64, 16, 64, swiglu=False, act=False, norm=False, residual=False)
    acc = _acc(1024)
    lim = engine.limit.network(g, acc)
    assert lim.oracle_bytes == lim.valid_bytes - 4096 == 8192
    assert lim.fused_bytes == 8192 + 4 * 4096 == fuse(g, acc).dram_bytes == brute_force(g, acc)
    assert lim.fused_kind == "tight"


def test_identical_layers_share_one_kind_of_component():
    # GPT-2's 12 layers are one component each (attention and MLP joined by the residual add's output; the packed
    # QKV projection linked to the scores through the head split, and to them through the keys and values it makes:
    # 12 links), cut alike, so a new buffer size prices
    # each kind once: 8 kinds, the last and the first six (what a piece's shared inputs and its keys' and values' cones
    # cost to hold is read up to `HORIZON` = 10 ops above it, 11 for the cones, two residual adds a layer, so it sees
    # the embedding from the first six layers);
    # the residual stream between layers is a link of no component, one per layer boundary
    g = engine.load_network("gpt2")
    seg = segments_of(model_of(g, engine.Accelerator.preset("optimus")))
    kinds = [c.kind for c in seg.components]
    assert len(seg.components) == 13 and kinds == [0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 6, 6, 7]
    assert seg.free_links == 12 and max(len(c.links) for c in seg.components) == 12


def test_an_attention_block_that_cannot_hold_its_keys_pays_them_out_and_back():
    # 16 tokens, 2 heads of 4, no norm or residual, 256 B (128 words): K and V (128 words each) fit beside no
    # query tile, so a group holding the scores reads them per sub-group, after their projections' groups wrote
    # them, or makes them whole and runs more sub-groups; the per-op bound counts only the Oracle (1,024 B), the
    # segmentation 5,120 B, the best partition 6,144 B
    g = attention_block(1, 16, 2, 4, norm=False, residual=False)
    acc = _acc(256)
    lim = engine.limit.network(g, acc)
    assert (lim.valid_bytes, lim.fused_bytes, brute_force(g, acc)) == (1024, 5120, 6144)
    assert lim.fused_kind == "tight"


@pytest.mark.parametrize("seed", range(0, 30, 3))
def test_a_chain_of_components_prices_the_streams_it_keeps_on_chip(seed, three_links):
    # three MLP layers, 3 links a component: the components form a chain, each joined to the next by a loose residual
    # stream made in one and read all in the next; kept on chip, the piece making it and the piece reading it share a
    # group, priced as one piece; cut, it moves twice. No partition (brute force) moves less than the limit
    _assert_no_partition_below_the_limit(stacked_mlp(seed, 3), (128, 256, 512, 1024))


def test_keeping_a_residual_stream_on_chip_costs_what_joining_its_pieces_costs(three_links):
    # stacked_mlp(0, 3): 2 images x 8 tokens, d 4, ff 16, a norm before the second layer, 512 B (256 words); three
    # components {proj, fc1_0, fc2_0, add0}, {ln1 .. add1}, {fc1_2, fc2_2, add2}, the streams between them (64 words,
    # 128 B) loose. Each component alone runs as one group at no excess (1,064 B: the Oracle); two layers in one group
    # do not fit one sub-group, so a stream kept costs more than its 256 B out and back, and the best partition, one
    # group a layer, cuts both: 1,064 + 2 x 256 = 1,576 B. The limit is that optimum (pricing each component on its
    # own, as before the chain, it said 1,064)
    g = stacked_mlp(0, 3)
    acc = _acc(512)
    lim = engine.limit.network(g, acc)
    assert (lim.oracle_bytes, lim.fused_bytes, brute_force(g, acc), fuse(g, acc).dram_bytes) == (1064, 1576, 1576, 1576)


@pytest.mark.parametrize("seed", (0, 2))
def test_a_run_of_three_components_kept_together_is_priced_as_one_piece(seed, three_links):
    # four MLP layers, 3 links a component: a chain of four components; where two streams in a row are kept, three
    # pieces share a group, priced as one piece (two of them kept free do not let the third in for nothing). No
    # partition (brute force, 14 ops) moves less than the limit
    _assert_no_partition_below_the_limit(stacked_mlp(seed, 4), (256, 512))


@pytest.mark.parametrize("kb,plan_bytes", [(8192, 253_477_888), (16384, 200_000_512)])
def test_gpt2_at_8_and_16_mb_sits_on_its_fused_limit(kb, plan_bytes):
    # 8 MB: the plan runs each layer as two groups, {ln_2 .. add_2} and {ln_1 .. add_1}, so both residual streams of a
    # layer go out and back (3.15 MB each); the components (MLP of one layer and attention of the next) are one chain
    # joined by the other stream, which keeping on chip would put a whole layer in one group: the limit is the plan
    # (pricing each component on its own it was 215.7 MB, that stream counted free, 12 x 3.15 MB). 16 MB: two
    # components fit one group in one sub-group, three do not, so the plan cuts every other stream between them (6 x
    # 3.15 MB); with runs of three priced as one piece the limit is the plan (181.1 MB when only pairs were)
    g = engine.load_network("gpt2")
    acc = engine.Accelerator.preset("optimus").with_buffer(kb * 1024)
    lim = engine.limit.network(g, acc)
    assert lim.fused_bytes == fuse(g, acc).dram_bytes == plan_bytes
