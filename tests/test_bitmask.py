"""`engine.bitmask.bits` against reading every bit, for dense masks and the sparse ones the partition asks about."""

import random

import pytest

from engine.bitmask import bits


@pytest.mark.parametrize("width", [1, 63, 64, 65, 1000, 25_000])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.01, 0.1, 0.5, 1.0])
def test_bits_lists_every_set_bit_in_order(width, density):
    rng = random.Random(width * 7 + int(density * 1000))
    mask = sum(1 << i for i in range(width) if rng.random() < density) | 1 << (width - 1)
    assert bits(mask) == [i for i in range(mask.bit_length()) if mask >> i & 1]


def test_bits_of_nothing_and_of_two_far_apart_bits():
    assert bits(0) == []
    assert bits(1 << 25_000 | 1 << 3) == [3, 25_000]
