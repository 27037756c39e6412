"""What a running server is doing, asked from outside: `kill -USR1 <pid>` writes every thread's Python stack and
every pending asyncio task's (where each page's requests and pieces are waiting) to the server's stderr, and each
worker process's threads to its own (the same log). A page that never gets its report is found this way: the threads
say what computes, the tasks say what waits on what.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys


def dump_stacks_on_signal(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """On SIGUSR1: every thread's stack (faulthandler, safe whatever the threads hold), then, once the event loop
    runs the callback, every pending task of `loop`'s (a worker process has no loop: threads only). The loop's
    handler first: faulthandler's, registered after, calls it once it has written the threads."""
    if loop is not None:
        loop.add_signal_handler(signal.SIGUSR1, lambda: sys.stderr.write(pending_tasks(loop)))
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=loop is not None)


def pending_tasks(loop: asyncio.AbstractEventLoop) -> str:
    """Each pending task of `loop` with the stack of its coroutine (where it awaits)."""
    out = io.StringIO()
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    out.write(f"\n{len(tasks)} pending asyncio tasks:\n")
    for task in tasks:
        task.print_stack(file=out)
    return out.getvalue()
