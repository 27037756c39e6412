"""The Memory timeline tab: the COSMA allocation, solved off the UI thread when the tab is shown."""

from __future__ import annotations

import asyncio
from functools import lru_cache

import panel as pn

from dashboard.state import KB
from dashboard.tabs.common import download_table, message
from dashboard.views.timeline import timeline_view
from engine.explore import allocate_for_budget

TIME_LIMIT_S = 20


@lru_cache(maxsize=32)
def allocation(graph, acc, budget):
    """COSMA's allocation of `graph` under a named budget (M_R, M_H, M_P) or bytes, and the budget in bytes."""
    return allocate_for_budget(graph, acc, "cosma", budget, time_limit_s=TIME_LIMIT_S)


async def timeline_views(session, budget, budget_kb):
    """Spinner, then the timeline and its table, or the solver's own words when there is no plan."""
    yield pn.indicators.LoadingSpinner(value=True, size=40, label="solving the allocation ILP...")
    try:
        graph, acc = session.graph(), session.state.accelerator()
        chosen = budget_kb * KB if budget == "bytes" else budget
        alloc, budget_bytes = await asyncio.to_thread(allocation, graph, acc, chosen)
    except Exception as err:
        yield message(err)
        return
    if not alloc.has_plan:  # infeasible, or a time-out before any plan
        yield pn.pane.Alert(f"{alloc.status}: {alloc.message}", alert_type="warning")
        return
    yield pn.Column(pn.pane.HoloViews(timeline_view(alloc, budget_bytes), sizing_mode="stretch_width"),
                    download_table(alloc.timeline(), "allocation.csv"))


def timeline_tab(session, active, index: int) -> pn.viewable.Viewable:
    """The timeline for the current network and budget, recomputed only while tab `index` shows."""
    s = session.state.param

    async def timeline(shown, network, batch, word_bits, budget, budget_kb, upload_name):
        if shown != index:
            return
        async for view in timeline_views(session, budget, budget_kb):
            yield view

    return pn.panel(pn.bind(timeline, active, s.network, s.batch, s.word_bits, s.budget, s.budget_kb,
                            s.upload_name), sizing_mode="stretch_width")
