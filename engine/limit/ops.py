"""Per-op limits of a graph in the cost model's conventions: each op's Einsum and its ski-slope.

Shapes, halos, bytes per tensor and which ops the tile model covers are read off the
fusion cost model's own tables (`engine.fusion.model.FusionModel`), so the limit and the
prices it bounds agree on every convention. A conv or a weight matmul of the tile model gets
its exact ski-slope (`einsum.ski_slope`, streamed operands taking no room as Eq. 4 gives
streamed parameters none), and so does a matmul of two activations the tile model prices as a
batched GEMM (`FusionModel.gemm_k`: attention's scores and context, one GEMM per head and image,
the streamed operand in the weights' place); every other op (element-wise, pooling, depthwise,
concat/split, and the kinds the tile model prices at compulsory traffic: softmax, norm, reshape)
gets a flat curve at its compulsory traffic: inputs, outputs and parameters once, which is what
the cost model charges at least (`cost.least_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from engine.errors import EngineError
from engine.fusion import windowed
from engine.fusion.cost import least_bytes
from engine.fusion.dataflow import Throughput
from engine.fusion.model import FusionModel, TensorGeo, model_for, tensor_views
from engine.graph import Graph, OpKind
from engine.limit.einsum import SAME, Einsum, Rank, ski_slope

_EINSUM_KINDS = {OpKind.CONV, OpKind.MATMUL}


@dataclass(frozen=True)
class OpTable:
    """What the network limits read per op: its ski-slope, compulsory bytes and fused-reload inputs."""

    name: str
    steps: tuple[tuple[int, int], ...]  # (buffer bytes, least traffic bytes), non-increasing
    compulsory: int  # inputs + outputs + parameters once (bytes)
    params: int  # elements of the op's own parameters that can be reloaded (0: none, or shared with another op)
    whole: int  # elements of one image of its smaller full-depth side (input or output): see graph_limit
    can_fuse: bool  # covered by the tile model, so it may share a group
    streams: bool = False  # a batched GEMM: its excess is the streamed operand's reloads, which a group may cut


@lru_cache(maxsize=16)
def tables(graph: Graph, word_bits: int, tp: Throughput | None = None) -> tuple[OpTable, ...]:
    """Every op's table, in topological order (cached per graph, word width and PE array; independent of the buffer).

    Past `windowed.WINDOW_ABOVE` ops they are read window by window (`engine.fusion.windowed`: one model of every
    op keeps ops x ops bitmasks, 5.9 GB at 100,000 ops): a table reads its op alone, which its window's model holds
    as the whole graph's does, except that a weight shared with another window's op is not counted as reloaded."""
    tp = tp or Throughput()
    if len(graph.ops) <= windowed.WINDOW_ABOVE:
        model = model_for(graph, tp, word_bits)
        return tuple(_table(model, i) for i in range(model.n))
    views, shared = tensor_views(graph), windowed.shared_weights(graph)
    found = []
    for lo, hi in windowed.cuts(graph, word_bits, max_ops=windowed.WINDOW_OPS):
        model = FusionModel(windowed.window_graph(graph, lo, hi), tp, word_bits, views=views)
        for i, op in enumerate(model.graph.ops):
            table = _table(model, i)
            found.append(replace(table, params=0, whole=0) if shared.intersection(op.weights) else table)
    return tuple(found)


def op_table(graph: Graph, op_name: str, word_bits: int) -> OpTable:
    """The table of one op, with an error naming the op when the graph has none of that name."""
    if word_bits < 1 or word_bits > 64:
        raise EngineError(f"word_bits must be between 1 and 64, got {word_bits}")
    index = graph.position.get(op_name)
    if index is None:
        raise EngineError(f"graph '{graph.name}' has no op '{op_name}'")
    return tables(graph, word_bits)[index]


def _table(model: FusionModel, i: int) -> OpTable:
    e = einsum_of(model, i)
    compulsory = least_bytes(model, 1 << i)
    steps = ski_slope(e, model.word_bits) if e is not None else ((0, compulsory),)
    fuses = model.covered[i] and not model.inplace[i]
    params = model.own_weight_elems[i] if fuses and not model.shares_weights[i] else 0
    whole = 0
    if params:
        out = sum(_geo(model, j).row * _geo(model, j).h for j in model.outs[i])
        inp = sum(_geo(model, j).row * _geo(model, j).h for j in model.ins[i])
        whole = min(out, inp)
    return OpTable(model.names[i], steps, compulsory, params, whole, model.covered[i], bool(model.gemm_k[i]))


def _geo(model: FusionModel, j: int) -> TensorGeo:
    """Tensor j's geometry: every tensor of an op the tile model covers has one."""
    geo = model.tgeo[j]
    assert geo is not None, f"tensor {j} of a covered op without a geometry"
    return geo


def einsum_of(model: FusionModel, i: int) -> Einsum | None:
    """The Einsum of a conv or weight matmul the tile model covers (one activation in, one out), or of a batched GEMM
    (`FusionModel.gemm_k`: rows x reduction x output columns, one per head and image), else None."""
    op = model.graph.ops[i]
    if model.gemm_k[i]:
        g_out, rows = _geo(model, model.outs[i][0]), model.gemm_rows[i]
        fin, fout, p_elems, _ = model.io(1 << i)
        return Einsum((Rank(rows, rows, (SAME, 1, 1)),), model.gemm_k[i], g_out.w, 1,
                      g_out.batch * g_out.channels * g_out.h // rows, fin, math.ceil(p_elems * model.word_bits / 8), fout)
    if op.kind not in _EINSUM_KINDS or not model.covered[i] or len(model.ins[i]) != 1 or len(model.outs[i]) != 1:
        return None
    j_in, j_out = model.ins[i][0], model.outs[i][0]
    g_in, g_out = _geo(model, j_in), _geo(model, j_out)
    fin, fout, p_elems, _ = model.io(1 << i)
    pbytes = math.ceil(p_elems * model.word_bits / 8)
    if op.kind == OpKind.MATMUL:
        if model.rules[i][0][0] != SAME or g_in.w != 1 or g_out.w != 1:
            return None
        rows = g_out.batch * g_out.h  # every token of every image is one row of one GEMM
        return Einsum((Rank(rows, rows, (SAME, 1, 1)),), g_in.channels, g_out.channels, 1, 1, fin, pbytes, fout)
    groups = max(1, op.groups)
    if g_in.channels % groups or g_out.channels % groups:
        return None
    spatial = (Rank(g_out.batch, g_in.batch, (SAME, 1, 1)), Rank(g_out.h, g_in.h, model.rules[i][0]),
               Rank(g_out.w, g_in.w, model.wrules[i][0]))
    return Einsum(spatial, g_in.channels // groups, g_out.channels // groups, math.prod(op.kernel) if op.kernel else 1,
                  groups, fin, pbytes, fout)
