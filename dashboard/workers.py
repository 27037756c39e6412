"""The pages' engine work (reports, the curve's sizes, allocations) in a bounded pool of worker processes.

In a thread of the server process, the engine's pure-Python parts held the GIL, and the event loop (which builds
pages, answers static files and sends every message) waited its turn behind them: with ten pages computing, a
callback of 50 ms took seconds. In a worker process they hold their own interpreter's lock; the server's thread that
asked only waits on a pipe. Outside a server (tests, notebooks) the work runs where it is asked for.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from dashboard.stacks import dump_stacks_on_signal
from engine.explore import EvaluationStopped
from engine.graph import Graph

WORKERS = max(1, min(2, os.cpu_count() or 1))  # the engine's work uses a core each; the event loop keeps its own
WORKER_NICENESS = 10  # added to the server's: on a busy machine the event loop gets a core before the engine's work
POLL_S = 0.25  # how often a waiting thread asks whether its page still wants the result
CLOSED = "the page that asked for this work was closed"


@dataclass(frozen=True)
class StopCheck:
    """A session's "should this work stop?" question, equal to every other: a cached result is the same whoever
    asked for it, so the question is left out of the caches' keys."""

    ask: Callable[[], bool] = field(compare=False)

    def __call__(self) -> bool:
        return self.ask()


NEVER_STOP = StopCheck(lambda: False)


_STARTING = threading.Lock()  # two threads asking at once start one pool


def pool() -> ProcessPoolExecutor:
    """The server process's one pool, started on first use."""
    with _STARTING:
        return _pool()


@lru_cache(maxsize=1)
def _pool() -> ProcessPoolExecutor:
    """Spawned, not forked: a fork would copy the server's threads' locks mid-use."""
    made = ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker)
    # before concurrent.futures' own exit hook (registered at its import; these run last first), which waits for
    # the work the workers run: Bokeh's server returns from its loop on SIGTERM or Ctrl-C, and its process would
    # then wait for a search that may take minutes. Private, as concurrent.futures uses it; a test covers it.
    threading._register_atexit(_kill_workers)  # type: ignore[attr-defined]
    return made


def _kill_workers() -> None:
    """At the server's exit: kill its worker processes, whatever they are running."""
    for worker in multiprocessing.active_children():
        worker.kill()


def _start_worker() -> None:
    """In each worker, before its first piece of work: run below the server's priority (the event loop answers every
    page, a worker one page's report), die with the server, and dump its stacks when asked."""
    os.nice(WORKER_NICENESS)
    _outlive_not()
    dump_stacks_on_signal()


def _outlive_not() -> None:
    """In each worker: die with the server. A server stopped by a signal runs no clean-up, and a worker holds both
    ends of its task pipe, so it would wait for work forever; a thread watching the server would need the GIL, which
    a worker busy in C code holds until the call returns. So the kernel does it: the worker's end of the pipe from
    its parent (its sentinel, at end-of-file once the server is gone) is set to raise SIGIO, whose default action
    ends the process."""
    server = multiprocessing.parent_process()  # a spawned worker's parent is the server
    signal.signal(signal.SIGIO, signal.SIG_DFL)
    fcntl.fcntl(server.sentinel, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(server.sentinel, fcntl.F_SETFL, fcntl.fcntl(server.sentinel, fcntl.F_GETFL) | os.O_ASYNC)
    if not server.is_alive():  # gone before the signal was armed
        os._exit(0)


@lru_cache(maxsize=32)
def _interned(graph: Graph) -> Graph:
    """The first copy of an equal graph this worker met: its derived lookups (the DAG, producers) are built once,
    not once per piece of work that brought a copy."""
    return graph


def _in_worker(fn: Callable, args: tuple, kwargs: dict):
    """`fn(*args, **kwargs)` in a worker process, each graph among `args` replaced by this worker's copy."""
    return fn(*(_interned(a) if isinstance(a, Graph) else a for a in args), **kwargs)


def _wait(future: Future, stop: Callable[[], bool]):
    """The future's result; once `stop()` says so, the work is cancelled if not started, and ignored if it was."""
    while True:
        try:
            return future.result(timeout=POLL_S)
        except FutureTimeout:
            if stop():
                future.cancel()
                raise EvaluationStopped(CLOSED) from None


class Gate:
    """At most `places` pieces of work in the pool at once; a free place goes to work a page asked for before any
    background work (prefetch). The pool itself serves first come, first served: at twenty pages, a slider move's
    report waited behind every page's prefetch."""

    def __init__(self, places: int):
        self.free, self.waiting = places, {False: 0, True: 0}  # free places; threads waiting, by `background`
        self._changed = threading.Condition()

    @contextmanager
    def place(self, background: bool, stop: Callable[[], bool]):
        """Hold a place while the block runs; EvaluationStopped once `stop()` says so while waiting for one."""
        with self._changed:
            self.waiting[background] += 1
            try:
                while self.free == 0 or (background and self.waiting[False]):
                    self._changed.wait(POLL_S)
                    if stop():
                        raise EvaluationStopped(CLOSED)
            finally:
                self.waiting[background] -= 1
            self.free -= 1
        try:
            yield
        finally:
            with self._changed:
                self.free += 1
                self._changed.notify_all()


GATE = Gate(WORKERS)  # the server process's: as many places as workers, so no work waits in the pool's own queue


@dataclass(frozen=True)
class Runner:
    """Where a page's engine work runs: in this thread (`away` False: tests, notebooks) or in the worker processes,
    the asking thread waiting (a server's pages). Equal runners give equal results: a cache's key may hold one."""

    away: bool = False
    stop: StopCheck = NEVER_STOP
    background: bool = field(default=False, compare=False)  # work nobody waits for yet (prefetch): served last

    def __call__(self, fn: Callable, *args, **kwargs):
        """`fn(*args, **kwargs)` (a module-level function of picklable arguments and result), here or away."""
        if self.stop():
            raise EvaluationStopped(CLOSED)
        if not self.away:
            return fn(*args, **kwargs)
        try:
            with GATE.place(self.background, self.stop):
                return _wait(pool().submit(_in_worker, fn, args, kwargs), self.stop)
        except BrokenProcessPool:  # a worker died (killed, out of memory): the next piece of work gets a new pool
            with _STARTING:
                _pool.cache_clear()
            raise


HERE = Runner()
