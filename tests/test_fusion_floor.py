"""The least traffic of any partition (`floor_bytes`) and the whole-graph plan that reaches it (`whole_plan`)."""

from __future__ import annotations

import random

import pytest

import engine
from engine.fusion import fuse, oracle_bytes, sized
from engine.fusion.cost import Capacity, model_of
from engine.fusion.floor import _cheapest_cut, _cut_weights, floor_bytes, split_plan, whole_plan
from engine.fusion.sized import dram_bytes
from engine.graph import Graph, Op, OpKind
from tests.test_fusion_search import brute_force, random_graph
from tests.test_fusion_transformer import _Block, attention_block, ffn_block


def _acc(buffer_bytes: int):
    return engine.Accelerator.preset("optimus").with_buffer(buffer_bytes).with_pe_array(4, 4)


def mlp_stack(layers: int, n: int, length: int, d: int, ff: int, vocab: int = 0) -> Graph:
    """`layers` pre-norm MLP layers on a residual stream (a decode step when `length` is 1), after an embedding
    of `vocab` rows when vocab > 0."""
    b = _Block(n)
    if vocab:
        table = b.tensor("table", (vocab, d), True)
        b.ops.append(Op("embed", OpKind.OTHER, (b.tensor("ids", (n, length)),), (b.tensor("x0", (n, length, d)),),
                        (table,), source_type="Gather"))
    else:
        b.tensor("x0", (n, length, d))
    x = "x0"
    for k in range(layers):
        y = b.linear(b.linear(b.norm(x, f"ln{k}"), f"fc1_{k}", ff), f"fc2_{k}", d)
        x = b.op(f"add{k}", OpKind.ELTWISE, (y, x), (n, length, d))
    return b.graph("stack", ["ids" if vocab else "x0"])


def _cases():
    for seed in range(12):
        rng = random.Random(seed)
        yield f"dag{seed}", random_graph(seed, 6 + seed % 3), (2048, 16384, 1 << 20)[seed % 3]
        yield f"mlp{seed}", ffn_block(rng.choice([1, 2]), rng.choice([4, 8]), 8, rng.choice([16, 32]),
                                      swiglu=rng.random() < 0.5, act=rng.random() < 0.5, norm=rng.random() < 0.5,
                                      vocab=rng.choice([0, 50])), (1024, 4096, 1 << 20)[seed % 3]
    # (images, tokens, table rows, buffer): one layer fits a group but not both (the cut pays), both, or none
    for k, (n, length, vocab, buffer) in enumerate(((1, 1, 0, 80), (1, 1, 50, 104), (1, 4, 0, 300), (2, 1, 50, 136),
                                                    (2, 4, 0, 600), (1, 1, 50, 48), (2, 4, 50, 4096))):
        yield f"stack{k}", mlp_stack(2, n, length, 8, 16, vocab=vocab), buffer
    for seed, cache in ((0, 8), (1, 8), (2, 8)):  # decode against a KV cache (at most 9 ops: the brute force's reach)
        yield f"attention{seed}", attention_block(1, 4, 2, 4, cache=cache, norm=seed != 1), (2048, 1 << 20)[seed % 2]


CASES = list(_cases())


@pytest.mark.parametrize("name,graph,buffer", CASES, ids=[c[0] for c in CASES])
def test_no_partition_goes_below_the_floor_and_the_whole_plan_is_optimal(name, graph, buffer):
    acc = _acc(buffer)
    model, cap = model_of(graph, acc), Capacity.of(acc)
    best = brute_force(graph, acc)
    assert floor_bytes(model) <= best
    whole = whole_plan(sized.of(model, cap))
    if whole is not None:
        assert fuse(graph, acc).dram_bytes == floor_bytes(model) == best
    split = split_plan(sized.of(model, cap))
    if split is not None:
        assert sum(dram_bytes(model, g, cap) for g in split) == best


@pytest.mark.parametrize("name,graph,buffer", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_the_cheapest_cut_is_the_least_over_every_down_set(name, graph, buffer):
    # the max-flow's minimum closure against every split of the covered ops into a down-set and the rest
    model = model_of(graph, _acc(buffer))
    covered = sum(1 << i for i in range(model.n) if model.covered[i])
    weight = _cut_weights(model, covered)
    members = model.members(covered)
    least = None
    for bits in range(1, (1 << len(members)) - 1):
        down = sum(1 << i for k, i in enumerate(members) if bits >> k & 1)
        if any(model.pred[i] & covered & ~down for i in model.members(down)):
            continue  # not a down-set
        cut = sum(w for j, w in weight.items() if (down >> model.producer[j]) & 1
                  and model.consumer_mask[j] & covered & ~down)
        least = cut if least is None else min(least, cut)
    assert _cheapest_cut(model, covered, weight) == (least or 0)


def test_the_floor_is_reached_where_the_buffer_holds_a_block_and_counts_the_lookup_both_ways():
    # 8 tokens of width 8 looked up in a 50-row table, then Llama's MLP (FFN 16): at 1 MB all of it fits; the
    # embedding runs alone, so its output (8 x 8 words) goes out and comes back in: the floor is the Oracle
    # (ids, rows looked up, weights, output once) plus 2 x 128 bytes
    g = ffn_block(1, 8, 8, 16, swiglu=True, vocab=50)
    acc = _acc(1 << 20)
    model = model_of(g, acc)
    assert floor_bytes(model) == oracle_bytes(g, acc) + 2 * 8 * 8 * 2
    whole = whole_plan(sized.of(model, Capacity.of(acc)))
    assert [len(model.members(m)) for m in whole] == [1, len(g.ops) - 1]
    assert oracle_bytes(g, acc) == 8 * 2 + 8 * 8 * 2 + (8 + 3 * 8 * 16) * 2 + 8 * 8 * 2  # ids, rows, weights, out


def test_decode_at_1mb_is_two_groups_at_a_residual_cut_and_proven():
    # at 1 MB the 32 layers do not fit one group; every partition then cuts them somewhere, and the cheapest
    # cut is the residual stream between two layers (8 KB written, read back): two groups at such a cut reach
    # the floor plus 16 KB, so the plan is optimal without the search (which ended as a beam 0.06 MB above)
    g = engine.load_network("llama3_8b_decode", batch=1)
    acc = engine.Accelerator.preset("optimus").with_buffer(1 << 20)
    model = model_of(g, acc)
    plan = fuse(g, acc)
    assert plan.status == "optimal" and len(plan.groups) == 3
    assert plan.dram_bytes == floor_bytes(model) + 2 * 4096 * 2


def test_decode_is_exact_in_a_moment_where_its_layers_fit_whole():
    g = engine.load_network("llama3_8b_decode", batch=1)
    acc = engine.Accelerator.preset("optimus").with_buffer(2 << 20)
    plan = fuse(g, acc)
    assert plan.status == "optimal"
    assert [len(grp) for grp in plan.groups] == [1, len(g.ops) - 1]  # the embedding alone, then all 32 layers
    assert plan.dram_bytes == oracle_bytes(g, acc) + 2 * 4096 * 2
