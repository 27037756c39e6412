"""Curves of a sweep's Parquet file: DRAM traffic against buffer size, one line per method, per network."""

from __future__ import annotations

import holoviews as hv
import pandas as pd


def sweep_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The sweep's successful rows in display units (KB, MB), with the Oracle as one more method."""
    ok = rows[rows["error"].isna()].copy()
    ok["buffer_kb"] = ok["buffer_bytes"] / 1024
    ok["dram_mb"] = ok["dram_bytes"].astype(float) / 1e6
    oracle = ok.drop_duplicates(["network", "batch", "accelerator", "buffer_bytes"]).copy()
    oracle["method"], oracle["dram_mb"] = "oracle", oracle["oracle_bytes"].astype(float) / 1e6
    both = pd.concat([ok, oracle], ignore_index=True)
    return both[["network", "batch", "accelerator", "method", "buffer_kb", "dram_mb"]].sort_values("buffer_kb")


def sweep_view(rows: pd.DataFrame) -> hv.HoloMap:
    """One overlay of method curves per (network, accelerator, batch); widgets pick which one is shown."""
    data = hv.Dataset(sweep_frame(rows), kdims=["network", "accelerator", "batch", "method", "buffer_kb"],
                      vdims=["dram_mb"])
    curves = data.to(hv.Curve, "buffer_kb", "dram_mb", groupby=["network", "accelerator", "batch", "method"])
    return curves.overlay("method").opts(
        hv.opts.Curve(logx=True, tools=["hover"], xlabel="on-chip buffer (KB)", ylabel="DRAM traffic (MB)",
                      responsive=True, height=380),
        hv.opts.NdOverlay(legend_position="top_right"))
