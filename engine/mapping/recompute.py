"""The recompute schedule of a fused group (LoopTree's choice): no row outlives its band.

Fusion's tiles are a line buffer (Optimus Sec. 5.2): each band computes new rows of every op and keeps the halo
rows its consumers' windows need for the next band. Under recompute (LoopTree: Gilbert, Wu, Emer, Sze, "LoopTree:
Exploring the Fused-layer Dataflow Accelerator Design Space", IEEE TCASAI 2024) a band keeps nothing for the next:
it computes every row its outputs' band needs, back through every window of the group (the overlapping halo rows
again, ISOA's overlaps recomputed). Only the group's inputs keep the rows the next band reads too (each input row
comes from DRAM once, as in fusion's count). Within a band an op's rows are dropped once its last consumer in the
group has read them, so the band's peak is the largest set live at one op's step, not the sum of every tile; that
lets a group run in fewer, taller bands at the cost of recomputed rows.

`schedule(graph, cost, acc, row_steps)` simulates it exactly: which output rows [start, stop) every op computes in
each band, what is live at each op's step, the peak, and the group inputs' rows read.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.fusion.cost import Capacity, GroupCost, model_of
from engine.fusion.model import SAME, WINDOW, FusionModel
from engine.graph import Graph

Span = tuple[int, int]  # rows [start, stop) of one op's output or one tensor


@dataclass(frozen=True)
class RecomputeSchedule:
    """A fused group run in `row_steps` bands that keep nothing for the next (see the module docstring).

    `spans` holds, per op in the group's order, the output rows it computes in each band, and `computed` the rows it
    computes over every band for one image (its height, plus the rows recomputed). `live` is what one image's tiles
    hold at each op's step of each band (elements), `peak_elements` its most, `footprint_bytes` that for the group's
    `images` images per band plus resident parameters, as fusion counts its footprint. `input_rows` is, per group input, the rows
    read from DRAM over every band (for one image: each once, a row no window reads never) against its height.
    """

    ops: tuple[str, ...]
    row_steps: int
    images: int
    spans: tuple[tuple[Span, ...], ...]
    heights: tuple[int, ...]
    live: tuple[tuple[int, ...], ...]  # per band, per op's step: elements of one image's tiles live then
    footprint_bytes: int
    input_rows: tuple[tuple[str, int, int], ...]  # (tensor, rows read over every band, its height)

    @property
    def peak_elements(self) -> int:
        return max(max(steps) for steps in self.live)

    @property
    def computed(self) -> tuple[tuple[str, int], ...]:
        return tuple((op, sum(b - a for a, b in spans)) for op, spans in zip(self.ops, self.spans))

    @property
    def band_rows(self) -> tuple[tuple[str, int], ...]:
        """Each op's tallest band (rows), the band its nest is blocked for."""
        return tuple((op, max(b - a for a, b in spans)) for op, spans in zip(self.ops, self.spans))


def supported(cost: GroupCost) -> bool:
    """Whether the recompute schedule applies: a fused group of the row-tile model without attention's key tiles or
    streamed K^T / V (those follow FlashAttention's online softmax, not row windows)."""
    return cost.schedule == "fused" and len(cost.ops) > 1 and not cost.key_tiles and not cost.streamed


def _need(model: FusionModel, op, i: int, pos: int, span: Span, h_in: int) -> Span:
    """The rows of the op's input `pos` that its output rows `span` read (clipped to the input's `h_in` rows)."""
    mode, kern, stride = model.rules[i][pos]
    a, b = span
    if a >= b:
        return (0, 0)
    if mode == WINDOW:
        top = op.padding[0] if op.padding else 0
        return max(0, a * stride - top), min(h_in, (b - 1) * stride - top + kern)
    if mode == SAME:
        return (0, 1) if h_in == 1 else (min(a, h_in), min(b, h_in))
    return (0, h_in)


def _overlap(x: Span, y: Span) -> int:
    return max(0, min(x[1], y[1]) - max(x[0], y[0]))


def _hull(x: Span, y: Span) -> Span:
    if x[0] >= x[1]:
        return y
    if y[0] >= y[1]:
        return x
    return min(x[0], y[0]), max(x[1], y[1])


def schedule(graph: Graph, cost: GroupCost, acc: Accelerator, row_steps: int) -> RecomputeSchedule:
    """The group of `cost` run in `row_steps` bands under recompute, simulated band by band (module docstring)."""
    model = model_of(graph, acc)
    index = [model.index[name] for name in cost.ops]
    mask = sum(1 << i for i in index)
    step = {i: s for s, i in enumerate(index)}
    isoa = {model.index[name] for name in cost.isoa}
    made = {j: i for i in index for j in model.outs[i]}
    leaves = {i for i in index if any(model.is_graph_output[j] or model.consumer_mask[j] & ~mask or
                                      not model.consumer_mask[j] for j in model.outs[i])}
    inputs = list(dict.fromkeys(j for i in index for j in model.ins[i] if j not in made))
    # each op's output and each group input is live from its first step to its last reader's, an in-place op (concat,
    # split, reshape: a view of its inputs' buffers) extending its inputs' life to its own readers'
    first = {j: min(step[i] for i in index if j in model.ins[i]) for j in inputs}
    last = {i: step[i] for i in index}
    last_in = dict(first)
    for i in reversed(index):
        for j in model.ins[i]:
            end = last[i] if model.inplace[i] else step[i]
            p = made.get(j)
            if p is None:
                last_in[j] = max(last_in[j], end)
            else:
                last[p] = max(last[p], end)
    per_row = {i: model.full_row[i] - (model.save_row[i] if i in isoa else 0) for i in index}
    spans: dict[int, list[Span]] = {i: [] for i in index}
    got: dict[int, list[Span]] = {j: [] for j in inputs}
    for band in range(row_steps):
        rows: dict[int, Span] = {}
        demand: dict[int, Span] = {}
        for i in reversed(index):  # the group's order is topological: every consumer before its producer here
            h = model.out_h[i]
            size = -(-h // row_steps)
            own = (min(h, band * size), min(h, (band + 1) * size)) if i in leaves else (0, 0)
            rows[i] = _hull(own, demand.get(i, (0, 0)))
            op = graph.op(model.names[i])
            for pos, j in enumerate(model.ins[i]):
                need = _need(model, op, i, pos, rows[i], model.geo(j).h)
                key = made.get(j, ~j)  # a producer in the group by its op index, a group input by ~tensor
                demand[key] = _hull(demand.get(key, (0, 0)), need)
        for i in index:
            spans[i].append(rows[i])
        for j in inputs:
            got[j].append(demand.get(~j, (0, 0)))
    # a group input's rows the next band reads too stay (read from DRAM once): from its last reader in this band to
    # its first in the next, only those rows
    kept = {j: [_overlap(x, y) for x, y in zip(got[j], got[j][1:])] + [0] for j in inputs}
    live_at: list[tuple[int, ...]] = []
    for band in range(row_steps):
        steps = []
        for s in range(len(index)):
            live = sum(per_row[i] * (spans[i][band][1] - spans[i][band][0]) for i in index if step[i] <= s <= last[i])
            for j in inputs:
                a, b = got[j][band]
                held = b - a if first[j] <= s <= last_in[j] else kept[j][band - 1] if s < first[j] and band else (
                    kept[j][band] if s > last_in[j] else 0)
                live += model.held[j] * held
            steps.append(live)
        live_at.append(tuple(steps))
    peak = max(max(steps) for steps in live_at)
    read = {j: sum(b - a for a, b in got[j]) - sum(kept[j]) for j in inputs}
    images = cost.batch_tile
    on_chip = peak * images + (model.io(mask)[2] if cost.params_resident and Capacity.of(acc).shared else 0)
    return RecomputeSchedule(cost.ops, row_steps, images, tuple(tuple(spans[i]) for i in index),
                             tuple(model.out_h[i] for i in index), tuple(live_at), -(-on_chip * acc.word_bits // 8),
                             tuple((model.tnames[j], read[j], model.geo(j).h) for j in inputs))


def fitting(graph: Graph, cost: GroupCost, acc: Accelerator) -> tuple[RecomputeSchedule, ...]:
    """The recompute schedules of the group whose footprint fits fusion's room on `acc` (`Capacity`: the buffer, or
    the input and output buffers of split ones), one per band count from one band to
    fusion's (fewer, taller bands are what recompute buys; above fusion's count retaining runs too, with no row
    computed twice); empty where the schedule does not apply (`supported`) or fusion runs the group in one band."""
    if not supported(cost) or cost.row_steps < 2:
        return ()
    room = Capacity.of(acc).fmap * acc.word_bits // 8
    out = []
    for r in range(1, cost.row_steps + 1):
        found = schedule(graph, cost, acc, r)
        if found.footprint_bytes <= room:
            out.append(found)
    return tuple(out)
