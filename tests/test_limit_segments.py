"""The tight fused limit (engine/limit/segments.py): never above any partition's cost, reached where a plan can."""

from __future__ import annotations

import pytest

import engine
from engine.fusion import fuse
from engine.fusion.cost import model_of
from engine.limit.segments import segments_of
from tests.test_fusion_search import brute_force
from tests.test_fusion_transformer import SMALL, _acc, attention_block, ffn_block, random_block, random_ffn

BUFFERS = (256, 1024, 4096)
BLOCKS = [("ffn", seed) for seed in range(20)] + [("attention", seed) for seed in SMALL]


@pytest.mark.parametrize("kind,seed", BLOCKS)
def test_no_partition_of_a_random_block_moves_less_than_the_fused_limit(kind, seed):
    # every valid partition of the block's ops into groups (brute force over set partitions), priced by group_cost
    g = (random_ffn if kind == "ffn" else random_block)(seed)
    for buffer in BUFFERS:
        acc = _acc(buffer)
        try:
            lim = engine.limit.network(g, acc)
        except engine.EngineError:
            continue  # some op fits no tiling
        best = brute_force(g, acc)
        assert best is None or lim.valid_bytes <= lim.fused_bytes <= best, buffer


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
    # QKV projection linked to the scores through the head split: 10 links), cut alike: 3 kinds (first, middle,
    # last), so a new buffer size prices each kind once; the residual stream between layers is left out (counted
    # free), one link per layer boundary
    g = engine.load_network("gpt2")
    seg = segments_of(model_of(g, engine.Accelerator.preset("optimus")))
    assert len(seg.components) == 13 and len({c.kind for c in seg.components}) == 3
    assert seg.free_links == 12 and max(len(c.links) for c in seg.components) == 10


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
