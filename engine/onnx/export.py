"""Graph -> ONNX without weight data: each Op becomes its main node plus its folded nodes, so importing gives it back.

Weights (and BatchNorm running statistics) become graph inputs with static shapes; metadata
names them ("engine.weights", "engine.buffers") so the importer keeps parameters and drops buffers.
The IR does not store reshape targets, transpose permutations, concat/split axes or slice bounds;
they are recovered from the tensor shapes on both sides (any choice that yields those shapes
imports to the same Graph).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.errors import GraphError
from engine.graph import Graph, Op, OpKind
from engine.onnx.ops import PASSTHROUGH

OPSET = 17
WEIGHTS_PER_FOLD = {"BatchNormalization": 2, "Mul": 1, "Add": 1, "Sub": 1, "Div": 1, "PRelu": 1}
NEWER_OPS = {"Gelu": 20, "RMSNormalization": 23, "RotaryEmbedding": 23, "Swish": 24}  # op type -> first opset with it


def save_onnx(graph: Graph, path) -> Path:
    """Write `graph` as a standard ONNX model with no weight data (passes onnx.checker); returns the path."""
    path = Path(path)
    onnx.save_model(to_model(graph), path)
    return path


def to_model(graph: Graph) -> onnx.ModelProto:
    """The ONNX model `save_onnx` writes; a graph that rests on data-dependent counts (a detector's) is refused:
    its NonZero and NMS ops cannot be written back from shapes alone."""
    if graph.assumptions:
        raise GraphError(f"graph '{graph.name}' rests on data-dependent counts ({graph.assumptions[0]}"
                         f"{' ...' if len(graph.assumptions) > 1 else ''}); save_onnx writes only graphs whose sizes "
                         f"follow from their input shapes")
    writer = _Writer(graph)
    for op in graph.ops:
        writer.emit(op)
    return writer.model()


class _Writer:
    def __init__(self, graph: Graph):
        self.g = graph
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        self.buffers: list[tuple[str, tuple[int, ...]]] = []
        self.read_as: dict[str, str] = {}  # IR tensor -> ONNX tensor its readers read (after folded reshapes)
        self.view: dict[str, tuple[int, ...]] = {}  # IR tensor -> shape its readers see, where a reshape changed it

    # ---- model -------------------------------------------------------------
    def model(self) -> onnx.ModelProto:
        g = self.g
        weights = [t for t in g.tensor_list if t.is_weight]
        inputs = [helper.make_tensor_value_info(t, self._input_type(t), g.tensors[t].shape) for t in g.inputs]
        inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, t.shape) for t in weights]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in self.buffers]
        outputs = [helper.make_tensor_value_info(self.read_as.get(t, t), TensorProto.FLOAT,
                                                 self.view.get(t, g.tensors[t].shape)) for t in g.outputs]
        opset = max([OPSET] + [NEWER_OPS.get(n.op_type, 0) for n in self.nodes])
        model = helper.make_model(helper.make_graph(self.nodes, g.name, inputs, outputs, initializer=self.constants),
                                  opset_imports=[helper.make_opsetid("", opset)], producer_name="engine")
        helper.set_model_props(model, {"engine.name": g.name, "engine.batch": str(g.batch),
                                       "engine.weights": json.dumps([t.name for t in weights]),
                                       "engine.buffers": json.dumps([n for n, _ in self.buffers])})
        return model

    def _input_type(self, t: str) -> int:
        """INT64 for token ids (a network input only embeddings read, as Gather indices), FLOAT otherwise."""
        readers = [self.g.op(r) for r in self.g.consumers(t)]
        return TensorProto.INT64 if readers and all(r.source_type == "Gather" for r in readers) else TensorProto.FLOAT

    def _const(self, name: str, values, dtype=np.int64) -> str:
        self.constants.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def _node(self, op_type: str, inputs, outputs, name: str, **attrs) -> None:
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))

    # ---- one op --------------------------------------------------------------
    def emit(self, op: Op) -> None:
        main_name, main_type = op.merged[0] if op.merged else (op.name, op.source_type)
        folded = list(op.merged[1:])
        counts = [WEIGHTS_PER_FOLD.get(t, 0) for _, t in folded]
        own_count = len(op.weights) - sum(counts)
        own, rest = list(op.weights[:own_count]), list(op.weights[own_count:])
        fold_weights = []
        for c in counts:
            fold_weights.append(rest[:c])
            rest = rest[c:]
        n_pre = self._pre_count(op, folded, fold_weights)
        ins = [self.read_as.get(t, t) for t in op.inputs]
        if n_pre:
            cur = ins[0]
            for (node, op_type), ws in zip(folded[:n_pre], fold_weights[:n_pre]):
                cur = self._fold(node, op_type, cur, ws, f"{node}:out", self.g.tensors[op.inputs[0]].shape)
            ins[0] = cur
        post = list(zip(folded[n_pre:], fold_weights[n_pre:]))
        if len(op.outputs) > 1 and post:
            raise GraphError(f"op '{op.name}': cannot export folded nodes after an op with several outputs")
        last_real = max((i for i, ((_, t), _) in enumerate(post) if t not in PASSTHROUGH), default=-1)
        main_out = list(op.outputs) if last_real < 0 else [f"{main_name}:out"]
        self._main(op, main_name, main_type, ins, own, main_out)
        cur = main_out[0]
        out = op.outputs[0]
        for i, ((node, op_type), ws) in enumerate(post):
            target = f"{node}:out" if i != last_real else out
            shape = self.view.get(out, self.g.tensors[out].shape)
            if op_type == "Flatten":
                shape = (shape[0], math.prod(shape[1:]))
            elif op_type in PASSTHROUGH and i > last_real:
                shape = self._demand(out)
            if i > last_real:
                self.view[out] = shape
            cur = self._fold(node, op_type, cur, ws, target, shape)
        if post and post[-1][0][1] in PASSTHROUGH:
            self.read_as[out] = cur

    def _pre_count(self, op: Op, folded, fold_weights) -> int:
        """How many folded nodes ran before the main node: leading BatchNorm/scale groups sized for the input.

        A group (affine node plus the activations after it) counts as "pre" while its parameter size
        matches the input's channels and not the output's; when both match, the IR is the same either way.
        """
        if op.kind not in (OpKind.CONV, OpKind.DWCONV, OpKind.MATMUL) or not folded:
            return 0
        axis = 1 if op.kind is not OpKind.MATMUL else -1
        c_in = self.g.tensors[op.inputs[0]].shape[axis]
        c_out = self.g.tensors[op.outputs[0]].shape[axis]
        count = 0
        i = 0
        while i < len(folded) and fold_weights[i]:
            size = self.g.tensors[fold_weights[i][0]].elements
            if size != c_in or size == c_out:
                break
            i += 1
            while i < len(folded) and not fold_weights[i] and folded[i][1] not in PASSTHROUGH:
                i += 1
            count = i
        return count

    def _fold(self, node: str, op_type: str, x: str, weights, out: str, shape) -> str:
        """Emit one folded node reading `x`; `shape` is its output's shape (used by reshape-like nodes)."""
        if op_type == "BatchNormalization":
            stats = [f"{node}.running_mean", f"{node}.running_var"]
            size = self.g.tensors[weights[0]].shape
            self.buffers += [(s, size) for s in stats]
            self._node(op_type, [x, *weights, *stats], [out], node)
        elif op_type == "Flatten":
            self._node(op_type, [x], [out], node, axis=1)
        elif op_type == "Reshape":
            self._node(op_type, [x, self._const(f"{node}.shape", shape)], [out], node)
        elif op_type == "Clip":
            lo, hi = self._const(f"{node}.min", 0.0, np.float32), self._const(f"{node}.max", 6.0, np.float32)
            self._node(op_type, [x, lo, hi], [out], node)
        elif op_type == "HardSigmoid":
            self._node(op_type, [x], [out], node, alpha=1.0 / 6, beta=0.5)
        else:
            self._node(op_type, [x, *weights], [out], node)
        return out

    # ---- main nodes ----------------------------------------------------------
    def _main(self, op: Op, name: str, op_type: str, ins, own, outs) -> None:
        g = self.g
        out_shapes = [g.tensors[t].shape for t in op.outputs]
        in_shapes = [self.view.get(t, g.tensors[t].shape) for t in op.inputs]
        attrs = {}
        if op_type == "Conv":
            attrs = dict(kernel_shape=op.kernel, strides=op.stride, pads=op.padding, dilations=op.dilation,
                         group=op.groups)
        elif op_type == "Gemm":
            attrs = {"transB": int(g.tensors[own[0]].shape[0] == out_shapes[0][-1])}
        elif op_type in ("MaxPool", "AveragePool"):
            attrs = dict(kernel_shape=op.kernel, strides=op.stride, pads=op.padding)
            if _ceil_needed(in_shapes[0], out_shapes[0], op):
                attrs["ceil_mode"] = 1
        elif op_type == "Concat":  # parameters (ViT's class token) come first, broadcast over the batch
            parts = []
            for w in own:
                shape = (out_shapes[0][0], *g.tensors[w].shape[1:])
                self._node("Expand", [w, self._const(f"{w}.expand_shape", shape)], [f"{w}:expanded"], f"{w}.expand")
                parts.append(shape)
            ins, own = [f"{w}:expanded" for w in own] + ins, []
            attrs = {"axis": _cat_axis(parts + in_shapes, out_shapes[0])}
        elif op_type == "Split":
            axis = _cat_axis(out_shapes, in_shapes[0])
            ins = [*ins, self._const(f"{name}.split", [s[axis] for s in out_shapes])]
            attrs = {"axis": axis}
        elif op_type == "Slice":
            ins = [*ins, *self._slice_inputs(name, in_shapes[0], out_shapes[0])]
        elif op_type == "Transpose":
            attrs = {"perm": _perm(in_shapes[0], out_shapes[0])}
        elif op_type == "Softmax":
            attrs = {"axis": -1}
        elif op_type in ("LayerNormalization", "RMSNormalization"):
            attrs = {"axis": -1}
        elif op_type == "Gather":  # an embedding: the table is the data, the activation holds the indices
            ins, own = [*own, *ins], []
            attrs = {"axis": 0}
        elif op_type == "RotaryEmbedding":  # cos/sin of each position: buffers computed from positions, not parameters
            n, _, length, dh = in_shapes[0]
            caches = [f"{name}.cos_cache", f"{name}.sin_cache"]
            self.buffers += [(c, (n, length, dh // 2)) for c in caches]
            ins = [*ins, *caches]
        elif op_type == "BatchNormalization":
            stats = [f"{name}.running_mean", f"{name}.running_var"]
            self.buffers += [(s, g.tensors[own[0]].shape) for s in stats]
            own = [*own, *stats]
        elif op_type == "Resize":
            ins = [*ins, "", "", self._const(f"{name}.sizes", out_shapes[0])]
            attrs = {"mode": "linear"}
        elif op_type == "Pad":
            gap = [o - i for i, o in zip(in_shapes[0], out_shapes[0])]
            ins = [*ins, self._const(f"{name}.pads", [d // 2 for d in gap] + [d - d // 2 for d in gap])]
        self._node(op_type, [*ins, *own], outs, name, **attrs)

    def _slice_inputs(self, name: str, x, y) -> list[str]:
        """Starts, ends, axes, steps of a Slice taking shape `x` to `y`: a stride when it divides, else a prefix."""
        axes = [a for a in range(len(x)) if x[a] != y[a]]
        steps = [x[a] // y[a] if y[a] > 1 and x[a] % y[a] == 0 else 1 for a in axes]
        ends = [x[a] if s > 1 else y[a] for a, s in zip(axes, steps)]
        return [self._const(f"{name}.starts", [0] * len(axes)), self._const(f"{name}.ends", ends),
                self._const(f"{name}.axes", axes), self._const(f"{name}.steps", steps)]

    # ---- reshape targets -------------------------------------------------------
    def _demand(self, t: str) -> tuple[int, ...]:
        """The shape the readers of IR tensor `t` need (a folded reshape changed it; the IR keeps the old one)."""
        g = self.g
        have = g.tensors[t].shape
        readers = g.consumers(t)
        if not readers:
            return have
        op = g.op(readers[0])
        out = g.tensors[op.outputs[0]].shape
        if op.source_type == "Gemm":
            w = g.tensors[op.weights[0]].shape
            return (out[0], w[1] if w[0] == out[-1] else w[0])
        if op.source_type == "MatMul":
            if op.weights and op.inputs[0] == t:
                return (*out[:-1], g.tensors[op.weights[0]].shape[0])
            if op.inputs[0] == t:
                return (*out[:-1], math.prod(have) // math.prod(out[:-1]))
            return (*out[:-2], math.prod(have) // (math.prod(out[:-2]) * out[-1]), out[-1])
        if op.kind in (OpKind.CONV, OpKind.DWCONV):
            c_in = g.tensors[op.weights[0]].shape[1] * op.groups
            return _complete(have, (out[0], c_in), len(out) - 2)
        if op.source_type == "Transpose":
            return _transposed_source(have, out)
        if op.source_type == "Split":
            outs = [g.tensors[o].shape for o in op.outputs]
            for axis in range(len(outs[0])):
                whole = (*outs[0][:axis], sum(s[axis] for s in outs), *outs[0][axis + 1:])
                if _compatible(have, whole):
                    return whole
        return have


def _ceil_needed(x, y, op: Op) -> bool:
    n = len(op.kernel)
    floor = [(x[2 + i] + op.padding[i] + op.padding[n + i] - op.kernel[i]) // op.stride[i] + 1 for i in range(n)]
    return tuple(floor) != tuple(y[2:])


def _cat_axis(parts, whole) -> int:
    """The axis along which `parts` stack to `whole`."""
    for axis in range(len(whole)):
        others = all(p[:axis] + p[axis + 1:] == whole[:axis] + whole[axis + 1:] for p in parts)
        if others and sum(p[axis] for p in parts) == whole[axis]:
            return axis
    raise GraphError(f"no axis concatenates shapes {list(parts)} into {whole}")


def _perm(x, y) -> list[int]:
    """A permutation taking shape `x` to `y`, the identity where it fits."""
    for perm in itertools.permutations(range(len(x))):
        if tuple(x[p] for p in perm) == tuple(y):
            return list(perm)
    raise GraphError(f"no transpose takes shape {x} to {y}")


def _transposed_source(have, out) -> tuple[int, ...]:
    """A shape, reachable from `have` by reshape, that some permutation turns into `out`."""
    for perm in itertools.permutations(range(len(out))):
        source = [0] * len(out)
        for i, p in enumerate(perm):
            source[p] = out[i]
        if _compatible(have, tuple(source)):
            return tuple(source)
    raise GraphError(f"no reshape + transpose takes shape {have} to {out}")


def _compatible(a, b) -> bool:
    """True when a reshape between the shapes only splits and merges adjacent axes (both refine one shape).

    That holds when the running products of both, merged and sorted, each divide the next: e.g.
    (N, 8, 4L, dh) and (N, 32, L, dh) (grouped-query heads) share the refinement (N, 8, 4, L, dh).
    """
    if math.prod(a) != math.prod(b):
        return False
    cuts = sorted(set(itertools.accumulate(a, operator.mul)) | set(itertools.accumulate(b, operator.mul)))
    return all(hi % lo == 0 for lo, hi in zip(cuts, cuts[1:]))


def _complete(have, lead, n_rest: int) -> tuple[int, ...]:
    """`lead` followed by the last `n_rest` axes of `have` (a reshape that regroups only the leading axes)."""
    rest = tuple(have[len(have) - n_rest:])
    if math.prod(lead) * math.prod(rest) != math.prod(have):
        raise GraphError(f"cannot regroup shape {have} as {lead} + {n_rest} spatial axes")
    return (*lead, *rest)
