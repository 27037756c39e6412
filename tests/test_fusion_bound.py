"""The lower bound of engine.fusion.bound: never above the brute-force optimum, however the ops are cut into windows."""

from __future__ import annotations

import pytest

import engine
from engine import zoo
from engine.fusion import fuse, sized
from engine.fusion.bound import lower_bound, window_model, windows
from engine.fusion.cost import Capacity, model_of
from tests.test_fusion_search import CASES, random_graph, solved_case


@pytest.mark.parametrize("seed,n_ops,buffer", CASES)
def test_lower_bound_never_exceeds_the_brute_force_optimum(seed, n_ops, buffer):
    graph, acc, expect = solved_case(seed, n_ops, buffer)
    if expect is None:
        return
    model, cap = model_of(graph, acc), Capacity.of(acc)
    whole = lower_bound(sized.of(model, cap), budget=1 << 20)
    assert whole.windows == ((0, n_ops),)
    assert whole.bytes <= expect
    for budget in (2, 4, 8):  # narrow windows: every border gives traffic away, never too much
        bound = lower_bound(sized.of(model, cap), budget=budget)
        assert bound.bytes <= expect
        assert [lo for lo, _ in bound.windows] == [0] + [hi for _, hi in bound.windows[:-1]]


def test_windows_respect_the_budget_and_cover_every_op():
    model = model_of(zoo.build("nasnet_a_mobile", 1), engine.Accelerator.preset("optimus"))
    cuts = windows(model, budget=300)
    assert cuts[0][0] == 0 and cuts[-1][1] == model.n
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert len(cuts) > 10


def test_border_tensors_are_free_and_held_at_t_c_channels():
    graph = zoo.build("googlenet", 1)
    acc = engine.Accelerator.preset("optimus")
    model = model_of(graph, acc)
    lo, hi = 20, 40
    sub = window_model(model, lo, hi)
    made = {t for op in graph.ops[lo:hi] for t in op.outputs}
    border = [t for op in graph.ops[lo:hi] for t in op.inputs if t not in made]
    assert border
    for t in border:
        j = sub.tindex[t]
        geo = sub.tgeo[j]
        assert sub.tbytes[j] == 0
        assert sub.held[j] == min(model.tp.t_c, geo.channels) * geo.w < geo.row or geo.channels <= model.tp.t_c


def test_lower_bound_is_below_the_exact_optimum_on_googlenet():
    graph = zoo.build("googlenet", 4)
    acc = engine.Accelerator.preset("optimus")
    plan = fuse(graph, acc)
    assert plan.status == "optimal"
    model, cap = model_of(graph, acc), Capacity.of(acc)
    one = lower_bound(sized.of(model, cap), budget=1 << 20)
    cut = lower_bound(sized.of(model, cap), budget=100)
    assert len(one.windows) == 1 and len(cut.windows) > 1
    assert cut.bytes <= one.bytes <= plan.dram_bytes
    assert one.bytes > 0.9 * plan.dram_bytes  # GoogLeNet as one window: within 10 % of its optimum


def test_an_optimal_plan_is_its_own_bound_and_a_restricted_one_has_none():
    graph = random_graph(3, 9)
    acc = engine.Accelerator.preset("optimus").with_buffer(8192)
    plan = fuse(graph, acc)
    assert plan.status == "optimal"
    assert plan.lower_bound_bytes == plan.dram_bytes and plan.gap == 0
    assert fuse(graph, acc, method="dnnvm").lower_bound_bytes is None


def test_the_gap_is_measured_against_the_plans_own_traffic_as_allocations_is():
    from dataclasses import replace

    plan = fuse(random_graph(3, 9), engine.Accelerator.preset("optimus").with_buffer(8192))
    beam = replace(plan, status="beam", lower_bound_bytes=plan.dram_bytes // 4)
    assert beam.gap == (plan.dram_bytes - plan.dram_bytes // 4) / plan.dram_bytes  # 0.75, as a MIP gap


def test_a_graph_of_few_downsets_is_searched_without_limits_and_its_bound_meets_it():
    """Llama-3-8B prefill has 2,469 down-sets, so optimus searches it without limits (optimus.FEW_DOWNSETS): on
    tpu-v4i (128 MB) it evaluates 551,037 groups, past the 400,000 after which the limits narrowed it into a beam,
    and says 'optimal'; the windows' lower bound, an independent proof, meets the plan to the byte."""
    from engine.fusion import optimus

    graph, acc = zoo.build("llama3_8b_prefill"), engine.Accelerator.preset("tpu-v4i")
    model = model_of(graph, acc)
    assert model.downsets((1 << model.n) - 1, 10_000) == 2469
    assert optimus.limits_for(model) is optimus.EXACT
    plan = fuse(graph, acc, method="optimus")
    assert plan.status == "optimal" and plan.groups_evaluated == 551_037 > optimus.Limits().total
    assert plan.dram_bytes == 7_748_332_800 == lower_bound(sized.of(model, Capacity.of(acc))).bytes
    assert len(plan.groups) == 16


def _fan(readers: int, conv: bool):
    from engine.graph import OpKind
    from engine.zoo._builder import Net

    net = Net(f"fan_{readers}", 1)
    x = net.conv(net.input((8, 8, 8), "x"), "conv", 8, 3, padding=1)
    for k in range(readers):
        if conv:
            net.conv(x, f"reader{k}", 4 + k, 1 + 2 * (k % 2), padding=k % 2)
        else:
            net.add_op(f"reader{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 8, 8, 8),))
    return net.graph()


def test_a_fans_readers_apart_are_bounded_by_their_own_bytes_without_a_search(monkeypatch):
    from engine.fusion import bound
    from engine.fusion.bound import lower_bound_of
    from engine.fusion.cost import least_bytes

    acc = engine.Accelerator.preset("optimus")
    model, cap = model_of(_fan(12, conv=False), acc), Capacity.of(acc)
    assert not bound._apart(model)  # the Conv feeds every reader
    sub = window_model(model, 1, model.n)  # the readers alone: x is made outside, free here
    assert bound._apart(sub)
    assert not bound._apart(window_model(model_of(_fan(12, conv=True), acc), 1, model.n))  # readers with weights
    quick = lower_bound_of(sub, cap)
    assert quick.groups_evaluated == 0 and quick.bytes == sum(least_bytes(sub, 1 << i) for i in range(sub.n)) > 0
    monkeypatch.setattr(bound, "_apart", lambda m: False)
    searched = lower_bound_of(sub, cap)
    assert searched.groups_evaluated > 0 and searched.bytes == quick.bytes  # the search finds the same sum
