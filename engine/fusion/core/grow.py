"""Groups grown one op at a time in the kernel's workspace: running totals, tile rows, footprint bounds.

`_add` puts an op into the group at the next depth (its tile rows and the halo it pushes
back, fmap in/out, parameters, the greedy and relaxed ISOA bounds, components), logging
every change so `tables._undo` can back up; `_grow` grows every group from one down-set
depth first, as the reference search (tests/fusion_reference.py) does, and offers the
connected, fitting ones to the search with Eq. 3's bounds; `window_limit` grows the
windows of the on-line variant's size table (Alg. 3).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.core.isoa import _isoa
from engine.fusion.core.tables import (
    AV_SM,
    CHOSEN,
    CHUNKED,
    COMP,
    COVERED,
    DEMAND,
    F_A,
    F_C,
    F_H,
    F_J,
    F_P,
    F_PROWS,
    F_PTR,
    F_ROW,
    FAN,
    FAN_LEN,
    FAN_LIST,
    FAN_OUT,
    FIN,
    FLOOR,
    FOLDS,
    FOUT,
    FULL,
    FULL_ROW,
    GREEDY,
    GROW_OUT,
    IN_BYTES,
    IN_GROUP,
    IN_HELD,
    IN_P,
    IN_PTR,
    IN_RET,
    IN_SELEMS,
    IN_T,
    INPLACE,
    KEPT,
    KEPT_SAVING,
    LINK_IDX,
    LINK_PTR,
    MATE,
    N_CAND,
    N_READERS,
    NCOMP,
    OUT_H,
    PARAMS,
    PASSES,
    PATH,
    POS,
    PRED_IDX,
    PRED_PTR,
    READERS,
    RELAXED,
    ROWS,
    SAVE_ROW,
    SM_BYTES,
    SM_QK,
    START_LOG,
    SUCC_IDX,
    SUCC_PTR,
    TODO,
    W_ELEMS,
    W_IDX,
    W_PTR,
    WCOUNT,
    WHOLE,
    WHOLE_ROW,
    _has,
    _roomy,
    _set,
    _undo,
)


@njit(cache=True)
def _grow(t, at, st, dep, log, top, work, cand, done, ready, allowed, room, param_room, shared, batch, word_bits,
          max_size, online, quota, offered, offers, bound_only, twin):
    """Every group grown from the down-set `done`, as the reference search (tests/fusion_reference.py) grows them.

    `done`, `ready` (ops whose predecessors are all done) and `allowed` (ops that may join) are bitsets.
    `online`: Sec. 6 rule 1 (all consumers of a member or none); `quota`: groups to evaluate before giving up;
    `batch`: images that multiply parameter reloads (1 under Eq. 3 as printed). Appends each group to offer
    to `offered` (its members, then -1) and (size, Eq. 3 bytes with the parameters once, the least bytes,
    surely streamed, may stay on chip) to `offers`; under `bound_only` (the windows of `engine.fusion.bound`)
    groups need not be connected; `twin[i]`: the op i may run only with or after (`optimus._twins`), or -1.
    Returns (groups evaluated, whether the quota stopped it, whether the ISOA program could not run on a
    group, the log, longer if it had to grow).
    """
    n = at[OUT_H + 1] - at[OUT_H]
    dep[:, 0] = 0
    for i in range(n):
        if _has(ready, i) and _has(allowed, i):
            cand[0, dep[N_CAND, 0]] = i
            dep[N_CAND, 0] += 1
    evaluated = 0
    stopped = too_big = False
    stack_d, stack_x = [0], [-1]  # groups to grow from: (depth, newest member); the root is the empty group
    cur = 0  # depth of the group the state holds
    while len(stack_d):
        if evaluated > quota:
            stopped = True
            break
        d, x0 = stack_d.pop(), stack_x.pop()
        if d > 0:  # back up to the parent (depth d - 1) and add x0 again, as it was when evaluated
            if cur >= d:
                _undo(st, log, top, dep[START_LOG, d])
            log = _roomy(log, top, 1)
            dep[START_LOG, d] = top[0]
            _add(t, at, st, dep, log, top, work, d, x0, online)
            _fits(t, at, st, dep, log, top, d, room)
            _next_cand(t, at, st, dep, cand, done, allowed, d, x0, twin)
        cur = d
        for c in range(dep[N_CAND, d]):
            x = cand[d, c]
            if d > 0 and not t[at[COVERED] + x]:
                continue
            evaluated += 1
            log = _roomy(log, top, 1)
            mark = top[0]
            c1 = d + 1
            if _add(t, at, st, dep, log, top, work, c1, x, online):  # the on-line rules rule it out
                _undo(st, log, top, mark)
                continue
            lower = dep[FULL, c1] - dep[RELAXED, c1]
            upper = dep[FULL, c1] - dep[GREEDY, c1]
            grows = _fits(t, at, st, dep, log, top, c1, room)
            if grows < 0:
                too_big = True
                break
            if not grows and d > 0:
                _undo(st, log, top, mark)
                continue
            p_elems = dep[PARAMS, c1]
            pbytes = -(-p_elems * word_bits // 8)
            once = dep[FIN, c1] + dep[FOUT, c1] + pbytes  # Eq. 3 with the parameters loaded once
            least = once
            if p_elems == 0:
                resident = True
            elif shared:
                resident = upper + p_elems <= room
            else:
                resident = p_elems <= param_room
            streamed = (d > 0 or bound_only) and not resident and (lower + p_elems > room if shared else True)
            if streamed:  # surely reloaded
                least += pbytes * (max(1, -(-batch * dep[WHOLE, c1] // room)) - 1)
            if c1 == 1 and t[at[FOLDS] + x]:
                once = least = 0  # a layout op alone folds into its neighbours
            if (dep[NCOMP, c1] == 1 or bound_only) and (not online or dep[FAN_OUT, c1] == 0):
                for k in range(1, c1 + 1):
                    offered.append(dep[PATH, k])
                offered.append(-1)
                offers.append((c1, once, least, int(streamed), int(resident)))
            if grows and (max_size == 0 or c1 < max_size):
                stack_d.append(c1)  # pushed in ascending order, so the last is grown first, as in Python
                stack_x.append(x)
            _undo(st, log, top, mark)
        if too_big:
            break
    _undo(st, log, top, 0)
    return evaluated, stopped, too_big, log


@njit(cache=True)
def _add(t, at, st, dep, log, top, work, d, x, online, steps=0):
    """Make op x the member at depth d (`extend` of the reference), totals in dep[:, d] from dep[:, d - 1], tiles
    for `steps` row steps (0: the finest); True when Sec. 6 rule 1 rules the group and all grown from it out
    (a consumer left out below x can never join)."""
    p_ = d - 1
    dep[PATH, d] = x
    st[POS, x] = d - 1
    fin, fout = dep[FIN, p_], dep[FOUT, p_] + t[at[GROW_OUT] + x]
    whole = dep[WHOLE, p_] + t[at[WHOLE_ROW] + x]
    streamed = 0
    for e in range(t[at[IN_PTR] + x], t[at[IN_PTR] + x + 1]):
        j, p = t[at[IN_T] + e], t[at[IN_P] + e]
        if p >= 0 and st[IN_GROUP, p]:
            if not t[at[IN_RET] + e] and st[READERS, j] + 1 == t[at[N_READERS] + j]:
                fout -= t[at[IN_BYTES] + e]  # x was its last outside reader
        elif st[READERS, j] == 0:
            if t[at[IN_SELEMS] + e]:
                streamed += t[at[IN_SELEMS] + e]  # loaded as parameters are
            else:
                fin += t[at[IN_BYTES] + e]
                whole += t[at[IN_HELD] + e]
        _set(st, log, top, READERS, j, st[READERS, j] + 1)
    params = dep[PARAMS, p_] + streamed
    qk = t[at[SM_QK] + x]
    if qk >= 0 and st[IN_GROUP, qk]:
        fout += t[at[SM_BYTES] + x]  # scores out and back: the context matmul is not (yet) in the group
    s = t[at[AV_SM] + x]
    if s >= 0 and st[IN_GROUP, s] and t[at[SM_QK] + s] >= 0 and st[IN_GROUP, t[at[SM_QK] + s]]:
        fout -= t[at[SM_BYTES] + s]  # the softmax runs online beside the context matmul
    for e in range(t[at[W_PTR] + x], t[at[W_PTR] + x + 1]):
        w = t[at[W_IDX] + e]
        if st[WCOUNT, w] == 0:
            params += t[at[W_ELEMS] + w]
        _set(st, log, top, WCOUNT, w, st[WCOUNT, w] + 1)
    any_chunked = any_kept = False
    for e in range(t[at[PRED_PTR] + x], t[at[PRED_PTR] + x + 1]):
        p = t[at[PRED_IDX] + e]
        if st[IN_GROUP, p]:
            any_chunked = any_chunked or st[CHUNKED, p] == 1
            any_kept = any_kept or st[KEPT, p] == 1
    save, inplace, passes = t[at[SAVE_ROW] + x], t[at[INPLACE] + x], t[at[PASSES] + x]
    # x is not a member: its own flags need no log
    if inplace:  # a concat/split is chunked when any producer is
        st[CHUNKED, x], st[KEPT, x] = int(any_chunked), int(any_kept)
    elif save > 0:  # x adopts ISOA when it passes chunks or no producer is chunked
        st[CHUNKED, x], st[KEPT, x] = int(passes or not any_chunked), int(passes or not any_kept)
    else:
        st[CHUNKED, x], st[KEPT, x] = 0, 0
    # weakly connected components: x joins every component it links to
    comps = dep[NCOMP, p_] + 1
    label = -1
    for e in range(t[at[LINK_PTR] + x], t[at[LINK_PTR] + x + 1]):
        y = t[at[LINK_IDX] + e]
        if not st[IN_GROUP, y]:
            continue
        if label < 0:
            label = st[COMP, y]
            comps -= 1
        elif st[COMP, y] != label:
            other = st[COMP, y]
            comps -= 1
            for k in range(1, d):
                if st[COMP, dep[PATH, k]] == other:
                    _set(st, log, top, COMP, dep[PATH, k], label)
    _set(st, log, top, COMP, x, x if label < 0 else label)
    dep[NCOMP, d] = comps
    dead = False
    if online:  # ops that must join: every consumer of a member's producer in the group
        length = dep[FAN_LEN, p_]
        for e in range(t[at[PRED_PTR] + x], t[at[PRED_PTR] + x + 1]):
            p = t[at[PRED_IDX] + e]
            if not st[IN_GROUP, p]:
                continue
            for e2 in range(t[at[SUCC_PTR] + p], t[at[SUCC_PTR] + p + 1]):
                s = t[at[SUCC_IDX] + e2]
                if not st[FAN, s]:
                    _set(st, log, top, FAN, s, 1)
                    st[FAN_LIST, length] = s
                    length += 1
        out = 0
        for u in range(length):
            s = st[FAN_LIST, u]
            if s != x and not st[IN_GROUP, s]:
                out += 1
                dead = dead or s < x
        dep[FAN_LEN, d], dep[FAN_OUT, d] = length, out
    _set(st, log, top, IN_GROUP, x, 1)
    dep[FIN, d], dep[FOUT, d], dep[WHOLE, d], dep[PARAMS, d] = fin, fout, whole, params
    for row in (FULL, RELAXED, GREEDY, KEPT_SAVING):
        dep[row, d] = dep[row, p_]
    h = t[at[OUT_H] + x]
    _set_rows(t, at, st, dep, log, top, work, d, x, min(h, max(t[at[FLOOR] + x], -(-h // steps) if steps else 1)),
              steps)
    if save > 0 and not inplace and not passes:
        _match(t, at, st, dep, log, top, d, x)
    return dead


@njit(cache=True)
def _set_rows(t, at, st, dep, log, top, work, d, op, r0, steps):
    """The reference's `_set_rows`: give `op` r0 tile rows and push the halo back to its inputs (tiles for `steps` row
    steps, 0: the finest)."""
    full, relaxed, greedy, kept_saving = dep[FULL, d], dep[RELAXED, d], dep[GREEDY, d], dep[KEPT_SAVING, d]
    work[0, 0], work[0, 1] = op, r0
    w = 1
    while w:
        w -= 1
        i, r = work[w, 0], work[w, 1]
        delta = r - st[ROWS, i]
        if delta <= 0:  # a stale item: a larger demand reached this op (and its inputs) first
            continue
        _set(st, log, top, ROWS, i, r)
        full += t[at[FULL_ROW] + i] * delta
        save = t[at[SAVE_ROW] + i]
        if save:
            relaxed += save * delta
            other = st[MATE, i]
            if other >= 0:  # the pair's smaller saving, at the new rows
                o = t[at[SAVE_ROW] + other] * st[ROWS, other]
                relaxed -= min(save * r, o) - min(save * (r - delta), o)
            if st[CHUNKED, i]:
                greedy += save * delta
            if st[KEPT, i]:
                kept_saving += save * delta
        for e in range(t[at[F_PTR] + i], t[at[F_PTR] + i + 1]):
            j = t[at[F_J] + e]
            need = t[at[F_A] + e] * r + t[at[F_C] + e]
            old = st[DEMAND, j]
            if need <= old:
                continue
            _set(st, log, top, DEMAND, j, need)
            p = t[at[F_P] + e]
            if p >= 0 and st[IN_GROUP, p]:
                need = min(need, t[at[F_PROWS] + e])
                if need > st[ROWS, p]:
                    work[w, 0], work[w, 1] = p, need
                    w += 1
            else:
                h = t[at[F_H] + e]
                if steps:
                    least = -(-h // steps)
                    full += t[at[F_ROW] + e] * (min(h, max(least, need)) - (min(h, max(least, old)) if old else 0))
                else:
                    full += t[at[F_ROW] + e] * (min(h, need) - min(h, old))
    dep[FULL, d], dep[RELAXED, d], dep[GREEDY, d], dep[KEPT_SAVING, d] = full, relaxed, greedy, kept_saving


@njit(cache=True)
def _match(t, at, st, dep, log, top, d, x):
    """The reference's `_match`: pair x with the free member of largest whole-image saving whose ofmap x reads
    (through concats/splits), visiting the least op first as the reference pops the lowest bit."""
    best, m = 0, -1
    size = 0  # ops to visit, in st[TODO, :size]
    for e in range(t[at[PRED_PTR] + x], t[at[PRED_PTR] + x + 1]):
        if st[IN_GROUP, t[at[PRED_IDX] + e]]:
            st[TODO, size] = t[at[PRED_IDX] + e]
            size += 1
    while size:
        low = 0
        for u in range(1, size):
            if st[TODO, u] < st[TODO, low]:
                low = u
        p = st[TODO, low]
        size -= 1
        st[TODO, low] = st[TODO, size]
        if t[at[INPLACE] + p]:
            for e in range(t[at[PRED_PTR] + p], t[at[PRED_PTR] + p + 1]):
                q = t[at[PRED_IDX] + e]
                if not st[IN_GROUP, q]:
                    continue
                seen = False
                for u in range(size):
                    seen = seen or st[TODO, u] == q
                if not seen:
                    st[TODO, size] = q
                    size += 1
        else:
            gain = t[at[SAVE_ROW] + p] * t[at[OUT_H] + p]
            if t[at[SAVE_ROW] + p] > 0 and st[MATE, p] < 0 and gain > best:
                best, m = gain, p
    if m < 0:
        return
    _set(st, log, top, MATE, x, m)
    _set(st, log, top, MATE, m, x)
    dep[WHOLE, d] += min(best, t[at[SAVE_ROW] + x] * t[at[OUT_H] + x])
    dep[RELAXED, d] -= min(t[at[SAVE_ROW] + x] * st[ROWS, x], t[at[SAVE_ROW] + m] * st[ROWS, m])


@njit(cache=True)
def _fits(t, at, st, dep, log, top, d, room):
    """1 if the group at depth d fits its finest tiles in `room`, else 0: by the bounds or, when they straddle,
    by the exact ISOA program, whose assignment the group then keeps (the reference's `Partial.keep`); -1 if the
    program could not run (`_isoa`)."""
    x = dep[PATH, d]
    if not t[at[COVERED] + x]:
        return 0
    full = dep[FULL, d]
    if full - dep[GREEDY, d] <= room or full - max(dep[GREEDY, d], dep[KEPT_SAVING, d]) <= room:
        return 1
    if full - dep[RELAXED, d] > room:
        return 0
    saving, ran = _isoa(t, at, st, dep, d)
    if not ran:
        return -1
    for k in range(d):
        i = dep[PATH, k + 1]
        flag = dep[CHOSEN, k + 1]
        if t[at[INPLACE] + i]:  # a concat/split a kept op feeds is chunked too
            for e in range(t[at[PRED_PTR] + i], t[at[PRED_PTR] + i + 1]):
                p = t[at[PRED_IDX] + e]
                if st[IN_GROUP, p] and st[KEPT, p] == 1:
                    flag = 1
        if st[KEPT, i] != flag:
            _set(st, log, top, KEPT, i, flag)
    dep[KEPT_SAVING, d] = saving
    return 1 if full - saving <= room else 0


@njit(cache=True)
def _next_cand(t, at, st, dep, cand, done, allowed, d, x, twin):
    """The ops that may join the group at depth d, whose newest member is x: the parent's above x, x's twin
    (x + 1, `optimus._twins`), and the successors of x whose predecessors (and twin) have all run or joined,
    merged in ascending order."""
    parent, count = d - 1, dep[N_CAND, d - 1]
    k = c = 0
    while c < count and cand[parent, c] <= x:
        c += 1
    if x + 1 < len(twin) and twin[x + 1] == x and _has(allowed, x + 1):  # below every successor and parent's
        cand[d, k] = x + 1
        k += 1
    for e in range(t[at[SUCC_PTR] + x], t[at[SUCC_PTR] + x + 1]):
        s = t[at[SUCC_IDX] + e]
        if not _has(allowed, s):
            continue
        ready = twin[s] < 0 or _has(done, twin[s]) or st[IN_GROUP, twin[s]] == 1
        for e2 in range(t[at[PRED_PTR] + s], t[at[PRED_PTR] + s + 1]):
            p = t[at[PRED_IDX] + e2]
            ready = ready and (_has(done, p) or st[IN_GROUP, p] == 1)
        if not ready:
            continue
        while c < count and cand[parent, c] < s:
            cand[d, k] = cand[parent, c]
            k += 1
            c += 1
        if c < count and cand[parent, c] == s:
            c += 1
        cand[d, k] = s
        k += 1
    while c < count:
        cand[d, k] = cand[parent, c]
        k += 1
        c += 1
    dep[N_CAND, d] = k


@njit(cache=True, nogil=True)
def window_limit(t, at, st, dep, log, top, work, room, steps):
    """`online.size_limit`'s table (Alg. 3): the largest n such that for every size up to n some connected
    window of the topological order fits `room` at tiles of `steps` row steps (greedy ISOA)."""
    n = at[OUT_H + 1] - at[OUT_H]
    fitting = np.zeros(n + 2, np.bool_)
    for first in range(n):
        dep[:, 0] = 0
        for j in range(first, n):
            if not t[at[COVERED] + j]:
                break
            d = j - first + 1
            log = _roomy(log, top, 1)
            _add(t, at, st, dep, log, top, work, d, j, np.bool_(False), steps)
            if dep[FULL, d] - dep[GREEDY, d] > room:
                break
            if dep[NCOMP, d] == 1:
                fitting[d] = True
        _undo(st, log, top, 0)
    limit = 1
    while fitting[limit + 1]:
        limit += 1
    return limit
