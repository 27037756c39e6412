"""The network DAG in a layered top-to-bottom layout, nodes coloured by fused group."""

from __future__ import annotations

from functools import lru_cache

import holoviews as hv
import networkx as nx
import numpy as np
import pandas as pd

from engine.graph import Graph

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")


@lru_cache(maxsize=32)
def layered_layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """Op -> (x, y): one row per topological generation, top to bottom, unit spacing within a row.

    Each row is ordered by the mean x of its producers (one barycentre sweep, as in
    Sugiyama-style layouts), so branches sit beside each other and edges cross little.
    """
    pos: dict[str, tuple[float, float]] = {}
    for depth, layer in enumerate(nx.topological_generations(graph.dag)):
        def barycentre(node):
            xs = [pos[p][0] for p in graph.dag.predecessors(node) if p in pos]
            return (sum(xs) / len(xs) if xs else 0.0, graph.position[node])
        row = sorted(layer, key=barycentre)
        for i, node in enumerate(row):
            pos[node] = (i - (len(row) - 1) / 2, -float(depth))
    return pos


@lru_cache(maxsize=32)
def edge_paths(graph: Graph) -> tuple[np.ndarray, ...]:
    """One polyline per DAG edge: straight to the next row, an arc for an edge that skips rows.

    A skip edge (a residual add, DenseNet's concats) drawn straight would run over the ops
    between its ends; the arc bows sideways by sqrt(rows skipped), so nested skips stay apart.
    """
    pos = layered_layout(graph)
    t = np.linspace(0.0, 1.0, 16)[:, None]
    paths = []
    for u, v in graph.dag.edges():
        (x1, y1), (x2, y2) = pos[u], pos[v]
        span = y1 - y2
        if span <= 1:
            paths.append(np.array([[x1, y1], [x2, y2]]))
            continue
        side = 1.0 if (x1 + x2) >= 0 else -1.0
        control = np.array([(x1 + x2) / 2 + side * 0.8 * np.sqrt(span), (y1 + y2) / 2])
        start, end = np.array([x1, y1]), np.array([x2, y2])
        paths.append((1 - t) ** 2 * start + 2 * (1 - t) * t * control + t ** 2 * end)  # quadratic Bezier
    return tuple(paths)


def node_table(graph: Graph, groups, word_bits: int, group_bytes=None, overlay=None) -> pd.DataFrame:
    """One row per op (in graph order) with what the hover shows: shapes, MACs, bytes, group and its DRAM cost.

    Nodes are coloured by fused group, or by `overlay` (op -> label, e.g. its CPU/accelerator
    part or its module) when given; ops without a label are grey.
    """
    pos = layered_layout(graph)
    group_of = {op: i for i, grp in enumerate(groups) for op in grp}
    labels = list(dict.fromkeys(v for v in (overlay or {}).values() if v))
    rows = []
    for op in graph.ops:
        g = group_of.get(op.name, -1)
        label = (overlay or {}).get(op.name, "") if overlay is not None else (f"group {g}" if g >= 0 else "")
        index = labels.index(label) if overlay is not None and label else g
        rows.append({
            "x": pos[op.name][0], "y": pos[op.name][1], "op": op.name, "kind": op.kind.value,
            "inputs": ", ".join("x".join(map(str, graph.tensors[t].shape)) for t in op.inputs) or "-",
            "output": "x".join(map(str, graph.tensors[op.outputs[0]].shape)),
            "MACs": op.macs, "weight_bytes": graph.weight_bytes(op.name, word_bits),
            "group": g, "group_size": len(groups[g]) if g >= 0 else 1,
            "group_dram_bytes": group_bytes[g] if group_bytes is not None and g >= 0 else 0,
            "overlay": label or "-",
            "colour": PALETTE[index % len(PALETTE)] if index >= 0 and (label or overlay is None) else "#cccccc",
            "merged": ", ".join(t for _, t in op.merged[1:]) or "-",
        })
    return pd.DataFrame(rows)


def dag_view(graph: Graph, groups, word_bits: int, group_bytes=None, overlay=None, title="") -> hv.Graph:
    """HoloViews graph of the ops: colour = fused group (or overlay); hover = op details and its group's cost."""
    nodes = node_table(graph, groups, word_bits, group_bytes, overlay)
    edges = pd.DataFrame(list(graph.dag.edges()), columns=["source", "target"])
    vdims = ["kind", "inputs", "output", "MACs", "weight_bytes", "group", "group_size", "group_dram_bytes",
             "overlay", "colour", "merged"]
    hv_nodes = hv.Nodes(nodes, kdims=["x", "y", "op"], vdims=vdims)
    # @{name} keeps Bokeh from reading "@group_size" as the column "group" followed by "_size"
    tooltips = [("op", "@{op}"), ("kind", "@{kind}"), ("folded", "@{merged}"), ("inputs", "@{inputs}"),
                ("output", "@{output}"), ("MACs", "@{MACs}{0,0}"), ("weights (B)", "@{weight_bytes}{0,0}"),
                ("group", "@{group} (@{group_size} ops)"), ("group DRAM (B)", "@{group_dram_bytes}{0,0}")]
    if overlay is not None:
        tooltips.append(("part / module", "@{overlay}"))
    height = max(500, min(3200, 22 * nodes["y"].nunique()))  # readable rows, even for DenseNet
    paths = edge_paths(graph)
    xs = np.concatenate([nodes["x"].to_numpy(), *(p[:, 0] for p in paths)]) if paths else nodes["x"].to_numpy()
    return hv.Graph((edges, hv_nodes, list(paths))).opts(
        xlim=(float(xs.min()) - 0.6, float(xs.max()) + 0.6), ylim=(float(nodes["y"].min()) - 0.8, 0.8),
        node_color="colour", node_size=9, edge_line_width=0.6, edge_alpha=0.5, tools=["hover", "tap"],
        inspection_policy="nodes", hover_tooltips=tooltips, xaxis=None, yaxis=None, responsive=True,
        min_height=int(height), active_tools=["wheel_zoom"],
        title=title or f"{graph.name}: {len(groups)} fused groups (click an op for its loop nest)")
