"""Per-graph tables for the fused-group cost model, with groups as bitmasks over the topological order.

A `FusionModel` is built once per (graph, PE-array throughput, word width) and is
independent of the buffer size, so its caches (tile footprints by group) survive a
buffer-size change: the dashboard's slider re-searches from cached footprints. What
depends on the buffer lives in the `SizedModel` of each capacity (`engine.fusion.sized`),
which the model keeps in `capacities`. Every cache is a bounded, thread-safe `Memo`
declared in `__init__` (the dashboard's worker threads share models); `clear()` empties them.
Bit i of a group mask is `graph.ops[i]`. All footprints are counted in elements.

Tile geometry: an activation of rank 4 is (N, C, H, W), rank 3 is (N, L, D) read as
H = L, W = 1, C = D, rank 2 is (N, C) with H = W = 1. A tile is a band of whole rows
(t_w = O_w, the line-buffer form of Optimus Sec. 5.2) of every tensor in the group.
Attention tensors (N, heads, L, d) are rank 4 with C = heads and H = L: a group of a
transformer block runs in bands of tokens as a CNN group runs in bands of rows.

A *streamed* tensor is the second operand of a matmul of two activations (K^T or V of
attention), or the input of a reshape whose output is one: every token tile needs all
of it, so a group that does not make it reads it as it reads parameters (Eq. 3:
resident when it fits beside the tiles, else once per sub-group; no room while
streamed). A group that makes it holds it whole (its producer's tile is every row).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from engine.bitmask import bits
from engine.fusion.dataflow import Throughput
from engine.fusion.memo import Memo
from engine.graph import Graph, OpKind

WINDOW, SAME, WHOLE = 0, 1, 2  # how an op's input rows follow from its output rows
MEMO_SIZE = 1 << 17  # entries each per-group cache keeps (least recently used dropped first)
CAPACITIES = 16  # buffer capacities whose `SizedModel` (and its caches) a model keeps
_MERGE_AT = 16  # ISOA states beyond which states telling every pending consumer the same are merged

_TILED_KINDS = {OpKind.CONV, OpKind.DWCONV, OpKind.POOL, OpKind.ELTWISE, OpKind.CONCAT, OpKind.SPLIT,
                OpKind.MATMUL, OpKind.SOFTMAX, OpKind.NORM, OpKind.RESHAPE}
_INPLACE_KINDS = {OpKind.CONCAT, OpKind.SPLIT, OpKind.RESHAPE}  # write into / read from (views of) one buffer
_LAYOUT_KINDS = {OpKind.RESHAPE, OpKind.SPLIT}  # views of one tensor: they move no data of their own
_ROWWISE_KINDS = {OpKind.SOFTMAX, OpKind.NORM}  # reduce along a token row: a tile needs whole rows, all columns
_CHANNELWISE_KINDS = {OpKind.DWCONV, OpKind.POOL, OpKind.ELTWISE, OpKind.CONCAT, OpKind.SPLIT}


@dataclass(frozen=True)
class TensorGeo:
    """Row geometry of one activation: rows H, elements per row of one image, channels C, batch N."""

    h: int
    row: int
    channels: int
    batch: int
    nbytes: int

    @property
    def w(self) -> int:
        return self.row // self.channels


def tensor_geo(shape: tuple[int, ...], word_bits: int) -> TensorGeo | None:
    """Row geometry of an activation shape, or None for shapes the tile model does not cover."""
    nbytes = math.ceil(math.prod(shape) * word_bits / 8)
    if len(shape) == 4:
        n, c, h, w = shape
        return TensorGeo(h, c * w, c, n, nbytes)
    if len(shape) == 3:
        n, length, d = shape
        return TensorGeo(length, d, d, n, nbytes)
    if len(shape) == 2:
        n, c = shape
        return TensorGeo(1, c, c, n, nbytes)
    return None


class FusionModel:
    """Cost-model tables of one graph on one PE array and word width; caches footprints by group mask."""

    def __init__(self, graph: Graph, tp: Throughput, word_bits: int, *, free: Mapping[str, int] | None = None,
                 views: Mapping[str, tuple[int, ...]] | None = None, online: frozenset[str] | None = None):
        # `free` (the windows of engine.fusion.bound): tensor -> elements per row a group holds of it when it
        # reads it, at no DRAM traffic; a weight named there weighs nothing. `views`: the shapes the tile model
        # reads (`tensor_views`), and `online` the attention softmaxes (`_attention`; their second pass not
        # charged), when a window's graph cannot tell
        free = free or {}
        self.free = free
        self.graph, self.tp, self.word_bits = graph, tp, word_bits
        ops = graph.ops
        self.n = len(ops)
        self.names = tuple(op.name for op in ops)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.batch = graph.batch
        tnames = sorted({t for op in ops for t in op.inputs + op.outputs} | set(graph.inputs))
        self.tindex = {t: j for j, t in enumerate(tnames)}
        self.tnames = tuple(tnames)
        self.views = tensor_views(graph) if views is None else views
        self._online = online
        self.tgeo = tuple(tensor_geo(self.shape(t), word_bits) for t in tnames)
        self.tbytes = tuple(0 if t in free else graph.tensors[t].nbytes(word_bits) for t in tnames)
        # elements per row of tensor j held on chip when a group reads it from outside (its row unless `free`)
        self.held = tuple(free.get(t, g.row if g else 0) for t, g in zip(tnames, self.tgeo))
        self.producer = [-1] * len(tnames)
        for i, op in enumerate(ops):
            for t in op.outputs:
                self.producer[self.tindex[t]] = i
        self.consumer_mask = [0] * len(tnames)
        for i, op in enumerate(ops):
            for t in set(op.inputs):
                self.consumer_mask[self.tindex[t]] |= 1 << i
        graph_outputs = {self.tindex[t] for t in graph.outputs if t in self.tindex}
        self.is_graph_output = [j in graph_outputs for j in range(len(tnames))]
        self.ins = tuple(tuple(dict.fromkeys(self.tindex[t] for t in op.inputs)) for op in ops)
        self.outs = tuple(tuple(self.tindex[t] for t in op.outputs) for op in ops)
        self.pred = [0] * self.n
        self.succ = [0] * self.n
        for i in range(self.n):
            for j in self.ins[i]:
                p = self.producer[j]
                if p >= 0:
                    self.pred[i] |= 1 << p
                    self.succ[p] |= 1 << i
        # link[i]: ops i is joined to in a group: producers, consumers and co-readers of a tensor
        self.link = [self.pred[i] | self.succ[i] for i in range(self.n)]
        for i in range(self.n):
            for j in self.ins[i]:
                self.link[i] |= self.consumer_mask[j] & ~(1 << i)
        self.weights = tuple(tuple(op.weights) for op in ops)
        reads = graph.weight_reads  # an embedding table: only the rows its Gather looks up
        self.weight_elems = {w: 0 if w in free else reads[w] for op in ops for w in op.weights}
        users: dict[str, int] = {}
        for op in ops:
            for w in set(op.weights):
                users[w] = users.get(w, 0) + 1
        self.own_weight_elems = [sum(self.weight_elems[w] for w in set(op.weights)) for op in ops]
        self.shares_weights = [any(users[w] > 1 for w in op.weights) for op in ops]
        self.own_weight_bytes = [math.ceil(e * word_bits / 8) for e in self.own_weight_elems]
        self.total_param_bytes = sum(self.own_weight_bytes)
        self._op_tables(ops)
        self._closure()
        self._fp = Memo(MEMO_SIZE)  # (group, row steps, ISOA on) -> elements
        self._bounds = Memo(MEMO_SIZE)  # group -> finest footprint bounds
        self._isoa = Memo(MEMO_SIZE)  # group -> (saving, ISOA ops, footprint), finest tiles
        self._io = Memo(MEMO_SIZE)  # group -> (fmap-in bytes, fmap-out bytes, parameter elements, most rows)
        self._whole = Memo(MEMO_SIZE)  # group -> lower bound on its whole-image footprint
        self._finest = Memo(MEMO_SIZE)  # group -> rows(group, 0), shared by the ISOA bounds and program
        self._kernel = Memo(1)  # "tables" -> the tables laid out for the compiled kernel (`kernel_tables`)
        self.cuts = Memo(MEMO_SIZE)  # covered ops -> cheapest cut of them in two (`engine.fusion.floor`)
        self.windows = Memo(CAPACITIES)  # down-set budget -> windows of the lower bound (`engine.fusion.bound`)
        self.counts = Memo(CAPACITIES)  # cap -> the graph's down-sets counted to just past it (`optimus.limits_for`)
        self.capacities = Memo(CAPACITIES)  # Capacity -> this model's `SizedModel` at it (`engine.fusion.sized`)

    def kernel_tables(self, lay_out):
        """The model's tables laid end to end for the compiled kernel by `lay_out` (`core.tables.layout`), built
        once and kept here: the model owns its caches, and the kernel's modules import the model, not it them."""
        return self._kernel.get_or_make("tables", lambda: lay_out(self))

    def clear(self) -> None:
        """Forget every cached result (footprints, schedules at every capacity, windows); tables stay."""
        for memo in (self._fp, self._bounds, self._isoa, self._io, self._whole, self._finest, self.cuts,
                     self.windows, self.counts, self.capacities):
            memo.clear()

    def shape(self, t: str) -> tuple[int, ...]:
        """The shape the tile model reads (`tensor_views`)."""
        return self.views.get(t, self.graph.tensors[t].shape)

    def geo(self, j: int) -> TensorGeo:
        """Row geometry of tensor j, one the tile model covers (every tensor of a covered op has one)."""
        g = self.tgeo[j]
        if g is None:
            raise ValueError(f"tensor '{self.tnames[j]}' of shape {self.shape(self.tnames[j])} has no row geometry")
        return g

    # ---- static tables ---------------------------------------------------
    def _op_tables(self, ops) -> None:
        """Per op: rows H, tile rows floor, row elements (full and under ISOA), and input row rules."""
        t_c, t_h = self.tp.t_c, self.tp.t_h
        self.covered, self.inplace, self.channelwise, self.passes = [], [], [], []
        self.out_h, self.floor, self.full_row, self.save_row = [], [], [], []
        self.rules: list[tuple[tuple[int, int, int], ...]] = []  # per input: rows rule
        self.wrules: list[tuple[tuple[int, int, int], ...]] = []  # per input: columns rule (layer-wise tiles)
        for i, op in enumerate(ops):
            geos = [self.tgeo[j] for j in self.ins[i] + self.outs[i]]
            covered = op.kind in _TILED_KINDS and all(g is not None for g in geos) and self._covers(i, op)
            self.covered.append(covered)
            inplace = covered and op.kind in _INPLACE_KINDS
            self.inplace.append(inplace)
            self.channelwise.append(op.kind in _CHANNELWISE_KINDS or (
                op.kind == OpKind.SOFTMAX and len(self.shape(op.outputs[0])) == 4) or _act_matmul(op))
            # an element-wise op on token matrices may keep T_c channels whatever its producers keep: channel c of
            # its output needs channel c of its inputs only (a fused MLP's activation and SwiGLU product)
            self.passes.append(covered and op.kind == OpKind.ELTWISE and all(
                len(self.shape(self.tnames[j])) == 3 for j in self.ins[i] + self.outs[i]))
            if not covered:
                self.out_h.append(1)
                self.floor.append(1)
                self.full_row.append(0)
                self.save_row.append(0)
                self.rules.append(())
                self.wrules.append(())
                continue
            outs = [self.geo(j) for j in self.outs[i]]
            h = max(g.h for g in outs)
            self.out_h.append(h)
            self.floor.append(min(t_h, h))
            full = 0 if inplace else sum(g.row for g in outs)
            isoa = 0 if inplace else sum(min(t_c, g.channels) * (g.row // g.channels) for g in outs)
            self.full_row.append(full)
            self.save_row.append(full - isoa)
            self.rules.append(tuple(self._rule(op, j, h, 0) for j in self.ins[i]))
            self.wrules.append(tuple(self._rule(op, j, max(g.w for g in outs), 1) for j in self.ins[i]))
        self.passes_mask = sum(1 << i for i, v in enumerate(self.passes) if v)
        # layout ops folded into their neighbours' addressing: a view (reshape, transpose, split of heads) between
        # two ops, not a network input's or output's own layout; alone it moves nothing (`cost.compute_schedule`)
        self.folds = [self.inplace[i] and op.kind in _LAYOUT_KINDS and all(self.producer[j] >= 0 for j in self.ins[i])
                      and not any(self.is_graph_output[j] for j in self.outs[i]) for i, op in enumerate(ops)]
        self._streams(ops)
        self._gemms(ops)
        self._attention(ops)
        # per op, flat for the kernel's growth (`core.grow._add`, the search's inner loop): each input as (tensor, producer, bytes, readers,
        # returned by the network, whole-image elements held when read from outside, elements loaded when
        # streamed), bytes of the outputs anyone reads, and the op's whole-image ofmap elements under ISOA
        self.grow_ins = tuple(tuple((j, self.producer[j], self.tbytes[j], self.consumer_mask[j],
                                     self.is_graph_output[j], self.held[j] * self.geo(j).h if self.covered[i] else 0,
                                     self.stream_elems[j])
                                    for j in self.ins[i]) for i in range(self.n))
        self.grow_out = tuple(sum(self.tbytes[j] for j in self.outs[i]
                                  if self.is_graph_output[j] or self.consumer_mask[j]) for i in range(self.n))
        self.whole_row = tuple((self.full_row[i] - self.save_row[i]) * self.out_h[i] for i in range(self.n))
        # per op and input: (tensor, a, c with r output rows needing a * r + c input rows, its producer, the
        # producer's rows, tensor rows and row elements), flat for `grow`'s halo loop
        self.feeds = tuple(tuple((j, stride if mode == WINDOW else int(mode == SAME),
                                  kern - stride if mode == WINDOW else (0 if mode == SAME else kern), self.producer[j],
                                  self.out_h[self.producer[j]] if self.producer[j] >= 0 else 0,
                                  self.geo(j).h, self.held[j])
                                 for j, (mode, kern, stride) in zip(self.ins[i], self.rules[i]))
                           for i in range(self.n))

    def _covers(self, i: int, op) -> bool:
        """Whether the row-tile model describes this op: 2-D windows; a matmul with weights on one activation, or
        of two activations whose first keeps the rows; row-wise norms on token matrices; reshapes `_reshape_mode`
        reads; channel concat / split."""
        tensors = self.ins[i] + self.outs[i]
        if op.kind in (OpKind.CONV, OpKind.DWCONV, OpKind.POOL):
            return len(op.kernel) in (0, 2) and all(self.tgeo[j] is not None and len(
                self.graph.tensors[self.tnames[j]].shape) == 4 for j in tensors)
        if op.kind == OpKind.MATMUL:
            if _act_matmul(op):
                return len(self.outs[i]) == 1 and self.geo(self.ins[i][0]).h == self.geo(self.outs[i][0]).h
            return len(self.ins[i]) == 1 and bool(op.weights)
        if op.kind in _ROWWISE_KINDS:  # LayerNorm/RMSNorm of token matrices; softmax of scores or logits
            ranks = {len(self.shape(self.tnames[j])) for j in tensors}
            return len({self.geo(j).h for j in tensors}) == 1 and ranks <= ({3} if op.kind == OpKind.NORM else {3, 4})
        if op.kind == OpKind.RESHAPE:
            return _reshape_mode(self.shape(op.inputs[0]), self.shape(op.outputs[0])) is not None if (
                len(op.inputs) == 1 and len(op.outputs) == 1) else False
        if op.kind == OpKind.CONCAT and len(self.outs[i]) == 1 and self._token_concat(op):
            return True  # appends tokens (a KV cache, a class token): reads its inputs whole
        if op.kind in _INPLACE_KINDS:  # channel concat / split: every tensor has the same rows
            return len({self.geo(j).h for j in tensors}) == 1
        return True

    def _token_concat(self, op) -> bool:
        """Whether a concat joins token matrices or attention tensors along the tokens (rank 3 axis 1, rank 4 axis 2)."""
        out = self.shape(op.outputs[0])
        shapes = [self.shape(t) for t in op.inputs] + [self.graph.tensors[w].shape for w in op.weights]
        axis = len(out) - 2
        return len(out) in (3, 4) and all(len(s) == len(out) and s[:axis] in (out[:axis], (1, *out[1:axis]))
                                          and s[axis + 1:] == out[axis + 1:] for s in shapes) and (
            sum(s[axis] for s in shapes) == out[axis])

    def _rule(self, op, j: int, out_size: int, axis: int) -> tuple[int, int, int]:
        """(mode, effective kernel, stride): the rows (axis 0) or columns (axis 1) of input j that r outputs need."""
        size_in = self.geo(j).h if axis == 0 else self.geo(j).w
        if op.kind in (OpKind.CONV, OpKind.DWCONV, OpKind.POOL) and op.kernel:
            dil = op.dilation[axis] if op.dilation else 1
            return WINDOW, dil * (op.kernel[axis] - 1) + 1, op.stride[axis] if op.stride else 1
        if _act_matmul(op) and (axis or self.tnames[j] == op.inputs[1]):
            return WHOLE, size_in, 1  # a row of A times all of B
        if axis and op.kind in _ROWWISE_KINDS or (axis and op.kind == OpKind.RESHAPE):
            return WHOLE, size_in, 1  # the reduction (or the reshuffle) spans the whole row
        if op.kind == OpKind.RESHAPE:
            mode = _reshape_mode(self.shape(op.inputs[0]), self.shape(op.outputs[0]))
            return (SAME, 1, 1) if mode == SAME else (WHOLE, size_in, 1)
        if size_in == out_size or size_in == 1:
            return SAME, 1, 1
        return WHOLE, size_in, 1

    def _attention(self, ops) -> None:
        """Key tiles of attention (FlashAttention's online softmax): scores and probabilities held T_w keys wide.

        A softmax whose scores only it reads and whose probabilities only a matmul of two activations reads (as
        its first operand) is an attention softmax. Its tiles, and its scores' producer's, hold T_w keys of every
        head (plus the running max and sum of each head for the softmax); the context accumulates over key
        tiles, so it reads probabilities from outside T_w keys wide too. A group that makes the scores and
        softmaxes them without the context matmul cannot normalise a row before its last key: it writes the
        scores out and reads them back for a second pass (`spill`: twice the scores' bytes).
        """
        self.spill_on = [(-1, 0)] * self.n  # attention softmax -> (its scores' producer, bytes of the spill)
        self.spill_off = [-1] * self.n  # context matmul -> its attention softmax
        online = []  # names of the attention softmaxes
        self.key_width = [0] * self.n  # attention softmax -> keys per tile
        self.context_of = {}  # attention softmax -> its context matmul
        for i, op in enumerate(ops):
            if op.kind != OpKind.SOFTMAX or not self.covered[i] or len(self.ins[i]) != 1 or len(self.outs[i]) != 1:
                continue
            sc, pr = self.ins[i][0], self.outs[i][0]
            readers = self.consumer_mask[pr]
            av = readers.bit_length() - 1
            if self._online is not None:  # a window of engine.fusion.bound: as the whole graph says
                if op.name not in self._online:
                    continue
            elif self.consumer_mask[sc] != 1 << i or readers.bit_count() != 1 or self.is_graph_output[pr] or not (
                    self.covered[av] and _act_matmul(ops[av]) and ops[av].inputs[0] == self.tnames[pr]):
                continue
            online.append(op.name)
            geo = self.geo(pr)
            width = min(geo.w, max(1, self.tp.t_w))  # keys per tile
            self.key_width[i] = width
            heads, part = geo.channels, min(self.tp.t_c, geo.channels)
            self.full_row[i], self.save_row[i] = heads * (width + 2), (heads - part) * (width + 2)
            qk = self.producer[sc]
            if qk >= 0 and self.covered[qk] and not self.inplace[qk] and not self.is_graph_output[sc]:
                self.full_row[qk], self.save_row[qk] = heads * width, (heads - part) * width
                self.spill_on[i] = (qk, 0 if self._online is not None else 2 * self.tbytes[sc])
            if readers:
                self.spill_off[av] = i
                self.context_of[i] = av
            held = list(self.held)
            held[pr] = heads * width
            self.held = tuple(held)
        self.online = frozenset(online)

    def spill(self, mask: int) -> int:
        """Bytes of the second softmax pass of the attention softmaxes a group makes the scores of but whose
        context it does not compute (`_attention`)."""
        total = 0
        for i in self.members(mask):
            qk, nbytes = self.spill_on[i]
            if qk >= 0 and (mask >> qk) & 1:
                total += nbytes
            s = self.spill_off[i]
            if s >= 0 and (mask >> s) & 1 and self.spill_on[s][0] >= 0 and (mask >> self.spill_on[s][0]) & 1:
                total -= self.spill_on[s][1]
        return total

    def _gemms(self, ops) -> None:
        """`gemm_k`, `gemm_rows`: per op, the reduction length and rows of one GEMM of a matmul of two activations
        whose second operand is streamed (attention's scores and context: one GEMM per head of B and image, the
        rows of its g query heads stacked, g = 1 but for grouped-query heads), else 0. Alone, such an op is tiled
        in rows, output columns and reduction (`cost._Lone`), not only in rows of tokens."""
        self.gemm_k, self.gemm_rows = [0] * self.n, [0] * self.n
        for i, op in enumerate(ops):
            if not (self.covered[i] and _act_matmul(op) and len(self.ins[i]) == 2 and len(self.outs[i]) == 1):
                continue
            (a, b), o = self.ins[i], self.outs[i][0]
            ga, gb, go = self.geo(a), self.geo(b), self.geo(o)
            if self.stream[b] and ga.channels == go.channels and go.channels % gb.channels == 0 and ga.h == go.h and (
                    gb.h == ga.w and gb.w == go.w and ga.batch == go.batch):
                self.gemm_k[i], self.gemm_rows[i] = ga.w, go.h * (go.channels // gb.channels)

    def _streams(self, ops) -> None:
        """Which tensors are streamed (see the module docstring): read only as the second operand of a matmul of
        two activations, or by covered reshapes whose output is streamed; `stream_elems` 0 when not (or free)."""
        stream = [False] * len(self.tnames)
        edges: dict[int, bool] = {}  # tensor -> whether every read of it is a streaming one so far
        for i in range(self.n - 1, -1, -1):
            op = ops[i]
            for j in self.outs[i]:
                stream[j] = bool(self.consumer_mask[j]) and edges.get(j, False)
            for j in self.ins[i]:
                ok = self.covered[i] and ((_act_matmul(op) and self.tnames[j] == op.inputs[1]) or (
                    self.inplace[i] and all(stream[o] for o in self.outs[i])))
                edges[j] = edges.get(j, True) and ok
        for j, p in enumerate(self.producer):
            if p < 0:
                stream[j] = bool(self.consumer_mask[j]) and edges.get(j, False)
        self.stream = tuple(stream)
        self.stream_elems = tuple(self.tbytes[j] and self.graph.tensors[t].elements if stream[j] else 0
                                  for j, t in enumerate(self.tnames))
        self.held = tuple(0 if s else h for s, h in zip(stream, self.held))  # streamed: no room, as Eq. 4's weights

    def _closure(self) -> None:
        """Ancestor and descendant masks of every op (for the convexity check)."""
        self.anc = _reach(self.pred, range(self.n))
        self.desc = _reach(self.succ, range(self.n - 1, -1, -1))

    # ---- group structure -------------------------------------------------
    members = staticmethod(bits)  # op indices of a mask, ascending (topological order)

    def mask_of(self, names) -> int:
        m = 0
        for name in names:
            m |= 1 << self.index[name]
        return m

    def downsets(self, ops: int, cap: int) -> int:
        """How many down-sets the ops `ops` have (predecessors outside taken as done), counted to just past `cap`."""
        ideals = [0]
        for x in self.members(ops):
            need = self.pred[x] & ops
            ideals += [d | 1 << x for d in ideals if not need & ~d]
            if len(ideals) > cap:
                break
        return len(ideals)

    def is_convex(self, mask: int) -> bool:
        """No op outside the group lies on a path between two ops of the group."""
        below = above = 0
        for i in self.members(mask):
            below |= self.anc[i]
            above |= self.desc[i]
        return not (below & above & ~mask)

    def component(self, mask: int) -> int:
        """The members of `mask` reachable from its lowest one through producer-consumer edges or a shared read."""
        start = mask & -mask
        seen, todo = start, start
        while todo:
            b = todo & -todo
            todo ^= b
            new = self.link[b.bit_length() - 1] & mask & ~seen
            seen |= new
            todo |= new
        return seen

    def is_connected(self, mask: int) -> bool:
        """Weakly connected through producer-consumer edges or a tensor two members read."""
        return self.component(mask) == mask

    def succ_of(self, mask: int) -> int:
        """Union of the successors of the ops in `mask`."""
        out = 0
        while mask:
            b = mask & -mask
            mask ^= b
            out |= self.succ[b.bit_length() - 1]
        return out

    def io(self, mask: int) -> tuple[int, int, int, int]:
        """(fmap-in bytes, fmap-out bytes, parameter elements, largest row count) of a group; a streamed tensor
        made outside counts with the parameters, a softmax's second pass (`spill`) with the fmap-out bytes."""
        hit = self._io.get(mask)
        if hit is not None:
            return hit
        fin = fout = 0
        read: set[int] = set()
        made: set[int] = set()
        wset: set[str] = set()
        kbig = 1
        for i in self.members(mask):
            read.update(self.ins[i])
            made.update(self.outs[i])
            wset.update(self.weights[i])
            kbig = max(kbig, self.out_h[i])
        streamed = 0
        for j in read - made:
            if self.stream_elems[j]:
                streamed += self.stream_elems[j]
            else:
                fin += self.tbytes[j]
            geo = self.tgeo[j]
            if geo is not None:
                kbig = max(kbig, geo.h)
        for j in made:
            if self.is_graph_output[j] or self.consumer_mask[j] & ~mask:
                fout += self.tbytes[j]
        hit = (fin, fout + self.spill(mask), sum(self.weight_elems[w] for w in wset) + streamed, kbig)
        self._io.put(mask, hit)
        return hit

    # ---- Eq. 4 footprint ---------------------------------------------------
    def rows(self, mask: int, k: int) -> tuple[dict[int, int], dict[int, int]]:
        """Tile rows of every member op and every group-input tensor when the group runs in `k` row steps.

        Backward propagation t(l-1) = t(l)*S + K - S (Optimus Sec. 2.3), the max over
        consumers at branches, every tile at least min(T_h, H) rows (Eq. 4's lower bound,
        applied to every op) and at least ceil(H / k) rows so all tensors advance together;
        k = 0 means the finest tiles.
        """
        if not k:
            hit = self._finest.get(mask)
            if hit is not None:
                return hit
        demand: dict[int, int] = {}
        op_rows: dict[int, int] = {}
        for i in reversed(self.members(mask)):
            h = self.out_h[i]
            r = self.floor[i]
            if k:
                r = max(r, -(-h // k))
            for j in self.outs[i]:
                r = max(r, demand.get(j, 0))
            r = min(h, r)
            op_rows[i] = r
            for j, (mode, kern, stride) in zip(self.ins[i], self.rules[i]):
                need = (r - 1) * stride + kern if mode == WINDOW else (r if mode == SAME else kern)
                if need > demand.get(j, 0):
                    demand[j] = need
        in_rows = {}
        for j, need in demand.items():
            p = self.producer[j]
            if p < 0 or not (mask >> p) & 1:
                h = self.geo(j).h
                in_rows[j] = min(h, max(need, -(-h // k) if k else 1))
        if not k:
            self._finest.put(mask, (op_rows, in_rows))
        return op_rows, in_rows

    def footprint(self, mask: int, k: int, isoa: bool = True) -> int:
        """Elements of one image's fmap tiles on chip in `k` row steps (Eq. 4's left side).

        ISOA decisions are those that minimise the finest tiles (Alg. 2 decides at the
        smallest tile, Sec. 5.2) and are kept for every k; `isoa=False` is the prior
        works' footprint with every ofmap tile at full channel depth.
        """
        key = (mask, k, isoa)
        hit = self._fp.get(key)
        if hit is not None:
            return hit
        if isoa and not k:
            total = self.isoa(mask)[2]
        else:
            op_rows, in_rows = self.rows(mask, k)
            total = sum(self.held[j] * r for j, r in in_rows.items())
            chosen = self.isoa(mask)[1] if isoa else 0
            for i, r in op_rows.items():
                total += (self.full_row[i] - (self.save_row[i] if (chosen >> i) & 1 else 0)) * r
        self._fp.put(key, total)
        return total

    def fits_finest(self, mask: int, room: int) -> bool:
        """Whether the exact finest footprint is <= room, settled by cheap bounds when they allow."""
        hit = self._isoa.get(mask)
        if hit is not None:
            return hit[2] <= room
        if not mask & (mask - 1):
            return self.isoa(mask)[2] <= room  # one op: the exact answer is as cheap as the bounds
        lower, upper = self.isoa_bounds(mask)
        if upper <= room:
            return True
        if lower > room:
            return False
        return self.isoa(mask)[2] <= room

    def isoa_bounds(self, mask: int) -> tuple[int, int]:
        """(lower, upper) bounds on the finest footprint from ISOA assignments found greedily.

        Upper: ISOA given to ops by decreasing saving whenever no chosen op conflicts.
        Lower: the saving of all ops at once, less min(saving) over a greedy matching of
        conflicting pairs (of two conflicting ops at most one adopts ISOA).
        """
        hit = self._bounds.get(mask)
        if hit is not None:
            return hit
        op_rows, in_rows = self.rows(mask, 0)
        after = self._reach(mask)
        gain = {i: self.save_row[i] * op_rows[i] for i in after if not self.inplace[i] and self.save_row[i] > 0}
        after = {i: m & ~self.passes_mask for i, m in after.items()}  # conflicts: a passing op conflicts with none
        before = dict.fromkeys(gain, 0)
        gmask = sum(1 << i for i in gain)
        for p in gain:
            m = after[p] & gmask
            while m:
                b = m & -m
                m ^= b
                before[b.bit_length() - 1] |= 1 << p
        chosen = saving = 0
        for g, i in sorted(((g, i) for i, g in gain.items()), reverse=True):
            if not chosen & (after[i] | before[i]):
                chosen |= 1 << i
                saving += g
        full = sum(self.held[j] * r for j, r in in_rows.items()) + sum(
            self.full_row[i] * r for i, r in op_rows.items())
        most = self._most_saving(gain, after)
        self._bounds.put(mask, (full - most, full - saving))
        return full - most, full - saving

    def whole_lower(self, mask: int) -> int:
        """A lower bound on the footprint of whole images (k = 1) under any valid ISOA assignment."""
        hit = self._whole.get(mask)
        if hit is not None:
            return hit
        after = self._reach(mask)
        made = 0
        full = 0
        for i in after:
            made |= sum(1 << j for j in self.outs[i])
            full += self.full_row[i] * self.out_h[i]
        for j in {j for i in after for j in self.ins[i]}:
            geo = self.tgeo[j]
            if not (made >> j) & 1 and geo is not None:
                full += self.held[j] * geo.h
        gain = {i: self.save_row[i] * self.out_h[i] for i in after
                if not self.inplace[i] and self.save_row[i] > 0}
        hit = full - self._most_saving(gain, after)
        self._whole.put(mask, hit)
        return hit

    def _reach(self, mask: int) -> dict[int, int]:
        """Member -> the first non-concat/split members its ofmap reaches (those that may not adopt ISOA with it)."""
        after: dict[int, int] = {}
        for i in reversed(self.members(mask)):
            reach, s = 0, self.succ[i] & mask
            while s:
                b = s & -s
                s ^= b
                j = b.bit_length() - 1
                reach |= after[j] if self.inplace[j] else b
            after[i] = reach
        return dict(sorted(after.items()))

    def _most_saving(self, gain: dict[int, int], after: dict[int, int]) -> int:
        """An upper bound on the ISOA saving: all gains, less min(gain) over a greedy matching of conflicting pairs."""
        gmask = sum(1 << i for i in gain) & ~self.passes_mask  # an op that passes chunks conflicts with no producer
        pairs = []
        for p, g in gain.items():
            m = after[p] & gmask
            while m:
                b = m & -m
                m ^= b
                c = b.bit_length() - 1
                pairs.append((min(g, gain[c]), p, c))
        matched: set[int] = set()
        most = sum(gain.values())
        for w, p, c in sorted(pairs, reverse=True):
            if p not in matched and c not in matched:
                matched.update((p, c))
                most -= w
        return most

    def isoa(self, mask: int) -> tuple[int, int, int]:
        """(largest saving, mask of ops adopting ISOA, footprint) at the finest tiles (Alg. 2).

        Alg. 2's rule: an op that adopts ISOA keeps only min(T_c, C) channels of its
        ofmap, so no consumer of it may adopt ISOA too (the consumer must hold all its
        partial sums). Concat/split pass a chunked tensor through; an element-wise op on
        token matrices (`passes`) may be chunked whatever its producers are (hidden-dimension
        tiling of a fused MLP: each chunk of the intermediate is made, activated and
        consumed on chip, the down projection accumulating). Alg. 2 is a dynamic
        program over the group in reverse topological order; here the same recurrence
        runs forward over a frontier of open ops, which keeps it exact where branches
        meet again (as a tree recurrence Alg. 2 would count the shared descendant twice).
        States that tell every pending consumer the same thing (whether any of its
        producers is chunked) are merged, so a dense block's many open outputs cost
        few states.
        """
        hit = self._isoa.get(mask)
        if hit is not None:
            return hit
        op_rows, in_rows = self.rows(mask, 0)
        total = sum(self.held[j] * r for j, r in in_rows.items())
        if not mask & (mask - 1):  # one op, read by no member: it adopts ISOA whenever that saves
            i = mask.bit_length() - 1
            gain = self.save_row[i] * op_rows[i]
            hit = (gain, mask, total + self.full_row[i] * op_rows[i] - gain) if gain > 0 else (
                0, 0, total + self.full_row[i] * op_rows[i])
            self._isoa.put(mask, hit)
            return hit
        members = self.members(mask)
        last = {}  # member -> its last in-group consumer (-1: none)
        for i in members:
            last[i] = (self.succ[i] & mask).bit_length() - 1
        states = {0: (0, 0)}  # ISOA/chunked flags of the open ops -> (saving, ops adopting ISOA)
        open_ops = seen = 0
        for x in members:
            b = 1 << x
            preds = self.pred[x] & mask
            gain = self.save_row[x] * op_rows[x]
            passes = self.passes[x]
            # x's bit is in no state yet, so no two successors share a key: a list of them in order will do
            if self.inplace[x]:  # a concat/split is chunked when any producer is
                nxt = [(st | b if st & preds else st, v) for st, v in states.items()]
            elif gain <= 0:
                nxt = list(states.items())
            else:
                nxt = []
                for st, v in states.items():
                    nxt.append((st, v))
                    if passes or not st & preds:  # x may adopt ISOA: it passes chunks, or no producer is chunked
                        nxt.append((st | b, (v[0] + gain, v[1] | b)))
            seen |= b
            closed = b if last[x] < 0 else 0
            m = preds
            while m:
                pb = m & -m
                m ^= pb
                if last[pb.bit_length() - 1] == x:
                    closed |= pb
            open_ops = (open_ops | b) & ~closed
            states = {}
            if len(nxt) > _MERGE_AT:
                # the future reads only, per pending consumer, whether any of its producers is chunked
                pending = [self.pred[w] & mask for w in self.members(self.succ_of(open_ops) & mask & ~seen)]
                merged: dict[int, tuple[int, tuple[int, int]]] = {}
                for st, cand in nxt:
                    key = sum(1 << n for n, pm in enumerate(pending) if st & pm)
                    kept = merged.get(key)
                    if kept is None or cand[0] > kept[1][0]:
                        merged[key] = (st & open_ops, cand)
                states = dict(merged.values())
            elif not closed:  # every key is a subset of the open ops already
                states = dict(nxt)
            else:
                for st, cand in nxt:
                    key = st & open_ops
                    old = states.get(key)
                    if old is None or cand[0] > old[0]:
                        states[key] = cand
        saving, chosen = max(states.values(), key=lambda v: v[0])
        total += sum(self.full_row[i] * r for i, r in op_rows.items())
        hit = (saving, chosen, total - saving)
        self._isoa.put(mask, hit)
        return hit


def _act_matmul(op) -> bool:
    """A matmul of two activations (attention's scores and context): A (.., L, k) times B (.., k, n)."""
    return op.kind == OpKind.MATMUL and not op.weights and len(op.inputs) == 2 and op.inputs[0] != op.inputs[1]


def _reshape_mode(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """SAME when a reshape keeps every token row ((N, L, D) <-> (N, heads, L, d), heads repeated), WHOLE when it
    moves tokens to columns ((N, heads, L, d) -> (N, heads, d, L), (N, L, D) -> (N, heads, d, L) or (N, D, L)),
    None for others (left outside the tile model: CNN permutes stay as they were). Shapes as `FusionModel.shape`."""
    if a[0] != b[0]:
        return None
    if a == b or (len(a) == len(b) == 4 and a[2:] == b[2:]):
        return SAME
    if len(a) == 3 and len(b) == 4 and a[1] == b[2] and b[1] * b[3] == a[2]:
        return SAME
    if len(a) == 4 and len(b) == 3 and a[2] == b[1] and a[1] * a[3] == b[2]:
        return SAME
    if len(a) == len(b) == 4 and a[:2] == b[:2] and a[2:] == b[:1:-1]:
        return WHOLE
    if len(a) == 3 and ((len(b) == 4 and b[3] == a[1] and b[1] * b[2] == a[2]) or (len(b) == 3 and a[1:] == b[:0:-1])):
        return WHOLE
    return None


def tensor_views(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Shapes the tile model reads instead of a tensor's own, so that tokens are rows (the same memory, viewed).

    A token-major (N, L, heads, d) tensor, made by a reshape from a token matrix (N, L, D) or by swapping the
    heads and tokens of (N, heads, L, d) to merge heads back, is the token matrix (N, L, heads*d). A
    grouped-query matmul's output (N, kv, g*L, n), its query heads stacked along the rows, is (N, kv*g, L, n)
    when its first operand is (N, kv*g, L, k); an op of one input that keeps such a shape keeps the view.
    """
    views: dict[str, tuple[int, ...]] = {}
    for op in graph.ops:
        if len(op.outputs) != 1 or not op.inputs:
            continue
        a, b = views.get(op.inputs[0], graph.tensors[op.inputs[0]].shape), graph.tensors[op.outputs[0]].shape
        if len(b) != 4 or a[0] != b[0]:
            continue
        if op.kind == OpKind.RESHAPE and len(op.inputs) == 1:
            if (len(a) == 3 and a[1] == b[1] and b[2] * b[3] == a[2]) or (
                    len(a) == 4 and a[1] == b[2] and a[2] == b[1] and a[3] == b[3] and a[1] != a[2]):
                views[op.outputs[0]] = (b[0], b[1], b[2] * b[3])
        elif op.inputs[0] in views and graph.tensors[op.inputs[0]].shape == b and len(op.inputs) == 1:
            views[op.outputs[0]] = a  # softmax or an element-wise op on a viewed tensor
        elif op.kind == OpKind.MATMUL and len(a) == 4 and b[1] < a[1] and a[1] % b[1] == 0 and (
                b[2] == a[2] * (a[1] // b[1])):
            views[op.outputs[0]] = (b[0], a[1], a[2], b[3])
    return views


@lru_cache(maxsize=32)
def model_for(graph: Graph, tp: Throughput, word_bits: int) -> FusionModel:
    """The cached model of a graph on a PE array; independent of the buffer size."""
    return FusionModel(graph, tp, word_bits)


def _reach(neighbours: list[int], order) -> list[int]:
    """Per op, the mask of every op reachable through `neighbours` masks, visiting ops in `order`
    (an order in which each op's neighbours come before it)."""
    reach = [0] * len(neighbours)
    for i in order:
        m, r = neighbours[i], 0
        while m:
            b = m & -m
            m ^= b
            r |= b | reach[b.bit_length() - 1]
        reach[i] = r
    return reach
