"""What-if curve: DRAM bytes against buffer size for every method and the Oracle, current buffer marked."""

from __future__ import annotations

import holoviews as hv
import pandas as pd

from dashboard.views import NEUTRAL, numbers


def curve_view(curve: pd.DataFrame, current_kb: float, xlim: tuple[float, float] | None = None) -> hv.Overlay:
    """One line per method over buffer sizes (log x); a vertical line at the current buffer size.

    `curve` has columns buffer_kb, method, dram_mb; `xlim` fixes the x range (a curve still coming in keeps its axis).
    """
    lines = [hv.Curve(sub, "buffer_kb", "dram_mb", label=method).opts(tools=["hover", "tap"])
             * hv.Scatter(sub, "buffer_kb", "dram_mb", label=method).opts(size=5, tools=["tap"])
             for method, sub in curve.groupby("method", sort=False)]
    marker = hv.VLine(current_kb).opts(color=NEUTRAL, line_dash="dotted", line_width=2)
    return hv.Overlay([*lines, marker]).opts(
        hv.opts.Overlay(logx=True, xlabel="on-chip buffer (KB)", ylabel="DRAM traffic (MB)", yformatter=numbers(), responsive=True,
                        height=380, title="What if the buffer were another size? (click a point to go there)",
                        legend_position="top_right", **({"xlim": xlim} if xlim else {})))
