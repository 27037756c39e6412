"""The Memory timeline tab: an allocation of the scratchpad, solved off the UI thread when the tab is shown.

Above the chosen method's timeline, a table compares COSMA with the four baselines at the same budget.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

import pandas as pd
import panel as pn

from dashboard.state import ALLOCATION_METHODS, KB
from dashboard.tabs.common import download_table, message
from dashboard.views.timeline import timeline_view
from dashboard.workers import HERE, Runner
from engine.explore import allocate_for_budget

TIME_LIMIT_S = 20


@lru_cache(maxsize=64)
def allocation(graph, acc, method: str, budget, run: Runner = HERE):
    """`method`'s allocation of `graph` under a named budget (M_R, M_H, M_P) or bytes, and the budget in bytes,
    solved by `run` (a worker process for a server's page)."""
    return run(allocate_for_budget, graph, acc, method, budget, TIME_LIMIT_S)


def comparison_frame(graph, acc, budget, run: Runner = HERE) -> pd.DataFrame:
    """Every allocation method at one budget: status, off-chip bytes beyond compulsory, peak and solve time."""
    rows = []
    for method in ALLOCATION_METHODS:
        alloc, _ = allocation(graph, acc, method, budget, run)
        rows.append({"method": method, "status": alloc.status,
                     "offchip_bytes": alloc.offchip_bytes if alloc.has_plan else None,
                     "peak_bytes": alloc.peak_bytes if alloc.has_plan else None,
                     "spills": len(alloc.spills), "seconds": round(alloc.solve_time_s, 2),
                     "gap_to_bound": None if alloc.gap is None else f"{alloc.gap:.0%}"})
    return pd.DataFrame(rows)


def unproven_note(alloc) -> str:
    """Why a plan is not proven optimal, in the engine's words, or its gap to the proven lower bound ('' if proven)."""
    if alloc.status == "optimal" or not (alloc.message or alloc.gap):
        return ""
    why = (alloc.message[:1].upper() + alloc.message[1:]) if alloc.message else \
        f"{alloc.gap:.0%} above a proven lower bound"
    return f"**{alloc.method}: {alloc.status}**. {why.rstrip('.')}."


async def timeline_views(session, budget, budget_kb, method: str = "cosma"):
    """Spinner, then the comparison, the chosen method's timeline and its table, or the solver's own words."""
    yield pn.indicators.LoadingSpinner(value=True, size=40, label="solving the allocation ILP...")
    try:
        graph, acc = session.graph(), session.state.accelerator()
        chosen = budget_kb * KB if budget == "bytes" else budget
        alloc, budget_bytes = await asyncio.to_thread(allocation, graph, acc, method, chosen, session.run)
        compared = await asyncio.to_thread(comparison_frame, graph, acc, chosen, session.run)
    except Exception as err:
        yield message(err)
        return
    if not alloc.has_plan:  # infeasible, or a time-out before any plan
        yield pn.pane.Alert(f"{alloc.status}: {alloc.message}", alert_type="warning")
        return
    note = unproven_note(alloc)
    yield pn.Column(*([pn.pane.Alert(note, alert_type="info")] if note else []),
                    pn.pane.Markdown(f"**Off-chip traffic beyond the compulsory, all methods, budget "
                                     f"{budget_bytes / KB:,.1f} KB**"),
                    pn.widgets.Tabulator(compared, disabled=True, show_index=False, sizing_mode="stretch_width"),
                    pn.pane.Bokeh(timeline_view(alloc, budget_bytes), sizing_mode="stretch_width"),
                    download_table(alloc.timeline(), "allocation.csv"))


def timeline_tab(session, active, index: int) -> pn.viewable.Viewable:
    """The timeline for the current network, method and budget, recomputed only while tab `index` shows."""
    s = session.state.param

    async def timeline(shown, network, batch, word_bits, alloc_method, budget, budget_kb, upload_name, input_shapes):
        if shown != index:
            return
        async for view in timeline_views(session, budget, budget_kb, alloc_method):
            yield view

    return pn.panel(pn.bind(timeline, active, s.network, s.batch, s.word_bits, s.alloc_method, s.budget, s.budget_kb,
                            s.upload_name, s.input_shapes), sizing_mode="stretch_width")
