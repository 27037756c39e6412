"""One op's ski-slope: the least backing-store traffic of any tiling and loop order at each buffer size.

Orojenesis (Huang, Tsai, Emer, Parashar, "Mind the Gap: Attainable Data Movement and
Operational Intensity Bounds for Tensor Algorithms", ISCA 2024) runs every mapping of an
Einsum on a two-level proxy (one buffer, one backing store) and keeps the Pareto points of
(buffer needed, accesses). Here the Einsum is a convolution or matmul with spatial ranks
(images, rows, columns: shared by input A and output B), reduced channels C (A and
weights W) and output channels K (W and B), run as `groups` independent copies (one at a time: a
group rank indexes every tensor, so looping over it reloads nothing and holding two groups only costs room).

A mapping is a tile of every rank and an order of the outer loops. A tensor is re-loaded
once per iteration of each loop it does not index that sits outside its innermost indexed
loop (loops of one iteration do not count); the output is written that many times and
read back one time fewer (partial sums). The buffer holds the tiles of two operands; the
third streams through, one element at a time (`stream` elements of room: 1 as in the
paper's first-principles GEMM figure, 0 for the engine's cost model, whose Eq. 4 gives
streamed parameters no room). Input tiles carry their halo (the cost model's
`(r-1)*S + K` rows, capped at the tensor), and consecutive tiles share it for free, as
the cost model's line buffer does. Tiles need not divide their ranks.

Exact over that space without visiting it: the innermost effective loop decides every
tensor's reload factor, so three shapes of mapping cover it (`_candidates`), each with the
loops whose trip counts matter enumerated and the rest at one-element tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

WINDOW, SAME = 0, 1  # engine.fusion.model's row rules (WHOLE otherwise)


@dataclass(frozen=True)
class Rank:
    """One spatial rank: output extent, input extent, and how many input positions `r` outputs need."""

    out: int
    inp: int
    rule: tuple[int, int, int]  # (mode, effective kernel, stride) as in engine.fusion.model

    def need(self, r: np.ndarray) -> np.ndarray:
        """Input positions that r consecutive outputs read (the cost model's `_need`)."""
        mode, kern, stride = self.rule
        need = (r - 1) * stride + kern if mode == WINDOW else (r if mode == SAME else np.full_like(r, kern))
        return np.minimum(self.inp, need)


@dataclass(frozen=True)
class Einsum:
    """A conv or matmul as the proxy sees it: spatial ranks, channels per group, window size, bytes once."""

    spatial: tuple[Rank, ...]
    c: int  # reduced channels per group
    k: int  # output channels per group
    window: int  # weight elements per (c, k) pair: R x S
    groups: int
    a_bytes: int  # input read once
    w_bytes: int  # parameters read once
    b_bytes: int  # output written once


def gemm(m: int, k: int, n: int, word_bits: int = 16, *, batch: int = 1) -> Einsum:
    """The Einsum of B[m,n] = A[m,k] W[k,n] (times `batch` independent copies: a batched matmul)."""
    nbytes = lambda elems: -(-elems * word_bits // 8)  # noqa: E731
    rank = Rank(m, m, (SAME, 1, 1))
    return Einsum((rank,), k, n, 1, batch, nbytes(batch * m * k), nbytes(batch * k * n), nbytes(batch * m * n))


@lru_cache(maxsize=4096)
def ski_slope(e: Einsum, word_bits: int, stream: int = 0) -> tuple[tuple[int, int], ...]:
    """Pareto steps (buffer bytes, least traffic bytes): at S bytes the least traffic is the last step at <= S.

    Starts at the least buffer any mapping needs and ends at the compulsory traffic
    (every tensor once). Groups run one at a time, so the buffer is one group's. Memoised per
    Einsum: independent of the buffer asked for.
    """
    bufs, traffic = [], []
    for buf, cost in _candidates(e, stream):
        bufs.append(buf.ravel())
        traffic.append(cost.ravel())
    buf = np.concatenate(bufs)
    cost = np.concatenate(traffic)
    nbytes = -(-buf * word_bits // 8)
    order = np.argsort(nbytes)
    nbytes = nbytes[order]
    best = np.minimum.accumulate(cost[order])
    last = np.ones(len(nbytes), bool)  # the last of each run of equal sizes carries the run's least traffic
    last[:-1] = nbytes[1:] != nbytes[:-1]
    nbytes, best = nbytes[last], best[last]
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] < best[:-1]
    return tuple(zip(nbytes[keep].tolist(), best[keep].tolist()))


def at(steps: tuple[tuple[int, int], ...], buffer_bytes: int) -> int | None:
    """The curve's traffic at `buffer_bytes`, or None below its first step (no mapping fits)."""
    lo, hi = 0, len(steps)
    while lo < hi:
        mid = (lo + hi) // 2
        if steps[mid][0] <= buffer_bytes:
            lo = mid + 1
        else:
            hi = mid
    return steps[lo - 1][1] if lo else None


def _trips(size: int) -> np.ndarray:
    """Every distinct trip count of a rank of `size` (tile = ceil(size / trips) is the least tile for it)."""
    return np.array(sorted({-(-size // t) for t in range(1, size + 1)}), dtype=np.int64)


def _tiles(size: int, trips: np.ndarray) -> np.ndarray:
    return -(-size // trips)


def _spatial(e: Einsum, inner: frozenset[int], keep: str) -> tuple[np.ndarray, np.ndarray]:
    """(trips of the outer ranks, per-channel elements of the input ("a") or output ("b") tile) of every spatial tile.

    Ranks in `inner` get one-element tiles and do not count in the trips (they run inside the
    stationary tile); the others take every tile size. Only the Pareto points of (trips, elements)
    are kept: a tile with more trips and no fewer elements than another is never better.
    """
    trips, elems = np.ones(1, np.int64), np.ones(1, np.int64)
    for d, rank in enumerate(e.spatial):
        if d in inner:
            t_trips, tile = np.ones(1, np.int64), np.ones(1, np.int64)
        else:
            t_trips = _trips(rank.out)
            tile = _tiles(rank.out, t_trips)
        size = rank.need(tile) if keep == "a" else tile
        trips = (trips[:, None] * t_trips[None, :]).ravel()
        elems = (elems[:, None] * size[None, :]).ravel()
        order = np.lexsort((trips, elems))
        trips, elems = trips[order], elems[order]
        least = np.minimum.accumulate(trips)
        front = np.ones(len(trips), bool)
        front[1:] = least[1:] < least[:-1]
        trips, elems = trips[front], elems[front]
    return trips, elems


def _spatial3(e: Einsum) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trips, input elements, output elements) per channel of every spatial tile, all ranks free."""
    trips, a, b = np.ones(1, np.int64), np.ones(1, np.int64), np.ones(1, np.int64)
    for rank in e.spatial:
        t_trips = _trips(rank.out)
        tile = _tiles(rank.out, t_trips)
        trips = (trips[:, None] * t_trips[None, :]).ravel()
        a = (a[:, None] * rank.need(tile)[None, :]).ravel()
        b = (b[:, None] * tile[None, :]).ravel()
    return trips, a, b


def _candidates(e: Einsum, stream: int):
    """(buffer elements, traffic bytes) arrays of the mapping shapes that together dominate every mapping.

    Innermost effective loop K (its tile 1): A once, W once per spatial tile, B once per C tile.
    Innermost C (tile 1): A once per K tile, W once per spatial tile, B once. Innermost
    spatial ranks I (tile 1), the others outside C and K: A once per K tile, W once per outer
    spatial tile, B once per C tile. The operand that streams is re-read for every iteration
    of the loops it does not index; the shapes where that is dominated by another are left out
    (K innermost with A streaming: C innermost is as cheap with less room; the same for C
    innermost with B streaming against K innermost, and spatial innermost with W streaming).
    """
    c_trips, k_trips = _trips(e.c), _trips(e.k)
    c_tile, k_tile = _tiles(e.c, c_trips), _tiles(e.k, k_trips)
    s_trips, a, b = _spatial3(e)
    w = e.window
    # K innermost: grid (spatial, c); W streams (holds A and B) or B streams (holds A and W)
    cost = e.a_bytes + e.w_bytes * s_trips[:, None] + e.b_bytes * (2 * c_trips[None, :] - 1)
    yield a[:, None] * c_tile[None, :] + b[:, None] + stream, cost
    yield a[:, None] * c_tile[None, :] + c_tile[None, :] * w + stream, cost
    # C innermost: grid (spatial, k); A streams (holds W and B) or W streams (holds A and B)
    cost = e.a_bytes * k_trips[None, :] + e.w_bytes * s_trips[:, None] + e.b_bytes
    yield k_tile[None, :] * w + b[:, None] * k_tile[None, :] + stream, cost
    yield a[:, None] + b[:, None] * k_tile[None, :] + stream, cost
    # spatial ranks innermost: grid (outer spatial, c, k); A streams (holds W, B) or B streams (holds A, W)
    ck = c_tile[:, None] * k_tile[None, :] * w
    for mask in range(1, 1 << len(e.spatial)):
        inner = frozenset(d for d in range(len(e.spatial)) if mask >> d & 1)
        if any(e.spatial[d].out == 1 for d in inner):
            continue  # a rank of one position is no loop: the same as the set without it (or C or K innermost)
        for keep in "ab":
            o_trips, elems = _spatial(e, inner, keep)
            cost = (e.a_bytes * k_trips[None, None, :] + e.w_bytes * o_trips[:, None, None]
                    + e.b_bytes * (2 * c_trips[None, :, None] - 1))
            if keep == "b":  # A streams
                held = ck[None, :, :] + elems[:, None, None] * k_tile[None, None, :]
            else:  # B streams
                held = ck[None, :, :] + elems[:, None, None] * c_tile[None, :, None]
            yield held + stream, cost
