"""Eq. 3 and Eq. 4 of a group grown in the kernel's workspace: its DRAM bytes and its schedule, compiled.

`_tiled` is Eq. 3 at the largest tile of Eq. 4 with a batch tile (the fewest sub-groups
over row steps and images per band); `_layerwise` a lone op with output channels in
blocks. `group_dram`, `lone_costs` and `schedules` build groups from bitsets and cost
them: the search's lone ops and settled groups, and the records of a plan.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.core.grow import _add
from engine.fusion.core.isoa import _isoa
from engine.fusion.core.tables import (
    C_OUT,
    CHANNELWISE,
    CHOSEN,
    COVERED,
    F_A,
    F_C,
    F_H,
    F_J,
    F_P,
    F_PTR,
    F_ROW,
    FIN,
    FLOOR,
    FOLDS,
    FOUT,
    FULL,
    FULL_ROW,
    GEMM_K,
    IN_BYTES,
    IN_GROUP,
    IN_H,
    IN_PTR,
    IN_RULE,
    IN_STREAM,
    IN_W,
    IN_WRULE,
    K_ROWS,
    LONE_H,
    OP_NEED,
    OUT_H,
    PARAMS,
    PATH,
    PER_GROUP,
    SAVE_ROW,
    TENSOR_NEED,
    W_OUT,
    _has,
    _roomy,
    _undo,
)


@njit(cache=True, nogil=True)
def group_dram(t, at, st, dep, log, top, work, group, room, param_room, shared, per_band, batch, word_bits):
    """`sized.dram_bytes` of the group whose bitset is `group` (fitting its finest tiles in `room`), grown in
    the workspace and undone; -1 if the ISOA program could not run."""
    n = at[OUT_H + 1] - at[OUT_H]
    dep[:, 0] = 0
    size = 0
    for w in group:
        while w:
            w &= w - np.uint64(1)
            size += 1
    log = _roomy(log, top, size)
    d = np.int64(0)
    for i in range(n):
        if _has(group, i):
            d += 1
            _add(t, at, st, dep, log, top, work, d, i, np.bool_(False))
    out = _dram_bytes(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits)
    _undo(st, log, top, 0)
    return out


@njit(cache=True)
def _dram_bytes(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits):
    """`sized.dram_bytes` of the fitting group at depth d (-1 if the ISOA program could not run)."""
    fin, fout, par, _, _, _, _ = _tiled(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits,
                                        np.bool_(False))
    return fin + fout + par if fin >= 0 else -1


@njit(cache=True)
def _tiled(t, at, st, dep, d, fmap, param_room, shared, per_band, batch, word_bits, detail):
    """`cost._tiled` of the group at depth d: (fmap-in, fmap-out and parameter bytes, on-chip elements,
    parameters resident, row steps, images per tile), the fewest sub-groups over row steps and images per band;
    fmap-in -1 when its finest tiles do not fit, -2 when the ISOA program could not run. Without `detail`, a group whose parameters stay on chip
    beside its finest tiles is only costed (Eq. 3 once), as `sized.dram_bytes` does. dep[K_ROWS] ends with the
    members' tile rows at the chosen row steps."""
    saving, ran = _isoa(t, at, st, dep, d)
    if not ran:
        return -2, 0, 0, 0, False, 0, 0
    finest = dep[FULL, d] - saving
    p_elems, fin, fout = dep[PARAMS, d], dep[FIN, d], dep[FOUT, d]
    if finest > fmap:
        return -1, 0, 0, 0, False, 0, 0
    pbytes = -(-p_elems * word_bits // 8)
    resident = p_elems == 0 or (finest <= fmap - p_elems if shared else p_elems <= param_room)
    if resident and not detail:
        return fin, fout, pbytes, 0, True, 0, 0
    room = fmap - (p_elems if resident and shared else 0)  # resident parameters share the buffer
    kbig = np.int64(1)  # the most rows of any member's ofmap or input
    for q in range(1, d + 1):
        i = dep[PATH, q]
        kbig = max(kbig, t[at[OUT_H] + i])
        for e in range(t[at[F_PTR] + i], t[at[F_PTR] + i + 1]):
            p = t[at[F_P] + e]
            if p < 0 or not st[IN_GROUP, p]:
                kbig = max(kbig, t[at[F_H] + e])
    k = _fewest_steps(t, at, st, dep, d, room, kbig)
    tile = _footprint(t, at, st, dep, d, k)
    images = min(batch, room // tile) if k == 1 and tile else 1
    if per_band:
        images = batch  # the whole batch runs through each row band on one parameter load
    elif not resident and p_elems:
        whole = _footprint(t, at, st, dep, d, 1)
        best = (k * -(-batch // images), k, -images)
        for n in range(2, batch + 1):
            if n * finest > room:
                break  # no band of n images fits, nor of more
            if -(-batch // n) * -(-n * whole // room) > best[0]:
                continue  # footprint(k) >= footprint(1) / k: no band of n images has fewer sub-groups
            kn = _fewest_steps(t, at, st, dep, d, room // n, kbig)
            option = (kn * -(-batch // n), kn, -n)
            if option < best:
                best = option
        k, images = best[1], -best[2]
        tile = _footprint(t, at, st, dep, d, k)
    subgroups = k * (1 if per_band else -(-batch // images))
    par = pbytes if resident else pbytes * subgroups
    on_chip = tile * (1 if per_band else images) + (p_elems if resident and shared else 0)
    if detail:
        _footprint(t, at, st, dep, d, k)  # leaves the tile rows at k in dep[K_ROWS]
    return fin, fout, par, on_chip, resident, k, images


@njit(cache=True)
def _fewest_steps(t, at, st, dep, d, room, kbig):
    """`cost._fewest_steps`: the fewest row steps whose tiles fit `room`, galloping up from a bound, then bisecting."""
    whole = _footprint(t, at, st, dep, d, 1)
    if whole <= room:
        return 1
    lo = min(kbig, max(2, -(-whole // room)))
    hi, step = lo, 1
    while hi < kbig and _footprint(t, at, st, dep, d, hi) > room:
        lo, hi, step = hi + 1, min(kbig, hi + step), 2 * step
    while lo < hi:
        mid = (lo + hi) // 2
        if _footprint(t, at, st, dep, d, mid) <= room:
            hi = mid
        else:
            lo = mid + 1
    return hi


@njit(cache=True)
def _footprint(t, at, st, dep, d, k):
    """`FusionModel.footprint`: elements of one image's tiles of the group at depth d in k row steps (0: the
    finest), the members of dep[CHOSEN] holding their ofmap tiles T_c channels deep (ISOA)."""
    total = 0
    for q in range(d, 0, -1):  # backwards through the group: t(l-1) = t(l) * S + K - S, the max at branches
        i = dep[PATH, q]
        h = t[at[OUT_H] + i]
        r = t[at[FLOOR] + i]
        if k:
            r = max(r, -(-h // k))
        r = min(h, max(r, st[OP_NEED, i]))
        dep[K_ROWS, q] = r
        save = t[at[SAVE_ROW] + i] if dep[CHOSEN, q] else 0
        total += (t[at[FULL_ROW] + i] - save) * r
        for e in range(t[at[F_PTR] + i], t[at[F_PTR] + i + 1]):
            need = t[at[F_A] + e] * r + t[at[F_C] + e]
            p = t[at[F_P] + e]
            if p >= 0 and st[IN_GROUP, p]:
                st[OP_NEED, p] = max(st[OP_NEED, p], need)
            else:
                j = t[at[F_J] + e]
                st[TENSOR_NEED, j] = max(st[TENSOR_NEED, j], need)
    for q in range(1, d + 1):  # the inputs from outside, each once; and the scratch rows cleared
        i = dep[PATH, q]
        st[OP_NEED, i] = 0
        for e in range(t[at[F_PTR] + i], t[at[F_PTR] + i + 1]):
            j = t[at[F_J] + e]
            need = st[TENSOR_NEED, j]
            if need:
                h = t[at[F_H] + e]
                total += t[at[F_ROW] + e] * min(h, max(need, -(-h // k) if k else 1))
                st[TENSOR_NEED, j] = 0
    return total


# ---- lone ops: `cost.compute_schedule` of a one-op group -------------------------------------------------------------


@njit(cache=True, nogil=True)
def lone_costs(t, at, st, dep, log, top, work, ops, room, param_room, shared, per_band, batch, word_bits):
    """DRAM bytes of each op of the bitset `ops` run alone (`sized.dram_bytes(model, 1 << i, cap)`; -1 where
    it cannot run, and for ops not in `ops`): the cheaper of the tiled schedule and the layer-wise one."""
    n = at[OUT_H + 1] - at[OUT_H]
    out = np.full(n, -1, np.int64)
    reloads = 1 if per_band else batch
    for i in range(n):
        if not _has(ops, i):
            continue
        if t[at[FOLDS] + i]:
            out[i] = 0  # a layout op alone folds into its neighbours
            continue
        dep[:, 0] = 0
        _add(t, at, st, dep, log, top, work, np.int64(1), i, np.bool_(False))
        p_elems = dep[PARAMS, 1]
        least = dep[FIN, 1] + dep[FOUT, 1] + -(-p_elems * word_bits // 8)
        if not t[at[COVERED] + i]:
            out[i] = least  # outside the tile model: its compulsory traffic
        else:
            fin, fout, par, _, _, _, _ = _tiled(t, at, st, dep, np.int64(1), room, param_room, shared, per_band, reloads,
                                                word_bits, np.bool_(False))
            tiled = fin + fout + par if fin >= 0 else -1
            out[i] = tiled
            if tiled < 0 or tiled > least:
                other = _layerwise(t, at, i, dep[FIN, 1], dep[FOUT, 1], -(-p_elems * word_bits // 8), room, tiled,
                                   per_band, batch)[0]
                if other >= 0 and (tiled < 0 or other < tiled):
                    out[i] = other
        _undo(st, log, top, 0)
    return out


@njit(cache=True)
def _need(t, at, rule, e, tile, size_in):
    """Input rows (or columns) that `tile` output rows need under input e's rule (`cost._need`)."""
    mode, kern, stride = t[at[rule] + 3 * e], t[at[rule] + 3 * e + 1], t[at[rule] + 3 * e + 2]
    if mode == 0:  # a window
        need = (tile - 1) * stride + kern
    elif mode == 1:  # the same rows
        need = tile
    else:  # the whole input
        need = kern
    return min(size_in, need)


@njit(cache=True)
def _per_channel(t, at, i, rows, cols):
    total = 0
    for e in range(t[at[IN_PTR] + i], t[at[IN_PTR] + i + 1]):
        if t[at[IN_STREAM] + e]:
            continue  # loaded with the parameters, no room
        h, w = t[at[IN_H] + e], t[at[IN_W] + e]
        total += _need(t, at, IN_RULE, e, rows, h) * _need(t, at, IN_WRULE, e, cols, w)
    return total


@njit(cache=True)
def _blocks(t, at, i, fmap, images, rows, cols):
    """`_Lone._blocks`: (footprint, input passes) with the most output channels per block; (-1, -1) if no fit."""
    in_per_ch, out_per_ch = _per_channel(t, at, i, rows, cols), rows * cols
    if t[at[CHANNELWISE] + i]:
        footprint, passes = (in_per_ch + out_per_ch) * images, 1
    else:
        space = fmap - in_per_ch * images
        block = min(t[at[C_OUT] + i], space // (out_per_ch * images)) if space > 0 else 0
        if block < 1:
            return -1, -1
        footprint = (in_per_ch + block * out_per_ch) * images
        per_group = t[at[PER_GROUP] + i]
        passes = -(-per_group // min(block, per_group))
    return (-1, -1) if footprint > fmap else (footprint, passes)


@njit(cache=True)
def _traffic(t, at, i, fout, pbytes, fmap, images, rows, cols, tiles):
    """`_Lone.traffic`: DRAM bytes on tiles of `images` x rows x cols, or -1 when they do not fit."""
    _, passes = _blocks(t, at, i, fmap, images, rows, cols)
    if passes < 0:
        return -1
    h_out, w_out = t[at[OUT_H] + i], t[at[W_OUT] + i]
    steps, bands = -(-h_out // rows), -(-w_out // cols)
    total = fout + pbytes * steps * bands * tiles
    for e in range(t[at[IN_PTR] + i], t[at[IN_PTR] + i + 1]):
        if t[at[IN_STREAM] + e]:
            continue  # loaded with the parameters
        h, w, nbytes = t[at[IN_H] + e], t[at[IN_W] + e], t[at[IN_BYTES] + e]
        rows_read = max(h, steps * _need(t, at, IN_RULE, e, rows, h))
        cols_read = max(w, bands * _need(t, at, IN_WRULE, e, cols, w))
        total += -(-nbytes * passes * rows_read * cols_read // (h * w))  # halos re-read
    return total


@njit(cache=True)
def _layerwise(t, at, i, fin, fout, pbytes, fmap, beat, per_band, batch):
    """`cost._layerwise`: (DRAM bytes, images, rows, columns) of the cheapest layer-wise schedule of op i below
    `beat` (any when -1); bytes -1 when there is none."""
    if t[at[GEMM_K] + i]:
        best, _, _, _, _, rows, cols, _, _ = _gemm(t, at, i, fin, fout, pbytes, fmap)
        return (-1 if beat >= 0 and best >= beat else best), 1, rows, cols
    h_out, w_out = t[at[OUT_H] + i], t[at[W_OUT] + i]
    heights = [h_out]  # distinct ceil(h_out / j), tallest first
    j = 2
    while j <= h_out:  # from each value straight to the first j of the next: 2 sqrt(h_out) steps, not h_out
        v = -(-h_out // j)
        if v != heights[-1]:
            heights.append(v)
        j = h_out + 1 if v == 1 else max(j + 1, -(-h_out // (v - 1)))
    cuts = [0]  # distinct ceil(w_out / j) for j >= 2, widest first
    cuts.pop()
    j = 2
    while j <= w_out:
        v = -(-w_out // j)
        if not len(cuts) or v != cuts[-1]:
            cuts.append(v)
        j = w_out + 1 if v == 1 else max(j + 1, -(-w_out // (v - 1)))
    least = fin + fout
    best, best_images, best_rows, best_cols = -1, 0, 0, 0
    for attempt in range(2):
        widths = [w_out] if attempt == 0 else cuts
        if not len(widths):
            break  # one column: no column cuts
        lo = 0  # no band taller than one that did not open for fewer images opens for more
        for images in range(1, 2 if per_band else batch + 1):
            limit = best if best >= 0 else beat
            below = limit if len(widths) == 1 else -1
            hi = len(heights)  # the tallest band that opens (fits, and its input passes stay below)
            while lo < hi:
                mid = (lo + hi) // 2
                _, passes = _blocks(t, at, i, fmap, images, heights[mid], widths[-1])
                if passes >= 0 and (below < 0 or fin * passes + fout < below):
                    hi = mid
                else:
                    lo = mid + 1
            if lo == len(heights):
                rows, cols = heights[-1], widths[-1]
                if (_per_channel(t, at, i, rows, cols) + rows * cols) * images <= fmap:
                    continue
                break  # not even one row fits this many images, nor more images
            tiles = 1 if per_band else -(-batch // images)
            for q in range(lo, len(heights)):
                rows = heights[q]
                limit = best if best >= 0 else beat
                if limit >= 0 and least + pbytes * -(-h_out // rows) * tiles >= limit:
                    break  # smaller bands only reload the weights more often
                for cols in widths:
                    cost = _traffic(t, at, i, fout, pbytes, fmap, images, rows, cols, tiles)
                    if cost >= 0 and (best < 0 or cost < best):
                        best, best_images, best_rows, best_cols = cost, images, rows, cols
        if best >= 0 or beat >= 0:
            break
    return best, best_images, best_rows, best_cols


@njit(cache=True)
def _gemm(t, at, i, fin, fout, pbytes, fmap):
    """`_Lone.gemm`: (DRAM bytes, footprint, B resident, row steps, input passes, rows, columns, A's bytes, B's
    bytes) of a batched GEMM's cheapest tile alone; bytes -1 when none fits."""
    h, k, n = t[at[LONE_H] + i], t[at[GEMM_K] + i], t[at[W_OUT] + i]
    best = (-1, 0, False, 0, 0, 0, 0, 0, 0)
    rows, j = h, 1  # the distinct ceil(h / j), tallest first
    while j <= h:
        rows = -(-h // j)
        cols = min(n, fmap // rows - k)  # A's rows whole beside the block: A read once
        footprint, passes = rows * (k + cols), 1
        if cols < 1:  # one reduction column of them: A read once per block
            cols = min(n, fmap // rows - 1)
            footprint, passes = rows * (1 + cols), -(-n // max(1, cols))
        if cols >= 1:
            steps = -(-h // rows)
            cost = fin * passes + fout + pbytes * steps
            if best[0] < 0 or cost < best[0]:
                best = (cost, footprint, False, steps * -(-n // cols), passes, rows, cols, fin * passes, pbytes * steps)
        j = h + 1 if rows == 1 else max(j + 1, -(-h // (rows - 1)))
    cols = min(n, (fmap - k) // (k + 1))  # B's widest block of columns resident, one row of A and of the output
    if cols >= 1:
        rows = min(h, (fmap - k * cols) // (k + cols))
        passes = -(-n // cols)
        cost = fin * passes + fout + pbytes
        if best[0] < 0 or cost < best[0]:
            best = (cost, k * cols + rows * (k + cols), True, -(-h // rows) * passes, passes, rows, cols, fin * passes,
                    pbytes)
    return best


# ---- the schedules of a plan's groups (`cost.compute_schedule`, for `cost.records`) -------------------------------------
FUSED, LAYERWISE, UNMODELLED, FOLDED = 0, 1, 2, 3
(KIND, S_FIN, S_FOUT, S_PAR, S_FOOTPRINT, S_RESIDENT, S_STEPS, S_IMAGES, S_PASSES, S_ROWS, S_FAILED,
 S_SIZE) = range(12)


@njit(cache=True, nogil=True)
def schedules(t, at, st, dep, log, top, work, groups, room, param_room, shared, per_band, batch, word_bits):
    """`cost.compute_schedule` of each group (rows of `groups`, bitsets of ops that can run): per group (kind, fmap-in,
    fmap-out and parameter bytes, on-chip elements, resident, row steps, images per tile, input passes, rows
    of a layer-wise tile, whether the ISOA program could not run, size), and per member (in order) its tile
    rows at the chosen row steps and whether it holds its ofmap T_c channels deep (fused groups)."""
    n = at[OUT_H + 1] - at[OUT_H]
    out = np.zeros((len(groups), 12), np.int64)
    sizes = np.zeros(len(groups), np.int64)  # per-member rows take groups x the largest group, not groups x ops
    for g in range(len(groups)):
        for i in range(n):
            if _has(groups[g], i):
                sizes[g] += 1
    tiles = np.zeros((len(groups), max(1, sizes.max())), np.int64)
    isoa = np.zeros((len(groups), max(1, sizes.max())), np.int64)
    for g in range(len(groups)):
        dep[:, 0] = 0
        log = _roomy(log, top, sizes[g])  # room for this group's members joining, not for every op
        d = np.int64(0)
        for i in range(n):
            if _has(groups[g], i):
                d += 1
                _add(t, at, st, dep, log, top, work, d, i, np.bool_(False))
        row = out[g]
        row[S_SIZE] = d
        i = dep[PATH, 1]
        p_elems = dep[PARAMS, d]
        pbytes = -(-p_elems * word_bits // 8)
        if d == 1 and t[at[FOLDS] + i]:
            row[KIND], row[S_STEPS], row[S_IMAGES], row[S_PASSES] = FOLDED, 1, 1, 1
            _undo(st, log, top, 0)
            continue
        if d == 1 and not t[at[COVERED] + i]:
            row[KIND], row[S_FIN], row[S_FOUT], row[S_PAR] = UNMODELLED, dep[FIN, 1], dep[FOUT, 1], pbytes
            row[S_STEPS], row[S_IMAGES], row[S_PASSES] = 1, 1, 1
            _undo(st, log, top, 0)
            continue
        fin, fout, par, on_chip, resident, k, images = _tiled(t, at, st, dep, d, room, param_room, shared, per_band,
                                                              batch, word_bits, np.bool_(True))
        row[KIND], row[S_FIN], row[S_FOUT], row[S_PAR], row[S_FOOTPRINT] = FUSED, fin, fout, par, on_chip
        row[S_RESIDENT], row[S_STEPS], row[S_IMAGES], row[S_PASSES] = resident, k, images, 1
        if fin == -2:
            row[S_FAILED] = 1
        elif fin >= 0:
            for q in range(d):
                tiles[g, q], isoa[g, q] = dep[K_ROWS, q + 1], dep[CHOSEN, q + 1]
        tiled = fin + fout + par if fin >= 0 else -1
        least = dep[FIN, 1] + dep[FOUT, 1] + pbytes
        if d == 1 and (tiled < 0 or tiled > least) and t[at[GEMM_K] + i]:
            cost, footprint, resident, steps, passes, rows, _, fin, par = _gemm(t, at, i, dep[FIN, 1], dep[FOUT, 1],
                                                                                pbytes, room)
            if cost >= 0 and (tiled < 0 or cost < tiled):
                row[KIND], row[S_FIN], row[S_FOUT], row[S_PAR] = LAYERWISE, fin, dep[FOUT, 1], par
                row[S_FOOTPRINT], row[S_RESIDENT], row[S_STEPS], row[S_IMAGES] = footprint, resident, steps, 1
                row[S_PASSES], row[S_ROWS] = passes, rows
        elif d == 1 and (tiled < 0 or tiled > least):
            cost, lw_images, rows, cols = _layerwise(t, at, i, dep[FIN, 1], dep[FOUT, 1], pbytes, room, tiled,
                                                     per_band, batch)
            if cost >= 0 and (tiled < 0 or cost < tiled):
                footprint, passes = _blocks(t, at, i, room, lw_images, rows, cols)
                steps, bands = -(-t[at[OUT_H] + i] // rows), -(-t[at[W_OUT] + i] // cols)
                image_tiles = 1 if per_band else -(-batch // lw_images)
                fout = dep[FOUT, 1]
                row[KIND], row[S_FIN], row[S_FOUT] = LAYERWISE, cost - fout - pbytes * steps * bands * image_tiles, fout
                row[S_PAR], row[S_FOOTPRINT], row[S_RESIDENT] = pbytes * steps * bands * image_tiles, footprint, 0
                row[S_STEPS], row[S_IMAGES], row[S_PASSES], row[S_ROWS] = steps * bands, lw_images, passes, rows
        _undo(st, log, top, 0)
    return out, tiles, isoa
