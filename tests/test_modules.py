"""Module-based on-chip reuse: detection, Alg. 3-6 on hand-computed cases, and the paper's Table 1."""

import importlib

import pytest

import engine
from engine import Graph, Op, OpKind, Tensor
from engine.graph import conv_macs
from engine.module_reuse import NpuModel
from engine.module_reuse.detect import detect

KB = 1024

# Table 1 of the paper (Inception-V3, 299x299, 8-bit, Exynos NPU): KB and access counts.
# module: (W, naive FM, proposed FM, naive reads, naive writes, proposed reads, proposed writes)
TABLE1 = {
    "Mixed_5b": (249, 2308.5, 0, 8, 8, 0, 0),
    "Mixed_5c": (270, 2835, 0, 8, 8, 0, 0),
    "Mixed_5d": (277.5, 3078, 0, 8, 8, 0, 0),
    "Mixed_6a": (1125, 1798.5, 300, 5, 5, 0, 3),
    "Mixed_6b": (1264, 2700, 300, 11, 11, 1, 0),
    "Mixed_6c": (1648, 2850, 0, 11, 11, 0, 0),
    "Mixed_6d": (1648, 2850, 0, 11, 11, 0, 0),
    "Mixed_6e": (2088, 3000, 0, 11, 11, 0, 0),
    "Mixed_7a": (1656, 1580, 0, 7, 7, 0, 0),
    "Mixed_7b": (4920, 808, 0, 10, 10, 0, 0),
    "Mixed_7c": (5928, 1096, 0, 10, 10, 0, 0),
}


# ---- a small Inception-style module, sizes chosen to be worked out by hand ---------------------
def small_inception() -> Graph:
    """x -> stem -> [1x1 | 1x1, 3x3 | pool, 1x1] -> concat -> head, on 16-channel 8x8 maps."""
    tensors, ops = [Tensor("x", (1, 16, 8, 8))], []

    def conv(name, src, cin, cout, k):
        tensors.extend([Tensor(f"{name}.w", (cout, cin, k, k), is_weight=True), Tensor(name, (1, cout, 8, 8))])
        ops.append(Op(name, OpKind.CONV, (src,), (name,), (f"{name}.w",), kernel=(k, k), stride=(1, 1),
                      padding=(k // 2,) * 4, dilation=(1, 1), macs=conv_macs((1, cout, 8, 8), cin, (k, k)),
                      source_type="Conv"))
        return name

    stem = conv("stem", "x", 16, 16, 1)
    b0 = conv("b0", stem, 16, 8, 1)
    b1 = conv("b1_3x3", conv("b1_1x1", stem, 16, 8, 1), 8, 8, 3)
    tensors.append(Tensor("pool", (1, 16, 8, 8)))
    ops.append(Op("pool", OpKind.POOL, (stem,), ("pool",), kernel=(3, 3), stride=(1, 1), padding=(1,) * 4,
                  dilation=(1, 1), source_type="AveragePool"))
    b2 = conv("b2", "pool", 16, 8, 1)
    tensors.append(Tensor("cat", (1, 24, 8, 8)))
    ops.append(Op("cat", OpKind.CONCAT, (b0, b1, b2), ("cat",), source_type="Concat"))
    conv("head", "cat", 24, 16, 1)
    return Graph.build("small_inception", ops, tensors, ["x"], ["head"])


def small_npu(mem):
    return NpuModel(mem_bytes=mem, word_bits=8, patch=4, chunks=4, parallel_ofm=4, weight_buffers=2)


ACC = engine.Accelerator.preset("exynos-npu")


def test_small_module_is_detected_with_its_branches():
    g = small_inception()
    (s,), cut = detect(g)
    assert (s.start, s.merge, s.kind, s.mifm) == ("stem", "cat", "concat", ("stem",))
    assert s.branches == (("b0",), ("b1_1x1", "b1_3x3"), ("pool", "b2"))
    assert not cut


# By hand (8-bit, no patch padding on 8x8, chunks of 4 channels, 4 OFM channels at once, weights
# double-buffered): MIFM 1024 B; layer needs b0 896, b1 896/1600, b2 1280/1664, so Alg. 3 runs
# b2, b1, b0. Processing I needs 3136 B (b1_3x3: MIFM 1024 + held b2 output 512 + 1600);
# processing II writes the three branch outputs (512 B each) and needs 2432 B (b2: 1024 + 1408).
@pytest.mark.parametrize("mem, processing, reads, writes, fm_bytes", [
    (3136, "I", 0, 0, 0),
    (3135, "II", 0, 3, 1536),
    (2432, "II", 0, 3, 1536),
    (2431, "naive", 5, 5, 7680),
])
def test_processing_choice_by_hand(mem, processing, reads, writes, fm_bytes):
    plan = engine.plan_modules(small_inception(), ACC, npu=small_npu(mem))
    (m,) = plan.modules
    assert m.order == (2, 1, 0)
    assert m.processing == processing
    assert (m.proposed.reads, m.proposed.writes, m.proposed.bytes) == (reads, writes, fm_bytes)
    assert (m.naive.reads, m.naive.writes, m.naive.bytes) == (5, 5, 7680)
    assert m.forwards_output == (processing == "I")
    if processing != "naive":
        assert [s.op for s in m.steps] == ["pool", "b2", "b1_1x1", "b1_3x3", "b0"]
        check_steps(m, mem)


def check_steps(m, mem):
    """Alg. 6's flags and the drawn layout agree with the sizes."""
    for s in m.steps:
        assert not s.fwd or s.req <= s.avail
        if s.req <= s.avail:
            spans = sorted((r.offset, r.offset + r.size) for r in s.regions)
            assert all(0 <= a < b <= mem for a, b in spans)
            assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # no overlap
    if m.processing == "II":
        ends = {branch[-1] for branch in m.branches if branch}
        assert all(not s.fwd for s in m.steps if s.op in ends)


def test_mifm_from_network_input_is_read():
    g = small_inception()
    ops = [op for op in g.ops if op.name != "stem"]
    ops = [Op(o.name, o.kind, tuple("x" if t == "stem" else t for t in o.inputs), o.outputs, o.weights, o.kernel,
              o.stride, o.padding, o.dilation, o.groups, o.macs, o.source_type) for o in ops]
    g2 = Graph.build("from_input", ops, [t for t in g.tensor_list if not t.name.startswith("stem")],
                     ["x"], ["head"])
    (m,) = engine.plan_modules(g2, ACC, npu=small_npu(4096)).modules
    assert m.start is None and not m.mifm_resident
    assert (m.proposed.reads, m.proposed.read_bytes) == (1, 1024)


def test_long_skip_is_cut_and_short_one_is_a_module():
    """An add fed by a 20-layer chain and by its start: the skip is long (no module); a 3-layer one is short."""
    def chain_with_skip(n):
        tensors, ops, prev = [Tensor("x", (1, 8, 4, 4))], [], "x"
        for i in range(n):
            tensors.append(Tensor(f"c{i}", (1, 8, 4, 4)))
            ops.append(Op(f"c{i}", OpKind.ELTWISE, (prev,), (f"c{i}",), source_type="Relu"))
            prev = f"c{i}"
        tensors.append(Tensor("add", (1, 8, 4, 4)))
        ops.append(Op("add", OpKind.ELTWISE, ("c0", prev), ("add",), source_type="Add"))
        return Graph.build("skip", ops, tensors, ["x"], ["add"])

    long_plan = engine.plan_modules(chain_with_skip(21), ACC)
    assert long_plan.modules == () and long_plan.long_skips == (("c0", "add"),)
    (m,) = engine.plan_modules(chain_with_skip(4), ACC).modules
    assert m.kind == "add" and m.start == "c0" and m.branches == (("c1", "c2", "c3"), ())
    assert m.processing == "I" and m.proposed.bytes == 0


# ---- the zoo networks ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def inception_plan():
    return engine.plan_modules(engine.load_network("inception_v3"), ACC)


def test_inception_v3_modules(inception_plan):
    mods = inception_plan.modules
    assert [m.name for m in mods] == list(TABLE1)
    assert [len(m.branches) for m in mods] == [4, 4, 4, 3, 4, 4, 4, 4, 3, 4, 4]
    # Inception-C holds two sub-modules one depth down; the others none
    assert [max(s.depth for s in m.steps) for m in mods] == [1] * 9 + [2, 2]
    # each module's MIFM is the previous module's MOFM, forwarded on chip and placed on alternate sides
    assert all(b.start == a.merge for a, b in zip(mods, mods[1:]))
    assert [m.side for m in mods] == ["low", "high"] * 5 + ["low"]


@pytest.mark.parametrize("name", list(TABLE1))
def test_table1_row(inception_plan, name):
    m = next(m for m in inception_plan.modules if m.name == name)
    w, naive, proposed, nr, nw, pr, pw = TABLE1[name]
    assert m.weight_bytes / KB == pytest.approx(w, rel=0.01)
    assert m.naive.bytes / KB == pytest.approx(naive, rel=0.01)
    assert m.naive.bytes == naive * KB  # exact: feature maps held in whole 4x4 patches
    assert m.proposed.bytes == proposed * KB
    assert (m.naive.reads, m.naive.writes, m.proposed.reads, m.proposed.writes) == (nr, nw, pr, pw)
    assert m.processing == ("II" if name == "Mixed_6a" else "I")
    check_steps(m, inception_plan.npu.mem_bytes)


def test_table1_totals(inception_plan):
    total = inception_plan.table()[-1]
    assert total["weight_bytes"] / KB == pytest.approx(21073.5, rel=0.01)
    assert total["naive_fm_bytes"] == 24904 * KB
    assert total["proposed_fm_bytes"] == 600 * KB
    assert total["fm_ratio"] == pytest.approx(0.0241, abs=5e-5)  # the paper's 97.59 % reduction
    assert total["overall_ratio"] == pytest.approx(0.4714, abs=0.003)  # 47.14 % (weights 0.2 % above the paper)
    assert (total["naive_reads"], total["proposed_reads"], total["proposed_writes"]) == (100, 1, 3)


@pytest.mark.parametrize("name, count, kind", [("googlenet", 9, "concat"), ("resnet50", 16, "add"),
                                               ("squeezenet1_0", 8, "concat")])
def test_other_networks(name, count, kind):
    plan = engine.plan_modules(engine.load_network(name), ACC)
    assert len(plan.modules) == count and {m.kind for m in plan.modules} == {kind}
    for m in plan.modules:
        assert m.proposed.bytes <= m.naive.bytes
        check_steps(m, plan.npu.mem_bytes)
    assert plan.proposed.bytes < plan.naive.bytes


def test_npu_model_from_preset():
    npu = NpuModel.for_accelerator(ACC)
    assert (npu.mem_bytes, npu.word_bits, npu.patch, npu.parallel_ofm) == (1024 * KB, 8, 4, 16)
    assert NpuModel.for_accelerator(engine.Accelerator.preset("optimus")).patch == 1
    with pytest.raises(engine.EngineError, match="chunks"):
        NpuModel(mem_bytes=1024, word_bits=8, chunks=0)


@pytest.mark.parametrize("model", ["light_inception_v1.onnx", "light_inception_v2.onnx", "light_resnet50.onnx",
                                   "light_squeezenet.onnx", "light_densenet121.onnx", "light_shufflenet.onnx"])
def test_imported_networks(model):
    """Every detected module is a series of branches between its start and merge; steps stay consistent."""
    g = engine.load_network(model)
    plan = engine.plan_modules(g, ACC)
    seen = set()
    for m in plan.modules:
        assert not seen & set(m.ops)  # top-level modules are disjoint
        seen |= set(m.ops)
        assert set(m.ops) == {v for b in m.branches for v in b} | {m.merge}
        assert all(g.producer(t) == m.start for t in g.op(m.layers[0]).inputs) or m.kind == "add"
        check_steps(m, plan.npu.mem_bytes)
    assert set(plan.outside) == {op.name for op in g.ops} - seen


# ---- size: a module's span at the module's cost ---------------------------------------------
@pytest.mark.parametrize("name", ["inception_v3", "resnet50", "densenet121", "nasnet_a_mobile"])
def test_a_span_walked_back_from_its_merge_is_everything_between_it_and_its_dominator(name):
    """`_between` against its definition, descendants(start) & ancestors(merge), at every merge of a zoo network."""
    import networkx as nx

    from engine.module_reuse.detect import _ROOT, _between, _is_merge, effective_dag, long_skips

    graph = engine.load_network(name)
    dag = effective_dag(graph, long_skips(graph, 16))
    idom = nx.immediate_dominators(dag, _ROOT)
    merges = [op.name for op in graph.ops if _is_merge(op, dag)]
    assert merges
    for m in merges:
        assert _between(dag, idom[m], m) == nx.descendants(dag, idom[m]) & nx.ancestors(dag, m) | {m}


def residual_chain(blocks: int) -> Graph:
    """`blocks` x (Relu of x, Add of x and the Relu) on 16-channel 8x8 maps: the fuzz's residual chain."""
    tensors, ops, x = [Tensor("x", (1, 16, 8, 8))], [], "x"
    for k in range(blocks):
        tensors += [Tensor(f"r{k}", (1, 16, 8, 8)), Tensor(f"a{k}", (1, 16, 8, 8))]
        ops += [Op(f"r{k}", OpKind.ELTWISE, (x,), (f"r{k}",), source_type="Relu"),
                Op(f"a{k}", OpKind.ELTWISE, (x, f"r{k}"), (f"a{k}",), source_type="Add")]
        x = f"a{k}"
    return Graph.build(f"residual_chain_{blocks}", ops, tensors, ["x"], [x])


def test_a_long_residual_chain_is_one_module_per_add_found_in_linear_work(monkeypatch):
    """Each Add is a module of one Relu branch and one identity branch, forwarded on chip to the next; detection
    reads the DAG's neighbours a few times per op (it walked the whole graph once per Add: 215 s at 12,000)."""
    import networkx as nx

    detect_module = importlib.import_module("engine.module_reuse.detect")  # the package exports the function too

    class Counting(nx.DiGraph):
        reads = 0

        def successors(self, n):
            Counting.reads += 1
            return super().successors(n)

        def predecessors(self, n):
            Counting.reads += 1
            return super().predecessors(n)

        neighbors = successors

    real = detect_module.effective_dag
    monkeypatch.setattr(detect_module, "effective_dag", lambda *a: Counting(real(*a)))
    graph = residual_chain(2000)
    structures, cut = detect_module.detect(graph)
    assert len(structures) == 2000 and not cut
    assert all(s.branches == ((f"r{k}",), ()) and s.start == (f"a{k - 1}" if k else None)
               for k, s in enumerate(structures))
    assert 0 < Counting.reads <= 10 * len(graph.ops)
    plan = engine.plan_modules(graph, ACC)
    fm = 16 * 8 * 8 * ACC.word_bits // 8  # bytes of one feature map
    assert all(m.processing == "I" and m.forwards_output for m in plan.modules)
    # only the first module reads its MIFM (the network input) from off chip; every output after it stays on chip
    assert plan.proposed.read_bytes == fm and plan.proposed.write_bytes == 0
    assert plan.naive.bytes == 2000 * 5 * fm  # Relu: 1 read, 1 write; Add: 2 reads, 1 write


def test_a_modules_mifm_tensors_come_in_the_graphs_order_whatever_the_hash_seed():
    """ShuffleNet-V2's units read both halves of a channel split; the branch reading the second half comes first in
    the graph, so the MIFM lists it first (it followed a set's order before, which changed with PYTHONHASHSEED)."""
    structures, _ = detect(engine.load_network("shufflenet_v2_x1_0"), max_layers=4)
    split = [s.mifm for s in structures if len(s.mifm) == 2]
    assert len(split) == 13 and all(a.endswith("chunk:1") and b.endswith("chunk:0") for a, b in split)
