"""Sets of small integers as Python ints (bit i set: i is in the set), the form the searches keep them in."""

from __future__ import annotations


def bits(mask: int) -> list[int]:
    """Positions of the set bits of `mask`, ascending.

    A dense mask is read off its binary string from the lowest set bit (the fastest way in Python); a sparse one
    (under one set bit in 64) by clearing its lowest bit in turn, so a mask with 2 of 25,000 bits set costs two
    steps, not a 25,000-character walk.
    """
    if not mask:
        return []
    if mask.bit_count() * 64 < mask.bit_length():
        found = []
        while mask:
            low = mask & -mask
            found.append(low.bit_length() - 1)
            mask ^= low
        return found
    low = (mask & -mask).bit_length() - 1
    return [low + i for i, c in enumerate(bin(mask >> low)[:1:-1]) if c == "1"]
