"""The least traffic of any partition (`floor_bytes`) and the whole-graph plan that reaches it (`whole_plan`)."""

from __future__ import annotations

import random

import pytest

import engine
from engine.fusion import fuse, oracle_bytes
from engine.fusion.cost import Capacity, model_of
from engine.fusion.floor import floor_bytes, whole_plan
from tests.test_fusion_search import brute_force, random_graph
from tests.test_fusion_transformer import attention_block, ffn_block


def _acc(buffer_bytes: int):
    return engine.Accelerator.preset("optimus").with_buffer(buffer_bytes).with_pe_array(4, 4)


def _cases():
    for seed in range(12):
        rng = random.Random(seed)
        yield f"dag{seed}", random_graph(seed, 6 + seed % 3), (2048, 16384, 1 << 20)[seed % 3]
        yield f"mlp{seed}", ffn_block(rng.choice([1, 2]), rng.choice([4, 8]), 8, rng.choice([16, 32]),
                                      swiglu=rng.random() < 0.5, act=rng.random() < 0.5, norm=rng.random() < 0.5,
                                      vocab=rng.choice([0, 50])), (1024, 4096, 1 << 20)[seed % 3]
    for seed, cache in ((0, 8), (1, 8), (2, 8)):  # decode against a KV cache (at most 9 ops: the brute force's reach)
        yield f"attention{seed}", attention_block(1, 4, 2, 4, cache=cache, norm=seed != 1), (2048, 1 << 20)[seed % 2]


CASES = list(_cases())


@pytest.mark.parametrize("name,graph,buffer", CASES, ids=[c[0] for c in CASES])
def test_no_partition_goes_below_the_floor_and_the_whole_plan_is_optimal(name, graph, buffer):
    acc = _acc(buffer)
    model, cap = model_of(graph, acc), Capacity.of(acc)
    best = brute_force(graph, acc)
    assert floor_bytes(model) <= best
    whole = whole_plan(model, cap)
    if whole is not None:
        assert fuse(graph, acc).dram_bytes == floor_bytes(model) == best


def test_the_floor_is_reached_where_the_buffer_holds_a_block_and_counts_the_lookup_both_ways():
    # 8 tokens of width 8 looked up in a 50-row table, then Llama's MLP (FFN 16): at 1 MB all of it fits; the
    # embedding runs alone, so its output (8 x 8 words) goes out and comes back in: the floor is the Oracle
    # (ids, rows looked up, weights, output once) plus 2 x 128 bytes
    g = ffn_block(1, 8, 8, 16, swiglu=True, vocab=50)
    acc = _acc(1 << 20)
    model = model_of(g, acc)
    assert floor_bytes(model) == oracle_bytes(g, acc) + 2 * 8 * 8 * 2
    whole = whole_plan(model, Capacity.of(acc))
    assert [len(model.members(m)) for m in whole] == [1, len(g.ops) - 1]
    assert oracle_bytes(g, acc) == 8 * 2 + 8 * 8 * 2 + (8 + 3 * 8 * 16) * 2 + 8 * 8 * 2  # ids, rows, weights, out


def test_decode_is_exact_in_a_moment_where_its_layers_fit_whole():
    g = engine.load_network("llama3_8b_decode", batch=1)
    acc = engine.Accelerator.preset("optimus").with_buffer(2 << 20)
    plan = fuse(g, acc)
    assert plan.status == "optimal" and plan.search_seconds < 5
    assert [len(grp) for grp in plan.groups] == [1, len(g.ops) - 1]  # the embedding alone, then all 32 layers
    assert plan.dram_bytes == oracle_bytes(g, acc) + 2 * 4096 * 2
