"""The dashboard page for one browser session: the sidebar of choices, the tabs, and the URL that mirrors them.

How a choice becomes a report is `dashboard.session`; each tab is a module of dashboard/tabs/.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import partial

import panel as pn
from bokeh.models import CustomJS

import engine
from dashboard import uploads, url
from dashboard.panel_hooks import (
    Fast,
    LiveDiscreteSlider,
    ModelDropper,
    keep_views_ready_after_a_failed_update,
    lay_text_out_with_its_own_labels,
    paint_filepond_only_when_busy,
    serve_stylesheets_locally,
)
from dashboard.pieces import Piece, build
from dashboard.session import MAX_UPLOAD_BYTES, Session
from dashboard.state import ExplorerState
from dashboard.tabs.common import toggles
from dashboard.tabs.compare import ComparePanel
from dashboard.tabs.curve import curve_tab
from dashboard.tabs.fusion import DagPlot, FusionTab, fusion_dag
from dashboard.tabs.guide import guide
from dashboard.tabs.sweep import SweepTab
from dashboard.tabs.tables import tables_tab
from dashboard.tabs.timeline import timeline_tab
from dashboard.views import FONT
from engine import zoo

UPLOAD_CHUNK_BYTES = 4 * 2**20  # an upload's chunk: one websocket message each, well under Bokeh's 20 MB limit
URL_PARAMS = ("network", "upload_name", "input_shapes", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
              "methods", "access_model", "objective", "alloc_method", "budget", "budget_kb", "cpu_kinds", "colour_by", "selected_op")


# why the RF box changes nothing under the default access model (defect 10)
RF_HINT = ("*mapping*: one mapping of each plan down to the MACs (each fused group's row bands, each op's loop nest "
           "below the buffer). *blocking*: each layer's best loop blocking alone for this RF and buffer (Yang et al.). "
           "*dataflow*: the PE array's fixed dataflow blocks; RF bytes per PE are not used. *Plans minimise*: DRAM "
           "bytes (the searches' optimum), or the energy, latency or energy-delay product of their mapping "
           "(mapping only).")


def checked(widget: pn.widgets.Widget, session: Session, name: str, shown=None) -> pn.widgets.Widget:
    """`widget` edits the state's `name`; a value the state refuses is named in the status line (as a bad URL value
    is) and the box shows the state's value again, instead of keeping a value that changes nothing. `shown()` is what
    the box says when it is not the value (the network box: an upload's name); setting it is not an edit."""
    s = session.state
    shown = shown or (lambda: getattr(s, name))

    def typed(event):
        if event.new == shown():  # the page's own words (`shown`), not an edit
            return
        try:
            s.param.update(**{name: event.new})
        except Exception:
            session.refused = url.rejected(s, name, f"{s.param[name].label} {event.new!r}")
            # set after Panel's handling of the browser's message: a change made during it is not sent back
            pn.state.execute(lambda: setattr(widget, "value", shown()), schedule=Session._served())

    widget.param.watch(typed, "value")
    s.param.watch(lambda e: setattr(widget, "value", shown()), name)
    return widget


def network_box(session: Session) -> pn.widgets.AutocompleteInput:
    """The network box: a zoo network's name, typed or chosen; the uploaded file in use; the upload under way."""
    s = session.state

    def shown() -> str:
        if session.uploading:
            return session.uploading
        return f"{s.upload_name.rpartition('/')[2]} (uploaded)" if s.upload_name else s.network

    # not restricted to the options: a restricted box keeps a mistyped name on screen and never says it is unknown
    box = checked(pn.widgets.AutocompleteInput(
        label="Network (type to search)", value=shown(), options=list(s.param.network.objects), restrict=False,
        min_characters=0, case_sensitive=False, search_strategy="includes"), session, "network", shown)

    def chosen(event):  # the network in use typed again replaces the upload (a new name does so by itself)
        if event.new == s.network and event.new != shown():
            s.upload_name = ""

    box.param.watch(chosen, "value")
    s.param.watch(lambda e: setattr(box, "value", shown()), "upload_name")
    session.param.watch(lambda e: setattr(box, "value", shown()), "uploading")
    return box


# FilePond's own check of a file's size, in the browser: an empty file is refused in the drop box (FilePond said
# "Upload complete" while the server refused it). `FilePond.setOptions` is its public page-wide setting, which
# reaches the boxes made before it too.
REFUSE_EMPTY_FILES_JS = ("if (window.FilePond) FilePond.setOptions({minFileSize: 1, labelMinFileSizeExceeded: "
                         "'The file is empty', labelMinFileSize: 'choose an .onnx model file'})")


LENGTH_LABELS = {"seq": "Sequence length (tokens)", "kv": "KV-cache length (tokens)"}  # by engine.zoo.LENGTHS suffix


def length_box(session: Session) -> pn.widgets.IntInput:
    """A language model's token count (a prefill's sequence length, a decode step's KV-cache length), shown for those
    alone. A count typed becomes part of the network's name (`llama3_8b_decode_kv4096`, as the engine names it), so
    the URL carries it; a count below 1 is named and the box shows the count in use again (as `checked`), and one
    over the model's context is the engine's to refuse (its message in the status line)."""
    s = session.state
    box = pn.widgets.IntInput(name=LENGTH_LABELS["seq"], value=1, visible=False)

    def follow(*_):
        named = None if s.upload_name else zoo.length(s.network)
        if named is not None:
            box.param.update(name=LENGTH_LABELS[named[1]], value=named[2], visible=True)
        else:
            box.visible = False

    def typed(event):
        named = zoo.length(s.network)
        if named is None or event.new == named[2]:
            return
        try:
            s.network = f"{named[0]}_{named[1]}{event.new}"
        except Exception:
            session.refused = f"{box.name} {event.new} is not allowed (a whole number, 1 or more); using {named[2]}"
            pn.state.execute(lambda: setattr(box, "value", named[2]), schedule=Session._served())

    box.param.watch(typed, "value")
    s.param.watch(follow, ["network", "upload_name"])
    follow()
    return box


def upload_box(session: Session) -> ModelDropper:
    """The .onnx upload: each chunk that arrives moves the network box's percentage; the whole file is imported; an
    empty file is refused in the box itself (REFUSE_EMPTY_FILES_JS)."""
    if pn.state.curdoc is not None:
        pn.state.curdoc.js_on_event("document_ready", CustomJS(code=REFUSE_EMPTY_FILES_JS))
    dropper = ModelDropper(multiple=False, chunk_size=UPLOAD_CHUNK_BYTES, layout="compact", sizing_mode="stretch_width",
                           max_file_size=f"{MAX_UPLOAD_BYTES // 2**20}MB")

    def arriving(event):
        name, fraction = event.new
        if fraction < 1:
            session.uploading = f"uploading {name}... {fraction:.0%}"

    def arrived(event):
        name = dropper.progress[0]
        if name in event.new:
            data = event.new[name]
            dropper.value = {}  # the session keeps the file from here; the widget holds no copy of it
            session.on_upload(data.encode() if isinstance(data, str) else data, name)

    dropper.param.watch(arriving, "progress")
    dropper.param.watch(arrived, "value")
    return dropper


def number_box(session: Session, name: str, widget_type=pn.widgets.IntInput, **kw) -> pn.widgets.Widget:
    """A number box for the state's `name` whose refused values are named (see `checked`).

    The box has no bounds of its own: bounded, the browser clamped a typed 0 to the bound, which was the value in use,
    so nothing reached the server and the box went on showing the 0 that nothing used."""
    p = session.state.param[name]
    return checked(widget_type(label=p.label, value=getattr(session.state, name), **kw), session, name)


def methods_box(session: Session) -> pn.widgets.CheckBoxGroup:
    """The fusion methods' check boxes; unchecking the last one is refused and named (see `checked`)."""
    s = session.state
    return checked(pn.widgets.CheckBoxGroup(name=s.param.methods.label, options=list(s.param.methods.objects),
                                            value=list(s.methods), inline=False), session, "methods")


def sidebar_network(session: Session) -> list:
    """The sidebar's first part: the network box, and what the upload box below it takes."""
    return [
        pn.pane.Markdown("#### Network"), network_box(session),
        length_box(session),
        pn.pane.Markdown(f"or upload an .onnx file (up to {MAX_UPLOAD_BYTES // 2**20} MB):"),
    ]


def sidebar_upload(session: Session) -> list:
    """The upload box, in the page's shell: FilePond's page-wide options (REFUSE_EMPTY_FILES_JS), set when the page
    is ready, reach only the drop boxes there by then (its minimum size is a plugin's option, known to FilePond once
    a drop box has registered the plugin: set before, it is dropped)."""
    return [upload_box(session)]


def sidebar_accelerator(session: Session) -> list:
    """The sidebar's second part: the input shapes and batch, and the accelerator's choices."""
    s = session.state
    buffer = LiveDiscreteSlider(label="On-chip buffer (KB, log scale)", options=s.param.buffer_kb.objects,
                                value=s.buffer_kb)
    buffer.param.watch(lambda e: setattr(s, "buffer_kb", e.new), "value_throttled")
    buffer.param.watch(lambda e: session.follow_drag(e.new, buffer.value_throttled), "value")

    def follow_state(event):  # a preset or a curve click moved the buffer; the slider's own moves are there already
        if buffer.options != s.param.buffer_kb.objects:  # a preset's own size among the steps, or no longer
            buffer.param.update(options=s.param.buffer_kb.objects, value=event.new)
        elif event.new != buffer.value:
            buffer.value = event.new

    s.param.watch(follow_state, "buffer_kb")
    return [
        pn.widgets.TextInput.from_param(s.param.input_shapes, placeholder="e.g. input_ids=1x128"),
        number_box(session, "batch"),
        pn.pane.Markdown("#### Accelerator"), pn.widgets.Select.from_param(s.param.preset), buffer,
        pn.Row(number_box(session, "pe_rows", width=110),
               number_box(session, "pe_cols", width=110)),
        number_box(session, "rf_bytes"),
        pn.widgets.Select.from_param(s.param.word_bits),
        number_box(session, "dram_gbps", pn.widgets.FloatInput),
    ]


def sidebar_methods(session: Session) -> list:
    """The sidebar's third part: the methods, what plans minimise, and the allocation's choices."""
    s = session.state
    return [
        pn.pane.Markdown("#### Methods"), methods_box(session),
        pn.pane.Markdown("Energy and latency from"),
        toggles(s.param.access_model),
        pn.pane.Markdown("Plans minimise"),
        toggles(s.param.objective),
        pn.pane.Markdown(RF_HINT, styles={"font-size": "12px"}),
        pn.pane.Markdown("#### Scratchpad allocation"),
        pn.widgets.Select.from_param(s.param.alloc_method),
        pn.widgets.Select.from_param(s.param.budget),
        number_box(session, "budget_kb"),
        pn.widgets.MultiChoice.from_param(s.param.cpu_kinds),
    ]


SIDEBAR = (sidebar_network, sidebar_upload, sidebar_accelerator, sidebar_methods)  # the shell holds the upload box


def sidebar(session: Session) -> list:
    """The sidebar's widgets: network, accelerator, methods and allocation choices."""
    return [widget for part in SIDEBAR for widget in part(session)]


def main_area(session: Session, dag: DagPlot | None = None) -> tuple[pn.Column, list]:
    """The status line above the tabs, in one card, each tab an empty frame; and the pieces that fill the frames
    (`dashboard.pieces`: a server's page gets them one at a time once the browser has it). The slow tabs compute only
    while they are shown. `dag`: the Fusion tab's, made before with its preparers (`fusion_dag`)."""
    # every tab stays in the page (not dynamic): Panel 1.9 gives a model changed while its dynamic tab is hidden
    # (out of the document) its stylesheets from its CDN, which the browser then fetched (docs/dashboard.md, "A room
    # of users"); the slow tabs compute only while shown all the same
    tabs = pn.Tabs(sizing_mode="stretch_width")
    active = tabs.param.active
    fusion = FusionTab(session, dag)
    fusion_views: list = []  # made by the first of its pieces, shown by each

    def fusion_part(first: int, end: int) -> list:
        if not fusion_views:
            fusion_views[:] = [guide("Fusion"), *fusion.parts(compare=ComparePanel(session).panel())]
        return fusion_views[first:end]

    views = {"What-if curve": lambda: [guide("What-if curve"), curve_tab(session, active, 1)],
             "Memory timeline": lambda: [guide("Memory timeline"), timeline_tab(session, active, 2)],
             "Tables": lambda: [guide("Tables"), tables_tab(session, active, 3)],
             "Sweep": lambda: [guide("Sweep"), SweepTab().panel()]}
    frames = {name: pn.Column(sizing_mode="stretch_width") for name in ("Fusion", *views)}
    tabs.extend(list(frames.items()))
    pieces = [Piece(frames["Fusion"], partial(fusion_part, first, end))
              for first, end in itertools.pairwise(FUSION_PIECES)]
    pieces += [Piece(frames[name], view) for name, view in views.items()]
    return pn.Column(pn.Column(session.status, session.notice, sizing_mode="stretch_width"), tabs,
                     sizing_mode="stretch_width"), pieces


# The Fusion tab's pieces, as bounds in its views (the guide, then `FusionTab.parts`): the guide, headline and
# colouring; the DAG; compare mode; the table and its note; the bars. Each takes ~0.03-0.09 CPU s as a server adds
# it, a third to a half of it Bokeh's walk of the whole document (BENCHMARKS.md, "a room of users").
FUSION_PIECES = (0, 3, 4, 5, 7, 8)


def build_app(state: ExplorerState | None = None) -> pn.template.BaseTemplate:
    """The page for one session; its state mirrors the URL so a copied link reopens the same view.

    In a server the page's document starts as a shell and is filled in pieces once the browser has it
    (`dashboard.pieces`); elsewhere (tests, notebooks) it is whole at once."""
    served = pn.state.curdoc is not None and pn.state.curdoc.session_context is not None
    if served:
        serve_stylesheets_locally(pn.state.curdoc)  # before the page's first model is made
        keep_views_ready_after_a_failed_update(pn.state.curdoc)
        lay_text_out_with_its_own_labels(pn.state.curdoc)
    pn.extension("filedropper", "tabulator")  # their scripts and styles in the page's head, from this server
    state = state or ExplorerState()
    location = pn.state.location
    problems = []
    if location is not None:  # the URL's choices first, so the first report is the one asked for
        problems = url.restore(state, location, URL_PARAMS)
    if state.upload_name:  # a link's upload is on the server only while a page holds it
        try:
            uploads.store().path(state.upload_name)
        except engine.EngineError as err:
            problems.append(f"upload_name: {err}")
            state.upload_name = ""
    session = Session(state)
    if problems:
        session.refused = "The link's " + "; ".join(problems)  # stays up when the first report arrives
    if location is not None and pn.state.curdoc is not None:
        url.follow(state, location, URL_PARAMS, pn.state.curdoc)
    # no template-wide busy spinner: it would flip on every event (each slider message); the Fusion tab has its own
    template = pn.template.FastListTemplate(title="DNN accelerator memory explorer", sidebar_width=330,
                                            busy_indicator=None, design=Fast, font=FONT)
    paint_filepond_only_when_busy(template)  # FilePond's endless animation-frame loop, only while it has work
    # the sidebar as one root of the document, not ~25: each root added re-walks the whole document (Bokeh's
    # `add_root`), which made a page's first document cost about a second of the server's event loop
    network, upload, *rest = SIDEBAR
    above = pn.Column(sizing_mode="stretch_width")  # the network box's part, above the upload box: a piece
    side = pn.Column(above, *upload(session), sizing_mode="stretch_width")
    template.sidebar.append(side)
    # the shell, built in the HTML request on the event loop, holds only the header, the upload box, the other
    # parts' empty frames and the Fusion tab's DAG with its preparers (the first report, asked for when the page has
    # loaded, makes their data beside it); the pieces make the rest, the network box first
    dag = fusion_dag(session)
    holder = pn.Column(sizing_mode="stretch_width")
    template.main.append(holder)
    tab_pieces: list[Piece] = []

    def main() -> list:
        area, made = main_area(session, dag)
        tab_pieces.extend(made)
        return [area]

    def pieces() -> Iterator[Piece]:  # a generator: the tabs' pieces exist once the first piece has made the frames
        yield Piece(above, partial(network, session))
        yield Piece(holder, main)
        yield from (Piece(side, partial(part, session)) for part in rest)
        yield from tab_pieces

    if served:
        pn.state.onload(partial(build, pn.state.curdoc, pieces()))
    else:
        for piece in pieces():
            piece()
    return template
