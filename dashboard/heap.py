"""The server process's heap as it was before its first page, left out of the garbage collector's full passes
(frozen when the server starts: `dashboard/app_hooks.py`).

Panel runs a full `gc.collect()` on the server's event loop a few seconds after each page closes (to free the page's
document), and Python runs full collections of its own as objects pile up. A full collection visits every object
the process tracks, most of them the modules Panel, Bokeh, pandas and the engine made at import: 0.2-0.5 CPU s of
the event loop with a few pages open, each time. `gc.freeze()` moves the objects alive now into a generation no
collection visits; the pages' objects, made after, are collected as before (5 ms for a full pass then).
"""

from __future__ import annotations

import gc
from functools import cache


@cache
def freeze_startup_heap() -> int:
    """Freeze the objects alive now, once per process (before the first page is built: a page's own objects must
    stay collectable); how many were frozen."""
    gc.freeze()
    return gc.get_freeze_count()
