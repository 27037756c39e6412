"""The scratchpad's memory timeline: address against timestep, one rectangle per tensor placement."""

from __future__ import annotations

import holoviews as hv
import pandas as pd

from dashboard.views import NEUTRAL, numbers


def placement_rectangles(alloc) -> pd.DataFrame:
    """Rectangles (step0, addr0, step1, addr1) per placement, from the allocation's tidy timeline."""
    df = alloc.timeline()
    placed = df[df["event"] != "spill"] if "event" in df else df
    spans = (placed.groupby(["tensor", "address", "size", "placement"], as_index=False)["step"].agg(["min", "max"])
             if "placement" in placed else placed.groupby(["tensor", "address", "size"], as_index=False)["step"]
             .agg(["min", "max"]))
    spans = spans.rename(columns={"min": "first", "max": "last"})
    spans["x0"], spans["x1"] = spans["first"] - 0.45, spans["last"] + 0.45
    spans["y0"], spans["y1"] = spans["address"] / 1024, (spans["address"] + spans["size"]) / 1024
    spans["size_kb"] = spans["size"] / 1024
    return spans


def mark_rows(budget_kb: float) -> tuple[float, float]:
    """The heights (KB) of the spill and retrieve marks: two rows above the budget line, clear of it and of each
    other (10-pixel marks on a 420-pixel plot whose y axis ends a little above the budget)."""
    return budget_kb * 1.05, budget_kb * 1.11


def timeline_view(alloc, budget_bytes: int) -> hv.Overlay:
    """Rectangles per placement, spills (down triangles) and retrievals (up triangles), and the budget line."""
    rects = placement_rectangles(alloc)
    boxes = hv.Rectangles(rects, kdims=["x0", "y0", "x1", "y1"], vdims=["tensor", "size_kb", "first", "last"]).opts(
        color="tensor", cmap="Category20", line_color="white", line_width=0.5, alpha=0.85, tools=["hover"],
        show_legend=False,
        hover_tooltips=[("tensor", "@tensor"), ("size (KB)", "@size_kb{0.0}"), ("steps", "@first to @last")])
    spills = pd.DataFrame(alloc.spills, columns=["tensor", "step"])
    back = pd.DataFrame(alloc.retrievals, columns=["tensor", "step"])
    budget_kb = budget_bytes / 1024
    spill_y, retrieve_y = mark_rows(budget_kb)
    spill_pts = hv.Scatter((spills["step"], [spill_y] * len(spills)), "step", "KB", label="spill").opts(
        marker="inverted_triangle", size=10, color="#d62728")
    back_pts = hv.Scatter((back["step"], [retrieve_y] * len(back)), "step", "KB", label="retrieve").opts(
        marker="triangle", size=10, color="#2ca02c")
    budget = hv.HLine(budget_kb).opts(color=NEUTRAL, line_dash="dashed", line_width=1.5)
    title = (f"{alloc.method}: {alloc.status}, off-chip {alloc.offchip_bytes / 1024:,.1f} KB, "
             f"peak {alloc.peak_bytes / 1024:,.1f} KB of {budget_bytes / 1024:,.1f} KB")
    return (boxes * spill_pts * back_pts * budget).opts(
        hv.opts.Overlay(title=title, xlabel="timestep (op in schedule order)", ylabel="address (KB)",
                        yformatter=numbers(), responsive=True, height=420, show_legend=True,
                        legend_position="right"))  # beside the plot: inside, it hid the last steps' marks
