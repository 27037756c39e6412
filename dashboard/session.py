"""One browser session: the user's choices, the report its views show, and uploaded models.

Every choice the fusion report depends on starts a `ReportRequest` (off the UI thread in a
server session, at once elsewhere). The tabs only read the session's state and report.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import panel as pn
import param

import engine
from dashboard.request import ReportRequest
from dashboard.state import ExplorerState
from dashboard.tabs.common import error_text
from engine.explore import evaluate

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
SEARCHES = ("optimus", "online")  # the methods that search; the others are one pass over the graph
FUSION_METHOD_ORDER = ("none", "dnnvm", "efficient_s", "optimus", "online")
# the choices the fusion report depends on
REPORT_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
                 "methods", "access_model", "upload_name")


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
        self.latest_ticket = 0  # the newest ReportRequest's; older requests publish nothing more
        # what the views derive from a report (cached per report), computed with it in the worker thread
        self.preparers: list = []
        self._ready: set = set()  # (other choices, buffer step) whose reports are computed: a drag shows them at once
        self.state.param.watch(self._request, list(REPORT_PARAMS))
        self.param.watch(self._show_status, "error")
        if self._served():  # the first report once the browser has the page: see `_request`
            pn.state.onload(self._request)
        else:
            self._request()

    def graph(self) -> engine.Graph:
        s = self.state
        upload = str(self.upload_dir / s.upload_name) if s.upload_name else ""
        return load_graph(s.network, s.batch, upload)

    def methods(self, *, quick: bool = False) -> tuple[str, ...]:
        """The chosen fusion methods in a fixed order; `quick` leaves out the searches."""
        chosen = tuple(m for m in FUSION_METHOD_ORDER if m in self.state.methods) or ("optimus",)
        return tuple(m for m in chosen if m not in SEARCHES) if quick else chosen

    def searches(self) -> tuple[str, ...]:
        """The chosen methods that search (and may be slow)."""
        return tuple(m for m in self.methods() if m in SEARCHES)

    def compute_report(self, buffer_kb: int | None = None, *, quick: bool = False):
        """The fusion report for the current state, or at another buffer step, or without the searches (cached)."""
        s = self.state
        return fusion_report(self.graph(), s.accelerator(buffer_kb), self.methods(quick=quick), s.access_model)

    def prepared(self, buffer_kb: int | None = None, *, quick: bool = False):
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

    def new_request(self) -> ReportRequest:
        """A request for the current choices; every older one is superseded."""
        self.latest_ticket += 1
        return ReportRequest(self, self.latest_ticket)

    @staticmethod
    def _served() -> bool:
        """Whether this session lives in a Bokeh server (a browser page), not a notebook or a test."""
        return pn.state.curdoc is not None and pn.state.curdoc.session_context is not None

    def _request(self, *_):
        """A state change: recompute off the UI thread in a server session, at once elsewhere.

        The first request waits for the page to load (`pn.state.onload`): Panel drops the changes made
        under `pn.io.hold` after the browser fetched the document but before it reported the page ready,
        so a report published then (a new DAG figure) never reached the browser, and every later patch
        of that figure failed there ("reference ... isn't known").
        """
        if self._served():
            pn.state.execute(self.new_request().run)
        else:
            self.refresh()

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
