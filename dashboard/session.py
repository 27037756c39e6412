"""One browser session: the user's choices, the report its views show, and uploaded models.

Every choice the fusion report depends on starts a `ReportRequest` (off the UI thread in a
server session, at once elsewhere). The tabs only read the session's state and report.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
import weakref
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path

import panel as pn
import param

import engine
from dashboard import uploads
from dashboard.panel_hooks import deliver_every_queued_message, send_frames_at_once
from dashboard.pieces import on_loop
from dashboard.request import ReportRequest
from dashboard.state import ExplorerState
from dashboard.tabs.common import error_text
from dashboard.workers import HERE, Runner, StopCheck
from engine.explore import evaluate

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
SEARCHES = ("optimus", "online")  # the methods that search; the others are one pass over the graph
FUSION_METHOD_ORDER = ("none", "dnnvm", "efficient_s", "optimus", "online")
# the choices the fusion report depends on
REPORT_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
                 "methods", "access_model", "objective", "upload_name", "input_shapes")


_SESSION_IDS = itertools.count(1)


def release_uploads(holder: int) -> None:
    """A session is gone: the uploads only it used are deleted."""
    if uploads._STORE:
        uploads.store().release(holder)


@lru_cache(maxsize=16)
def load_graph(name: str, batch: int, upload_path: str = "", input_shapes: tuple = ()) -> engine.Graph:
    """A zoo network or light model by name, or the session's uploaded file, with `input_shapes` ((name, dims) pairs)
    bound (engine.load_network's `input_shapes`)."""
    return engine.load_network(upload_path or name, batch=batch, input_shapes=dict(input_shapes) or None)


def parse_input_shapes(text: str) -> tuple:
    """'input_ids=1x128, sequence=128' -> (('input_ids', (1, 128)), ('sequence', 128)): an input's whole shape, or a
    symbolic dimension's size; EngineError saying what to write."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.replace(";", ",").split(","))):
        name, sep, dims = item.partition("=")
        parts = dims.strip().lower().split("x")
        if not sep or not name.strip() or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise engine.EngineError(f"input shapes: '{item}' is not NAME=DIMS; write e.g. input_ids=1x128 (an "
                                     "input's shape) or sequence=128 (a symbolic dimension), comma-separated")
        values = tuple(int(p) for p in parts)
        pairs.append((name.strip(), values if len(values) > 1 else values[0]))
    return tuple(sorted(pairs))


@lru_cache(maxsize=256)
def fusion_report(graph: engine.Graph, acc: engine.Accelerator, methods: tuple[str, ...], access_model: str,
                  run: Runner = HERE, objective: str = "dram_bytes"):
    """The report (cached), computed by `run` (in a worker process for a server's page); a closed page's work
    stops between the report's parts, or before it starts."""
    rep = run(evaluate, graph, acc, methods=methods, access_model=access_model, objective=objective,
              should_stop=None if run.away else run.stop)
    return rep if rep.graph is graph else replace(rep, graph=graph)  # this process's graph: views cache by it


class Session(param.Parameterized):
    """One browser session: its state and the current report (computed off the UI thread)."""

    report = param.Parameter(default=None, doc="The Report the views show (the last one that finished)")
    busy = param.Boolean(default=False, doc="True while a newer report is being computed")
    pending = param.List(default=[], item_type=str, doc="Searches still running; the report shown is without them")
    error = param.String(default="", doc="Why the last request produced no report")
    notes = param.Dict(default={}, doc="Upload key -> what its import left out or assumed")
    refused = param.String(default="", doc="What the page's link or a value typed in the sidebar asked for that is "
                                            "not allowed (until a choice changes: a report, even one asked for "
                                            "before, does not clear it)")
    uploading = param.String(default="", doc="What the upload under way is doing ('uploading x.onnx... 40%'), or ''")

    def __init__(self, state: ExplorerState | None = None, **params):
        super().__init__(**params)
        self.state = state or ExplorerState()
        self.holder = next(_SESSION_IDS)  # this session's name in the upload store
        self._release = weakref.finalize(self, release_uploads, self.holder)  # at page close, or when collected
        self.closed = False  # the page was closed: every computation for it stops at its next step
        me = weakref.ref(self)  # (the check sits in the report cache's keys: it must not keep the session alive)
        self.stop = StopCheck(lambda: me() is None or me().closed)
        self.run = Runner(away=self._served(), stop=self.stop)  # a server's engine work in its worker processes
        self.status = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        # what the import of the upload in use left out or assumed, in the page as long as that upload is
        self.notice = pn.pane.Alert("", alert_type="warning", visible=False, sizing_mode="stretch_width")
        self.latest_ticket = 0  # the newest ReportRequest's; older requests publish nothing more
        # what the views derive from a report (cached per report), computed with it in the worker thread
        self.preparers: list = []
        self._ready: set = set()  # (other choices, buffer step) whose reports are computed: a drag shows them at once
        self.state.param.watch(self._request, list(REPORT_PARAMS))
        self.param.watch(self._show_status, ["error", "refused"])
        self.state.param.watch(lambda *_: setattr(self, "refused", ""), list(REPORT_PARAMS))
        self.state.param.watch(self._show_notice, "upload_name")
        if self._served():  # the first report once the browser has the page: see `_request`
            deliver_every_queued_message()
            doc = pn.state.curdoc
            pn.state.onload(lambda: send_frames_at_once(doc))  # the websocket exists once the page has loaded
            pn.state.onload(self._request)
            pn.state.curdoc.on_session_destroyed(self._closed)
        else:
            self._request()

    def graph(self) -> engine.Graph:
        """The chosen network, or the uploaded file, with the input shapes typed in the sidebar."""
        s = self.state
        upload = str(uploads.store().path(s.upload_name, self.holder)) if s.upload_name else ""
        return load_graph(s.network, s.batch, upload, parse_input_shapes(s.input_shapes))

    def methods(self, *, quick: bool = False) -> tuple[str, ...]:
        """The chosen fusion methods in a fixed order; `quick` leaves out the searches."""
        chosen = tuple(m for m in FUSION_METHOD_ORDER if m in self.state.methods)  # one at least (`Chosen`)
        return tuple(m for m in chosen if m not in SEARCHES) if quick else chosen

    def searches(self) -> tuple[str, ...]:
        """The chosen methods that search (and may be slow)."""
        return tuple(m for m in self.methods() if m in SEARCHES)

    def compute_report(self, buffer_kb: int | None = None, *, quick: bool = False, run: Runner | None = None):
        """The fusion report for the current state, or at another buffer step, or without the searches (cached);
        `run` is where it is computed and when to stop (a request's: stopped once superseded), else the session's."""
        s = self.state
        objective = s.objective if s.access_model == "mapping" else "dram_bytes"  # the others price no mapping
        return fusion_report(self.graph(), s.accelerator(buffer_kb), self.methods(quick=quick), s.access_model,
                             run or self.run, objective)

    def prepared(self, buffer_kb: int | None = None, *, quick: bool = False, run: Runner | None = None):
        """The report, with every view's data derived from it ready in the caches (run in a worker thread)."""
        key, kb = self._choices(), self.state.buffer_kb if buffer_kb is None else buffer_kb
        rep = self.compute_report(kb, quick=quick, run=run)
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

    def follow_drag(self, buffer_kb: int, released_kb: int | None = None):
        """The slider's handle, still held, reached a step: a computed report there is shown at once.

        Steps not computed yet wait for the release (the throttled value), so a drag never queues searches;
        but the browser sends no release at `released_kb`, the step it was last released at (its throttled value
        does not change), so a drag back there, after following computed steps, is followed at once.
        """
        if buffer_kb != self.state.buffer_kb and (self.is_ready(buffer_kb) or buffer_kb == released_kb):
            self.state.buffer_kb = buffer_kb

    def refresh(self):
        """Recompute the report here and now (start-up, tests)."""
        try:
            self.param.update(report=self.compute_report(), error="")
        except Exception as err:  # shown to the user, never raised into Bokeh
            self.error = self.explain(err)

    @staticmethod
    def explain(err: Exception) -> str:
        """An error in the user's words: the engine's message, naming an uploaded file by its name, not our copy."""
        text = error_text(err)
        return uploads.store().scrub(text) if uploads._STORE else text

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

    def _closed(self, _context):
        """The page was closed: its background work stops at the next step, and its uploads are deleted."""
        self.closed = True  # running reports stop before their next part; the curve before its next size
        self.latest_ticket += 1  # every running request is superseded: prefetch and quick reports stop
        self._release()

    def _show_status(self, _event=None):
        text = self.error or self.refused
        self.status.object, self.status.alert_type, self.status.visible = text, "danger", bool(text)

    def on_upload(self, data: bytes | None, filename: str):
        """An uploaded .onnx file: stored, then imported (off the UI thread in a server), so a bad file is named in
        the page and nothing changes; a partial import says in the page what was left out."""
        if data is None:
            return
        safe = Path(filename).name or "model.onnx"
        if not data:
            self.error, self.uploading = f"{safe}: the file is empty; choose an .onnx model file", ""
            return
        if len(data) > MAX_UPLOAD_BYTES:
            self.error, self.uploading = (f"{safe}: {len(data) / 1e6:.0f} MB is over the {MAX_UPLOAD_BYTES // 2**20} "
                                          "MB limit"), ""
            return
        self.uploading = f"uploading {safe}... importing"
        # each upload under its content hash: the graph cache is keyed by path, so a changed file under the same
        # name is a new path, and the same file uploaded again is found in the cache
        key = uploads.store().put(data, safe, self.holder)
        if self._served():
            pn.state.execute(partial(self._import_later, key, safe))
        else:
            self._use_upload(key, *self._import(key, safe))

    def _import(self, key: str, safe: str) -> tuple[str, str]:
        """(error, note) of importing the stored upload `key`: the importer's message naming the user's file, and
        what a partial import left out and the data-dependent counts it assumed (Graph.assumptions)."""
        path = uploads.store().path(key, self.holder)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", engine.PartialImportWarning)
                graph = load_graph(self.state.network, self.state.batch, str(path),
                                   parse_input_shapes(self.state.input_shapes))
        except engine.ModelFileError as err:  # name the user's file, not our temporary copy
            return f"{safe}" + (f", node '{err.node}'" if err.node else "") + f": {err.reason}", ""
        except Exception as err:
            return self.explain(err), ""
        notes = [uploads.store().scrub(str(w.message)) for w in caught
                 if issubclass(w.category, engine.PartialImportWarning)]
        shown = graph.assumptions[:4]  # an SSD has one count per class: the first few, and how many in all
        if shown:
            more = f"; ... {len(graph.assumptions)} in all (python -m engine info lists them)" \
                if len(graph.assumptions) > len(shown) else ""
            notes.append(f"{safe}: counted at assumed data-dependent counts (each its most: what the model's own "
                         f"fixed sizes then cut): {'; '.join(shown)}{more}.")
        return "", " ".join(notes)

    async def _import_later(self, key: str, safe: str):
        """`_import` in a worker thread (a big model takes seconds), then its outcome under the document lock."""
        outcome = await asyncio.to_thread(self._import, key, safe)
        await on_loop(pn.state.curdoc, partial(self._use_upload, key, *outcome))

    def _use_upload(self, key: str, error: str, note: str):
        self.uploading = ""
        if error:
            self.error = error
            return
        self.notes = {**self.notes, key: note} if note else self.notes
        self.state.upload_name = key

    def _show_notice(self, _event=None):
        note = self.notes.get(self.state.upload_name, "")
        self.notice.object, self.notice.visible = note, bool(note)
