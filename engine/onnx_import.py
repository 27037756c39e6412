"""ONNX -> Graph: checks the file, infers shapes, folds constants and merges simple ops.

Simple-op merging follows Optimus Sec. 3: BatchNormalization, constant scale/bias and
element-wise activations fold into the op that produces their input (or, for a
BatchNorm/scale in front of a conv, into that conv); Reshape-like nodes vanish and
their readers read the producer's tensor. Every folded node is recorded in
`Op.merged`. Operators the engine does not model stay as kind `other`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper, shape_inference

from engine.errors import ModelFileError, ShapeError
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs, matmul_macs

MIN_OPSET = 9
MAX_FOLD_ROUNDS = 4  # inference, then folding of integer shape arithmetic, repeated while it helps
MAX_FOLD_ELEMENTS = 4096  # integer tensors larger than this are data, not shape arithmetic
FOLDABLE_INT_OPS = {"Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Cast", "Add", "Sub", "Mul", "Div",
                    "Reshape", "ConstantOfShape", "Range", "Expand", "Neg", "Min", "Max", "Equal", "Where",
                    "ReduceProd", "Transpose", "Identity"}
MAX_FILE_BYTES = 2 * 1024**3

PASSTHROUGH = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity"}
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "PRelu", "Elu",
               "Selu", "Softplus", "Softsign", "Gelu", "Erf", "Mish", "ThresholdedRelu", "Celu", "Swish"}
AFFINE = {"BatchNormalization", "Mul", "Add", "Sub", "Div"}  # with one constant operand
ELTWISE = {"Add", "Sum", "Mul", "Sub", "Div", "Max", "Min", "Mean", "Pow"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
KIND_BY_TYPE = {
    "Concat": OpKind.CONCAT, "Split": OpKind.SPLIT, "Slice": OpKind.SPLIT,
    "Transpose": OpKind.RESHAPE, "DepthToSpace": OpKind.RESHAPE, "SpaceToDepth": OpKind.RESHAPE,
    "Softmax": OpKind.SOFTMAX, "LogSoftmax": OpKind.SOFTMAX,
    "LRN": OpKind.NORM, "LayerNormalization": OpKind.NORM, "InstanceNormalization": OpKind.NORM,
    "GroupNormalization": OpKind.NORM, "LpNormalization": OpKind.NORM, "BatchNormalization": OpKind.NORM,
    "RMSNormalization": OpKind.NORM, "RotaryEmbedding": OpKind.ELTWISE,
}
COMPUTE_KINDS = (OpKind.CONV, OpKind.DWCONV, OpKind.MATMUL)
# ONNX input slots that hold parameters, by op type (everything else is an activation or a constant)
PARAM_SLOTS = {"Conv": {1, 2}, "ConvTranspose": {1, 2}, "Gemm": {1, 2}, "MatMul": {0, 1},
               "BatchNormalization": {1, 2}, "InstanceNormalization": {1, 2}, "LayerNormalization": {1, 2},
               "GroupNormalization": {1, 2}, "PRelu": {1}, "Mul": {0, 1}, "Add": {0, 1}, "Sub": {0, 1},
               "Div": {0, 1}}
BUFFER_SLOTS = {"BatchNormalization": {3, 4}}  # running statistics: inputs, not parameters


@dataclass
class _Draft:
    """An op under construction while nodes are merged."""

    name: str
    main_type: str
    kind: OpKind
    inputs: list[str]
    outputs: list[str]
    own_weights: list[str]
    attrs: dict
    pre: list[tuple[tuple[str, str], list[str]]] = field(default_factory=list)  # folded in front
    post: list[tuple[tuple[str, str], list[str]]] = field(default_factory=list)  # folded after
    affine: bool = False  # a standalone BatchNorm/scale that may still fold into its consumer


def load_onnx(path, *, batch: int | None = None, input_shapes: dict | None = None) -> Graph:
    """Read an ONNX file into a Graph; `batch` rescales dim 0 of activations, `input_shapes` fixes dynamic inputs."""
    path = Path(path)
    model = _read_model(path)
    return _Importer(model, path, batch, dict(input_shapes or {})).run()


def _read_model(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ModelFileError(path, "no such file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ModelFileError(path, f"file is larger than {MAX_FILE_BYTES // 1024**3} GB")
    data = path.read_bytes()
    if not data:
        raise ModelFileError(path, "file is empty")
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelFileError(path, f"not an ONNX model, or the file is truncated ({err.__class__.__name__})") from None
    if not model.graph.node:
        raise ModelFileError(path, "not an ONNX model: the file parsed but holds no graph nodes")
    _check_external_data(model, path)
    return model


def _check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Refuse external data that points outside the model's folder; its bytes are never read."""
    folder = path.resolve().parent
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in init.external_data if e.key == "location"), "")
        target = (folder / location).resolve()
        if Path(location).is_absolute() or folder not in target.parents:
            raise ModelFileError(path, f"external data '{location}' of initializer '{init.name}' lies outside the "
                                       f"model's folder; refusing to follow it", node=None)


def _attr(node, name: str, default=None):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _topological(nodes) -> list[int]:
    """Indices of `nodes` with every writer before its readers (input order where that holds).

    Raises networkx.NetworkXUnfeasible, with the cycle in `.args[1]`, when the nodes form a cycle.
    """
    writer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(nodes)))
    dag.add_edges_from((writer[t], i) for i, n in enumerate(nodes) for t in n.input if t in writer)
    try:
        return list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        raise nx.NetworkXUnfeasible("cycle", nx.find_cycle(dag)) from None


class _Importer:
    def __init__(self, model, path, batch, input_shapes):
        self.model, self.path, self.batch, self.input_shapes = model, path, batch, input_shapes
        self.meta = {p.key: p.value for p in model.metadata_props}

    # ---- driver ----------------------------------------------------------
    def run(self) -> Graph:
        self._check_opset()
        nodes = self._sorted_nodes()
        self._fix_inputs()
        self.shapes = self._infer_shapes()
        self._find_constants(nodes)
        drafts = self._merge(nodes)
        return self._finish(drafts)

    def _check_opset(self) -> None:
        latest = onnx.defs.onnx_opset_version()
        for imp in self.model.opset_import:
            if imp.domain in ("", "ai.onnx") and not MIN_OPSET <= imp.version <= latest:
                raise ModelFileError(self.path, f"opset {imp.version} is not supported; use opset {MIN_OPSET}..{latest} "
                                                f"(onnx.version_converter can convert the model)")

    def _sorted_nodes(self) -> list:
        """Nodes in a topological order, with unique names; a cycle is an error naming a node on it."""
        g = self.model.graph
        names, seen = [], set()
        for i, node in enumerate(g.node):
            name = node.name or f"{node.op_type}_{i}"
            while name in seen:
                name += "_"
            seen.add(name)
            names.append(name)
        try:
            order = _topological(g.node)
        except nx.NetworkXUnfeasible as err:
            raise ModelFileError(self.path, "the graph has a cycle", node=names[err.args[1][0][0]]) from None
        self.node_names = names
        return [(names[i], g.node[i]) for i in order]

    # ---- shapes ----------------------------------------------------------
    def _fix_inputs(self) -> None:
        """Apply `input_shapes` and demand static shapes on every activation input."""
        g = self.model.graph
        initialized = {i.name for i in g.initializer}
        known = {i.name for i in g.input}
        for name in self.input_shapes:
            if name not in known:
                raise ShapeError(self.path, f"input_shapes names '{name}', which is not a graph input "
                                            f"(inputs: {', '.join(sorted(known - initialized))})")
        for inp in g.input:
            if inp.name in initialized:
                continue
            dims = inp.type.tensor_type.shape.dim
            if inp.name in self.input_shapes:
                shape = tuple(int(d) for d in self.input_shapes[inp.name])
                if len(shape) != len(dims) and dims:
                    raise ShapeError(self.path, f"input '{inp.name}' has rank {len(dims)}, input_shapes gives {shape}")
                del inp.type.tensor_type.shape.dim[:]
                for d in shape:
                    inp.type.tensor_type.shape.dim.add().dim_value = d
                continue
            if not inp.type.tensor_type.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value <= 0
                                                                 for d in dims):
                shown = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
                raise ShapeError(self.path, f"input '{inp.name}' has a dynamic or missing shape {shown}; pass a "
                                            f"static one, e.g. input_shapes={{'{inp.name}': (1, 3, 224, 224)}}")

    def _infer_shapes(self) -> dict[str, tuple[int, ...]]:
        """Static shapes of every tensor ONNX can infer, after folding integer shape arithmetic.

        Exporters compute pads, slice bounds and reshape targets with small integer subgraphs
        (Shape -> Gather -> Concat ...) that ONNX's inference does not evaluate; folding them into
        initializers lets it finish. Float tensors (weights) are never folded.
        """
        if self.input_shapes:  # recorded shapes were for other input shapes: infer afresh
            del self.model.graph.value_info[:]
            for out in self.model.graph.output:
                out.type.tensor_type.ClearField("shape")
        for _ in range(MAX_FOLD_ROUNDS):
            shapes = self._run_inference()
            if not self._fold_integer_nodes(shapes):
                return shapes
        return shapes

    def _run_inference(self) -> dict[str, tuple[int, ...]]:
        try:
            inferred = shape_inference.infer_shapes(self.model, check_type=False, strict_mode=True, data_prop=True)
        except Exception as err:  # onnx raises several types; all mean the same to the user
            raise ModelFileError(self.path, f"shape inference failed: {str(err).strip().splitlines()[-1]}") from None
        shapes = {}
        g = inferred.graph
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                shapes[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
        for init in g.initializer:
            shapes[init.name] = tuple(int(d) for d in init.dims)
        return shapes

    def _fold_integer_nodes(self, shapes) -> bool:
        """Replace nodes that compute small integer tensors from constants by initializers; True if any was."""
        from onnx.reference import ReferenceEvaluator

        g = self.model.graph
        known = {i.name: numpy_helper.to_array(i) for i in g.initializer
                 if i.data_type == onnx.TensorProto.INT64 and i.data_location != onnx.TensorProto.EXTERNAL}
        folded = []
        for node in (g.node[i] for i in _topological(g.node)):
            ins = [t for t in node.input if t]
            if node.op_type == "Shape" and ins and ins[0] in shapes:
                values = [np.array(shapes[ins[0]], dtype=np.int64)[slice(_attr(node, "start", 0), _attr(node, "end"))]]
            elif node.op_type in ("Constant", *FOLDABLE_INT_OPS) and all(t in known for t in ins):
                try:
                    values = ReferenceEvaluator(node).run(None, {t: known[t] for t in ins})
                except Exception:  # an op the reference runtime cannot run: leave it to inference
                    continue
            else:
                continue
            values = [np.asarray(v) for v in values]
            if any(v.dtype.kind not in "iu" or v.size > MAX_FOLD_ELEMENTS for v in values):
                continue
            known.update(zip(node.output, values))
            folded.append((node, values))
        if not folded:
            return False
        for node, values in folded:
            g.node.remove(node)
            g.initializer.extend(numpy_helper.from_array(v.astype(np.int64), out) for out, v in zip(node.output, values))
        return True

    def _shape(self, tensor: str, node: str | None = None) -> tuple[int, ...]:
        if tensor not in self.shapes:
            source = self._first_shapeless(tensor)
            why = (f" (ONNX shape inference found none for the output of '{source.op_type}'"
                   + (f" of domain '{source.domain}'" if source.domain else "")
                   + f" node '{source.name}')") if source is not None else ""
            raise ShapeError(self.path, f"the shape of tensor '{tensor}' cannot be inferred{why}; give static input "
                                        f"shapes with input_shapes=, or record the tensor's shape in the model's "
                                        f"value_info", node=node)
        return self.shapes[tensor]

    def _first_shapeless(self, tensor: str):
        """The earliest node upstream of `tensor` whose inputs have shapes but whose output has none."""
        writer = {out: n for n in self.model.graph.node for out in n.output}
        node, seen = writer.get(tensor), set()
        while node is not None and node.name not in seen:
            seen.add(node.name)
            upstream = next((writer[t] for t in node.input if t and t not in self.shapes and t in writer), None)
            if upstream is None:
                return node
            node = upstream
        return node

    # ---- constants -------------------------------------------------------
    def _find_constants(self, nodes) -> None:
        """Mark constant tensors; `sources` maps each to the parameter tensors it derives from."""
        g = self.model.graph
        buffers = set(json.loads(self.meta.get("engine.buffers", "[]")))
        declared = self.meta.get("engine.weights")
        declared = set(json.loads(declared)) if declared else None
        self.values: dict[str, np.ndarray] = {}
        self.sources: dict[str, frozenset[str]] = {}
        self.buffers = set(buffers)
        for init in g.initializer:
            float_like = init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                            onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
            self.sources[init.name] = frozenset([init.name]) if float_like else frozenset()
            if not float_like and init.data_location != onnx.TensorProto.EXTERNAL:
                self.values[init.name] = numpy_helper.to_array(init)
        initialized = {i.name for i in g.initializer}
        uses = {}
        for _, node in nodes:
            for slot, t in enumerate(node.input):
                uses.setdefault(t, []).append((node.op_type, slot))
        for inp in g.input:
            if inp.name in initialized:
                continue
            if inp.name in buffers:
                self.sources[inp.name] = frozenset()
            elif declared is not None:
                if inp.name in declared:
                    self.sources[inp.name] = frozenset([inp.name])
            elif uses.get(inp.name) and all(self._weight_slot(op, slot, inp.name) for op, slot in uses[inp.name]):
                self.sources[inp.name] = frozenset([inp.name])
        for name, node in nodes:
            ins = [t for t in node.input if t]
            if node.op_type == "Constant":
                self._constant_node(node)
            elif node.op_type == "ConstantOfShape" and all(t in self.sources for t in ins):
                out = node.output[0]
                self.sources[out] = frozenset([out])
                if ins and ins[0] in self.values:
                    self.shapes[out] = tuple(int(v) for v in self.values[ins[0]])
            elif node.op_type == "Shape" and ins and ins[0] in self.shapes:
                self.sources[node.output[0]] = frozenset()
                self.values[node.output[0]] = np.array(self.shapes[ins[0]], dtype=np.int64)
            elif ins and all(t in self.sources for t in ins):
                for out in node.output:
                    self.sources[out] = frozenset().union(*(self.sources[t] for t in ins))

    def _weight_slot(self, op_type: str, slot: int, tensor: str) -> bool:
        if slot in PARAM_SLOTS.get(op_type, ()) and not (op_type in ("Mul", "Add", "Sub", "Div", "MatMul")
                                                          and slot == 0):
            return True
        return slot in BUFFER_SLOTS.get(op_type, ())

    def _constant_node(self, node) -> None:
        out = node.output[0]
        attr = next((a for a in node.attribute), None)
        if attr is not None and attr.name == "value":
            arr = numpy_helper.to_array(attr.t)
            self.shapes[out] = tuple(int(d) for d in arr.shape)
            if arr.dtype.kind == "f":
                self.sources[out] = frozenset([out])
            else:
                self.sources[out] = frozenset()
                self.values[out] = arr
        else:
            self.sources[out] = frozenset()

    def _param_inputs(self, node, slots) -> list[str]:
        """Parameter tensors behind the constant inputs of `node` at `slots`, excluding running statistics."""
        found = []
        for slot, t in enumerate(node.input):
            if t and slot in slots and t in self.sources:
                for src in sorted(self.sources[t]):
                    if src not in found and src not in self.buffers and math.prod(self._shape(src)) > 1:
                        found.append(src)
        return found

    # ---- merging ---------------------------------------------------------
    def _merge(self, nodes) -> list[_Draft]:
        g = self.model.graph
        self.alias: dict[str, str] = {}
        self.graph_outputs = {o.name for o in g.output}
        readers: dict[str, list[str]] = {}
        for name, node in nodes:
            for t in dict.fromkeys(node.input):
                if t:
                    readers.setdefault(t, []).append(name)
        self.readers = readers
        self.node_by_name = {name: node for name, node in nodes}
        drafts: list[_Draft] = []
        producer: dict[str, _Draft] = {}
        pending: dict[str, list[tuple[str, str]]] = {}  # network-input tensor -> reshape nodes to attach
        for name, node in nodes:
            acts = [t for t in node.input if t and t not in self.sources]
            if not acts or all(o in self.sources for o in node.output if o):
                continue  # a constant computation
            src = self._resolve(acts[0])
            op_type = node.op_type
            if op_type in PASSTHROUGH:
                self.alias[node.output[0]] = src
                if src in producer:
                    producer[src].post.append(((name, op_type), []))
                else:
                    pending.setdefault(src, []).append((name, op_type))
                continue
            owner = producer.get(src)
            single = owner is not None and self._single_reader(src)
            if op_type in ACTIVATIONS and len(acts) == 1 and single:
                owner.post.append(((name, op_type), self._param_inputs(node, {1})))
                self._rename_output(owner, src, node.output[0], producer)
                continue
            if op_type in AFFINE and len(acts) == 1 and (op_type == "BatchNormalization" or len(node.input) == 2):
                if single and (owner.kind in COMPUTE_KINDS or owner.affine):
                    owner.post.append(((name, op_type), self._param_inputs(node, PARAM_SLOTS[op_type])))
                    self._rename_output(owner, src, node.output[0], producer)
                    continue
                draft = self._draft(name, node, [src], affine=True)
            else:
                draft = self._draft(name, node, [self._resolve(t) for t in acts])
            for t in draft.inputs:
                for entry in pending.pop(t, []):
                    draft.pre.append((entry, []))
            drafts.append(draft)
            for out in draft.outputs:
                producer[out] = draft
        return self._fold_pre_ops(drafts)

    def _resolve(self, tensor: str) -> str:
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def _single_reader(self, tensor: str) -> bool:
        """True when exactly one non-reshape node reads `tensor`, looking through reshape-like nodes."""
        return self._reader_count(tensor) == 1

    def _reader_count(self, tensor: str) -> int:
        """Readers of `tensor` through reshape-like nodes; a graph output counts as a reader."""
        total = int(tensor in self.graph_outputs)
        for reader in self.readers.get(tensor, []):
            node = self.node_by_name[reader]
            total += self._reader_count(node.output[0]) if node.op_type in PASSTHROUGH else 1
        return total

    @staticmethod
    def _rename_output(owner: _Draft, old: str, new: str, producer: dict) -> None:
        owner.outputs = [new if t == old else t for t in owner.outputs]
        producer.pop(old, None)
        producer[new] = owner

    def _draft(self, name: str, node, inputs: list[str], affine: bool = False) -> _Draft:
        op_type = node.op_type
        kind, attrs = self._classify(name, node, inputs)
        # parameters sit in known slots; any other op's float constants (a class token, a table) are its own
        slots = PARAM_SLOTS.get(op_type, set(range(len(node.input))))
        if kind is OpKind.MATMUL and op_type == "MatMul":
            slots = {i for i, t in enumerate(node.input) if t in self.sources}
        outputs = [o for o in node.output if o and (op_type != "Dropout")]
        return _Draft(name, op_type, kind, inputs, outputs, self._param_inputs(node, slots), attrs, affine=affine)

    def _classify(self, name: str, node, inputs: list[str]) -> tuple[OpKind, dict]:
        op_type = node.op_type
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        if op_type in ("Conv", "ConvTranspose"):
            w = self._shape(node.input[1], name)
            x = self._shape(node.input[0], name)  # the node's own view, before any folded reshape
            group = int(a.get("group", 1))
            kind = OpKind.DWCONV if group > 1 and group == x[1] and op_type == "Conv" else OpKind.CONV
            return kind, self._spatial(name, node, a, tuple(w[2:]), x)
        if op_type in ("Gemm", "MatMul"):
            return OpKind.MATMUL, {"trans_a": int(a.get("transA", 0))}
        if op_type in POOLS:
            x = self._shape(inputs[0], name)
            if op_type.startswith("Global"):
                return OpKind.POOL, {"kernel": tuple(x[2:]), "stride": (1,) * (len(x) - 2),
                                     "padding": (0,) * (2 * (len(x) - 2)), "dilation": (1,) * (len(x) - 2)}
            return OpKind.POOL, self._spatial(name, node, a, tuple(a["kernel_shape"]), x)
        if op_type in ELTWISE or op_type in ACTIVATIONS or op_type in AFFINE:
            if op_type == "BatchNormalization":
                return OpKind.NORM, {}
            return OpKind.ELTWISE, {}
        if op_type == "LRN":  # the window across channels is its kernel (Yang's LRN layer reads it)
            return OpKind.NORM, {"kernel": (int(a["size"]),)}
        return KIND_BY_TYPE.get(op_type, OpKind.OTHER), {}

    def _spatial(self, name, node, a, kernel, x) -> dict:
        n = len(kernel)
        stride = tuple(a.get("strides", (1,) * n))
        dilation = tuple(a.get("dilations", (1,) * n))
        pads = tuple(a.get("pads", (0,) * (2 * n)))
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out = self._shape(node.output[0], name)[2:]
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

    def _fold_pre_ops(self, drafts: list[_Draft]) -> list[_Draft]:
        """Fold a standalone BatchNorm/scale into the single conv/matmul reading it (pre-activation nets)."""
        reader_drafts: dict[str, list[_Draft]] = {}
        for d in drafts:
            for t in dict.fromkeys(d.inputs):
                reader_drafts.setdefault(t, []).append(d)
        kept = []
        for d in drafts:
            out = d.outputs[0]
            readers = reader_drafts.get(out, [])
            if (d.affine and len(d.outputs) == 1 and len(readers) == 1 and readers[0].kind in COMPUTE_KINDS
                    and out not in self.graph_outputs and readers[0].inputs.count(out) == 1):
                consumer = readers[0]
                consumer.inputs = [d.inputs[0] if t == out else t for t in consumer.inputs]
                reader_drafts.setdefault(d.inputs[0], []).append(consumer)
                consumer.pre = [*d.pre, ((d.name, d.main_type), d.own_weights), *d.post, *consumer.pre]
                continue
            kept.append(d)
        return kept

    # ---- result ----------------------------------------------------------
    def _finish(self, drafts: list[_Draft]) -> Graph:
        g = self.model.graph
        initialized = {i.name for i in g.initializer}
        net_inputs = [i.name for i in g.input if i.name not in initialized and i.name not in self.sources]
        native = self.shapes[net_inputs[0]][0] if net_inputs and self.shapes.get(net_inputs[0]) else 1
        batch = self.batch or int(self.meta.get("engine.batch", native))
        if batch < 1:
            raise ShapeError(self.path, f"batch must be a positive whole number, got {batch}")

        def act_shape(t: str, node: str | None) -> tuple[int, ...]:
            shape = self._shape(t, node)
            return (batch, *shape[1:]) if shape and shape[0] == native else shape

        tensors: dict[str, Tensor] = {}
        ops = []
        for d in drafts:
            weights = list(d.own_weights)
            merged = [(d.name, d.main_type)]
            for entry, ws in [*d.pre, *d.post]:
                merged.append(entry)
                weights += [w for w in ws if w not in weights]
            for t in d.inputs + d.outputs:
                tensors.setdefault(t, Tensor(t, act_shape(t, d.name)))
            for w in weights:
                tensors.setdefault(w, Tensor(w, self._shape(w, d.name), is_weight=True))
            ops.append(Op(name=d.name, kind=d.kind, inputs=tuple(dict.fromkeys(d.inputs)), outputs=tuple(d.outputs),
                          weights=tuple(weights), kernel=d.attrs.get("kernel", ()), stride=d.attrs.get("stride", ()),
                          padding=d.attrs.get("padding", ()), dilation=d.attrs.get("dilation", ()),
                          groups=d.attrs.get("groups", 1), macs=self._macs(d, tensors), source_type=d.main_type,
                          merged=tuple(merged)))
        for t in net_inputs:
            tensors.setdefault(t, Tensor(t, act_shape(t, None)))
        outputs = tuple(dict.fromkeys(self._resolve(o.name) for o in g.output))
        name = self.meta.get("engine.name", self.path.stem)
        used_inputs = tuple(t for t in net_inputs if any(t in op.inputs for op in ops))
        return Graph.build(name, ops, tensors.values(), used_inputs, outputs, batch=batch)

    def _macs(self, d: _Draft, tensors: dict[str, Tensor]) -> int:
        out = tensors[d.outputs[0]].shape
        if d.kind in (OpKind.CONV, OpKind.DWCONV):
            x = tensors[d.inputs[0]].shape
            if d.main_type == "ConvTranspose":
                w = tensors[d.own_weights[0]].shape
                return math.prod(x) * w[1] * math.prod(w[2:])
            node = self.node_by_name[d.name]
            per_group = self._shape(node.input[1], d.name)[1]  # C_in / groups, whatever reshapes came before
            return conv_macs(out, per_group * d.attrs["groups"], d.attrs["kernel"], d.attrs["groups"])
        if d.kind is OpKind.MATMUL:
            a_shape = self._shape(self.node_by_name[d.name].input[0], d.name)
            reduced = a_shape[0] if d.main_type == "Gemm" and d.attrs.get("trans_a") else a_shape[-1]
            return matmul_macs(out, reduced)
        return 0
