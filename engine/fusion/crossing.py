"""What the tensors crossing windows must cost: the part of a windowed plan's lower bound the windows leave out.

`engine.fusion.windowed`'s bound prices each plan window with the tensors made in earlier windows free and
the writes read only by later windows uncounted, so a tensor made in one window and read in a later one is
charged nowhere. A fan of thousands of readers joined by one Sum gave its whole traffic away so (99.9 % gap).
This bound charges those tensors what every valid partition must pay for them, in a term of its own.

Take a tensor t made by a plain op p (conv, depthwise conv, pool, element-wise) in window A and read by an op r
in a later window. A group of more than one op that holds r holds, in Eq. 4's finest tiles, rows of each of r's
inputs (made inside: its producer's rows, at min(T_c, C) channels under ISOA; read from outside: whole rows) and,
r being plain, rows of its own output at min(T_c, C) channels: r's least footprint (`_least_footprint`). Every
op's tile has at least min(T_h, H) rows, and the rows an input tile needs are at least min(rows out, its H)
whatever the window, so each of those tensors takes at least min(T_h, H_r, H_t) rows. Where
that passes the fmap buffer (a Sum of 10,000 tensors, a Concat of 20,000), no group of more than r fits, so r runs
alone: it reads t from DRAM (a plain r or a Concat surely does; a Split only when it cannot fold into its
neighbours) and p's group writes it: 2 x its bytes, 1 x where the write is already charged in A (another reader
there, or t is returned). Each tensor is charged once, at one such reader; the reads and writes charged are
distinct and charged nowhere else, so the sum adds to the windows' bound. Where r's least footprint fits, nothing
is charged: a group may hold every input of r beside it (the knapsack over the tensors r keeps that this replaced
charged nothing there either, and less elsewhere: a tensor r does not keep still takes a row).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.fusion.dataflow import Throughput
from engine.fusion.model import tensor_geo
from engine.graph import Graph, Op, OpKind

PLAIN = frozenset({OpKind.CONV, OpKind.DWCONV, OpKind.POOL, OpKind.ELTWISE})
_JOINS = frozenset({OpKind.CONCAT, OpKind.SPLIT})  # share their inputs' buffer: no tile row of their own
_LAYOUT = frozenset({*_JOINS, OpKind.RESHAPE})


def crossing_bytes(graph: Graph, word_bits: int, tp: Throughput, fmap: int, windows, views) -> int:
    """A lower bound on the bytes every valid partition moves for plain tensors crossing `windows` (ranges of the
    topological order) to readers that no group of more ops can hold in `fmap` elements (module docstring), on the PE
    array `tp`; `views` as the cost model reads shapes."""
    window_of = [0] * len(graph.ops)
    for k, (lo, hi) in enumerate(windows):
        window_of[lo:hi] = [k] * (hi - lo)
    row = rows_of(graph, word_bits, tp.t_c, views)
    alone: dict[int, bool] = {}  # reader -> whether it runs alone in every valid partition
    total = 0
    for p, op in enumerate(graph.ops):
        if op.kind not in PLAIN:
            continue
        for t in op.outputs:
            readers = [graph.position[r] for r in graph.consumers(t)]
            for r in readers:
                if window_of[r] > window_of[p] and r not in alone:
                    alone[r] = _reads(graph, graph.ops[r]) and _least_footprint(graph.ops[r], row, tp.t_h) > fmap
            if any(window_of[r] > window_of[p] and alone[r] for r in readers):
                written = t in graph.returned or any(window_of[r] == window_of[p] for r in readers)
                total += graph.tensors[t].nbytes(word_bits) * (1 if written else 2)
    return total


def lone(graph: Graph, word_bits: int, tp: Throughput, fmap: int, views) -> Callable[[str], bool]:
    """Op name -> whether it runs alone in every valid partition: its least footprint in a group of more
    (`_least_footprint`) passes `fmap` elements (a Sum of 10,000 inputs); each found on first ask."""
    row, found = rows_of(graph, word_bits, tp.t_c, views), {}

    def alone(name: str) -> bool:
        if name not in found:
            found[name] = _least_footprint(graph.op(name), row, tp.t_h) > fmap
        return found[name]

    return alone


def rows_of(graph: Graph, word_bits: int, t_c: int, views) -> Callable[[str], tuple[int, int]]:
    """Tensor -> `_row`, each found once, on first ask (a bound looks at the rows of a few readers' tensors)."""
    rows: dict[str, tuple[int, int]] = {}
    streams: dict[str, bool] = {}  # tensor -> `_streamed`

    def row(t: str) -> tuple[int, int]:
        if t not in rows:
            rows[t] = _row(graph, t, word_bits, t_c, views, streams)
        return rows[t]

    return row


def _reads(graph: Graph, op: Op) -> bool:
    """Whether `op`, alone, surely reads its inputs from DRAM: a plain op or a Concat, or a Split that cannot fold
    into its neighbours (`FusionModel.folds`: its output returned, or an input the network's)."""
    if op.kind in PLAIN or op.kind == OpKind.CONCAT:
        return True
    return op.kind == OpKind.SPLIT and (any(t in graph.returned for t in op.outputs)
                                        or any(graph.producer(t) is None for t in op.inputs))


def _row(graph: Graph, t: str, word_bits: int, t_c: int, views, streams: dict[str, bool]) -> tuple[int, int]:
    """(Elements of a row of activation `t` the finest tiles of a group hold when a member reads it or a plain member
    makes it, its rows): a row at min(T_c, C) channels (a whole row if read from outside). No elements where the
    cost model may hold less: made by another kind (a layout op shares its input's buffer; attention keys its
    tiles), streamed (read, maybe through layout ops, as a matmul's operand: no room), or without a row."""
    p = graph.producer(t)
    geo = tensor_geo(views.get(t, graph.tensors[t].shape), word_bits)
    if geo is None or (p is not None and graph.op(p).kind not in PLAIN) or _streamed(graph, t, streams):
        return 0, 1
    return min(t_c, geo.channels) * geo.w, geo.h


def _streamed(graph: Graph, t: str, streams: dict[str, bool]) -> bool:
    """Whether tensor `t` may be streamed (`FusionModel._streams`): read, and only by matmuls or by layout ops whose
    outputs all may be (found depth first without recursion, kept in `streams`)."""
    todo = [t]
    while todo:
        u = todo[-1]
        if u in streams:
            todo.pop()
            continue
        readers = [graph.op(r) for r in graph.consumers(u)]
        if not readers or any(r.kind != OpKind.MATMUL and r.kind not in _LAYOUT for r in readers):
            streams[u] = False
            todo.pop()
            continue
        pending = [o for r in readers if r.kind in _LAYOUT for o in r.outputs if o not in streams]
        if pending:
            todo += pending
            continue
        streams[u] = all(r.kind == OpKind.MATMUL or all(streams[o] for o in r.outputs) for r in readers)
        todo.pop()
    return streams[t]


def _least_footprint(op: Op, row: Callable[[str], tuple[int, int]], t_h: int) -> int:
    """Elements the finest tiles of any group holding `op` and another op hold for it: rows of each input and of
    its own outputs (`_row`; none of its own for a layout op, which shares its inputs' buffer), at least
    min(T_h, H of `op`, H of the tensor) of them."""
    height = max(row(t)[1] for t in op.outputs)
    return own_footprint(op, row, t_h) + sum(row(t)[0] * min(t_h, height, row(t)[1]) for t in dict.fromkeys(op.inputs))


def own_footprint(op: Op, row: Callable[[str], tuple[int, int]], t_h: int) -> int:
    """Elements the finest tiles of any group holding `op` and another op hold of `op`'s own outputs: min(T_h, H)
    rows of each (`_row`), none for an op that is not plain (a layout op shares its inputs' buffer)."""
    if op.kind not in PLAIN:
        return 0
    height = max(row(t)[1] for t in op.outputs)
    return sum(row(t)[0] * min(t_h, height) for t in op.outputs)
