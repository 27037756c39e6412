"""Views: functions from engine results to Bokeh figures (drawn directly: HoloViews' rendering held the server's
event loop for tenths of a second to seconds per plot), usable in notebooks too.

Each figure draws on the 2-D canvas (`output_backend="canvas"`): our plots hold hundreds of glyphs, not millions,
and WebGL without a GPU (VMs, remote desktops, headless browsers) took seconds per update.
"""

# Lines and marks drawn over either theme's plot background (white, or the dark theme's #181818): a mid grey
# reads on both, where black vanished on the dark one.
NEUTRAL = "#8c8c8c"

# The page's font (the template's): system fonts, none fetched from outside the machine. A figure title that must not
# change its look as Panel's and the page's Bokeh themes are applied sets it (Panel's Fast theme says Open Sans).
FONT = "system-ui, sans-serif"


def counted(n: int, noun: str) -> str:
    """`n` with thousands separators and the noun, plural unless n is 1 ("1 op", "1,500 groups")."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def numbers():
    """An axis formatter with thousands separators and at most two decimals (Bokeh's default wrote a Llama prefill's
    traffic and energy as 1.500e+6); a new one per plot, as a Bokeh model belongs to one page."""
    from bokeh.models import NumeralTickFormatter

    return NumeralTickFormatter(format="0,0.[00]")


# One colour per method wherever DRAM traffic is drawn against buffer size (the what-if curve, the Sweep tab), so a
# method is recognised from one plot to the other; the bounds are dashed (`method_figure`).
METHOD_COLOURS = {"none": "#9c755f", "dnnvm": "#f28e2b", "efficient_s": "#59a14f", "optimus": "#4e79a7",
                  "online": "#b07aa1", "oracle": "#e15759", "limit_layerwise": "#76b7b2", "limit_fused": "#edc948",
                  "limit_fused_valid": "#bab0ac"}
BOUNDS = ("oracle", "limit_layerwise", "limit_fused", "limit_fused_valid")  # lower bounds, not plans
CURVE_TOOLTIPS = [("method", "@{method}"), ("buffer", "@{buffer_kb}{0,0} KB"), ("DRAM traffic", "@{dram_mb}{0,0.000} MB")]


def method_figure(methods, title: str = "", x_range: tuple[float, float] | None = None):
    """An empty Bokeh figure of DRAM traffic against buffer size with a line and dots for each of `methods`, each in
    its colour of METHOD_COLOURS (grey for a name not there; the bounds dashed), log-log as the field draws it (a
    linear y axis running to a Llama's 1,500,000 MB flattened every size from 128 KB up), hover naming the method;
    `draw_methods` gives it rows. Drawn by Bokeh directly: HoloViews' `hv.render` held the server's event loop for
    each size of a curve that comes in size by size. `x_range` fixes the x axis (a curve still coming in keeps it)."""
    from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Line, Range1d, Scatter
    from bokeh.plotting import figure

    fig = figure(title=title, x_axis_type="log", y_axis_type="log", height=380, sizing_mode="stretch_width",
                 min_width=300, tools="pan,wheel_zoom,box_zoom,reset,save", active_scroll=None,
                 output_backend="canvas", **({"x_range": Range1d(*x_range)} if x_range else {}))
    fig.xaxis.axis_label, fig.yaxis.axis_label = "on-chip buffer (KB)", "DRAM traffic (MB)"
    fig.xaxis.formatter, fig.yaxis.formatter = numbers(), numbers()
    items, lines = [], []
    for method in methods:
        colour = METHOD_COLOURS.get(method, NEUTRAL)
        source = ColumnDataSource({"buffer_kb": [], "dram_mb": [], "method": []}, name=f"method-{method}")
        line = fig.add_glyph(source, Line(x="buffer_kb", y="dram_mb", line_color=colour, line_width=2,
                                          line_dash="dashed" if method in BOUNDS else "solid"))
        dots = fig.add_glyph(source, Scatter(x="buffer_kb", y="dram_mb", size=5, fill_color=colour, line_color=colour))
        items.append(LegendItem(label=method, renderers=[line, dots], visible=False))
        lines.append(line)
    fig.add_layout(Legend(items=items, location="top_right"))
    fig.add_tools(HoverTool(renderers=lines, tooltips=CURVE_TOOLTIPS))
    return fig


def draw_methods(fig, frame) -> None:
    """Give each method's line of `fig` (a `method_figure`) its rows of `frame` (columns method, buffer_kb, dram_mb),
    by buffer size; a method without rows is left out of the legend."""
    rows = {method: sub.sort_values("buffer_kb") for method, sub in frame.groupby("method", sort=False)}
    for item, (method, source) in zip(fig.legend[0].items, method_sources(fig).items()):
        sub = rows.get(method)
        item.visible = sub is not None
        source.data = {col: [] if sub is None else sub[col].tolist() for col in ("buffer_kb", "dram_mb", "method")}


def method_sources(fig) -> dict:
    """Method -> the data source of its line in a `method_figure`."""
    return {item.renderers[0].data_source.name.removeprefix("method-"): item.renderers[0].data_source
            for item in fig.legend[0].items}
