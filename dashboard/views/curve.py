"""What-if curve: DRAM bytes against buffer size for every method, the Oracle and the limits, current buffer marked."""

from __future__ import annotations

from dashboard.views import BOUNDS, NEUTRAL, method_figure

CURVE_TITLE = "What if the buffer were another size? (click a point to go there)"


def curve_figure(methods, current_kb: float, xlim: tuple[float, float]):
    """An empty `method_figure` for `methods` and the bounds, its x axis fixed to `xlim` (a curve still coming in keeps
    its axis), with a dotted vertical line at the current buffer size (named "current-buffer")."""
    from bokeh.models import Span

    fig = method_figure((*methods, *(b for b in BOUNDS if b not in methods)), CURVE_TITLE, xlim)
    fig.add_layout(Span(location=current_kb, dimension="height", line_color=NEUTRAL, line_dash="dotted",
                        line_width=2, name="current-buffer"))
    return fig
