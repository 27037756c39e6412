"""How a page's messages reach the browser: the websocket sends each frame at once.

Bokeh writes every message as three or more websocket frames (header, metadata, content,
buffers), each its own write to the socket. With Nagle's algorithm on (Tornado's default) the
kernel holds a small write back while an earlier one is unacknowledged, and the browser
acknowledges late (delayed ACK, 40 ms on Linux): every slider move waited ~40 ms for nothing
(docs/dashboard.md, "Why a slider move is quick").
"""

from __future__ import annotations


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
