"""Shared fixtures: small ONNX models built in code, and the onnx package's light models."""

import pytest
from onnx import TensorProto, checker, helper

from engine.loading import onnx_light_models

LIGHT_MODELS = sorted(p.name for p in onnx_light_models().glob("*.onnx"))


@pytest.fixture
def light_dir():
    return onnx_light_models()


def conv_bn_relu_model(input_shape=(1, 3, 8, 8), opset=17, dynamic=False):
    """Input -> Conv(3x3, 4 ch) -> BN -> Relu -> MaxPool -> Flatten -> Gemm(10): weights as graph inputs."""
    x_shape = ["N", *input_shape[1:]] if dynamic else list(input_shape)
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("mean", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("var", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("fc_w", TensorProto.FLOAT, [10, 64]),
        helper.make_tensor_value_info("fc_b", TensorProto.FLOAT, [10]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [input_shape[0], 10])
    model = helper.make_model(helper.make_graph(nodes, "tiny", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    checker.check_model(model)
    return model
