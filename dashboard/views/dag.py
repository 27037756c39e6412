"""The network DAG in a layered top-to-bottom layout, nodes coloured by fused group."""

from __future__ import annotations

from functools import lru_cache

import holoviews as hv
import networkx as nx
import pandas as pd

from engine.graph import Graph

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")


@lru_cache(maxsize=32)
def layered_layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """Op -> (x, y): one row per topological generation, top to bottom (networkx multipartite layout)."""
    dag = graph.dag.copy()
    for depth, layer in enumerate(nx.topological_generations(dag)):
        for node in layer:
            dag.nodes[node]["layer"] = -depth
    pos = nx.multipartite_layout(dag, subset_key="layer", align="horizontal", scale=1.0)
    return {n: (float(x), float(y)) for n, (x, y) in pos.items()}


def node_table(graph: Graph, groups, word_bits: int, group_bytes=None, part_of=None, module_of=None) -> pd.DataFrame:
    """One row per op with what the hover shows: shapes, MACs, bytes, group and its DRAM cost."""
    pos = layered_layout(graph)
    group_of = {op: i for i, grp in enumerate(groups) for op in grp}
    rows = []
    for op in graph.ops:
        g = group_of.get(op.name, -1)
        rows.append({
            "x": pos[op.name][0], "y": pos[op.name][1], "op": op.name, "kind": op.kind.value,
            "inputs": ", ".join("x".join(map(str, graph.tensors[t].shape)) for t in op.inputs) or "-",
            "output": "x".join(map(str, graph.tensors[op.outputs[0]].shape)),
            "MACs": op.macs, "weight_bytes": graph.weight_bytes(op.name, word_bits),
            "group": g, "group_size": len(groups[g]) if g >= 0 else 1,
            "group_dram_bytes": group_bytes[g] if group_bytes is not None and g >= 0 else 0,
            "colour": PALETTE[g % len(PALETTE)] if g >= 0 else "#cccccc",
            "merged": ", ".join(t for _, t in op.merged[1:]) or "-",
            "part": part_of.get(op.name, "") if part_of else "",
            "module": module_of.get(op.name, "") if module_of else "",
        })
    return pd.DataFrame(rows)


def dag_view(graph: Graph, groups, word_bits: int, group_bytes=None, part_of=None, module_of=None) -> hv.Graph:
    """HoloViews graph of the ops: colour = fused group; hover = op details and its group's DRAM bytes."""
    nodes = node_table(graph, groups, word_bits, group_bytes, part_of, module_of)
    edges = pd.DataFrame(list(graph.dag.edges()), columns=["source", "target"])
    vdims = ["kind", "inputs", "output", "MACs", "weight_bytes", "group", "group_size", "group_dram_bytes",
             "colour", "merged", "part", "module"]
    hv_nodes = hv.Nodes(nodes, kdims=["x", "y", "op"], vdims=vdims)
    tooltips = [("op", "@op"), ("kind", "@kind"), ("folded", "@merged"), ("inputs", "@inputs"),
                ("output", "@output"), ("MACs", "@MACs{0,0}"), ("weights (B)", "@weight_bytes{0,0}"),
                ("group", "@group (@group_size ops)"), ("group DRAM (B)", "@group_dram_bytes{0,0}")]
    if part_of:
        tooltips.append(("part", "@part"))
    if module_of:
        tooltips.append(("module", "@module"))
    height = max(500, min(3000, 14 * nodes["y"].nunique()))  # readable rows, even for DenseNet
    return hv.Graph((edges, hv_nodes)).opts(
        node_color="colour", node_size=9, edge_line_width=0.6, edge_alpha=0.5, tools=["hover", "tap"],
        inspection_policy="nodes", hover_tooltips=tooltips, xaxis=None, yaxis=None, responsive=True,
        min_height=int(height), active_tools=["wheel_zoom"], title=f"{graph.name}: {len(groups)} fused groups")
