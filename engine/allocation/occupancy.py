"""`Occupancy`: the stays placed so far, and which of them share a step with a new one.

Walking every step of a new stay and collecting what is live there costs its lifetime times the stays live at once:
on a fan (one tensor read by N ops, joined by one Sum) N outputs live until the Sum, so placing them was cubic in N
(1,000 readers: 50 s in the greedy packing, 20 s in `solution.compact`, which now reads `skyline.py`). Stays longer
than `LONG` steps are kept apart and tested by their ends instead, so a stay costs its own steps plus the short stays
beside it plus the long ones: quadratic on a fan, linear on a chain.
"""

from __future__ import annotations

LONG = 32  # steps past which a stay is kept in the list tested by its ends, not in every step's list


class Occupancy:
    """Stays (by index) placed so far, each over its steps [first, last]."""

    def __init__(self, steps: int):
        self._short: list[list[int]] = [[] for _ in range(steps)]  # step -> short stays live at it
        self._long: list[tuple[int, int, int]] = []  # (first, last, stay) of the long stays

    def add(self, i: int, first: int, last: int) -> None:
        """Record stay `i` as placed over steps first..last."""
        if last - first >= LONG:
            self._long.append((first, last, i))
        else:
            for t in range(first, last + 1):
                self._short[t].append(i)

    def beside(self, first: int, last: int) -> set[int]:
        """The stays placed so far that are live at some step of first..last."""
        found = {j for lo, hi, j in self._long if lo <= last and hi >= first}
        found.update(j for t in range(first, last + 1) for j in self._short[t])
        return found
