"""The down-set search of `optimus.chain_search` (Alg. 1 restated), compiled: levels, a hash table, the beam.

Down-sets are bitsets in an open-addressing hash table (splitmix64's mixer, so probing
stays short); each has its best cost so far, the way it was reached, its ready ops and
the traffic still owed; groups grown from it (`grow._grow`) wait in bound order until
their down-set's level is settled.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.fusion.core.grow import _grow
from engine.fusion.core.schedule import group_dram
from engine.fusion.core.tables import (
    COVERED,
    IN_PTR,
    IN_T,
    OUT_H,
    OUT_IDX,
    OUT_PTR,
    OWN_WBYTES,
    PRED_IDX,
    PRED_PTR,
    RD_IDX,
    RD_PTR,
    SHARES_W,
    SUCC_IDX,
    SUCC_PTR,
    T_BYTES,
    T_PRODUCER,
    T_RETURNED,
    _grown1,
    _grown2,
    _has,
)

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
    """The reference's `_ready`: the ready ops after `group` ran on top of a down-set whose ready ops were `ready`
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
    """The reference's `_still`: a lower bound on the traffic left after `done` then `group` (`mark`: a per-tensor
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


# the search's scalar options, one int64 array (`options`): the capacity and how parameters reload, the on-line
# rules, the beam's limits (`optimus.Limits`) and whether groups cost bounds (the lower bound's windows)
(ROOM, PARAM_ROOM, SHARED, PER_BAND, BATCH, WORD_BITS, MAX_SIZE, ONLINE, STATES, GROUPS, TOTAL, NARROW_STATES,
 NARROW_GROUPS, BOUND_ONLY, N_OPTIONS) = range(15)


def options(*, room: int, param_room: int, shared: bool, per_band: bool, batch: int, word_bits: int, max_size: int,
            online: bool, states: int, groups: int, total: int, narrow_states: int, narrow_groups: int,
            bound_only: bool) -> np.ndarray:
    """The `options` array `search` reads, from its named scalars."""
    out = np.zeros(N_OPTIONS, np.int64)
    for at, value in ((ROOM, room), (PARAM_ROOM, param_room), (SHARED, shared), (PER_BAND, per_band), (BATCH, batch),
                      (WORD_BITS, word_bits), (MAX_SIZE, max_size), (ONLINE, online), (STATES, states),
                      (GROUPS, groups), (TOTAL, total), (NARROW_STATES, narrow_states),
                      (NARROW_GROUPS, narrow_groups), (BOUND_ONLY, bound_only)):
        out[at] = value
    return out


@njit(cache=True, nogil=True)
def search(t, at, st, dep, log, top, work, cand, n_tensors, start, allowed, start_ready, owed, lone_cost, options,
           twin, bound):
    """`optimus.chain_search` in compiled code: the same down-sets, groups and order.

    `start`, `allowed`, `start_ready`: bitsets of the first down-set, the ops that may be grouped and the
    ops ready at the start; `owed`: bytes any partition moves (`optimus._owed`); `lone_cost[i]`: DRAM bytes
    of op i alone (-1: it cannot run); `options`: the scalars named above; `twin` as in `_grow`; `bound`: the
    total of a known plan (down-sets whose cost plus `owes` exceed it are dropped; inf: none). Returns (the
    chain's groups as bitset rows, groups evaluated, exact, the chain's total (inf when there is none), whether
    the ISOA program could not run on a group, in which case nothing else is meaningful).
    """
    room, param_room, batch, word_bits = options[ROOM], options[PARAM_ROOM], options[BATCH], options[WORD_BITS]
    shared, per_band = options[SHARED] != 0, options[PER_BAND] != 0
    max_size, online, bound_only = options[MAX_SIZE], options[ONLINE] != 0, options[BOUND_ONLY] != 0
    states, groups, total = options[STATES], options[GROUPS], options[TOTAL]
    narrow_states, narrow_groups = options[NARROW_STATES], options[NARROW_GROUPS]
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
                cost = group_dram(t, at, st, dep, log, top, work, w_group[k], room, param_room, shared, per_band,
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
