"""One op's loop nest in a mapped plan: blocked alone on the whole hierarchy, or for one tile of its fused group
below the level that holds the group's tiles.

A fused group keeps its tiles (inputs, intermediates, outputs of one row band of a batch tile) in the outermost
on-chip level, the *fusion level*, for as long as the band runs; fusion sized the band so that they fit
(`GroupCost.footprint_bytes`). Inside a band each op runs its own loops over its share of the tile, blocked exactly
(Yang et al.'s dynamic program, `engine.blocking.block`) on the levels below the fusion level and the PE array,
with the fusion level as the store it reads operands from and writes results to. An op alone in its group is
blocked on the whole hierarchy, DRAM included, which is the per-layer blocking of `layer_access_counts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from engine.accelerator import Accelerator
from engine.blocking.counts import BLOCKABLE, LevelCount, fits_one, hierarchy_counts
from engine.blocking.hierarchy import Hierarchy, Memory
from engine.blocking.layer import TENSORS, Layer
from engine.energy import op_accesses, vector_cost
from engine.errors import GraphError
from engine.fusion.cost import ceil_quotients
from engine.fusion.memo import Memo
from engine.graph import Graph, Op, OpKind
from engine.mapping import alike

SPLITS = (16, 32, 64, 128, 256)  # a band's rows may run as a multiple of one of these and the rest
NESTS = 16384  # band nests a mapping call keeps (`nest_memo`; Llama-3-8B prefill's choice on tpu-v4i: a few thousand)


@dataclass(frozen=True)
class OpNest:
    """One op's loops and their traffic per level, summed over every tile its group runs.

    `layer` holds the loop bounds of one tile (the whole layer for an op blocked alone), `tiles` how many
    such tiles run (fractional where the last band or image tile is smaller), `macs` the MACs (or vector
    operations) executed, `useful_macs` those of the op itself (more only where a mapping recomputes).
    `lines` is the nest as text, outermost first; `levels` each level's words and energy.
    """

    op: str
    layer: Layer | None  # None: no loop nest (element-wise, softmax, norm, ...): one pass over the buffer
    tiles: float
    levels: tuple[LevelCount, ...]
    macs: int
    useful_macs: int
    mac_pj: float
    cycles: int
    lines: tuple[str, ...]

    @property
    def recomputed_macs(self) -> int:
        return max(0, self.macs - self.useful_macs)


def fusion_level(hierarchy: Hierarchy) -> Memory:
    """The level that keeps a fused group's tiles: the outermost on-chip one."""
    return hierarchy.on_chip[-1]


def below_fusion_level(hierarchy: Hierarchy, *, weights_streamed: bool = False) -> Hierarchy | None:
    """`hierarchy` cut at the fusion level, which becomes its unbounded top (None when no level lies below it).

    An operand the fusion level bypasses (the weights of a TPU-like SRAM) still comes from DRAM, so the top
    charges DRAM's energy for it; so do `weights_streamed`, which the group does not keep (fusion loads them
    once per band and has no room for them beside the band): the nest that costs least then reads each as few
    times as it can, and each of those reads is a DRAM read.
    """
    on_chip = hierarchy.on_chip
    if len(on_chip) < 2:
        return None
    top, dram = on_chip[-1], hierarchy.levels[-1]
    def pick(energy):
        return tuple(energy(top, T) if top.keeps(T) and not (T == "W" and weights_streamed) else energy(dram, T)
                     for T in TENSORS)
    writes = pick(Memory.write_energy) if (top.write_pj or dram.write_pj) else None
    store = Memory(top.name, energy_pj=pick(Memory.energy), write_pj=writes)
    return replace(hierarchy, levels=(*on_chip[:-1], store), name=f"{hierarchy.name} below {top.name}",
                   array_level=min(hierarchy.array_level, len(on_chip) - 1))


def op_layer(graph: Graph, op: Op) -> Layer | None:
    """The op's loop nest, or None for an op without one (element-wise, concat, softmax, ...)."""
    if op.kind not in BLOCKABLE and not (op.kind is OpKind.NORM and op.source_type == "LRN"):
        return None
    try:
        return Layer.from_op(graph, op)
    except GraphError:
        return None


def lone_nest(graph: Graph, op: Op, acc: Accelerator, hierarchy: Hierarchy) -> OpNest:
    """An op alone in its group: blocked on the whole hierarchy (its DRAM traffic is its blocking's)."""
    layer = op_layer(graph, op)
    if layer is None:
        return _vector_nest(graph, op, acc)
    c = hierarchy_counts(layer, hierarchy, op.name)
    return OpNest(op.name, layer, 1.0, c.levels, c.macs, c.macs, c.mac_pj, c.cycles, c.loop_nest)


def tile_nest(graph: Graph, op: Op, acc: Accelerator, hierarchy: Hierarchy, rows: int, row_steps: int, images: int,
              channel_blocks: int = 1, weights_streamed: bool = False, *,
              recompute: tuple[int, int] | None = None, memo: Memo | None = None) -> OpNest:
    """`op`'s share of one band of its fused group, blocked below the fusion level, times the bands the group runs.

    The group holds `rows` rows of the op's output (its band plus the halo its consumers' windows need) and
    `images` images; it runs `row_steps` bands. Halos are kept, not recomputed (the line buffer of Optimus
    Sec. 5.2, whose footprint fusion sized the band by): each band computes ceil(H / row_steps) new rows of every
    op, reading the kept halo rows of its input again from the fusion level. A lone op's layer-wise schedule makes
    its output channels in `channel_blocks` blocks per band (the buffer holds one block of them). With
    `weights_streamed` the weights pass by from DRAM (a "DRAM" level of the nest's own), each read once per band as
    fusion counts them: the least-energy nest of those whose weight block is outermost at the fusion level, with
    the band's rows (held there) streaming past each block. Under `recompute` = (tallest band, rows computed over
    every band of one image; `recompute.schedule`), the nest is blocked for the tallest band and runs as many times
    as the rows computed fill such bands, recomputed rows included.

    `memo` (one accelerator's and hierarchy's, `nest_memo`) keeps the nests by what determines them: the op up to
    names (`alike.op_key`), its band's rows, images, channel blocks, streamed weights and recompute; an op alike
    and a band count of the same band height take the nest made before, renamed.
    """
    out = graph.tensors[op.outputs[0]].shape
    height, batch = height_of(out), (out[0] if out else 1)
    images = min(images, batch)
    new_rows, computed = recompute or (-(-height // row_steps), height)
    if memo is None:
        return _tile_nest(graph, op, acc, hierarchy, rows, new_rows, computed, images, channel_blocks,
                          weights_streamed, recompute is not None)
    key = (alike.op_key(graph, op.name), min(rows, height), new_rows, computed, images, channel_blocks,
           weights_streamed, recompute is not None)
    made = memo.get(key)
    if made is None:
        made = memo.put(key, _tile_nest(graph, op, acc, hierarchy, rows, new_rows, computed, images,
                                        channel_blocks, weights_streamed, recompute is not None))
    return alike.renamed_nest(made, op.name)


def nest_memo(mapped: Memo, acc: Accelerator, hierarchy: Hierarchy) -> Memo:
    """The band nests kept for `acc` on `hierarchy` in a mapping call's memo `mapped` (a `Memo` of `NESTS` in it)."""
    return mapped.get_or_make((acc, hierarchy, "nests"), lambda: Memo(NESTS))


def _tile_nest(graph: Graph, op: Op, acc: Accelerator, hierarchy: Hierarchy, rows: int, new_rows: int,
               computed: int, images: int, channel_blocks: int, weights_streamed: bool, recompute: bool) -> OpNest:
    """`tile_nest` made: `new_rows` rows per band, `computed` rows over the bands of one image."""
    layer = op_layer(graph, op)
    out = graph.tensors[op.outputs[0]].shape
    height, batch = height_of(out), (out[0] if out else 1)
    tiles = computed / new_rows * batch / images
    if layer is None:  # its rows computed again cost what its first pass costs per row
        return _vector_nest(graph, op, acc, computed / height if recompute else 1.0)
    inner = below_fusion_level(hierarchy, weights_streamed=weights_streamed)
    tile = _tile_layer(layer, op.kind, new_rows, height, images, batch)
    if tile is None:  # the op's loops do not follow the group's rows: it runs whole once per group
        tile, tiles = layer, 1.0
    if channel_blocks > 1 and tile.K > 1:
        block = -(-tile.K // channel_blocks)
        tile, tiles = replace(tile, K=block), tiles * tile.K / block
    if inner is None or not fits_one(tile, inner):
        return _from_store(op.name, tile, tiles, inner or hierarchy)
    axis = "X" if op.kind is OpKind.MATMUL else "Y"
    # streamed weights are read once per band (fusion's count): one nest, the weight block outermost at the store
    bands = (tile,) if weights_streamed else _cheapest_parts(tile, axis, inner)
    parts = [hierarchy_counts(part, inner, op.name, weights_once=weights_streamed, resized=False) for part in bands]
    levels = tuple(replace(same[0], kind="buffer" if same[0].kind == "dram" else same[0].kind,
                           reads=round(sum(lv.reads for lv in same) * tiles),
                           writes=round(sum(lv.writes for lv in same) * tiles),
                           energy_pj=sum(lv.energy_pj for lv in same) * tiles,
                           stored_words=max(lv.stored_words for lv in same),
                           weight_reads=round(sum(lv.weight_reads for lv in same) * tiles))
                   for same in zip(*(c.levels for c in parts)))
    if weights_streamed:
        levels = _weights_from_dram(levels, hierarchy.levels[-1])
    rows_line = (f"{new_rows} of {height} rows, {computed - height} computed again over the bands" if recompute
                 else f"{new_rows} new of {height} rows ({min(rows, height)} held)")
    lines = [f"# {tiles:g} runs of this band: {rows_line}, {images} of {batch} images"]
    for c in parts:
        if len(parts) > 1:
            lines.append(f"# {getattr(c.layer, axis)} of the band's rows:")
        lines += c.loop_nest
    return OpNest(op.name, tile, tiles, levels, round(sum(c.macs for c in parts) * tiles), layer.macs,
                  sum(c.mac_pj for c in parts) * tiles, round(sum(c.cycles for c in parts) * tiles), tuple(lines))


def _weights_from_dram(levels: tuple[LevelCount, ...], dram: Memory) -> tuple[LevelCount, ...]:
    """The top level's weight reads moved to a DRAM row of their own (they are DRAM reads: the group keeps no weights)."""
    top = next(lv for lv in levels if lv.kind == "buffer" and lv.capacity_words is None)
    words = top.weight_reads
    energy = words * dram.energy("W")
    rest = replace(top, reads=top.reads - words, energy_pj=top.energy_pj - energy, weight_reads=0)
    return (*(rest if lv is top else lv for lv in levels),
            LevelCount(dram.name, words, 0, energy, "dram", weight_reads=words))


def _cheapest_parts(tile: Layer, axis: str, inner: Hierarchy) -> tuple[Layer, ...]:
    """The band as one nest, or as two (the largest multiple of m of its rows, then the rest), whichever costs the
    least energy. The blocking tiles by divisors, so a band of a prime number of rows (683 = ceil(2048 / 3)) run as
    one nest would keep a single row per PE and read every weight once per row."""
    rows = getattr(tile, axis)
    options: list[tuple[Layer, ...]] = [(tile,)]
    for m in SPLITS:
        first = rows // m * m
        if 0 < first < rows:
            options.append((replace(tile, **{axis: first}), replace(tile, **{axis: rows - first})))
    return min(options, key=lambda parts: sum(_energy_pj(hierarchy_counts(p, inner, resized=False)) for p in parts))


def _energy_pj(counts) -> float:
    return sum(lv.energy_pj for lv in counts.levels) + counts.mac_pj


def band_counts(height: int, fewest: int) -> dict[int, int]:
    """{band height: the fewest bands of it} over every band count from `fewest` to one band per row of `height`
    rows: an op's nests depend on the count r only through its band's height ceil(H / r), so one count per height
    (about 2 sqrt(H) of them) covers every count."""
    return {v: max(fewest, -(-height // v)) for v in ceil_quotients(height, fewest)} or {1: fewest}


def height_of(shape: tuple[int, ...]) -> int:
    """Rows of a tensor as fusion tiles it: H of (N, C, H, W) and of attention's (N, heads, L, d), L of (N, L, D)."""
    if len(shape) == 4:
        return shape[2]
    if len(shape) == 3:
        return shape[1]
    return 1


def _tile_layer(layer: Layer, kind: OpKind, rows: int, height: int, images: int, batch: int) -> Layer | None:
    """`layer` cut to `rows` of its `height` output rows and `images` of its `batch`; None where its loops do
    not carry the rows as fusion counts them."""
    change: dict[str, Any] = {}
    if rows < height:
        axis = "X" if kind is OpKind.MATMUL else "Y"
        bound = getattr(layer, axis)
        if bound % height:
            return None
        change[axis] = bound // height * rows
        # a band's border along its rows is the first or the last band's: priced as real rows (made on chip anyway)
        change["pad"] = (0, 0, *layer.pad[2:]) if axis == "X" else (*layer.pad[:2], 0, 0)
    if images < batch:
        if layer.N % batch == 0:
            change["N"] = layer.N // batch * images
        elif layer.groups % batch == 0:
            change["groups"] = layer.groups // batch * images
        else:
            return None
    return replace(layer, **change) if change else layer


def _from_store(name: str, tile: Layer, tiles: float, hierarchy: Hierarchy) -> OpNest:
    """A tile whose innermost level cannot hold one element of each operand: the MACs read both operands from the
    fusion level and update the output there (two reads and a read-and-write per MAC)."""
    store = fusion_level(hierarchy)
    macs = round(tile.macs * tiles)
    e_in = store.energy("I") + (store.energy("W") if tile.has_weights else 0.0)
    energy = macs * (e_in + store.energy("O") + store.write_energy("O"))
    level = LevelCount(store.name, macs * (3 if tile.has_weights else 2), macs, energy, "buffer")
    pes = hierarchy.array.pes if hierarchy.array else 1
    return OpNest(name, tile, tiles, (level,), macs, tile.macs, macs * hierarchy.mac_pj, math.ceil(macs / pes),
                  ("# the MACs read and update the fusion level directly (no inner level holds one element)",))


def _vector_nest(graph: Graph, op: Op, acc: Accelerator, passes: float = 1.0) -> OpNest:
    """An op without a loop nest: one pass over its inputs and outputs in the buffer (the dataflow model's counts),
    its work on the vector unit (`engine.energy.vector_cost`; a convolution by a computed kernel on the array).
    `passes` > 1 where a recompute schedule computes rows again (rows computed / rows): every count scales with it."""
    a = op_accesses(graph, op, acc)
    levels = tuple(LevelCount(name, round(words * passes), 0, words * passes * acc.energy_pj(kind), kind)
                   for name, words, kind in (("buffer", a.buffer, "buffer"), ("array", a.array, "array"),
                                             ("RF", a.rf, "rf")))
    if op.macs and op.kind is not OpKind.POOL:
        work, pj, cycles, unit = a.mac, a.mac * acc.energy_pj("mac"), a.cycles, "the PE array"
    else:
        vector = vector_cost(graph, op, acc)
        work, pj, cycles, unit = vector.operations, vector.energy_pj, vector.cycles, "the vector unit"
    again = f", {passes:g} times its rows (some computed again)" if passes != 1 else ""
    return OpNest(op.name, None, passes, levels, round(work * passes), work, pj * passes, math.ceil(cycles * passes),
                  (f"# {op.kind.value}: one pass over its tensors in the buffer{again}, its work on {unit}",))
