"""What an ONNX node is to the engine: its OpKind and, for convolutions and pools, the window attributes.

Shapes are checked here against the attributes (a weight that does not fit its input, a kernel_shape that
disagrees with the weight), so a bad file fails naming the node rather than deep inside a cost model.
"""

from __future__ import annotations

import onnx

from engine.errors import ModelFileError
from engine.graph import OpKind
from engine.onnx.facts import Facts
from engine.onnx.ops import ACTIVATIONS, AFFINE, ELTWISE, KIND_BY_TYPE, POOLS


def classify(facts: Facts, name: str, node) -> tuple[OpKind, dict]:
    """The kind of node `name` and its window attributes (kernel, stride, padding, dilation, groups) or
    `trans_a` for a Gemm."""
    op_type = node.op_type
    a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
    if op_type in ("Conv", "ConvTranspose"):
        x, w = _conv_shapes(facts, name, node, a)
        group = int(a.get("group", 1))
        kind = OpKind.DWCONV if group > 1 and group == x[1] and op_type == "Conv" else OpKind.CONV
        return kind, _spatial(facts, name, node, a, tuple(w[2:]), x)
    if op_type in ("Gemm", "MatMul"):
        return OpKind.MATMUL, {"trans_a": int(a.get("transA", 0))}
    if op_type == "Einsum":
        return (OpKind.MATMUL if len(node.input) >= 2 else OpKind.OTHER), {}  # 3+: a chain of matmuls (build)
    if op_type in POOLS:
        x = facts.shape(node.input[0], name)  # the node's own view, before any folded reshape
        if len(x) < 3:
            raise ModelFileError(facts.path, f"{op_type} needs an input of rank 3 or more, got {list(x)}", node=name)
        if op_type.startswith("Global"):
            return OpKind.POOL, {"kernel": tuple(x[2:]), "stride": (1,) * (len(x) - 2),
                                 "padding": (0,) * (2 * (len(x) - 2)), "dilation": (1,) * (len(x) - 2)}
        kernel = tuple(a.get("kernel_shape", ()))
        if len(kernel) != len(x) - 2 or any(k < 1 for k in kernel):
            raise ModelFileError(facts.path, f"{op_type} kernel_shape {list(kernel)} does not fit input "
                                             f"{list(x)}", node=name)
        return OpKind.POOL, _spatial(facts, name, node, a, kernel, x)
    if op_type in ELTWISE or op_type in ACTIVATIONS or op_type in AFFINE:
        if op_type == "BatchNormalization":
            return OpKind.NORM, {}
        return OpKind.ELTWISE, {}
    if op_type == "LRN":  # the window across channels is its kernel (Yang's LRN layer reads it)
        if int(a.get("size", 0)) < 1:
            raise ModelFileError(facts.path, f"LRN needs a positive 'size' attribute, got {a.get('size')}", node=name)
        return OpKind.NORM, {"kernel": (int(a["size"]),)}
    return KIND_BY_TYPE.get(op_type, OpKind.OTHER), {}


def _conv_shapes(facts: Facts, name, node, a) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Input and weight shapes of a Conv/ConvTranspose, checked against each other, kernel_shape and group."""
    op, path = node.op_type, facts.path
    if len(node.input) < 2 or not node.input[0] or not node.input[1]:
        raise ModelFileError(path, f"{op} needs an input and a weight, got {len(node.input)} inputs", node=name)
    x, w = facts.shape(node.input[0], name), facts.shape(node.input[1], name)
    group = a.get("group", 1)
    if len(w) < 3 or len(x) != len(w):
        raise ModelFileError(path, f"{op} weight {list(w)} does not fit input {list(x)} (ranks must match, "
                                   f"3 or more)", node=name)
    if not isinstance(group, int) or not 1 <= group <= x[1] or x[1] % group:
        raise ModelFileError(path, f"{op} group {group} must divide the input's {x[1]} channels", node=name)
    channels_in = w[0] if op == "ConvTranspose" else w[1] * group
    if channels_in != x[1] or (op == "Conv" and w[0] % group):
        raise ModelFileError(path, f"{op} weight {list(w)} with group {group} does not fit input {list(x)}",
                             node=name)
    if "kernel_shape" in a and tuple(a["kernel_shape"]) != tuple(w[2:]):
        raise ModelFileError(path, f"{op} kernel_shape {list(a['kernel_shape'])} differs from its weight's "
                                   f"{list(w[2:])}", node=name)
    return x, w


def _spatial(facts: Facts, name, node, a, kernel, x) -> dict:
    """Kernel, stride, padding (auto_pad resolved from the inferred output), dilation and groups of a window op."""
    n = len(kernel)
    stride = tuple(a.get("strides", (1,) * n))
    dilation = tuple(a.get("dilations", (1,) * n))
    pads = tuple(a.get("pads", (0,) * (2 * n)))
    if (len(stride) != n or len(dilation) != n or len(pads) != 2 * n or min(stride + dilation) < 1
            or min(pads, default=0) < 0):
        raise ModelFileError(facts.path, f"{node.op_type} strides {list(stride)}, dilations {list(dilation)} or "
                                         f"pads {list(pads)} do not fit a {n}-D kernel", node=name)
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = facts.shape(node.output[0], name)[2:]
        total = [max((o - 1) * s + (k - 1) * d + 1 - i, 0)
                 for o, s, k, d, i in zip(out, stride, kernel, dilation, x[2:])]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        pads = tuple(small + big) if auto == "SAME_UPPER" else tuple(big + small)
    elif auto == "VALID":
        pads = (0,) * (2 * n)
    return {"kernel": tuple(int(k) for k in kernel), "stride": tuple(int(s) for s in stride),
            "padding": tuple(int(p) for p in pads), "dilation": tuple(int(d) for d in dilation),
            "groups": int(a.get("group", 1))}
