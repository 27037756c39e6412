"""Python's cyclic garbage collector held off for the length of a short time-limited call.

A full (generation 2) pass walks every object the process holds: 44 ms with ResNet-1202 loaded in a fresh
process (the interpreter, numpy, Numba and the graph), four times a 0.01 s limit, and it falls inside whichever call
happens to allocate past the collector's threshold. `allocate` holds it off while its limit is under
`PAUSE_BELOW_S`; a longer call leaves it on, since it makes cycles the collector should reclaim (networkx and PuLP:
28,000 unreachable objects in a 5 s NASNet-A Mobile call) and a pass is a few % of its limit. Reference counting
frees everything else as usual while the collector is held off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PAUSE_BELOW_S = 1.0  # limits (s) under which a full pass (tens of ms) would be a large part of the limit


class _Holds:
    """How many calls hold the collector off, and whether it was on before the first of them: the last one to
    leave restores that, so calls in several threads never leave it off."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_on = False


_HOLDS = _Holds()


@contextmanager
def held_off(time_limit_s: float) -> Iterator[None]:
    """Run the body with the cyclic collector off when `time_limit_s` is under `PAUSE_BELOW_S`; afterwards the
    collector is as it was before the first overlapping call took it off."""
    if time_limit_s >= PAUSE_BELOW_S:
        yield
        return
    with _HOLDS.lock:
        if _HOLDS.count == 0:
            _HOLDS.was_on = gc.isenabled()
            gc.disable()
        _HOLDS.count += 1
    try:
        yield
    finally:
        with _HOLDS.lock:
            _HOLDS.count -= 1
            if _HOLDS.count == 0 and _HOLDS.was_on:
                gc.enable()
