"""The compiled fusion kernel's data: the model's tables in one array, and the workspace groups grow in.

`tables` lays a `FusionModel`'s per-op and per-tensor tables end to end in one int64
array (every array a compiled helper takes costs two atomic reference-count updates per
call, so passing 32 of them made a group cost 2.6 us); `workspace` makes the arrays a
group grows in (`st` per op, tensor or weight; `dep` per depth of the growth; the undo
log). The row names of both, and the helpers that log, undo and grow those arrays, live
here so that every other module of the kernel reads one layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

if TYPE_CHECKING:  # the model builds its tables through `layout`, so this module may not import it
    from engine.fusion.model import FusionModel


# the tables the search reads, laid end to end in this order (see `tables`); t[at[FIELD] + i] is item i of FIELD
(OUT_H, FLOOR, FULL_ROW, SAVE_ROW, INPLACE, COVERED, GROW_OUT, WHOLE_ROW, SUCC_PTR, SUCC_IDX, PRED_PTR, PRED_IDX,
 LINK_PTR, LINK_IDX, IN_PTR, IN_T, IN_P, IN_BYTES, IN_RET, IN_HELD, N_READERS, W_PTR, W_IDX, W_ELEMS, F_PTR, F_J,
 F_A, F_C, F_P, F_PROWS, F_H, F_ROW, OUT_PTR, OUT_IDX, RD_PTR, RD_IDX, T_BYTES, T_PRODUCER, T_RETURNED, OWN_WBYTES,
 SHARES_W, W_OUT, C_OUT, PER_GROUP, CHANNELWISE, IN_H, IN_W, IN_RULE, IN_WRULE, IN_SELEMS, IN_STREAM, SM_QK, SM_BYTES,
 AV_SM, PASSES, GEMM_K, LONE_H, FOLDS) = range(58)
_FIELDS = ("out_h", "floor", "full_row", "save_row", "inplace", "covered", "grow_out", "whole_row",
           "succ_ptr", "succ_idx", "pred_ptr", "pred_idx", "link_ptr", "link_idx",
           "in_ptr", "in_t", "in_p", "in_bytes", "in_ret", "in_held", "n_readers",
           "w_ptr", "w_idx", "w_elems",
           "f_ptr", "f_j", "f_a", "f_c", "f_p", "f_prows", "f_h", "f_row",
           "out_ptr", "out_idx", "rd_ptr", "rd_idx", "t_bytes", "t_producer", "t_returned", "own_wbytes", "shares_w",
           "w_out", "c_out", "per_group", "channelwise", "in_h", "in_w", "in_rule", "in_wrule", "in_selems",
           "in_stream", "sm_qk", "sm_bytes", "av_sm", "passes", "gemm_k", "lone_h", "folds")


def tables(model: FusionModel) -> tuple[np.ndarray, np.ndarray]:
    """`layout` of the model, built once and kept by the model (`FusionModel.kernel_tables`)."""
    return model.kernel_tables(layout)


def layout(model: FusionModel) -> tuple[np.ndarray, np.ndarray]:
    """The model's per-op and per-tensor tables (`_FIELDS`; lists as CSR offsets and items) laid end to end in
    one int64 array, and where each starts."""
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
        "passes": [int(v) for v in model.passes], "gemm_k": model.gemm_k,
        "lone_h": [r or h for r, h in zip(model.gemm_rows, model.out_h)],  # rows a lone op tiles (`cost._Lone`)
        "folds": [int(v) for v in model.folds],
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
    covered = model.covered
    outs = [[model.geo(j) for j in model.outs[i]] if covered[i] else [] for i in range(n)]
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
    return np.concatenate(arrays), offsets  # one array and its cuts: a call checks two arguments, not 32


def bitset(mask: int, n: int) -> np.ndarray:
    """A bitmask over n ops as the little-endian uint64 words the compiled functions read."""
    return np.frombuffer(mask.to_bytes(8 * ((n + 63) // 64), "little"), np.uint64).copy()


def workspace(model: FusionModel, *, search: bool = True) -> tuple[np.ndarray, ...]:
    """The arrays the compiled functions grow groups in (st, dep, log, top, work, and for the search cand); they
    leave them as found.

    top[1] bounds the log entries one op's joining writes (`_roomy` keeps that much room). `cand` (the search's
    candidates per depth) is ops x ops words, so the functions that cost given groups go without it.
    """
    n = model.n
    st = np.zeros((15, max(n, len(model.tnames), len(model.weight_elems))), np.int64)
    st[MATE, :] = -1
    feeds = sum(len(f) for f in model.feeds)
    per_add = max(len(i) for i in model.ins) + max(len(w) for w in model.weights) + 3 * n + 2 * feeds + 8
    grow = (st, np.zeros((18, n + 2), np.int64), np.empty((64 * per_add, 3), np.int64),
            np.array([0, per_add], np.int64), np.empty((feeds + 2, 2), np.int64))
    return (*grow, np.empty((n + 2, n), np.int64)) if search else grow


# Growth state. Every array a helper takes costs two atomic reference-count updates per call, so the state
# lives in two 2-D arrays: `st` per op, tensor or weight (rows below) and `dep` per depth of the growth
# (the member added there and the group's running totals with it). Changes to `st` are logged as
# (row, index, old value) in `log[:top[0]]` and undone when the depth-first growth backs up.
(IN_GROUP, ROWS, MATE, CHUNKED, KEPT, COMP, FAN, POS, DEMAND, READERS, WCOUNT, FAN_LIST, TODO, OP_NEED,
 TENSOR_NEED) = range(15)
(PATH, FULL, RELAXED, GREEDY, FIN, FOUT, PARAMS, WHOLE, KEPT_SAVING, NCOMP, START_LOG, N_CAND, FAN_LEN,
 FAN_OUT, K_ROWS, CHOSEN, LAST_USE, SLOT) = range(18)


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
def _grown1(a, cap, fill):
    out = np.full(cap, fill, a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _grown2(a, cap):
    out = np.zeros((cap, a.shape[1]), a.dtype)
    out[:len(a)] = a
    return out
