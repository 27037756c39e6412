"""CPU/accelerator partitioning: convex, connected, maximal parts; single-in/single-out after pruning."""

import importlib
import random

import networkx as nx
import pytest

import engine
from engine import Graph, Op, OpKind, Tensor
from engine.errors import EngineError, UnknownNameError
from engine.partition import ACCELERATOR, CPU


# ---- graphs ---------------------------------------------------------------------------
def random_dag(seed: int, n: int, max_inputs: int = 3, n_inputs: int = 1) -> Graph:
    """A random DAG of `n` ops on (1, 8) activations; op i reads up to `max_inputs` earlier tensors."""
    rng = random.Random(seed)
    tensors = [Tensor(f"in{k}", (1, 8)) for k in range(n_inputs)]
    avail = [t.name for t in tensors]
    ops = []
    kinds = [OpKind.CONV, OpKind.POOL, OpKind.ELTWISE, OpKind.CONCAT, OpKind.SOFTMAX]
    for i in range(n):
        ins = tuple(dict.fromkeys(rng.sample(avail[-6:], rng.randint(1, min(max_inputs, len(avail[-6:]))))))
        out = f"t{i}"
        tensors.append(Tensor(out, (1, 8)))
        ops.append(Op(f"op{i}", rng.choice(kinds), ins, (out,)))
        avail.append(out)
    read = {t for op in ops for t in op.inputs}
    outputs = [op.outputs[0] for op in ops if op.outputs[0] not in read]
    return Graph.build(f"random{seed}", ops, tensors, [t.name for t in tensors[:n_inputs]], outputs)


def inception_block(cpu_branch: int | None = None) -> Graph:
    """stem -> 4 branches (1x1 | 1x1,3x3 | 1x1,3x3,3x3 | pool,1x1) -> concat -> head (the DLA paper's Fig. 5 block)."""
    shape = (1, 16, 8, 8)
    tensors = [Tensor("x", shape)]
    ops = []

    def add(name, kind, ins):
        tensors.append(Tensor(name, shape))
        ops.append(Op(name, kind, tuple(ins), (name,)))
        return name

    stem = add("stem", OpKind.CONV, ["x"])
    ends = []
    for b, kinds in enumerate([[OpKind.CONV], [OpKind.CONV] * 2, [OpKind.CONV] * 3, [OpKind.POOL, OpKind.CONV]]):
        prev = stem
        for k, kind in enumerate(kinds):
            prev = add(f"b{b}_{k}", kind, [prev])
        ends.append(prev)
    cat = add("concat", OpKind.CONCAT, ends)
    add("head", OpKind.CONV, [cat])
    return Graph.build("inception_block", ops, tensors, ["x"], ["head"])


# ---- independent checks ---------------------------------------------------------------
def is_convex(g: Graph, ops: set[str]) -> bool:
    below = set().union(*(nx.descendants(g.dag, v) for v in ops)) - ops
    above = set().union(*(nx.ancestors(g.dag, v) for v in ops)) - ops
    return not (below & above)


def contracted_is_acyclic(g: Graph, groups) -> bool:
    owner = {op: i for i, grp in enumerate(groups) for op in grp}
    q = nx.DiGraph()
    q.add_nodes_from(range(len(groups)))
    q.add_edges_from((owner[a], owner[b]) for a, b in g.dag.edges if owner[a] != owner[b])
    return nx.is_directed_acyclic_graph(q)


def input_ops(g: Graph, ops: set[str]) -> set[str]:
    return {v for v in ops if any(g.producer(t) not in ops for t in g.op(v).inputs)}


def output_ops(g: Graph, ops: set[str]) -> set[str]:
    return {v for v in ops for t in g.op(v).outputs
            if t in g.outputs or any(c not in ops for c in g.consumers(t))}


def check_partition(g: Graph, runs_on_acc, result) -> None:
    """Every invariant the issue asks for, recomputed without the engine's helpers."""
    on_acc = {op.name: runs_on_acc(op) for op in g.ops}
    for level in (result.maximal, result.parts):
        names = [op for p in level for op in p.ops]
        assert sorted(names) == sorted(op.name for op in g.ops)  # every op in exactly one part
        assert contracted_is_acyclic(g, [set(p.ops) for p in level])
        for p in level:
            ops = set(p.ops)
            assert all(on_acc[v] == (p.device == ACCELERATOR) for v in ops)
            assert nx.is_weakly_connected(g.dag.subgraph(ops))
            assert is_convex(g, ops)
            assert set(p.input_ops) == input_ops(g, ops)
            assert set(p.output_ops) == output_ops(g, ops)
        position = {v: i for i, p in enumerate(level) for v in p.ops}  # parts listed in an execution order
        assert all(position[a] <= position[b] for a, b in g.dag.edges)
    # maximality: no two regions of one device joined by an edge can be merged into one convex region
    regions = [set(p.ops) for p in result.maximal]
    owner = {v: i for i, r in enumerate(regions) for v in r}
    for a, b in g.dag.edges:
        i, j = owner[a], owner[b]
        if i != j and result.maximal[i].device == result.maximal[j].device:
            merged = [r for k, r in enumerate(regions) if k not in (i, j)] + [regions[i] | regions[j]]
            assert not (is_convex(g, regions[i] | regions[j]) and contracted_is_acyclic(g, merged))
    # post-pruning: accelerator parts have a single input op and a single output op, inside their region
    for p in result.accelerator_parts:
        assert len(p.input_ops) <= 1 and len(p.output_ops) <= 1
        assert set(p.ops) <= set(result.maximal[p.region].ops)


# ---- tests --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_random_dags(seed):
    rng = random.Random(1000 + seed)
    g = random_dag(seed, n=rng.randint(3, 40), max_inputs=rng.choice([1, 2, 3]), n_inputs=rng.choice([1, 2]))
    supported = set(rng.sample(sorted(OpKind), rng.randint(1, 5)))
    check_partition(g, lambda op: op.kind in supported, engine.partition(g, supported))


def test_all_supported_block_is_one_part():
    g = inception_block()
    result = engine.partition(g, set(OpKind))
    assert len(result.maximal) == len(result.parts) == 1
    part = result.parts[0]
    assert part.input_ops == ("stem",) and part.output_ops == ("head",)
    assert part.crossing_bytes == 2 * 16 * 8 * 8 * 2  # input in, output out, 16-bit words


def test_cpu_op_on_a_branch_splits_the_block():
    """The DLA paper's Fig. 5 experiment: one branch op on the CPU; the rest prunes into single-in/out parts."""
    cpu_op = "b2_1"
    g = inception_block()
    result = engine.partition(g, lambda op: op.name != cpu_op, word_bits=8)
    check_partition(g, lambda op: op.name != cpu_op, result)
    acc = [set(p.ops) for p in result.maximal if p.device == ACCELERATOR]
    # what precedes the CPU op and what follows it cannot share a convex region
    assert not any({"b2_0", "b2_2"} <= r for r in acc)
    assert [p.ops for p in result.cpu_parts] == [(cpu_op,)]
    pruned = {frozenset(p.ops) for p in result.accelerator_parts}
    assert all(len(p.input_ops) == 1 and len(p.output_ops) == 1 for p in result.accelerator_parts)
    assert frozenset({"b2_2", "concat", "head"}) - set().union(*pruned) == set()
    # the stem feeds four consumers in other parts; it ends its part
    stem_part = next(p for p in result.parts if "stem" in p.ops)
    assert stem_part.output_ops == ("stem",)
    act = 16 * 8 * 8  # bytes of one 8-bit activation
    assert result.crossing_bytes == 4 * act  # x in, b2_0 out, b2_1 back, head out


def test_unsupported_kinds_only_on_cpu():
    g = inception_block()
    result = engine.partition(g, {"conv", "concat"})
    assert [p.ops for p in result.cpu_parts] == [("b3_0",)]
    check_partition(g, lambda op: op.kind in (OpKind.CONV, OpKind.CONCAT), result)


def test_nothing_supported_is_one_cpu_part():
    g = inception_block()
    result = engine.partition(g, set())
    assert [p.device for p in result.parts] == [CPU]
    assert result.crossing_bytes == 0


def test_bad_supported_raises():
    g = inception_block()
    with pytest.raises(UnknownNameError, match="conv"):
        engine.partition(g, {"convolution"})
    with pytest.raises(EngineError):
        engine.partition(g, "conv")


def test_part_of():
    g = inception_block()
    result = engine.partition(g, lambda op: op.name != "b1_0")
    assert result.parts[result.part_of("b1_0")].device == CPU
    with pytest.raises(EngineError, match="nope"):
        result.part_of("nope")


@pytest.mark.parametrize("model", ["light_inception_v1.onnx", "light_inception_v2.onnx", "light_resnet50.onnx",
                                   "light_squeezenet.onnx", "light_densenet121.onnx"])
@pytest.mark.parametrize("seed", range(3))
def test_real_networks_with_random_cpu_ops(model, seed):
    g = engine.load_network(model)
    rng = random.Random(seed)
    on_cpu = set(rng.sample([op.name for op in g.ops], max(1, len(g.ops) // 15)))
    result = engine.partition(g, lambda op: op.name not in on_cpu)
    check_partition(g, lambda op: op.name not in on_cpu, result)
    assert len(result.cpu_parts) <= len(on_cpu)


@pytest.mark.parametrize("name", ["inception_v3", "googlenet", "resnet50", "squeezenet1_0"])
def test_zoo_networks_by_kind(name):
    g = engine.load_network(name)
    supported = {OpKind.CONV, OpKind.POOL, OpKind.CONCAT, OpKind.ELTWISE}
    result = engine.partition(g, supported)
    check_partition(g, lambda op: op.kind in supported, result)


# ---- size: a wide Concat ------------------------------------------------------------
def wide_concat(readers: int) -> Graph:
    """A CPU op (Softmax) whose output `readers` Relus read, joined by one Concat: readers + 2 ops."""
    tensors = [Tensor("x", (1, 8)), Tensor("s", (1, 8))] + [Tensor(f"r{k}", (1, 8)) for k in range(readers)]
    tensors.append(Tensor("cat", (1, 8 * readers)))
    ops = [Op("softmax", OpKind.SOFTMAX, ("x",), ("s",))]
    ops += [Op(f"relu{k}", OpKind.ELTWISE, ("s",), (f"r{k}",)) for k in range(readers)]
    ops.append(Op("concat", OpKind.CONCAT, tuple(f"r{k}" for k in range(readers)), ("cat",)))
    return Graph.build(f"wide_concat_{readers}", ops, tensors, ["x"], ["cat"])


def test_a_wide_concats_lone_relus_are_parts_without_a_contraction_each(monkeypatch):
    """Each Relu sits between two CPU ops, so it is a one-op accelerator part whose input and output cross;
    no region grows past one op, so the contraction is built once, to find that no two regions merge (it was
    built once per Relu as well: quadratic)."""
    partition_module = importlib.import_module("engine.partition")  # `engine.partition` is the function
    built = []
    real = partition_module._Quotient
    monkeypatch.setattr(partition_module, "_Quotient", lambda *a: built.append(1) or real(*a))
    got = engine.partition(wide_concat(2000), {"eltwise"}, word_bits=16)
    acc = got.accelerator_parts
    assert len(got.parts) == 2002 and len(acc) == 2000 and len(built) == 1
    assert all(p.ops == p.input_ops == p.output_ops and p.crossing_bytes == 2 * 8 * 2 for p in acc)
    concat = got.parts[got.part_of("concat")]
    assert concat.input_ops == ("concat",) and len(concat.inputs) == 2000
    # x and the concat's output start and end on the host; s, read by every Relu, crosses once, and so does each r_k
    assert got.crossing_bytes == (1 + 2000) * 8 * 2


def alternating_chain(n: int) -> Graph:
    """A chain of `n` ops: two accelerator ops (Relu) then one CPU op (Softmax), again and again."""
    tensors, ops, x = [Tensor("x", (1, 8))], [], "x"
    for k in range(n):
        tensors.append(Tensor(f"t{k}", (1, 8)))
        ops.append(Op(f"o{k}", OpKind.SOFTMAX if k % 3 == 2 else OpKind.ELTWISE, (x,), (f"t{k}",)))
        x = f"t{k}"
    return Graph.build(f"alternating_{n}", ops, tensors, ["x"], [x])


def test_regions_alternating_with_the_cpus_are_parts_without_a_contraction_each(monkeypatch):
    """Each pair of Relus is a region that joins no paths (entered at its first op, which reaches the other) and
    already one part, so neither the growth nor the post-prune builds the contraction for it (once per region
    before: 29 CPU s at 3,000 ops)."""
    partition_module = importlib.import_module("engine.partition")
    built = []
    real = partition_module._Quotient
    monkeypatch.setattr(partition_module, "_Quotient", lambda *a: built.append(1) or real(*a))
    got = engine.partition(alternating_chain(3000), {"eltwise"})
    assert [p.ops for p in got.parts[:4]] == [("o0", "o1"), ("o2",), ("o3", "o4"), ("o5",)]
    assert len(got.parts) == 2000 and len(got.accelerator_parts) == 1000 and len(built) == 2
    # x (from the host) and each pair's input and output cross, but the last Softmax's output (it ends on the host)
    assert got.crossing_bytes == (1 + 2 * 1000 - 1) * 8 * 2


def test_a_chain_hanging_off_a_fork_is_pruned_below_its_first_op():
    """conv's output is read by a Relu, by r0 and by a0 (all supported): conv alone (its output leaves to three
    readers), the Relu alone, r0 alone (a0 reads conv's output too, so r0 does not dominate it), then a0 and
    everything after it, which a0 dominates, whole (2,000 tests of the part ending at each op before: quadratic)."""
    tensors, ops = [Tensor("x", (1, 8)), Tensor("c", (1, 8)), Tensor("r", (1, 8))], []
    ops += [Op("conv", OpKind.CONV, ("x",), ("c",)), Op("relu", OpKind.ELTWISE, ("c",), ("r",))]
    x = "c"
    for k in range(1000):
        tensors += [Tensor(f"r{k}", (1, 8)), Tensor(f"a{k}", (1, 8))]
        ops += [Op(f"r{k}", OpKind.ELTWISE, (x,), (f"r{k}",)), Op(f"a{k}", OpKind.ELTWISE, (x, f"r{k}"), (f"a{k}",))]
        x = f"a{k}"
    got = engine.partition(Graph.build("fork", ops, tensors, ["x"], ["r", x]), lambda op: True)
    assert [p.ops[0] for p in got.parts] == ["conv", "relu", "r0", "a0"] and len(got.parts[3].ops) == 1999


def residual_chain(blocks: int) -> Graph:
    """`blocks` x (Conv, then an Add of the Conv's input and output): 2 x blocks ops, every one supported."""
    tensors, ops, x = [Tensor("x", (1, 8))], [], "x"
    for k in range(blocks):
        tensors += [Tensor(f"c{k}", (1, 8)), Tensor(f"a{k}", (1, 8))]
        ops += [Op(f"conv{k}", OpKind.CONV, (x,), (f"c{k}",)), Op(f"add{k}", OpKind.ELTWISE, (x, f"c{k}"), (f"a{k}",))]
        x = f"a{k}"
    return Graph.build(f"residual_{blocks}", ops, tensors, ["x"], [x])


def test_a_residual_chain_is_split_by_searches_linear_in_its_ops(monkeypatch):
    """add0 reads the network input, so conv0 alone is the first part and add0 dominates the rest, taken whole.
    The convexity tests walk the contraction within rank bounds and store nothing per op: 4,000 ops are walked
    through under 3 x 4,000 times in all (the bitsets of every op's descendants and ancestors before, n bits each:
    2.29 GB at 100,000 ops)."""
    partition_module = importlib.import_module("engine.partition")
    walked = []
    real = partition_module._walk
    monkeypatch.setattr(partition_module, "_walk", lambda *a: (walked.append(w) or w for w in real(*a)))
    got = engine.partition(residual_chain(2000), lambda op: True)
    assert [len(p.ops) for p in got.parts] == [1, 3999] and got.parts[0].ops == ("conv0",)
    assert got.parts[1].input_ops == ("add0",) and got.parts[1].output_ops == ("add1999",)
    assert len(walked) < 3 * 4000


def a_chain_beside_a_branch(blocks: int) -> Graph:
    """conv e, read by a two-op branch (an output) and by a residual chain of `blocks` (Relu, Add) blocks (another
    output), every op supported: the fuzz's CNN with a residual chain hung off its first op, small."""
    tensors = [Tensor(t, (1, 8)) for t in ("x", "e", "b0", "b1")]
    ops = [Op("e", OpKind.CONV, ("x",), ("e",)), Op("b0", OpKind.CONV, ("e",), ("b0",)),
           Op("b1", OpKind.CONV, ("b0",), ("b1",))]
    last = "e"
    for k in range(blocks):
        tensors += [Tensor(f"r{k}", (1, 8)), Tensor(f"a{k}", (1, 8))]
        ops += [Op(f"r{k}", OpKind.ELTWISE, (last,), (f"r{k}",)),
                Op(f"a{k}", OpKind.ELTWISE, (last, f"r{k}"), (f"a{k}",))]
        last = f"a{k}"
    return Graph.build(f"chain_beside_branch_{blocks}", ops, tensors, ["x"], ["b1", last])


def test_a_chain_beside_a_branch_is_split_without_walking_each_ops_ancestors(monkeypatch):
    """Found by the fuzz (seed 5): 12,000 residual blocks hung off a CNN's first op took partition 88 CPU s. Each op
    added to the region searched forward through the rest of the chain, and then each op of the chain was walked
    back to e to learn that e's other reader is not above it. 4,003 ops are now split with under 3 x 4,003 nodes
    walked (8,002,000 before)."""
    partition_module = importlib.import_module("engine.partition")
    walked = []
    real = partition_module._walk
    monkeypatch.setattr(partition_module, "_walk", lambda *a: (walked.append(w) or w for w in real(*a)))
    g = a_chain_beside_a_branch(2000)
    got = engine.partition(g, lambda op: True)
    assert [p.ops for p in got.parts[:3]] == [("e",), ("b0", "b1"), ("r0",)] and len(got.parts[3].ops) == 3999
    assert got.parts[3].input_ops == ("a0",) and got.parts[3].output_ops == ("a1999",)
    assert len(walked) < 3 * len(g.ops)
