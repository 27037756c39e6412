"""evaluate(): one Report from every part; the blocking access model prices buffer and RF by Yang's blocking."""

import json

import pytest

import engine
from engine.explore import blocked_energy, buffer_curve, evaluate


@pytest.fixture(scope="module")
def resnet18():
    return engine.load_network("resnet18")


def test_report_holds_every_part(resnet18):
    acc = engine.Accelerator.preset("optimus")
    rep = evaluate(resnet18, acc, methods=("dnnvm", "optimus"), allocation="cosma", budget="M_P",
                   cpu_kinds=("pool",), modules=True)
    assert rep.plans["optimus"].dram_bytes <= rep.plans["dnnvm"].dram_bytes
    assert rep.plans["optimus"].dram_bytes >= rep.oracle_bytes
    assert rep.allocation.offchip_bytes == 0 and rep.allocation.status == "optimal"
    assert {p.device for p in rep.partition.parts} == {"cpu", "accelerator"}
    assert rep.modules is not None and not rep.errors
    out = json.loads(rep.to_json())
    assert out["fusion"]["optimus"]["dram_bytes"] == rep.plans["optimus"].dram_bytes
    assert out["allocation"]["status"] == "optimal"


def test_a_report_lists_the_data_dependent_counts_it_rests_on(tmp_path, resnet18):
    from tests.test_onnx_import import detector_with_data_dependent_tail

    path = tmp_path / "detector.onnx"
    path.write_bytes(detector_with_data_dependent_tail().SerializeToString())
    graph = engine.load_network(path, data_counts={"keep": 20})
    rep = evaluate(graph, engine.Accelerator.preset("optimus"), methods=("dnnvm",), access_model="dataflow")
    out = json.loads(rep.to_json())["network"]
    assert out["assumptions"] == ["NonZero 'keep' keeps 20 (as given; its most 64)"]
    assert out["macs"] == 4 * 64 * 27 + 20 * 4 * 16  # the conv head, and the box head on 20 positions
    assert json.loads(evaluate(resnet18, engine.Accelerator.preset("optimus"), methods=("dnnvm",),
                               access_model="dataflow").to_json())["network"]["assumptions"] == []


def test_an_infeasible_budget_is_an_honest_partial_report(resnet18):
    rep = evaluate(resnet18, engine.Accelerator.preset("optimus"), methods=("optimus",), allocation="cosma",
                   budget=1024)
    assert rep.allocation is not None and rep.allocation.status == "infeasible"
    bad = evaluate(resnet18, engine.Accelerator.preset("optimus"), methods=("optimus",), allocation="cosma",
                   budget="M_X")
    assert bad.allocation is None and "budget must be" in bad.errors["allocation"]
    assert bad.plans["optimus"].dram_bytes > 0  # the rest of the report stands


def test_blocking_access_model_keeps_dram_and_macs_and_moves_buffer_and_rf(resnet18):
    acc = engine.Accelerator.preset("optimus")
    plan = engine.fuse(resnet18, acc, method="optimus")
    flow = engine.energy.energy_breakdown(resnet18, plan, acc)
    blocked = blocked_energy(resnet18, plan, acc)
    assert blocked.dram_pj == flow.dram_pj and blocked.mac_pj == flow.mac_pj
    counts = dict(blocked.accesses)
    assert counts["rf"] > 0 and counts["buffer"] >= plan.dram_bytes / 2  # every DRAM word passes the buffer
    assert blocked.buffer_pj != flow.buffer_pj
    rep = evaluate(resnet18, acc, methods=("optimus",), access_model="blocking")
    assert rep.energy["optimus"] == blocked
    with pytest.raises(engine.EngineError, match="access_model"):
        evaluate(resnet18, acc, access_model="magic")


def test_buffer_curve_never_rises_for_optimus_and_stays_above_the_oracle(resnet18):
    curve = buffer_curve(resnet18, engine.Accelerator.preset("optimus"), ("optimus",), buffers_kb=(16, 64, 256, 1024))
    opt = curve[curve["method"] == "optimus"]["dram_mb"].tolist()
    oracle = curve[curve["method"] == "oracle"]["dram_mb"].tolist()
    assert opt == sorted(opt, reverse=True)
    assert all(o >= r for o, r in zip(opt, oracle))


def test_a_named_budget_is_found_within_the_allocations_time_limit(resnet18, monkeypatch):
    import engine.allocation as allocation
    from engine.explore import allocate_for_budget

    real, limits = allocation.budgets, []

    def recorded(graph, word_bits=16, **options):
        limits.append(options.get("time_limit_s"))
        return real(graph, word_bits, **options)

    monkeypatch.setattr(allocation, "budgets", recorded)
    acc = engine.Accelerator.preset("optimus")
    alloc, nbytes = allocate_for_budget(resnet18, acc, "cosma", "M_P", time_limit_s=7.0)
    assert limits == [7.0]  # M_P's MPMF order no longer gets its own 60 s beside the allocation's limit
    assert nbytes == real(resnet18, word_bits=acc.word_bits)[2] and alloc.offchip_bytes == 0


def test_a_bare_string_is_one_method_or_kind_and_an_unknown_kind_is_refused(resnet18):
    acc = engine.Accelerator.preset("optimus")
    rep = evaluate(resnet18, acc, methods="optimus", cpu_kinds="pool")
    assert tuple(rep.plans) == ("optimus",)
    assert {p.device for p in rep.partition.parts} == {"cpu", "accelerator"}  # "pool" is a kind, not four letters
    with pytest.raises(engine.UnknownNameError, match="unknown op kind in cpu_kinds 'pools'.*conv"):
        evaluate(resnet18, acc, methods="optimus", cpu_kinds=("pools",))
    with pytest.raises(engine.EngineError, match="methods must hold names"):
        evaluate(resnet18, acc, methods=(None,))


def test_fuse_modules_and_allocate_refuse_bad_arguments(resnet18):
    acc = engine.Accelerator.preset("optimus")
    with pytest.raises(engine.EngineError, match="fuse needs an engine.Graph and an engine.Accelerator, got NoneType"):
        engine.fuse(None, acc)
    with pytest.raises(engine.EngineError, match="max_module_layers must be .* at least 1, got -1"):
        engine.plan_modules(resnet18, acc, max_module_layers=-1)
    for bits in (100_000, 0, 65, True):
        with pytest.raises(engine.EngineError, match="word_bits must be a whole number between 1 and 64"):
            engine.allocate(resnet18, 10**9, word_bits=bits)


def test_a_report_and_its_graph_cross_a_process_boundary(resnet18):
    """Pickled (the dashboard's worker processes send reports back): equal plans, energies and graph; the graph's
    derived lookups are left out and rebuilt."""
    import pickle
    from dataclasses import replace

    assert resnet18.dag.number_of_nodes() == len(resnet18.ops)  # a lookup built before pickling
    rep = evaluate(resnet18, engine.Accelerator.preset("eyeriss"), methods=("dnnvm", "optimus"),
                   access_model="blocking")
    back = pickle.loads(pickle.dumps(rep))
    assert back.graph == resnet18 and "dag" not in vars(back.graph)
    assert set(back.graph.dag.edges) == set(resnet18.dag.edges)
    assert {m: p.groups for m, p in back.plans.items()} == {m: p.groups for m, p in rep.plans.items()}
    assert dict(back.energy) == dict(rep.energy) and back.summary_frame().equals(rep.summary_frame())
    assumed = replace(resnet18, assumptions=("NonZero 'keep': 5 (as given)",))  # what an import rested on crosses too
    assert pickle.loads(pickle.dumps(assumed)).assumptions == assumed.assumptions
