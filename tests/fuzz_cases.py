"""Mutated and hostile ONNX files for the importer's fuzz test and benchmarks/fuzz_onnx.py.

`cases(seed, count)` yields (label, bytes): small valid models (a CNN, a transformer block with exporter-style
shape arithmetic, the onnx package's light SqueezeNet) with one mutation each: byte flips, truncation, dangling
names, cycles, zero/negative/huge attributes and dims, wrong dtypes, unknown ops and domains, duplicate names,
initializers of the wrong size, huge declared shapes, shape bombs, external data pointing anywhere, bad metadata;
and size stress (`STRESS`): residual chains, fans and Concats of thousands of ops.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.loading import onnx_light_models

STEPS = ("load_network", "fuse", "evaluate", "allocate", "partition", "plan_modules")
HUGE = (0, -1, -7, 2**31, 2**40, 2**62, 10**12)
OP_TYPES = ("Conv", "MatMul", "Gemm", "Einsum", "Relu", "Add", "Reshape", "Expand", "Tile", "Range", "ConstantOfShape",
            "Pad", "Resize", "Slice", "Gather", "Concat", "Split", "LRN", "BatchNormalization", "MaxPool", "If",
            "Loop", "NonZero", "TopK", "Softmax", "Flatten", "Identity", "NoSuchOp", "ConvTranspose", "Where")
ATTR_VALUES = (0, -1, 1, 2, 3, 2**62, -(2**62), 10**9)
EXTERNAL = ("../outside.bin", "/etc/passwd", "sub/../../x.bin", "weights.bin", "", "a\0b", "x" * 300)


def base_models() -> list[onnx.ModelProto]:
    """The valid models every mutation starts from."""
    return [_cnn(), _transformer(), onnx.load(onnx_light_models() / "light_squeezenet.onnx")]


def _cnn() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    init = [numpy_helper.from_array(np.ones(s, dtype=np.float32), n) for n, s in
            (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("dw", (8, 1, 3, 3)), ("w2", (16, 8, 1, 1)), ("fc", (16, 10)))]
    init.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "flat"))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "dw"], ["c2"], name="dw", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["c3"], name="pw"),
             helper.make_node("Add", ["c3", "c3"], ["a"], name="add"),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
             helper.make_node("Reshape", ["g", "flat"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    model = helper.make_model(helper.make_graph(nodes, "cnn", [x], [y], initializer=init),
                              opset_imports=[helper.make_opsetid("", 17)])
    return model


def _transformer() -> onnx.ModelProto:
    """Token ids -> embedding -> attention with exporter-style Shape/Gather/Concat reshapes -> MLP."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    f = {n: np.ones(s, dtype=np.float32) for n, s in (("emb", (50, 32)), ("wq", (32, 32)), ("wk", (32, 32)),
                                                       ("wv", (32, 32)), ("w1", (32, 64)), ("w2", (64, 32)),
                                                       ("gamma", (32,)), ("beta", (32,)))}
    i = {"zero": [0], "heads": [4], "hd": [8], "minus1": [-1], "perm_axes": [0]}
    init = [numpy_helper.from_array(v, n) for n, v in f.items()]
    init += [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in i.items()]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
             helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("Shape", ["n"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["b"], name="b"),
             helper.make_node("Concat", ["b", "minus1", "heads", "hd"], ["split_heads"], name="target", axis=0)]
    for p in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["n", "w" + p], [p], name="proj_" + p),
                  helper.make_node("Reshape", [p, "split_heads"], [p + "h"], name="reshape_" + p),
                  helper.make_node("Transpose", [p + "h"], [p + "t"], name="t_" + p, perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Einsum", ["qt", "kt"], ["sc"], name="scores", equation="bhqd,bhkd->bhqk"),
              helper.make_node("Softmax", ["sc"], ["pr"], name="softmax", axis=-1),
              helper.make_node("MatMul", ["pr", "vt"], ["o"], name="mix"),
              helper.make_node("Transpose", ["o"], ["ot"], name="t_o", perm=[0, 2, 1, 3]),
              helper.make_node("Shape", ["e"], ["se"], name="shape_e"),
              helper.make_node("Reshape", ["ot", "se"], ["merged"], name="merge_heads"),
              helper.make_node("Add", ["merged", "e"], ["res"], name="residual"),
              helper.make_node("MatMul", ["res", "w1"], ["h1"], name="fc1"),
              helper.make_node("Erf", ["h1"], ["g"], name="gelu"),
              helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")]
    model = helper.make_model(helper.make_graph(nodes, "block", [ids], [y], initializer=init),
                              opset_imports=[helper.make_opsetid("", 17)])
    return model


def cases(seed: int, count: int, *, scale: float = 1.0):
    """`count` (label, file bytes) pairs, the same for the same seed; the size-stress mutations (`STRESS`) at
    `scale` times their sizes (the in-suite test's are small, with the engine's size limits lowered alike)."""
    rng = random.Random(seed)
    bases = base_models()
    mutations = sorted(MUTATIONS) + sorted(STRESS)
    for n in range(count):
        base = bases[n % len(bases)]
        kind = mutations[rng.randrange(len(mutations))]
        model = onnx.ModelProto()
        model.CopyFrom(base)
        data = STRESS[kind](model, rng, scale) if kind in STRESS else MUTATIONS[kind](model, rng)
        yield f"{n}:{base.graph.name}:{kind}", data if isinstance(data, bytes) else model.SerializeToString()


def _flip(model, rng):
    data = bytearray(model.SerializeToString())
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def _truncate(model, rng):
    data = model.SerializeToString()
    return data[: rng.randrange(len(data))]


def _node(model, rng):
    return model.graph.node[rng.randrange(len(model.graph.node))]


def _dangling(model, rng):
    node = _node(model, rng)
    if node.input:
        node.input[rng.randrange(len(node.input))] = "nowhere"
    else:
        model.graph.output[0].name = "nowhere"


def _cycle(model, rng):
    a, b = _node(model, rng), _node(model, rng)
    if b.output and a.input:
        a.input[0] = b.output[0]


def _op_type(model, rng):
    node = _node(model, rng)
    node.op_type = rng.choice(OP_TYPES)
    if rng.random() < 0.3:
        node.domain = rng.choice(("com.example", "ai.onnx.ml", "com.microsoft"))


def _attribute(model, rng):
    node = _node(model, rng)
    name = rng.choice(("group", "kernel_shape", "strides", "pads", "dilations", "axis", "size", "perm", "to"))
    value = rng.choice(ATTR_VALUES)
    for attr in list(node.attribute):
        if attr.name == name:
            node.attribute.remove(attr)
    listed = name in ("kernel_shape", "strides", "pads", "dilations", "perm")
    node.attribute.append(helper.make_attribute(name, [value] * rng.randint(1, 4) if listed else value))


def _drop_input(model, rng):
    node = _node(model, rng)
    if node.input:
        del node.input[rng.randrange(len(node.input))]


def _input_dims(model, rng):
    inp = model.graph.input[0]
    dims = inp.type.tensor_type.shape.dim
    if dims:
        d = dims[rng.randrange(len(dims))]
        d.dim_value = rng.choice(HUGE)
    else:
        inp.type.tensor_type.elem_type = rng.choice((0, 8, 99))


def _dtype(model, rng):
    choice = rng.random()
    if choice < 0.4 and model.graph.initializer:
        model.graph.initializer[rng.randrange(len(model.graph.initializer))].data_type = rng.choice((0, 6, 8, 16, 99))
    elif choice < 0.7:
        model.graph.input[0].type.tensor_type.elem_type = rng.choice((0, 2, 8, 13, 99))
    else:
        node = _node(model, rng)
        node.attribute.append(helper.make_attribute("to", rng.choice((0, 8, 99))))


def _duplicate(model, rng):
    a, b = _node(model, rng), _node(model, rng)
    if rng.random() < 0.5 and a.output and b.output:
        a.output[0] = b.output[0]
    else:
        a.name = b.name
        if model.graph.initializer and a.output:
            model.graph.initializer[0].name = a.output[0]


def _initializer_size(model, rng):
    if not model.graph.initializer:
        return _truncate(model, rng)
    init = model.graph.initializer[rng.randrange(len(model.graph.initializer))]
    if rng.random() < 0.5:
        init.dims[:] = [rng.choice((1, 3, 1000, 2**31, 2**62))] * max(len(init.dims), 1)
    else:
        init.raw_data = init.raw_data[: len(init.raw_data) // 2]


def _shape_bomb(model, rng):
    """ConstantOfShape -> Cast -> Add on a declared-huge shape (the 179-byte memory bomb), or Range/Tile/Expand."""
    size = rng.choice((30_000_000, 2**31, 2**62, 10**12))
    op = rng.choice(("ConstantOfShape", "Expand", "Tile", "Range"))
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array([size], dtype=np.int64), "bomb_shape"))
    g.initializer.append(numpy_helper.from_array(np.array([1.0], dtype=np.float32), "bomb_one"))
    g.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "bomb_zero"))
    g.initializer.append(numpy_helper.from_array(np.array(1, dtype=np.int64), "bomb_step"))
    g.initializer.append(numpy_helper.from_array(np.array(size, dtype=np.int64), "bomb_limit"))
    source = {"ConstantOfShape": helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"], name="bomb"),
              "Expand": helper.make_node("Expand", ["bomb_one", "bomb_shape"], ["bomb"], name="bomb"),
              "Tile": helper.make_node("Tile", ["bomb_one", "bomb_shape"], ["bomb"], name="bomb"),
              "Range": helper.make_node("Range", ["bomb_zero", "bomb_limit", "bomb_step"], ["bomb"], name="bomb")}[op]
    g.node.extend([source, helper.make_node("Cast", ["bomb"], ["bomb_f"], name="bomb_cast", to=TensorProto.FLOAT),
                   helper.make_node("Add", ["bomb_f", "bomb_f"], ["bomb_out"], name="bomb_add")])
    g.output.append(helper.make_tensor_value_info("bomb_out", TensorProto.FLOAT, None))


def _external(model, rng):
    location = rng.choice(EXTERNAL)
    if rng.random() < 0.5 and model.graph.initializer:
        tensor = model.graph.initializer[rng.randrange(len(model.graph.initializer))]
    else:
        tensor = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "ext_const")
        model.graph.node.insert(0, helper.make_node("Constant", [], ["ext_const_out"], name="ext_const", value=tensor))
        tensor = model.graph.node[0].attribute[0].t
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    tensor.external_data.add(key="length", value=str(rng.choice((16, 10**12))))


def _metadata(model, rng):
    key = rng.choice(("engine.batch", "engine.weights", "engine.buffers", "engine.name"))
    value = rng.choice(("", "[", "{}", "[1, 2]", "-3", "0", "1e9", "99999999999999999999", "null", '["x"]', "\x00"))
    onnx.helper.set_model_props(model, {key: value})


def _opset(model, rng):
    model.opset_import[0].version = rng.choice((0, 1, 5, 6, 8, 10, 13, 999, -1))


def _identity_chain(model, rng):
    """A very long chain of Identity (or Relu) nodes at the output."""
    g = model.graph
    last = g.output[0].name
    op = rng.choice(("Identity", "Relu"))
    length = rng.choice((1100, 3000))
    for k in range(length):
        g.node.append(helper.make_node(op, [last], [f"chain{k}"], name=f"chain{k}"))
        last = f"chain{k}"
    g.output[0].name = last


def _fan_out(model, rng):
    """One tensor read by many element-wise ops."""
    g = model.graph
    src = g.node[0].output[0]
    outs = []
    for k in range(rng.choice((3, 6))):  # wider fans: see the fusion and allocation notes in BENCHMARKS.md
        g.node.append(helper.make_node("Relu", [src], [f"fan{k}"], name=f"fan{k}"))
        outs.append(f"fan{k}")
    g.node.append(helper.make_node("Sum", outs, ["fan_sum"], name="fan_sum"))
    g.output.append(helper.make_tensor_value_info("fan_sum", TensorProto.FLOAT, None))


def residual_blocks(graph, last: str, blocks: int) -> str:
    """Append `blocks` x (Relu of `last`, Add of `last` and the Relu) to an ONNX graph; the last Add's output."""
    for k in range(blocks):
        graph.node.append(helper.make_node("Relu", [last], [f"res_r{k}"], name=f"res_r{k}"))
        graph.node.append(helper.make_node("Add", [last, f"res_r{k}"], [f"res_a{k}"], name=f"res_a{k}"))
        last = f"res_a{k}"
    return last


def relus_joined(graph, src: str, relus: list[str], join: str, out: str, **attrs) -> None:
    """Append a Relu of `src` to an ONNX graph for each name of `relus`, joined by one `join` node (a Sum, a Concat
    with its axis) whose output is `out`."""
    graph.node.extend(helper.make_node("Relu", [src], [r], name=r) for r in relus)
    graph.node.append(helper.make_node(join, relus, [out], name=out, **attrs))


def _residual_chain(model, rng, scale):
    """Thousands of (Relu, Add of the block's input) after the first node: a chain past the fusion's window limit."""
    g = model.graph
    last = residual_blocks(g, g.node[0].output[0], max(1, round(rng.choice((1_100, 2_100, 12_000)) * scale)))
    g.output.append(helper.make_tensor_value_info(last, TensorProto.FLOAT, None))


def _wide_fan(model, rng, scale):
    """One tensor read by thousands of Relus, joined by one Sum."""
    g = model.graph
    width = max(2, round(rng.choice((600, 2_500, 12_000)) * scale))
    relus_joined(g, g.node[0].output[0], [f"wfan{k}" for k in range(width)], "Sum", "wfan_sum")
    g.output.append(helper.make_tensor_value_info("wfan_sum", TensorProto.FLOAT, None))


def _wide_concat(model, rng, scale):
    """Thousands of Relus of one tensor joined by one Concat along the channels."""
    g = model.graph
    width = max(2, round(rng.choice((3_000, 25_000)) * scale))
    relus_joined(g, g.node[0].output[0], [f"wcat{k}" for k in range(width)], "Concat", "wcat", axis=1)
    g.output.append(helper.make_tensor_value_info("wcat", TensorProto.FLOAT, None))


def _empty(model, rng):
    """Only reshapes (Flatten), or nothing at all."""
    g = model.graph
    del g.node[:]
    if rng.random() < 0.7:
        g.node.append(helper.make_node("Flatten", [g.input[0].name], [g.output[0].name], name="flatten"))


MUTATIONS = {"flip": _flip, "truncate": _truncate, "dangling": _dangling, "cycle": _cycle, "op_type": _op_type,
             "attribute": _attribute, "drop_input": _drop_input, "input_dims": _input_dims, "dtype": _dtype,
             "duplicate": _duplicate, "initializer_size": _initializer_size, "shape_bomb": _shape_bomb,
             "external": _external, "metadata": _metadata, "opset": _opset, "identity_chain": _identity_chain,
             "fan_out": _fan_out, "empty": _empty}
# size stress: graphs past the engine's size limits (windowed fusion, the limit's tables, allocation's clock)
STRESS = {"residual_chain": _residual_chain, "wide_fan": _wide_fan, "wide_concat": _wide_concat}


def run_case(path: Path) -> tuple[str, str]:
    """(outcome, detail) of one file through every step: outcome is ok, engine_error or crash."""
    step = STEPS[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", engine.PartialImportWarning)  # a partial import is a success here
            graph = engine.load_network(path)
        acc = engine.Accelerator.preset("optimus").with_buffer(64 * 1024)
        step = "fuse"
        engine.fuse(graph, acc, method="optimus")
        step = "evaluate"
        engine.evaluate(graph, acc, methods=("dnnvm",))
        step = "allocate"
        engine.allocate(graph, engine.allocation.budgets(graph)[1], method="cosma", time_limit_s=1.0)
        step = "partition"
        engine.partition(graph, {"conv", "matmul", "eltwise"})
        step = "plan_modules"
        engine.plan_modules(graph, acc)
    except engine.EngineError as err:
        return "engine_error", f"{step}: {str(err)[:160]}"
    except MemoryError:
        return "memory", step
    except Exception as err:  # the defect this fuzz looks for
        return "crash", f"{step}: {type(err).__name__}: {str(err)[:160]}"
    return "ok", ""
