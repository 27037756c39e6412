"""`panel serve --setup` script for the benchmarks: logs how long the server's event loop was blocked, in wall time
and in CPU seconds of the loop's own thread.

A task on the loop sleeps TICK_S at a time; whenever it wakes later than that, the loop was busy with something
else (building a document, serialising a message, a callback) for the difference. Each such block of LOGGED_S or
more is appended to the file named by the LOOP_LAG_LOG environment variable as "<unix time> <seconds>".

Wall time grows with the machine's load; the thread's CPU seconds (`time.thread_time`) do not. Each turn of the
loop (asyncio's `_run_once`: every callback that was ready at its start, run back to back) is timed in both, and
each turn of LOGGED_CPU_S CPU or more is appended to "<LOOP_LAG_LOG>.turns" as
"<unix time> <cpu s> <wall s> <callbacks> <cpu s of the turn's longest callback> <that callback>"; every turn is
counted in "<LOOP_LAG_LOG>.count" (written each second), so the distribution's share of short turns is known.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time

from tornado.ioloop import IOLoop

TICK_S = 0.005
LOGGED_S = 0.010
LOGGED_CPU_S = 0.005


async def watch(path: str) -> None:
    """Log every block of the loop, forever (the server's life)."""
    with open(path, "a", buffering=1) as log:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(TICK_S)
            late = time.perf_counter() - start - TICK_S
            if late >= LOGGED_S:
                log.write(f"{time.time():.3f} {late:.4f}\n")


def describe(callback) -> str:
    """A callback's name: the innermost of the functions it wraps (a task's coroutine's callable argument, a
    partial's function or callable argument, a closure's callable), e.g.
    `on_loop.<locals>.locked/Piece.show/main_area.<locals>.fusion_part`; Bokeh's and Panel's wrappers left out."""
    names, seen = [], set()
    while callback is not None and id(callback) not in seen and len(names) < 16:
        seen.add(id(callback))
        if not names or names[-1] != _name(callback):
            names.append(_name(callback))
        callback = _wrapped(callback)
    useful = [n for n in names if not n.startswith(WRAPPERS)]
    return "/".join(useful[-3:] or names[-1:])


WRAPPERS = ("_needs_document_lock", "ServerSession.", "_wrap_with_curdoc", "DocumentCallbackManager", "invoke_with",
            "functools.partial", "Task.", "IOLoop.", "BaseAsyncIOLoop", "_run_callback")


def _name(callback) -> str:
    owner = getattr(callback, "__self__", None)
    target = owner.get_coro() if isinstance(owner, asyncio.Task) else callback
    if isinstance(target, functools.partial):
        target = target.func
    return getattr(target, "__qualname__", type(target).__name__)


def _wrapped(callback):
    """What `callback` calls on: a task's coroutine's callable argument, a page's piece's views (`Piece.parts`, for
    its `show`), a partial's function (or its callable argument), a closure's callable cell; None."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        frame = getattr(owner.get_coro(), "cr_frame", None)
        found = frame.f_locals if frame is not None else {}
        candidates = [*(found.get("args") or ())[:1], found.get("func")]
    elif callable(getattr(owner, "parts", None)):  # a page's piece (`dashboard.pieces.Piece`): what it shows
        candidates = [owner.parts]
    elif isinstance(callback, functools.partial):
        candidates = [*callback.args, callback.func] if _name(callback.func).endswith(WRAPPED_BY_ARG) \
            else [callback.func]
    else:
        candidates = [cell.cell_contents for cell in (getattr(callback, "__closure__", None) or ())]
    return next((c for c in candidates if callable(c) and not isinstance(c, type) and c is not callback), None)


WRAPPED_BY_ARG = ("with_document_locked", "_run_callback")  # partials whose (callable) arguments are the work


def time_turns(loop: asyncio.AbstractEventLoop, path: str) -> None:
    """Time each turn of `loop` and each of its callbacks in the loop thread's CPU seconds (see the module's
    docstring); a benchmark's instrument, patched into this server process only."""
    log = open(path + ".turns", "a", buffering=1)
    turn = {"top": 0.0, "name": "", "callbacks": 0}
    counted = {"turns": 0, "written": time.perf_counter()}
    run_handle = asyncio.Handle._run

    def timed_handle(handle):
        name = describe(handle._callback)  # before it runs: a finished task's coroutine has no frame
        start = time.thread_time()
        try:
            return run_handle(handle)
        finally:
            spent = time.thread_time() - start
            turn["callbacks"] += 1
            if spent > turn["top"]:
                turn["top"], turn["name"] = spent, name

    asyncio.Handle._run = timed_handle  # type: ignore[method-assign]
    run_once = loop._run_once  # type: ignore[attr-defined]

    def timed_turn():
        turn.update(top=0.0, name="", callbacks=0)
        cpu, wall = time.thread_time(), time.perf_counter()
        run_once()
        cpu, now = time.thread_time() - cpu, time.perf_counter()
        counted["turns"] += 1
        if cpu >= LOGGED_CPU_S:
            log.write(f"{time.time():.3f} {cpu:.4f} {now - wall:.4f} {turn['callbacks']} {turn['top']:.4f} "
                      f"{turn['name']}\n")
        if now - counted["written"] >= 1.0:
            counted["written"] = now
            with open(path + ".count", "a") as out:
                out.write(f"{time.time():.3f} {counted['turns']}\n")

    loop._run_once = timed_turn  # type: ignore[attr-defined]


def read_blocks(path: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
    """The blocks (seconds) logged in `path` between two unix times."""
    return [float(fields[1]) for fields in _rows(path, since, until)]


def read_turns(path: str, since: float = 0.0, until: float = float("inf")) -> list[tuple[float, float, int, float, str]]:
    """The turns of the loop logged beside `path` between two unix times: (cpu s, wall s, callbacks, the longest
    callback's cpu s, its name), each of LOGGED_CPU_S CPU or more."""
    return [(float(f[1]), float(f[2]), int(f[3]), float(f[4]), " ".join(f[5:]))
            for f in _rows(path + ".turns", since, until)]


def count_turns(path: str, since: float = 0.0, until: float = float("inf")) -> int:
    """How many turns the loop took between two unix times (to the second)."""
    counts = [int(fields[1]) for fields in _rows(path + ".count", since, until)]
    return counts[-1] - counts[0] if counts else 0


def _rows(path: str, since: float, until: float) -> list[list[str]]:
    try:
        lines = open(path).read().split("\n")
    except FileNotFoundError:
        return []
    return [fields for fields in (line.split() for line in lines if line.strip()) if since <= float(fields[0]) <= until]


if os.environ.get("LOOP_LAG_LOG"):
    IOLoop.current().add_callback(watch, os.environ["LOOP_LAG_LOG"])
    time_turns(IOLoop.current().asyncio_loop, os.environ["LOOP_LAG_LOG"])  # type: ignore[attr-defined]
