"""The What-if curve tab: DRAM bytes against buffer size, computed off the UI thread when the tab is shown."""

from __future__ import annotations

import asyncio
from functools import lru_cache

import holoviews as hv
import panel as pn

from dashboard.state import BUFFER_STEPS_KB, KB
from dashboard.tabs.common import message
from dashboard.views.curve import curve_view
from engine.explore import buffer_curve


@lru_cache(maxsize=32)
def curve_frame(graph, acc, methods):
    """Every method's DRAM bytes over the slider's buffer sizes (the accelerator's own size is ignored)."""
    return buffer_curve(graph, acc, methods)


def nearest_step(kb: float) -> int:
    """The slider step nearest to a clicked buffer size (on a log scale)."""
    return min(BUFFER_STEPS_KB, key=lambda k: abs(k - kb) / k)


def curve_tab(session, active, index: int) -> pn.viewable.Viewable:
    """The curve for the current network and accelerator; a slider move only moves its marker.

    `active` is the tabs' active-index parameter: the curve is computed only while tab `index` shows.
    """
    s = session.state.param

    async def curve(shown, network, batch, preset, pe_rows, pe_cols, rf_bytes, word_bits, dram_gbps, methods,
                    upload_name):
        if shown != index:
            return  # not on screen: computed when the tab is opened
        yield pn.indicators.LoadingSpinner(value=True, size=40, label="computing the buffer-size curve...")
        try:
            graph, acc = session.graph(), session.state.accelerator()
            df = await asyncio.to_thread(curve_frame, graph, acc.with_buffer(KB), tuple(methods) or ("optimus",))
        except Exception as err:
            yield message(err)
            return
        plot = hv.DynamicMap(pn.bind(curve_view, df, s.buffer_kb))
        hv.streams.Tap(source=plot, x=None, y=None).add_subscriber(lambda x=None, y=None: jump(x))
        yield pn.pane.HoloViews(plot, sizing_mode="stretch_width")

    def jump(x):
        if x is not None and x > 0:
            session.state.buffer_kb = nearest_step(x)

    return pn.panel(pn.bind(curve, active, s.network, s.batch, s.preset, s.pe_rows, s.pe_cols, s.rf_bytes,
                            s.word_bits, s.dram_gbps, s.methods, s.upload_name), sizing_mode="stretch_width")
