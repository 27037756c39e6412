"""Work on a page's Bokeh document from an async task, and a page built in pieces, one piece of one page at a time.

Building a whole page's document (~0.6 CPU s) held the server's event loop, and ten pages opening at once were built
back to back in one turn of the loop: a static file, or another page's slider, waited for all of them. A page's
document is now a light shell (the header, the sidebar's first part, the tabs' empty frames) and the rest is added
in pieces of well under 0.1 CPU s once the browser has the page. The pieces of all the server's pages take turns
(`_turn`, one lock for the server process, first come first served), and each runs in a turn of the loop of its
own, so whatever else is waiting (a request, a report to publish) runs between two pieces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from functools import lru_cache

WAIT_S = 1.0  # how often a task waiting on a document callback asks whether the page is gone


def gone(doc) -> bool:
    """Whether the page's session has ended (its document takes no more callbacks)."""
    context = doc.session_context
    return context is not None and context.destroyed


async def on_loop(doc, fn: Callable[[], object]) -> None:
    """Run `fn` on the document's next tick, with the document locked (Bokeh takes model changes only from callbacks
    that hold the lock, which an async task does not), and wait for it; return at once if the page is gone before."""
    done = asyncio.get_running_loop().create_future()

    def locked():
        try:
            fn()
        finally:
            done.set_result(None)

    doc.add_next_tick_callback(locked)
    while not done.done():
        await asyncio.wait({done}, timeout=WAIT_S)
        if gone(doc):  # a destroyed document drops its callbacks: this one will never run
            return


async def locked(doc, fn: Callable[[], object]) -> None:
    """Run `fn` with the document locked when `doc` is a server's page (see `on_loop`); at once elsewhere (tests,
    notebooks: no lock to take)."""
    if doc is None or doc.session_context is None:
        fn()
        return
    await on_loop(doc, fn)


@lru_cache(maxsize=1)
def _turn() -> asyncio.Lock:
    """The server's one turn for pieces of pages (made on the event loop that uses it)."""
    return asyncio.Lock()


async def build(doc, pieces: Iterable[Callable[[], object]]) -> None:
    """Run each piece on the document, in order, each in its own turn (see the module's docstring); stops once the
    page is gone."""
    for piece in pieces:
        async with _turn():
            if gone(doc):
                return
            await on_loop(doc, piece)
