"""Bokeh's server hooks for `panel serve dashboard` (a directory app's `app_hooks.py`): what the server does once,
when it starts.

The page's modules (Panel's templates, Bokeh's models, pandas, the engine) are imported then, not while the first
page's HTML request holds the event loop (1.4 CPU s, every page of the server waiting); and their objects are frozen
out of the garbage collector's full passes (`dashboard.heap`), before any page exists. The GIL's switch interval is
shortened for the page-building thread's sake (`dashboard.pieces`). `kill -USR1` writes what the server is doing to
its log (`dashboard.stacks`).
"""

from __future__ import annotations


def on_server_loaded(server_context) -> None:
    """The server has started: import the page's modules, then freeze the heap they made; and hand the GIL to the
    event loop's thread sooner (`dashboard.pieces.hand_over_the_gil_sooner`); dump its stacks on SIGUSR1."""
    from tornado.ioloop import IOLoop

    import dashboard.app  # noqa: F401 (imported for its modules' import)
    from dashboard.heap import freeze_startup_heap
    from dashboard.pieces import hand_over_the_gil_sooner
    from dashboard.stacks import dump_stacks_on_signal

    dump_stacks_on_signal(IOLoop.current().asyncio_loop)  # type: ignore[attr-defined]
    freeze_startup_heap()
    hand_over_the_gil_sooner()
