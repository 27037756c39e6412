"""The What-if curve tab: DRAM bytes against buffer size, computed off the UI thread when the tab is shown.

The curve is drawn as its buffer sizes come in, smallest first: on a NAS network each size's
search takes seconds, so the user sees the curve grow instead of a spinner for minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import lru_cache, partial

import pandas as pd
import panel as pn
from bokeh import events
from panel.io.state import set_curdoc

import engine
from dashboard.pieces import locked
from dashboard.state import KB
from dashboard.tabs.common import message
from dashboard.views import draw_methods
from dashboard.views.curve import curve_figure
from dashboard.workers import HERE, Runner
from engine.explore import CURVE_BUFFERS_KB, EvaluationStopped, curve_rows

PROGRESS = "computing the buffer-size curve..."
# what the dashed bounds mean: the layer-by-layer limit lies above the fused plans from the sizes where fusion pays,
# which read as a bound broken without this
LIMIT_NOTE = ("Dashed lines are floors, not plans. *oracle*: every weight and network input and output crossing once. "
              "*limit_layerwise*: the least traffic of any plan that runs every op on its own, each op's output "
              "written to DRAM and read back by the next; a floor for `none`, not for fused plans, which keep those "
              "tensors on chip, so where fusion pays they lie below it. *limit_fused*: the floor for fused plans, "
              "tight where the graph's chains are cut into fused pieces (what cutting, reloading weights and "
              "streaming keys and values cost at the least); *limit_fused_valid*, where it lies lower: the per-op "
              "floor it improves on (docs/limit.md).")
XLIM = (CURVE_BUFFERS_KB[0] / 1.25, CURVE_BUFFERS_KB[-1] * 1.25)  # the whole range from the first size drawn


@lru_cache(maxsize=512)
def curve_point(graph, acc, methods, buffer_kb: int, run: Runner = HERE) -> tuple[dict, ...]:
    """Every method's DRAM bytes, the Oracle and the attainable limits (layer by layer, fused) at one buffer size
    (the accelerator's own size is ignored), computed by `run` (a worker process for a server's page)."""
    return run(curve_rows, graph, acc, methods, buffer_kb, limits=True)  # with engine.limit's two bounds


async def curve_progress(graph, acc, methods: tuple[str, ...], run: Runner = HERE):
    """(rows so far, sizes left out and why, sizes done) after each of the curve's buffer sizes, smallest first.

    A size at which the network cannot run (an op that does not fit even alone) is left out, not the curve.
    Ends early, before the next size, once `run.stop()` says so (the page was closed).
    """
    rows, skipped = [], []
    for done, kb in enumerate(CURVE_BUFFERS_KB, 1):
        try:
            rows += await asyncio.to_thread(curve_point, graph, acc, methods, kb, run)
        except EvaluationStopped:
            return
        except engine.EngineError as err:
            skipped.append(f"{kb:,} KB: {err}")
        yield pd.DataFrame(rows), tuple(skipped), done


def nearest_step(kb: float, steps) -> int:
    """The slider step (of `steps`) nearest to a clicked buffer size (on a log scale)."""
    return min(steps, key=lambda k: abs(k - kb) / k)


class CurvePlot:
    """The curve as a Bokeh figure drawn once per curve (network, accelerator, methods) and given its rows as each
    size comes in; its clicks move the slider and its marker follows the slider.

    A click is heard through Bokeh's own Tap event on the figure (HoloViews' Tap stream on a DynamicMap rebuilt as
    the sizes come in never reached the server in the browser); the marker is moved in place, so a slider move
    redraws nothing. (Drawn by HoloViews for each size, the curve held the server's event loop each time.)
    """

    def __init__(self, state):
        self.state = state
        self.figure = None
        self.progress = pn.Row()
        self.left_out = pn.pane.Alert("", alert_type="warning", visible=False)
        state.param.watch(self._follow, "buffer_kb")

    def start(self, methods: tuple[str, ...]) -> pn.Column:
        """A new, empty figure for a new curve of `methods` (and the bounds), with its progress, what the bounds mean
        and the sizes left out; replaces the one before (whose `show` calls then change nothing)."""
        self.figure = curve_figure(methods, self.state.buffer_kb, XLIM)
        self.figure.on_event(events.Tap, self.clicked)
        self.progress = pn.Row(pn.indicators.LoadingSpinner(value=True, size=20, align="center"),
                               pn.pane.HTML("", align="center"))
        self.left_out = pn.pane.Alert("", alert_type="warning", visible=False)
        return pn.Column(self.progress, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
                         pn.pane.Markdown(LIMIT_NOTE, sizing_mode="stretch_width"), self.left_out,
                         sizing_mode="stretch_width")

    def show(self, figure, df: pd.DataFrame, skipped: tuple[str, ...], done: int):
        """The curve so far in `figure` (if still the one drawn): its rows, its progress while sizes are still
        coming, and the sizes left out."""
        if figure is not self.figure:
            return
        draw_methods(figure, df)
        coming = done < len(CURVE_BUFFERS_KB)
        self.progress[1].object = f"{PROGRESS} {done} of {len(CURVE_BUFFERS_KB)} sizes drawn" if coming else ""
        if self.progress.visible != coming:
            self.progress.visible = coming
        if skipped:
            self.left_out.param.update(object="Left out of the curve: " + "; ".join(skipped), visible=True)

    def clicked(self, event):
        """A click anywhere on the plot: the slider goes to the step nearest the clicked buffer size."""
        if event.x is None or event.x <= 0:
            return
        # a plain Bokeh callback: Panel must be told whose page this is, or the views it builds for the change
        # point their stylesheets at Panel's CDN instead of this server
        doc = self.figure.document if self.figure is not None else None
        with set_curdoc(doc) if doc is not None else contextlib.nullcontext():
            self.state.buffer_kb = nearest_step(event.x, self.state.param.buffer_kb.objects)

    def _follow(self, event):
        if self.figure is not None:
            for span in self.figure.select({"name": "current-buffer"}):
                span.location = event.new


def curve_tab(session, active, index: int) -> pn.viewable.Viewable:
    """The curve for the current network and accelerator; a slider move only moves its marker.

    `active` is the tabs' active-index parameter: the curve is computed only while tab `index` shows.
    """
    s = session.state.param
    plot = CurvePlot(session.state)
    doc = pn.state.curdoc  # the page's: each size's rows are set under its lock

    async def curve(shown, network, batch, preset, pe_rows, pe_cols, rf_bytes, word_bits, dram_gbps, methods,
                    upload_name, input_shapes):
        if shown != index:
            return  # not on screen: computed when the tab is opened
        yield pn.indicators.LoadingSpinner(value=True, size=40, label=PROGRESS)
        try:
            graph, acc = session.graph(), session.state.accelerator().with_buffer(KB)
        except Exception as err:
            yield message(err)
            return
        figure, skipped, done = None, (), 0
        try:
            async for df, skipped, done in curve_progress(graph, acc, tuple(methods), session.run):
                if not len(df):
                    continue
                if figure is None:  # the first size with rows: the figure, filled before it joins the page
                    column = plot.start(tuple(methods))
                    figure = plot.figure
                    plot.show(figure, df, skipped, done)
                    yield column
                else:
                    await locked(doc, partial(plot.show, figure, df, skipped, done))
        except Exception as err:
            yield message(err)
            return
        if figure is None and done == len(CURVE_BUFFERS_KB):
            yield pn.pane.Alert("The network runs at none of the curve's buffer sizes: " + "; ".join(skipped),
                                alert_type="danger")

    return pn.panel(pn.bind(curve, active, s.network, s.batch, s.preset, s.pe_rows, s.pe_cols, s.rf_bytes,
                            s.word_bits, s.dram_gbps, s.methods, s.upload_name, s.input_shapes), sizing_mode="stretch_width")
