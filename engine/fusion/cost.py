"""Off-chip traffic of one fused operator-group: Optimus Eq. 3 with the scheduler of Sec. 5.2.

DRAM bytes of a group = its input fmaps (each tensor read by the group and made
outside it, once) + its output fmaps (each tensor it makes that any op outside
reads, or that the network returns, once) + its parameters, reloaded once per
sub-group when they cannot stay on chip for the whole group (Eq. 3). The
sub-group count comes from the largest tile that fits the buffer (Eq. 4) with
ISOA decisions (Alg. 2) and a batch tile: a sub-group is a row band of t_n images
(RELOADS also offers Eq. 3 as printed, one load per row band for the whole batch).

A single op gets the cheaper of that tiled schedule and a layer-wise schedule that
blocks output channels (re-reading its input once per block), so every op of a
covered kind can run on any buffer that holds one input channel's rows; a matmul of two
activations is a batched GEMM tiled in rows, columns and reduction (`_Lone.gemm`), and a
layout op between two ops folds into their addressing (nothing moved). Ops outside
the tile model (3-D convolutions, kind other, the reshapes and slices docs/fusion.md
lists) only run alone, at their compulsory traffic: inputs + outputs + parameters
once ("unmodelled" in the record). A streamed operand (K^T, V: `FusionModel._streams`)
counts with the parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.accelerator import Accelerator
from engine.errors import EngineError, GraphError, UnknownNameError
from engine.fusion import dataflow
from engine.fusion.model import SAME, WINDOW, FusionModel, model_for
from engine.graph import Graph


@dataclass(frozen=True)
class Capacity:
    """On-chip room in elements: fmap tiles, and parameters (the same room when `shared`).

    `per_band`: Eq. 3 as printed, streamed parameters loaded once per row band for the
    whole batch while Eq. 4 sizes one image's tiles (see RELOADS).
    """

    fmap: int
    param: int
    shared: bool
    per_band: bool = False

    @classmethod
    def of(cls, acc: Accelerator, reloads: str = "tile") -> Capacity:
        """A unified buffer holds both; split buffers hold fmaps in input+output and parameters in the weight buffer."""
        if reloads not in RELOADS:
            raise UnknownNameError("parameter reload accounting", reloads, RELOADS)
        bits, band = acc.word_bits, reloads == "band"
        ib, kb, ob = acc.input_buffer_bytes, acc.weight_buffer_bytes, acc.output_buffer_bytes
        if ib is not None and kb is not None and ob is not None:  # `split_buffers` (all three are set or none)
            return cls((ib + ob) * 8 // bits, kb * 8 // bits, False, band)
        return cls(acc.buffer_bytes * 8 // bits, acc.buffer_bytes * 8 // bits, True, band)


# how often streamed parameters are loaded: per (row band, batch tile) with the batch tile's
# fmaps on chip (the default), or per row band whatever the batch (Eq. 3 and 4 as printed)
RELOADS = {"tile": "once per row band of each batch tile; t_n images' tiles share the buffer",
           "band": "once per row band for the whole batch, as Eq. 3 is printed; Eq. 4 sizes one image"}


def image_tiles(model: FusionModel, cap: Capacity, images: int) -> int:
    """Eq. 3's factor for the batch: image tiles of `images` images, or 1 under the printed per-band accounting."""
    return 1 if cap.per_band else -(-model.batch // images)


@dataclass(frozen=True)
class GroupCost:
    """The schedule and DRAM traffic of one group (bytes; tiles in rows of each op's ofmap)."""

    ops: tuple[str, ...]
    dram_bytes: int
    fmap_in_bytes: int
    fmap_out_bytes: int
    param_bytes: int
    schedule: str  # "fused": Eq. 3/4 tiles; "layerwise": one op, output-channel blocks; "unmodelled"; "folded": a
    # layout op alone, folded into its neighbours' addressing (nothing moved)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    footprint_bytes: int  # fmap tiles on chip at the chosen tile (plus parameters when resident)
    params_resident: bool
    row_steps: int  # spatial tiles per image: row bands (times column bands when a lone op cuts columns)
    batch_tile: int  # images per tile
    subgroups: int  # Eq. 3's sub-group count: row steps x image tiles
    tile_rows: tuple[tuple[str, int], ...]
    isoa: tuple[str, ...] = ()  # ops that keep only T_c channels of their ofmap (Alg. 2)
    input_passes: int = 1  # times a layer-wise op re-reads its input (once per output-channel block)
    streamed: tuple[str, ...] = ()  # K^T / V read as parameters are: resident, or once per sub-group (Eq. 3)
    key_tiles: tuple[tuple[str, int], ...] = ()  # attention softmaxes run online: keys per tile (T_w)
    # the code that scheduled it: "compiled" (`core.schedules`, a plan's records) or "python" (`compute_schedule`: one
    # group, and a plan's group the compiled ISOA program cannot hold); not part of equality, both agree
    path: str = field(default="python", compare=False)


@dataclass(frozen=True)
class _Schedule:
    """Internal result of one schedule: traffic split and tile choice."""

    fin: int
    fout: int
    par: int
    schedule: str
    footprint: int = 0
    resident: bool = False
    row_steps: int = 1
    batch_tile: int = 1
    passes: int = 1
    rows: int = 0  # rows of a layer-wise tile

    @property
    def dram(self) -> int:
        return self.fin + self.fout + self.par


def model_of(graph: Graph, acc: Accelerator) -> FusionModel:
    return model_for(graph, dataflow.of(acc), acc.word_bits)


def least_bytes(model: FusionModel, mask: int) -> int:
    """A lower bound on any schedule's traffic: fmaps in and out and parameters, each once (nothing for a layout op
    alone that folds into its neighbours, `FusionModel.folds`)."""
    if not mask & (mask - 1) and model.folds[mask.bit_length() - 1]:
        return 0
    fin, fout, p_elems, _ = model.io(mask)
    return fin + fout + _bytes(p_elems, model.word_bits)


def params_stay(model: FusionModel, mask: int, cap: Capacity) -> bool:
    """Whether all the group's parameters stay on chip beside its finest fmap tiles."""
    p_elems = model.io(mask)[2]
    if not p_elems:
        return True
    return model.fits_finest(mask, cap.fmap - p_elems) if cap.shared else p_elems <= cap.param


def fits(model: FusionModel, mask: int, cap: Capacity) -> bool:
    """Whether the finest tiles of a multi-op group fit (monotone: no group that grows upward from a misfit fits)."""
    return all(model.covered[i] for i in model.members(mask)) and model.fits_finest(mask, cap.fmap)


def compute_schedule(model: FusionModel, mask: int, cap: Capacity) -> _Schedule | None:
    """The cheapest schedule of a group, or None when none fits (`SizedModel.schedule` caches it): tiled (Eq. 3 and 4), or for a lone op the cheaper of that and layer-wise."""
    ops = model.members(mask)
    if len(ops) > 1:
        best = _tiled(model, mask, cap) if fits(model, mask, cap) else None
    elif model.folds[ops[0]]:
        best = _Schedule(0, 0, 0, "folded")  # its producer writes, its consumers read, in their own addressing
    elif not model.covered[ops[0]]:
        fin, fout, p_elems, _ = model.io(mask)
        best = _Schedule(fin, fout, _bytes(p_elems, model.word_bits), "unmodelled")
    else:
        best = _tiled(model, mask, cap)
        if best is None or best.dram > least_bytes(model, mask):
            other = _layerwise(model, ops[0], cap, best.dram if best else None)
            best = other if other is not None and (best is None or other.dram < best.dram) else best
    return best


def _bytes(elements: int, word_bits: int) -> int:
    return math.ceil(elements * word_bits / 8)


def _tiled(model: FusionModel, mask: int, cap: Capacity) -> _Schedule | None:
    """Eq. 3 at the largest tile of Eq. 4, with a batch tile: fewest sub-groups over (t_n, t_h).

    A sub-group is a row band of t_n images, so its fmap tiles take t_n times one
    image's (Eq. 4 with the batch tile) and streamed parameters are loaded once per
    (row band, batch tile): ceil(N / t_n) * ceil(O_h / t_h) times. More images per
    band need thinner bands, so the scheduler takes the (t_n, t_h) with the fewest
    sub-groups (ties: fewest row steps, then most images). Resident parameters are
    loaded once whatever the tile; there the largest t_h for one image is kept.
    """
    if not model.fits_finest(mask, cap.fmap):
        return None
    fin, fout, p_elems, kbig = model.io(mask)
    resident = params_stay(model, mask, cap)
    room = cap.fmap - (p_elems if resident and cap.shared else 0)  # resident parameters share the buffer
    k = _fewest_steps(model, mask, room, kbig)
    tile = model.footprint(mask, k)
    images = min(model.batch, room // tile) if k == 1 and tile else 1
    if cap.per_band:
        images = model.batch  # the whole batch runs through each row band on one parameter load
    elif not resident and p_elems:
        finest = model.footprint(mask, 0)
        best = (k * -(-model.batch // images), k, -images)
        for n in range(2, model.batch + 1):
            if n * finest > room:
                break  # no band of n images fits, nor of more
            if -(-model.batch // n) * -(-n * model.footprint(mask, 1) // room) > best[0]:
                continue  # footprint(k) >= footprint(1) / k: no band of n images has fewer sub-groups
            kn = _fewest_steps(model, mask, room // n, kbig)
            best = min(best, (kn * -(-model.batch // n), kn, -n))
        _, k, images = best
        images = -images
        tile = model.footprint(mask, k)
    subgroups = k * image_tiles(model, cap, images)
    pbytes = _bytes(p_elems, model.word_bits)
    par = pbytes if resident else pbytes * subgroups
    on_chip = tile * (1 if cap.per_band else images) + (p_elems if resident and cap.shared else 0)
    return _Schedule(fin, fout, par, "fused", on_chip, resident, k, images)


def _fewest_steps(model: FusionModel, mask: int, room: int, kbig: int) -> int:
    """Fewest row steps k whose tiles fit `room` (the largest t_h of Eq. 4), galloping up from a bound, then bisecting.

    The footprint never grows with k, and a tile of k steps holds at least 1/k of
    every row, so k >= footprint(1) / room; the answer is usually a step or two above that.
    """
    whole = model.footprint(mask, 1)
    if whole <= room:
        return 1
    lo = min(kbig, max(2, -(-whole // room)))
    hi, step = lo, 1
    while hi < kbig and model.footprint(mask, hi) > room:
        lo, hi, step = hi + 1, min(kbig, hi + step), 2 * step
    while lo < hi:
        mid = (lo + hi) // 2
        if model.footprint(mask, mid) <= room:
            hi = mid
        else:
            lo = mid + 1
    return hi


def ceil_quotients(n: int, first: int) -> list[int]:
    """The distinct values of ceil(n / j) for j = first..n, largest first, in 2 sqrt(n) steps (a band count per
    value, not per j: an output 2^31 columns wide has 92,680 widths, not 2^31)."""
    values, j = [], first
    while j <= n:
        v = -(-n // j)
        values.append(v)
        j = n + 1 if v == 1 else max(j + 1, -(-n // (v - 1)))
    return values


def _layerwise(model: FusionModel, i: int, cap: Capacity, beat: int | None) -> _Schedule | None:
    """One op with output channels in blocks: its input re-read per block, weights per row band and image tile.

    Bands span the full width (as in the fused schedule); only when no full-width band
    fits are the columns cut too, re-reading the overlap of neighbouring column bands.
    Returns the cheapest schedule below `beat` (any, when None), or None; of equal costs,
    the first by images up, rows down, columns down. A band fits only if it fits with
    fewer rows, columns or images, and needs no more input passes with fewer rows, so
    each images count starts, by bisection, at its tallest band that fits and whose
    passes over the input (each at least the input once) leave it below the best so far;
    it stops where the weight loads alone reach it.
    """
    lone = _Lone.of(model, i)
    if lone.gemm_k:
        gemm = lone.gemm(cap.fmap)
        return gemm if gemm is not None and (beat is None or gemm.dram < beat) else None
    h_out, w_out = lone.h_out, lone.w_out
    heights = ceil_quotients(h_out, 1)
    least = lone.fin + lone.fout
    best = None  # (bytes, images, rows, columns)
    for widths in ([w_out], ceil_quotients(w_out, 2)):
        if not widths:
            break  # one column: no column cuts
        lo = 0  # no band taller than one that did not open for fewer images opens for more
        for images in range(1, 2 if cap.per_band else model.batch + 1):
            limit = best[0] if best is not None else beat
            below = limit if len(widths) == 1 else None
            hi = len(heights)  # the tallest band that opens (fits, and its input passes stay below)
            while lo < hi:
                mid = (lo + hi) // 2
                if lone.opens(cap.fmap, images, heights[mid], widths[-1], below):
                    hi = mid
                else:
                    lo = mid + 1
            if lo == len(heights):
                if lone.fits(cap.fmap, images, heights[-1], widths[-1]):
                    continue
                break  # not even one row fits this many images, nor more images
            tiles = image_tiles(model, cap, images)
            for t in heights[lo:]:
                limit = best[0] if best is not None else beat
                if limit is not None and least + lone.pbytes * -(-h_out // t) * tiles >= limit:
                    break  # smaller bands only reload the weights more often
                for tw in widths:
                    cost = lone.traffic(cap.fmap, images, t, tw, tiles)
                    if cost is not None and (best is None or cost < best[0]):
                        best = (cost, images, t, tw)
        if best is not None or beat is not None:
            break
    if best is None:
        return None
    _, images, t, tw = best
    return lone.schedule(cap.fmap, images, t, tw, image_tiles(model, cap, images))


@dataclass(frozen=True)
class _Lone:
    """What the layer-wise schedule of one op depends on: its input windows, output size and traffic once."""

    h_out: int  # output rows (a GEMM's: its query heads' rows stacked, `FusionModel.gemm_rows`)
    w_out: int
    c_out: int
    per_group: int  # output channels of one convolution group
    channelwise: bool
    fin: int  # input bytes read once
    fout: int
    pbytes: int
    ins: tuple[tuple[int, int, int, tuple[int, int, int], tuple[int, int, int]], ...]  # (H, W, bytes, row/column rule)
    gemm_k: int = 0  # a batched GEMM's reduction length (`FusionModel.gemm_k`); 0 for other ops

    @classmethod
    def of(cls, model: FusionModel, i: int) -> _Lone:
        out_geo = [model.geo(j) for j in model.outs[i]]
        c_out = sum(g.channels for g in out_geo)
        fin, fout, p_elems, _ = model.io(1 << i)
        ins = tuple((model.geo(j).h, model.geo(j).w, model.tbytes[j], rh, rw)
                    for j, rh, rw in zip(model.ins[i], model.rules[i], model.wrules[i]) if not model.stream[j])
        return cls(model.gemm_rows[i] or model.out_h[i], max(g.w for g in out_geo), c_out,
                   max(1, c_out // model.graph.ops[i].groups),
                   model.channelwise[i], fin, fout, _bytes(p_elems, model.word_bits), ins, model.gemm_k[i])

    def _per_channel(self, t: int, tw: int) -> int:
        """Input elements of one channel under a tile of t rows and tw columns (a GEMM's least: one reduction
        column of A's rows)."""
        if self.gemm_k:
            return t
        return sum(_need(rh, t, h) * _need(rw, tw, w) for h, w, _, rh, rw in self.ins)

    def gemm(self, fmap: int) -> _Schedule | None:
        """A batched GEMM alone (`FusionModel.gemm_k`: attention's scores and context) at its cheapest tile, one head
        of B (and its query heads) at a time; None when no tile fits. Of equal costs, the tallest rows first.

        A band of t rows holds its rows of A whole with the widest block of output columns beside them (A read
        once), else one reduction column of A and an accumulator of the widest block (A read once per block); B
        streams past once per band (each block reads its own columns, each image its own B). Or B's widest block of
        columns stays while every row passes (B read once, A once per block). These are Orojenesis's mapping shapes
        with the output written once (`engine.limit.einsum`), each holding what the tile model holds.
        """
        h, k, n = self.h_out, self.gemm_k, self.w_out
        best = None  # (bytes, footprint, B resident, row steps, input passes, rows)
        for t in ceil_quotients(h, 1):
            tw = min(n, fmap // t - k)
            footprint, passes = t * (k + tw), 1
            if tw < 1:
                tw = min(n, fmap // t - 1)
                footprint, passes = t * (1 + tw), -(-n // max(1, tw))
            if tw >= 1:
                steps = -(-h // t)
                cost = self.fin * passes + self.fout + self.pbytes * steps
                if best is None or cost < best[0]:
                    best = (cost, footprint, False, steps * -(-n // tw), passes, t)
        tw = min(n, (fmap - k) // (k + 1))
        if tw >= 1:
            t = min(h, (fmap - k * tw) // (k + tw))
            passes = -(-n // tw)
            cost = self.fin * passes + self.fout + self.pbytes
            if best is None or cost < best[0]:
                best = (cost, k * tw + t * (k + tw), True, -(-h // t) * passes, passes, t)
        if best is None:
            return None
        cost, footprint, resident, steps, passes, t = best
        return _Schedule(self.fin * passes, self.fout, cost - self.fin * passes - self.fout, "layerwise", footprint,
                         resident, steps, 1, passes, t)

    def fits(self, fmap: int, images: int, t: int, tw: int) -> bool:
        """Whether one input channel and one output channel of the tile fit (monotone in every argument)."""
        return (self._per_channel(t, tw) + t * tw) * images <= fmap

    def _blocks(self, fmap: int, images: int, t: int, tw: int) -> tuple[int, int] | None:
        """(footprint, input passes) with the most output channels per block, or None when the tile does not fit."""
        in_per_ch, out_per_ch = self._per_channel(t, tw), t * tw
        if self.channelwise:
            footprint, passes = (in_per_ch + out_per_ch) * images, 1
        else:
            room = fmap - in_per_ch * images
            block = min(self.c_out, room // (out_per_ch * images)) if room > 0 else 0
            if block < 1:
                return None
            footprint = (in_per_ch + block * out_per_ch) * images
            passes = -(-self.per_group // min(block, self.per_group))
        return None if footprint > fmap else (footprint, passes)

    def opens(self, fmap: int, images: int, t: int, tw: int, below: int | None) -> bool:
        """Whether the tile fits and its passes over the input, each reading it at least once, cost less than `below`.

        Both hold with fewer rows if they hold (no more passes: the block of output channels only grows).
        """
        fit = self._blocks(fmap, images, t, tw)
        return fit is not None and (below is None or self.fin * fit[1] + self.fout < below)

    def _input_bytes(self, passes: int, t: int, tw: int) -> int:
        """Input bytes read in `passes` passes over row bands of t rows and column bands of tw (halos re-read)."""
        steps, cols = -(-self.h_out // t), -(-self.w_out // tw)
        return sum(-(-nbytes * passes * max(h, steps * _need(rh, t, h)) * max(w, cols * _need(rw, tw, w)) // (h * w))
                   for h, w, nbytes, rh, rw in self.ins)

    def traffic(self, fmap: int, images: int, t: int, tw: int, tiles: int) -> int | None:
        """DRAM bytes of the schedule on tiles of `images` images x t rows x tw columns, or None if it does not fit."""
        fit = self._blocks(fmap, images, t, tw)
        if fit is None:
            return None
        steps, cols = -(-self.h_out // t), -(-self.w_out // tw)
        return self._input_bytes(fit[1], t, tw) + self.fout + self.pbytes * steps * cols * tiles

    def schedule(self, fmap: int, images: int, t: int, tw: int, tiles: int) -> _Schedule:
        """The record of a fitting tile (`tiles`: image tiles of the batch)."""
        fit = self._blocks(fmap, images, t, tw)
        if fit is None:
            raise ValueError(f"a layer-wise tile of {images} images x {t} rows x {tw} columns does not fit {fmap}")
        footprint, passes = fit
        steps, cols = -(-self.h_out // t), -(-self.w_out // tw)
        return _Schedule(self._input_bytes(passes, t, tw), self.fout, self.pbytes * steps * cols * tiles, "layerwise",
                         footprint, False, steps * cols, images, passes, t)


def runs_alone(model: FusionModel, i: int, cap: Capacity) -> bool:
    """Whether op i has any schedule alone, i.e. `dram_bytes(model, 1 << i, cap)` is not None, without costing one.

    The tiled schedule exists when the finest tiles fit; the layer-wise one when one row,
    column, image, input and output channel fit (fit is monotone in each, and those are
    the smallest candidates `_layerwise` tries when the tiled one is missing).
    """
    if not model.covered[i] or model.folds[i] or model.fits_finest(1 << i, cap.fmap):
        return True
    return _Lone.of(model, i).fits(cap.fmap, 1, 1, 1)


def smallest_buffer_bytes(model: FusionModel, i: int) -> int:
    """Fewest buffer bytes op i needs to run alone: one row, column, image and output channel."""
    ins = 1 if model.gemm_k[i] else sum(_need(rh, 1, model.geo(j).h) * _need(rw, 1, model.geo(j).w) for j, rh, rw
                                         in zip(model.ins[i], model.rules[i], model.wrules[i]) if not model.stream[j])
    return _bytes(ins + len(model.outs[i]), model.word_bits)


def _need(rule: tuple[int, int, int], rows: int, h_in: int) -> int:
    mode, kern, stride = rule
    need = (rows - 1) * stride + kern if mode == WINDOW else (rows if mode == SAME else kern)
    return min(h_in, need)


def record(model: FusionModel, mask: int, cap: Capacity, best: _Schedule | None) -> GroupCost | None:
    """The full GroupCost record of a group (tiles, ISOA decisions, traffic split) scheduled as `best`
    (`compute_schedule`, or `SizedModel.schedule`'s cached copy); None when no schedule fits."""
    if best is None:
        return None
    if best.schedule != "fused":
        return _assemble(model, mask, cap, best, {}, 0, "python")
    return _assemble(model, mask, cap, best, model.rows(mask, best.row_steps)[0], model.isoa(mask)[1], "python")


def records(model: FusionModel, masks: list[int], cap: Capacity) -> list[GroupCost]:
    """`record` of each group of a plan (every one runs), the schedules computed by `engine.fusion.core`.

    A group whose ISOA program the kernel cannot hold (more than 63 members that may be chunked open at once) is
    scheduled by `compute_schedule`, the cost model `group_cost` runs, and its record says so (`path` "python")."""
    if not masks:
        return []
    from engine.fusion import core  # the compiled kernel, loaded on first use: the limits read this module without it

    kinds = {core.FUSED: "fused", core.LAYERWISE: "layerwise", core.UNMODELLED: "unmodelled", core.FOLDED: "folded"}
    rows, tiles, isoa = core.schedules(*core.tables(model), *core.workspace(model, search=False),
                                       np.array([core.bitset(m, model.n) for m in masks]), cap.fmap, cap.param,
                                       cap.shared, cap.per_band, model.batch, model.word_bits)
    out = []
    for mask, row, tile, chunked in zip(masks, rows.tolist(), tiles.tolist(), isoa.tolist()):
        kind, fin, fout, par, footprint, resident, steps, images, passes, band, failed, _ = row
        if failed:  # too many open members for the compiled ISOA program
            fallback = record(model, mask, cap, compute_schedule(model, mask, cap))
            if fallback is None:
                raise EngineError(f"group {[model.names[i] for i in model.members(mask)]} of the plan cannot "
                                  "run on this buffer")
            out.append(fallback)
            continue
        best = _Schedule(fin, fout, par, kinds[kind], footprint, bool(resident), steps, images, passes, band)
        members = model.members(mask)
        op_rows = dict(zip(members, tile)) if kind == core.FUSED else {}
        chosen = sum(1 << i for i, flag in zip(members, chunked) if flag)
        out.append(_assemble(model, mask, cap, best, op_rows, chosen, "compiled"))
    return out


def _assemble(model: FusionModel, mask: int, cap: Capacity, best: _Schedule, op_rows: dict[int, int],
              isoa_ops: int, path: str) -> GroupCost:
    """The GroupCost of a group's schedule; a fused one's members' tile rows and ISOA ops given, and the path that
    scheduled it."""
    ops = model.members(mask)
    names = tuple(model.names[i] for i in ops)
    made = {j for i in ops for j in model.outs[i]}
    inputs = tuple(dict.fromkeys(model.tnames[j] for i in ops for j in model.ins[i] if j not in made))
    outputs = tuple(model.tnames[j] for i in ops for j in model.outs[i]
                    if model.is_graph_output[j] or model.consumer_mask[j] & ~mask)
    isoa: tuple[str, ...] = ()
    if best.schedule == "fused":
        isoa = tuple(model.names[i] for i in model.members(isoa_ops))
        tiles = tuple((model.names[i], op_rows[i]) for i in ops)
    elif best.schedule == "layerwise":
        tiles = ((names[0], best.rows),)
    else:
        tiles = ((names[0], model.out_h[ops[0]]),)
    steps = best.row_steps * image_tiles(model, cap, best.batch_tile)
    streamed = tuple(t for t in inputs if model.stream_elems[model.tindex[t]])
    keys = tuple((model.names[i], model.key_width[i]) for i in ops
                 if model.key_width[i] and (mask >> model.context_of.get(i, model.n)) & 1)
    return GroupCost(names, best.dram, best.fin, best.fout, best.par, best.schedule, inputs, outputs,
                     _bytes(best.footprint, model.word_bits), best.resident, best.row_steps, best.batch_tile,
                     steps, tiles, isoa, best.passes, streamed, keys, path)


def group_cost(graph: Graph, ops, acc: Accelerator, *, reloads: str = "tile") -> GroupCost | None:
    """Eq. 3 traffic and schedule of the ops `ops` run as one fused group on `acc`; None when no tile fits.

    `ops` is any iterable of op names; `reloads` is a key of RELOADS. A group that an outside op splits (a path
    leaves the group and comes back) cannot run as one group and raises GraphError.
    """
    names = list(ops)
    if not names:
        raise EngineError("group_cost needs at least one op name")
    for name in names:
        graph.op(name)
    if len(set(names)) != len(names):
        raise GraphError(f"group lists an op twice: {sorted(n for n in set(names) if names.count(n) > 1)}")
    model = model_of(graph, acc)
    mask = model.mask_of(names)
    if not model.is_convex(mask):
        raise GraphError(f"ops {sorted(names)} cannot run as one group: a path leaves the group and comes back")
    cap = Capacity.of(acc, reloads)
    return record(model, mask, cap, compute_schedule(model, mask, cap))


def at_steps(graph: Graph, cost: GroupCost, acc: Accelerator, row_steps: int) -> GroupCost:
    """The fused group of `cost` (scheduled on `acc`) run in `row_steps` row steps instead of its own, with the same
    batch tile and parameter residency: Eq. 3's traffic (feature maps once, streamed parameters once per sub-group)
    and Eq. 4's footprint and tile rows at that count. More steps than fusion's always fit (the footprint never grows
    with the steps); the mapping prices them where an objective other than DRAM bytes may prefer them."""
    if cost.schedule != "fused" or row_steps < 1:
        raise EngineError(f"at_steps needs a fused group and at least one row step, not {cost.schedule!r} group "
                          f"{list(cost.ops)} at {row_steps} steps")
    model, cap = model_of(graph, acc), Capacity.of(acc)
    mask, chunked = model.mask_of(cost.ops), model.mask_of(cost.isoa)
    p_elems = model.io(mask)[2]
    pbytes = _bytes(p_elems, model.word_bits)
    par = pbytes if cost.params_resident else pbytes * row_steps * image_tiles(model, cap, cost.batch_tile)
    on_chip = (model.footprint(mask, row_steps) * (1 if cap.per_band else cost.batch_tile)
               + (p_elems if cost.params_resident and cap.shared else 0))
    best = _Schedule(cost.fmap_in_bytes, cost.fmap_out_bytes, par, "fused", on_chip, cost.params_resident, row_steps,
                     cost.batch_tile)
    return _assemble(model, mask, cap, best, model.rows(mask, row_steps)[0], chunked, cost.path)


def oracle_bytes(graph: Graph, acc: Accelerator) -> int:
    """The paper's Oracle: every weight and every network input and output crosses the chip boundary once (of an
    embedding table, the rows its Gather looks up: `Graph.weight_reads`)."""
    read = {t for op in graph.ops for t in op.inputs}
    fmaps = {t for t in graph.inputs if t in read} | set(graph.outputs)
    return graph.bytes_of(fmaps, acc.word_bits) + sum(_bytes(e, acc.word_bits) for e in graph.weight_reads.values())
