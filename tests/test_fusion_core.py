"""The compiled search (engine.fusion.core) grows the same groups in the same order as the Python reference.

`optimus.chain_search` (compiled) and `fusion_reference.chain_search` must return the same chain, the same count of groups
evaluated, the same exactness and the same total, on random DAGs at buffers where groups
straddle the ISOA bounds, under the on-line variant's rules, inside polish windows and past
the beam limits; each result names the path that ran, and `_both` asserts it, so a compiled
search that stopped answering would fail here. A group that outgrows what the compiled loop
holds raises instead of falling back.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine import zoo
from engine.accelerator import Accelerator
from engine.fusion import bound, core, cost, fuse, online, optimus, sized
from engine.fusion.cost import Capacity, compute_schedule, model_of, record
from engine.fusion.model import FusionModel
from engine.fusion.sized import dram_bytes
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs
from tests import fusion_reference
from tests.test_fusion_search import random_graph


def _both(graph: Graph, buffer_bytes: int, online_rules: bool = False, **kwargs):
    """chain_search's result through the Python reference and through the compiled one, each on a fresh model
    (under the on-line variant's rules 1 and 3 when `online_rules`), each checked to have run on its path."""
    acc = Accelerator.preset("optimus").with_buffer(buffer_bytes)
    cap = Capacity.of(acc)
    base = model_of(graph, acc)
    results = []
    for search in (fusion_reference.chain_search, optimus.chain_search):
        model = FusionModel(graph, base.tp, base.word_bits)
        if online_rules:
            kwargs.update(whole_fanout=True, max_size=online.size_limit(model, cap))
        results.append(search(model, cap, **kwargs))
    assert [r.path for r in results] == ["python", "compiled"]
    return results


@pytest.mark.parametrize("seed", range(40))
def test_compiled_loop_matches_python_on_random_dags(seed):
    graph = random_graph(seed, 9 + seed % 4)
    for kb in (1, 4, 16, 64):
        python, compiled = _both(graph, kb * 1024)
        assert compiled == python, f"{kb} KB"
        python, compiled = _both(graph, kb * 1024, online_rules=True)
        assert compiled == python, f"{kb} KB, on-line rules"


@pytest.mark.parametrize("name,kb", [("googlenet", 128), ("googlenet", 512), ("resnet50", 256),
                                     ("squeezenet1_0", 64), ("mobilenet_v2", 128), ("densenet121", 256)])
def test_compiled_loop_matches_python_on_zoo(name, kb):
    graph = zoo.build(name, 4)
    python, compiled = _both(graph, kb * 1024)
    assert python.evaluated > 100  # the search really grew groups
    assert compiled == python
    python, compiled = _both(graph, kb * 1024, online_rules=True)
    assert compiled == python


def test_compiled_loop_matches_python_past_the_limits_and_in_windows():
    graph = zoo.build("googlenet", 1)
    python, compiled = _both(graph, 256 * 1024, limits=NARROW)
    assert not python.exact  # the limits were reached: a beam
    assert compiled == python
    model = FusionModel(graph, model_of(graph, Accelerator.preset("optimus")).tp, 16)
    start = model.mask_of(op.name for op in graph.ops[:20])
    within = model.mask_of(op.name for op in graph.ops[20:45])
    python, compiled = _both(graph, 256 * 1024, start=start, within=within)
    assert python.groups and compiled == python


def _fan(branches: int, chained: bool) -> Graph:
    """x -> `branches` 1x1 convs (each followed by a wider one when `chained`) -> one concat."""
    tensors, ops, ends = [Tensor("x", (1, 32, 8, 8))], [], []
    for i in range(branches):
        prev = "x"
        for name, c_out in ((f"a{i}", 32), (f"b{i}", 128))[:2 if chained else 1]:
            tensors += [Tensor(f"{name}.w", (c_out, 32, 1, 1), is_weight=True), Tensor(name, (1, c_out, 8, 8))]
            ops.append(Op(name, OpKind.CONV, (prev,), (name,), weights=(f"{name}.w",), kernel=(1, 1), stride=(1, 1),
                          padding=(0,) * 4, macs=conv_macs((1, c_out, 8, 8), 32, (1, 1), 1)))
            prev = name
        ends.append(prev)
    width = sum(128 if chained else 32 for _ in ends)
    tensors.append(Tensor("cat", (1, width, 8, 8)))
    ops.append(Op("cat", OpKind.CONCAT, tuple(ends), ("cat",)))
    return Graph.build("fan", ops, tensors, ("x",), ("cat",))


def test_large_groups_match_python():
    """A group of 80 ops (a chain of tiny pools that fits whole in 1 MB) and wide fans into a concat."""
    tensors, ops, prev = [Tensor("x", (1, 4, 4, 4))], [], "x"
    for i in range(80):
        ops.append(Op(f"p{i}", OpKind.POOL, (prev,), (f"p{i}",), kernel=(3, 3), stride=(1, 1), padding=(1,) * 4))
        tensors.append(Tensor(f"p{i}", (1, 4, 4, 4)))
        prev = f"p{i}"
    chain = Graph.build("pools", ops, tensors, ("x",), (prev,))
    python, compiled = _both(chain, 1 << 20)
    assert len(python.groups) == 1  # one group of all 80
    assert compiled == python
    for graph in (_fan(12, False), _fan(6, True)):
        python, compiled = _both(graph, 256 * 1024)
        assert compiled == python


def test_groups_too_wide_for_the_compiled_isoa_program_are_costed_in_python(monkeypatch):
    """70 chains into one concat keep 70 members that may be chunked open at once: more than the compiled ISOA
    program's 63 slots. Its cost says so (-1), and the plan's record is the Python cost model's. A search that
    meets such a group (the kernel says so) raises rather than answer on another path."""
    graph = _fan(70, True)
    acc = Accelerator.preset("optimus").with_buffer(8 << 20)
    cap = Capacity.of(acc)
    model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
    everything = (1 << model.n) - 1
    assert core.group_dram(*core.tables(model), *core.workspace(model, search=False), core.bitset(everything, model.n),
                            cap.fmap, cap.param, cap.shared, cap.per_band, model.batch, model.word_bits) == -1
    assert cost.records(model, [everything], cap) == [record(model, everything, cap, compute_schedule(model, everything, cap))]
    assert cost.records(model, [everything], cap)[0].path == "python"  # named, not silent
    assert optimus.chain_search(model, cap, limits=NARROW).path == "compiled"
    monkeypatch.setattr(core, "search", lambda *args: (np.zeros((0, 3), np.uint64), 1, True, 0, True))
    with pytest.raises(optimus.KernelLimitError, match="63 members"):
        optimus.chain_search(model, cap, limits=NARROW)


NARROW = optimus.Limits(states=3, groups=40, total=500, narrow_states=2, narrow_groups=10)


@pytest.mark.parametrize("name", ["vgg16", "alexnet", "googlenet", "mobilenet_v2", "shufflenet_v2_x1_0", "vit_b_16",
                                  "efficientnet_b0", "deeplabv3_resnet50", "r2plus1d_18", "transformer", "gpt2",
                                  "llama3_8b_prefill_seq128"])
def test_compiled_lone_op_costs_match_the_cost_model(name):
    """Every op alone, tiled or layer-wise, at buffers from one that barely runs it to one that holds it whole."""
    for batch in (1, 4):
        graph = zoo.build(name, batch)
        for kb, reloads in ((8, "tile"), (64, "tile"), (512, "band"), (4096, "tile")):
            acc = Accelerator.preset("optimus").with_buffer(kb * 1024)
            cap = Capacity.of(acc, reloads)
            model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
            everything = (1 << model.n) - 1
            compiled = core.lone_costs(*core.tables(model), *core.workspace(model, search=False), core.bitset(everything, model.n),
                                       cap.fmap, cap.param, cap.shared, cap.per_band, model.batch, model.word_bits)
            expected = [dram_bytes(model, 1 << i, cap) for i in range(model.n)]
            assert compiled.tolist() == [-1 if c is None else c for c in expected], f"{kb} KB batch {batch}"


@pytest.mark.parametrize("name", ["googlenet", "resnet50", "mobilenet_v2", "squeezenet1_0", "densenet121"])
def test_compiled_window_limit_matches_python(name):
    """The on-line variant's size limit (Alg. 3's table) from compiled windows equals the Python windows'."""
    graph = zoo.build(name, 4)
    for kb in (16, 64, 128, 512):
        acc = Accelerator.preset("optimus").with_buffer(kb * 1024)
        cap = Capacity.of(acc)
        model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
        compiled = core.window_limit(*core.tables(model), *core.workspace(model, search=False), cap.fmap, online.QUARTER)
        python = fusion_reference.window_limit(model, cap)
        assert compiled == python, f"{kb} KB"
        assert online.size_limit(model, cap) == python


@pytest.mark.parametrize("name", ["vgg16", "googlenet", "mobilenet_v2", "resnet50", "vit_b_16", "r2plus1d_18"])
def test_compiled_plan_records_match_the_cost_model(name):
    """The plan's GroupCost records, from compiled schedules, equal `cost.record` field by field, for every method."""
    for batch, kb, reloads in ((1, 32, "tile"), (4, 128, "tile"), (4, 512, "band")):
        graph = zoo.build(name, batch)
        acc = Accelerator.preset("optimus").with_buffer(kb * 1024)
        for method in ("none", "dnnvm", "efficient_s", "optimus"):
            plan = fuse(graph, acc, method=method, reloads=reloads, polish=False, bound=False)
            model, cap = model_of(graph, acc), Capacity.of(acc, reloads)
            for group, got in zip(plan.groups, plan.costs):
                assert got == sized.of(model, cap).record(model.mask_of(group)), f"{method} {kb} KB batch {batch}"
                assert got.path == "compiled"


def test_compiled_bound_windows_match_python():
    """The lower bound's window searches (groups need not be connected, each costs a bound) agree too."""
    for seed in range(12):
        python, compiled = _both(random_graph(seed, 10), 8 * 1024, bound_only=True)
        assert compiled == python
    graph = zoo.build("nasnet_a_mobile", 1)
    acc = Accelerator.preset("optimus")
    cap = Capacity.of(acc)
    model = model_of(graph, acc)
    for lo, hi in bound.windows(model)[:4]:
        window = bound.window_model(model, lo, hi)
        python = fusion_reference.chain_search(window, cap, limits=bound.EXACT, bound_only=True)
        compiled = optimus.chain_search(window, cap, limits=bound.EXACT, bound_only=True)
        assert (python.path, compiled.path) == ("python", "compiled")
        assert compiled == python


def test_the_kernel_cache_is_keyed_by_all_its_sources():
    """Numba checks only a module's own source before reusing its cache; the package keys the whole kernel's cache
    by a hash of every source of the package (`core._drop_stale_cache`)."""
    import hashlib
    from pathlib import Path

    here = Path(core.__file__).parent
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
    assert (here / "__pycache__" / "kernel-sources.sha256").read_text() == digest
