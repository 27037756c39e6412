"""One request for a fusion report, from a changed choice to the views, computed off the UI thread.

A request holds a ticket; a newer request takes a newer one, and a request whose ticket is no
longer the session's latest publishes nothing more. When the searches are slow the one-pass
methods' report goes out first; once the full report is shown, the other buffer steps' reports
are computed ahead so that slider moves find them ready.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, replace
from functools import partial

import panel as pn

from dashboard.pieces import locked
from dashboard.workers import StopCheck

# Reports at the other buffer steps are computed ahead in the background (DASHBOARD_PREFETCH=0 turns it off).
PREFETCH = os.environ.get("DASHBOARD_PREFETCH", "1") != "0"
PREFETCH_STEP_S = 2.5  # a Llama-3-8B prefill step takes ~0.6 s alone; a NAS cell, several seconds
PARTIAL_AFTER_S = 0.4  # a search slower than this is preceded by the one-pass methods' report
BUSY_AFTER_S = 0.15  # a report slower than this shows the spinner


@dataclass(frozen=True)
class ReportRequest:
    """The report for a session's choices as they were when `ticket` was taken."""

    session: object  # dashboard.session.Session
    ticket: int

    @property
    def current(self) -> bool:
        """Whether no newer request has been made since, and the page is still open."""
        return self.ticket == self.session.latest_ticket and not self.session.closed

    @property
    def runner(self):
        """The session's runner, stopping once this request is superseded: a report not started by then is never
        computed (the worker is free for the newer one); one already running is finished and cached, not shown."""
        return replace(self.session.run, stop=StopCheck(lambda: not self.current))

    async def run(self):
        """Compute in a worker thread; the last report stays up meanwhile, and a newer request wins."""
        full = asyncio.ensure_future(asyncio.to_thread(self.session.prepared, run=self.runner))
        done, _ = await asyncio.wait({full}, timeout=BUSY_AFTER_S)
        if not done:  # a spinner only for waits one notices: toggling it re-lays out the page
            if self.current:  # (a superseded request must not leave it spinning)
                await self.publish(busy=True)
            done, _ = await asyncio.wait({full}, timeout=PARTIAL_AFTER_S - BUSY_AFTER_S)
        if not done:
            await self._show_one_pass_methods(full)
        try:
            rep, err = await full, ""
        except Exception as exc:
            rep, err = None, self.session.explain(exc)
        if not self.current:
            return
        if rep is None:
            await self.publish(error=err, busy=False, pending=[])
            return
        await self.publish(report=rep, error="", busy=False, pending=[])
        if PREFETCH:
            await self.prefetch()

    async def _show_one_pass_methods(self, full: asyncio.Future):
        """While slow searches run, the one-pass methods' report, marked as waiting for them."""
        searches = self.session.searches()
        if not searches or not self.session.methods(quick=True):
            return
        try:
            quick = await asyncio.to_thread(self.session.prepared, quick=True, run=self.runner)
        except Exception:  # the full report will say what is wrong
            return
        if self.current and not full.done():
            await self.publish(report=quick, pending=list(searches), error="")

    async def publish(self, **values):
        """Set the session's values under the document lock: the views patch Bokeh models directly, and Bokeh
        takes changes only from callbacks that hold the lock (an async task does not)."""
        await locked(pn.state.curdoc, partial(self.session.param.update, **values))

    async def prefetch(self):
        """Compute the other buffer steps' reports in the background, nearest first.

        Stops at any newer request, and at the first step that takes longer than PREFETCH_STEP_S
        (big networks at big buffers), so it never holds up what the user asks for next.
        """
        steps = self.session.state.param.buffer_kb.objects  # with a preset's own size
        here = steps.index(self.session.state.buffer_kb)
        for i in sorted(range(len(steps)), key=lambda i: abs(i - here))[1:]:
            if not self.current:
                return
            start = time.perf_counter()
            try:
                await asyncio.to_thread(self.session.prepared, steps[i], run=replace(self.runner, background=True))
            except Exception:  # the same error will be shown if the user goes there
                return
            if time.perf_counter() - start > PREFETCH_STEP_S:
                return
