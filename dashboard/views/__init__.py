"""Views: pure functions from engine results to HoloViews objects, styled for the Bokeh backend."""

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the backend whose options the views set)

# Our plots hold hundreds of glyphs, not millions: the 2-D canvas draws them at once everywhere,
# while WebGL without a GPU (VMs, remote desktops, headless browsers) takes seconds per update.
hv.renderer("bokeh").webgl = False

# Lines and marks drawn over either theme's plot background (white, or the dark theme's #181818): a mid grey
# reads on both, where black vanished on the dark one.
NEUTRAL = "#8c8c8c"


def numbers():
    """An axis formatter with thousands separators and at most two decimals (Bokeh's default wrote a Llama prefill's
    traffic and energy as 1.500e+6); a new one per plot, as a Bokeh model belongs to one page."""
    from bokeh.models import NumeralTickFormatter

    return NumeralTickFormatter(format="0,0.[00]")
