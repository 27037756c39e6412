"""`Layer`: one CNN layer as the 7-loop nest of Yang et al. (X, Y, C, K, Fw, Fh, plus batch N).

Sec. 3.1 of the blocking paper writes a convolution as loops over output
columns X, rows Y, input channels C, kernels K and the window Fw x Fh; the
footnote adds the batch N. Groups run one after another (no data is shared
between groups), so a layer also carries `groups`, and stride/dilation only
change how much input a tile of outputs touches.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from engine.errors import EngineError, GraphError
from engine.graph import Graph, Op, OpKind

# The loop dimensions, in the order every tile tuple uses.
DIMS = ("X", "Y", "C", "K", "N", "Fw", "Fh")
TENSORS = ("I", "W", "O")  # input image, kernel weights, output image (IB, KB, OB in the paper)

# Which loops index each tensor (Sec. 3.2): a loop a tensor does not depend on reuses it.
RELEVANT = {"I": frozenset({"X", "Y", "C", "N", "Fw", "Fh"}),
            "W": frozenset({"C", "K", "Fw", "Fh"}),
            "O": frozenset({"X", "Y", "K", "N"})}
# The three loop groups: each reuses exactly one tensor (K reuses I, X/Y/N reuse W, C/Fw/Fh reuse O).
REUSE_GROUP = {"I": ("K",), "W": ("X", "Y", "N"), "O": ("C", "Fw", "Fh")}

TABLE4_FILE = resources.files("engine") / "data" / "yang_table4.toml"  # package data: found by any install


@dataclass(frozen=True)
class Layer:
    """A layer's loop bounds (per group); `groups` independent copies run in sequence.

    X, Y are output columns and rows, C input channels and K output channels per group,
    Fw x Fh the window, N the batch. `stride` and `dilation` are (along X, along Y).
    A layer without weights (pooling, LRN) has `has_weights=False`: no kernel buffer.
    `pad` is the zero border the windows read past the real input, (X begin, X end, Y begin, Y end): the
    accelerator makes it on chip, so transfers move only real input positions (`real_range`), while a
    level still stores the padded tile.
    """

    X: int = 1
    Y: int = 1
    C: int = 1
    K: int = 1
    N: int = 1
    Fw: int = 1
    Fh: int = 1
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    has_weights: bool = True
    name: str = ""
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __post_init__(self):
        for d in DIMS:
            v = getattr(self, d)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise EngineError(f"layer '{self.name}': loop bound {d} must be a whole number >= 1, got {v!r}")
        object.__setattr__(self, "stride", tuple(self.stride))
        object.__setattr__(self, "dilation", tuple(self.dilation))
        for what, pair in (("stride", self.stride), ("dilation", self.dilation)):
            if len(pair) != 2 or any(not isinstance(s, int) or s < 1 for s in pair):
                raise EngineError(f"layer '{self.name}': {what} must be two whole numbers >= 1, got {pair!r}")
        if not isinstance(self.groups, int) or self.groups < 1:
            raise EngineError(f"layer '{self.name}': groups must be a whole number >= 1, got {self.groups!r}")
        object.__setattr__(self, "pad", tuple(self.pad))
        if len(self.pad) != 4 or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in self.pad):
            raise EngineError(f"layer '{self.name}': pad must be four whole numbers >= 0 (X begin, X end, Y begin, "
                              f"Y end), got {self.pad!r}")
        for axis in (0, 1):
            lo, hi = self.real_range(axis)
            if hi <= lo:
                raise EngineError(f"layer '{self.name}': pad {self.pad} leaves no real input along "
                                  f"{'XY'[axis]} (the windows span {hi - lo + sum(self.pad[2 * axis:2 * axis + 2])} "
                                  "positions)")

    @property
    def dims(self) -> tuple[int, ...]:
        """Loop bounds in `DIMS` order."""
        return tuple(getattr(self, d) for d in DIMS)

    @property
    def macs(self) -> int:
        """Multiply-accumulates (window operations for pooling) over all groups."""
        return self.groups * math.prod(self.dims)

    def footprint(self, tensor: str, tile) -> int:
        """Words of `tensor` a tile (bounds in `DIMS` order) touches; the input includes its halo."""
        x, y, c, k, n, fw, fh = tile
        if tensor == "I":
            return n * c * span(x, fw, self.stride[0], self.dilation[0]) * span(y, fh, self.stride[1], self.dilation[1])
        if tensor == "W":
            return c * k * fw * fh if self.has_weights else 0
        if tensor == "O":
            return n * k * x * y
        raise EngineError(f"unknown tensor '{tensor}'; choose one of: {', '.join(TENSORS)}")

    def real_range(self, axis: int) -> tuple[int, int]:
        """The real input positions along `axis` (0: X, 1: Y) in the padded coordinates the windows use: [lo, hi)."""
        out, win = (self.X, self.Fw) if axis == 0 else (self.Y, self.Fh)
        extent = (out - 1) * self.stride[axis] + (win - 1) * self.dilation[axis] + 1
        begin, end = self.pad[2 * axis], self.pad[2 * axis + 1]
        return begin, extent - end

    def size(self, tensor: str) -> int:
        """Words of `tensor` in one group (the compulsory traffic of that group): for the input the real positions
        the windows read, without the zero border (`pad`), which is made on chip."""
        if tensor == "I" and any(self.pad):
            return self.N * self.C * _real_positions(self, 0) * _real_positions(self, 1)
        return self.footprint(tensor, self.dims)

    @property
    def tensors(self) -> tuple[str, ...]:
        """The tensors this layer moves: I, W, O, or I, O without weights."""
        return TENSORS if self.has_weights else ("I", "O")

    @classmethod
    def from_op(cls, graph: Graph, op: Op | str) -> Layer:
        """The loop nest of a conv, depthwise conv, fc/matmul, pool or LRN op of `graph`."""
        op = graph.op(op) if isinstance(op, str) else op
        out = graph.tensor(op.outputs[0]).shape
        if op.kind in (OpKind.CONV, OpKind.DWCONV):
            return _conv_layer(graph, op, out)
        if op.kind is OpKind.MATMUL:
            return _matmul_layer(graph, op, out)
        if op.kind is OpKind.POOL:
            return _pool_layer(graph, op, out)
        if op.kind is OpKind.NORM and op.source_type == "LRN":
            return _lrn_layer(op, out)
        raise GraphError(f"op '{op.name}' ({op.kind}, {op.source_type or 'no ONNX type'}) has no convolution-like "
                         "loop nest to block; blocking covers conv, dwconv, matmul, pool and LRN ops")


@cache
def _real_positions(layer: Layer, axis: int) -> int:
    """Real input positions along `axis` that some window of the layer reads (`Layer.real_range`)."""
    outs, taps = (layer.X, layer.Fw) if axis == 0 else (layer.Y, layer.Fh)
    lo, hi = layer.real_range(axis)
    coords = np.unique(np.arange(outs)[:, None] * layer.stride[axis] + np.arange(taps)[None, :] * layer.dilation[axis])
    return int(np.count_nonzero((coords >= lo) & (coords < hi)))


def span(outputs, taps, stride: int, dilation: int):
    """Input positions `outputs` windows of `taps` taps touch along one axis: the distinct a * stride + b * dilation.

    With g = gcd(stride, dilation), (a, b) and (a + dilation / g, b - stride / g) reach the same position, so
    every pair with such a neighbour inside the tile is counted by it. Exact where a contiguous span is not (a
    PE's rows under an unrolled window: stride 2 and dilation 3 touch 14 of the 16 rows from 0 to 15). `outputs`
    and `taps` may be numpy arrays.
    """
    g = math.gcd(stride, dilation)
    at_least_0 = np.maximum if isinstance(outputs, np.ndarray) or isinstance(taps, np.ndarray) else max
    return outputs * taps - at_least_0(outputs - dilation // g, 0) * at_least_0(taps - stride // g, 0)


def _spatial(out: tuple[int, ...]) -> tuple[int, int, int]:
    """(X, Y, extra) of an output's spatial axes; a 3-D op's depth is folded into Y."""
    sp = out[2:]
    if not sp:
        return 1, 1, 1
    return sp[-1], math.prod(sp[:-1]), (sp[0] if len(sp) == 3 else 1)


def _window(op: Op) -> tuple[int, int, tuple[int, int], tuple[int, int]]:
    """(Fw, Fh, stride, dilation) with a 3-D window's depth folded into Fh (as its depth is into Y)."""
    k = op.kernel or (1, 1)
    s = op.stride or (1,) * len(k)
    d = op.dilation or (1,) * len(k)
    if len(k) == 1:
        return k[0], 1, (s[0], 1), (d[0], 1)
    return k[-1], math.prod(k[:-1]), (s[-1], s[-2]), (d[-1], d[-2])


def _pad(graph: Graph, op: Op, x: int, y: int, fw: int, fh: int, stride, dilation) -> tuple[int, int, int, int]:
    """(X begin, X end, Y begin, Y end) of a 1-D or 2-D window's zero border: the begins from the op's ONNX pads,
    the ends what the windows reach past the input's last real position (none for a 3-D window, whose depth is
    folded into Y: its border is then counted as real input; none for a window over a constant, which has no input)."""
    if not op.inputs:
        return (0, 0, 0, 0)
    shape = graph.tensor(op.inputs[0]).shape
    spatial = len(shape) - 2
    if spatial not in (1, 2) or not op.padding:
        return (0, 0, 0, 0)
    begins = op.padding[:spatial]
    axes = [(x, fw, stride[0], dilation[0], begins[-1], shape[-1])]
    if spatial == 2:
        axes.append((y, fh, stride[1], dilation[1], begins[0], shape[-2]))
    out = []
    for n, f, s, d, begin, size in axes:
        extent = (n - 1) * s + (f - 1) * d + 1
        begin = min(begin, extent - 1)
        out += [begin, max(0, extent - begin - size)]
    return out[0], out[1], *((out[2], out[3]) if len(out) == 4 else (0, 0))


def _conv_layer(graph: Graph, op: Op, out) -> Layer:
    if not op.weights:
        raise GraphError(f"op '{op.name}': a convolution needs its weight tensor to be blocked")
    w = graph.tensor(op.weights[0]).shape  # (K_total, C/groups, kh, kw)
    if len(w) < 3:  # the kernel is computed (an activation input); the op's only weight is its bias
        raise GraphError(f"op '{op.name}': its weight tensor '{op.weights[0]}' has shape {w}, not a kernel "
                         "(K, C/groups, kh, ...): a convolution by a computed kernel cannot be blocked")
    x, y, _ = _spatial(out)
    fw, fh, stride, dilation = _window(op)
    g = op.groups
    return Layer(X=x, Y=y, C=w[1], K=out[1] // g, N=out[0], Fw=fw, Fh=fh, stride=stride, dilation=dilation,
                 groups=g, name=op.name, pad=_pad(graph, op, x, y, fw, fh, stride, dilation))


def _matmul_layer(graph: Graph, op: Op, out) -> Layer:
    per_output = op.macs // math.prod(out) if op.macs else 0
    if per_output < 1:
        raise GraphError(f"op '{op.name}': a matmul with {op.macs} MACs for output {out} cannot be blocked")
    if op.weights:  # fc / projection: the weights are shared by every row and every image
        rows = math.prod(out[1:-1]) if len(out) > 2 else 1
        return Layer(X=rows, C=per_output, K=out[-1], N=out[0], name=op.name)
    # activation x activation (attention): every leading index has its own "kernel"
    lead = math.prod(out[:-2]) if len(out) > 2 else 1
    rows = out[-2] if len(out) > 1 else 1
    return Layer(X=rows, C=per_output, K=out[-1], groups=lead, name=op.name)


def _pool_layer(graph: Graph, op: Op, out) -> Layer:
    x, y, _ = _spatial(out)
    fw, fh, stride, dilation = _window(op)
    return Layer(X=x, Y=y, N=out[0], Fw=fw, Fh=fh, stride=stride, dilation=dilation, groups=out[1],
                 has_weights=False, name=op.name, pad=_pad(graph, op, x, y, fw, fh, stride, dilation))


def _lrn_layer(op: Op, out) -> Layer:
    """LRN sums squares over a window of `size` neighbouring channels: a 1-D stencil along C.

    The channel axis becomes the stencil axis X (window Fw = size, taken from `op.kernel`;
    1 when the op does not record it), rows Y, and columns times batch N.
    """
    size = op.kernel[0] if op.kernel else 1
    x, y, _ = _spatial(out)
    return Layer(X=out[1], Y=y, N=out[0] * x, Fw=size, has_weights=False, name=op.name)


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    """A Table 4 entry's Layer fields (lists as tuples), without its notes."""
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in entry.items() if k not in ("source", "note")}


@cache
def table4() -> dict[str, Layer]:
    """The benchmark layers of Yang et al. Table 4, read from engine/data/yang_table4.toml."""
    raw = tomllib.loads(TABLE4_FILE.read_text())
    return {name: Layer(**_fields(entry), name=name)
            for name, entry in raw.items()}
