"""`Skyline`: the top of what is placed at each step, raised and read over ranges of steps in logarithmic time.

`solution.compact` lays stays down in order of address, each on the highest stay below it at any of its steps.
Collecting the stays beside each one cost their count squared (a Concat of 25,000 inputs: 3 x 10^8 pairs); a
segment tree over the steps, each node holding the highest top within it and a height raised over all of it,
answers the same question in two walks up the tree.
"""

from __future__ import annotations


class Skyline:
    """Heights over steps 0..steps-1, all 0 at first."""

    def __init__(self, steps: int):
        self._leaves = 1
        while self._leaves < max(steps, 1):
            self._leaves *= 2
        self._best = [0] * (2 * self._leaves)  # node -> the highest top at any step it spans
        self._raised = [0] * (2 * self._leaves)  # node -> a height every step it spans has reached

    def highest(self, first: int, last: int) -> int:
        """The greatest height at steps first..last."""
        lo, hi = first + self._leaves, last + self._leaves + 1
        out = max(self._above(lo), self._above(hi - 1))
        while lo < hi:
            if lo & 1:
                out = max(out, self._best[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                out = max(out, self._best[hi])
            lo, hi = lo >> 1, hi >> 1
        return out

    def raise_to(self, first: int, last: int, height: int) -> None:
        """Every step of first..last at least `height` high."""
        lo, hi = first + self._leaves, last + self._leaves + 1
        ends = (lo, hi - 1)
        while lo < hi:
            if lo & 1:
                self._lift(lo, height)
                lo += 1
            if hi & 1:
                hi -= 1
                self._lift(hi, height)
            lo, hi = lo >> 1, hi >> 1
        for leaf in ends:
            node = leaf >> 1
            while node:
                self._best[node] = max(self._best[node], height)
                node >>= 1

    def _lift(self, node: int, height: int) -> None:
        self._raised[node] = max(self._raised[node], height)
        self._best[node] = max(self._best[node], height)

    def _above(self, leaf: int) -> int:
        """The greatest height raised over a node above `leaf` (it holds at the leaf's step)."""
        out, node = 0, leaf >> 1
        while node:
            out = max(out, self._raised[node])
            node >>= 1
        return out
