"""How a page's messages reach the browser: every message Panel queued is sent, and each frame at once.

Bokeh writes every message as three or more websocket frames (header, metadata, content,
buffers), each its own write to the socket. With Nagle's algorithm on (Tornado's default) the
kernel holds a small write back while an earlier one is unacknowledged, and the browser
acknowledges late (delayed ACK, 40 ms on Linux): every slider move waited ~40 ms for nothing
(docs/dashboard.md, "Why a slider move is quick"). Panel 1.9 could leave a queued message unsent until
the page's next change (`delivering_queued`).
"""

from __future__ import annotations

import functools


def send_frames_at_once(doc) -> int:
    """Turn Nagle's algorithm off on every websocket of `doc`'s server session; how many there were.

    Bokeh exposes no option for it, so this reaches the session's connections (a ServerSession's
    subscribed ServerConnections, each wrapping Tornado's WebSocketHandler) through their private fields;
    where a Bokeh release has renamed them nothing is changed (the page is then only slower).
    """
    context = getattr(doc, "session_context", None)
    session = getattr(context, "session", None)
    connections = list(getattr(session, "_subscribed_connections", ()))
    sockets = [getattr(connection, "_socket", None) for connection in connections]
    handlers = [socket for socket in sockets if callable(getattr(socket, "set_nodelay", None))]
    for handler in handlers:
        handler.set_nodelay(True)
    return len(handlers)


def delivering_queued(dispatch):
    """Panel's message dispatcher `dispatch` (panel.io.document._dispatch_msgs), made to send what was queued while it
    was writing.

    Panel queues a page's messages while its socket is busy and a dispatch task sends them. A task that finds the
    socket still locked requeues its messages and tries again 10 ms later; if the task that held the socket finishes
    meanwhile, it clears the queue's busy mark and the retry gives up, leaving the messages queued until the page's
    next change. A slider move's report, published just then, never reached the browser while it was the last one
    (docs/dashboard.md, "A move's report lost in Panel's queue"). This wrapper dispatches again whatever is left.
    """
    from panel.io import document

    @functools.wraps(dispatch)
    async def dispatch_and_deliver_the_rest(doc):
        await dispatch(doc)
        if document._WRITE_MSGS.get(doc) and doc not in document._WRITE_BLOCK:
            document._WRITE_BLOCK[doc] = True
            document._dispatch_write_task(doc, dispatch_and_deliver_the_rest, doc)

    dispatch_and_deliver_the_rest.delivers_queued = True
    return dispatch_and_deliver_the_rest


def deliver_every_queued_message() -> bool:
    """Use `delivering_queued` for Panel's dispatcher (once per process); whether Panel has it where expected (where a
    Panel release has moved it nothing is changed)."""
    from panel.io import document

    dispatch = getattr(document, "_dispatch_msgs", None)
    if dispatch is None or not all(hasattr(document, name) for name in ("_WRITE_MSGS", "_WRITE_BLOCK",
                                                                        "_dispatch_write_task")):
        return False
    if not getattr(dispatch, "delivers_queued", False):
        document._dispatch_msgs = delivering_queued(dispatch)
    return True
