"""The Sweep tab: open a sweep's Parquet file (from `python -m engine sweep --out ...`) and draw its curves."""

from __future__ import annotations

import io

import pandas as pd
import panel as pn

import engine
from dashboard.tabs.common import message
from dashboard.views.sweep import COMBINATION, sweep_choices, sweep_view
from engine.sweep import sweep_rows


def uploaded_sweep(data: bytes, filename: str) -> pd.DataFrame:
    """The rows of an uploaded sweep file; EngineError naming the file (as the user called it) and what is wrong."""
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as err:
        raise engine.EngineError(f"{filename}: not a Parquet file; open the .parquet file a sweep wrote") from err
    try:
        rows = sweep_rows(frame)
    except engine.EngineError as err:
        raise engine.EngineError(f"{filename}: {err}") from err
    if rows.empty or rows["error"].notna().all():
        raise engine.EngineError(f"{filename}: the sweep holds no successful rows")
    return rows


class SweepTab:
    """A file picker, one selector per network/accelerator/batch the file holds, and that combination's curves."""

    def __init__(self):
        self.upload = pn.widgets.FileInput(accept=".parquet", label="Open a sweep's .parquet file")
        self.selectors = {dim: pn.widgets.Select(label=dim.capitalize(), visible=False, width=260)
                          for dim in COMBINATION}
        self.note = pn.pane.Markdown("Run a sweep with `python -m engine sweep ... --out sweep.parquet` "
                                     "(see docs/sweep.md), then open the file here.")
        self.shown = pn.Column(sizing_mode="stretch_width")
        self.rows = None
        self.upload.param.watch(lambda e: self.open(e.new, self.upload.filename or "sweep.parquet"), "value")
        for selector in self.selectors.values():
            selector.param.watch(lambda e: self.draw(), "value")

    def open(self, data: bytes | None, filename: str):
        """A new file: its rows, the selectors' options, and its first combination drawn; a bad file is named."""
        if data is None:
            return
        try:
            rows = uploaded_sweep(data, filename)
        except Exception as err:
            self.rows = None
            self.note.object = ""
            for selector in self.selectors.values():
                selector.visible = False
            self.shown[:] = [message(err)]
            return
        failed = int(rows["error"].notna().sum())
        errors = f", {failed} with errors (not drawn)" if failed else ""
        self.note.object = f"**{filename}**: {len(rows)} rows{errors}"
        self.rows = None  # no drawing while the selectors change one by one
        for dim, options in sweep_choices(rows).items():
            self.selectors[dim].param.update(options=options, value=options[0], visible=True,
                                              disabled=len(options) == 1)
        self.rows = rows
        self.draw()

    def draw(self):
        """The curves of the chosen combination."""
        if self.rows is None:
            return
        try:
            view = sweep_view(self.rows, *(self.selectors[dim].value for dim in COMBINATION))
            self.shown[:] = [pn.pane.Bokeh(view, sizing_mode="stretch_width")]
        except Exception as err:
            self.shown[:] = [message(err)]

    def panel(self) -> pn.Column:
        return pn.Column(self.upload, self.note, pn.Row(*self.selectors.values()), self.shown,
                         sizing_mode="stretch_width")
