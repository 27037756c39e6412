"""The FFM comparison (benchmarks/bench_ffm.py) from its cached results, without AccelForge installed.

The cache holds FFM's least-energy mapping of AccelForge's GPT-3-6.7B block on its tpu_v4i, fused and unfused.
These tests check that the cached energies are FFM's actions times tpu_v4i.yaml's per-bit and per-MAC energies,
that the parts add up (components to the total, tensors to the off-chip bytes, Einsums to the latency), that
fusing never moves more off-chip bytes, and that our graph of the block has FFM's Einsums: its MACs are FFM's.
"""

import json

import pytest

from benchmarks.bench_ffm import DATA, FFN, HEADS, TOKENS, D, ffm_block, fused_groups, our_accelerator
from engine.fusion import fuse

RUNS = json.loads(DATA.read_text())["runs"]
# AccelForge's examples/arches/tpu_v4i.yaml (after Jouppi et al., "TPU v4", ISCA 2023): pJ per bit accessed, per MAC
PJ = {"MainMemory read": 7.03, "MainMemory write": 7.03, "GlobalBuffer read": 1.88, "GlobalBuffer write": 2.36,
      "LocalBuffer read": 0.249, "LocalBuffer write": 0.293, "Register read": 0.0, "Register write": 0.0,
      "MAC compute": 0.084, "ScalarUnit compute": 0.0}
EINSUMS = ("I", "V", "K", "Q", "QK", "QK_softmax", "AV", "Z", "FFA", "FFB")  # gpt3_6.7B.yaml, in order


def run_id(run: dict) -> str:
    return f"{run['tokens']}-{'fused' if run['fused'] else 'unfused'}"


def test_cache_holds_the_benchmarks_token_counts():
    assert {r["tokens"] for r in RUNS if not r["fused"]} == set(TOKENS)
    assert {r["tokens"] for r in RUNS if r["fused"]} <= set(TOKENS)
    assert len({(r["tokens"], r["fused"]) for r in RUNS}) == len(RUNS)


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_energy_is_actions_times_tpu_v4i_energies(run):
    for key, pj in run["energy_pj_by_action"].items():
        if key.endswith(" leak"):
            assert pj == 0, key  # every leak_power of tpu_v4i.yaml is 0
        else:
            assert pj == pytest.approx(run["actions"].get(key, 0.0) * PJ[key], rel=1e-6), key  # FFM sums in float32


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_parts_add_up(run):
    assert sum(run["energy_pj_by_component"].values()) == pytest.approx(run["energy_pj"], rel=1e-12)
    assert sum(run["energy_pj_by_action"].values()) == pytest.approx(run["energy_pj"], rel=1e-12)
    assert sum(run["offchip_bytes_by_tensor"].values()) == pytest.approx(run["offchip_bytes"], rel=1e-12)
    assert run["offchip_bytes"] * 8 == pytest.approx(
        run["actions"]["MainMemory read"] + run["actions"]["MainMemory write"], rel=1e-12)
    assert sum(run["latency_s_by_einsum"].values()) == pytest.approx(run["latency_s"], rel=1e-12)
    assert set(run["bottleneck_by_einsum"]) == set(run["latency_s_by_einsum"])
    assert [e for g in run["groups"] for e in g] == list(EINSUMS)


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_offchip_bytes_against_each_tensor_once(run):
    """Unfused, each Einsum reads its operands from MainMemory once and writes its result once (I_in's copy to I
    moves nothing: I stays where I_in is); fused, at least the weights, I_in and FFB cross once."""
    n = run["tokens"]
    weights = 4 * D * D + 2 * D * FFN  # WQ, WK, WV, WZ, WFFA, WFFB, one byte a value
    if run["fused"]:
        assert run["offchip_bytes"] >= weights + 2 * n * D
        return
    reads = 3 * n * D + 3 * n * D + 2 * HEADS * n * n + n * D + n * D + n * FFN  # I x3, Q K V, QK and softmax, AV, Z, FFA
    writes = 3 * n * D + 2 * HEADS * n * n + n * D + n * D + n * FFN + n * D  # Q K V, QK, softmax, AV, Z, FFA, FFB
    assert run["offchip_bytes"] == weights + reads + writes
    assert run["groups"] == [[e] for e in EINSUMS]


@pytest.mark.parametrize("fused", [r for r in RUNS if r["fused"]], ids=run_id)
def test_fusing_never_moves_more_offchip_bytes_or_energy(fused):
    unfused = next(r for r in RUNS if r["tokens"] == fused["tokens"] and not r["fused"])
    assert fused["offchip_bytes"] <= unfused["offchip_bytes"]
    assert fused["energy_pj"] <= unfused["energy_pj"]


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_our_graph_has_ffms_einsums(run):
    """Each matmul of our block does FFM's MACs (FFM recomputes nothing here); softmax is one scalar op per score."""
    graph = ffm_block(run["tokens"])
    macs = {op.name: op.macs for op in graph.ops if op.macs}
    computes = run["computes_by_einsum"]
    assert {e: computes[e] for e in macs} == pytest.approx(macs, rel=1e-12)
    assert computes["QK_softmax"] == HEADS * run["tokens"] ** 2


@pytest.mark.parametrize("run", [r for r in RUNS if not r["fused"]], ids=run_id)
def test_our_unfused_plan_moves_ffms_unfused_bytes(run):
    acc, _ = our_accelerator()
    assert fuse(ffm_block(run["tokens"]), acc, method="none").dram_bytes == run["offchip_bytes"]


def test_fused_groups_join_einsums_through_on_chip_intermediates():
    einsums = [["A", ["x"], ["y"]], ["B", ["y", "w"], ["z"]], ["C", ["z"], ["out"]]]
    assert fused_groups(einsums, {"x": 8, "w": 8, "z": 4, "out": 8}) == [["A", "B"], ["C"]]
    assert fused_groups(einsums, {"x": 8, "w": 8, "y": 8, "z": 4, "out": 8}) == [["A"], ["B"], ["C"]]
    assert fused_groups(einsums, {"x": 8, "w": 8, "out": 8}) == [["A", "B", "C"]]


@pytest.mark.parametrize("run", [r for r in RUNS if not r["fused"]], ids=run_id)
def test_our_unfused_mappings_latency_is_ffms_einsum_by_einsum_each_a_roofline_over_the_levels(run):
    from engine.mapping import map_plan

    acc, _ = our_accelerator()
    g = ffm_block(run["tokens"])
    mapped = map_plan(g, fuse(g, acc, method="none"), acc)
    bound = {"MAC": "compute", "ScalarUnit": "compute", "MainMemory": "DRAM"}  # FFM's component -> our bound
    for einsum in EINSUMS[1:]:  # FFM's I is a copy of the input our graph has no op for
        group = mapped.group_of(einsum)
        names = [name for name, _ in group.bounds_s]
        assert names == ["compute", "DRAM", "GlobalBuffer"]  # tpu_v4i.yaml limits the GlobalBuffer's ports only
        assert group.latency_s == max(seconds for _, seconds in group.bounds_s)
        assert group.latency_s == pytest.approx(run["latency_s_by_einsum"][einsum], rel=2e-3)
        assert group.bottleneck == bound[run["bottleneck_by_einsum"][einsum]]
