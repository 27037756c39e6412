"""A server's page as its HTML request builds it (the shell, on the event loop) and as its pieces then fill it."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from dashboard import pieces
from dashboard.app import FUSION_PIECES, build_app
from dashboard.panel_hooks import ModelDropper
from dashboard.tabs.fusion import DagPlot


class ServedContext:
    """A page's session context, as far as the dashboard reads it (Bokeh's document keeps a weak reference)."""

    destroyed = False
    request = SimpleNamespace(arguments={"network": [b"resnet18"]}, headers={}, cookies={})


def served_page():
    """(template, the session, the page's pieces) of `build_app` run for a served document, as Bokeh's server runs
    the app script; the pieces not made yet (they wait for the browser: `pn.state.onload`)."""
    doc, context = Document(), ServedContext()
    doc._session_context = weakref.ref(context)
    with set_curdoc(doc):
        template = build_app()
    callbacks = [callback for callback, _ in pn.state._onload.pop(doc)]
    session = next(c.__self__ for c in callbacks if getattr(c, "__name__", "") == "_request")
    built = next(c for c in callbacks if getattr(c, "func", None) is pieces.build)
    return template, session, built.args[1], context


def following(session) -> int:
    """How many views follow the session's report."""
    return sum(len(w) for w in session.param.watchers.get("report", {}).values())


def test_a_pages_shell_holds_the_upload_box_and_the_dags_preparers_and_its_pieces_make_the_rest():
    template, session, page_pieces, context = served_page()
    (side,), (holder,) = template.sidebar.objects, template.main.objects
    # the upload box (FilePond's page-wide options reach only the boxes there when the page is ready) below an empty
    # frame for the network box; the main area is a piece's
    assert len(side) == 2 and len(side[0]) == 0 and isinstance(side[1], ModelDropper) and len(holder) == 0
    # the Fusion tab's DAG and its preparers in the shell: the first report makes their data beside it
    assert len(session.preparers) == 3
    dags = {cell.cell_contents for p in session.preparers for cell in getattr(p, "__closure__", None) or ()
            if isinstance(cell.cell_contents, DagPlot)}
    (dag,) = dags
    assert not following(session)  # no tab made yet: the HTML request, on the event loop, builds none of them
    for piece in page_pieces:  # made and shown at once, as outside a server
        piece()
    (area,) = holder
    tabs = area[1]
    assert list(tabs._names) == ["Fusion", "What-if curve", "Memory timeline", "Tables", "Sweep"]
    fusion = tabs[0]
    assert len(fusion) == FUSION_PIECES[-1] and len(side) > 2 and len(side[0]) == 4
    assert following(session) >= 2  # the Fusion tab and the what-if curve show each report
    assert len(session.preparers) == 3  # the tab uses the shell's DAG: no second drawing made per report
    assert any(dag.pane in row.objects for row in fusion if isinstance(row, pn.Row))
    assert all(len(frame) > 0 for frame in tabs)
    context.destroyed = True
