"""The network DAG's layered top-to-bottom layout (Sugiyama's: layers, crossing reduction, long edges routed
through their own slots), computed by grandalf once per network.

A module of its own, light to import: a server's worker processes compute it (`dashboard.views.dag.dag_layout`),
since a big network's layout is seconds of pure Python that held the server process's GIL, and with it the event
loop, in the thread that prepared a page's report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from grandalf.graphs import Edge, Vertex
from grandalf.graphs import Graph as LayoutGraph
from grandalf.layouts import SugiyamaLayout

from engine.graph import Graph

BOX_W, BOX_H = 120.0, 30.0  # an op's box in layout units (pixels at the first zoom)
GAP_X, GAP_Y = 16.0, 46.0  # between boxes in a layer, and between layers


@dataclass(frozen=True)
class DagLayout:
    """Where each op's box sits (centre), and one polyline per DAG edge in `graph.dag.edges()` order."""

    pos: dict
    paths: tuple
    width: float
    height: float


class _Box:
    """What grandalf needs of a vertex's drawing: its size; it sets the centre `xy`."""

    w, h = BOX_W, BOX_H
    xy = (0.0, 0.0)


class _Route:
    """What grandalf needs of an edge's drawing: it sets the routed points."""

    points = ()

    def setpath(self, points):
        self.points = tuple(points)


class _Vertex(Vertex):
    """grandalf's vertex, hashed by its op's position: grandalf gathers vertices and edges in sets, and hashed by
    their memory addresses (the default) they came out in another order in every process, and so did the layout."""

    def __init__(self, data: str, key: int):
        super().__init__(data)
        self.key = key

    def __hash__(self) -> int:
        return self.key


class _Edge(Edge):
    """grandalf's edge, hashed by its position among the graph's edges (see `_Vertex`)."""

    def __init__(self, x: _Vertex, y: _Vertex, key: int):
        super().__init__(x, y)
        self.key = key

    def __hash__(self) -> int:
        return self.key


def lay_out(graph: Graph) -> DagLayout:
    """Sugiyama layout of the ops (grandalf), top to bottom; weakly connected pieces side by side; the same in every
    process."""
    vertices = {op.name: _Vertex(op.name, i) for i, op in enumerate(graph.ops)}
    for v in vertices.values():
        v.view = _Box()
    edges = {}
    for k, (u, w) in enumerate(graph.dag.edges()):
        edges[u, w] = _Edge(vertices[u], vertices[w], k)
        edges[u, w].view = _Route()
    layout_graph = LayoutGraph(list(vertices.values()), list(edges.values()))
    offset = 0.0
    for piece in layout_graph.C:
        sugiyama = SugiyamaLayout(piece)
        sugiyama.xspace, sugiyama.yspace = GAP_X, GAP_Y
        sugiyama.init_all()
        sugiyama.draw(3)
        xs = [v.view.xy[0] for v in piece.sV]
        shift = offset - min(xs) + BOX_W / 2
        for v in piece.sV:
            v.view.xy = (v.view.xy[0] + shift, v.view.xy[1])
        for e in piece.sE:
            e.view.points = tuple((x + shift, y) for x, y in e.view.points)
        offset += max(xs) - min(xs) + BOX_W + 3 * GAP_X
    pos = {name: (float(v.view.xy[0]), -float(v.view.xy[1])) for name, v in vertices.items()}  # y up, first op on top
    paths = []
    for (u, w), e in edges.items():
        inner = [(float(x), -float(y)) for x, y in e.view.points[1:-1]]
        paths.append(np.array([pos[u], *inner, pos[w]]))
    ys = [p[1] for p in pos.values()]
    return DagLayout(pos, tuple(paths), offset - 3 * GAP_X, max(ys) - min(ys) + BOX_H)
