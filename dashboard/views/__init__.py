"""Views: pure functions from engine results to HoloViews objects, styled for the Bokeh backend."""

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the backend whose options the views set)

# Our plots hold hundreds of glyphs, not millions: the 2-D canvas draws them at once everywhere,
# while WebGL without a GPU (VMs, remote desktops, headless browsers) takes seconds per update.
hv.renderer("bokeh").webgl = False

# Lines and marks drawn over either theme's plot background (white, or the dark theme's #181818): a mid grey
# reads on both, where black vanished on the dark one.
NEUTRAL = "#8c8c8c"


def counted(n: int, noun: str) -> str:
    """`n` with thousands separators and the noun, plural unless n is 1 ("1 op", "1,500 groups")."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def numbers():
    """An axis formatter with thousands separators and at most two decimals (Bokeh's default wrote a Llama prefill's
    traffic and energy as 1.500e+6); a new one per plot, as a Bokeh model belongs to one page."""
    from bokeh.models import NumeralTickFormatter

    return NumeralTickFormatter(format="0,0.[00]")


# One colour per method wherever DRAM traffic is drawn against buffer size (the what-if curve, the Sweep tab), so a
# method is recognised from one plot to the other; the bounds are dashed (`method_lines`).
METHOD_COLOURS = {"none": "#9c755f", "dnnvm": "#f28e2b", "efficient_s": "#59a14f", "optimus": "#4e79a7",
                  "online": "#b07aa1", "oracle": "#e15759", "limit_layerwise": "#76b7b2", "limit_fused": "#edc948",
                  "limit_fused_valid": "#bab0ac"}
BOUNDS = ("oracle", "limit_layerwise", "limit_fused", "limit_fused_valid")  # lower bounds, not plans
CURVE_TOOLTIPS = [("method", "@method"), ("buffer", "@buffer_kb{0,0} KB"), ("DRAM traffic", "@dram_mb{0,0.000} MB")]


def method_lines(frame, title: str = "") -> hv.NdOverlay:
    """DRAM traffic against buffer size, one line per method (`frame`: columns method, buffer_kb, dram_mb), log-log as
    the field draws it (a linear y axis running to a Llama's 1,500,000 MB flattened every size from 128 KB up);
    hover names the method; each method in its colour of METHOD_COLOURS (grey for a name not there)."""
    lines = {method: hv.Curve(sub, "buffer_kb", ["dram_mb", "method"], label=method).opts(
                 color=METHOD_COLOURS.get(method, NEUTRAL), line_dash="dashed" if method in BOUNDS else "solid",
                 line_width=2)
             for method, sub in frame.groupby("method", sort=False)}
    return hv.NdOverlay(lines, kdims="method").opts(
        hv.opts.Curve(logx=True, logy=True, tools=["hover", "tap"], hover_tooltips=CURVE_TOOLTIPS,
                      xlabel="on-chip buffer (KB)", ylabel="DRAM traffic (MB)", yformatter=numbers(),
                      xformatter=numbers(), responsive=True, height=380),
        hv.opts.NdOverlay(legend_position="top_right", title=title))
