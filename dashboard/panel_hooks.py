"""Every place the dashboard reaches into Panel's or Bokeh's private names, in one module.

Each hook works around a defect or a missing option of the releases in `CHECKED` (docs/dashboard.md says which
and why); tests/test_panel_hooks.py checks each one against the installed release. Where a release has moved a
private name, the hook changes nothing and says so in the log (logger `dashboard.panel_hooks`): the page is then
slower or, for the stylesheets, fetches them from Panel's CDN, but it works.
"""

from __future__ import annotations

import functools
import logging
import weakref
from _weakrefset import _IterationGuard
from collections.abc import Iterator
from contextlib import contextmanager

import panel as pn
import param

LOG = logging.getLogger(__name__)

CHECKED = ("1.9",)  # Panel releases (major.minor) these hooks were checked on; pyproject pins panel to them


@functools.cache
def _checked_release() -> bool:
    """Whether the installed Panel is one the hooks were checked on (said in the log once per process when not)."""
    ok = ".".join(pn.__version__.split(".")[:2]) in CHECKED
    if not ok:
        LOG.warning("Panel %s is not one of the releases the dashboard's hooks were checked on (%s)",
                    pn.__version__, ", ".join(CHECKED))
    return ok


def _not_applied(hook: str, missing: str) -> bool:
    """Log that `hook` changed nothing because Panel/Bokeh has no `missing` here; False, for the caller to return."""
    LOG.warning("%s not applied: %s is not where Panel %s had it", hook, missing, ".".join(CHECKED))
    return False


def serve_stylesheets_locally(doc) -> bool:
    """Make every stylesheet Panel gives `doc`'s models point at this server's copy, from the document's first
    model on; whether it was applied.

    Panel tells a server document where its files are (the `dist_url` template variable) only when it writes
    the page's HTML, and patches the stylesheets it can reach from the roots then. Stylesheets made before that
    and reached later (a theme's, Tabulator's, Font Awesome's, cached and shared between documents by Panel's
    designs) kept their cdn.holoviz.org address: once a server had served a few sessions, new pages fetched 18 to
    63 stylesheets from the internet, and without it their tables and alerts were unstyled (issue 29).
    """
    _checked_release()
    from panel.io import resources

    variables = getattr(doc, "_template_variables", None)
    if not isinstance(variables, dict) or not hasattr(resources, "LOCAL_DIST"):
        return _not_applied("serve_stylesheets_locally", "Document._template_variables or LOCAL_DIST")
    rel = pn.state.rel_path
    variables["dist_url"] = f"{rel}/{resources.LOCAL_DIST}" if rel else resources.LOCAL_DIST
    return True


def send_frames_at_once(doc) -> int:
    """Turn Nagle's algorithm off on every websocket of `doc`'s server session; how many there were.

    Bokeh writes every message as three or more websocket frames (header, metadata, content, buffers), each its
    own write to the socket. With Nagle's algorithm on (Tornado's default) the kernel holds a small write back
    while an earlier one is unacknowledged, and the browser acknowledges late (delayed ACK, 40 ms on Linux): every
    slider move waited ~40 ms for nothing (docs/dashboard.md, "Why a slider move is quick"). Bokeh exposes no
    option for it, so this reaches the session's connections (a ServerSession's subscribed ServerConnections,
    each wrapping Tornado's WebSocketHandler) through their private fields.
    """
    _checked_release()
    context = getattr(doc, "session_context", None)
    session = getattr(context, "session", None)
    if session is None or not hasattr(session, "_subscribed_connections"):
        _not_applied("send_frames_at_once", "ServerSession._subscribed_connections")
        return 0
    sockets = [getattr(connection, "_socket", None) for connection in session._subscribed_connections]
    handlers = [socket for socket in sockets if callable(getattr(socket, "set_nodelay", None))]
    if len(handlers) < len(sockets):
        _not_applied("send_frames_at_once", "ServerConnection._socket.set_nodelay")
    for handler in handlers:
        handler.set_nodelay(True)
    return len(handlers)


def delivering_queued(dispatch):
    """Panel's message dispatcher `dispatch` (panel.io.document._dispatch_msgs), made to send what was queued while it
    was writing.

    Panel queues a page's messages while its socket is busy and a dispatch task sends them. A task that finds the
    socket still locked requeues its messages and tries again 10 ms later; if the task that held the socket finishes
    meanwhile, it clears the queue's busy mark and the retry gives up, leaving the messages queued until the page's
    next change. A slider move's report, published just then, never reached the browser while it was the last one
    (docs/dashboard.md, "A move's report lost in Panel's queue"). This wrapper dispatches again whatever is left.
    """
    from panel.io import document

    @functools.wraps(dispatch)
    async def dispatch_and_deliver_the_rest(doc):
        await dispatch(doc)
        if document._WRITE_MSGS.get(doc) and doc not in document._WRITE_BLOCK:
            document._WRITE_BLOCK[doc] = True
            document._dispatch_write_task(doc, dispatch_and_deliver_the_rest, doc)

    dispatch_and_deliver_the_rest.delivers_queued = True
    return dispatch_and_deliver_the_rest


def deliver_every_queued_message() -> bool:
    """Use `delivering_queued` for Panel's dispatcher (once per process); whether it is in use."""
    _checked_release()
    from panel.io import document

    needed = ("_dispatch_msgs", "_WRITE_MSGS", "_WRITE_BLOCK", "_dispatch_write_task")
    if not all(hasattr(document, name) for name in needed):
        return _not_applied("deliver_every_queued_message", "panel.io.document." + "/".join(needed))
    if not getattr(document._dispatch_msgs, "delivers_queued", False):
        document._dispatch_msgs = delivering_queued(document._dispatch_msgs)
    return True


class LiveDiscreteSlider(pn.widgets.DiscreteSlider):
    """A DiscreteSlider whose moves reach the Python side at once.

    Panel holds every widget event back 50 ms (a debounce) unless the property is a priority
    change (`_priority_changes`, private); for the buffer slider that was half of the time a move took to show.
    """

    def _update_options(self, *events):
        super()._update_options(*events)
        if hasattr(self._slider, "_priority_changes"):
            self._slider._priority_changes = ["value", "value_throttled"]  # the inner IntSlider, made anew here
        else:
            _not_applied("LiveDiscreteSlider", "Widget._priority_changes")

    def _update_value(self, event):
        # The label follows the handle in the browser (Panel links them in JavaScript). Setting it here as well
        # sent each drag step's label back after the handle had moved on, so it flickered to older values.
        with param.parameterized.discard_events(self._text):
            super()._update_value(event)


class ModelDropper(pn.widgets.FileDropper):
    """Panel's FileDropper: the file comes in chunks (a 200 MB model in one websocket message would need the server's
    message limit raised), with FilePond's progress bar; `progress` also follows the chunks that reached the server
    (the browser's bar counts what it handed to the websocket, ahead of that). Reads the private `_rename` and
    `_process_event`'s upload events."""

    progress = param.Tuple(default=("", 0.0), doc="(file name, fraction of its chunks received) of the last upload")

    _rename = {**pn.widgets.FileDropper._rename, "progress": None}  # the server's alone, not the browser's

    def _process_event(self, event):
        if event.event_name == "upload_event":  # before the last chunk makes the file the value
            self.progress = (event.data["name"], event.data["chunk"] / event.data["total_chunks"])
        super()._process_event(event)


class Fast(pn.theme.Fast):
    """Panel's Fast design without its web font (the private `_resources`), which the browser would fetch from
    outside the machine: everything the page needs is served by the dashboard's own server, so it works offline.
    (Named as Panel's: Panel finds a design's own files by its class name.)"""

    _resources = {**pn.theme.Fast._resources, "font": {}}


def make_models_ahead(frame: pn.layout.ListLike, views: list, doc) -> int:
    """Make the Bokeh models of `views`, about to be added to `frame` (a layout already in `doc`), without adding
    them; how many views got models. Run off the event loop's thread (`dashboard.pieces`): when the loop then adds
    the views, Panel finds each one's model made for the frame's root and reuses it, so the loop only attaches them.

    Panel makes a new child's models as it adds it (`ListLike._get_objects`, which reuses the models a view already
    has for the root, `Viewable._models`), on the thread that changes the layout; a Bokeh document takes changes
    only on the loop's, under its lock. Making a piece's models was about half of the loop's time per piece
    (docs/dashboard.md, "A room of users"). Reads the private `_models`, `_get_model` and `state._views`.
    """
    _checked_release()
    from panel.io.state import set_curdoc, state

    models = getattr(frame, "_models", None)
    if not isinstance(models, dict) or not all(hasattr(view, "_get_model") for view in views) \
            or not isinstance(getattr(state, "_views", None), dict):
        _not_applied("make_models_ahead", "Viewable._models/_get_model or state._views")
        return 0
    made = 0
    with set_curdoc(doc):
        for ref, (parent, _) in list(models.items()):
            view = state._views.get(ref)
            if view is None or view[2] is not doc:  # the frame's model in another document (a notebook's, a test's)
                continue
            for child in views:
                if ref not in child._models:
                    child._get_model(doc, view[1], parent, None)
                    made += 1
    return made


class _SnapshotRegistry(weakref.WeakKeyDictionary):
    """A weak-keyed dictionary whose iterations go over a copy of its entries taken in one step, under the guard
    its own iterations hold (a key collected meanwhile is dropped after): another thread may add entries while one
    iterates, which a WeakKeyDictionary's iterations refuse ("dictionary changed size during iteration")."""

    def _entries(self) -> list:
        with _IterationGuard(self):
            return [(key, value) for ref, value in list(self.data.items()) if (key := ref()) is not None]

    def items(self):  # type: ignore[override]
        return self._entries()

    def keys(self):  # type: ignore[override]
        return [key for key, _ in self._entries()]

    def values(self):  # type: ignore[override]
        return [value for _, value in self._entries()]

    def __iter__(self):
        return iter(self.keys())


def share_the_link_registry_between_threads() -> bool:
    """Let the page-building thread (`dashboard.pieces`) make widgets while the event loop updates a page; whether
    it was applied. Panel keeps every JavaScript link in one process-wide weak-keyed dictionary
    (`panel.links.Callback.registry`): a DiscreteSlider adds its own as it is made, and each layout change walks all
    of them (`Callback._process_callbacks`). When the builder made one page's buffer slider while the loop added
    another page's piece, the walk failed with "dictionary changed size during iteration" and that page never
    showed its report (a CI run, two cold pages at once)."""
    _checked_release()
    from panel.links import Callback

    registry = vars(Callback).get("registry")
    if isinstance(registry, _SnapshotRegistry):
        return True
    if not isinstance(registry, weakref.WeakKeyDictionary):
        return _not_applied("share_the_link_registry_between_threads", "panel.links.Callback.registry")
    Callback.registry = _SnapshotRegistry(registry)
    return True


@contextmanager
def walking_only_new_models(doc) -> Iterator[None]:
    """Changes to `doc` (a Bokeh document) that Bokeh takes in with one walk of the new models only, not the whole
    document, when none of them drops a model; with one walk of the whole document otherwise.

    After each change that puts models in the document (a piece of the page added to its frame, a report's views
    set), Bokeh walks every model reachable from the roots to find those it must attach (`DocumentModelManager
    .recompute`, 0.022-0.028 CPU s for a whole page: a third to a half of a piece's turn of the event loop;
    docs/dashboard.md, "A room of users"). While this is held, the document's changes are recorded as Bokeh announces
    them (`callbacks.notify_change`, with the old and new values), wherever in the document Panel makes them (its link
    preprocessing and its design's stylesheets reach models outside the piece too), and the walk is deferred to the
    end (`models.freeze`). Then, if every change only added references and the roots are the same, what was
    reachable still is, and the models to attach are those reachable from the changes' new values that the document
    does not hold yet: only they are walked. Otherwise (a model dropped somewhere) Bokeh's own walk runs. Reads the
    private `_models`, `_models_by_name`, `_new_models` and `_document` of Bokeh's `DocumentModelManager`.
    """
    _checked_release()
    models, callbacks = doc.models, doc.callbacks
    if not all(hasattr(models, name) for name in ("_models", "_models_by_name", "_new_models", "_document",
                                                   "recompute", "freeze")) \
            or not callable(getattr(callbacks, "notify_change", None)):
        _not_applied("walking_only_new_models", "DocumentModelManager._models/_models_by_name/_new_models")
        with doc.models.freeze():
            yield
        return
    if "recompute" in vars(models):  # already held further out: that one walks at its end
        yield
        return
    added: list = []  # the new values of changes that only added references
    dropped = False  # whether a change dropped a model
    roots = list(doc.roots)

    def recording(model, attr, old, new, hint=None, setter=None, callback_invoker=None):
        nonlocal dropped
        if hint is None:  # a hinted change (columns streamed or patched) carries data, never models
            before, after = _immediate_models(old), _immediate_models(new)
            if before:
                dropped = dropped or not before <= after
            if after:
                added.append(new)
        notify(model, attr, old, new, hint, setter, callback_invoker)

    def recompute():
        if dropped or list(doc.roots) != roots:
            walk_all()
        else:
            _attach_new(models, added)
        added.clear()

    notify, walk_all = callbacks.notify_change, models.recompute
    callbacks.notify_change, models.recompute = recording, recompute
    try:
        with models.freeze():  # the walk once, at the end: with our `recompute` in place
            yield
    finally:
        del callbacks.notify_change, models.recompute


def _immediate_models(value) -> set:
    """The ids of the Bokeh models `value` (a property's value) refers to directly."""
    from bokeh.model.util import visit_value_and_its_immediate_references

    ids: set = set()
    visit_value_and_its_immediate_references(value, lambda model: ids.add(model.id))
    return ids


def _attach_new(models, values: list) -> None:
    """Attach to the document of `models` (its `DocumentModelManager`) every model reachable from `values` that it
    does not hold yet, as Bokeh's `recompute` does for the models it finds new, walking no model it holds."""
    from bokeh.model.util import collect_filtered_models

    doc = models._document()
    if doc is None:
        return
    held = models._models
    for model in collect_filtered_models(lambda model: model.id in held, *values):
        held[model.id] = model
        if model.name is not None:
            models._models_by_name.add_value(model.name, model)
        model._attach_document(doc)
        models._new_models.add(model)


def _wrapping_bokehjs(module: str, cls: str, method: str, guard: str, wrapper: str) -> str:
    """A page script that replaces BokehJS's `cls.prototype.method` (from `module`) once by `wrapper`, a function
    expression that may call `original`; when the release has no such method, the console says `guard` is off."""
    return f"""
let Class = null;
try {{ Class = Bokeh.require("{module}").{cls}; }} catch (error) {{ }}
if (Class == null || typeof Class.prototype.{method} !== "function") {{
  console.warn("dashboard: {guard} is not applied (BokehJS has no {cls}.{method})");
}} else if (!Class.prototype.{method}.guarded) {{
  const original = Class.prototype.{method};
  const guarded = {wrapper.strip()};
  guarded.guarded = true;
  Class.prototype.{method} = guarded;
}}
"""


# BokehJS chains every view's asynchronous update into its root view's `ready` promise (`View._await_ready`), so one
# update that fails leaves the root's `ready` rejected for good. Panel 1.9's Tabulator, after a resize, waits for that
# promise in a loop that, on a rejection, asks again at once (`_request_resize_redraw`, a `finally`): a loop of
# microtasks that never gives the page back. The tab froze at 100 % CPU; it was the rare cold load that never ended
# (docs/dashboard.md, "The frozen tab"). The guard lets a failed update end in the console, not in `ready`.
READY_GUARD_JS = _wrapping_bokehjs("core/view", "View", "_await_ready", "the views' ready guard", """
  function (promise) {
    return original.call(this, Promise.resolve(promise).catch((error) => {
      console.error("dashboard: a view's update failed (the page goes on without it):", error);
    }));
  }""")


# FilePond (the upload box Panel's FileDropper is made of) paints by `requestAnimationFrame` from the moment its script
# runs, every frame, forever, page or no drop box: a settled page's renderer spent 0.8 s of tasks in 10 s on it (600
# frames, 600 style recalculations; BENCHMARKS.md, "what keeps a settled page's renderer busy"). When the page already
# has a `window.__framePainter`, FilePond 4 adds its reader and writer to it and starts no loop of its own (the test
# in tests/test_panel_hooks.py fails if the bundled FilePond no longer does). This painter calls them every frame
# only while there is work: for BUSY_MS after an input, a click, a key, a drag or drop, a paste, or an event of
# FilePond's own (an upload's progress, a file added or refused); otherwise every IDLE_MS, where FilePond takes in
# what came meanwhile (its action queue is processed in the painter's tick) and whose events wake it again.
FRAME_PAINTER_JS = """
(() => {
  if (window.__framePainter) return;
  const BUSY_MS = 2000, IDLE_MS = 500;
  const painter = {readers: [], writers: [], busyUntil: 0, ticks: 0};
  let frame = null, timer = null;
  const busy = () => performance.now() < painter.busyUntil;
  const tick = (time) => {
    frame = timer = null;
    painter.ticks += 1;
    painter.readers.forEach((read) => read());
    painter.writers.forEach((write) => write(time));
    schedule();
  };
  const schedule = () => {
    if (frame !== null || timer !== null) return;
    if (busy() && !document.hidden) frame = window.requestAnimationFrame(tick);
    else timer = window.setTimeout(() => tick(performance.now()), busy() ? 1000 / 60 : IDLE_MS);
  };
  const reschedule = () => {
    if (frame !== null) window.cancelAnimationFrame(frame);
    if (timer !== null) window.clearTimeout(timer);
    frame = timer = null;
    schedule();
  };
  const wake = () => {
    const idle = !busy();
    painter.busyUntil = performance.now() + BUSY_MS;
    if (idle) reschedule();
  };
  for (const type of ["input", "pointerdown", "keydown", "dragenter", "dragover", "drop", "paste"])
    window.addEventListener(type, wake, {capture: true, passive: true});
  for (const type of ["init", "warning", "error", "initfile", "addfilestart", "addfileprogress", "addfile",
                      "processfilestart", "processfileprogress", "processfileabort", "processfile", "processfiles",
                      "removefile", "updatefiles", "activatefile"])
    window.addEventListener("FilePond:" + type, wake, {passive: true});
  document.addEventListener("visibilitychange", reschedule);
  window.__framePainter = painter;
  schedule();
})();
"""


def paint_filepond_only_when_busy(template: pn.template.BaseTemplate) -> bool:
    """Have `template`'s page define FRAME_PAINTER_JS in its head before FilePond's script runs, so FilePond ticks
    only while there is work; whether it was applied. Replaces the template's Jinja template (public, `.template`)
    with one extending it whose `preamble` block, above the page's scripts, holds the painter (the Jinja template's
    `name` is Panel's loader's)."""
    from panel.io.resources import parse_template

    name = getattr(template.template, "name", None)  # Jinja's name of a file of Panel's templates, as Panel loads it
    if not isinstance(name, str) or not name.endswith(".html"):
        return _not_applied("paint_filepond_only_when_busy", "BaseTemplate.template loaded from a file")
    template.template = parse_template(
        f'{{% extends "{name}" %}}{{% block preamble %}}{{{{ super() }}}}'
        f"<script>{FRAME_PAINTER_JS}</script>{{% endblock %}}")
    return True


def keep_views_ready_after_a_failed_update(doc) -> None:
    """Have the page of `doc` catch each view's failed asynchronous update where BokehJS would chain it into the root
    view's `ready` promise (READY_GUARD_JS), from the document's first render on. The browser's console says when
    BokehJS has no such method (another release): the guard is then off and the page as Bokeh made it."""
    _on_first_render(doc, READY_GUARD_JS)


# BokehJS's text glyph lays its labels out (`Text.after_visuals`) with the colours and fonts of the rows its renderer
# shows. Its labels are made asynchronously (`_set_lazy_data`, awaited in `set_data`), so when the renderer's rows
# change twice in one message (the DAG's outline source set or patched, and its view filter's rows recomputed for a
# moved view), a layout can run with the rows and colours of the second change and the labels of the first: more
# labels than colours, and `RangeError: Offset is outside the bounds of the DataView` (22 of 99 stress pages;
# docs/dashboard.md, "The frozen tab"). Such a layout is skipped: the latest change lays its own labels out once they
# are made.
TEXT_GUARD_JS = _wrapping_bokehjs("models/glyphs/text", "TextView", "after_visuals", "the text labels' guard", """
  function () {
    const labels = this.labels;
    if (labels != null && labels.length !== this.data_size) return;  // an earlier change's labels: laid out later
    return original.call(this);
  }""")


def lay_text_out_with_its_own_labels(doc) -> None:
    """Have the page of `doc` skip a text glyph's layout whose labels are an earlier change's (TEXT_GUARD_JS), from
    the document's first render on. The browser's console says when BokehJS has no such method (another release)."""
    _on_first_render(doc, TEXT_GUARD_JS)


def _on_first_render(doc, code: str) -> None:
    """Run the script `code` in the page of `doc` once its document is first rendered (Bokeh's `document_ready`)."""
    from bokeh.models import CustomJS

    doc.js_on_event("document_ready", CustomJS(code=code))
