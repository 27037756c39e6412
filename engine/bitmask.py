"""Sets of small integers as Python ints (bit i set: i is in the set), the form the searches keep them in."""

from __future__ import annotations


def bits(mask: int) -> list[int]:
    """Positions of the set bits of `mask`, ascending (read off its binary string: the fastest way in Python)."""
    return [i for i, c in enumerate(bin(mask)[:1:-1]) if c == "1"]
