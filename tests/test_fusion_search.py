"""The fusion searches: optimus equals a brute-force minimum over every valid partition of small random DAGs."""

from __future__ import annotations

import random

import networkx as nx
import pytest

import engine
from engine.errors import EngineError, GraphError, UnknownNameError
from engine.fusion import METHODS, fuse, group_cost, oracle_bytes
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs


def random_graph(seed: int, n_ops: int) -> Graph:
    """A random CNN-like DAG: convs, depthwise convs, pools, adds and concats on small fmaps."""
    rng = random.Random(seed)
    batch = rng.choice([1, 2])
    shapes = {"x": (batch, rng.choice([8, 16, 32]), 8 * rng.choice([1, 2]), 8 * rng.choice([1, 2]))}
    tensors = [Tensor("x", shapes["x"])]
    ops = []
    for i in range(n_ops):
        name = f"op{i}"
        kind = rng.choice(["conv", "conv", "conv", "dwconv", "pool", "add", "add", "concat"])
        a = rng.choice(list(shapes))
        if kind == "add":
            twins = [t for t in shapes if t != a and shapes[t] == shapes[a]]
            if twins:
                b = rng.choice(twins)
                shapes[name] = shapes[a]
                ops.append(Op(name, OpKind.ELTWISE, (a, b), (name,)))
                tensors.append(Tensor(name, shapes[name]))
                continue
            kind = "conv"
        if kind == "concat":
            mates = [t for t in shapes if t != a and shapes[t][2:] == shapes[a][2:]]
            if mates:
                b = rng.choice(mates)
                n, c, h, w = shapes[a]
                shapes[name] = (n, c + shapes[b][1], h, w)
                ops.append(Op(name, OpKind.CONCAT, (a, b), (name,)))
                tensors.append(Tensor(name, shapes[name]))
                continue
            kind = "conv"
        n, c, h, w = shapes[a]
        if kind == "pool":
            k, s = (2, 2) if h >= 4 else (3, 1)
            p = 0 if s == 2 else 1
            out = (n, c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
            ops.append(Op(name, OpKind.POOL, (a,), (name,), kernel=(k, k), stride=(s, s), padding=(p,) * 4))
        else:
            k = rng.choice([1, 3])
            s = 2 if (h >= 8 and rng.random() < 0.2) else 1
            cout = c if kind == "dwconv" else rng.choice([8, 16, 32, 64])
            groups = c if kind == "dwconv" else 1
            out = (n, cout, (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1)
            wname = f"{name}.w"
            tensors.append(Tensor(wname, (cout, c // groups, k, k), is_weight=True))
            ops.append(Op(name, OpKind.DWCONV if groups > 1 else OpKind.CONV, (a,), (name,), weights=(wname,),
                          kernel=(k, k), stride=(s, s), padding=(k // 2,) * 4, groups=groups,
                          macs=conv_macs(out, c, (k, k), groups)))
        shapes[name] = out
        tensors.append(Tensor(name, out))
    read = {t for op in ops for t in op.inputs}
    outputs = tuple(op.outputs[0] for op in ops if op.outputs[0] not in read)
    return Graph.build(f"random{seed}", ops, tensors, ("x",), outputs, batch=batch)


def _valid(graph: Graph, groups: list[tuple[str, ...]]) -> bool:
    """Independent check of the fusion space: connected groups, acyclic contraction."""
    owner = {op: g for g, grp in enumerate(groups) for op in grp}
    for grp in groups:
        links = nx.Graph()
        links.add_nodes_from(grp)
        links.add_edges_from((a, b) for a, b in graph.dag.edges if a in grp and b in grp)
        readers: dict[str, list[str]] = {}
        for op in grp:
            for t in graph.op(op).inputs:
                readers.setdefault(t, []).append(op)
        for ops in readers.values():
            links.add_edges_from(zip(ops, ops[1:]))
        if not nx.is_connected(links):
            return False
    quotient = nx.DiGraph()
    quotient.add_nodes_from(range(len(groups)))
    quotient.add_edges_from((owner[a], owner[b]) for a, b in graph.dag.edges if owner[a] != owner[b])
    return nx.is_directed_acyclic_graph(quotient)


def brute_force(graph: Graph, acc, reloads: str = "tile", admit=lambda group: True) -> int | None:
    """Least total group_cost over every set partition of the ops that is valid (None if none is).

    `admit(group)` restricts the groups further (the on-line variant's rules)."""
    names = [op.name for op in graph.ops]
    cost: dict[frozenset, int | None] = {}

    def of(group: frozenset) -> int | None:
        if group not in cost:
            try:
                found = group_cost(graph, group, acc, reloads=reloads)
            except GraphError:
                found = None  # not convex: cannot run as one group
            cost[group] = None if found is None else found.dram_bytes
        return cost[group]

    best = None

    def walk(rest: list[str], groups: list[tuple[str, ...]], total: int) -> None:
        nonlocal best
        if not rest:
            if (best is None or total < best) and _valid(graph, groups):
                best = total
            return
        head, tail = rest[0], rest[1:]
        for mask in range(1 << len(tail)):
            group = frozenset([head] + [t for b, t in enumerate(tail) if mask >> b & 1])
            c = of(group) if admit(group) else None
            if c is not None:
                walk([t for t in tail if t not in group], groups + [tuple(group)], total + c)

    walk(names, [], 0)
    return best


BUFFERS = (2048, 3072, 4096, 6144, 8192, 16384)
CASES = [(seed, 6 + seed % 5, BUFFERS[seed % len(BUFFERS)]) for seed in range(48)]


@pytest.mark.parametrize("seed,n_ops,buffer", CASES[::3])
def test_online_equals_brute_force_under_its_rules(seed, n_ops, buffer):
    # Sec. 6: an op fused with one consumer is fused with all of them, and a group holds at most
    # size_limit ops; the on-line search must find the least total over partitions obeying both
    from engine.fusion.cost import Capacity, model_of
    from engine.fusion.online import size_limit

    graph = random_graph(seed, n_ops)
    acc = engine.Accelerator.preset("optimus").with_buffer(buffer).with_pe_array(4, 4)
    limit = size_limit(model_of(graph, acc), Capacity.of(acc))
    consumers = {op.name: {c.name for c in graph.ops if set(op.outputs) & set(c.inputs)} for op in graph.ops}

    def obeys(group: frozenset) -> bool:
        return len(group) <= limit and all(consumers[op] <= group for op in group if consumers[op] & group)

    expect = brute_force(graph, acc, admit=obeys)
    if expect is None:
        return
    plan = fuse(graph, acc, method="online")
    assert plan.dram_bytes == expect
    assert all(obeys(frozenset(grp)) for grp in plan.groups)


def solved_case(seed: int, n_ops: int, buffer: int):
    """A random DAG, the small accelerator the brute-force tests use, and the brute-force optimum (None: no plan)."""
    graph = random_graph(seed, n_ops)
    acc = engine.Accelerator.preset("optimus").with_buffer(buffer).with_pe_array(4, 4)
    return graph, acc, brute_force(graph, acc)


@pytest.mark.parametrize("seed,n_ops,buffer", CASES)
def test_optimus_equals_brute_force(seed, n_ops, buffer):
    graph = random_graph(seed, n_ops)
    acc = engine.Accelerator.preset("optimus").with_buffer(buffer).with_pe_array(4, 4)
    expect = brute_force(graph, acc)
    if expect is None:
        with pytest.raises(EngineError):
            fuse(graph, acc)
        return
    plan = fuse(graph, acc, method="optimus")
    assert plan.dram_bytes == expect
    assert plan.status == "optimal"


@pytest.mark.parametrize("seed,n_ops,buffer", CASES[::4])
def test_optimus_equals_brute_force_under_printed_eq3(seed, n_ops, buffer):
    graph = random_graph(seed, n_ops)
    acc = engine.Accelerator.preset("optimus").with_buffer(buffer).with_pe_array(4, 4)
    expect = brute_force(graph, acc, reloads="band")
    if expect is not None:
        plan = fuse(graph, acc, method="optimus", reloads="band")
        assert plan.dram_bytes == expect == sum(
            group_cost(graph, grp, acc, reloads="band").dram_bytes for grp in plan.groups)


@pytest.mark.parametrize("seed", range(0, 36, 5))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_plan_is_valid_and_costed_by_group_cost(seed, method):
    graph = random_graph(seed, 9)
    acc = engine.Accelerator.preset("optimus").with_buffer(8192)
    plan = fuse(graph, acc, method=method)
    assert sorted(op for grp in plan.groups for op in grp) == sorted(op.name for op in graph.ops)
    assert _valid(graph, list(plan.groups))
    done: set[str] = set()
    for grp in plan.groups:  # groups come in an order that respects every dependency
        for op in grp:
            assert all(p in done or p in grp for p in graph.predecessors(op))
        done.update(grp)
    assert plan.dram_bytes == sum(group_cost(graph, grp, acc).dram_bytes for grp in plan.groups)
    assert plan.dram_bytes == plan.fmap_in_bytes + plan.fmap_out_bytes + plan.param_bytes
    assert plan.dram_bytes >= oracle_bytes(graph, acc)
    assert plan.dram_bytes >= fuse(graph, acc, method="optimus").dram_bytes


def _chain() -> Graph:
    """x(8 ch) -> a: 1x1 to 64 ch -> b: 1x1 to 8 ch -> c: 3x3 to 16 ch, on 16x16 fmaps."""
    specs = (("a", "x", 8, 64, 1), ("b", "a", 64, 8, 1), ("c", "b", 8, 16, 3))
    ops = [Op(n, OpKind.CONV, (src,), (n,), weights=(f"{n}.w",), kernel=(k, k), stride=(1, 1), padding=(k // 2,) * 4,
              macs=conv_macs((1, cout, 16, 16), cin, (k, k))) for n, src, cin, cout, k in specs]
    tensors = [Tensor("x", (1, 8, 16, 16))] + [Tensor(n, (1, cout, 16, 16)) for n, _, _, cout, _ in specs]
    tensors += [Tensor(f"{n}.w", (cout, cin, k, k), is_weight=True) for n, _, cin, cout, k in specs]
    return Graph.build("chain", ops, tensors, ("x",), ("c",))


def test_optimum_needs_a_group_that_does_not_pay_alone():
    # Alg. 1 keeps a candidate group only when fusing pays for the sub-problem; here {b, c}
    # does not pay on its own (its input tile is 64 channels deep, so b's and c's weights are
    # reloaded every row), yet {a, b, c} is the optimum (the input is 8 channels deep and the
    # weights stay on chip). A search built from profitable sub-groups stops at {a, b} + {c}.
    graph, acc = _chain(), engine.Accelerator.preset("optimus").with_buffer(8192)
    groups = (("a", "b", "c"), ("b", "c"), ("b",), ("c",), ("a", "b"))
    cost = {grp: group_cost(graph, grp, acc).dram_bytes for grp in groups}
    assert cost[("b", "c")] == 94208 > cost[("b",)] + cost[("c",)] == 52480
    assert cost[("a", "b")] + cost[("c",)] == 24832
    plan = fuse(graph, acc)
    assert plan.groups == (("a", "b", "c"),) and plan.dram_bytes == cost[("a", "b", "c")] == 16640


def test_ops_that_only_share_an_input_fuse():
    # two convs reading one tensor and nothing else in common: fused, the input is read once
    x = Tensor("x", (1, 16, 16, 16))
    ops = [Op(n, OpKind.CONV, ("x",), (n,), weights=(f"{n}.w",), kernel=(1, 1), stride=(1, 1), padding=(0,) * 4)
           for n in ("p", "q")]
    tensors = [x, Tensor("p", (1, 8, 16, 16)), Tensor("q", (1, 8, 16, 16)),
               Tensor("p.w", (8, 16, 1, 1), is_weight=True), Tensor("q.w", (8, 16, 1, 1), is_weight=True)]
    graph = Graph.build("siblings", ops, tensors, ("x",), ("p", "q"))
    acc = engine.Accelerator.preset("optimus").with_buffer(16384)
    plan = fuse(graph, acc)
    assert plan.groups == (("p", "q"),)
    assert plan.dram_bytes == oracle_bytes(graph, acc) == 8192 + 2 * 4096 + 2 * 256


def test_unknown_method_lists_valid_names():
    graph = random_graph(1, 6)
    with pytest.raises(UnknownNameError, match="optimus"):
        fuse(graph, engine.Accelerator.preset("optimus"), method="greedy")


def test_buffer_too_small_names_the_op():
    graph = random_graph(2, 6)
    with pytest.raises(EngineError, match="needs at least"):
        fuse(graph, engine.Accelerator.preset("optimus").with_buffer(16))


@pytest.mark.parametrize("seed", range(0, 48, 7))
def test_grown_rows_equal_the_rows_propagated_from_scratch(seed):
    # the reference search's growth (as the compiled one's) keeps each group's finest rows; they must equal the
    # rows FusionModel propagates from scratch on every group grown
    from engine.fusion.cost import model_of
    from engine.fusion.model import FusionModel
    from tests.fusion_reference import Partial, extend, finest_rows

    graph = random_graph(seed, 10)
    acc = engine.Accelerator.preset("optimus").with_pe_array(4, 4)
    model = model_of(graph, acc)
    checked = 0
    for first in range(model.n):
        part = Partial()
        for x in range(first, model.n):
            if not model.covered[x] or not (x == first or model.pred[x] & part.mask):
                continue
            part = extend(model, part, x)
            fresh = FusionModel(graph, model.tp, model.word_bits)
            assert finest_rows(model, part) == fresh.rows(part.mask, 0) == model.rows(part.mask, 0)
            checked += 1
    assert checked > model.n


def test_grown_rows_equal_propagated_rows_through_dense_blocks():
    # DenseNet's concats make halos reach an op by several paths of different lengths; a grown group
    # must end with the same rows as propagating from scratch (an earlier bug let a stale, smaller
    # demand overwrite a larger one, so a group that did not fit was admitted: densenet121, 362 KB)
    from engine.fusion.cost import model_of
    from engine.fusion.model import FusionModel
    from tests.fusion_reference import Partial, extend

    graph = engine.load_network("densenet121", batch=1)
    model = model_of(graph, engine.Accelerator.preset("optimus").with_buffer(362 * 1024))
    start = model.index["features.denseblock3.denselayer20.cat"]
    part = Partial()
    for x in range(start, start + 40):
        part = extend(model, part, x)
        assert FusionModel(graph, model.tp, model.word_bits).rows(part.mask, 0)[0] == part.rows, model.names[x]
    acc = engine.Accelerator.preset("optimus").with_buffer(362 * 1024)
    plan = fuse(graph, acc)
    assert plan.dram_bytes == sum(group_cost(graph, g, acc).dram_bytes for g in plan.groups)
