"""`panel serve --setup` script for the benchmarks: logs how long the server's event loop was blocked.

A task on the loop sleeps TICK_S at a time; whenever it wakes later than that, the loop was busy with something
else (building a document, serialising a message, a callback) for the difference. Each such block of LOGGED_S or
more is appended to the file named by the LOOP_LAG_LOG environment variable as "<unix time> <seconds>".
"""

from __future__ import annotations

import asyncio
import os
import time

from tornado.ioloop import IOLoop

TICK_S = 0.005
LOGGED_S = 0.010


async def watch(path: str) -> None:
    """Log every block of the loop, forever (the server's life)."""
    with open(path, "a", buffering=1) as log:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(TICK_S)
            late = time.perf_counter() - start - TICK_S
            if late >= LOGGED_S:
                log.write(f"{time.time():.3f} {late:.4f}\n")


def read_blocks(path: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
    """The blocks (seconds) logged in `path` between two unix times."""
    try:
        lines = open(path).read().split("\n")
    except FileNotFoundError:
        return []
    pairs = (line.split() for line in lines if line.strip())
    return [float(late) for at, late in pairs if since <= float(at) <= until]


if os.environ.get("LOOP_LAG_LOG"):
    IOLoop.current().add_callback(watch, os.environ["LOOP_LAG_LOG"])
