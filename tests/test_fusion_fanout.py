"""One tensor read by many alike ops: `optimus` fixes the order of interchangeable readers and stays exact.

Without that, every subset of the readers is a down-set (2^N); with it, N + 1. The brute force of
tests/test_fusion_search.py is the oracle on small fans; wide fans must finish in seconds.
"""

from __future__ import annotations

import pytest

import engine
from engine.fusion import fuse, optimus
from engine.fusion.cost import Capacity, model_of
from engine.fusion.model import FusionModel
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs
from tests import fusion_reference
from tests.test_fusion_search import brute_force


def fan(readers: int, kind: str = "relu", mixed: bool = False) -> Graph:
    """x -> conv -> `readers` ops reading its output (ReLUs, 3x3 pools or 1x1 convs; every other one a pool
    when `mixed`) -> one sum of them all."""
    shape = (1, 8, 8, 8)
    tensors = [Tensor("x", shape), Tensor("c.w", (8, 8, 3, 3), is_weight=True), Tensor("c", shape)]
    ops = [Op("c", OpKind.CONV, ("x",), ("c",), weights=("c.w",), kernel=(3, 3), stride=(1, 1), padding=(1,) * 4,
              macs=conv_macs(shape, 8, (3, 3), 1))]
    for i in range(readers):
        name, this = f"r{i}", "pool" if mixed and i % 2 else kind
        tensors.append(Tensor(name, shape))
        if this == "relu":
            ops.append(Op(name, OpKind.ELTWISE, ("c",), (name,)))
        elif this == "pool":
            ops.append(Op(name, OpKind.POOL, ("c",), (name,), kernel=(3, 3), stride=(1, 1), padding=(1,) * 4))
        else:
            tensors.append(Tensor(f"{name}.w", (8, 8, 1, 1), is_weight=True))
            ops.append(Op(name, OpKind.CONV, ("c",), (name,), weights=(f"{name}.w",), kernel=(1, 1), stride=(1, 1),
                          padding=(0,) * 4, macs=conv_macs(shape, 8, (1, 1), 1)))
    tensors.append(Tensor("sum", shape))
    ops.append(Op("sum", OpKind.ELTWISE, tuple(f"r{i}" for i in range(readers)), ("sum",)))
    return Graph.build(f"fan{readers}", ops, tensors, ("x",), ("sum",))


def _acc(buffer: int):
    return engine.Accelerator.preset("optimus").with_buffer(buffer).with_pe_array(4, 4)


@pytest.mark.parametrize("kind,mixed", [("relu", False), ("pool", False), ("conv", False), ("relu", True)])
@pytest.mark.parametrize("buffer", [2048, 4096, 16384])
def test_optimus_on_fans_equals_brute_force(kind, mixed, buffer):
    graph = fan(4, kind, mixed)
    plan = fuse(graph, _acc(buffer), method="optimus")
    assert plan.status == "optimal"
    assert plan.dram_bytes == brute_force(graph, _acc(buffer))


def test_twins_are_alike_neighbours_only():
    acc = _acc(4096)
    for graph, expect in ((fan(4), [-1, -1, 1, 2, 3, -1]), (fan(4, "conv"), [-1, -1, 1, 2, 3, -1]),
                          (fan(4, mixed=True), [-1] * 6)):
        model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
        assert optimus._twins(model) == expect


@pytest.mark.parametrize("readers", [60, 400])
def test_wide_fans_are_searched_exactly(readers):
    """Without the twin order a fan of 60 readers has 2^60 down-sets and ends as a beam (timings: BENCHMARKS.md)."""
    graph = fan(readers)
    plan = fuse(graph, engine.Accelerator.preset("optimus"), method="optimus")
    assert plan.status == "optimal"
    assert sorted(op for group in plan.groups for op in group) == sorted(op.name for op in graph.ops)


@pytest.mark.parametrize("kind,buffer", [("relu", 2048), ("conv", 2048), ("pool", 16384)])
def test_compiled_and_reference_searches_agree_on_fans(kind, buffer):
    """The twin order and the known plan's cut are the same in both loops: same chain, count and total."""
    graph, acc = fan(8, kind), _acc(buffer)
    cap = Capacity.of(acc)
    runs = [search(FusionModel(graph, model_of(graph, acc).tp, acc.word_bits), cap)
            for search in (fusion_reference.chain_search, optimus.chain_search)]
    assert [r.path for r in runs] == ["python", "compiled"]
    assert runs[0] == runs[1] and runs[0].exact


def test_efficient_s_past_its_work_limit_says_so(monkeypatch):
    """Efficient-S's segment DP is quadratic in a fan's length: past WORK_LIMIT ops visited it tries single ops only
    and the plan says it stopped early ('beam'); within it the plan is the baseline's ('restricted')."""
    from engine.fusion import efficient_s

    graph, acc = fan(30), _acc(1 << 20)
    assert fuse(graph, acc, method="efficient_s").status == "restricted"
    monkeypatch.setattr(efficient_s, "WORK_LIMIT", 50)
    plan = fuse(graph, acc, method="efficient_s", bound=False)
    assert plan.status == "beam"
    assert sorted(op for group in plan.groups for op in group) == sorted(op.name for op in graph.ops)


def test_downsets_are_counted_as_the_brute_force_counts_them():
    """FusionModel.downsets against every subset closed under predecessors, and the cap; a fan of N readers has
    2^N + 2 down-sets (none; the conv; it with any readers; all and the sum), too many to search without limits."""
    import itertools

    graph = fan(5, mixed=True)
    model = FusionModel(graph, model_of(graph, _acc(4096)).tp, 8)
    every = (1 << model.n) - 1
    closed = sum(all(not model.pred[i] & ~s for i in model.members(s))
                 for s in (sum(1 << i for i in c) for k in range(model.n + 1)
                           for c in itertools.combinations(range(model.n), k)))
    assert model.downsets(every, 1000) == closed == 2 ** 5 + 2
    assert model.downsets(every, 10) == 17  # op by op 1, 2, 3, 5, 9, 17: it stops at the op that passes the cap
    wide = fan(12)
    assert optimus.limits_for(model_of(wide, _acc(4096))) == optimus.Limits()  # 4,098 > FEW_DOWNSETS: the limits
    assert optimus.limits_for(model) is optimus.EXACT
