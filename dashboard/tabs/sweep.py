"""The Sweep tab: open a sweep's Parquet file (from `python -m engine sweep --out ...`) and draw its curves."""

from __future__ import annotations

import panel as pn

import engine
from dashboard.tabs.common import message
from dashboard.views.sweep import sweep_view


def sweep_tab(upload_dir) -> pn.Column:
    """A file picker and the sweep's curves; a file without successful rows is named, not drawn."""
    upload = pn.widgets.FileInput(accept=".parquet", label="Open a sweep's .parquet file")
    shown = pn.Column(pn.pane.Markdown("Run a sweep with `python -m engine sweep ... --out sweep.parquet` "
                                       "(see docs/sweep.md), then open the file here."))

    def opened(event):
        if event.new is None:
            return
        path = upload_dir / "sweep.parquet"
        path.write_bytes(event.new)
        try:
            from engine.sweep import read_sweep

            rows = read_sweep(path)
            if rows.empty or rows["error"].notna().all():
                raise engine.EngineError(f"{upload.filename}: the sweep holds no successful rows")
            failed = int(rows["error"].notna().sum())
            note = f"{len(rows)} rows" + (f", {failed} with errors (not drawn)" if failed else "")
            shown[:] = [pn.pane.Markdown(f"**{upload.filename}**: {note}"),
                        pn.pane.HoloViews(sweep_view(rows), sizing_mode="stretch_width", widget_location="top")]
        except Exception as err:
            shown[:] = [message(err)]

    upload.param.watch(opened, "value")
    return pn.Column(upload, shown, sizing_mode="stretch_width")
