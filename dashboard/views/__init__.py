"""Views: pure functions from engine results to HoloViews objects, styled for the Bokeh backend."""

import holoviews.plotting.bokeh  # noqa: F401  (registers the backend whose options the views set)
