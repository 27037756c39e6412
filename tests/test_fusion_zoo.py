"""Fusion on the zoo networks and imported ONNX files: optimus never loses to a baseline, nothing beats the Oracle."""

from __future__ import annotations

import pytest

import engine
from engine import zoo
from engine.fusion import METHODS, fuse, group_cost, oracle_bytes
from engine.loading import onnx_light_models
from engine.onnx_import import load_onnx

KB = 1024
NETWORKS = [(name, kb) for name in ("alexnet", "vgg16", "resnet18", "resnet50", "squeezenet1_0")
            for kb in (32, 128, 1024)] + [("googlenet", 32), ("googlenet", 128)]


def _plans(graph, acc):
    return {method: fuse(graph, acc, method=method) for method in METHODS}


@pytest.mark.parametrize("name,kb", NETWORKS)
def test_optimus_is_best_and_oracle_is_a_floor(name, kb):
    graph = zoo.build(name, 4)
    acc = engine.Accelerator.preset("optimus").with_buffer(kb * KB)
    plans = _plans(graph, acc)
    floor = oracle_bytes(graph, acc)
    best = plans["optimus"].dram_bytes
    for method, plan in plans.items():
        assert plan.dram_bytes >= best, method
        assert plan.dram_bytes >= floor, method
        assert sorted(op for grp in plan.groups for op in grp) == sorted(op.name for op in graph.ops)


def test_plan_total_is_the_sum_of_group_costs_on_resnet50():
    graph = zoo.build("resnet50", 4)
    acc = engine.Accelerator.preset("optimus")
    plan = fuse(graph, acc)
    assert plan.dram_bytes == sum(group_cost(graph, grp, acc).dram_bytes for grp in plan.groups)


def test_more_buffer_never_costs_more_traffic():
    graph = zoo.build("squeezenet1_0", 4)
    acc = engine.Accelerator.preset("optimus")
    totals = [fuse(graph, acc.with_buffer(kb * KB)).dram_bytes for kb in (32, 64, 128, 256, 512, 1024, 2048)]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize("file", ["light_squeezenet.onnx", "light_shufflenet.onnx", "light_bvlc_alexnet.onnx"])
def test_every_method_runs_on_imported_onnx(file):
    graph = load_onnx(onnx_light_models() / file, batch=4)
    acc = engine.Accelerator.preset("optimus")
    plans = _plans(graph, acc)
    best = plans["optimus"].dram_bytes
    assert all(best <= plan.dram_bytes for plan in plans.values())
    assert best >= oracle_bytes(graph, acc)
