"""Allocation at size: the no-spill packing, the free list and the skyline behind it, and the work they do."""

from __future__ import annotations

import random

import pytest

import engine
from engine.allocation import mpmf
from engine.allocation.freelist import FreeList
from engine.allocation.occupancy import Occupancy
from engine.allocation.packing import sweep
from engine.allocation.place import Stay
from engine.allocation.skyline import Skyline
from engine.graph import OpKind
from engine.zoo._builder import Net
from tests.test_allocation import check
from tests.test_allocation_placement import brute, fits, peak, random_stays


def wide_concat(readers: int):
    """The fuzz's `wide_concat`: a Conv whose output `readers` Relus read, joined by one Concat (as case 39)."""
    net = Net(f"wide_concat_{readers}", 1)
    x = net.conv(net.input((4, 8, 8), "x"), "conv", 4, 3, padding=1)
    outs = [net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 4, 8, 8),))[0] for k in range(readers)]
    net.concat(outs, "concat")
    return net.graph()


@pytest.mark.parametrize("seed", range(40))
def test_the_sweep_places_validly_and_never_where_brute_force_cannot(seed):
    stays = random_stays(seed)
    for room in (peak(stays), peak(stays) + 1):
        at = sweep(stays, room)
        assert at is None or fits(stays, room, at)
        assert at is None or brute(stays, room)
    pinned = {0: 1}  # a stay held at address 1 from the first step to its last
    at = sweep(stays, peak(stays) + 5, pinned=pinned)
    assert at is None or (at[0] == 1 and fits(stays, peak(stays) + 5, at))


def test_the_sweep_reaches_the_peak_on_a_stack_of_nested_lives():
    # readers' outputs live until one op joins them, a long-lived input below: best fit packs them at the peak
    stays = [Stay("x", 0, 9, 3)] + [Stay(f"r{k}", k, 10, 2) for k in range(10)] + [Stay("cat", 10, 10, 20)]
    assert sweep(stays, peak(stays)) is None  # forward, x's gap is too small for the Concat's output
    end = 10
    back = [s._replace(first=end - s.last, last=end - s.first) for s in stays]
    at = sweep(back, peak(stays))
    assert at is not None and fits(back, peak(stays), at)


def test_the_free_list_takes_the_best_fit_and_merges_what_it_gets_back():
    rng = random.Random(5)
    room = 64
    free, used = FreeList(room), {}  # used: address -> size
    for _ in range(2000):
        if used and rng.random() < 0.45:
            address = rng.choice(sorted(used))
            free.release(address, used.pop(address))
            continue
        size = rng.randint(1, 9)
        busy = {b for a, s in used.items() for b in range(a, a + s)}
        gaps, start = [], None  # the free runs of bytes, as (size, start)
        for b in range(room + 1):
            if b < room and b not in busy:
                start = b if start is None else start
            elif start is not None:
                gaps.append((b - start, start))
                start = None
        fitting = sorted(g for g in gaps if g[0] >= size)
        got = free.take(size)
        assert got == (fitting[0][1] if fitting else None)
        if got is not None:
            used[got] = size


def test_the_skyline_answers_as_the_heights_step_by_step():
    rng = random.Random(3)
    for _ in range(200):
        steps = rng.randint(1, 40)
        sky, height = Skyline(steps), [0] * steps
        for _ in range(60):
            lo = rng.randrange(steps)
            hi = rng.randrange(lo, steps)
            if rng.random() < 0.5:
                top = rng.randint(0, 100)
                sky.raise_to(lo, hi, top)
                height[lo : hi + 1] = [max(h, top) for h in height[lo : hi + 1]]
            else:
                assert sky.highest(lo, hi) == max(height[lo : hi + 1])


def test_a_wide_concat_at_its_peak_is_packed_without_a_spill_in_linear_work(monkeypatch):
    # case 39 of the fuzz, 300 readers instead of 25,000: every Relu's output lives until the Concat. The packing
    # and the compaction used to look at every placed stay beside each new one (the readers' outputs: 4.5 x 10^4
    # looks here, 3 x 10^8 at 25,000 readers, past any time limit); the sweep never looks at them one by one
    g = wide_concat(300)
    m_p = mpmf(g).peak_bytes
    looked = []
    monkeypatch.setattr(Occupancy, "beside", lambda self, lo, hi: looked.append(1) or set())
    got = engine.allocate(g, m_p, time_limit_s=60)
    assert got.status == "optimal" and got.offchip_bytes == 0 and got.gap == 0.0
    assert got.peak_bytes == m_p
    got.validate()
    assert check(got, g) == 0
    assert not looked
