"""The down-set search's inner loop compiled with Numba: every group grown from one down-set, in arrays.

`optimus.chain_search` spends its time growing groups from each down-set: `grow.extend`
and the exact ISOA program on each group, a few microseconds each in Python. `grow_all`
does the same work for one down-set in compiled code, with a group's running totals
(`grow.Partial`) kept in arrays indexed by op and tensor and undone from a log when the
depth-first growth backs up, and hands back the groups the search should offer (connected,
and fitting unless alone) with Eq. 3's bounds. It visits groups in the order the Python
loop does, so `evaluated`, the candidates' order and so every plan are the same; the
Python loop stays as the reference (tests compare the two) and as the path for the
`bound_only` windows and for groups of more than `MAX_MEMBERS` ops.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.model import FusionModel

MAX_MEMBERS = 63  # the ISOA program keys states by the members' positions in one machine word
_MERGE_AT = 16  # as `model._MERGE_AT`

# the tables `grow_all` reads, laid end to end in this order (see `tables`); t[at[FIELD] + i] is item i of FIELD
(OUT_H, FLOOR, FULL_ROW, SAVE_ROW, INPLACE, COVERED, GROW_OUT, WHOLE_ROW, SUCC_PTR, SUCC_IDX, PRED_PTR, PRED_IDX, LINK_PTR, LINK_IDX, IN_PTR, IN_T, IN_P, IN_BYTES, IN_RET, IN_HELD, N_READERS, W_PTR, W_IDX, W_ELEMS, F_PTR, F_J, F_A, F_C, F_P, F_PROWS, F_H, F_ROW) = range(32)
_FIELDS = ("out_h", "floor", "full_row", "save_row", "inplace", "covered", "grow_out", "whole_row",
           "succ_ptr", "succ_idx", "pred_ptr", "pred_idx", "link_ptr", "link_idx",
           "in_ptr", "in_t", "in_p", "in_bytes", "in_ret", "in_held", "n_readers",
           "w_ptr", "w_idx", "w_elems",
           "f_ptr", "f_j", "f_a", "f_c", "f_p", "f_prows", "f_h", "f_row")


def tables(model: FusionModel) -> tuple[np.ndarray, np.ndarray]:
    """The model's per-op and per-tensor tables (`_FIELDS`; lists as CSR offsets and items) laid end to end in
    one int64 array, and where each starts; cached on the model."""
    hit = getattr(model, "_core_tables", None)
    if hit is not None:
        return hit
    n = model.n

    def csr(lists):
        ptr = np.zeros(len(lists) + 1, np.int64)
        ptr[1:] = np.cumsum([len(x) for x in lists])
        return ptr, np.array([v for x in lists for v in x], np.int64)

    succ = [model.members(model.succ[i]) for i in range(n)]
    pred = [model.members(model.pred[i]) for i in range(n)]
    link = [model.members(model.link[i]) for i in range(n)]
    wnames = sorted(model.weight_elems)
    windex = {w: k for k, w in enumerate(wnames)}
    columns = {
        "out_h": model.out_h, "floor": model.floor, "full_row": model.full_row, "save_row": model.save_row,
        "inplace": [int(v) for v in model.inplace], "covered": [int(v) for v in model.covered],
        "grow_out": model.grow_out, "whole_row": model.whole_row,
        "n_readers": [c.bit_count() for c in model.consumer_mask], "w_elems": [model.weight_elems[w] for w in wnames],
    }
    columns["succ_ptr"], columns["succ_idx"] = csr(succ)
    columns["pred_ptr"], columns["pred_idx"] = csr(pred)
    columns["link_ptr"], columns["link_idx"] = csr(link)
    ins = model.grow_ins
    columns["in_ptr"], columns["in_t"] = csr([[j for j, *_ in x] for x in ins])
    columns["in_p"] = [p for x in ins for _, p, *_ in x]
    columns["in_bytes"] = [b for x in ins for _, _, b, *_ in x]
    columns["in_ret"] = [int(r) for x in ins for *_, r, _ in x]
    columns["in_held"] = [h for x in ins for *_, h in x]
    columns["w_ptr"], columns["w_idx"] = csr([[windex[w] for w in dict.fromkeys(model.weights[i])] for i in range(n)])
    feeds = model.feeds
    columns["f_ptr"], columns["f_j"] = csr([[f[0] for f in x] for x in feeds])
    for k, name in enumerate(("f_a", "f_c", "f_p", "f_prows", "f_h", "f_row"), start=1):
        columns[name] = [f[k] for x in feeds for f in x]
    arrays = [np.asarray(columns[name], dtype=np.int64).reshape(-1) for name in _FIELDS]
    offsets = np.zeros(len(arrays) + 1, np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrays])
    hit = (np.concatenate(arrays), offsets)  # one array and its cuts: a call checks two arguments, not 32
    model._core_tables = hit
    return hit


def flags(mask: int, n: int) -> np.ndarray:
    """A bitmask over n ops as an array of 0/1 bytes."""
    raw = np.frombuffer(mask.to_bytes((n + 7) // 8 or 1, "little"), np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].copy()


def workspace(model: FusionModel) -> tuple[np.ndarray, ...]:
    """The arrays `grow_all` and `group_dram` grow groups in (st, dep, log, top, work, cand); they leave them as found."""
    n = model.n
    st = np.zeros((15, max(n, len(model.tnames), len(model.weight_elems))), np.int64)
    st[MATE, :] = -1
    feeds = sum(len(f) for f in model.feeds)
    return (st, np.zeros((14, _DEEP), np.int64), np.empty((_DEEP * (5 * n + 4 * _DEEP), 3), np.int64),
            np.zeros(1, np.int64), np.empty((feeds + 2, 2), np.int64), np.empty((_DEEP, n), np.int64))


# Growth state. Every array a helper takes costs two atomic reference-count updates per call, so the state
# lives in two 2-D arrays: `st` per op, tensor or weight (rows below) and `dep` per depth of the growth
# (the member added there and the group's running totals with it). Changes to `st` are logged as
# (row, index, old value) in `log[:top[0]]` and undone when the depth-first growth backs up.
(IN_GROUP, ROWS, MATE, CHUNKED, KEPT, COMP, FAN, POS, DEMAND, READERS, WCOUNT, FAN_LIST, TODO, OP_NEED,
 TENSOR_NEED) = range(15)
(PATH, FULL, RELAXED, GREEDY, FIN, FOUT, PARAMS, WHOLE, KEPT_SAVING, NCOMP, START_LOG, N_CAND, FAN_LEN,
 FAN_OUT) = range(14)
_DEEP = MAX_MEMBERS + 2


@njit(cache=True)
def _set(st, log, top, row, i, value):
    """st[row, i] = value, logged so that `_undo` can restore it."""
    k = top[0]
    log[k, 0], log[k, 1], log[k, 2] = row, i, st[row, i]
    top[0] = k + 1
    st[row, i] = value


@njit(cache=True)
def _undo(st, log, top, to):
    """Restore every entry of `st` changed since the log held `to` changes, newest first."""
    k = top[0]
    while k > to:
        k -= 1
        st[log[k, 0], log[k, 1]] = log[k, 2]
    top[0] = k


@njit(cache=True)
def grow_all(t, at, st, dep, log, top, work, cand, done, ready, allowed, room, param_room, shared, batch,
             word_bits, max_size, online, quota):
    """Every group grown from the down-set `done` (0/1 per op), as `optimus.chain_search`'s loop grows them.

    `t, at`: the model's `tables`; `st` to `cand`: a `workspace`, left as it was found.
    `ready`: ops whose predecessors are all in `done`; `allowed`: ops that may join (the rest stay fixed);
    `online`: Sec. 6 rule 1 (all consumers of a member or none); `quota`: groups to evaluate before giving up;
    `batch`: images that multiply parameter reloads (1 under Eq. 3 as printed).
    Returns (groups evaluated, whether the quota stopped it, whether a group outgrew MAX_MEMBERS, the offered
    groups as rows of little-endian mask bytes, and per offered group: its size, Eq. 3 bytes with the
    parameters once, the least bytes, whether they are surely streamed, whether they may stay on chip).
    """
    n = at[OUT_H + 1] - at[OUT_H]
    dep[:, 0] = 0
    for i in range(n):
        if ready[i] and allowed[i]:
            cand[0, dep[N_CAND, 0]] = i
            dep[N_CAND, 0] += 1
    members, ends = [0], [0]  # the offered groups' members, end to end
    members.pop()
    once_all, least_all, streamed_all, resident_all = [0], [0], [0], [0]
    once_all.pop(), least_all.pop(), streamed_all.pop(), resident_all.pop()
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
            dep[START_LOG, d] = top[0]
            _add(t, at, st, dep, log, top, work, d, x0, online)
            _fits(t, at, st, dep, log, top, d, room)
            _next_cand(t, at, st, dep, cand, done, allowed, d, x0)
        cur = d
        for c in range(dep[N_CAND, d]):
            x = cand[d, c]
            if d > 0 and not t[at[COVERED] + x]:
                continue
            evaluated += 1
            mark = top[0]
            c1 = d + 1
            if _add(t, at, st, dep, log, top, work, c1, x, online):  # the on-line rules rule it out
                _undo(st, log, top, mark)
                continue
            lower = dep[FULL, c1] - dep[RELAXED, c1]
            upper = dep[FULL, c1] - dep[GREEDY, c1]
            grows = _fits(t, at, st, dep, log, top, c1, room)
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
            streamed = d > 0 and not resident and (lower + p_elems > room if shared else True)
            if streamed:  # surely reloaded
                least += pbytes * (max(1, -(-batch * dep[WHOLE, c1] // room)) - 1)
            if dep[NCOMP, c1] == 1 and (not online or dep[FAN_OUT, c1] == 0):
                for k in range(1, c1 + 1):
                    members.append(dep[PATH, k])
                ends.append(len(members))
                once_all.append(once)
                least_all.append(least)
                streamed_all.append(int(streamed))
                resident_all.append(int(resident))
            if grows and (max_size == 0 or c1 < max_size):
                if c1 >= MAX_MEMBERS:
                    too_big = True
                    break
                stack_d.append(c1)  # pushed in ascending order, so the last is grown first, as in Python
                stack_x.append(x)
            _undo(st, log, top, mark)
        if too_big:
            break
    _undo(st, log, top, 0)
    count = len(ends) - 1
    bits = np.zeros((count, (n + 7) // 8), np.uint8)
    sizes = np.zeros(count, np.int64)
    for k in range(count):
        sizes[k] = ends[k + 1] - ends[k]
        for u in range(ends[k], ends[k + 1]):
            bits[k, members[u] >> 3] |= np.uint8(1 << (members[u] & 7))
    return (evaluated, stopped, too_big, bits, sizes, np.array(once_all, np.int64), np.array(least_all, np.int64),
            np.array(streamed_all, np.int64), np.array(resident_all, np.int64))


@njit(cache=True)
def _add(t, at, st, dep, log, top, work, d, x, online):
    """Make op x the member at depth d (`grow.extend`), its totals in dep[:, d] from dep[:, d - 1]; True when
    Sec. 6 rule 1 rules the group and all grown from it out (a consumer left out below x can never join)."""
    p_ = d - 1
    dep[PATH, d] = x
    st[POS, x] = d - 1
    fin, fout = dep[FIN, p_], dep[FOUT, p_] + t[at[GROW_OUT] + x]
    whole = dep[WHOLE, p_] + t[at[WHOLE_ROW] + x]
    for e in range(t[at[IN_PTR] + x], t[at[IN_PTR] + x + 1]):
        j, p = t[at[IN_T] + e], t[at[IN_P] + e]
        if p >= 0 and st[IN_GROUP, p]:
            if not t[at[IN_RET] + e] and st[READERS, j] + 1 == t[at[N_READERS] + j]:
                fout -= t[at[IN_BYTES] + e]  # x was its last outside reader
        elif st[READERS, j] == 0:
            fin += t[at[IN_BYTES] + e]
            whole += t[at[IN_HELD] + e]
        _set(st, log, top, READERS, j, st[READERS, j] + 1)
    params = dep[PARAMS, p_]
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
    save, inplace = t[at[SAVE_ROW] + x], t[at[INPLACE] + x]
    # x is not a member: its own flags need no log
    if inplace:  # a concat/split is chunked when any producer is
        st[CHUNKED, x], st[KEPT, x] = int(any_chunked), int(any_kept)
    elif save > 0:  # x adopts ISOA when no producer is chunked
        st[CHUNKED, x], st[KEPT, x] = int(not any_chunked), int(not any_kept)
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
    _set_rows(t, at, st, dep, log, top, work, d, x, t[at[FLOOR] + x])
    if save > 0 and not inplace:
        _match(t, at, st, dep, log, top, d, x)
    return dead


@njit(cache=True)
def _set_rows(t, at, st, dep, log, top, work, d, op, r0):
    """`grow._set_rows`: give `op` r0 tile rows and push the halo back to its inputs (finest tiles)."""
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
                full += t[at[F_ROW] + e] * (min(h, need) - min(h, old))
    dep[FULL, d], dep[RELAXED, d], dep[GREEDY, d], dep[KEPT_SAVING, d] = full, relaxed, greedy, kept_saving


@njit(cache=True)
def _match(t, at, st, dep, log, top, d, x):
    """`grow._match`: pair x with the free member of largest whole-image saving whose ofmap x reads
    (through concats/splits), visiting the least op first as `grow._match` pops the lowest bit."""
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
    """Whether the group at depth d fits its finest tiles in `room`: by the bounds or, when they straddle, by
    the exact ISOA program, whose assignment the group then keeps (`grow.Partial.keep`)."""
    x = dep[PATH, d]
    if not t[at[COVERED] + x]:
        return False
    full = dep[FULL, d]
    if full - dep[GREEDY, d] <= room or full - max(dep[GREEDY, d], dep[KEPT_SAVING, d]) <= room:
        return True
    if full - dep[RELAXED, d] > room:
        return False
    saving, chosen = _isoa(t, at, st, dep, d)
    for k in range(d):
        i = dep[PATH, k + 1]
        flag = int((chosen >> np.uint64(k)) & np.uint64(1))
        if t[at[INPLACE] + i]:  # a concat/split a kept op feeds is chunked too
            for e in range(t[at[PRED_PTR] + i], t[at[PRED_PTR] + i + 1]):
                p = t[at[PRED_IDX] + e]
                if st[IN_GROUP, p] and st[KEPT, p] == 1:
                    flag = 1
        if st[KEPT, i] != flag:
            _set(st, log, top, KEPT, i, flag)
    dep[KEPT_SAVING, d] = saving
    return full - saving <= room


@njit(cache=True)
def _next_cand(t, at, st, dep, cand, done, allowed, d, x):
    """The ops that may join the group at depth d, whose newest member is x: the parent's above x, and the
    successors of x whose predecessors have all run or joined, merged in ascending order."""
    parent, count = d - 1, dep[N_CAND, d - 1]
    k = c = 0
    while c < count and cand[parent, c] <= x:
        c += 1
    for e in range(t[at[SUCC_PTR] + x], t[at[SUCC_PTR] + x + 1]):
        s = t[at[SUCC_IDX] + e]
        if not allowed[s]:
            continue
        ready = True
        for e2 in range(t[at[PRED_PTR] + s], t[at[PRED_PTR] + s + 1]):
            p = t[at[PRED_IDX] + e2]
            ready = ready and (done[p] == 1 or st[IN_GROUP, p] == 1)
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


@njit(cache=True)
def _isoa(t, at, st, dep, size):
    """(largest ISOA saving, chosen members as a mask of their depths - 1) at the finest tiles of the group
    at depth `size`: `FusionModel.isoa`'s program, states keyed by open members' positions in one word."""
    one = np.uint64(1)
    last = np.full(size, -1, np.int64)  # position of each member's last in-group consumer
    preds = np.zeros(size, np.uint64)  # positions of each member's in-group producers
    for k in range(size):
        x = dep[PATH, k + 1]
        for e in range(t[at[SUCC_PTR] + x], t[at[SUCC_PTR] + x + 1]):
            s = t[at[SUCC_IDX] + e]
            if st[IN_GROUP, s] and st[POS, s] > last[k]:
                last[k] = st[POS, s]
        for e in range(t[at[PRED_PTR] + x], t[at[PRED_PTR] + x + 1]):
            p = t[at[PRED_IDX] + e]
            if st[IN_GROUP, p]:
                preds[k] |= one << np.uint64(st[POS, p])
    key, sav, cho = [np.uint64(0)], [np.int64(0)], [np.uint64(0)]  # states: ISOA/chunked flags of open members
    open_ops = np.uint64(0)
    for k in range(size):
        x = dep[PATH, k + 1]
        b = one << np.uint64(k)
        gain = t[at[SAVE_ROW] + x] * st[ROWS, x]
        nkey, nsav, ncho = [np.uint64(0)], [np.int64(0)], [np.uint64(0)]
        nkey.pop(), nsav.pop(), ncho.pop()
        for s in range(len(key)):
            if t[at[INPLACE] + x]:  # a concat/split is chunked when any producer is
                nkey.append(key[s] | b if key[s] & preds[k] else key[s])
                nsav.append(sav[s])
                ncho.append(cho[s])
            else:
                nkey.append(key[s])
                nsav.append(sav[s])
                ncho.append(cho[s])
                if gain > 0 and not key[s] & preds[k]:  # x may adopt ISOA: none of its producers is chunked
                    nkey.append(key[s] | b)
                    nsav.append(sav[s] + gain)
                    ncho.append(cho[s] | b)
        closed = b if last[k] < 0 else np.uint64(0)
        for q in range(k):
            if (preds[k] >> np.uint64(q)) & one and last[q] == k:
                closed |= one << np.uint64(q)
        open_ops = (open_ops | b) & ~closed
        key, sav, cho = [np.uint64(0)], [np.int64(0)], [np.uint64(0)]
        key.pop(), sav.pop(), cho.pop()
        if len(nkey) > _MERGE_AT:
            # the future reads only, per pending consumer (a later member reading an open one), whether any
            # of its producers is chunked: states telling every pending consumer the same are merged
            pending = [np.uint64(0)]
            pending.pop()
            for w in range(k + 1, size):
                if preds[w] & open_ops:
                    pending.append(preds[w])
            mkey, mst, msav, mcho = [np.uint64(0)], [np.uint64(0)], [np.int64(0)], [np.uint64(0)]
            mkey.pop(), mst.pop(), msav.pop(), mcho.pop()
            for s in range(len(nkey)):
                merged = np.uint64(0)
                for v in range(len(pending)):
                    if nkey[s] & pending[v]:
                        merged |= one << np.uint64(v)
                hit = -1
                for u in range(len(mkey)):
                    if mkey[u] == merged:
                        hit = u
                        break
                if hit < 0:
                    mkey.append(merged), mst.append(nkey[s] & open_ops), msav.append(nsav[s]), mcho.append(ncho[s])
                elif nsav[s] > msav[hit]:
                    mst[hit], msav[hit], mcho[hit] = nkey[s] & open_ops, nsav[s], ncho[s]
            nkey, nsav, ncho = mst, msav, mcho
            larger_only = False  # dict(merged.values()): a repeated key keeps its place and takes the last value
        else:
            larger_only = True
            if not closed:  # every key is a subset of the open members already, and no two are equal
                key, sav, cho = nkey, nsav, ncho
                continue
        for s in range(len(nkey)):
            k2 = nkey[s] & open_ops
            hit = -1
            for u in range(len(key)):
                if key[u] == k2:
                    hit = u
                    break
            if hit < 0:
                key.append(k2), sav.append(nsav[s]), cho.append(ncho[s])
            elif not larger_only or nsav[s] > sav[hit]:
                sav[hit], cho[hit] = nsav[s], ncho[s]
    best = 0
    for s in range(1, len(sav)):
        if sav[s] > sav[best]:
            best = s
    return sav[best], cho[best]


@njit(cache=True)
def group_dram(t, at, st, dep, log, top, work, members, room, param_room, shared, per_band, batch, word_bits):
    """`cost.dram_bytes` of the group of `members` (ascending, at most MAX_MEMBERS), which must fit its finest
    tiles in `room`."""
    dep[:, 0] = 0
    for q in range(len(members)):
        _add(t, at, st, dep, log, top, work, q + 1, members[q], False)
    out = _dram_bytes(t, at, st, dep, len(members), room, param_room, shared, per_band, batch, word_bits)
    _undo(st, log, top, 0)
    return out


@njit(cache=True)
def _dram_bytes(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits):
    """`cost.dram_bytes` of the fitting group at depth d: Eq. 3 once when its parameters stay beside its finest
    tiles, else `cost._tiled`'s schedule, the fewest sub-groups over row steps and images per band."""
    saving, chosen = _isoa(t, at, st, dep, d)
    finest = dep[FULL, d] - saving
    p_elems, fin, fout = dep[PARAMS, d], dep[FIN, d], dep[FOUT, d]
    pbytes = -(-p_elems * word_bits // 8)
    if p_elems == 0 or (finest <= room - p_elems if shared else p_elems <= param_room):
        return fin + fout + pbytes
    kbig = 1  # the most rows of any member's ofmap or input
    for q in range(1, d + 1):
        i = dep[PATH, q]
        kbig = max(kbig, t[at[OUT_H] + i])
        for e in range(t[at[F_PTR] + i], t[at[F_PTR] + i + 1]):
            p = t[at[F_P] + e]
            if p < 0 or not st[IN_GROUP, p]:
                kbig = max(kbig, t[at[F_H] + e])
    k = _fewest_steps(t, at, st, dep, d, chosen, room, kbig)
    tile = _footprint(t, at, st, dep, d, chosen, k)
    images = min(batch, room // tile) if k == 1 and tile else 1
    if per_band:
        images = batch
    else:
        whole = _footprint(t, at, st, dep, d, chosen, 1)
        best = (k * -(-batch // images), k, -images)
        for n in range(2, batch + 1):
            if n * finest > room:
                break  # no band of n images fits, nor of more
            if -(-batch // n) * -(-n * whole // room) > best[0]:
                continue  # footprint(k) >= footprint(1) / k: no band of n images has fewer sub-groups
            kn = _fewest_steps(t, at, st, dep, d, chosen, room // n, kbig)
            option = (kn * -(-batch // n), kn, -n)
            if option < best:
                best = option
        k, images = best[1], -best[2]
    subgroups = k * (1 if per_band else -(-batch // images))
    return fin + fout + pbytes * subgroups


@njit(cache=True)
def _fewest_steps(t, at, st, dep, d, chosen, room, kbig):
    """`cost._fewest_steps`: the fewest row steps whose tiles fit `room`, galloping up from a bound, then bisecting."""
    whole = _footprint(t, at, st, dep, d, chosen, 1)
    if whole <= room:
        return 1
    lo = min(kbig, max(2, -(-whole // room)))
    hi, step = lo, 1
    while hi < kbig and _footprint(t, at, st, dep, d, chosen, hi) > room:
        lo, hi, step = hi + 1, min(kbig, hi + step), 2 * step
    while lo < hi:
        mid = (lo + hi) // 2
        if _footprint(t, at, st, dep, d, chosen, mid) <= room:
            hi = mid
        else:
            lo = mid + 1
    return hi


@njit(cache=True)
def _footprint(t, at, st, dep, d, chosen, k):
    """`FusionModel.footprint`: elements of one image's tiles of the group at depth d in k row steps (0: the
    finest), members in `chosen` (positions) holding their ofmap tiles T_c channels deep (ISOA)."""
    total = 0
    for q in range(d, 0, -1):  # backwards through the group: t(l-1) = t(l) * S + K - S, the max at branches
        i = dep[PATH, q]
        h = t[at[OUT_H] + i]
        r = t[at[FLOOR] + i]
        if k:
            r = max(r, -(-h // k))
        r = min(h, max(r, st[OP_NEED, i]))
        save = t[at[SAVE_ROW] + i] if (chosen >> np.uint64(q - 1)) & np.uint64(1) else 0
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

