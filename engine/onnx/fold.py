"""Constant and shape folding for ONNX import, node by node with onnx's own inference and reference evaluator.

One pass in topological order gives every tensor its static shape (`onnx.shape_inference.infer_node_outputs`,
fed the values of constant inputs so Reshape, Expand, Range, Tile ... resolve) and, for tensors computed only
from constants and shapes, their values (`onnx.reference.ReferenceEvaluator` on that one node), whatever the op
type. Computations that read weights are never folded away: a matmul, conv or Einsum over weights alone stays
an op (its MACs count whether or not the file stores the weights); other ops over weights (a transpose, a
LayerNorm of a table) give a tensor derived from those weights. Sizes are checked before anything is allocated:
a constant larger than MAX_FOLD_ELEMENTS keeps its shape but is never evaluated.

A data-dependent count (a NonZero, an NMS) takes its assumed size (engine.onnx.counts), so shapes go on past
it; an If whose condition folds to a constant (torchvision's "no boxes?" test before NMS) is replaced by the
branch it takes, whose nodes are walked in its place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.errors import ModelFileError
from engine.onnx.counts import COUNTED, DataCounts, count_shapes
from engine.onnx.nodes import attr
from engine.onnx.read import MAX_TENSOR_ELEMENTS

MAX_FOLD_ELEMENTS = 1 << 16  # constants larger than this are data (masks, tables), not shape arithmetic
MAC_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "MatMulInteger", "QLinearMatMul", "QLinearConv",
           "ConvInteger"}
NOT_EVALUATED = {"If", "Loop", "Scan", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                 "Multinomial", "Bernoulli"}  # control flow and randomness: their values are not constants


@dataclass(frozen=True)
class Folded:
    """What folding learnt: shapes, constant values, weight lineage, and the nodes that stay ops."""

    shapes: dict  # tensor -> static shape, for every tensor whose shape is known
    values: dict  # tensor -> np.ndarray, for small constants computed without weights
    sources: dict  # every non-activation tensor -> frozenset of the weight tensors it derives from
    types: dict  # tensor -> ONNX element type, where known
    folded: frozenset  # names of nodes computed entirely at import time
    computed: frozenset  # names of nodes that compute from weights alone yet stay ops (they have MACs)
    nodes: tuple  # (name, node) walked, in order: the input's, each If whose branch is known replaced by it
    assumptions: tuple[str, ...]  # one sentence per data-dependent count assumed (engine.onnx.counts)
    counted: frozenset  # names of the nodes whose count was assumed


def fold(model: onnx.ModelProto, path, nodes, shapes: dict, types: dict, sources: dict, values: dict,
         counts: DataCounts) -> Folded:
    """Walk `nodes` ((name, NodeProto) in topological order) from the graph inputs' and initializers' facts,
    data-dependent counts at `counts`."""
    walker = _Walker(model, path, dict(shapes), dict(types), dict(sources), dict(values), counts,
                     {name for name, _ in nodes})
    for name, node in nodes:
        walker.visit(name, node)
    return Folded(walker.shapes, walker.values, walker.sources, walker.types, frozenset(walker.folded),
                  frozenset(walker.computed), tuple(walker.walked), tuple(walker.assumptions),
                  frozenset(walker.counted))


def too_large(path, what: str, shape, node: str | None = None) -> None:
    """Refuse a tensor too large for any real network before anything that size is allocated."""
    if math.prod(shape) > MAX_TENSOR_ELEMENTS:
        raise ModelFileError(path, f"{what} has shape {list(shape)}, {math.prod(shape):,} elements: too large to "
                                   f"be a real network's", node=node)


class _Walker:
    def __init__(self, model, path, shapes, types, sources, values, counts: DataCounts, names: set):
        self.model, self.path = model, path
        self.shapes, self.types, self.sources, self.values = shapes, types, sources, values
        self.counts, self.names = counts, names  # names: every node name in use, inlined ones too
        self.walked: list = []
        self.assumptions: list[str] = []
        self.counted: set[str] = set()
        self.written = {t for n in model.graph.node for t in n.output if t} | set(shapes)
        self.opsets = list(model.opset_import)
        self.opset = {imp.domain or "": imp.version for imp in model.opset_import}
        self.opset.setdefault("ai.onnx", self.opset.get("", 0))
        self.folded: set[str] = set()
        self.computed: set[str] = set()
        self.declared = _declared_shapes(model)

    def visit(self, name: str, node) -> None:
        ins = [t for t in node.input if t]
        outs = [t for t in node.output if t]
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and self._inline(name, node):
            return
        self.walked.append((name, node))
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            self._constant(name, node)
            return
        if node.op_type in ("Shape", "Size") and ins and ins[0] in self.shapes and node.domain in ("", "ai.onnx"):
            self._of_shape(name, node)
            return
        constant = all(t in self.sources for t in ins)
        weights = frozenset().union(*(self.sources[t] for t in ins)) if constant and ins else frozenset()
        self._infer(name, node)
        if not constant and node.op_type in COUNTED and node.domain in ("", "ai.onnx") \
                and any(t not in self.shapes for t in outs):
            self._assume(name, node)
        if not constant or not ins:
            return  # an op on activations (or a source without inputs, such as a random generator)
        if weights:
            if node.op_type in MAC_OPS:
                self.computed.add(name)  # a matmul over weights: an op, its output an activation
                return
            for t in outs:
                self.sources[t] = weights
            self._evaluate(name, node, ins, outs)
            return
        if node.op_type == "ConstantOfShape" and self._float_table(outs[0]):
            self.sources[outs[0]] = frozenset(outs)  # a weight stored as its shape (the onnx light models)
            self.folded.add(name)
            return
        for t in outs:
            self.sources[t] = frozenset()
        self.folded.add(name)
        self._evaluate(name, node, ins, outs)

    def _assume(self, name: str, node) -> None:
        """Shapes of a data-dependent count's outputs at its assumed count (none when its inputs have none)."""
        found = count_shapes(self.path, name, node, self.shapes, self.values, self.counts)
        if found is None:
            return
        out_shapes, sentence = found
        for t, shape in zip(node.output, out_shapes):
            if t:
                too_large(self.path, f"tensor '{t}'", shape, name)
                self.shapes[t] = shape
        self.assumptions.append(sentence)
        self.counted.add(name)

    def _inline(self, name: str, node) -> bool:
        """Walk the branch an If takes in its place, when its condition is a known constant; False otherwise
        (the If stays, and what reads it is left out as data-dependent)."""
        cond = self.values.get(node.input[0]) if node.input else None
        if cond is None or cond.size != 1:
            return False
        branch = attr(node, "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
        if branch is None or len(branch.output) != len(node.output):
            return False  # a malformed If: left as it is
        inner = {t for n in branch.node for t in n.output if t} | {i.name for i in branch.initializer}
        if inner & self.written:
            return False  # a branch that writes a name already written outside it: left as it is
        self.written |= inner
        steps = [helper.make_node("Constant", [], [i.name], value=i) for i in branch.initializer]
        steps += list(branch.node)
        steps += [helper.make_node("Identity", [o.name], [t]) for o, t in zip(branch.output, node.output) if t]
        for i, step in enumerate(steps):
            inner_name = f"{name}/{step.name or f'{step.op_type}_{i}'}"
            while inner_name in self.names:
                inner_name += "_"
            self.names.add(inner_name)
            self.visit(inner_name, step)
        return True

    def _float_table(self, tensor: str) -> bool:
        """True for a float tensor of more than one element: a weight when it comes from no activation."""
        return self.types.get(tensor) in FLOAT_TYPES and math.prod(self.shapes.get(tensor, (1,))) > 1

    # ---- constants -------------------------------------------------------
    def _constant(self, name: str, node) -> None:
        out = node.output[0]
        attr = next(iter(node.attribute), None)
        if attr is None:
            raise ModelFileError(self.path, "Constant node has no value attribute", node=name)
        if attr.name in ("value", "sparse_value"):
            t = attr.t if attr.name == "value" else attr.sparse_tensor.values
            dims = tuple(int(d) for d in (attr.t.dims if attr.name == "value" else attr.sparse_tensor.dims))
            self.shapes[out], self.types[out] = dims, t.data_type
            small = math.prod(dims) <= MAX_FOLD_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL
            if attr.name == "value" and small:
                self.values[out] = _array(t, self.path, name)
            self.sources[out] = frozenset([out]) if self._float_table(out) else frozenset()
            self.folded.add(name)
            return
        self.sources[out] = frozenset()
        self.folded.add(name)
        self._evaluate(name, node, [], [out])
        if out in self.values:
            self.shapes[out] = tuple(self.values[out].shape)

    def _of_shape(self, name: str, node) -> None:
        shape = np.array(self.shapes[node.input[0]], dtype=np.int64)
        if node.op_type == "Size":
            value = np.array(math.prod(shape.tolist()), dtype=np.int64)
        else:
            start, end = attr(node, "start", 0), attr(node, "end", None)
            value = shape[slice(start, end)]
        out = node.output[0]
        self.values[out], self.shapes[out] = value, tuple(value.shape)
        self.types[out], self.sources[out] = onnx.TensorProto.INT64, frozenset()
        self.folded.add(name)

    def _evaluate(self, name: str, node, ins: list[str], outs: list[str]) -> None:
        """Values of `outs` by the reference evaluator, when every input's value is known and the result is small."""
        if node.op_type in NOT_EVALUATED or any(t not in self.values for t in ins):
            return
        if node.op_type != "Constant" and any(t not in self.shapes or math.prod(self.shapes[t]) > MAX_FOLD_ELEMENTS
                                              for t in outs):
            return  # a large or shapeless result: its shape is all the engine needs
        from onnx.reference import ReferenceEvaluator

        graph = helper.make_graph([node], "fold", [_value_info(t, self.values[t]) for t in dict.fromkeys(ins)],
                                  [helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None) for t in outs])
        model = helper.make_model(graph, opset_imports=self.opsets, ir_version=self.model.ir_version or 8)
        try:  # constants may overflow or divide by zero (a mask's -inf): the value stands, numpy's warning is noise
            with np.errstate(all="ignore"):
                results = ReferenceEvaluator(model).run(None, {t: self.values[t] for t in dict.fromkeys(ins)})
        except Exception:  # an op the reference runtime lacks or rejects: its shape is still known from inference
            return
        for t, v in zip(outs, results):
            v = np.asarray(v)
            if v.dtype == object or v.size > MAX_FOLD_ELEMENTS:
                continue
            self.values[t], self.shapes[t] = v, tuple(int(d) for d in v.shape)

    # ---- shapes ----------------------------------------------------------
    def _infer(self, name: str, node) -> None:
        """Output shapes and types of `node` by onnx's inference for its op, fed known input values."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset.get(node.domain or "", 0), node.domain or "")
        except onnx.defs.SchemaError:
            schema = None
        inferred = {}
        if schema is not None and node.op_type not in ("If", "Loop", "Scan"):
            types, data = {}, {}
            for t in node.input:
                if not t:
                    continue
                shape = self.shapes.get(t)
                elem = self.types.get(t, onnx.TensorProto.UNDEFINED)
                if elem == onnx.TensorProto.UNDEFINED and shape is None:
                    continue
                types[t] = helper.make_tensor_type_proto(elem, shape)
                if t in self.values:
                    data[t] = numpy_helper.from_array(self.values[t], t)
            try:
                inferred = onnx.shape_inference.infer_node_outputs(schema, node, types, data,
                                                                   opset_imports=self.opsets)
            except Exception as err:  # onnx's inference errors come as several types
                if all(t in self.shapes for t in node.input if t):
                    text = (str(err).strip().splitlines() or [err.__class__.__name__])[-1]
                    raise ModelFileError(self.path, f"{node.op_type}: {text[:300]}", node=name) from None
        for out in (t for t in node.output if t):
            tp = inferred.get(out)
            if tp is not None and tp.HasField("tensor_type"):
                tt = tp.tensor_type
                if tt.elem_type:
                    self.types[out] = tt.elem_type
                if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                    shape = tuple(int(d.dim_value) for d in tt.shape.dim)
                    if any(d < 0 for d in shape):
                        raise ModelFileError(self.path, f"{node.op_type} gives '{out}' a negative dimension "
                                                        f"{list(shape)}", node=name)
                    too_large(self.path, f"tensor '{out}'", shape, name)
                    self._check_reshape(name, node, shape)
                    self.shapes[out] = shape
                    continue
            if out in self.declared:  # an op onnx cannot infer (another domain): the exporter's record
                self.shapes[out], self.types[out] = self.declared[out]


    def _check_reshape(self, name: str, node, shape: tuple[int, ...]) -> None:
        """Refuse a Reshape to a different number of elements (onnx's inference lets it pass): a file whose fixed
        sizes do not fit the input shapes, such as a torch.export file that baked in the batch of 1 it was traced at."""
        x = self.shapes.get(node.input[0]) if node.op_type == "Reshape" and node.input else None
        if x is not None and math.prod(x) != math.prod(shape):
            raise ModelFileError(self.path, f"Reshape of {list(x)} ({math.prod(x):,} elements) to {list(shape)} "
                                            f"({math.prod(shape):,}): the file's fixed sizes do not fit these input "
                                            f"shapes (an export traced at batch 1 may have fixed it; load at its "
                                            f"traced shapes)", node=name)


FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


def _declared_shapes(model) -> dict:
    """Static shapes the file records for intermediate tensors (value_info), with element types."""
    found = {}
    for vi in model.graph.value_info:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
            found[vi.name] = (tuple(int(d.dim_value) for d in tt.shape.dim), tt.elem_type)
    return found


def _value_info(name: str, value: np.ndarray):
    elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, elem, value.shape)


def _array(tensor, path, node: str) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # a tensor whose stored data does not decode
        raise ModelFileError(path, f"constant data does not decode ({err.__class__.__name__})", node=node) from None
