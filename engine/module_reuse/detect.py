"""Module detection (Alg. 2 of the module-reuse paper): branches that fork from one layer and meet at a merge.

A module starts at the layer whose output every branch reads (the merge's immediate
dominator, the paper's SearchStartLayer), holds every op between that layer and a
merge layer (a concat or an element-wise add), and is entered and left only there.
Long skip connections are cut first, as the paper does (their data comes from
off-chip memory), and so are modules with more layers than the planner handles.
A module inside a module (Inception-C's inner concats) becomes an item of its
parent's branch, one depth deeper.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from engine.graph import Graph, OpKind

_ROOT = "\0network-input"  # virtual op that writes the network inputs


@dataclass(frozen=True)
class Structure:
    """A module's shape: start layer, merge layer, and branches of items (op names or sub-modules).

    `start` is None when the branches fork from a network input; `mifm` names the
    tensors of the start layer that the module reads (its input feature map). A branch is empty when
    the merge reads the MIFM directly (ResNet's identity shortcut).
    """

    start: str | None
    merge: str
    kind: str  # "concat" or "add"
    mifm: tuple[str, ...]
    ops: frozenset
    branches: tuple[tuple, ...]

    @property
    def layers(self) -> tuple[str, ...]:
        """Every op of the module that computes (concat merges only place data), branch by branch."""
        out: list[str] = []
        for branch in self.branches:
            for item in branch:
                out.extend(item.layers if isinstance(item, Structure) else (item,))
        return (*out, self.merge) if self.kind == "add" else tuple(out)


def long_skips(graph: Graph, max_layers: int) -> frozenset:
    """Edges (u, v) that bypass a path of more than `max_layers` ops (the paper's long skip connections)."""
    dag, position = graph.dag, graph.position
    level: dict[str, int] = {}  # op -> ops on the longest path from a source to it: bounds every path between two ops
    for op in graph.ops:
        level[op.name] = 1 + max((level[p] for p in dag.predecessors(op.name)), default=0)
    cut = set()
    for u, v in dag.edges:
        if level[v] - level[u] - 1 <= max_layers:
            continue
        between = nx.descendants(dag, u) & nx.ancestors(dag, v)
        if len(between) <= max_layers:
            continue
        longest = dict.fromkeys(between, 0)  # op -> ops on the longest path u -> op, op included
        for w in sorted(between, key=position.__getitem__):
            longest[w] = 1 + max((longest[p] for p in dag.predecessors(w) if p in longest), default=0)
        if max(longest.values()) > max_layers:
            cut.add((u, v))
    return frozenset(cut)


def effective_dag(graph: Graph, cut: frozenset) -> nx.DiGraph:
    """The op DAG without long skips, with a virtual root feeding the ops that read network inputs."""
    dag = nx.DiGraph(graph.dag)
    dag.remove_edges_from(cut)
    dag.add_node(_ROOT)
    for op in graph.ops:
        if any(t in graph.inputs for t in op.inputs) or dag.in_degree(op.name) == 0:
            dag.add_edge(_ROOT, op.name)
    return dag


def detect(graph: Graph, *, max_layers: int = 16) -> tuple[tuple[Structure, ...], frozenset]:
    """Top-level modules in execution order, and the long-skip edges cut before detection."""
    cut = long_skips(graph, max_layers)
    dag = effective_dag(graph, cut)
    idom = nx.immediate_dominators(dag, _ROOT)
    spans = {}  # merge op -> (start op, ops of the module)
    for op in graph.ops:
        if not _is_merge(op, dag):
            continue
        start = idom[op.name]
        ops = _between(dag, start, op.name)
        if _single_entry_exit(graph, dag, start, op.name, ops):
            spans[op.name] = (start, frozenset(ops))
    built: dict[str, Structure] = {}
    inside_another: set[str] = set()  # merges of built modules that a larger built module holds
    for merge in sorted(spans, key=graph.position.__getitem__):  # inner modules first
        inner = _inside(spans[merge][1], merge, built, graph.position)
        s = _structure(graph, dag, merge, spans[merge], inner, max_layers)
        if s is not None:
            built[merge] = s
            inside_another.update(i.merge for i in inner)
    top = [s for m, s in built.items() if m not in inside_another]
    return tuple(sorted(top, key=lambda s: graph.position[s.merge])), cut


def _between(dag: nx.DiGraph, start: str, merge: str) -> set[str]:
    """The ops after `start` (merge's immediate dominator) and before `merge`, and `merge` itself.

    Walked back from the merge, stopping at the start: as the start dominates the merge, every op reached
    descends from it, and every op between them is reached, so this is descendants(start) & ancestors(merge)
    at the cost of the module, not of the graph (a chain of 12,000 residual adds walked the whole graph
    once per add).
    """
    ops, todo = {merge}, [merge]
    while todo:
        for p in dag.predecessors(todo.pop()):
            if p != start and p not in ops:
                ops.add(p)
                todo.append(p)
    return ops


def _inside(ops: frozenset, merge: str, built: dict, position: dict) -> list[Structure]:
    """Built modules whose ops lie strictly inside `ops`, in the order they were built.

    Such a module's merge is one of `ops`, so only those merges are looked up (not every module built so far).
    """
    found = [built[v] for v in ops if v != merge and v in built and built[v].ops < ops]
    return sorted(found, key=lambda s: position[s.merge])


def _is_merge(op, dag: nx.DiGraph) -> bool:
    """A concat, or an add of activations, with at least two incoming edges after the cut."""
    adds = op.kind == OpKind.ELTWISE and op.source_type in ("Add", "Sum")
    return (op.kind == OpKind.CONCAT or adds) and dag.in_degree(op.name) >= 2


def _single_entry_exit(graph: Graph, dag: nx.DiGraph, start: str, merge: str, ops: set) -> bool:
    """Only the start layer feeds the module and only the merge's output leaves it."""
    outputs = set(graph.outputs)
    for v in ops:
        if any(p not in ops and p != start for p in dag.predecessors(v)):
            return False
        if v != merge and (any(s not in ops for s in dag.successors(v))
                           or any(t in outputs for t in graph.op(v).outputs)):
            return False
    return True


def _structure(graph: Graph, dag: nx.DiGraph, merge: str, span: tuple[str, frozenset], inner: list[Structure],
               max_layers: int) -> Structure | None:
    """Decompose a span ((start, ops)) into branches (chains of ops and the largest of the `inner` modules);
    None when it is no module."""
    start, ops = span
    subs = [s for s in inner if not any(s.ops < o.ops for o in inner)]
    owner = {v: s for s in subs for v in s.ops}
    node = {v: owner.get(v, v) for v in ops}  # op -> item it belongs to

    def succ(item) -> set:
        tail = item.merge if isinstance(item, Structure) else item
        return {node[s] for s in dag.successors(tail) if s in ops}

    heads = [node[s] for s in dag.successors(start) if s in ops]
    branches: list[tuple[str | Structure, ...]] = []
    seen: set[int] = set()
    for head in sorted(dict.fromkeys(heads), key=lambda i: _first(graph, i)):
        if head == merge:
            branches.append(())
            continue
        chain: list[str | Structure] = []
        item = head
        while item != merge:
            if id(item) in seen or len(succ(item)) != 1:
                return None  # forks without a merge of their own: not a series of layers
            seen.add(id(item))
            chain.append(item)
            item = next(iter(succ(item)))
        branches.append(tuple(chain))
    covered = {v for b in branches for i in b for v in (i.ops if isinstance(i, Structure) else (i,))}
    if covered | {merge} != set(ops) or len(branches) < 2:
        return None
    source = None if start == _ROOT else start
    mifm = tuple(dict.fromkeys(t for v in sorted(ops, key=graph.position.__getitem__) for t in graph.op(v).inputs
                               if graph.producer(t) == source and (source or t in graph.inputs)))  # graph's order
    kind = "concat" if graph.op(merge).kind == OpKind.CONCAT else "add"
    s = Structure(source, merge, kind, mifm, ops, tuple(branches))
    return s if len(s.layers) <= max_layers else None


def _first(graph: Graph, item) -> int:
    """Position of the op that comes first in an item."""
    return min(graph.position[v] for v in (item.ops if isinstance(item, Structure) else (item,)))
