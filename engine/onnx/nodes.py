"""Which ONNX nodes become the graph: named uniquely, checked for wiring, ordered, and the data-dependent tail cut."""

from __future__ import annotations

import networkx as nx
from onnx import helper

from engine.errors import ModelFileError
from engine.onnx.ops import DATA_DEPENDENT


def sorted_nodes(model, path) -> list:
    """(name, node) pairs in a topological order, with unique names; a cycle, a twice-written or dangling tensor
    is a ModelFileError naming the node."""
    g = model.graph
    names, seen = [], set()
    for i, node in enumerate(g.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    available = {i.name for i in g.initializer} | {i.name for i in g.input}
    writer = {}
    for name, node in zip(names, g.node):
        for out in node.output:
            if out and (out in writer or out in available):
                raise ModelFileError(path, f"tensor '{out}' is written twice", node=name)
            if out:
                writer[out] = name
    for name, node in zip(names, g.node):
        for t in node.input:
            if t and t not in writer and t not in available:
                raise ModelFileError(path, f"{node.op_type} reads '{t}', which no node, input or "
                                           f"initializer provides", node=name)
    for out in g.output:
        if out.name not in writer and out.name not in available:
            raise ModelFileError(path, f"graph output '{out.name}' is produced by no node")
    try:
        order = _topological(g.node)
    except nx.NetworkXUnfeasible as err:
        raise ModelFileError(path, "the graph has a cycle", node=names[err.args[1][0][0]]) from None
    return [(names[i], g.node[i]) for i in order]


def _topological(nodes) -> list[int]:
    """Indices of `nodes` with every writer before its readers (input order where that holds).

    Raises networkx.NetworkXUnfeasible, with the cycle in `.args[1]`, when the nodes form a cycle.
    """
    writer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(nodes)))
    dag.add_edges_from((writer[t], i) for i, n in enumerate(nodes) for t in (*n.input, *_outer_reads(n))
                       if t in writer)
    try:
        return list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        raise nx.NetworkXUnfeasible("cycle", nx.find_cycle(dag)) from None


def _outer_reads(node) -> set[str]:
    """Tensors the subgraphs of `node` (an If's branches, a Loop's body) read from outside themselves."""
    found: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            inner = {t for n in sub.node for t in n.output} | {i.name for i in (*sub.input, *sub.initializer)}
            found |= {t for n in sub.node for t in (*n.input, *_outer_reads(n)) if t and t not in inner}
    return found


def drop_data_dependent(nodes, shapes: dict, sources: dict) -> tuple[list, list[str]]:
    """`nodes` without the part whose shapes depend on data (detection post-processing), and where that part
    starts ("TopK 'nms'", ...), empty when nothing was left out.

    Only a part that starts at DATA_DEPENDENT ops is left out; a shapeless output anywhere else stays an
    error naming the node (raised later, where its shape is needed), so a network is never cut short silently.
    """
    dropped, origins = set(), []
    for name, node in nodes:
        acts = [t for t in node.input if t and t not in sources]
        outs = [t for t in node.output if t]
        if any(t in dropped for t in acts):
            dropped.update(outs)
        elif any(t not in shapes for t in outs) and node.op_type in DATA_DEPENDENT:
            dropped.update(outs)
            origins.append(f"{node.op_type} '{name}'")
    if not origins:
        return nodes, origins
    return [(name, node) for name, node in nodes if not any(t in dropped for t in node.output if t)], origins

def attr(node, name: str, default=None):
    """The value of `node`'s attribute `name`, or `default` when the node does not set it."""
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)
