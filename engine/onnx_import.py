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
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import numpy_helper

from engine.errors import GraphError, ModelFileError, PartialImportWarning, ShapeError
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs, matmul_macs
from engine.loading import MAX_BATCH
from engine.onnx_fold import FLOAT_TYPES, MAX_FOLD_ELEMENTS, fold, too_large
from engine.onnx_read import read_model

# ops whose output shapes can depend on input values (detection post-processing): a part of the graph that
# starts at one of them with no static shape is left out, with a PartialImportWarning
DATA_DEPENDENT = {"NonZero", "NonMaxSuppression", "TopK", "If", "Loop", "Scan", "Unique", "Compress", "Resize",
                  "Upsample", "RoiAlign", "Reshape", "Expand", "Tile", "Range", "ConstantOfShape", "Slice", "Gather",
                  "GatherND", "GatherElements", "ScatterND", "Squeeze", "Unsqueeze", "Split", "Pad", "OneHot"}
PASSTHROUGH = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity"}
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "PRelu", "Elu",
               "Selu", "Softplus", "Softsign", "Gelu", "Erf", "Mish", "ThresholdedRelu", "Celu", "Swish",
               # one-input element-wise math of written-out norms and activations (RMSNorm's Sqrt, GELU's pieces)
               "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs", "Cast", "Floor", "Ceil", "Round", "Sin", "Cos",
               "Sign", "Not"}
AFFINE = {"BatchNormalization", "Mul", "Add", "Sub", "Div"}  # with one constant operand
ELTWISE = {"Add", "Sum", "Mul", "Sub", "Div", "Max", "Min", "Mean", "Pow", "Where", "Equal", "Greater", "Less",
           "GreaterOrEqual", "LessOrEqual", "And", "Or", "Mod"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
KIND_BY_TYPE = {
    "Concat": OpKind.CONCAT, "Split": OpKind.SPLIT, "Slice": OpKind.SPLIT,
    "Transpose": OpKind.RESHAPE, "DepthToSpace": OpKind.RESHAPE, "SpaceToDepth": OpKind.RESHAPE,
    "Expand": OpKind.RESHAPE, "Tile": OpKind.RESHAPE,
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
    """Read an ONNX file into a Graph; `batch` rescales dim 0 of activations, `input_shapes` fixes dynamic inputs.

    `input_shapes` maps an input name to its full shape, or a symbolic dim's name (`"sequence"`) to its size.
    """
    path = Path(path)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH):
        raise ShapeError(path, f"batch must be a whole number in 1..{MAX_BATCH}, got {batch!r}")
    model = read_model(path)
    try:
        return _Importer(model, path, batch, dict(input_shapes or {})).run()
    except GraphError as err:  # the IR's own checks: name the file too
        raise ModelFileError(path, str(err)) from None
    except RecursionError:
        raise ModelFileError(path, "the graph nests too deeply to import") from None


def _whole_dims(value, path, what: str) -> tuple[int, ...]:
    """`value` as a tuple of positive whole numbers, or a ShapeError naming `what`."""
    try:
        dims = tuple(value)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ShapeError(path, f"{what} must be positive whole numbers, got {value!r}")
    return tuple(int(d) for d in dims)


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
        nodes = self._sorted_nodes()
        shapes, types = self._bind_inputs()
        sources, values = self._seed(nodes, shapes, types)
        facts = fold(self.model, self.path, nodes, shapes, types, sources, values)
        self.shapes, self.values, self.sources = facts.shapes, facts.values, facts.sources
        self.computed = facts.computed
        live = [(name, node) for name, node in nodes if name not in facts.folded]
        live = self._drop_data_dependent(live)
        drafts = self._merge(live)
        return self._finish(drafts)

    def _drop_data_dependent(self, nodes) -> list:
        """`nodes` without the part whose shapes depend on data (detection post-processing), with a warning.

        Only a part that starts at DATA_DEPENDENT ops is left out; a shapeless output anywhere else stays an
        error naming the node, so a network is never cut short silently.
        """
        dropped, origins = set(), []
        for name, node in nodes:
            acts = [t for t in node.input if t and t not in self.sources]
            outs = [t for t in node.output if t]
            if any(t in dropped for t in acts):
                dropped.update(outs)
            elif any(t not in self.shapes for t in outs) and node.op_type in DATA_DEPENDENT:
                dropped.update(outs)
                origins.append(f"{node.op_type} '{name}'")
        self.left_out = origins
        if not origins:
            return nodes
        kept = [(name, node) for name, node in nodes if not any(t in dropped for t in node.output if t)]
        warnings.warn(PartialImportWarning(
            f"{self.path}: left out {len(nodes) - len(kept)} nodes whose shapes depend on the data, from "
            f"{', '.join(origins[:5])}{' ...' if len(origins) > 5 else ''}"), stacklevel=4)
        return kept

    def _meta_list(self, key: str) -> set[str] | None:
        """A metadata entry holding a JSON list of tensor names, or None when absent."""
        if key not in self.meta:
            return None
        try:
            value = json.loads(self.meta[key])
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ModelFileError(self.path, f"metadata '{key}' must be a JSON list of tensor names, got "
                                            f"{self.meta[key][:80]!r}")
        return set(value)

    def _sorted_nodes(self) -> list:
        """Nodes in a topological order, with unique names; a cycle, a twice-written or dangling tensor is an error."""
        g = self.model.graph
        names, seen = [], set()
        for i, node in enumerate(g.node):
            name = node.name or f"{node.op_type}_{i}"
            while name in seen:
                name += "_"
            seen.add(name)
            names.append(name)
        available = {i.name for i in g.initializer} | {i.name for i in g.input}
        writer = {}
        for name, node in zip(names, g.node):
            for out in node.output:
                if out and (out in writer or out in available):
                    raise ModelFileError(self.path, f"tensor '{out}' is written twice", node=name)
                if out:
                    writer[out] = name
        for name, node in zip(names, g.node):
            for t in node.input:
                if t and t not in writer and t not in available:
                    raise ModelFileError(self.path, f"{node.op_type} reads '{t}', which no node, input or "
                                                    f"initializer provides", node=name)
        for out in g.output:
            if out.name not in writer and out.name not in available:
                raise ModelFileError(self.path, f"graph output '{out.name}' is produced by no node")
        try:
            order = _topological(g.node)
        except nx.NetworkXUnfeasible as err:
            raise ModelFileError(self.path, "the graph has a cycle", node=names[err.args[1][0][0]]) from None
        self.node_names = names
        return [(names[i], g.node[i]) for i in order]

    # ---- shapes ----------------------------------------------------------
    def _bind_inputs(self) -> tuple[dict, dict]:
        """Static shapes and element types of the graph inputs and initializers, `input_shapes` applied."""
        g = self.model.graph
        initialized = {i.name for i in g.initializer}
        inputs = [i for i in g.input if i.name not in initialized]
        dim_names = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param}
        for key, value in self.input_shapes.items():
            if key not in {i.name for i in inputs} and key not in dim_names:
                raise ShapeError(self.path, f"input_shapes names '{key}', which is neither a graph input nor a "
                                            f"symbolic dim (inputs: {', '.join(i.name for i in inputs)}"
                                            + (f"; dims: {', '.join(sorted(dim_names))}" if dim_names else "") + ")")
        shapes, types = {}, {}
        for init in g.initializer:
            shapes[init.name], types[init.name] = tuple(int(d) for d in init.dims), init.data_type
        for inp in inputs:
            types[inp.name] = inp.type.tensor_type.elem_type
            shapes[inp.name] = self._input_shape(inp)
            too_large(self.path, f"input '{inp.name}'", shapes[inp.name])
        return shapes, types

    def _input_shape(self, inp) -> tuple[int, ...]:
        """The static shape of graph input `inp`: given in input_shapes, declared, or bound by dim name."""
        dims = inp.type.tensor_type.shape.dim
        given = self.input_shapes.get(inp.name)
        if given is not None:
            shape = _whole_dims((given,) if isinstance(given, int) else given, self.path,
                                f"input_shapes['{inp.name}']")
            if dims and len(shape) != len(dims):
                raise ShapeError(self.path, f"input '{inp.name}' has rank {len(dims)}, input_shapes gives {shape}")
            return shape
        if not inp.type.tensor_type.HasField("shape"):
            raise ShapeError(self.path, f"input '{inp.name}' declares no shape; pass one, e.g. "
                                        f"input_shapes={{'{inp.name}': (1, 3, 224, 224)}}")
        shape, unbound = [], []
        for axis, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            elif d.dim_param and d.dim_param in self.input_shapes:
                shape.append(_whole_dims([self.input_shapes[d.dim_param]], self.path,
                                         f"input_shapes['{d.dim_param}']")[0])
            elif axis == 0 and len(dims) > 1:
                shape.append(1)  # a dynamic batch: 1, rescaled by `batch`
            else:
                shape.append(None)
                unbound.append(d.dim_param or f"dim {axis}")
        if unbound:
            shown = [s if s is not None else (d.dim_param or "?") for s, d in zip(shape, dims)]
            example = ", ".join(f"'{u}': 128" for u in unbound if not u.startswith("dim "))
            raise ShapeError(self.path, f"input '{inp.name}' has a dynamic or missing shape {shown}: bind "
                                        f"{', '.join(unbound)} with a static shape, e.g. input_shapes="
                                        f"{{'{inp.name}': (1, 3, 224, 224)}}"
                                        + (f" or {{{example}}}" if example else ""))
        return tuple(shape)

    # ---- constants -------------------------------------------------------
    def _seed(self, nodes, shapes, types) -> tuple[dict, dict]:
        """Weight lineage and values of initializers and of graph inputs that hold weights."""
        g = self.model.graph
        buffers = self._meta_list("engine.buffers") or set()
        declared = self._meta_list("engine.weights")
        self.buffers = set(buffers)
        sources: dict[str, frozenset[str]] = {}
        values: dict[str, np.ndarray] = {}
        for init in g.initializer:
            size = math.prod(init.dims)
            weight = init.data_type in FLOAT_TYPES and size > 1
            sources[init.name] = frozenset([init.name]) if weight else frozenset()
            if size <= MAX_FOLD_ELEMENTS and init.data_location != onnx.TensorProto.EXTERNAL:
                try:
                    values[init.name] = numpy_helper.to_array(init)
                except Exception as err:  # a tensor whose data does not decode
                    raise ModelFileError(self.path, f"initializer '{init.name}' does not decode "
                                                    f"({err.__class__.__name__})") from None
        initialized = {i.name for i in g.initializer}
        uses = {}
        for _, node in nodes:
            for slot, t in enumerate(node.input):
                uses.setdefault(t, []).append((node.op_type, slot))
        for inp in g.input:
            if inp.name in initialized:
                continue
            if inp.name in buffers:
                sources[inp.name] = frozenset()
            elif declared is not None:
                if inp.name in declared:
                    sources[inp.name] = frozenset([inp.name])
            elif uses.get(inp.name) and all(self._weight_slot(op, slot, inp.name) for op, slot in uses[inp.name]):
                sources[inp.name] = frozenset([inp.name])
        return sources, values

    def _shape(self, tensor: str, node: str | None = None) -> tuple[int, ...]:
        if tensor not in self.shapes:
            source = self._first_shapeless(tensor)
            why = (f" (ONNX shape inference found none for the output of '{source.op_type}'"
                   + (f" of domain '{source.domain}'" if source.domain else "")
                   + f" node '{source.name}')") if source is not None else ""
            raise ShapeError(self.path, f"the shape of tensor '{tensor}' cannot be inferred{why}; record the "
                                        f"tensor's shape in the model's value_info", node=node)
        return self.shapes[tensor]

    def _first_shapeless(self, tensor: str):
        """The earliest node upstream of `tensor` whose inputs have shapes but whose output has none."""
        writer = {out: n for n in self.model.graph.node for out in n.output}
        node, seen = writer.get(tensor), set()
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            upstream = next((writer[t] for t in node.input if t and t not in self.shapes and t in writer), None)
            if upstream is None:
                return node
            node = upstream
        return node

    def _weight_slot(self, op_type: str, slot: int, tensor: str) -> bool:
        if slot in PARAM_SLOTS.get(op_type, ()) and not (op_type in ("Mul", "Add", "Sub", "Div", "MatMul")
                                                          and slot == 0):
            return True
        return slot in BUFFER_SLOTS.get(op_type, ())

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
            if name in self.computed:  # a matmul or conv over weights alone: an op with no activation input
                draft = self._draft(name, node, [])
                drafts.append(draft)
                producer.update((out, draft) for out in draft.outputs)
                continue
            if not acts:
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
        total, todo = 0, [tensor]
        while todo:
            t = todo.pop()
            total += int(t in self.graph_outputs)
            for reader in self.readers.get(t, []):
                node = self.node_by_name[reader]
                if node.op_type in PASSTHROUGH:
                    todo.append(node.output[0])
                else:
                    total += 1
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
        if name in self.computed:
            slots = set(range(len(node.input)))
        elif kind is OpKind.MATMUL and op_type in ("MatMul", "Einsum"):
            slots = {i for i, t in enumerate(node.input) if t in self.sources}
        outputs = [o for o in node.output if o and (op_type != "Dropout")]
        return _Draft(name, op_type, kind, inputs, outputs, self._param_inputs(node, slots), attrs, affine=affine)

    def _classify(self, name: str, node, inputs: list[str]) -> tuple[OpKind, dict]:
        op_type = node.op_type
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        if op_type in ("Conv", "ConvTranspose"):
            x, w = self._conv_shapes(name, node, a)
            group = int(a.get("group", 1))
            kind = OpKind.DWCONV if group > 1 and group == x[1] and op_type == "Conv" else OpKind.CONV
            return kind, self._spatial(name, node, a, tuple(w[2:]), x)
        if op_type in ("Gemm", "MatMul"):
            return OpKind.MATMUL, {"trans_a": int(a.get("transA", 0))}
        if op_type == "Einsum":
            return (OpKind.MATMUL if len(node.input) == 2 else OpKind.OTHER), {}
        if op_type in POOLS:
            x = self._shape(node.input[0], name)  # the node's own view, before any folded reshape
            if len(x) < 3:
                raise ModelFileError(self.path, f"{op_type} needs an input of rank 3 or more, got {list(x)}", node=name)
            if op_type.startswith("Global"):
                return OpKind.POOL, {"kernel": tuple(x[2:]), "stride": (1,) * (len(x) - 2),
                                     "padding": (0,) * (2 * (len(x) - 2)), "dilation": (1,) * (len(x) - 2)}
            kernel = tuple(a.get("kernel_shape", ()))
            if len(kernel) != len(x) - 2 or any(k < 1 for k in kernel):
                raise ModelFileError(self.path, f"{op_type} kernel_shape {list(kernel)} does not fit input "
                                                f"{list(x)}", node=name)
            return OpKind.POOL, self._spatial(name, node, a, kernel, x)
        if op_type in ELTWISE or op_type in ACTIVATIONS or op_type in AFFINE:
            if op_type == "BatchNormalization":
                return OpKind.NORM, {}
            return OpKind.ELTWISE, {}
        if op_type == "LRN":  # the window across channels is its kernel (Yang's LRN layer reads it)
            if int(a.get("size", 0)) < 1:
                raise ModelFileError(self.path, f"LRN needs a positive 'size' attribute, got {a.get('size')}",
                                     node=name)
            return OpKind.NORM, {"kernel": (int(a["size"]),)}
        return KIND_BY_TYPE.get(op_type, OpKind.OTHER), {}

    def _conv_shapes(self, name, node, a) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Input and weight shapes of a Conv/ConvTranspose, checked against each other, kernel_shape and group."""
        op = node.op_type
        if len(node.input) < 2 or not node.input[0] or not node.input[1]:
            raise ModelFileError(self.path, f"{op} needs an input and a weight, got {len(node.input)} inputs",
                                 node=name)
        x, w = self._shape(node.input[0], name), self._shape(node.input[1], name)
        group = a.get("group", 1)
        if len(w) < 3 or len(x) != len(w):
            raise ModelFileError(self.path, f"{op} weight {list(w)} does not fit input {list(x)} (ranks must match, "
                                            f"3 or more)", node=name)
        if not isinstance(group, int) or not 1 <= group <= x[1] or x[1] % group:
            raise ModelFileError(self.path, f"{op} group {group} must divide the input's {x[1]} channels", node=name)
        channels_in = w[0] if op == "ConvTranspose" else w[1] * group
        if channels_in != x[1] or (op == "Conv" and w[0] % group):
            raise ModelFileError(self.path, f"{op} weight {list(w)} with group {group} does not fit input "
                                            f"{list(x)}", node=name)
        if "kernel_shape" in a and tuple(a["kernel_shape"]) != tuple(w[2:]):
            raise ModelFileError(self.path, f"{op} kernel_shape {list(a['kernel_shape'])} differs from its weight's "
                                            f"{list(w[2:])}", node=name)
        return x, w

    def _spatial(self, name, node, a, kernel, x) -> dict:
        n = len(kernel)
        stride = tuple(a.get("strides", (1,) * n))
        dilation = tuple(a.get("dilations", (1,) * n))
        pads = tuple(a.get("pads", (0,) * (2 * n)))
        if (len(stride) != n or len(dilation) != n or len(pads) != 2 * n or min(stride + dilation) < 1
                or min(pads, default=0) < 0):
            raise ModelFileError(self.path, f"{node.op_type} strides {list(stride)}, dilations {list(dilation)} or "
                                            f"pads {list(pads)} do not fit a {n}-D kernel", node=name)
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
        recorded = self.meta.get("engine.batch", str(native))
        if not recorded.isdigit() or not 1 <= int(recorded) <= MAX_BATCH:
            raise ModelFileError(self.path, f"metadata 'engine.batch' must be a whole number in 1..{MAX_BATCH}, "
                                            f"got {recorded[:40]!r}")
        batch = self.batch or int(recorded)

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
        if not ops and self.left_out:
            raise ShapeError(self.path, f"nothing to model once the part whose shapes depend on the data is left "
                                        f"out (from {', '.join(self.left_out[:5])}); give static input shapes")
        if not ops:
            kinds = sorted({node.op_type for node in g.node})
            raise ModelFileError(self.path, f"no op to model: every node ({', '.join(kinds)}) only reshapes, or "
                                            f"computes constants")
        produced = {t for op in ops for t in op.outputs}
        outputs = tuple(dict.fromkeys(t for t in (self._resolve(o.name) for o in g.output) if t in produced))
        if not outputs:
            outputs = tuple(t for op in ops for t in op.outputs if not any(t in o.inputs for o in ops))
        name = self.meta.get("engine.name", self.path.stem)
        used_inputs = tuple(t for t in net_inputs if any(t in op.inputs for op in ops))
        return Graph.build(name, ops, tensors.values(), used_inputs, outputs, batch=batch)

    def _macs(self, d: _Draft, tensors: dict[str, Tensor]) -> int:
        out = tensors[d.outputs[0]].shape
        node = self.node_by_name[d.name]
        rescale = math.prod(out) / max(math.prod(self._shape(d.outputs[0])), 1)  # the batch, when it changed
        if d.kind in (OpKind.CONV, OpKind.DWCONV):
            if d.main_type == "ConvTranspose":
                x, w = self._shape(node.input[0], d.name), self._shape(node.input[1], d.name)
                return round(math.prod(x) * rescale) * w[1] * math.prod(w[2:])
            per_group = self._shape(node.input[1], d.name)[1]  # C_in / groups, whatever reshapes came before
            return conv_macs(out, per_group * d.attrs["groups"], d.attrs["kernel"], d.attrs["groups"])
        if d.kind is OpKind.MATMUL and d.main_type == "Einsum":
            return round(self._einsum_macs(node, d.name) * rescale)
        if d.kind is OpKind.MATMUL:
            a_shape = self._shape(node.input[0], d.name)
            reduced = a_shape[0] if d.main_type == "Gemm" and d.attrs.get("trans_a") else a_shape[-1]
            return matmul_macs(out, reduced)
        return 0

    def _einsum_macs(self, node, name: str) -> int:
        """Multiply-accumulates of a two-operand Einsum: every output element sums over the contracted letters."""
        raw = _attr(node, "equation", b"")
        equation = (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)).replace(" ", "")
        lhs, _, rhs = equation.partition("->")
        terms = lhs.split(",")
        sizes = {}
        for term, t in zip(terms, node.input):
            shape = self._shape(t, name)
            head, dots, tail = term.partition("...")
            if len(head) + len(tail) > len(shape) or (not dots and len(head) != len(shape)):
                raise ModelFileError(self.path, f"Einsum term '{term}' does not fit input {list(shape)}", node=name)
            for letter, size in [*zip(head, shape), *zip(tail, shape[len(shape) - len(tail):])]:
                sizes[letter] = max(sizes.get(letter, 1), size)
        kept = set(rhs) if "->" in equation else {c for c in sizes if lhs.count(c) == 1}
        contracted = math.prod(size for letter, size in sizes.items() if letter not in kept)
        return math.prod(self._shape(node.output[0], name)) * contracted
