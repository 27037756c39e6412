"""Each hook of dashboard/panel_hooks.py against the installed Panel and Bokeh: it is applied, it does what it is
for, and where Panel has no such private name it changes nothing and says so in the log."""

import contextlib
import inspect
import logging
from collections import defaultdict
from types import SimpleNamespace

import pandas as pd
import panel as pn
import pytest
from bokeh.core.templates import MACROS
from bokeh.document import Document
from bokeh.models import ImportedStyleSheet
from panel.io.resources import CDN_DIST

from dashboard import panel_hooks


def test_panel_is_a_release_the_hooks_were_checked_on():
    assert ".".join(pn.__version__.split(".")[:2]) in panel_hooks.CHECKED


def _stylesheet_urls(doc: Document) -> list[str]:
    """The address of every stylesheet a dark-theme Tabulator, an alert and a Markdown pane give `doc`'s models."""
    page = pn.Column(pn.widgets.Tabulator(pd.DataFrame({"a": [1, 2]}), theme="fast"), pn.pane.Alert("x"),
                     pn.pane.Markdown("y"), design=panel_hooks.Fast(theme="dark"))
    root = page.get_root(doc)
    return [str(sheet.url) for sheet in root.select({"type": ImportedStyleSheet})]


def test_stylesheets_come_from_this_server_once_the_document_says_where_its_files_are():
    cdn = _stylesheet_urls(Document())  # what Panel does before it writes the page (and after, for late models)
    assert any(url.startswith(CDN_DIST) for url in cdn)
    doc = Document()
    assert panel_hooks.serve_stylesheets_locally(doc)
    local = _stylesheet_urls(doc)
    assert len(local) >= 3 and not [url for url in local if url.startswith("http")], local
    assert all(url.startswith("static/extensions/panel/") for url in local), local


def test_a_hook_whose_private_name_is_gone_changes_nothing_and_says_so(caplog, monkeypatch):
    from panel.links import Callback

    monkeypatch.setattr(Callback, "registry", {})  # a release that keeps its links otherwise
    with caplog.at_level(logging.WARNING, logger="dashboard.panel_hooks"):
        assert not panel_hooks.serve_stylesheets_locally(SimpleNamespace())
        assert panel_hooks.send_frames_at_once(SimpleNamespace(session_context=SimpleNamespace(session=object()))) == 0
        assert not panel_hooks.share_the_link_registry_between_threads()
    assert Callback.registry == {}
    assert [r.message.split(" not applied")[0] for r in caplog.records] == [
        "serve_stylesheets_locally", "send_frames_at_once", "share_the_link_registry_between_threads"]


def test_frames_go_out_at_once_on_every_socket_of_the_session():
    nodelay = []
    socket = SimpleNamespace(set_nodelay=nodelay.append)
    session = SimpleNamespace(_subscribed_connections=[SimpleNamespace(_socket=socket)] * 2)
    assert panel_hooks.send_frames_at_once(SimpleNamespace(session_context=SimpleNamespace(session=session))) == 2
    assert nodelay == [True, True]
    # Bokeh keeps them where the hook looks: a server session's connections, and each connection's websocket
    from bokeh.server.connection import ServerConnection
    from bokeh.server.session import ServerSession

    assert "self._subscribed_connections" in inspect.getsource(ServerSession.__init__)
    assert "self._socket = socket" in inspect.getsource(ServerConnection.__init__)
    from tornado.websocket import WebSocketHandler

    assert callable(WebSocketHandler.set_nodelay)


def test_panels_dispatcher_is_wrapped_once():
    from panel.io import document

    assert panel_hooks.deliver_every_queued_message()
    wrapped = document._dispatch_msgs
    assert wrapped.delivers_queued
    assert panel_hooks.deliver_every_queued_message() and document._dispatch_msgs is wrapped  # not twice


@pytest.mark.parametrize("name", ["_priority_changes", "_rename", "_process_event", "_resources"])
def test_the_widget_hooks_find_panels_private_names(name):
    owner = {"_priority_changes": pn.reactive.Syncable, "_rename": pn.widgets.FileDropper,
             "_process_event": pn.widgets.FileDropper, "_resources": pn.theme.Fast}[name]
    assert hasattr(owner, name)


def test_models_made_ahead_in_another_thread_are_the_ones_the_page_shows():
    import threading

    doc = Document()
    frame = pn.Column()
    page = pn.Column(frame)
    root = page.get_root(doc)
    doc.add_root(root)
    views = [pn.pane.Markdown("a"), pn.widgets.IntInput(value=3), pn.Row(pn.pane.Markdown("b"))]
    made: list = []
    thread = threading.Thread(target=lambda: made.append(panel_hooks.make_models_ahead(frame, views, doc)))
    thread.start()
    thread.join(30)
    assert made == [3]
    ahead = [view._models[root.ref["id"]][0] for view in views]
    assert all(model.document is None for model in ahead)  # made, not yet in the page
    frame.extend(views)
    shown = frame._models[root.ref["id"]][0].children
    assert shown == ahead and all(model.document is doc for model in ahead)
    assert shown[1].value == 3 and "&lt;p&gt;b&lt;/p&gt;" in shown[2].children[0].text
    # a frame whose model is in another document is left alone
    assert panel_hooks.make_models_ahead(pn.Column(), [pn.pane.Markdown("c")], doc) == 0


def test_a_slider_made_in_the_builder_thread_while_the_loop_walks_panels_links_breaks_neither(monkeypatch):
    """The CI failure: a page's buffer slider (a DiscreteSlider: Panel adds its JavaScript link to one process-wide
    registry as it is made) made in the page-building thread while the loop, adding another page's piece, walked
    that registry: "dictionary changed size during iteration", and that page never showed its report. Once the
    server has its builder, a walk finishes over the entries it began with, the new one there for the next."""
    import weakref

    from panel.links import Callback

    from dashboard.pieces import _builder

    def walk_with_a_slider_made_midway(registry) -> list:
        walk = iter(registry.values())
        next(walk)
        sliders.append(pn.widgets.DiscreteSlider(options=[1, 2, 3]))  # the other thread's slider, made meanwhile
        return list(walk)

    sliders = [pn.widgets.DiscreteSlider(options=[1, 2]) for _ in range(3)]
    with monkeypatch.context() as patched:  # Panel's own registry, as it was
        patched.setattr(Callback, "registry", weakref.WeakKeyDictionary(vars(Callback)["registry"]))
        with pytest.raises(RuntimeError, match="changed size during iteration"):
            walk_with_a_slider_made_midway(Callback.registry)
    _builder()
    before = len(Callback.registry)
    rest = walk_with_a_slider_made_midway(Callback.registry)
    assert len(rest) == before - 1 and len(Callback.registry) == before + 1
    assert all(slider._slider in Callback.registry for slider in sliders[:3] + sliders[-1:])
    assert sorted(map(id, Callback.registry)) == sorted(map(id, Callback.registry.keys()))
    assert [link for links in Callback.registry.values() for link in links] \
        == [link for _, links in Callback.registry.items() for link in links]


def _page_with_a_frame():
    """(document, slider already in it, empty frame in it, the page's root): a page's shell as a server holds it."""
    doc = Document()
    slider, frame = pn.widgets.IntSlider(start=0, end=9), pn.Column()
    root = pn.Column(slider, frame).get_root(doc)
    doc.add_root(root)
    return doc, slider, frame, root


def _reachable(doc: Document) -> set:
    """The ids of the models Bokeh's own walk of the whole document finds."""
    return {model.id for root in doc.roots for model in root.references()}


def test_a_piece_attached_by_walking_only_its_new_models_leaves_the_document_as_a_full_walk_would(monkeypatch):
    from bokeh.document.models import DocumentModelManager
    from bokeh.models import CustomJS

    doc, slider, frame, root = _page_with_a_frame()
    target = pn.widgets.IntInput(value=3)
    slider.jslink(target, value="value")  # Panel adds its CustomJS to the slider's model, outside the piece
    walks = []
    monkeypatch.setattr(DocumentModelManager, "recompute",
                        lambda self, walk=DocumentModelManager.recompute: walks.append(len(self)) or walk(self))
    held = len(doc.models)
    with panel_hooks.walking_only_new_models(doc):
        frame.extend([target, pn.pane.Markdown("a")])
    assert walks == []  # no walk of the whole document
    assert {model.id for model in doc.models} == _reachable(doc) and len(doc.models) > held
    link = slider._models[root.ref["id"]][0].js_property_callbacks["change:value"][0]
    assert isinstance(link, CustomJS) and link.document is doc
    assert link in doc.models._new_models  # sent whole with the piece's message
    assert link not in frame._models[root.ref["id"]][0].references()  # found only through the slider's change
    assert all(model.document is doc for model in doc.models)


def test_changes_that_drop_a_model_are_taken_in_by_bokehs_own_walk():
    doc, slider, frame, root = _page_with_a_frame()
    old = pn.pane.Markdown("old")
    frame.append(old)
    old_model = old._models[root.ref["id"]][0]
    with panel_hooks.walking_only_new_models(doc):
        frame[:] = [pn.pane.Markdown("new")]
    assert {model.id for model in doc.models} == _reachable(doc)
    assert old_model.document is None and old_model.id not in {model.id for model in doc.models}


def test_walking_only_new_models_without_bokehs_private_names_changes_nothing_and_says_so(caplog):
    changed = []
    elsewhere = SimpleNamespace(models=SimpleNamespace(freeze=contextlib.nullcontext), callbacks=SimpleNamespace())
    with caplog.at_level(logging.WARNING, logger="dashboard.panel_hooks"):
        with panel_hooks.walking_only_new_models(elsewhere):
            changed.append(True)
    assert changed == [True] and vars(elsewhere.models) == {"freeze": contextlib.nullcontext}
    assert [r.message.split(" not applied")[0] for r in caplog.records] == ["walking_only_new_models"]


def test_the_ready_guard_runs_on_the_page_and_the_installed_bokehjs_has_what_it_wraps():
    """READY_GUARD_JS wraps BokehJS's `View._await_ready` and Panel's Tabulator is the loop it stops: both must be in
    the installed releases' scripts (an upgrade that renames them turns the guard off; the console would say so)."""
    from pathlib import Path

    import bokeh

    doc = Document()
    panel_hooks.keep_views_ready_after_a_failed_update(doc)
    codes = [callback.code for callbacks in doc.callbacks._js_event_callbacks.values() for callback in callbacks]
    assert codes == [panel_hooks.READY_GUARD_JS] and list(doc.callbacks._js_event_callbacks) == ["document_ready"]
    bokehjs = (Path(bokeh.__file__).parent / "server/static/js/bokeh.js").read_text()
    assert "_await_ready(promise) {" in bokehjs and 'require(' in bokehjs and "class View {" in bokehjs
    tabulator = (Path(pn.__file__).parent / "dist/panel.js").read_text()
    assert "await this.root.ready;" in tabulator  # the wait a rejected `ready` turned into a loop


def test_the_frame_painter_is_in_the_pages_head_before_filepond_and_the_bundled_filepond_joins_it(caplog):
    """FRAME_PAINTER_JS must run before FilePond's script, and the FilePond that Panel bundles must add its reader and
    writer to a `window.__framePainter` it finds rather than start its own endless loop (FilePond 4's `createPainter`):
    an upgrade that changes either turns the painter into dead weight and the loop is back."""
    from pathlib import Path

    template = pn.template.FastListTemplate(title="x")
    assert panel_hooks.paint_filepond_only_when_busy(template)
    html = template.template.render(macros=MACROS, bokeh_js='<script src="filepond.min.js"></script>',
                                    roots=defaultdict(str), meta_name="x", style=defaultdict(str), plot_script="",
                                    template_resources={"css": {}, "raw_css": [], "js": {}, "js_modules": {}})
    assert html.index("window.__framePainter = painter") < html.index("filepond.min.js") < html.index("</head>")
    assert html.index('<meta name="name" content="x">') < html.index("__framePainter")  # Panel's preamble kept
    assert "--sidebar-width" in html  # Panel's Fast list template around it
    bundled = Path(pn.__file__).parent / "dist/bundled/filedropper/filepond@^4/dist/filepond.min.js"
    filepond = bundled.read_text()
    assert filepond.split("\n")[1].strip() == "* FilePond 4.32.12"
    assert ('r="__framePainter";if(window[r])return window[r].readers.push(e),void window[r].writers.push(t)'
            in filepond)  # the painter found is used, and FilePond's own loop is not started
    assert "t._write(e)" in filepond and "e._read()" in filepond  # its writer takes the frame's time, its reader none
    with caplog.at_level(logging.WARNING, logger="dashboard.panel_hooks"):
        assert not panel_hooks.paint_filepond_only_when_busy(SimpleNamespace(template=object()))
    assert [r.message.split(" not applied")[0] for r in caplog.records] == ["paint_filepond_only_when_busy"]


def test_the_text_guard_runs_on_the_page_and_the_installed_bokehjs_has_the_race_it_skips():
    """TEXT_GUARD_JS wraps BokehJS's `Text.after_visuals`, which lays out `this.labels` (made after an await) with the
    visuals of `data_size` rows (set before it): the installed release must still have both, in that order."""
    from pathlib import Path

    import bokeh

    doc = Document()
    panel_hooks.lay_text_out_with_its_own_labels(doc)
    codes = [callback.code for callbacks in doc.callbacks._js_event_callbacks.values() for callback in callbacks]
    assert codes == [panel_hooks.TEXT_GUARD_JS] and list(doc.callbacks._js_event_callbacks) == ["document_ready"]
    bokehjs = (Path(bokeh.__file__).parent / "server/static/js/bokeh.js").read_text()
    text = bokehjs[bokehjs.index("class TextView extends xy_glyph_1.XYGlyphView {"):]
    layout = text[text.index("after_visuals() {"):text.index("_paint(ctx, indices, data) {")]
    assert "const n = this.data_size;" in layout and "(this.labels)" in layout
    assert "label.visuals = this.visuals.text.values(i);" in layout
    set_data = bokehjs[bokehjs.index("async set_data(source, indices, indices_to_update) {"):]
    assert set_data.index("this._data_size = indices.count;") < set_data.index("await this._set_lazy_data(")
