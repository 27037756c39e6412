"""What-if curve: DRAM bytes against buffer size for every method and the Oracle, current buffer marked."""

from __future__ import annotations

import holoviews as hv
import pandas as pd

from dashboard.views import METHOD_COLOURS, NEUTRAL, method_lines


def curve_view(curve: pd.DataFrame, current_kb: float, xlim: tuple[float, float] | None = None) -> hv.Overlay:
    """One line per method over buffer sizes (log-log, `method_lines`), each size a dot; a vertical line at the current
    buffer size.

    `curve` has columns buffer_kb, method, dram_mb; `xlim` fixes the x range (a curve still coming in keeps its axis).
    """
    dots = [hv.Scatter(sub, "buffer_kb", "dram_mb").opts(size=5, color=METHOD_COLOURS.get(method, NEUTRAL))
            for method, sub in curve.groupby("method", sort=False)]
    marker = hv.VLine(current_kb).opts(color=NEUTRAL, line_dash="dotted", line_width=2)
    return (method_lines(curve) * hv.Overlay(dots) * marker).opts(
        hv.opts.Overlay(logx=True, logy=True, responsive=True, height=380, legend_position="top_right",
                        title="What if the buffer were another size? (click a point to go there)",
                        **({"xlim": xlim} if xlim else {})))
