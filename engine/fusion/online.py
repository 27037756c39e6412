"""Optimus's on-line variant (Sec. 6): the exact search of `optimus` on a pruned space.

Rules of Sec. 6, each making some groups invalid:
 1. an op is fused with all of its consumers or with none of them (fusing only
    some still sends its ofmap off chip for the rest);
 2. a group's ops must share data (weak connectivity, as in the whole space);
 3. a group may hold at most n ops, with n read from a look-up table built once
    per network and PE array (Alg. 3): memo[n] is the least buffer a group of n ops
    needs at tiles of a quarter of the output height, and a buffer B allows the
    largest n with memo[n] <= B. The table takes the minimum over groups that are
    windows of the topological order (|V| n of them) rather than over every group.
"""

from __future__ import annotations

from engine.fusion import core, sized
from engine.fusion.cost import Capacity
from engine.fusion.model import FusionModel
from engine.fusion.optimus import ideal_chain
from engine.fusion.sized import SizedModel

QUARTER = 4  # Alg. 3 evaluates tiles of O_h / 4: parameter reloads beyond 16x are not worth it


def size_limit(model: FusionModel, cap: Capacity) -> int:
    """Largest group size n with memo[n] <= buffer (memo made non-decreasing, as Alg. 3's table is).

    memo[n] is the least footprint of a connected window of n ops at quarter tiles,
    with the greedy ISOA assignment of the compiled growth (`core.window_limit`; monotone,
    so a window stops growing at its first misfit).
    """
    return sized.of(model, cap).results.get_or_make(
        "size limit",
        lambda: core.window_limit(*core.tables(model), *core.workspace(model, search=False), cap.fmap, QUARTER))


def search(at: SizedModel) -> tuple[list[int], int, bool]:
    """The cheapest chain of groups that obey the three rules."""
    return ideal_chain(at.model, at.cap, whole_fanout=True, max_size=size_limit(at.model, at.cap))
