"""Energy bars (DRAM / buffer / PE array / RF / MAC, stacked per method) with latency beside, as Optimus Fig. 13."""

from __future__ import annotations

import pandas as pd

from dashboard.views import NEUTRAL, numbers

LABELS = {"dram": "DRAM", "buffer": "buffer", "array": "PE array", "rf": "RF", "mac": "MAC"}
COLOURS = {"DRAM": "#d62728", "buffer": "#ff7f0e", "PE array": "#9467bd", "RF": "#2ca02c", "MAC": "#1f77b4"}


def energy_frame(energies: dict) -> pd.DataFrame:
    """Tidy (method, component, uJ, latency_ms) rows from method -> energy breakdown records."""
    rows = []
    for method, e in energies.items():
        for comp, pj in e.as_dict().items():
            rows.append({"method": method, "component": LABELS[comp], "uJ": pj / 1e6, "latency_ms": e.latency_s * 1e3})
    return pd.DataFrame(rows)


def _bars_figure(methods: list[str], title: str, ylabel: str, tooltips: list[tuple[str, str]]):
    """An empty Bokeh bar chart over `methods`, 320 pixels high, its y axis from 0 (the bars' owner sets its end)."""
    from bokeh.models import FactorRange, HoverTool, Range1d
    from bokeh.plotting import figure

    fig = figure(title=title, x_range=FactorRange(*methods), y_range=Range1d(0, 1), height=320,
                 sizing_mode="stretch_width", min_width=200, tools="pan,wheel_zoom,box_zoom,reset,save",
                 active_scroll=None, output_backend="canvas")
    fig.add_tools(HoverTool(tooltips=tooltips))
    fig.yaxis.axis_label, fig.yaxis.formatter = ylabel, numbers()
    fig.xgrid.visible = False
    return fig


def energy_bars(energies: dict):
    """Stacked energy bars (DRAM / buffer / PE array / RF / MAC) per method, as a Bokeh figure drawn directly (its
    data source's columns are `stacked_columns`): HoloViews took 0.3-1.1 s of the server's event loop per chart."""
    from bokeh.models import Legend
    from bokeh.transform import factor_cmap

    fig = _bars_figure(list(energies), "Energy per inference", "energy (µJ)",
                       [("method", "@method"), ("component", "@component"), ("energy (µJ)", "@uJ{0,0.[00]}")])
    fig.add_layout(Legend(), "right")
    fig.vbar(x="method", bottom="bottom", top="top", width=0.8, source=stacked_columns(energies), line_color="white",
             fill_color=factor_cmap("component", list(COLOURS.values()), list(COLOURS)), legend_field="component")
    return fig


def latency_bars(energies: dict):
    """Latency per method (the larger of compute and DRAM time, summed over fused groups), as a Bokeh figure (its
    data source's columns are `latency_columns`)."""
    fig = _bars_figure(list(energies), "Latency", "latency (ms)",
                       [("method", "@method"), ("latency (ms)", "@latency_ms{0,0.[000]}")])
    fig.vbar(x="method", top="latency_ms", width=0.8, source=latency_columns(energies), fill_color=NEUTRAL,
             line_color=NEUTRAL)
    return fig


def stacked_columns(energies: dict) -> dict[str, list]:
    """The columns a drawn `energy_bars` plot reads (method, component, uJ, bottom, top), for patching it in place;
    empty for no methods (the chart drawn before the first report)."""
    if not energies:
        return {col: [] for col in ("method", "component", "uJ", "bottom", "top")}
    frame = energy_frame(energies)
    frame["top"] = frame.groupby("method", sort=False)["uJ"].cumsum()
    frame["bottom"] = frame["top"] - frame["uJ"]
    return {col: frame[col].tolist() for col in ("method", "component", "uJ", "bottom", "top")}


def latency_columns(energies: dict) -> dict[str, list]:
    """The columns a drawn `latency_bars` plot reads (method, latency_ms); empty for no methods."""
    if not energies:
        return {"method": [], "latency_ms": []}
    lat = energy_frame(energies).drop_duplicates("method")
    return {"method": lat["method"].tolist(), "latency_ms": lat["latency_ms"].tolist()}
