"""Hostile ONNX files: every one gives engine.EngineError (or loads), never another exception, a hang or a blow-up."""

import os
import resource
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.__main__ import main as cli
from tests.conftest import conv_bn_relu_model
from tests.fuzz_cases import cases, run_case


def _save(tmp_path, model, name="model.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _model(nodes, inputs, outputs, initializer=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _conv(tmp_path, x_shape, w_shape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones(w_shape, dtype=np.float32), "w")
    return _save(tmp_path, _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], [x], [y], [w]))


@pytest.mark.parametrize("x_shape, w_shape, attrs, message", [
    ((1, 4, 8, 8), (8, 8, 3, 3), {}, "does not fit input"),  # 8 input channels in the weight, 4 in the input
    ((1, 4, 8, 8), (8, 4, 1000, 3), {"kernel_shape": [3, 3]}, "kernel_shape \\[3, 3\\] differs"),
    ((1, 4, 8, 8), (8, 4, 3, 3), {"group": 0}, "group 0 must divide"),
    ((1, 4, 8, 8), (8, 4, 3, 3), {"group": 3}, "group 3 must divide"),
    ((1, 4, 8, 8), (8, 4, 3, 3), {"group": 2**62}, "must divide"),
    ((1, 4, 8, 8), (8, 1, 3, 3), {"group": 2}, "does not fit input"),
])
def test_conv_weight_is_checked_against_input_kernel_and_group(tmp_path, x_shape, w_shape, attrs, message):
    with pytest.raises(engine.ModelFileError, match=message) as err:
        engine.load_network(_conv(tmp_path, x_shape, w_shape, **attrs))
    assert err.value.node == "conv"


def test_conv_with_one_input_and_lrn_without_size(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    for node, message in ((helper.make_node("Conv", ["x"], ["y"], name="c"), "Conv"),
                          (helper.make_node("LRN", ["x"], ["y"], name="lrn"), "size")):
        with pytest.raises(engine.ModelFileError, match=message):
            engine.load_network(_save(tmp_path, _model([node], [x], [y])))


def test_dangling_output_zero_op_graph_duplicate_writer_and_long_identity_chain(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    ghost = helper.make_tensor_value_info("ghost", TensorProto.FLOAT, None)
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    with pytest.raises(engine.ModelFileError, match="graph output 'ghost' is produced by no node"):
        engine.load_network(_save(tmp_path, _model([relu], [x], [y, ghost])))
    flatten = helper.make_node("Flatten", ["x"], ["y"], name="flatten")
    with pytest.raises(engine.ModelFileError, match="no op to model.*Flatten"):
        engine.load_network(_save(tmp_path, _model([flatten], [x], [y])))
    twice = [relu, helper.make_node("Sigmoid", ["x"], ["y"], name="sigmoid")]
    with pytest.raises(engine.ModelFileError, match="tensor 'y' is written twice") as err:
        engine.load_network(_save(tmp_path, _model(twice, [x], [y])))
    assert err.value.node == "sigmoid"
    chain = [helper.make_node("Identity", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}"], name=f"id{k}")
             for k in range(1500)] + [helper.make_node("Relu", ["t1499"], ["y"], name="relu")]
    g = engine.load_network(_save(tmp_path, _model(chain, [x], [y])))
    assert [op.name for op in g.ops] == ["relu"] and len(g.ops[0].merged) == 1501


@pytest.mark.parametrize("size", [30_000_000, 2**40, 2**62])
def test_shape_bombs_are_neither_evaluated_nor_allocated(tmp_path, size):
    """The 179-byte file: an int64 shape feeding ConstantOfShape -> Cast -> Add (3.6 GB and 20 s before)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    out = helper.make_tensor_value_info("bomb_out", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([size], dtype=np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="bomb"),
             helper.make_node("Cast", ["c"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "f"], ["bomb_out"], name="add"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    path = _save(tmp_path, _model(nodes, [x], [y, out], [shape]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()  # CPU seconds: a loaded machine must not decide the verdict
    try:
        g = engine.load_network(path)
        assert [op.name for op in g.ops] == ["relu"]  # a constant computation: nothing to model
    except engine.ModelFileError as err:
        assert "too large" in str(err) and size > 2**40
    assert time.process_time() - start < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB: no buffer of that size


def test_external_data_is_never_read_and_never_leaves_the_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    os.symlink(tmp_path / "secret.bin", folder / "link.bin")
    for location, allowed in (("weights.bin", True), ("../secret.bin", False), (str(tmp_path / "secret.bin"), False),
                              ("link.bin", False), ("sub/../../secret.bin", False)):
        for on_constant in (False, True):
            path = _save(folder, _external_matmul(location, on_constant))
            if allowed:  # the file does not even exist: shapes come from the model, the data is never read
                assert engine.load_network(path).macs == 16
            else:
                with pytest.raises(engine.ModelFileError, match="outside the model's folder"):
                    engine.load_network(path)


def _external_matmul(location: str, on_constant: bool) -> onnx.ModelProto:
    """x @ c, with c's data said to lie in the external file `location` (an initializer or a Constant's value)."""
    tensor = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "c")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("MatMul", ["x", "c"], ["y"], name="mm")]
    if on_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["c"], name="const", value=tensor))
    return _model(nodes, [x], [y], [] if on_constant else [tensor])


def _short_initializer():
    """4 floats of data under dims [8]."""
    init = numpy_helper.from_array(np.ones(4, np.float32), "short")
    init.dims[:] = [8]
    return init


@pytest.mark.parametrize("mutate, message", [
    (lambda m: onnx.helper.set_model_props(m, {"engine.weights": "{"}), "metadata 'engine.weights'"),
    (lambda m: onnx.helper.set_model_props(m, {"engine.batch": "-3"}), "metadata 'engine.batch'"),
    (lambda m: onnx.helper.set_model_props(m, {"engine.buffers": "[1]"}), "metadata 'engine.buffers'"),
    (lambda m: m.graph.initializer.append(TensorProto(name="bad", data_type=0, dims=[2], int64_data=[1, 2])),
     "undefined or unknown data type"),
    (lambda m: m.graph.initializer.append(_short_initializer()), "holds 16 bytes of data for dims \\[8\\]"),
    (lambda m: m.graph.input[0].type.tensor_type.shape.dim[2].__setattr__("dim_value", 2**62), "too large"),
])
def test_bad_metadata_dtypes_sizes_and_dims(tmp_path, mutate, message):
    model = conv_bn_relu_model()
    mutate(model)
    with pytest.raises(engine.ModelFileError, match=message):
        engine.load_network(_save(tmp_path, model))


def test_graph_cache_is_keyed_by_content_not_name(tmp_path, light_dir):
    path = tmp_path / "model.onnx"
    path.write_bytes((light_dir / "light_squeezenet.onnx").read_bytes())
    first = engine.load_network(path)
    path.write_bytes((light_dir / "light_bvlc_alexnet.onnx").read_bytes())
    second = engine.load_network(path)
    assert first.macs != second.macs and len(second.ops) < len(first.ops)
    path.write_bytes(b"garbage")
    with pytest.raises(engine.ModelFileError, match="not an ONNX model"):
        engine.load_network(path)
    for name in ("..", "a\0b.onnx", "x" * 305 + ".onnx"):
        with pytest.raises(engine.EngineError):
            engine.load_network(tmp_path / name)


def test_batch_and_word_bits_bounds():
    for batch in (0, 10**9, 10**12, 2**50, True):
        with pytest.raises(engine.EngineError, match="batch"):
            engine.load_network("resnet18", batch=batch)
    with pytest.raises(engine.EngineError, match="word_bits"):
        engine.partition(engine.load_network("resnet18"), {"conv"}, word_bits=-8)


def test_cli_exits_with_one_line_never_a_traceback(tmp_path, capsys):
    calls = [["sweep", "--networks", "resnet18", "--buffers", "64K", "--scheduler", "bogus"],
             ["sweep", "--networks", "resnet18", "--buffers", "64K", "--out", str(tmp_path / "missing" / "x.parquet")],
             ["info", str(tmp_path / "nope.onnx")], ["info", "resnet18", "--input-shape", "x"]]
    for argv in calls:
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "missing").exists()
    with pytest.raises(SystemExit) as exit_:
        cli(["info", "resnet18", "--word-bits", "-8"])
    assert exit_.value.code == 2 and "word bits must be a whole number in 1..64" in capsys.readouterr().err


def test_cli_binds_input_shapes(tmp_path, capsys):
    path = _save(tmp_path, conv_bn_relu_model(dynamic=True))
    assert cli(["info", str(path), "--input-shape", "x=2x3x8x8"]) == 0
    assert "batch 2" in capsys.readouterr().out


def test_fuzz_only_engine_errors(tmp_path, monkeypatch):
    """200 seeded mutations of three small models through load_network, fuse, evaluate, allocate, partition and
    plan_modules: each loads and runs, or stops with EngineError (benchmarks/fuzz_onnx.py runs thousands). The
    size-stress cases come at 1/500 of the benchmark's sizes, with windowed fusion from 100 ops on."""
    from engine.fusion import windowed
    from tests.fuzz_cases import STRESS

    monkeypatch.setattr(windowed, "WINDOW_ABOVE", 100)
    monkeypatch.setattr(windowed, "WINDOW_OPS", 40)
    path = tmp_path / "case" / "model.onnx"
    path.parent.mkdir()
    outcomes = {}
    stressed = 0
    for label, data in cases(7, 200, scale=0.002):
        path.write_bytes(data)
        outcome, detail = run_case(path)
        assert outcome in ("ok", "engine_error"), (label, detail)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        stressed += label.rsplit(":", 1)[1] in STRESS and outcome == "ok"
    assert outcomes["ok"] > 30 and outcomes["engine_error"] > 100  # both paths exercised
    assert stressed >= 10  # size-stress cases that ran every step


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    """Found by the fuzz run: a flipped byte in a node name made allocate compare str with bytes."""
    data = conv_bn_relu_model().SerializeToString().replace(b"conv", b"con\xb1", 1)
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    with pytest.raises(engine.ModelFileError, match="not UTF-8 text"):
        engine.load_network(path)


def test_a_symlink_loop_or_a_nul_as_external_data_location_is_refused_and_shown_escaped(tmp_path):
    os.symlink(tmp_path / "loop.bin", tmp_path / "loop.bin")
    for location, shown in (("loop.bin", "'loop.bin'"), ("w\0.bin", "'w\\\\x00.bin'")):
        path = _save(tmp_path, _external_matmul(location, on_constant=False))
        with pytest.raises(engine.ModelFileError, match=f"external data {shown} of initializer 'c'") as err:
            engine.load_network(path)
        assert "\0" not in str(err.value)


def _einsum3(tmp_path, equation: str, name: str = "model.onnx"):
    """x[2, 3] times weights b[3, 4] and c[4, 5] in one Einsum node 'ein' of `equation`, saved."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    b = numpy_helper.from_array(np.ones((3, 4), np.float32), "b")
    c = numpy_helper.from_array(np.ones((4, 5), np.float32), "c")
    node = helper.make_node("Einsum", ["x", "b", "c"], ["y"], name="ein", equation=equation)
    return _save(tmp_path, _model([node], [x], [y], [b, c]), name)


def test_einsum_of_three_operands_counts_each_pairwise_contraction(tmp_path):
    g = engine.load_network(_einsum3(tmp_path, "ij,jk,kl->il"))
    assert g.macs == 2 * 3 * 4 + 2 * 4 * 5  # (x b) then (xb c), the order onnxruntime uses
    assert engine.load_network(_einsum3(tmp_path, "...j,jk,kl->...l", "b.onnx")).macs == 2 * 3 * 4 + 2 * 4 * 5
    with pytest.raises(engine.ModelFileError, match="Einsum.*does not match the operands") as err:
        engine.load_network(_einsum3(tmp_path, "ij,jk->ik", "w.onnx"))
    assert err.value.node == "ein"


def test_einsum_of_three_operands_is_a_chain_of_matmuls_that_block_and_fuse(tmp_path):
    """Kind `other` before: no loop nest to block, never fused. Now the two GEMMs onnxruntime runs, the running
    result (2 x 4) between them, which fusion keeps on chip."""
    from engine.blocking.layer import Layer

    g = engine.load_network(_einsum3(tmp_path, "ij,jk,kl->il"))
    assert [(op.name, op.kind, op.inputs, op.weights, op.macs) for op in g.ops] == [
        ("ein/einsum1", engine.OpKind.MATMUL, ("x",), ("b",), 2 * 3 * 4),
        ("ein", engine.OpKind.MATMUL, ("ein/einsum1",), ("c",), 2 * 4 * 5)]
    assert g.tensors["ein/einsum1"].shape == (2, 4) and g.outputs == ("y",)
    assert [Layer.from_op(g, op).macs for op in g.ops] == [24, 40]
    plan = engine.fuse(g, engine.Accelerator.preset("optimus"))
    assert plan.groups == (("ein/einsum1", "ein"),) and plan.dram_bytes == (6 + 12 + 20 + 10) * 2  # 16-bit words


def test_batch_never_rewrites_a_fixed_first_dimension_other_than_one(tmp_path):
    path = _conv(tmp_path, (8, 4, 8, 8), (8, 4, 3, 3))
    assert engine.load_network(path).tensors["x"].shape == (8, 4, 8, 8)
    assert engine.load_network(path, batch=8).tensors["x"].shape == (8, 4, 8, 8)
    with pytest.raises(engine.ShapeError, match="input 'x' has a fixed first dimension 8, and batch=1"):
        engine.load_network(path, batch=1)
    one = _conv(tmp_path, (1, 4, 8, 8), (8, 4, 3, 3))  # a first dimension of 1 is the batch, as in the zoo's files
    assert engine.load_network(one, batch=2).tensors["x"].shape == (2, 4, 8, 8)


def test_a_zero_dimension_is_reported_as_zero(tmp_path):
    with pytest.raises(engine.ShapeError, match="declares dimension 2 as 0.*at least 1"):
        engine.load_network(_conv(tmp_path, (1, 4, 0, 8), (8, 4, 3, 3)))


def test_constants_that_overflow_fold_without_numpy_warnings(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    consts = [numpy_helper.from_array(np.full(4, v, np.float32), n) for n, v in (("one", 1), ("zero", 0), ("big", 3e38))]
    nodes = [helper.make_node("Div", ["one", "zero"], ["inf"], name="div"),
             helper.make_node("Mul", ["big", "big"], ["huge"], name="mul"),
             helper.make_node("Cast", ["huge"], ["i"], name="cast", to=TensorProto.INT32),
             helper.make_node("Cast", ["i"], ["f"], name="back", to=TensorProto.FLOAT),
             helper.make_node("Add", ["inf", "f"], ["c"], name="sum"), helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = engine.load_network(_save(tmp_path, _model(nodes, [x], [y], consts)))
    assert [str(w.message) for w in caught] == []
    assert [op.name for op in g.ops] == ["add"]


def test_a_huge_or_garbage_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    def never(self):
        raise AssertionError(f"{self} was read whole")

    huge, garbage = tmp_path / "huge.onnx", tmp_path / "garbage.onnx"
    with huge.open("wb") as f:  # sparse: no disk is spent
        f.truncate(engine.onnx.read.MAX_FILE_BYTES + 1)
    with garbage.open("wb") as f:
        f.write(bytes([0x08, 0x07, 0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]))  # ir_version 7, then a 4 GB graph field
        f.truncate(engine.onnx.read.MAX_FILE_BYTES - 1)
    monkeypatch.setattr(type(huge), "read_bytes", never)
    with pytest.raises(engine.ModelFileError, match="2,147,483,649 bytes, larger than the 2 GB"):
        engine.load_network(huge)
    with pytest.raises(engine.ModelFileError, match=r"not an ONNX model \(field 7 of 4,294,967,295 bytes running "
                                                    r"past the end at byte 8\)"):
        engine.load_network(garbage)
    for text in (b"\x00garbage", b"\x08\x07", b"\x12\x02hi"):  # field 0; no graph; a name and no graph
        garbage.write_bytes(text)
        with pytest.raises(engine.ModelFileError, match="not an ONNX model"):
            engine.load_network(garbage)


def test_the_272_byte_depthwise_conv_2_to_the_31_wide_is_refused_by_fuse_not_costed_wrong(tmp_path):
    path = _conv(tmp_path, (1, 4, 6, 2**31), (4, 1, 3, 3), group=4, strides=[2, 2])
    g = engine.load_network(path)
    assert g.tensors["y"].shape == (1, 4, 2, 2**30 - 1)
    with pytest.raises(engine.EngineError, match="tensor 'x' of shape \\[1, 4, 6, 2147483648\\] is too large to cost"):
        engine.fuse(g, engine.Accelerator.preset("optimus"))
