"""The dashboard page, built per browser session from one ExplorerState.

The fusion report recomputes on every throttled slider move, off the UI thread: the last
report stays up meanwhile and a newer request supersedes an older one. The tabs (one module
each in dashboard/tabs/) only read the session's state and report.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import holoviews as hv
import panel as pn
import param

import engine
from dashboard import url
from dashboard.state import BUFFER_STEPS_KB, ExplorerState
from dashboard.tabs.common import error_text
from dashboard.tabs.curve import curve_tab
from dashboard.tabs.fusion import FusionTab
from dashboard.tabs.sweep import sweep_tab
from dashboard.tabs.tables import tables_tab
from dashboard.tabs.timeline import timeline_tab
from engine.explore import evaluate

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
# Reports at the other buffer steps are computed ahead in the background (DASHBOARD_PREFETCH=0 turns it off).
PREFETCH = os.environ.get("DASHBOARD_PREFETCH", "1") != "0"
PREFETCH_STEP_S = 0.5
SEARCHES = ("optimus", "online")  # the methods that search; the others are one pass over the graph
PARTIAL_AFTER_S = 0.4  # a search slower than this is preceded by the one-pass methods' report
BUSY_AFTER_S = 0.15  # a report slower than this shows the spinner
FUSION_METHOD_ORDER = ("none", "dnnvm", "efficient_s", "optimus", "online")
# the choices the fusion report depends on
REPORT_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
                 "methods", "access_model", "upload_name")
URL_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
              "methods", "access_model", "alloc_method", "budget", "budget_kb", "cpu_kinds", "colour_by", "selected_op")


class LiveDiscreteSlider(pn.widgets.DiscreteSlider):
    """A DiscreteSlider whose moves reach the Python side at once.

    Panel holds every widget event back 50 ms (a debounce) unless the property is a priority
    change; for the buffer slider that was half of the time a move took to show.
    """

    def _update_options(self, *events):
        super()._update_options(*events)
        self._slider._priority_changes = ["value", "value_throttled"]  # the inner IntSlider, made anew here

    def _update_value(self, event):
        # The label follows the handle in the browser (Panel links them in JavaScript). Setting it here as well
        # sent each drag step's label back after the handle had moved on, so it flickered to older values.
        with param.parameterized.discard_events(self._text):
            super()._update_value(event)


@lru_cache(maxsize=16)
def load_graph(name: str, batch: int, upload_path: str = "") -> engine.Graph:
    """A zoo network or light model by name, or the session's uploaded file."""
    return engine.load_network(upload_path or name, batch=batch)


@lru_cache(maxsize=256)
def fusion_report(graph: engine.Graph, acc: engine.Accelerator, methods: tuple[str, ...], access_model: str):
    return evaluate(graph, acc, methods=methods, access_model=access_model)


class Session(param.Parameterized):
    """One browser session: its state and the current report (computed off the UI thread)."""

    report = param.Parameter(default=None, doc="The Report the views show (the last one that finished)")
    busy = param.Boolean(default=False, doc="True while a newer report is being computed")
    pending = param.List(default=[], item_type=str, doc="Searches still running; the report shown is without them")
    error = param.String(default="", doc="Why the last request produced no report")

    def __init__(self, state: ExplorerState | None = None, **params):
        super().__init__(**params)
        self.state = state or ExplorerState()
        self.upload_dir = Path(tempfile.mkdtemp(prefix="dnn-explorer-"))
        self.status = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        self._report_ticket = 0
        # what the views derive from a report (cached per report), computed with it in the worker thread
        self.preparers: list = []
        self._ready: set = set()  # (other choices, buffer step) whose reports are computed: a drag shows them at once
        self.state.param.watch(self._request, list(REPORT_PARAMS))
        self.param.watch(self._show_status, "error")
        self._request()

    def graph(self) -> engine.Graph:
        s = self.state
        upload = str(self.upload_dir / s.upload_name) if s.upload_name else ""
        return load_graph(s.network, s.batch, upload)

    def methods(self, *, quick: bool = False) -> tuple[str, ...]:
        """The chosen fusion methods in a fixed order; `quick` leaves out the searches."""
        chosen = tuple(m for m in FUSION_METHOD_ORDER if m in self.state.methods) or ("optimus",)
        return tuple(m for m in chosen if m not in SEARCHES) if quick else chosen

    def compute_report(self, buffer_kb: int | None = None, *, quick: bool = False):
        """The fusion report for the current state, or at another buffer step, or without the searches (cached)."""
        s = self.state
        return fusion_report(self.graph(), s.accelerator(buffer_kb), self.methods(quick=quick), s.access_model)

    def _compute_prepared(self, buffer_kb: int | None = None, *, quick: bool = False):
        """The report, with every view's data derived from it ready in the caches (run in a worker thread)."""
        key, kb = self._choices(), self.state.buffer_kb if buffer_kb is None else buffer_kb
        rep = self.compute_report(kb, quick=quick)
        for prepare in self.preparers:
            try:
                prepare(rep)
            except Exception:  # the view meets the same error when it shows the report, and says so
                pass
        if not quick:
            self._ready.add((key, kb))
        return rep

    def _choices(self) -> tuple:
        """Every choice the fusion report depends on except the buffer size."""
        return tuple(str(getattr(self.state, p)) for p in REPORT_PARAMS if p != "buffer_kb")

    def is_ready(self, buffer_kb: int) -> bool:
        """Whether the report at this buffer step is already computed (prefetched or visited)."""
        return (self._choices(), buffer_kb) in self._ready

    def follow_drag(self, buffer_kb: int):
        """The slider's handle, still held, reached a step: a computed report there is shown at once.

        Steps not computed yet wait for the release (the throttled value), so a drag never queues searches.
        """
        if buffer_kb != self.state.buffer_kb and self.is_ready(buffer_kb):
            self.state.buffer_kb = buffer_kb

    def refresh(self):
        """Recompute the report here and now (start-up, tests)."""
        try:
            self.param.update(report=self.compute_report(), error="")
        except Exception as err:  # shown to the user, never raised into Bokeh
            self.error = error_text(err)

    def _request(self, *_):
        """A state change: recompute off the UI thread in a server session, at once elsewhere."""
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.execute(self._refresh_async)
        else:
            self.refresh()

    async def _refresh_async(self):
        """Compute in a worker thread; the last report stays up meanwhile, and a newer request wins.

        When the searches take longer than PARTIAL_AFTER_S (big networks, big buffers), the
        one-pass methods' report is shown first, marked as waiting for the searches.
        """
        self._report_ticket += 1
        ticket = self._report_ticket
        full = asyncio.ensure_future(asyncio.to_thread(self._compute_prepared))
        done, _ = await asyncio.wait({full}, timeout=BUSY_AFTER_S)
        if not done:  # a spinner only for waits one notices: toggling it re-lays out the page
            if ticket == self._report_ticket:  # (a superseded request must not leave it spinning)
                self.busy = True
            done, _ = await asyncio.wait({full}, timeout=PARTIAL_AFTER_S - BUSY_AFTER_S)
        searches = tuple(m for m in self.methods() if m in SEARCHES)
        if not done and searches and self.methods(quick=True):
            try:
                quick = await asyncio.to_thread(self._compute_prepared, quick=True)
            except Exception:  # the full report will say what is wrong
                quick = None
            if quick is not None and ticket == self._report_ticket and not full.done():
                await self._publish(report=quick, pending=list(searches), error="")
        try:
            rep, err = await full, ""
        except Exception as exc:
            rep, err = None, error_text(exc)
        if ticket != self._report_ticket:
            return  # superseded by a newer request
        if rep is None:
            await self._publish(error=err, busy=False, pending=[])
            return
        await self._publish(report=rep, error="", busy=False, pending=[])
        if PREFETCH:
            await self._prefetch(ticket)

    async def _publish(self, **values):
        """Set the session's values under the document lock: the views patch Bokeh models directly, and Bokeh
        takes changes only from callbacks that hold the lock (an async task does not)."""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:  # no server (tests, notebooks): no lock to take
            self.param.update(**values)
            return
        done = asyncio.get_running_loop().create_future()

        def update():
            try:
                self.param.update(**values)
            finally:
                done.set_result(None)

        doc.add_next_tick_callback(update)
        await done

    async def _prefetch(self, ticket: int):
        """Compute the other buffer steps' reports in the background, nearest first, so slider moves find them ready.

        Stops at any newer request, and at the first step that takes longer than PREFETCH_STEP_S
        (big networks at big buffers), so it never holds up what the user asks for next.
        """
        here = BUFFER_STEPS_KB.index(self.state.buffer_kb)
        for i in sorted(range(len(BUFFER_STEPS_KB)), key=lambda i: abs(i - here))[1:]:
            if ticket != self._report_ticket:
                return
            start = time.perf_counter()
            try:
                await asyncio.to_thread(self._compute_prepared, BUFFER_STEPS_KB[i])
            except Exception:  # the same error will be shown if the user goes there
                return
            if time.perf_counter() - start > PREFETCH_STEP_S:
                return

    def _show_status(self, event):
        self.status.object, self.status.alert_type, self.status.visible = event.new, "danger", bool(event.new)

    def on_upload(self, data: bytes | None, filename: str):
        """An uploaded .onnx file: imported once here, so a bad file is named in the page and nothing changes."""
        if data is None:
            return
        if len(data) > MAX_UPLOAD_BYTES:
            self.error = f"{filename}: {len(data) / 1e6:.0f} MB is over the {MAX_UPLOAD_BYTES // 2**20} MB limit"
            return
        safe = Path(filename).name or "model.onnx"
        (self.upload_dir / safe).write_bytes(data)
        try:
            load_graph(self.state.network, self.state.batch, str(self.upload_dir / safe))
        except engine.ModelFileError as err:  # name the user's file, not our temporary copy
            self.error = f"{safe}" + (f", node '{err.node}'" if err.node else "") + f": {err.reason}"
            return
        except Exception as err:
            self.error = error_text(err)
            return
        self.state.upload_name = safe

    def sidebar(self) -> list:
        s = self.state
        network = pn.widgets.AutocompleteInput.from_param(
            s.param.network, options=list(s.param.network.objects), restrict=True, min_characters=0,
            case_sensitive=False, search_strategy="includes", label="Network (type to search)")
        upload = pn.widgets.FileInput(accept=".onnx", label="or upload an .onnx file", multiple=False)
        upload.param.watch(lambda e: self.on_upload(e.new, upload.filename or "model.onnx"), "value")
        s.param.watch(lambda e: setattr(s, "upload_name", ""), "network")
        buffer = LiveDiscreteSlider(label="On-chip buffer (KB, log scale)", options=BUFFER_STEPS_KB,
                                           value=s.buffer_kb)
        buffer.param.watch(lambda e: setattr(s, "buffer_kb", e.new), "value_throttled")
        buffer.param.watch(lambda e: self.follow_drag(e.new), "value")

        def follow_state(event):  # a preset or a curve click moved the buffer; the slider's own moves are there already
            if event.new != buffer.value:
                buffer.value = event.new

        s.param.watch(follow_state, "buffer_kb")
        return [
            pn.pane.Markdown("#### Network"), network, upload,
            pn.widgets.IntInput.from_param(s.param.batch),
            pn.pane.Markdown("#### Accelerator"), pn.widgets.Select.from_param(s.param.preset), buffer,
            pn.Row(pn.widgets.IntInput.from_param(s.param.pe_rows, width=110),
                   pn.widgets.IntInput.from_param(s.param.pe_cols, width=110)),
            pn.widgets.IntInput.from_param(s.param.rf_bytes),
            pn.widgets.Select.from_param(s.param.word_bits),
            pn.widgets.FloatInput.from_param(s.param.dram_gbps),
            pn.pane.Markdown("#### Methods"), pn.widgets.CheckBoxGroup.from_param(s.param.methods, inline=False),
            pn.pane.Markdown("Buffer and RF accesses counted from"),
            pn.widgets.RadioButtonGroup.from_param(s.param.access_model),
            pn.pane.Markdown("#### Scratchpad allocation"),
            pn.widgets.Select.from_param(s.param.alloc_method),
            pn.widgets.Select.from_param(s.param.budget),
            pn.widgets.IntInput.from_param(s.param.budget_kb),
            pn.widgets.MultiChoice.from_param(s.param.cpu_kinds),
        ]

    def main(self) -> pn.Column:
        """The status line above the tabs, in one card; the slow tabs compute only while they are shown."""
        tabs = pn.Tabs(dynamic=True, sizing_mode="stretch_width")
        active = tabs.param.active
        tabs.extend([("Fusion", FusionTab(self).panel()),
                     ("What-if curve", curve_tab(self, active, 1)),
                     ("Memory timeline", timeline_tab(self, active, 2)),
                     ("Tables", tables_tab(self, active, 3)),
                     ("Sweep", sweep_tab(self.upload_dir))])
        return pn.Column(self.status, tabs, sizing_mode="stretch_width")


def build_app(state: ExplorerState | None = None) -> pn.template.BaseTemplate:
    """The page for one session; its state mirrors the URL so a copied link reopens the same view."""
    hv.extension("bokeh")
    state = state or ExplorerState()
    location = pn.state.location
    if location is not None:  # the URL's choices first, so the first report is the one asked for
        url.restore(state, location, URL_PARAMS)
    session = Session(state)
    if location is not None and pn.state.curdoc is not None:
        url.follow(state, location, URL_PARAMS, pn.state.curdoc)
    # no template-wide busy spinner: it would flip on every event (each slider message); the Fusion tab has its own
    template = pn.template.FastListTemplate(title="DNN accelerator memory explorer", sidebar_width=330,
                                            busy_indicator=None)
    template.sidebar.extend(session.sidebar())
    template.main.append(session.main())
    return template
