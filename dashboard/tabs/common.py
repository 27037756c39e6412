"""Small pieces every tab shares: errors in the user's words, and downloadable tables."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import panel as pn

import engine
from dashboard.panel_hooks import walking_only_new_models


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


@contextmanager
def one_message() -> Iterator[None]:
    """Changes to the page's views as one message to the browser, and one walk of the page's document: each HTML or
    Markdown pane's new text also sets its model's stylesheets, and Bokeh walks the whole document after each such
    change (`DocumentModelManager.recompute`, 0.025-0.035 CPU s for a whole page); held, once at the end, before the
    message is written, and of the new models only where no model was dropped (`walking_only_new_models`;
    docs/dashboard.md, "A room of users"). Only on the event loop's thread, where a server's page
    is changed under its lock (the page-building thread makes views not yet in the document: nothing to walk)."""
    doc = pn.state.curdoc
    with pn.io.hold():
        if doc is None or not _on_the_loop():
            yield
        else:
            with walking_only_new_models(doc):
                yield


def _on_the_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
