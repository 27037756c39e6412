"""`Net`: writes a network op by op in the IR the ONNX importer produces, so zoo graphs round-trip exactly.

Each call adds one `Op` standing for a main ONNX node plus its folded nodes (BatchNorm,
activation, flatten), names tensors after the node that writes them, and computes
output shapes and MACs the way the importer does (`engine.graph.conv_macs`/`matmul_macs`).
Weight names follow torchvision's state-dict keys, so parameter counts can be checked
tensor by tensor against the reference definitions.
"""

from __future__ import annotations

import math
from dataclasses import replace

from engine.errors import GraphError
from engine.graph import Graph, Op, OpKind, Tensor, conv_macs, matmul_macs

PASSTHROUGH = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
ACTIVATIONS = frozenset({"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Swish"})


def _tuple(value, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _pads(padding, n: int) -> tuple[int, ...]:
    """ONNX pads (begins..., ends...) from an int, a per-axis tuple, or a full pads tuple."""
    p = _tuple(padding, n)
    return p if len(p) == 2 * n else p + p


def window_out(size: int, kernel: int, stride: int, pad_total: int, dilation: int = 1, ceil: bool = False) -> int:
    """Output length of a convolution or pooling window along one axis (PyTorch's rule, incl. ceil_mode)."""
    span = size + pad_total - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + pad_total // 2:  # last window must start inside the input
        out -= 1
    return out


class Net:
    """Accumulates ops and tensors of one network; `graph()` returns the checked, importer-ordered Graph."""

    def __init__(self, name: str, batch: int):
        self.name, self.batch = name, batch
        self.ops: list[Op] = []
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []
        self.views: dict[str, tuple[int, ...]] = {}  # tensor -> shape its readers see after a folded reshape
        self.kept: list[str] = []  # tensors that are network outputs although ops read them (a KV-cache slice)

    # ---- plumbing ----------------------------------------------------------
    def input(self, shape: tuple[int, ...], name: str = "input") -> str:
        """Declare a network input; `shape` excludes the batch."""
        self.inputs.append(self._new(Tensor(name, (self.batch, *shape))))
        return name

    def output(self, t: str) -> str:
        """Make `t` a network output even though ops read it (written to DRAM, like a KV-cache slice)."""
        self.kept.append(t)
        return t

    def shape(self, t: str) -> tuple[int, ...]:
        """The shape readers of `t` see: its own, or the one a folded reshape gave it."""
        return self.views.get(t, self.tensors[t].shape)

    def reshape(self, t: str, node: str, shape: tuple[int, ...], op_type: str = "Reshape") -> str:
        """Fold a reshape-like node into the op writing `t`: readers see `shape`, the IR tensor keeps its own."""
        i = next(i for i, op in enumerate(self.ops) if t in op.outputs)
        self.ops[i] = replace(self.ops[i], merged=(*self.ops[i].merged, (node, op_type)))
        self.views[t] = tuple(shape)
        return t

    def flatten(self, t: str, node: str = "flatten") -> str:
        s = self.shape(t)
        return self.reshape(t, node, (s[0], math.prod(s[1:])), "Flatten")

    def _new(self, tensor: Tensor) -> str:
        if tensor.name in self.tensors:
            raise GraphError(f"network '{self.name}': tensor '{tensor.name}' is defined twice")
        self.tensors[tensor.name] = tensor
        return tensor.name

    def _weight(self, name: str, shape: tuple[int, ...]) -> str:
        return self._new(Tensor(name, tuple(shape), is_weight=True))

    def add_op(self, name: str, kind: OpKind, source_type: str, inputs, out_shapes, *, own=(), pre=(), post=(),
               outputs=None, **attrs) -> tuple[str, ...]:
        """Add one op; `own` are (weight, shape) of the main node, `pre`/`post` the folded nodes.

        A folded node is (node name, ONNX type) or (node name, ONNX type, ((weight, shape), ...)).
        Output tensors are named after the last folded node that renames them (not a reshape).
        """
        merged, weights = [(name, source_type)], [self._weight(w, s) for w, s in own]
        last = name
        for entry in (*pre, *post):
            node, op_type, ws = (*entry, ())[:3]
            merged.append((node, op_type))
            weights += [self._weight(w, s) for w, s in ws]
        for node, op_type, *_ in post:
            if op_type not in PASSTHROUGH:
                last = node
        if outputs is None:
            outputs = (last,) if len(out_shapes) == 1 else tuple(f"{name}:{i}" for i in range(len(out_shapes)))
        for t, s in zip(outputs, out_shapes):
            self._new(Tensor(t, tuple(s)))
        self.ops.append(Op(name=name, kind=kind, inputs=tuple(inputs), outputs=tuple(outputs), weights=tuple(weights),
                           source_type=source_type, merged=tuple(merged), **attrs))
        return tuple(outputs)

    def activation(self, x: str, name: str, op_type: str = "Relu") -> str:
        """A standalone activation op (kind eltwise) reading `x`; `fold_activations` later folds it where it can."""
        return self.add_op(name, OpKind.ELTWISE, op_type, (x,), (self.shape(x),))[0]

    def fold_activations(self) -> None:
        """Fold each standalone activation into the op writing its input when it is that tensor's only reader.

        The importer does the same (an activation stays an op of its own only when its input has other
        readers or is a network input), so a builder may write `activation()` per module call, as the
        reference code applies them, and call this once at the end.
        """
        readers: dict[str, int] = {}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                readers[t] = readers.get(t, 0) + 1
        writer = {t: i for i, op in enumerate(self.ops) for t in op.outputs}
        kept: list[Op | None] = list(self.ops)
        for i, op in enumerate(self.ops):
            x = op.inputs[0] if len(op.inputs) == 1 else None
            lone = (op.kind is OpKind.ELTWISE and op.merged == ((op.name, op.source_type),) and not op.weights
                    and x in writer and readers[x] == 1 and x not in self.views)
            if x is None or not lone or op.source_type not in ACTIVATIONS:
                continue
            j = writer.pop(x)
            owner = kept[j]
            assert owner is not None, "a kept op's writer was folded away"  # writer[] points at kept ops only
            out = op.outputs[0]
            kept[j] = replace(owner, outputs=tuple(out if t == x else t for t in owner.outputs),
                              merged=(*owner.merged, (op.name, op.source_type)))
            writer[out] = j
            kept[i] = None
            del self.tensors[x]
        self.ops = [op for op in kept if op is not None]

    def graph(self) -> Graph:
        """The Graph, with tensors listed in the order the ONNX importer lists them (so graphs compare equal)."""
        g = Graph.build(self.name, self.ops, self.tensors.values(), self.inputs, self._outputs(), batch=self.batch)
        order = dict.fromkeys(t for op in g.ops for t in (*op.inputs, *op.outputs, *op.weights))
        order.update(dict.fromkeys(self.inputs))
        return Graph(g.name, g.ops, tuple(self.tensors[t] for t in order), g.inputs, g.outputs, g.batch)

    def _outputs(self) -> tuple[str, ...]:
        read = {t for op in self.ops for t in op.inputs}
        return tuple(t for op in self.ops for t in op.outputs if t not in read or t in self.kept)

    # ---- folded-node helpers ----------------------------------------------
    @staticmethod
    def bn(node: str, channels: int) -> tuple:
        """A folded BatchNormalization: its weight (scale) and bias are parameters, running stats are not."""
        return (node, "BatchNormalization", ((f"{node}.weight", (channels,)), (f"{node}.bias", (channels,))))

    @staticmethod
    def act(node: str, op_type: str = "Relu") -> tuple:
        return (node, op_type)

    def _post(self, name: str, channels: int, bn: str | None, act: str | None) -> tuple:
        post = []
        if bn:
            post.append(self.bn(bn, channels))
        if act:
            post.append(self.act(f"{name}.{act.lower()}", act))
        return tuple(post)

    # ---- layers ------------------------------------------------------------
    def conv(self, x: str, name: str, cout: int, kernel, *, stride=1, padding=0, dilation=1, groups=1,
             bias: bool = False, bn: str | None = None, act: str | None = None, pre=()) -> str:
        """Conv (2-D or 3-D by the input's rank), with an optional folded BatchNorm and activation."""
        xs = self.shape(x)
        n = len(xs) - 2
        k, s, d, p = _tuple(kernel, n), _tuple(stride, n), _tuple(dilation, n), _pads(padding, n)
        spatial = tuple(window_out(xs[2 + i], k[i], s[i], p[i] + p[n + i], d[i]) for i in range(n))
        out = (xs[0], cout, *spatial)
        own = [(f"{name}.weight", (cout, xs[1] // groups, *k))] + ([(f"{name}.bias", (cout,))] if bias else [])
        kind = OpKind.DWCONV if groups > 1 and groups == xs[1] else OpKind.CONV
        return self.add_op(name, kind, "Conv", (x,), (out,), own=own, pre=pre,
                           post=self._post(name, cout, bn, act), kernel=k, stride=s, padding=p, dilation=d,
                           groups=groups, macs=conv_macs(out, xs[1], k, groups))[0]

    def linear(self, x: str, name: str, cout: int, *, bias: bool = True, act: str | None = None,
               weight: str | None = None, bias_name: str | None = None) -> str:
        """A fully connected layer: Gemm on a 2-D input (weight out x in), MatMul + bias Add on a sequence.

        `weight`/`bias_name` override the parameter names (default `name.weight`, `name.bias`).
        """
        weight, bias_name = weight or f"{name}.weight", bias_name or f"{name}.bias"
        xs = self.shape(x)
        if len(xs) == 2:
            cin = xs[1]
            out: tuple[int, ...] = (xs[0], cout)
            own = [(weight, (cout, cin))] + ([(bias_name, (cout,))] if bias else [])
            return self.add_op(name, OpKind.MATMUL, "Gemm", (x,), (out,), own=own,
                               post=self._post(name, cout, None, act), macs=matmul_macs(out, cin))[0]
        cin = xs[-1]
        out = (*xs[:-1], cout)
        tail = ((f"{name}.add", "Add", ((bias_name, (cout,)),)),) if bias else ()
        return self.add_op(name, OpKind.MATMUL, "MatMul", (x,), (out,), own=[(weight, (cin, cout))],
                           post=(*tail, *self._post(name, cout, None, act)),
                           macs=matmul_macs(out, cin))[0]

    def pool(self, x: str, name: str, op_type: str, kernel, *, stride=None, padding=0, ceil: bool = False) -> str:
        """MaxPool / AveragePool with PyTorch's output-size rule (ceil_mode included)."""
        xs = self.shape(x)
        n = len(xs) - 2
        k = _tuple(kernel, n)
        s = _tuple(stride if stride is not None else kernel, n)
        p = _pads(padding, n)
        spatial = tuple(window_out(xs[2 + i], k[i], s[i], p[i] + p[n + i], 1, ceil) for i in range(n))
        return self.add_op(name, OpKind.POOL, op_type, (x,), ((*xs[:2], *spatial),), kernel=k, stride=s,
                           padding=p, dilation=(1,) * n)[0]

    def global_pool(self, x: str, name: str, op_type: str = "GlobalAveragePool") -> str:
        """Global average (or max) pool to 1x1: kernel = the input's spatial size."""
        xs = self.shape(x)
        n = len(xs) - 2
        return self.add_op(name, OpKind.POOL, op_type, (x,), ((*xs[:2], *(1,) * n),), kernel=xs[2:],
                           stride=(1,) * n, padding=(0,) * (2 * n), dilation=(1,) * n)[0]

    def eltwise(self, inputs, name: str, op_type: str = "Add", *, act: str | None = None) -> str:
        """Element-wise op on activations, broadcasting as ONNX does; an activation may fold after it."""
        shapes = [self.shape(t) for t in inputs]
        rank = max(len(s) for s in shapes)
        padded = [(1,) * (rank - len(s)) + s for s in shapes]
        out = tuple(max(dims) for dims in zip(*padded))
        return self.add_op(name, OpKind.ELTWISE, op_type, tuple(inputs), (out,),
                           post=self._post(name, 0, None, act))[0]

    def concat(self, inputs, name: str, axis: int = 1) -> str:
        shapes = [self.shape(t) for t in inputs]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return self.add_op(name, OpKind.CONCAT, "Concat", tuple(inputs), (tuple(out),))[0]

    def split(self, x: str, name: str, sizes, axis: int = 1) -> tuple[str, ...]:
        xs = self.shape(x)
        shapes = [tuple(xs[:axis]) + (s,) + tuple(xs[axis + 1:]) for s in sizes]
        return self.add_op(name, OpKind.SPLIT, "Split", (x,), shapes)

    def unary(self, x: str, name: str, op_type: str, kind: OpKind, out_shape=None, *, own=()) -> str:
        """A single-input op of the given kind (Softmax, LayerNormalization, Transpose, Slice, ...)."""
        return self.add_op(name, kind, op_type, (x,), (tuple(out_shape or self.shape(x)),), own=own)[0]

    def bn_op(self, x: str, name: str, act: str | None = None) -> str:
        """A BatchNorm with no conv to fold into (kind norm), e.g. DenseNet's final norm5 + ReLU."""
        c = self.shape(x)[1]
        own = [(f"{name}.weight", (c,)), (f"{name}.bias", (c,))]
        return self.add_op(name, OpKind.NORM, "BatchNormalization", (x,), (self.shape(x),), own=own,
                           post=self._post(name, c, None, act))[0]

    def matmul(self, a: str, b: str, name: str) -> str:
        """MatMul of two activations (attention), broadcasting the leading axes."""
        sa, sb = self.shape(a), self.shape(b)
        lead = tuple(max(p, q) for p, q in zip(sa[:-2], sb[:-2]))
        out = (*lead, sa[-2], sb[-1])
        return self.add_op(name, OpKind.MATMUL, "MatMul", (a, b), (out,), macs=matmul_macs(out, sa[-1]))[0]

    def transpose(self, x: str, name: str, perm) -> str:
        s = self.shape(x)
        return self.unary(x, name, "Transpose", OpKind.RESHAPE, tuple(s[p] for p in perm))

    def embedding(self, ids: str, name: str, rows: int, dim: int) -> str:
        """nn.Embedding: Gather of `ids` (N, L) from the table `name.weight` (rows, dim) into (N, L, dim)."""
        return self.add_op(name, OpKind.OTHER, "Gather", (ids,), ((*self.shape(ids), dim),),
                           own=((f"{name}.weight", (rows, dim)),))[0]

    def rms_norm(self, x: str, name: str) -> str:
        """RMSNorm over the last axis (ONNX RMSNormalization), with its one weight (the scale)."""
        return self.unary(x, name, "RMSNormalization", OpKind.NORM, own=((f"{name}.weight", (self.shape(x)[-1],)),))

    def rotary(self, x: str, name: str) -> str:
        """Rotary position embedding on (N, heads, L, dh) (ONNX RotaryEmbedding): element-wise, no parameters."""
        return self.unary(x, name, "RotaryEmbedding", OpKind.ELTWISE)

    def layer_norm(self, x: str, name: str) -> str:
        """LayerNormalization over the last axis, with torchvision's weight and bias."""
        d = self.shape(x)[-1]
        return self.unary(x, name, "LayerNormalization", OpKind.NORM, own=((f"{name}.weight", (d,)),
                                                                            (f"{name}.bias", (d,))))
