"""Sets of small integers as Python ints (bit i set: i is in the set), the form the searches keep them in."""

from __future__ import annotations


def bits(mask: int) -> list[int]:
    """Positions of the set bits of `mask`, ascending (read off its binary string from the lowest set bit: the
    fastest way in Python)."""
    if not mask:
        return []
    low = (mask & -mask).bit_length() - 1
    return [low + i for i, c in enumerate(bin(mask >> low)[:1:-1]) if c == "1"]
