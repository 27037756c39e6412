"""Work on a page's Bokeh document from an async task, and a page built in pieces, one piece of one page at a time,
each piece made off the event loop's thread.

Building a whole page's document (~0.6 CPU s) held the server's event loop, and ten pages opening at once were built
back to back in one turn of the loop: a static file, or another page's slider, waited for all of them. A page's
document is now a light shell (the header, the sidebar's first part) and the rest (the main area first) is added in
pieces once the browser has the page. Each piece's views and their Bokeh models are made in the server's one
page-building thread (`_builder`; the pieces of all the server's pages take turns there, `_turn`, first come first
served), and the loop only adds them to the document, in a turn of its own: the builder holds the GIL at most a
switch interval at a time while the loop wants it (`hand_over_the_gil_sooner`), so whatever else is waiting (a
request, a report to publish) runs while a piece is made.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial

import panel as pn

from dashboard.panel_hooks import make_models_ahead, share_the_link_registry_between_threads, walking_only_new_models

LOG = logging.getLogger(__name__)
BROKEN = ("This part of the page could not be drawn ({error}); the rest of the page works. The server's log has the "
          "details; reloading the page draws it again.")
WAIT_S = 1.0  # how often a task waiting on a document callback asks whether the page is gone
SWITCH_S = 0.001  # the GIL's switch interval in a server (CPython's is 5 ms; BENCHMARKS.md, "a room of users")


def hand_over_the_gil_sooner() -> None:
    """In a server (once, at its start: dashboard/app_hooks.py): a thread that wants the GIL back, as the event loop's
    does after each socket read or write and each poll, waits up to the switch interval while the page-building
    thread computes. At 1 ms instead of 5, page X's slider moves took 2.4 s (median) instead of 7.0 s while ten pages
    opened at a load of 20-27 (one run each)."""
    sys.setswitchinterval(SWITCH_S)


def gone(doc) -> bool:
    """Whether the page's session has ended (its document takes no more callbacks). Bokeh's `Document.destroy` drops
    the document's session context, so a served page without one is gone too: read as "still there", a piece waiting
    for its callback on a page closed meanwhile waited forever, holding the server's turn (every later page hung)."""
    context = doc.session_context
    return context is None or context.destroyed


async def on_loop(doc, fn: Callable[[], object]) -> None:
    """Run `fn` on the document's next tick, with the document locked (Bokeh takes model changes only from callbacks
    that hold the lock, which an async task does not), and wait for it; return at once if the page is gone before."""
    done = asyncio.get_running_loop().create_future()

    def locked():
        try:
            fn()
        finally:
            done.set_result(None)

    if gone(doc):  # destroyed since the caller last asked: Bokeh has dropped its callbacks' lists
        return
    doc.add_next_tick_callback(locked)
    while not done.done():
        await asyncio.wait({done}, timeout=WAIT_S)
        if gone(doc):  # a destroyed document drops its callbacks: this one will never run
            return


def destroyed(doc) -> bool:
    """Whether Bokeh has destroyed `doc` (its page's session ended): `Document.destroy` deletes its roots, and its
    session context too, so that it then looks like a document never served but for its roots."""
    try:
        return doc.roots is None
    except AttributeError:
        return True


async def locked(doc, fn: Callable[[], object]) -> None:
    """Run `fn` with the document locked when `doc` is a server's page (see `on_loop`), between two of its pieces;
    at once elsewhere (tests, notebooks: no lock to take); not at all once Bokeh has destroyed the page's document
    (run at once there, a closed page's report or curve size was set on models Bokeh had destroyed, off the lock)."""
    if doc is None or doc.session_context is None:
        if doc is None or not destroyed(doc):
            fn()
        return
    async with _page(doc):
        await on_loop(doc, fn)


_PAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a page's document -> its `_page` lock


def _page(doc) -> asyncio.Lock:
    """The page's own lock, held while one of its pieces is made and shown: a report or a curve's size is shown
    between two pieces, never while the builder thread reads the views it changes."""
    return _PAGES.setdefault(doc, asyncio.Lock())


@lru_cache(maxsize=1)
def _turn() -> asyncio.Lock:
    """The server's one turn for pieces of pages (made on the event loop that uses it)."""
    return asyncio.Lock()


@lru_cache(maxsize=1)
def _builder() -> ThreadPoolExecutor:
    """The server's one thread that makes pages' pieces (one piece at a time: they take turns), with Panel's
    process-wide link registry made safe to add to from it while the loop walks it."""
    share_the_link_registry_between_threads()
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="page-builder")


@dataclass(frozen=True)
class Piece:
    """A piece of a page: the views `parts()` makes, added to `frame` (a Panel layout already in the page)."""

    frame: object  # a Panel ListLike (pn.Column)
    parts: Callable[[], list]

    def make(self, doc) -> list:
        """The piece's views, with their Bokeh models made for `doc` when it is a server's page (off the loop)."""
        views = list(self.parts())
        if doc is not None:
            make_models_ahead(self.frame, views, doc)
        return views

    def show(self, views: list, doc=None) -> None:
        """Add the views to the frame (on the loop, the document `doc` locked, in a server); in a server, say in
        their place that the piece could not be drawn when adding them fails (`fail`)."""
        if doc is None:
            self.frame.extend(views)
            return
        try:
            # Bokeh walks only the piece's new models (`walking_only_new_models`), not the whole document: 0.021-0.023
            # CPU s -> 0.002-0.004 for a tab's piece (BENCHMARKS.md, "a page's pieces attached")
            with walking_only_new_models(doc):
                self.frame.extend(views)
        except Exception as error:  # a defect, not the user's input: the page says so and its other pieces follow
            self.fail(error)

    def fail(self, error: Exception) -> None:
        """Say in the frame that the piece could not be drawn, naming `error`; the log has its traceback."""
        LOG.error("a piece of the page could not be drawn", exc_info=error)
        self.frame.append(_broken(error))

    def __call__(self) -> None:
        """Make and show the piece at once (outside a server)."""
        self.show(self.make(None))


async def build(doc, pieces: Iterable[Piece]) -> None:
    """Make each piece in the page-building thread and add it to the document on the loop, in order, each in its
    own turn (see the module's docstring); stops once the page is gone. A piece that fails says so in its place."""
    loop = asyncio.get_running_loop()
    for piece in pieces:
        async with _page(doc):
            async with _turn():  # the server's turn only while the thread makes it: a page gone meanwhile holds no one
                if gone(doc):
                    return
                # with this task's context: Panel's current document (a context variable) is the page's there too
                try:
                    views = await loop.run_in_executor(_builder(), contextvars.copy_context().run, piece.make, doc)
                    show = partial(piece.show, views, doc)
                except Exception as error:  # said in the piece's place; the page's next pieces follow
                    show = partial(piece.fail, error)
            if gone(doc):
                return
            await on_loop(doc, show)


def _broken(error: BaseException) -> pn.pane.Alert:
    """What a page shows in place of a piece that could not be drawn."""
    return pn.pane.Alert(BROKEN.format(error=f"{type(error).__name__}: {error}"), alert_type="danger")
