"""Size stress: long chains, wide fan-outs and joins, huge dims give a plan or an EngineError, never another exception.

Small versions of the cases `benchmarks/bench_size.py` times (each here runs in a second or two); the benchmark
holds the curve of time and memory against ops, these hold the behaviour.
"""

import pytest

import engine
from benchmarks.bench_size import chain, concat, fan_out, wide_depthwise
from engine.fusion import bound
from engine.fusion.cost import model_of

ACC = engine.Accelerator.preset("optimus")


def _costs_add_up(graph, plan):
    return plan.dram_bytes == sum(engine.fusion.group_cost(graph, g, ACC).dram_bytes for g in plan.groups)


@pytest.mark.parametrize("graph", [chain(300), fan_out(60), concat(300), wide_depthwise(2**24)],
                         ids=lambda g: g.name)
def test_big_shapes_give_a_plan_for_every_method(graph):
    for method in ("dnnvm", "efficient_s", "optimus"):
        plan = engine.fuse(graph, ACC, method=method)
        assert plan.status in ("optimal", "restricted", "beam") and _costs_add_up(graph, plan)
        assert sorted(op for g in plan.groups for op in g) == sorted(op.name for op in graph.ops)


def test_a_tensor_past_the_cost_models_integers_is_an_engine_error_not_a_wrong_plan():
    with pytest.raises(engine.EngineError, match="tensor 'x' of shape \\[1, 4, 6, 2147483648\\] is too large to cost"):
        engine.fuse(wide_depthwise(2**31), ACC, method="dnnvm")


def test_evaluate_on_a_wide_fan_out_returns_every_plan():
    report = engine.evaluate(fan_out(60), ACC, methods=("dnnvm", "efficient_s", "optimus"))
    assert set(report.plans) == {"dnnvm", "efficient_s", "optimus"} and not report.errors


def test_a_graph_over_the_fusion_limit_is_an_engine_error_before_any_table_is_built(monkeypatch):
    monkeypatch.setattr(engine.fusion, "MAX_OPS", 100)
    with pytest.raises(engine.EngineError, match="graph 'chain_102' has 102 ops; fusion takes at most 100"):
        engine.fuse(chain(102), ACC)
    with pytest.raises(engine.EngineError, match="at most 100"):
        engine.evaluate(chain(102), ACC)


def test_window_crossings_match_their_definition_and_long_graphs_get_windows_greedily(monkeypatch):
    model = model_of(engine.load_network("googlenet"), ACC)
    for cut, got in enumerate(bound._crossings(model)):  # made before op `cut`, read from it on
        later = ~((1 << cut) - 1)
        assert got == sum(model.tbytes[j] for j, p in enumerate(model.producer)
                          if 0 <= p < cut and model.consumer_mask[j] & later)
    monkeypatch.setattr(bound, "PLACE_DP_OPS", 10)
    cuts = bound._place(model, 50)
    assert cuts[0][0] == 0 and cuts[-1][1] == model.n and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(hi == bound._ends(model, lo, 50)[-1] for lo, hi in cuts)  # each window as long as the budget allows


def test_band_sizes_are_the_distinct_ceiling_quotients_without_visiting_every_column():
    from engine.fusion.cost import ceil_quotients

    for n in (1, 2, 3, 7, 97, 1000, 4099):
        for first in (1, 2):
            assert ceil_quotients(n, first) == sorted({-(-n // j) for j in range(first, n + 1)}, reverse=True)
    assert len(ceil_quotients(2**31, 2)) < 2 * 2**16  # 2 sqrt(n) values, found one per value


def test_a_search_that_runs_out_of_memory_is_an_engine_error(monkeypatch):
    def exhausted(at):
        raise MemoryError

    monkeypatch.setitem(engine.fusion.METHODS, "dnnvm", (exhausted, "restricted"))
    with pytest.raises(engine.EngineError, match="graph 'chain_20' \\(20 ops\\) needs more memory .* method 'dnnvm'"):
        engine.fuse(chain(20), ACC, method="dnnvm")
