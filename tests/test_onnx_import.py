"""ONNX import: the light models against figures computed straight from the ONNX file, and every error path."""

import importlib
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

import engine
from engine.onnx import load_onnx
from tests.conftest import LIGHT_MODELS, conv_bn_relu_model


def reference_figures(path):
    """Conv/Gemm MACs and parameter count read directly off the ONNX file (no engine code).

    Parameters: every float initializer or ConstantOfShape output that feeds a node,
    except BatchNormalization running mean/var (buffers, as torchvision counts them).
    """
    model = shape_inference.infer_shapes(onnx.load(path))
    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.input) + list(g.value_info) + list(g.output)}
    ints = {i.name: numpy_helper.to_array(i) for i in g.initializer if i.data_type == TensorProto.INT64}
    weight_shape = {i.name: list(i.dims) for i in g.initializer if i.data_type == TensorProto.FLOAT}
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            weight_shape[n.output[0]] = [int(v) for v in ints[n.input[0]]]
    derived = {}  # a weight reshaped or unsqueezed by a constant node -> the weight
    for n in g.node:
        source = derived.get(n.input[0], n.input[0]) if n.input else None
        if source in weight_shape and all(t in weight_shape or t in ints or t in derived for t in n.input):
            derived[n.output[0]] = source
    macs, used = 0, set()
    for n in g.node:
        for slot, t in enumerate(n.input):
            t = derived.get(t, t)
            if t in weight_shape and not (n.op_type == "BatchNormalization" and slot >= 3):
                used.add(t)
        if n.op_type == "Conv":
            w = weight_shape[n.input[1]]
            macs += math.prod(shapes[n.output[0]]) * math.prod(w[1:])
        elif n.op_type == "Gemm":
            assert not any(a.name == "transA" and a.i for a in n.attribute)
            macs += math.prod(shapes[n.output[0]]) * shapes[n.input[0]][-1]
    params = sum(math.prod(weight_shape[t]) for t in used if math.prod(weight_shape[t]) > 1)
    return macs, params


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_reference(light_dir, name):
    graph = load_onnx(light_dir / name)
    macs, params = reference_figures(light_dir / name)
    assert graph.macs == macs
    assert graph.params == params
    assert len(LIGHT_MODELS) == 9


def test_resnet50_light_matches_torchvision_figures(light_dir):
    g = load_onnx(light_dir / "light_resnet50.onnx")
    assert g.params == 25_557_032  # torchvision resnet50
    assert g.macs == pytest.approx(4.09e9, rel=0.005)
    assert sum(op.kind == "conv" for op in g.ops) == 53
    first = g.ops[0]
    assert [t for _, t in first.merged] == ["Conv", "BatchNormalization", "Relu"]
    assert g.tensors[first.outputs[0]].shape == (1, 64, 112, 112)


def test_batch_scales_activations_and_macs(light_dir):
    one = load_onnx(light_dir / "light_vgg19.onnx")
    four = load_onnx(light_dir / "light_vgg19.onnx", batch=4)
    assert four.macs == 4 * one.macs
    assert four.params == one.params
    assert four.tensors[four.inputs[0]].shape == (4, 3, 224, 224)


def test_simple_ops_merge_and_are_recorded(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(conv_bn_relu_model(), path)
    g = load_onnx(path)
    assert [op.kind for op in g.ops] == ["conv", "pool", "matmul"]
    conv, pool, fc = g.ops
    assert conv.merged == (("conv", "Conv"), ("bn", "BatchNormalization"), ("relu", "Relu"))
    assert conv.weights == ("w", "scale", "bias")  # running mean/var are not parameters
    assert pool.merged == (("pool", "MaxPool"), ("flatten", "Flatten"))
    assert fc.inputs == pool.outputs  # the Flatten vanished
    assert conv.macs == 4 * 8 * 8 * 3 * 3 * 3
    assert fc.macs == 10 * 64
    assert g.params == 108 + 8 + 640 + 10


def test_unmodelled_operator_stays_as_other(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [helper.make_node("Shrink", ["x"], ["a"], name="shrink"),
             helper.make_node("Hardmax", ["a"], ["y"], name="hardmax")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "other.onnx"
    onnx.save(model, path)
    g = load_onnx(path)
    assert [(op.name, op.kind) for op in g.ops] == [("shrink", "other"), ("hardmax", "other")]
    assert g.tensors["a"].shape == (1, 4, 8, 8)


# ---- error paths ---------------------------------------------------------------

def test_not_onnx(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    with pytest.raises(engine.ModelFileError, match="not an ONNX model"):
        load_onnx(path)


def test_truncated(tmp_path, light_dir):
    data = (light_dir / "light_squeezenet.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(engine.ModelFileError, match="truncated"):
        load_onnx(path)


def test_missing_and_empty_file(tmp_path):
    with pytest.raises(engine.ModelFileError, match="no such file"):
        load_onnx(tmp_path / "nope.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(engine.ModelFileError, match="empty"):
        load_onnx(tmp_path / "empty.onnx")


def test_cyclic_graph(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["b"], ["y"], name="third")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "cycle.onnx"
    onnx.save(model, path)
    with pytest.raises(engine.ModelFileError, match="cycle") as err:
        load_onnx(path)
    assert err.value.node in {"first", "second"}


def test_dynamic_batch_defaults_to_one_and_other_dims_must_be_bound(tmp_path):
    path = tmp_path / "dyn.onnx"
    onnx.save(conv_bn_relu_model(dynamic=True), path)
    assert load_onnx(path).tensors["x"].shape == (1, 3, 8, 8)  # a symbolic leading dim is the batch
    assert load_onnx(path, batch=3).macs == 3 * load_onnx(path).macs
    g = load_onnx(path, input_shapes={"x": (2, 3, 8, 8)})
    assert g.tensors["x"].shape == (2, 3, 8, 8)
    static = tmp_path / "static.onnx"
    onnx.save(conv_bn_relu_model(), static)  # a declared shape passed again gives the same graph
    assert load_onnx(static, input_shapes={"x": (1, 3, 8, 8)}) == load_onnx(static)
    with pytest.raises(engine.ShapeError, match="neither a graph input nor a symbolic dim"):
        load_onnx(path, input_shapes={"nope": (1, 3, 8, 8)})
    x = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    table = numpy_helper.from_array(np.zeros((100, 16), dtype=np.float32), "table")
    w = numpy_helper.from_array(np.zeros((16, 8), dtype=np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "tokens", [x], [y], initializer=[table, w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "tokens.onnx")
    with pytest.raises(engine.ShapeError, match="input 'ids'.*bind sequence"):
        load_onnx(tmp_path / "tokens.onnx")
    g = load_onnx(tmp_path / "tokens.onnx", input_shapes={"sequence": 128})  # token ids: an integer input
    assert g.tensors["e"].shape == (1, 128, 16)
    assert g.op("proj").macs == 128 * 16 * 8
    assert g.op("embed").weights == ("table",)


def test_old_opsets_are_converted_or_named(tmp_path):
    reference = load_onnx_model(tmp_path, conv_bn_relu_model())
    for version in (6, 7, 8):
        model = conv_bn_relu_model()
        model.opset_import[0].version = version
        assert load_onnx_model(tmp_path, model).macs == reference.macs
    model = conv_bn_relu_model()
    model.opset_import[0].version = 1
    with pytest.raises(engine.ModelFileError, match="opset 1 cannot be converted.*BatchNormalization, Conv"):
        load_onnx_model(tmp_path, model)


def load_onnx_model(tmp_path, model, **kwargs):
    """Save `model` under tmp_path and import it."""
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return load_onnx(path, **kwargs)


def test_external_data_outside_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.zeros(108, dtype=np.float32).tobytes())
    model = conv_bn_relu_model()
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../secret.bin")
    model.graph.initializer.append(w)
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "ext.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(engine.ModelFileError, match="outside the model's folder"):
        load_onnx(path)


def test_cli_resolves_onnx_light_model_name(capsys):
    from engine.__main__ import main

    assert main(["info", "light_resnet50.onnx"]) == 0
    out = capsys.readouterr().out
    assert "25,557,032" in out and "4,089,184,256" in out
    assert main(["info", "no_such_net.onnx"]) == 2


def test_unknown_shapes_name_the_tensor(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="mystery", domain="com.example"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    with pytest.raises(engine.ShapeError, match="tensor 'y' cannot be inferred .*'Mystery' of domain 'com.example' node 'mystery'"):
        load_onnx(path)


def test_integer_shape_arithmetic_is_folded_so_shapes_resolve(tmp_path):
    """Exporters compute Pad's pads from the input's Shape; inference alone leaves the output shapeless."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["c"], name="channels", axis=0),  # 4
             helper.make_node("Div", ["c", "c"], ["u"], name="unit"),  # 1, known only by evaluation
             helper.make_node("Constant", [], ["z"], name="zero", value=helper.make_tensor("zv", TensorProto.INT64,
                                                                                           [2], [0, 0])),
             helper.make_node("Concat", ["z", "u", "u", "z", "u", "u"], ["pads"], name="pads", axis=0),
             helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             helper.make_node("AveragePool", ["p"], ["y"], name="pool", kernel_shape=[3, 3])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[one]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "pad.onnx"
    onnx.save(model, path)
    g = load_onnx(path)
    assert [op.kind for op in g.ops] == ["other", "pool"]  # Pad is modelled by its tensors only
    assert g.tensors[g.ops[0].outputs[0]].shape == (1, 4, 10, 10)
    assert g.tensors["y"].shape == (1, 4, 8, 8)


# ---- folding and counting ---------------------------------------------------------

def _model(nodes, inputs, outputs, initializer=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_einsum_counts_its_macs_and_attention_matmuls_count(tmp_path):
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 16, 8])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 4, 16, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((8, 32), dtype=np.float32), "w")
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], name="scores", equation="bhqd,bhkd->bhqk"),
             helper.make_node("Einsum", ["q", "w"], ["p"], name="proj", equation="...d,de->...e"),
             helper.make_node("MatMul", ["s", "p"], ["y"], name="mix")]
    g = load_onnx_model(tmp_path, _model(nodes, [q, k], [y], [w]))
    assert g.op("scores").macs == 4 * 16 * 16 * 8  # every (q, k) pair sums over d
    assert g.op("proj").macs == 4 * 16 * 8 * 32
    assert g.op("proj").weights == ("w",)
    assert g.op("mix").macs == 4 * 16 * 32 * 16  # activation x activation
    assert g.macs == 4 * 16 * 16 * 8 + 4 * 16 * 8 * 32 + 4 * 16 * 32 * 16


def test_computation_from_weights_alone_is_an_op_whether_or_not_weights_are_stored(tmp_path):
    """A positional-encoding conv reading only weights counts its MACs either way."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    table = np.ones((1, 8, 6, 6), dtype=np.float32)
    kernel = np.ones((8, 1, 3, 3), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["table", "kernel"], ["pe"], name="pe_conv", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["x", "pe"], ["y"], name="add")]
    stored = load_onnx_model(tmp_path, _model(nodes, [x], [y], [numpy_helper.from_array(table, "table"),
                                                                 numpy_helper.from_array(kernel, "kernel")]))
    as_inputs = [x, helper.make_tensor_value_info("table", TensorProto.FLOAT, table.shape),
                 helper.make_tensor_value_info("kernel", TensorProto.FLOAT, kernel.shape)]
    unstored = load_onnx_model(tmp_path, _model(nodes, as_inputs, [y]))
    assert stored.macs == unstored.macs == 8 * 6 * 6 * 9
    assert stored.op("pe_conv").weights == ("table", "kernel")
    assert stored.op("pe_conv").inputs == ()


def test_exporter_shape_patterns_fold_whatever_the_op(tmp_path):
    """ViT's class-token Expand (Shape, Equal, Where), Mod and Ceil over float sizes, and a 12-deep padding chain."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 9, 9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    const = {"zero": 0, "one": 1, "two": 2, "minus1": -1}
    init = [numpy_helper.from_array(np.array([v], dtype=np.int64), n) for n, v in const.items()]
    init += [numpy_helper.from_array(np.ones((1, 1, 4), dtype=np.float32), "cls"),
             numpy_helper.from_array(np.array(2.0, dtype=np.float32), "twof")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["b"], name="batch"),
             helper.make_node("Concat", ["b", "minus1", "minus1"], ["target"], name="target", axis=0),
             helper.make_node("Equal", ["target", "minus1"], ["is_free"], name="eq"),
             helper.make_node("ConstantOfShape", ["three"], ["ones3"], name="ones3",
                              value=helper.make_tensor("v", TensorProto.INT64, [1], [1])),
             helper.make_node("Where", ["is_free", "ones3", "target"], ["expand_to"], name="where"),
             helper.make_node("Expand", ["cls", "expand_to"], ["tokens"], name="expand"),
             helper.make_node("Constant", [], ["three"], name="three",
                              value=helper.make_tensor("t", TensorProto.INT64, [1], [3]))]
    current = "x"
    for i in range(12):  # each layer pads its input up to an even size computed from its own shape
        p = f"l{i}_"
        nodes += [helper.make_node("Shape", [current], [p + "s"], name=p + "shape"),
                  helper.make_node("Gather", [p + "s", "two"], [p + "h"], name=p + "h"),
                  helper.make_node("Mod", [p + "h", "two"], [p + "odd"], name=p + "mod"),
                  helper.make_node("Cast", [p + "h"], [p + "hf"], name=p + "cast", to=TensorProto.FLOAT),
                  helper.make_node("Div", [p + "hf", "twof"], [p + "half"], name=p + "div"),
                  helper.make_node("Ceil", [p + "half"], [p + "ceil"], name=p + "ceil"),
                  helper.make_node("Cast", [p + "ceil"], [p + "ci"], name=p + "ci", to=TensorProto.INT64),
                  helper.make_node("Mul", [p + "ci", "two"], [p + "even"], name=p + "even"),
                  helper.make_node("Sub", [p + "even", p + "h"], [p + "extra"], name=p + "extra"),
                  helper.make_node("Add", [p + "extra", p + "odd"], [p + "pad"], name=p + "pad_amount"),
                  helper.make_node("Concat", ["zero", "zero", p + "pad", p + "pad"] * 2, [p + "pads"],
                                   name=p + "pads", axis=0),
                  helper.make_node("Pad", [current, p + "pads"], [p + "padded"], name=p + "pad"),
                  helper.make_node("Relu", [p + "padded"], [p + "out"], name=p + "relu")]
        current = p + "out"
    init.append(numpy_helper.from_array(np.array([0, 4, -1], dtype=np.int64), "rows"))
    nodes += [helper.make_node("Reshape", [current, "rows"], [p + "flat"], name="flat"),
              helper.make_node("Transpose", [p + "flat"], ["seq"], name="to_tokens", perm=[0, 2, 1]),
              helper.make_node("Concat", ["tokens", "seq"], ["y"], name="cat", axis=1)]
    g = load_onnx_model(tmp_path, _model(nodes, [x], [y], init))
    assert g.op("cat").weights == ("cls",)  # the class token, expanded to the batch by folded shape arithmetic
    side = 9
    for _ in range(12):
        side += 2 * 2 * (side % 2)  # odd: one row to reach the even size, one more for the remainder, each side
    assert g.tensors["y"].shape == (2, 1 + side * side, 4)
    assert sum(op.source_type == "Pad" for op in g.ops) == 12


def detector_with_data_dependent_tail():
    """A detector in miniature: a conv head scores 64 positions, NonZero 'keep' finds the hits, an If (torchvision's
    "no boxes?" test) keeps the first 50 (`keep[:50]`), and a matmul "box head" runs on their features.

    MACs: the conv 4 x 64 x 27 = 6,912; the box head 4 x 16 = 64 per kept position.
    """
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    out = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, None)
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)
    consts = [numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.float32), "w"),
              numpy_helper.from_array(np.ones((4, 16), dtype=np.float32), "w_head"),
              numpy_helper.from_array(np.array([64], dtype=np.int64), "flat_shape"),
              numpy_helper.from_array(np.array([64, 4], dtype=np.int64), "feat_shape"),
              numpy_helper.from_array(np.array([0], dtype=np.int64), "zero_axis"),
              numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")]
    first_50 = helper.make_graph(
        [helper.make_node("Constant", [], ["s0"], value=numpy_helper.from_array(np.array([0], dtype=np.int64))),
         helper.make_node("Constant", [], ["s50"], value=numpy_helper.from_array(np.array([50], dtype=np.int64))),
         helper.make_node("Slice", ["idx", "s0", "s50", "s0"], ["top_else"])],
        "else", [], [helper.make_tensor_value_info("top_else", TensorProto.INT64, None)])
    empty = helper.make_graph(
        [helper.make_node("Constant", [], ["top_then"], value=numpy_helper.from_array(np.zeros(0, dtype=np.int64)))],
        "then", [], [helper.make_tensor_value_info("top_then", TensorProto.INT64, None)])
    nodes = [helper.make_node("Conv", ["x", "w"], ["scores"], name="head", pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMax", ["scores"], ["best"], name="best", axes=[1], keepdims=0),
             helper.make_node("Reshape", ["best", "flat_shape"], ["flat"], name="flat"),
             helper.make_node("NonZero", ["flat"], ["keep"], name="keep"),
             helper.make_node("Squeeze", ["keep", "zero_axis"], ["idx"], name="idx"),
             helper.make_node("Size", ["idx"], ["found"], name="found"),
             helper.make_node("Equal", ["found", "zero"], ["none_found"], name="none_found"),
             helper.make_node("If", ["none_found"], ["top"], name="first_50", then_branch=empty,
                              else_branch=first_50),
             helper.make_node("Transpose", ["scores"], ["nhwc"], name="nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["nhwc", "feat_shape"], ["feats"], name="feats"),
             helper.make_node("Gather", ["feats", "top"], ["rows"], name="rows", axis=0),
             helper.make_node("MatMul", ["rows", "w_head"], ["boxes"], name="box_head")]
    return _model(nodes, [x], [out, scores], consts)


HEAD_MACS = 4 * 64 * 27  # the conv head of detector_with_data_dependent_tail


@pytest.mark.parametrize("counts, kept, macs, why", [
    (None, 64, HEAD_MACS + 50 * 64, "its most: every one of its input's 64 elements"),  # keep[:50] cuts 64 to 50
    (10, 10, HEAD_MACS + 10 * 64, "as given; its most 64"),
    (1000, 64, HEAD_MACS + 50 * 64, "its most: every one of its input's 64 elements; 1,000 given"),  # clamped
    ({"keep": 30}, 30, HEAD_MACS + 30 * 64, "as given; its most 64"),
    ({"keep": 64}, 64, HEAD_MACS + 50 * 64, "its most: every one of its input's 64 elements; 64 given"),
])
def test_a_data_dependent_count_is_assumed_and_the_rest_counted(tmp_path, counts, kept, macs, why):
    """NonZero's count is its most (every element) unless given (one number for all is clamped to each most); the
    If's condition folds (boxes were found), its branch is inlined, and the box head runs on min(count, 50)."""
    g = load_onnx_model(tmp_path, detector_with_data_dependent_tail(), data_counts=counts)
    assert g.macs == macs
    assert g.assumptions == (f"NonZero 'keep' keeps {kept} ({why})",)
    assert g.op("box_head").macs == min(kept, 50) * 64 and g.tensors["boxes"].shape == (min(kept, 50), 16)
    assert not any(op.source_type == "If" for op in g.ops)


@pytest.mark.parametrize("counts, message", [
    (0, "data_counts must be a whole number of at least 1"),
    (-3, "data_counts must be a whole number of at least 1"),
    (2.5, "data_counts must be a whole number of at least 1"),
    ({"keep": 0}, r"data_counts\['keep'\] must be a whole number of at least 1"),
    ({"keep": 65}, "node 'keep': data_counts gives NonZero 'keep' 65, more than its most 64"),
    ({"head": 5}, r"data_counts names 'head', which is no data-dependent count of this file \(those it has: keep\)"),
])
def test_a_bad_data_count_is_refused_naming_the_node(tmp_path, counts, message):
    with pytest.raises(engine.EngineError, match=message):
        load_onnx_model(tmp_path, detector_with_data_dependent_tail(), data_counts=counts)


def test_a_built_in_network_takes_no_data_counts():
    with pytest.raises(engine.EngineError, match="data_counts applies to ONNX files; the built-in network 'resnet18'"):
        engine.load_network("resnet18", data_counts=5)


def test_cli_prints_the_counts_it_assumed_and_takes_others(tmp_path, capsys):
    from engine.__main__ import main

    path = tmp_path / "detector.onnx"
    path.write_bytes(detector_with_data_dependent_tail().SerializeToString())
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "assumed: NonZero 'keep' keeps 64 (its most: every one of its input's 64 elements)" in out
    assert f"{HEAD_MACS + 50 * 64:,}" in out
    assert main(["info", str(path), "--data-counts", "keep=12"]) == 0
    assert "assumed: NonZero 'keep' keeps 12 (as given; its most 64)" in capsys.readouterr().out
    assert main(["info", str(path), "--data-counts", "keep=many"]) == 2
    assert "--data-counts 'keep=many': write NODE=N" in capsys.readouterr().err
    assert main(["info", str(path), "--data-counts", "99"]) == 0  # one number for all, clamped to each most
    assert "keeps 64 (its most: every one of its input's 64 elements; 99 given)" in capsys.readouterr().out


def test_nms_and_topk_counts_have_their_most_from_the_shapes(tmp_path):
    """NMS keeps at most batches x classes x min(max_output_boxes_per_class, boxes) = 1 x 3 x 5; a TopK whose k
    comes from the data keeps at most every element along its axis (20)."""
    boxes = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 20, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 20])
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("picked", "best")]
    consts = [numpy_helper.from_array(np.array([5], dtype=np.int64), "max_per_class"),
              numpy_helper.from_array(np.array([2], dtype=np.int64), "column"),
              numpy_helper.from_array(np.ones((4, 8), dtype=np.float32), "w")]
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_per_class"], ["sel"], name="nms"),
             helper.make_node("Gather", ["sel", "column"], ["which"], name="which", axis=1),
             helper.make_node("Gather", ["boxes", "which"], ["kept"], name="kept", axis=1),
             helper.make_node("MatMul", ["kept", "w"], ["picked"], name="picked"),
             helper.make_node("ReduceMax", ["which"], ["k"], name="k", keepdims=1),
             helper.make_node("TopK", ["boxes", "k"], ["best", "best_at"], name="topk", axis=1)]
    model = _model(nodes, [boxes, scores], outs, consts)
    g = load_onnx_model(tmp_path, model)
    assert g.assumptions == ("NonMaxSuppression 'nms' keeps 15 (its most: 1 x 3 x 5: batches x classes x boxes "
                             "each class keeps)", "TopK 'topk' keeps 20 (its most: all 20 along axis 1)")
    assert g.op("picked").macs == 15 * 4 * 8 and g.tensors["best"].shape == (1, 20, 4)
    assert load_onnx_model(tmp_path, model, data_counts={"nms": 4, "topk": 7}).tensors["best"].shape == (1, 7, 4)


def detector_with_size_from_the_data():
    """A conv head whose largest score, as an integer, is the end of a Range: a size read from the data."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("scores", "span_f")]
    consts = [numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.float32), "w"),
              numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
              numpy_helper.from_array(np.array(1, dtype=np.int64), "step")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["scores"], name="head", pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMax", ["scores"], ["top"], name="top", keepdims=0),
             helper.make_node("Cast", ["top"], ["end"], name="end", to=TensorProto.INT64),
             helper.make_node("Range", ["zero", "end", "step"], ["span"], name="span"),
             helper.make_node("Cast", ["span"], ["span_f"], name="span_f", to=TensorProto.FLOAT)]
    return _model(nodes, [x], outs, consts)


def test_a_size_taken_from_the_data_is_left_out_with_a_warning(tmp_path):
    """A Range whose end is a value computed from the data has no size to assume: the static part imports, the
    rest is named in a warning."""
    with pytest.warns(engine.PartialImportWarning, match="left out 2 nodes .*Range 'span'"):
        g = load_onnx_model(tmp_path, detector_with_size_from_the_data())
    assert [op.name for op in g.ops] == ["head", "top"] and g.outputs == ("scores",)  # the Cast folds into "top"
    assert g.macs == HEAD_MACS and g.assumptions == ()


def test_a_reshape_that_does_not_fit_the_given_shapes_is_refused(tmp_path):
    """torch.export specialises a traced batch of 1 into Reshape targets; loaded at batch 2 such a file must say
    so rather than count half the network at batch 1."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([1, 2, 4], dtype=np.int64), "to")
    nodes = [helper.make_node("Reshape", ["x", "to"], ["v"], name="view"), helper.make_node("Relu", ["v"], ["y"])]
    model = _model(nodes, [x], [y], [shape])
    assert load_onnx_model(tmp_path, model, input_shapes={"batch": 1}).tensors["x"].shape == (1, 8)
    with pytest.raises(engine.ModelFileError, match=r"node 'view': Reshape of \[2, 8\] \(16 elements\) to "
                                                    r"\[1, 2, 4\] \(8\): the file's fixed sizes do not fit"):
        load_onnx_model(tmp_path, model, input_shapes={"batch": 2})


def test_unique_and_compress_counts_have_their_most_from_the_shapes(tmp_path):
    """Unique keeps at most every element (12), Compress every one its condition covers along the axis (min(12, 5))."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [5])
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("values", "picked")]
    nodes = [helper.make_node("Unique", ["x"], ["values", "first", "inverse", "counts"], name="uniq"),
             helper.make_node("Compress", ["x", "cond"], ["picked"], name="pick", axis=1)]
    model = _model(nodes, [x, cond], outs, [], opset=17)
    g = load_onnx_model(tmp_path, model)
    assert [g.tensors[t].shape for t in ("values", "first", "inverse", "counts", "picked")] == \
        [(12,), (12,), (12,), (12,), (1, 5)]
    assert g.assumptions == ("Unique 'uniq' keeps 12 (its most: every one of its input's 12 elements)",
                             "Compress 'pick' keeps 5 (its most: every one of the 5 the condition covers)")
    g = load_onnx_model(tmp_path, model, data_counts=3)
    assert [g.tensors[t].shape for t in ("values", "inverse", "picked")] == [(3,), (12,), (1, 3)]


def test_a_wide_concat_of_relus_imports_each_relu_as_an_op_counting_readers_once(tmp_path, monkeypatch):
    """A conv's output read by 3,000 Relus joined by one Concat: no Relu folds into the conv (its output has 3,000
    readers), every op and shape is kept, and the merge looks each reader up once per tensor asked about (it walked
    all 3,000 readers for each Relu: 94.7 s at 25,000)."""
    merge_module = importlib.import_module("engine.onnx.merge")

    class CountingDict(dict):
        lookups = 0

        def __getitem__(self, key):
            CountingDict.lookups += 1
            return super().__getitem__(key)

    real_init = merge_module._Merger.__init__

    def counting_init(self, *args):
        real_init(self, *args)
        self.node_by_name = CountingDict(self.node_by_name)

    monkeypatch.setattr(merge_module._Merger, "__init__", counting_init)
    n = 3000
    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), dtype=np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    nodes += [helper.make_node("Relu", ["c"], [f"r{k}"], name=f"relu{k}") for k in range(n)]
    nodes.append(helper.make_node("Concat", [f"r{k}" for k in range(n)], ["y"], name="concat", axis=1))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    g = load_onnx_model(tmp_path, model)
    assert len(g.ops) == n + 2 and g.op("conv").merged == (("conv", "Conv"),) and g.op("relu7").inputs == ("c",)
    assert g.tensor("y").shape == (1, 4 * n, 8, 8) and g.macs == 4 * 4 * 9 * 64
    assert 0 < CountingDict.lookups <= 2 * n
