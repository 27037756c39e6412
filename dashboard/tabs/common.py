"""Small pieces every tab shares: errors in the user's words, and downloadable tables."""

from __future__ import annotations

import io

import pandas as pd
import panel as pn

import engine


def error_text(err: Exception) -> str:
    """The engine's own message for bad input; anything else is named as an internal error."""
    return str(err) if isinstance(err, engine.EngineError) else f"internal error ({err.__class__.__name__}): {err}"


# the chosen button of a group in the header's blue with white bold text, on either theme (the design's own style
# set it apart from the others by 5 grey levels)
CHOSEN_CSS = (".bk-btn-group .bk-btn.bk-active { background-color: #0072b5 !important; border-color: #0072b5 !important; "
              "color: #ffffff !important; font-weight: 600; }")


def toggles(parameter) -> pn.widgets.RadioButtonGroup:
    """Buttons for a choice among a few, the chosen one clearly marked (CHOSEN_CSS)."""
    return pn.widgets.RadioButtonGroup.from_param(parameter, stylesheets=[CHOSEN_CSS])


def message(err: Exception) -> pn.pane.Alert:
    """An error as the page shows it: the engine's own words, never a traceback."""
    if isinstance(err, engine.EngineError):
        return pn.pane.Alert(str(err), alert_type="danger")
    return pn.pane.Alert(f"{error_text(err)}. Please report it with the URL.", alert_type="danger")


def download_table(df: pd.DataFrame, filename: str) -> pn.Column:
    """A paged table with a button that downloads it whole as CSV."""
    button = pn.widgets.FileDownload(callback=lambda: io.StringIO(df.to_csv(index=False)), filename=filename,
                                     label=f"Download {filename}")
    return pn.Column(button, pn.widgets.Tabulator(df, disabled=True, pagination="remote", page_size=25,
                                                  sizing_mode="stretch_width", show_index=False))
