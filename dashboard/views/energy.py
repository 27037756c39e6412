"""Energy bars (DRAM / buffer / PE array / RF / MAC, stacked per method) with latency beside, as Optimus Fig. 13."""

from __future__ import annotations

import holoviews as hv
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


def energy_bars(energies: dict) -> hv.Bars:
    """Stacked energy bars (DRAM / buffer / PE array / RF / MAC) per method."""
    return hv.Bars(energy_frame(energies), kdims=["method", "component"], vdims=["uJ"]).opts(
        stacked=True, cmap=COLOURS, tools=["hover"], responsive=True, height=320, ylabel="energy (µJ)", yformatter=numbers(),
        title="Energy per inference", legend_position="right")


def latency_bars(energies: dict) -> hv.Bars:
    """Latency per method (the larger of compute and DRAM time, summed over fused groups)."""
    lat = energy_frame(energies).drop_duplicates("method")
    return hv.Bars(lat, kdims=["method"], vdims=["latency_ms"]).opts(
        color=NEUTRAL, tools=["hover"], responsive=True, height=320, ylabel="latency (ms)", yformatter=numbers(),
        title="Latency")


def stacked_columns(energies: dict) -> dict[str, list]:
    """The columns a drawn `energy_bars` plot reads (method, component, uJ, bottom, top), for patching it in place."""
    frame = energy_frame(energies)
    frame["top"] = frame.groupby("method", sort=False)["uJ"].cumsum()
    frame["bottom"] = frame["top"] - frame["uJ"]
    return {col: frame[col].tolist() for col in ("method", "component", "uJ", "bottom", "top")}


def latency_columns(energies: dict) -> dict[str, list]:
    """The columns a drawn `latency_bars` plot reads (method, latency_ms)."""
    lat = energy_frame(energies).drop_duplicates("method")
    return {"method": lat["method"].tolist(), "latency_ms": lat["latency_ms"].tolist()}
