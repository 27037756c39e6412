"""Curves of a sweep's Parquet file: DRAM traffic against buffer size, one line per method, per network."""

from __future__ import annotations

import pandas as pd

import engine
from dashboard.views import draw_methods, method_figure

COMBINATION = ("network", "accelerator", "batch")  # what one drawing of the sweep holds fixed


def sweep_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The sweep's successful rows in display units (KB, MB), with the Oracle as one more method."""
    ok = rows[rows["error"].isna()].copy()
    ok["buffer_kb"] = ok["buffer_bytes"] / 1024
    ok["dram_mb"] = ok["dram_bytes"].astype(float) / 1e6
    oracle = ok.drop_duplicates(["network", "batch", "accelerator", "buffer_bytes"]).copy()
    oracle["method"], oracle["dram_mb"] = "oracle", oracle["oracle_bytes"].astype(float) / 1e6
    both = pd.concat([ok, oracle], ignore_index=True)
    return both[["network", "batch", "accelerator", "method", "buffer_kb", "dram_mb"]].sort_values("buffer_kb")


def sweep_choices(rows: pd.DataFrame) -> dict[str, list]:
    """The networks, accelerators and batches that have successful rows: the options of the tab's selectors."""
    ok = rows[rows["error"].isna()]
    return {dim: sorted(ok[dim].unique().tolist()) for dim in COMBINATION}


def sweep_view(rows: pd.DataFrame, network: str, accelerator: str, batch: int):
    """The method curves of one (network, accelerator, batch) as a Bokeh figure, drawn as the what-if curve's
    (`method_figure`: the same axes and colours); EngineError if the sweep has none for it."""
    frame = sweep_frame(rows)
    one = frame[(frame["network"] == network) & (frame["accelerator"] == accelerator) & (frame["batch"] == batch)]
    if one.empty:
        raise engine.EngineError(f"the sweep has no successful rows for {network} on {accelerator} at batch {batch}; "
                                 "choose another combination")
    fig = method_figure(list(dict.fromkeys(one["method"])), title=f"{network} on {accelerator}, batch {batch}")
    draw_methods(fig, one)
    return fig
