"""The scratchpad's memory timeline: address against timestep, one rectangle per tensor placement."""

from __future__ import annotations

import pandas as pd

from dashboard.views import NEUTRAL, numbers

MARKS = {"spill": ("inverted_triangle", "#d62728"), "retrieve": ("triangle", "#2ca02c")}  # marker, colour


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


def timeline_view(alloc, budget_bytes: int):
    """Rectangles per placement (a colour per tensor), spills (down triangles) and retrievals (up triangles), and the
    budget line, as a Bokeh figure drawn directly (HoloViews held the server's event loop to render it); the marks'
    data sources are named "spill" and "retrieve"."""
    from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Quad, Range1d, Scatter, Span
    from bokeh.palettes import Category20_20
    from bokeh.plotting import figure

    rects = placement_rectangles(alloc)
    budget_kb = budget_bytes / 1024
    rows = dict(zip(MARKS, mark_rows(budget_kb)))
    top = max(rows["retrieve"] * 1.05, float(rects["y1"].max()) if len(rects) else 0.0)
    title = (f"{alloc.method}: {alloc.status}, off-chip {alloc.offchip_bytes / 1024:,.1f} KB, "
             f"peak {alloc.peak_bytes / 1024:,.1f} KB of {budget_bytes / 1024:,.1f} KB")
    fig = figure(title=title, height=420, sizing_mode="stretch_width", min_width=300, y_range=Range1d(0, top),
                 tools="pan,wheel_zoom,box_zoom,reset,save", active_scroll=None, output_backend="canvas")
    fig.xaxis.axis_label, fig.yaxis.axis_label = "timestep (op in schedule order)", "address (KB)"
    fig.yaxis.formatter = numbers()
    tensors = rects["tensor"].astype(str)
    order = {t: i for i, t in enumerate(dict.fromkeys(tensors))}
    columns = {col: rects[col].tolist() for col in ("x0", "x1", "y0", "y1", "size_kb", "first", "last")}
    boxes = fig.add_glyph(ColumnDataSource({**columns, "tensor": tensors.tolist(),
                                            "colour": [Category20_20[order[t] % 20] for t in tensors]}),
                          Quad(left="x0", right="x1", bottom="y0", top="y1", fill_color="colour", fill_alpha=0.85,
                               line_color="white", line_width=0.5))
    fig.add_tools(HoverTool(renderers=[boxes], tooltips=[("tensor", "@{tensor}"), ("size (KB)", "@{size_kb}{0.0}"),
                                                         ("steps", "@{first} to @{last}")]))
    items = []
    for name, events in (("spill", alloc.spills), ("retrieve", alloc.retrievals)):
        marker, colour = MARKS[name]
        steps = [step for _, step in events]
        marks = fig.add_glyph(ColumnDataSource({"step": steps, "KB": [rows[name]] * len(steps)}, name=name),
                              Scatter(x="step", y="KB", marker=marker, size=10, fill_color=colour, line_color=colour))
        items.append(LegendItem(label=name, renderers=[marks]))
    fig.add_layout(Span(location=budget_kb, dimension="width", line_color=NEUTRAL, line_dash="dashed",
                        line_width=1.5))
    fig.add_layout(Legend(items=items), "right")  # beside the plot: inside, it hid the last steps' marks
    return fig
