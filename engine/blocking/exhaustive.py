"""Brute force: every tile chain and every loop order of a layer, scored one by one with `evaluate`, as the
paper's first optimizer did (Sec. 3.5). `block(method="exhaustive")` and co-design's exhaustive checks use it;
the tests check the exact search agrees with it.
"""

from __future__ import annotations

import itertools
import math

from engine.blocking.grid import divisors
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import DIMS, Layer
from engine.blocking.model import INNER_ORDER, Blocking, SpatialView, evaluate
from engine.errors import EngineError

EXHAUSTIVE_LIMIT = 2_000_000  # blockings `method="exhaustive"` agrees to score one by one


def every_blocking(layer: Layer, levels: int, unroll: tuple[int, ...] | None = None, *, inner: bool = False):
    """Every chain of divisor tiles, as (tiles in canonical order, the blockings of every order of each block's
    non-unit loops): the space the brute-force oracles score. A caller may skip a chain before its orders.
    With `unroll`, tiles are over the temporal bounds that unrolling leaves; with `inner`, every order of the
    loops inside level 0's tile is listed too."""
    unroll = unroll or (1,) * len(DIMS)
    dims = SpatialView.of(layer, unroll).dims
    per_dim = [list(divisor_chains(n, levels)) for n in dims]
    n_chains = math.prod(len(c) for c in per_dim)
    if n_chains > EXHAUSTIVE_LIMIT:
        raise EngineError(f"layer '{layer.name}': {n_chains} tile chains is too many to enumerate; use method='exact'")
    for combo in itertools.product(*per_dim):
        tiles = tuple(tuple(combo[j][l] for j in range(len(DIMS))) for l in range(levels))
        base = Blocking(dims, tiles, (DIMS,) * levels, unroll)
        block_orders = []
        for b in range(levels):
            moving = [d for d, t in base.trips(b).items() if t > 1]
            rest = tuple(d for d in DIMS if d not in moving)
            block_orders.append([p + rest for p in itertools.permutations(moving)])
        inside = [d for d, t in zip(DIMS, tiles[0]) if t > 1]
        inners = [p + tuple(d for d in DIMS if d not in inside) for p in itertools.permutations(inside)] \
            if inner else [INNER_ORDER]
        yield base, (Blocking(dims, tiles, orders, unroll, i)
                     for orders in itertools.product(*block_orders) for i in inners)


def every_unroll(layer: Layer, hierarchy: Hierarchy) -> list[tuple[int, ...]]:
    """Every spatial unrolling the array allows: each mapped dim by any factor up to its bound, within each axis."""
    array = hierarchy.array
    if array is None:
        return [(1,) * len(DIMS)]
    sizes = dict(array.axes)
    axis = {d: array.axis_of(d) for d in DIMS}
    options = [range(1, min(getattr(layer, d), sizes[a]) + 1) if (a := axis[d]) else (1,) for d in DIMS]
    out = []
    for u in itertools.product(*options):
        used = dict.fromkeys(sizes, 1)
        for d, f in zip(DIMS, u):
            a = axis[d]
            if f > 1 and a:  # (only a mapped dim has f > 1)
                used[a] *= f
        if all(used[a] <= sizes[a] for a in sizes):
            out.append(u)
    return out


def exhaustive_blocking(layer: Layer, hierarchy: Hierarchy) -> tuple[Blocking, int]:
    """Score every blocking of `every_blocking`, under every unrolling of `every_unroll`, with `evaluate`."""
    best, best_key, evaluated = None, None, 0
    for unroll in every_unroll(layer, hierarchy):
        for _, blockings in every_blocking(layer, len(hierarchy.on_chip), unroll, inner=hierarchy.stationary):
            for blocking in blockings:
                cost = evaluate(layer, hierarchy, blocking)
                evaluated += 1
                if cost.fits and (best_key is None or cost.memory_pj < best_key - 1e-9 * abs(best_key)):
                    best, best_key = blocking, cost.memory_pj
    if best is None:
        raise EngineError(f"layer '{layer.name}' has no blocking that fits hierarchy '{hierarchy.name}'")
    return best, evaluated


def divisor_chains(n: int, m: int):
    """Non-decreasing divisor chains t_0 | t_1 | ... | t_(m-1) | n."""
    if m == 0:
        yield ()
        return
    for top in divisors(n):
        for rest in divisor_chains(top, m - 1):
            yield (*rest, top)
