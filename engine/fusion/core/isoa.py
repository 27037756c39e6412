"""The exact ISOA program (Optimus Alg. 2) of a group grown in the kernel's workspace, compiled.

`FusionModel.isoa`'s program with the same states in the same order and the same ties:
states are keyed by *slots* (each open member that may be chunked holds one of 63 while
open, so a key is one machine word whatever the group's size), and each state's chosen
members are a node of a trace read back at the end. More than 63 such members open at
once is the one case the kernel cannot take (`_isoa` says so; the search raises
`optimus.KernelLimitError`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.core.tables import (
    CHOSEN,
    IN_GROUP,
    INPLACE,
    LAST_USE,
    PASSES,
    PATH,
    POS,
    PRED_IDX,
    PRED_PTR,
    ROWS,
    SAVE_ROW,
    SLOT,
    SUCC_IDX,
    SUCC_PTR,
    _grown1,
)

_MERGE_AT = 16  # as `model._MERGE_AT`
# rows of `_isoa`'s array: the states (key: chunked open members, saving, trace node of the chosen members),
# the next states, the merged ones, the pending consumers' producers
(_KEY, _SAV, _CHO, _NKEY, _NSAV, _NCHO, _MKEY, _MST, _MSAV, _MCHO, _PEND) = range(11)
_ISOA_ROWS = 11
_SLOTS = 63  # open members that may be chunked at once: a state's key is a mask of their slots


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
