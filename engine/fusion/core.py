"""The down-set search's inner loop compiled with Numba: every group grown from one down-set, in arrays.

`optimus.chain_search` spends its time growing groups from each down-set: `grow.extend`
and the exact ISOA program on each group, a few microseconds each in Python. `grow_all`
does the same work for one down-set in compiled code, with a group's running totals
(`grow.Partial`) kept in arrays indexed by op and tensor and undone from a log when the
depth-first growth backs up, and hands back the groups the search should offer (connected,
and fitting unless alone) with Eq. 3's bounds. It visits groups in the order the Python
loop does, so `evaluated`, the candidates' order and so every plan are the same; the
Python loop stays as the reference (tests compare the two) and takes over in the rare
group where more than 63 members that may hold their ofmap T_c channels deep are open at once
(the ISOA program's states are masks of one machine word).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.model import FusionModel

_MERGE_AT = 16  # as `model._MERGE_AT`

# the tables the search reads, laid end to end in this order (see `tables`); t[at[FIELD] + i] is item i of FIELD
(OUT_H, FLOOR, FULL_ROW, SAVE_ROW, INPLACE, COVERED, GROW_OUT, WHOLE_ROW, SUCC_PTR, SUCC_IDX, PRED_PTR, PRED_IDX,
 LINK_PTR, LINK_IDX, IN_PTR, IN_T, IN_P, IN_BYTES, IN_RET, IN_HELD, N_READERS, W_PTR, W_IDX, W_ELEMS, F_PTR, F_J,
 F_A, F_C, F_P, F_PROWS, F_H, F_ROW, OUT_PTR, OUT_IDX, RD_PTR, RD_IDX, T_BYTES, T_PRODUCER, T_RETURNED, OWN_WBYTES,
 SHARES_W, W_OUT, C_OUT, PER_GROUP, CHANNELWISE, IN_H, IN_W, IN_RULE, IN_WRULE, IN_SELEMS, IN_STREAM, SM_QK, SM_BYTES,
 AV_SM, PASSES) = range(55)
_FIELDS = ("out_h", "floor", "full_row", "save_row", "inplace", "covered", "grow_out", "whole_row",
           "succ_ptr", "succ_idx", "pred_ptr", "pred_idx", "link_ptr", "link_idx",
           "in_ptr", "in_t", "in_p", "in_bytes", "in_ret", "in_held", "n_readers",
           "w_ptr", "w_idx", "w_elems",
           "f_ptr", "f_j", "f_a", "f_c", "f_p", "f_prows", "f_h", "f_row",
           "out_ptr", "out_idx", "rd_ptr", "rd_idx", "t_bytes", "t_producer", "t_returned", "own_wbytes", "shares_w",
           "w_out", "c_out", "per_group", "channelwise", "in_h", "in_w", "in_rule", "in_wrule", "in_selems",
           "in_stream", "sm_qk", "sm_bytes", "av_sm", "passes")


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
        "passes": [int(v) for v in model.passes],
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
    columns["in_ret"] = [int(f[4]) for x in ins for f in x]
    columns["in_held"] = [f[5] for x in ins for f in x]
    columns["in_selems"] = [f[6] for x in ins for f in x]  # elements loaded as parameters when streamed
    columns["in_stream"] = [int(model.stream[j]) for x in ins for j, *_ in x]
    columns["w_ptr"], columns["w_idx"] = csr([[windex[w] for w in dict.fromkeys(model.weights[i])] for i in range(n)])
    feeds = model.feeds
    columns["f_ptr"], columns["f_j"] = csr([[f[0] for f in x] for x in feeds])
    for k, name in enumerate(("f_a", "f_c", "f_p", "f_prows", "f_h", "f_row"), start=1):
        columns[name] = [f[k] for x in feeds for f in x]
    columns["out_ptr"], columns["out_idx"] = csr(model.outs)
    columns["rd_ptr"], columns["rd_idx"] = csr([model.members(m) for m in model.consumer_mask])
    columns["t_bytes"], columns["t_producer"] = model.tbytes, model.producer
    columns["t_returned"] = [int(v) for v in model.is_graph_output]
    # attention softmaxes (`FusionModel._attention`): the scores' producer and the second pass's bytes; per
    # context matmul, its softmax
    columns["sm_qk"], columns["sm_bytes"] = [q for q, _ in model.spill_on], [b for _, b in model.spill_on]
    columns["av_sm"] = model.spill_off
    columns["own_wbytes"], columns["shares_w"] = model.own_weight_bytes, [int(v) for v in model.shares_weights]
    # the layer-wise schedule of a lone op (`cost._Lone`): output width and channels, channels per convolution
    # group, and per input its rows, columns and rules as 3 items each (mode, kernel, stride)
    outs = [[model.tgeo[j] for j in model.outs[i]] for i in range(n)]
    covered = model.covered
    columns["w_out"] = [max(g.w for g in o) if covered[i] else 0 for i, o in enumerate(outs)]
    columns["c_out"] = [sum(g.channels for g in o) if covered[i] else 0 for i, o in enumerate(outs)]
    columns["per_group"] = [max(1, c // op.groups) for c, op in zip(columns["c_out"], model.graph.ops)]
    columns["channelwise"] = [int(v) for v in model.channelwise]
    geo = [model.tgeo[j] if covered[i] else None for i in range(n) for j in model.ins[i]]
    columns["in_h"] = [g.h if g else 0 for g in geo]
    columns["in_w"] = [g.w if g else 0 for g in geo]
    columns["in_rule"] = [v for i in range(n) for k in range(len(model.ins[i]))
                          for v in (model.rules[i][k] if covered[i] else (0, 0, 0))]
    columns["in_wrule"] = [v for i in range(n) for k in range(len(model.ins[i]))
                           for v in (model.wrules[i][k] if covered[i] else (0, 0, 0))]
    arrays = [np.asarray(columns[name], dtype=np.int64).reshape(-1) for name in _FIELDS]
    offsets = np.zeros(len(arrays) + 1, np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrays])
    hit = (np.concatenate(arrays), offsets)  # one array and its cuts: a call checks two arguments, not 32
    model._core_tables = hit
    return hit


def bitset(mask: int, n: int) -> np.ndarray:
    """A bitmask over n ops as the little-endian uint64 words the compiled functions read."""
    return np.frombuffer(mask.to_bytes(8 * ((n + 63) // 64), "little"), np.uint64).copy()


def workspace(model: FusionModel) -> tuple[np.ndarray, ...]:
    """The arrays the compiled functions grow groups in (st, dep, log, top, work, cand); they leave them as found.

    top[1] bounds the log entries one op's joining writes (`_roomy` keeps that much room).
    """
    n = model.n
    st = np.zeros((15, max(n, len(model.tnames), len(model.weight_elems))), np.int64)
    st[MATE, :] = -1
    feeds = sum(len(f) for f in model.feeds)
    per_add = max(len(i) for i in model.ins) + max(len(w) for w in model.weights) + 3 * n + 2 * feeds + 8
    return (st, np.zeros((18, n + 2), np.int64), np.empty((64 * per_add, 3), np.int64),
            np.array([0, per_add], np.int64), np.empty((feeds + 2, 2), np.int64), np.empty((n + 2, n), np.int64))


# Growth state. Every array a helper takes costs two atomic reference-count updates per call, so the state
# lives in two 2-D arrays: `st` per op, tensor or weight (rows below) and `dep` per depth of the growth
# (the member added there and the group's running totals with it). Changes to `st` are logged as
# (row, index, old value) in `log[:top[0]]` and undone when the depth-first growth backs up.
(IN_GROUP, ROWS, MATE, CHUNKED, KEPT, COMP, FAN, POS, DEMAND, READERS, WCOUNT, FAN_LIST, TODO, OP_NEED,
 TENSOR_NEED) = range(15)
(PATH, FULL, RELAXED, GREEDY, FIN, FOUT, PARAMS, WHOLE, KEPT_SAVING, NCOMP, START_LOG, N_CAND, FAN_LEN,
 FAN_OUT, K_ROWS, CHOSEN, LAST_USE, SLOT) = range(18)
# rows of `_isoa`'s array: the states (key: chunked open members, saving, trace node of the chosen members),
# the next states, the merged ones, the pending consumers' producers
(_KEY, _SAV, _CHO, _NKEY, _NSAV, _NCHO, _MKEY, _MST, _MSAV, _MCHO, _PEND) = range(11)
_ISOA_ROWS = 11
_SLOTS = 63  # open members that may be chunked at once: a state's key is a mask of their slots


@njit(cache=True)
def _roomy(log, top, adds):
    """`log`, or a longer copy, with room for `adds` more ops joining (top[1] entries each)."""
    need = top[0] + adds * top[1]
    if need <= log.shape[0]:
        return log
    longer = np.empty((max(need, 2 * log.shape[0]), 3), np.int64)
    longer[:top[0]] = log[:top[0]]
    return longer


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
def _has(bits, i):
    """Whether bit i of the bitset `bits` (uint64 words, little-endian) is set."""
    return (bits[i >> 6] >> np.uint64(i & 63)) & np.uint64(1) != 0


@njit(cache=True)
def _grow(t, at, st, dep, log, top, work, cand, done, ready, allowed, room, param_room, shared, batch, word_bits,
          max_size, online, quota, offered, offers, bound_only, twin):
    """Every group grown from the down-set `done`, as the Python loop of `optimus.chain_search` grows them.

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
    """Make op x the member at depth d (`grow.extend`), its totals in dep[:, d] from dep[:, d - 1], with tiles
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
    """`grow._set_rows`: give `op` r0 tile rows and push the halo back to its inputs (tiles for `steps` row
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
    """1 if the group at depth d fits its finest tiles in `room`, else 0: by the bounds or, when they straddle,
    by the exact ISOA program, whose assignment the group then keeps (`grow.Partial.keep`); -1 if the
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


@njit(cache=True)
def _isoa(t, at, st, dep, size):
    """(largest ISOA saving at the finest tiles of the group at depth `size`, whether the program could run):
    `FusionModel.isoa`'s program, with the same states in the same order and the same ties. A state's key
    holds the chunked open members as bits of slots, a slot per open member that may be chunked (False when
    more than 63 are open at once), and its chosen members as a node of a trace, read back at the end into
    dep[CHOSEN, 1..size]."""
    for q in range(1, size + 1):  # each member's last consumer in the group, as a depth (-1: none)
        x = dep[PATH, q]
        dep[LAST_USE, q], dep[CHOSEN, q] = -1, 0
        for e in range(t[at[SUCC_PTR] + x], t[at[SUCC_PTR] + x + 1]):
            s = t[at[SUCC_IDX] + e]
            if st[IN_GROUP, s]:
                dep[LAST_USE, q] = max(dep[LAST_USE, q], st[POS, s] + 1)
    buf = np.empty((_ISOA_ROWS, 64), np.int64)
    parent = np.empty(64, np.int64)  # trace: each node adds one chosen member (a depth) to its parent's
    member = np.empty(64, np.int64)
    nodes = 1  # node 0: nothing chosen
    buf[_KEY, 0] = buf[_SAV, 0] = buf[_CHO, 0] = 0
    count = 1
    used = 0  # slots of open members that may be chunked
    for q in range(1, size + 1):
        x = dep[PATH, q]
        preds = 0  # slots of x's producers in the group (open until x has read them)
        closing = dep[LAST_USE, q] < 0
        freed = 0
        for e in range(t[at[PRED_PTR] + x], t[at[PRED_PTR] + x + 1]):
            p = t[at[PRED_IDX] + e]
            if st[IN_GROUP, p]:
                qp = st[POS, p] + 1
                if dep[SLOT, qp] >= 0:
                    preds |= 1 << dep[SLOT, qp]
                if dep[LAST_USE, qp] == q:
                    closing = True
                    if dep[SLOT, qp] >= 0:
                        freed |= 1 << dep[SLOT, qp]
        inplace, passes = t[at[INPLACE] + x], t[at[PASSES] + x]
        gain = t[at[SAVE_ROW] + x] * st[ROWS, x]
        b = 0
        dep[SLOT, q] = -1
        if inplace or gain > 0:
            if used == (1 << _SLOTS) - 1:
                return 0, False
            free = 0
            while (used >> free) & 1:
                free += 1
            dep[SLOT, q] = free
            b = 1 << free
            used |= b
            if dep[LAST_USE, q] < 0:
                freed |= b
        if 2 * count > buf.shape[1]:
            wider = np.empty((_ISOA_ROWS, 4 * count), np.int64)
            wider[:, :buf.shape[1]] = buf
            buf = wider
        if nodes + count > len(parent):
            parent, member = _grown1(parent, 2 * (nodes + count), 0), _grown1(member, 2 * (nodes + count), 0)
        m = 0  # the next states
        for s in range(count):
            key = buf[_KEY, s]
            if inplace:  # a concat/split is chunked when any producer is
                buf[_NKEY, m] = key | b if key & preds else key
            else:
                buf[_NKEY, m] = key
            buf[_NSAV, m], buf[_NCHO, m] = buf[_SAV, s], buf[_CHO, s]
            m += 1
            if not inplace and gain > 0 and (passes or not key & preds):  # x may adopt ISOA
                parent[nodes], member[nodes] = buf[_CHO, s], q
                buf[_NKEY, m], buf[_NSAV, m], buf[_NCHO, m] = key | b, buf[_SAV, s] + gain, nodes
                nodes += 1
                m += 1
        used &= ~freed
        if m > _MERGE_AT:
            # the future reads only, per pending consumer (a later member reading an open one), whether any
            # of its producers is chunked: states telling every pending consumer the same are merged
            pending = 0
            for w in range(q + 1, size + 1):
                y = dep[PATH, w]
                reads = 0
                for e in range(t[at[PRED_PTR] + y], t[at[PRED_PTR] + y + 1]):
                    p = t[at[PRED_IDX] + e]
                    if st[IN_GROUP, p] and st[POS, p] + 1 <= q and dep[SLOT, st[POS, p] + 1] >= 0:
                        reads |= 1 << dep[SLOT, st[POS, p] + 1]
                reads &= used
                if not reads:
                    continue
                known = False
                for v in range(pending):
                    known = known or buf[_PEND, v] == reads
                if not known:
                    if pending == _SLOTS:
                        return 0, False
                    buf[_PEND, pending] = reads
                    pending += 1
            merged = 0
            for s in range(m):
                tell = 0
                for v in range(pending):
                    if buf[_NKEY, s] & buf[_PEND, v]:
                        tell |= 1 << v
                hit = -1
                for u in range(merged):
                    if buf[_MKEY, u] == tell:
                        hit = u
                        break
                if hit < 0:
                    hit = merged
                    merged += 1
                    buf[_MKEY, hit], buf[_MSAV, hit] = tell, -1
                if buf[_NSAV, s] > buf[_MSAV, hit]:
                    buf[_MST, hit], buf[_MSAV, hit], buf[_MCHO, hit] = buf[_NKEY, s] & used, buf[_NSAV, s], buf[_NCHO, s]
            count = 0  # dict(merged.values()): a repeated key keeps its place and takes the last value
            for u in range(merged):
                count = _put(buf, count, buf[_MST, u], buf[_MSAV, u], buf[_MCHO, u], False)
        elif not closing:  # every key holds open members only already, and no two are equal
            for s in range(m):
                buf[_KEY, s], buf[_SAV, s], buf[_CHO, s] = buf[_NKEY, s], buf[_NSAV, s], buf[_NCHO, s]
            count = m
        else:
            count = 0
            for s in range(m):
                count = _put(buf, count, buf[_NKEY, s] & used, buf[_NSAV, s], buf[_NCHO, s], True)
    best = 0
    for s in range(1, count):
        if buf[_SAV, s] > buf[_SAV, best]:
            best = s
    node = buf[_CHO, best]
    while node:
        dep[CHOSEN, member[node]] = 1
        node = parent[node]
    return buf[_SAV, best], True


@njit(cache=True)
def _put(buf, count, key, saving, chosen, larger_only):
    """Add state `key` to the first `count` states: a new key goes last; an existing one keeps its place and
    takes the new value (only a larger saving under `larger_only`). Returns the new count."""
    for u in range(count):
        if buf[_KEY, u] == key:
            if not larger_only or saving > buf[_SAV, u]:
                buf[_SAV, u], buf[_CHO, u] = saving, chosen
            return count
    buf[_KEY, count], buf[_SAV, count], buf[_CHO, count] = key, saving, chosen
    return count + 1


@njit(cache=True, nogil=True)
def _group_dram(t, at, st, dep, log, top, work, group, room, param_room, shared, per_band, batch, word_bits):
    """`cost.dram_bytes` of the group whose bitset is `group` (fitting its finest tiles in `room`), grown in
    the workspace and undone; -1 if the ISOA program could not run."""
    n = at[OUT_H + 1] - at[OUT_H]
    dep[:, 0] = 0
    size = 0
    for w in group:
        while w:
            w &= w - np.uint64(1)
            size += 1
    log = _roomy(log, top, size)
    d = 0
    for i in range(n):
        if _has(group, i):
            d += 1
            _add(t, at, st, dep, log, top, work, d, i, False)
    out = _dram_bytes(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits)
    _undo(st, log, top, 0)
    return out


@njit(cache=True)
def _dram_bytes(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits):
    """`cost.dram_bytes` of the fitting group at depth d (-1 if the ISOA program could not run)."""
    fin, fout, par, _, _, _, _ = _tiled(t, at, st, dep, d, room, param_room, shared, per_band, batch, word_bits,
                                        False)
    return fin + fout + par if fin >= 0 else -1


@njit(cache=True)
def _tiled(t, at, st, dep, d, fmap, param_room, shared, per_band, batch, word_bits, detail):
    """`cost._tiled` of the group at depth d: (fmap-in, fmap-out and parameter bytes, on-chip elements,
    parameters resident, row steps, images per tile), the fewest sub-groups over row steps and images per band;
    fmap-in -1 when its finest tiles do not fit, -2 when the ISOA program could not run. Without `detail`, a group whose parameters stay on chip
    beside its finest tiles is only costed (Eq. 3 once), as `cost.dram_bytes` does. dep[K_ROWS] ends with the
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
    kbig = 1  # the most rows of any member's ofmap or input
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


# ---- the down-set search (`optimus.chain_search`) ----------------------------------------------------------
# The functions Python calls release the GIL (`nogil=True`): a search can run for seconds, and the dashboard's
# server must keep answering its page meanwhile.
# Down-sets are bitsets of W words, found through an open-addressing hash table; each has its best cost so
# far, the way it was reached (previous down-set, last group), its ready ops, the traffic still owed, its
# place in its level's list and its list of groups waiting to be settled.


@njit(cache=True)
def _hash(row):
    """A hash of a bitset whose every bit reaches the low bits the table indexes with (splitmix64's mixer)."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for w in row:
        z = h ^ w
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = z ^ (z >> np.uint64(31))
    return h


@njit(cache=True)
def _find(keys, slots, row):
    """(index of down-set `row` or -1, the slot where it is or would go)."""
    mask = np.uint64(len(slots) - 1)
    slot = _hash(row) & mask
    while True:
        k = slots[slot]
        if k < 0:
            return -1, slot
        same = True
        for w in range(len(row)):
            if keys[k, w] != row[w]:
                same = False
                break
        if same:
            return k, slot
        slot = (slot + np.uint64(1)) & mask


@njit(cache=True)
def _ready(t, at, ready, group, after, allowed, out, seen, stamp, twin):
    """`optimus._ready`: the ready ops after `group` ran on top of a down-set whose ready ops were `ready`
    (`seen`: a per-op scratch array, `stamp` a value not in it yet, so a successor of many members is
    checked once; `twin` as in `_grow`)."""
    n = at[OUT_H + 1] - at[OUT_H]
    for w in range(len(out)):
        out[w] = ready[w] & ~group[w]
    for i in range(n):
        if not _has(group, i):
            continue
        first, end = t[at[SUCC_PTR] + i], t[at[SUCC_PTR] + i + 1]
        for e in range(first, end + 1):  # the successors, then the twin
            s = t[at[SUCC_IDX] + e] if e < end else i + 1
            if e == end and (s >= n or twin[s] != i):
                continue
            if seen[s] == stamp or _has(after, s) or not _has(allowed, s):
                continue
            seen[s] = stamp
            ok = twin[s] < 0 or _has(after, twin[s])
            for e2 in range(t[at[PRED_PTR] + s], t[at[PRED_PTR] + s + 1]):
                ok = ok and _has(after, t[at[PRED_IDX] + e2])
            if ok:
                out[s >> 6] |= np.uint64(1) << np.uint64(s & 63)


@njit(cache=True)
def _still(t, at, before, done, group, after, stamp, mark):
    """`optimus._still`: a lower bound on the traffic left after `done` then `group` (`mark`: a per-tensor
    scratch array, `stamp` a value not in it yet)."""
    n = at[OUT_H + 1] - at[OUT_H]
    left = before
    for i in range(n):
        if not _has(group, i):
            continue
        for e in range(t[at[IN_PTR] + i], t[at[IN_PTR] + i + 1]):
            j = t[at[IN_T] + e]
            if mark[j] == stamp:
                continue
            mark[j] = stamp
            p = t[at[T_PRODUCER] + j]
            if p >= 0 and not _has(done, p):
                continue
            outside = False
            for e2 in range(t[at[RD_PTR] + j], t[at[RD_PTR] + j + 1]):
                outside = outside or not _has(after, t[at[RD_IDX] + e2])
            if not outside:
                left -= t[at[T_BYTES] + j]  # its last reader ran
    for i in range(n):
        if not _has(group, i):
            continue
        if not t[at[SHARES_W] + i]:
            left -= t[at[OWN_WBYTES] + i]
        for e in range(t[at[OUT_PTR] + i], t[at[OUT_PTR] + i + 1]):
            j = t[at[OUT_IDX] + e]
            for e2 in range(t[at[RD_PTR] + j], t[at[RD_PTR] + j + 1]):
                if not _has(after, t[at[RD_IDX] + e2]):
                    left += t[at[T_BYTES] + j]  # written out, to be read back
                    break
            if t[at[T_RETURNED] + j]:
                left -= t[at[T_BYTES] + j]
    return left


@njit(cache=True, nogil=True)
def search(t, at, st, dep, log, top, work, cand, n_tensors, start, allowed, start_ready, owed, lone_cost, room,
           param_room, shared, per_band, batch, word_bits, max_size, online, states, groups, total, narrow_states,
           narrow_groups, bound_only, twin, bound):
    """`optimus.chain_search` in compiled code: the same down-sets, groups and order.

    `start`, `allowed`, `start_ready`: bitsets of the first down-set, the ops that may be grouped and the
    ops ready at the start; `owed`: bytes any partition moves (`optimus._owed`); `lone_cost[i]`: DRAM bytes
    of op i alone (-1: it cannot run); the limits as in `optimus.Limits`; `twin` as in `_grow`; `bound`: the
    total of a known plan (down-sets whose cost plus `owes` exceed it are dropped; inf: none). Returns (the chain's groups as
    bitset rows, groups evaluated, exact, the chain's total (inf when there is none), whether the ISOA
    program could not run on a group, in which case nothing else is meaningful).
    """
    n = at[OUT_H + 1] - at[OUT_H]
    width = len(start)
    cap = 1024
    keys = np.zeros((cap, width), np.uint64)
    readies = np.zeros((cap, width), np.uint64)
    last_group = np.zeros((cap, width), np.uint64)
    best = np.full(cap, np.inf)
    prev = np.full(cap, -1, np.int64)
    owes = np.zeros(cap, np.int64)
    next_in_level = np.full(cap, -1, np.int64)
    first_waiting = np.full(cap, -1, np.int64)
    last_waiting = np.full(cap, -1, np.int64)
    slots = np.full(4 * cap, -1, np.int64)
    count = 0
    head = np.full(n + 2, -1, np.int64)  # per level (down-set size): first and last down-set in its list
    tail = np.full(n + 2, -1, np.int64)
    # groups waiting to be settled: (bound, previous down-set, once-bytes, surely streamed, next) and the group
    wcap = 1024
    w_bound = np.zeros(wcap)
    w_info = np.zeros((wcap, 3), np.int64)  # previous down-set, next waiting for the same down-set, -
    w_group = np.zeros((wcap, width), np.uint64)
    w_count = 0
    mark = np.zeros(n_tensors, np.int64)  # scratch of `_still` and `_ready`, by tensor and by op
    seen = np.zeros(n, np.int64)
    stamp = 0
    after = np.zeros(width, np.uint64)
    group = np.zeros(width, np.uint64)
    full_set = np.zeros(width, np.uint64)
    for w in range(width):
        full_set[w] = start[w] | allowed[w]
    offered = [0]
    offered.pop()
    offers = [(0, 0, 0, 0, 0)]
    offers.pop()
    # the first down-set
    _, slot = _find(keys, slots, start)
    slots[slot] = 0
    keys[0, :] = start
    readies[0, :] = start_ready
    owes[0] = owed
    best[0] = 0.0
    count = 1
    size0 = 0
    for i in range(n):
        size0 += _has(start, i)
    head[size0] = tail[size0] = 0
    evaluated = 0
    exact = True
    for size in range(size0, n + 1):
        level = [0]
        level.pop()
        k = head[size]
        while k >= 0:
            level.append(k)
            k = next_in_level[k]
        for state in level:  # settle the groups waiting to reach it, cheapest bound first
            m = 0
            k = first_waiting[state]
            while k >= 0:
                m += 1
                k = w_info[k, 1]
            if not m:
                continue
            waiting = np.empty(m, np.int64)
            bounds = np.empty(m)
            k, m = first_waiting[state], 0
            while k >= 0:
                waiting[m], bounds[m] = k, w_bound[k]
                m += 1
                k = w_info[k, 1]
            for r in np.argsort(bounds, kind="mergesort"):
                k = waiting[r]
                if w_bound[k] >= best[state]:
                    break
                done = w_info[k, 0]
                cost = _group_dram(t, at, st, dep, log, top, work, w_group[k], room, param_room, shared, per_band,
                                   batch, word_bits)
                if cost < 0:
                    return np.zeros((0, width), np.uint64), evaluated, exact, np.inf, True
                if best[done] + cost < best[state]:
                    best[state], prev[state] = best[done] + cost, done
                    last_group[state, :] = w_group[k]
        if bound < np.inf:  # down-sets that cannot beat a known plan
            kept = [0]
            kept.pop()
            for state in level:
                if not best[state] + owes[state] > bound:
                    kept.append(state)
            if len(level) and not len(kept):  # keep a way to the end (the beam may have dropped the optimum's)
                pick = level[0]
                for state in level:
                    if best[state] + owes[state] < best[pick] + owes[pick]:
                        pick = state
                kept.append(pick)
            level = kept
        narrow = evaluated > total
        keep = narrow_states if narrow else states
        if len(level) > keep:  # the beam: the most promising down-sets of this size
            order = np.empty(len(level))
            for q in range(len(level)):
                order[q] = best[level[q]] + owes[level[q]] if best[level[q]] < np.inf else np.inf
            ranked = np.argsort(order, kind="mergesort")
            level = [level[ranked[q]] for q in range(keep)]
            exact = False
        for done in level:
            if best[done] == np.inf:
                continue
            base = best[done]
            alone = -1  # an op that only runs alone goes first: every partition has such an order
            for i in range(n):
                if _has(readies[done], i) and not t[at[COVERED] + i]:
                    alone = i
                    break
            if alone >= 0:
                evaluated += 1
                group[:] = 0
                group[alone >> 6] = np.uint64(1) << np.uint64(alone & 63)
                least = lone_cost[alone]
                entries = 1
            else:
                offered.clear()
                offers.clear()
                quota = narrow_groups if narrow else groups
                more, stopped, too_big, log = _grow(t, at, st, dep, log, top, work, cand, keys[done], readies[done],
                                               allowed, room, param_room, shared, batch, word_bits, max_size, online,
                                               quota, offered, offers, bound_only, twin)
                if too_big:
                    return np.zeros((0, width), np.uint64), evaluated, exact, np.inf, True
                evaluated += more
                exact = exact and not stopped
                entries = len(offers)
            at_member = 0
            for q in range(entries):
                if alone < 0:
                    group[:] = 0
                    while offered[at_member] >= 0:
                        i = offered[at_member]
                        group[i >> 6] |= np.uint64(1) << np.uint64(i & 63)
                        at_member += 1
                    at_member += 1
                    size_q, _, least, _, resident = offers[q]
                    lone = size_q == 1
                    if lone and bound_only:  # a lone op's own schedule bounds any group's share of it
                        least = lone_cost[offered[at_member - 2]]
                        if least < 0:
                            continue
                else:
                    resident, lone = 1, True
                for w in range(width):
                    after[w] = keys[done, w] | group[w]
                a, slot = _find(keys, slots, after)
                if alone < 0 and not base + least < (best[a] if a >= 0 else np.inf):
                    continue
                if a < 0:  # a new down-set
                    if count == cap:
                        cap *= 2
                        keys = _grown2(keys, cap)
                        readies = _grown2(readies, cap)
                        last_group = _grown2(last_group, cap)
                        best = _grown1(best, cap, np.inf)
                        prev = _grown1(prev, cap, -1)
                        owes = _grown1(owes, cap, 0)
                        next_in_level = _grown1(next_in_level, cap, -1)
                        first_waiting = _grown1(first_waiting, cap, -1)
                        last_waiting = _grown1(last_waiting, cap, -1)
                    if 2 * count >= len(slots):
                        slots = np.full(2 * len(slots), -1, np.int64)
                        for b in range(count):
                            _, s2 = _find(keys, slots, keys[b])
                            slots[s2] = b
                        _, slot = _find(keys, slots, after)
                    a = count
                    count += 1
                    slots[slot] = a
                    keys[a, :] = after
                    stamp += 1
                    _ready(t, at, readies[done], group, after, allowed, readies[a], seen, stamp, twin)
                    owes[a] = _still(t, at, owes[done], keys[done], group, after, stamp, mark)
                    level_size = size + (size_q if alone < 0 else 1)
                    if head[level_size] < 0:
                        head[level_size] = a
                    else:
                        next_in_level[tail[level_size]] = a
                    tail[level_size] = a
                if not lone and not resident and not bound_only:  # waits until its down-set's level is settled
                    if w_count == wcap:
                        wcap *= 2
                        w_bound = _grown1(w_bound, wcap, 0.0)
                        w_info = _grown2(w_info, wcap)
                        w_group = _grown2(w_group, wcap)
                    w_bound[w_count] = base + least
                    w_info[w_count, 0], w_info[w_count, 1] = done, -1
                    w_group[w_count, :] = group
                    if first_waiting[a] < 0:
                        first_waiting[a] = w_count
                    else:
                        w_info[last_waiting[a], 1] = w_count
                    last_waiting[a] = w_count
                    w_count += 1
                    continue
                cost = least if not lone or alone >= 0 or bound_only else -1
                if lone and alone < 0 and not bound_only:
                    i = 0
                    while not _has(group, i):
                        i += 1
                    cost = lone_cost[i]
                if cost >= 0 and base + cost < best[a]:
                    best[a], prev[a] = base + cost, done
                    last_group[a, :] = group
    end, _ = _find(keys, slots, full_set)
    if end < 0 or best[end] == np.inf:
        return np.zeros((0, width), np.uint64), evaluated, exact, np.inf, False
    chain = [0]
    chain.pop()
    state = end
    while state != 0:
        chain.append(state)
        state = prev[state]
    out = np.zeros((len(chain), width), np.uint64)
    for q in range(len(chain)):
        out[q, :] = last_group[chain[len(chain) - 1 - q]]
    return out, evaluated, exact, best[end], False


@njit(cache=True)
def _grown1(a, cap, fill):
    out = np.full(cap, fill, a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _grown2(a, cap):
    out = np.zeros((cap, a.shape[1]), a.dtype)
    out[:len(a)] = a
    return out


# ---- lone ops: `cost.schedule` of a one-op group -------------------------------------------------------------


@njit(cache=True, nogil=True)
def lone_costs(t, at, st, dep, log, top, work, ops, room, param_room, shared, per_band, batch, word_bits):
    """DRAM bytes of each op of the bitset `ops` run alone (`cost.dram_bytes(model, 1 << i, cap)`; -1 where
    it cannot run, and for ops not in `ops`): the cheaper of the tiled schedule and the layer-wise one."""
    n = at[OUT_H + 1] - at[OUT_H]
    out = np.full(n, -1, np.int64)
    reloads = 1 if per_band else batch
    for i in range(n):
        if not _has(ops, i):
            continue
        dep[:, 0] = 0
        _add(t, at, st, dep, log, top, work, 1, i, False)
        p_elems = dep[PARAMS, 1]
        least = dep[FIN, 1] + dep[FOUT, 1] + -(-p_elems * word_bits // 8)
        if not t[at[COVERED] + i]:
            out[i] = least  # outside the tile model: its compulsory traffic
        else:
            fin, fout, par, _, _, _, _ = _tiled(t, at, st, dep, 1, room, param_room, shared, per_band, reloads,
                                                word_bits, False)
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
    h_out, w_out = t[at[OUT_H] + i], t[at[W_OUT] + i]
    heights = [h_out]  # distinct ceil(h_out / j), tallest first
    for j in range(2, h_out + 1):
        v = -(-h_out // j)
        if v != heights[-1]:
            heights.append(v)
    cuts = [0]  # distinct ceil(w_out / j) for j >= 2, widest first
    cuts.pop()
    for j in range(2, w_out + 1):
        v = -(-w_out // j)
        if not len(cuts) or v != cuts[-1]:
            cuts.append(v)
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
            _add(t, at, st, dep, log, top, work, d, j, False, steps)
            if dep[FULL, d] - dep[GREEDY, d] > room:
                break
            if dep[NCOMP, d] == 1:
                fitting[d] = True
        _undo(st, log, top, 0)
    limit = 1
    while fitting[limit + 1]:
        limit += 1
    return limit


# ---- the schedules of a plan's groups (`cost.schedule`, for `cost.record`) -------------------------------------
FUSED, LAYERWISE, UNMODELLED = 0, 1, 2
(KIND, S_FIN, S_FOUT, S_PAR, S_FOOTPRINT, S_RESIDENT, S_STEPS, S_IMAGES, S_PASSES, S_ROWS, S_FAILED,
 S_SIZE) = range(12)


@njit(cache=True, nogil=True)
def schedules(t, at, st, dep, log, top, work, groups, room, param_room, shared, per_band, batch, word_bits):
    """`cost.schedule` of each group (rows of `groups`, bitsets of ops that can run): per group (kind, fmap-in,
    fmap-out and parameter bytes, on-chip elements, resident, row steps, images per tile, input passes, rows
    of a layer-wise tile, whether the ISOA program could not run, size), and per member (in order) its tile
    rows at the chosen row steps and whether it holds its ofmap T_c channels deep (fused groups)."""
    n = at[OUT_H + 1] - at[OUT_H]
    out = np.zeros((len(groups), 12), np.int64)
    tiles = np.zeros((len(groups), n), np.int64)
    isoa = np.zeros((len(groups), n), np.int64)
    for g in range(len(groups)):
        dep[:, 0] = 0
        log = _roomy(log, top, n)
        d = 0
        for i in range(n):
            if _has(groups[g], i):
                d += 1
                _add(t, at, st, dep, log, top, work, d, i, False)
        row = out[g]
        row[S_SIZE] = d
        i = dep[PATH, 1]
        p_elems = dep[PARAMS, d]
        pbytes = -(-p_elems * word_bits // 8)
        if d == 1 and not t[at[COVERED] + i]:
            row[KIND], row[S_FIN], row[S_FOUT], row[S_PAR] = UNMODELLED, dep[FIN, 1], dep[FOUT, 1], pbytes
            row[S_STEPS], row[S_IMAGES], row[S_PASSES] = 1, 1, 1
            _undo(st, log, top, 0)
            continue
        fin, fout, par, on_chip, resident, k, images = _tiled(t, at, st, dep, d, room, param_room, shared, per_band,
                                                              batch, word_bits, True)
        row[KIND], row[S_FIN], row[S_FOUT], row[S_PAR], row[S_FOOTPRINT] = FUSED, fin, fout, par, on_chip
        row[S_RESIDENT], row[S_STEPS], row[S_IMAGES], row[S_PASSES] = resident, k, images, 1
        if fin == -2:
            row[S_FAILED] = 1
        elif fin >= 0:
            for q in range(d):
                tiles[g, q], isoa[g, q] = dep[K_ROWS, q + 1], dep[CHOSEN, q + 1]
        tiled = fin + fout + par if fin >= 0 else -1
        least = dep[FIN, 1] + dep[FOUT, 1] + pbytes
        if d == 1 and (tiled < 0 or tiled > least):
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

