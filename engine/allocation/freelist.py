"""`FreeList`: the free gaps of an address range, kept in order of address and of size, for best-fit placement
(and first fit, for the baselines' arena).

The best-fit allocator with an address-ordered free list that Wilson, Johnstone, Neely and Boles found among the
least fragmenting ("Dynamic Storage Allocation: A Survey and Critical Review", IWMM 1995): taking a block picks the
smallest gap that holds it (the lowest among equal gaps) and keeps the rest free; releasing a block merges it with
the gaps on either side. Both lists are sorted Python lists searched by bisection, so an operation
costs a logarithmic search and one list shift, not a walk over the blocks in use.
"""

from __future__ import annotations

import bisect


class FreeList:
    """The free gaps of [0, room): `starts` in address order, `sizes` as (size, start) in size order."""

    def __init__(self, room: int):
        self._starts: list[int] = [0] if room > 0 else []
        self._end: dict[int, int] = {0: room} if room > 0 else {}  # gap start -> its end (exclusive)
        self._sizes: list[tuple[int, int]] = [(room, 0)] if room > 0 else []

    def take(self, size: int) -> int | None:
        """The address of a block of `size` placed at the start of the smallest gap that holds it, or None."""
        k = bisect.bisect_left(self._sizes, (size, -1))
        if k == len(self._sizes):
            return None
        gap, start = self._sizes[k]
        self._drop(start)
        if gap > size:
            self._put(start + size, start + gap)
        return start

    def lowest(self, size: int) -> int | None:
        """The start of the lowest gap that holds `size` bytes (first fit), or None; nothing is taken. A walk over
        the gaps, not the blocks in use: a few where the blocks pack tightly."""
        for start in self._starts:
            if self._end[start] - start >= size:
                return start
        return None

    def reserve(self, address: int, size: int) -> bool:
        """Mark [address, address + size) in use; False (nothing changed) unless one gap holds it whole."""
        k = bisect.bisect_right(self._starts, address) - 1
        if k < 0 or self._end[self._starts[k]] < address + size:
            return False
        start = self._starts[k]
        end = self._end[start]
        self._drop(start)
        if start < address:
            self._put(start, address)
        if address + size < end:
            self._put(address + size, end)
        return True

    def release(self, address: int, size: int) -> None:
        """Give [address, address + size) back, merged with a free gap that touches it on either side."""
        start, end = address, address + size
        k = bisect.bisect_left(self._starts, start)
        if k < len(self._starts) and self._starts[k] == end:  # the gap just above
            end = self._end[end]
            self._drop(address + size)
        if k > 0 and self._end[self._starts[k - 1]] == start:  # the gap just below
            start = self._starts[k - 1]
            self._drop(start)
        self._put(start, end)

    def _put(self, start: int, end: int) -> None:
        bisect.insort(self._starts, start)
        self._end[start] = end
        bisect.insort(self._sizes, (end - start, start))

    def _drop(self, start: int) -> None:
        end = self._end.pop(start)
        del self._starts[bisect.bisect_left(self._starts, start)]
        del self._sizes[bisect.bisect_left(self._sizes, (end - start, start))]
