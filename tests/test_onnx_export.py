"""save_onnx: valid ONNX with no weight data, which the importer reads back to the identical graph."""

import json

import onnx
import pytest
from onnx import TensorProto

import engine
from engine import zoo
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs
from engine.onnx import save_onnx


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_roundtrip(tmp_path, name):
    graph = zoo.build(name)
    path = save_onnx(graph, tmp_path / f"{name}.onnx")
    assert engine.load_network(path) == graph


@pytest.mark.parametrize("name", ["googlenet", "densenet121", "transformer", "convnext_tiny"])
def test_roundtrip_keeps_batch(tmp_path, name):
    graph = zoo.build(name, batch=2)
    assert engine.load_network(save_onnx(graph, tmp_path / "m.onnx")) == graph


@pytest.mark.parametrize("name", ["squeezenet1_0", "inception_v3", "mobilenet_v3_small", "vit_b_16", "s3d",
                                  "deeplabv3_resnet50"])
def test_model_is_valid_and_weightless(tmp_path, name):
    graph = zoo.build(name)
    model = onnx.load(save_onnx(graph, tmp_path / "m.onnx"))
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    weights = json.loads(meta["engine.weights"])
    assert set(weights) == {t.name for t in graph.tensor_list if t.is_weight}
    assert meta["engine.name"] == name and int(meta["engine.batch"]) == 1
    inputs = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input}
    assert all(inputs[w] == graph.tensors[w].shape for w in weights)
    # no weight data: initializers are only shape/index constants and scalar clip bounds
    assert all(i.data_type == TensorProto.INT64 or len(i.dims) == 0 for i in model.graph.initializer)
    assert {n.name for n in model.graph.node} >= {op.name for op in graph.ops}


def test_batchnorm_buffers_are_inputs_not_weights(tmp_path):
    model = onnx.load(save_onnx(zoo.build("resnet18"), tmp_path / "m.onnx"))
    meta = {p.key: p.value for p in model.metadata_props}
    buffers = json.loads(meta["engine.buffers"])
    assert "bn1.running_mean" in buffers and "layer4.1.bn2.running_var" in buffers
    assert not set(buffers) & set(json.loads(meta["engine.weights"]))
    assert len(buffers) == 2 * sum(n.op_type == "BatchNormalization" for n in model.graph.node)


def test_preactivation_batchnorm_is_written_before_its_conv(tmp_path):
    """A BN-ReLU folded in front of a conv (DenseNet style) must be emitted on the conv's input channels."""
    x, w = Tensor("x", (1, 8, 6, 6)), Tensor("c.weight", (4, 8, 3, 3), True)
    bn = [Tensor("bn.weight", (8,), True), Tensor("bn.bias", (8,), True)]
    conv = Op("c", OpKind.CONV, ("x",), ("relu",), ("c.weight", "bn.weight", "bn.bias"), kernel=(3, 3),
              stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), macs=conv_macs((1, 4, 6, 6), 8, (3, 3)),
              source_type="Conv", merged=(("c", "Conv"), ("bn", "BatchNormalization"), ("relu", "Relu")))
    pool = Op("p", OpKind.POOL, ("x",), ("p",), kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
              dilation=(1, 1), source_type="MaxPool", merged=(("p", "MaxPool"),))
    graph = Graph.build("pre", [pool, conv], [x, w, *bn, Tensor("relu", (1, 4, 6, 6)), Tensor("p", (1, 8, 3, 3))],
                        ["x"], ["p", "relu"])
    path = save_onnx(graph, tmp_path / "pre.onnx")
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    back = engine.load_network(path)
    assert (back.ops, dict(back.tensors), back.outputs) == (graph.ops, dict(graph.tensors), graph.outputs)
    order = [n.op_type for n in model.graph.node]
    assert order.index("BatchNormalization") < order.index("Conv")


def test_a_graph_resting_on_data_dependent_counts_is_not_saved(tmp_path):
    from tests.test_onnx_import import detector_with_data_dependent_tail

    path = tmp_path / "detector.onnx"
    path.write_bytes(detector_with_data_dependent_tail().SerializeToString())
    graph = engine.load_network(path)
    with pytest.raises(engine.GraphError, match=r"rests on data-dependent counts \(NonZero 'keep' keeps 64"):
        save_onnx(graph, tmp_path / "again.onnx")
