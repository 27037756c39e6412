"""Split a graph between CPU and accelerator (the DLA subgraph-extraction paper, Sec. 3).

Supported ops are gathered into maximal, weakly connected, convex subgraphs
(no directed path leaves a subgraph and comes back, so contracting each one
leaves the graph acyclic and the scheduler cannot dead-lock); unsupported ops
form CPU parts the same way. A post-prune then splits every accelerator
subgraph into parts with a single input op and a single output op, so that no
part waits for inputs it needs late or holds back outputs it made early
(the paper's Fig. 3).
"""

from __future__ import annotations

import bisect
import graphlib
import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from engine.errors import EngineError, UnknownNameError
from engine.graph import Graph, Op, OpKind

ACCELERATOR = "accelerator"
CPU = "cpu"


@dataclass(frozen=True)
class Part:
    """One part of the split: ops that run together on one device.

    `inputs` are activations read from outside the part (network inputs included),
    `outputs` activations written here and read outside it (or network outputs);
    `input_ops`/`output_ops` are the ops that read/write them. `crossing_bytes`
    counts the inputs and outputs that come from or go to the other device (the
    host, where network inputs start and outputs end, is the CPU side).
    `region` is the index of the maximal subgraph (before pruning) it came from.
    """

    device: str
    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_ops: tuple[str, ...]
    output_ops: tuple[str, ...]
    in_bytes: int
    out_bytes: int
    crossing_bytes: int
    region: int


@dataclass(frozen=True)
class Partition:
    """The CPU/accelerator split of one graph, before (`maximal`) and after (`parts`) post-pruning.

    Parts are listed in an execution order (a topological order of the contracted graph).
    `crossing_bytes` counts every tensor that moves between CPU and accelerator once.
    """

    graph: str
    word_bits: int
    maximal: tuple[Part, ...]
    parts: tuple[Part, ...]
    crossing_bytes: int

    @property
    def accelerator_parts(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.device == ACCELERATOR)

    @property
    def cpu_parts(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.device == CPU)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {op: i for i, p in enumerate(self.parts) for op in p.ops}

    def part_of(self, op: str) -> int:
        """Index in `parts` of the part that runs `op`."""
        try:
            return self._index[op]
        except KeyError:
            raise EngineError(f"graph '{self.graph}' has no op '{op}' in this partition") from None


def partition(graph: Graph, supported, *, word_bits: int = 16) -> Partition:
    """Split `graph` into accelerator parts and CPU parts; `supported` is a set of op kinds or a predicate.

    Accelerator subgraphs are grown greedily from seeds in topological order and
    merged while a merge stays convex, so no two of them can be joined; each is
    then post-pruned into single-input, single-output parts (DLA paper, Sec. 3).
    """
    if isinstance(word_bits, bool) or not isinstance(word_bits, int) or not 1 <= word_bits <= 64:
        raise EngineError(f"word_bits must be a whole number in 1..64, got {word_bits!r}")
    on_acc = _predicate(supported)
    device = {op.name: ACCELERATOR if on_acc(op) else CPU for op in graph.ops}
    regions = _maximal_regions(graph, device)
    pruned: list[tuple[frozenset, int]] = []
    done: list[frozenset] = []
    for r, ops in enumerate(regions):
        if device[next(iter(ops))] == CPU or len(ops) == 1:  # one op alone is one input op and one output op
            pieces = [ops]
        else:
            def others(r: int = r) -> list[frozenset]:
                return [*done, *regions[r + 1:]]

            pieces = _post_prune(graph, ops, others)
        done.extend(pieces)
        pruned.extend((p, r) for p in pieces)
    maximal = _describe(graph, [(ops, r) for r, ops in enumerate(regions)], device, word_bits)
    parts = _describe(graph, pruned, device, word_bits)
    return Partition(graph.name, word_bits, maximal, parts, _crossing_total(graph, device, word_bits))


# ---- which ops the accelerator runs -------------------------------------------------
def _predicate(supported) -> Callable[[Op], bool]:
    """`supported` as a predicate on ops; kinds may be OpKind values or their strings."""
    if callable(supported):
        return supported
    if isinstance(supported, (str, OpKind)) or not isinstance(supported, Iterable):
        raise EngineError(f"supported must be a set of op kinds or a predicate Op -> bool, got {supported!r}")
    kinds = set()
    for k in supported:
        try:
            kinds.add(OpKind(k))
        except ValueError:
            raise UnknownNameError("op kind", str(k), [x.value for x in OpKind]) from None
    return lambda op: op.kind in kinds


# ---- reachability on the graph with some op sets contracted -----------------------------
class _Quotient:
    """The op DAG with each of `groups` contracted to one node, its edges and a topological rank of its nodes.

    A group of one op is that op's own node, so regions of one op cost nothing to contract.

    A set S of nodes is convex iff no path leaves S and comes back; such a path passes only nodes ranked between
    S's first and last, so a search bounded by rank answers it with nothing stored per node but the edges (bitsets
    of every node's descendants and ancestors took memory quadratic in the ops: 2.29 GB at 100,000).
    """

    def __init__(self, graph: Graph, groups: Iterable[frozenset]):
        self.unit = {op.name: i for i, op in enumerate(graph.ops)}  # op -> node id
        n = len(graph.ops)
        for g in groups:
            if len(g) > 1:  # one op contracted is that op: it keeps its id
                for op in g:
                    self.unit[op] = n
                n += 1
        self.succ: list[set[int]] = [set() for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        for a, b in graph.dag.edges:
            u, v = self.unit[a], self.unit[b]
            if u != v:
                self.succ[u].add(v)
                self.pred[v].add(u)
        self.rank = [0] * n
        for r, u in enumerate(_topological(set(self.unit.values()), self.pred)):
            self.rank[u] = r

    def convex(self, nodes: set[int]) -> bool:
        """Whether no path leaves `nodes` and comes back (it would pass only nodes ranked below their last)."""
        last = max(self.rank[u] for u in nodes)
        leaving = [w for u in nodes for w in self.succ[u] if w not in nodes]
        return not any(w in nodes for w in _walk(leaving, self.succ, lambda w: self.rank[w] < last))

    def convex_with(self, nodes: set[int], first: int, last: int, v: int) -> bool:
        """Whether the convex set `nodes`, ranked `first`..`last`, stays convex with `v` added: a path out and back
        would now run through v, so only v's outside successors and predecessors are searched from. Where v reads
        a member, no path from v reaches the set (with that member it would leave the set and come back, which a
        convex set has none of), so the search forward is skipped; likewise backward where a member reads v.
        Searching forward from each op added to a long chain whose set already held a later-ranked op took time
        quadratic in the chain."""
        first, last = min(first, self.rank[v]), max(last, self.rank[v])
        if not any(w in nodes for w in self.pred[v]):
            after = [w for w in self.succ[v] if w not in nodes]
            if any(w in nodes for w in _walk(after, self.succ, lambda w: self.rank[w] < last)):
                return False
        if not any(w in nodes for w in self.succ[v]):
            before = [w for w in self.pred[v] if w not in nodes]
            if any(w in nodes for w in _walk(before, self.pred, lambda w: self.rank[w] > first)):
                return False
        return True

    def ancestors(self, u: int, first: int) -> set[int]:
        """The ancestors of node `u` ranked `first` or later (a path between two of those passes no earlier one)."""
        return {w for w in _walk(self.pred[u], self.pred, lambda w: self.rank[w] > first) if self.rank[w] >= first}


def _topological(nodes: set[int], pred: list[set[int]]) -> list[int]:
    """`nodes` in a topological order (the standard library's `graphlib`); a cycle left by a contraction is a bug,
    not bad input."""
    try:
        return list(graphlib.TopologicalSorter({u: pred[u] for u in nodes}).static_order())
    except graphlib.CycleError:
        raise RuntimeError("partition: a contraction made a cycle (a bug in the convexity tests, not bad input)") \
            from None


def _walk(starts: Iterable[int], step: list[set[int]], inside: Callable[[int], bool]) -> Iterator[int]:
    """The nodes a walk by `step` (successors or predecessors) reaches from `starts`, starts included, each once,
    going on only from nodes `inside` the bound."""
    seen = set(starts)
    todo = list(seen)
    yield from todo
    while todo:
        u = todo.pop()
        if inside(u):
            for w in step[u]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
                    yield w


# ---- maximal convex subgraphs --------------------------------------------------------
def _maximal_regions(graph: Graph, device: dict[str, str]) -> list[frozenset]:
    """Maximal weakly connected convex op sets of one device each, in an execution order."""
    und = graph.dag.to_undirected(as_view=True)
    regions: list[frozenset] = []
    assigned: set[str] = set()
    # the contraction of `regions`: built again only when a seed can grow and a region that joins paths is new
    q = None
    for seed in graph.ops:
        if seed.name in assigned:
            continue
        dev = device[seed.name]
        if not any(v not in assigned and device[v] == dev for v in und[seed.name]):
            region = frozenset([seed.name])  # no neighbour can join: alone, and convex, without the contraction
        else:
            if q is None:
                q = _Quotient(graph, regions)
            region = _grow(q, und, seed.name, lambda v, taken=assigned, dev=dev: v not in taken and device[v] == dev)
        if not _joins_no_paths(graph.dag, region):
            q = None
        regions.append(region)
        assigned |= region
    regions = _merge_adjacent(graph, regions, device)
    return _in_execution_order(graph, regions)


def _grow(q: _Quotient, und, seed: str, eligible) -> frozenset:
    """Add eligible neighbours to {seed} while the set stays convex, until none can join."""
    region, nodes = {seed}, {q.unit[seed]}
    first = last = q.rank[q.unit[seed]]
    frontier = set(und[seed]) - region  # the region's neighbours, kept as it grows (not gathered again per round)
    grown = True
    while grown:
        grown = False
        added = []
        for v in sorted(frontier, key=q.unit.__getitem__):
            if not eligible(v):
                continue
            u = q.unit[v]
            if q.convex_with(nodes, first, last, u):
                region.add(v)
                added.append(v)
                nodes.add(u)
                first, last, grown = min(first, q.rank[u]), max(last, q.rank[u]), True
        frontier = (frontier | {n for v in added for n in und[v]}) - region
    return frozenset(region)


def _joins_no_paths(dag, region: frozenset) -> bool:
    """Whether contracting `region` adds no path between other ops: whatever enters it enters at one op that reaches
    all of it inside it (or enters nowhere), so the contraction without it answers every convexity test alike.

    A region of ops alternating with the other device's (a chain of conv, conv, softmax, ...) is such a region; not
    building the contraction again for each of them keeps the growth linear in regions, not quadratic.
    """
    entries = [v for v in region if any(p not in region for p in dag.predecessors(v))]
    if len(entries) > 1:
        return False
    if not entries:
        return True
    return len(_reached_within(dag.successors, entries[0], region)) == len(region)


def _reached_within(step, start: str, region: frozenset) -> set[str]:
    """The ops of `region` reached from `start` by `step` (successors or predecessors) without leaving it."""
    reached, todo = {start}, [start]
    while todo:
        for w in step(todo.pop()):
            if w in region and w not in reached:
                reached.add(w)
                todo.append(w)
    return reached


def _merge_adjacent(graph: Graph, regions: list[frozenset], device: dict[str, str]) -> list[frozenset]:
    """Join two same-device regions joined by an edge while their union stays convex in the contraction."""
    merged = True
    while merged:
        merged = False
        owner = {op: i for i, r in enumerate(regions) for op in r}
        q = _Quotient(graph, regions)
        pairs = sorted({tuple(sorted((owner[a], owner[b]))) for a, b in graph.dag.edges
                        if owner[a] != owner[b] and device[a] == device[b]})
        for i, j in pairs:
            if q.convex({q.unit[next(iter(regions[i]))], q.unit[next(iter(regions[j]))]}):
                regions = [r for k, r in enumerate(regions) if k not in (i, j)] + [regions[i] | regions[j]]
                merged = True
                break
    return regions


def _in_execution_order(graph: Graph, groups: list[frozenset]) -> list[frozenset]:
    """Groups sorted topologically on the contracted graph (ties by the first op's position)."""
    owner = {op: i for i, g in enumerate(groups) for op in g}
    first = [min(graph.position[op] for op in g) for g in groups]
    import networkx as nx  # on first use, as `Graph.dag` does

    q = nx.DiGraph()
    q.add_nodes_from(range(len(groups)))
    q.add_edges_from((owner[a], owner[b]) for a, b in graph.dag.edges if owner[a] != owner[b])
    return [groups[i] for i in nx.lexicographical_topological_sort(q, key=first.__getitem__)]


# ---- post-pruning (Sec. 3) -----------------------------------------------------------
def _post_prune(graph: Graph, region: frozenset, others: Callable[[], list[frozenset]]) -> list[frozenset]:
    """Split one convex region into convex parts with at most one input op and one output op.

    From the earliest op e not yet placed, the candidate set D holds the ops whose every
    input is produced inside D (so e stays the only input op); for each x in D the part
    {v in D : v reaches x} has the single output op x when no other member's output
    leaves it. The largest such part that keeps the contraction acyclic is taken. `others()` lists the other
    regions and pieces to contract (made only when a contraction is built: thousands of regions would copy it each).
    """
    if _one_part(graph, region):
        return [region]
    pieces: list[frozenset] = []
    order = sorted(region, key=graph.position.__getitem__)
    left, at = set(order), 0
    while left:
        while order[at] not in left:
            at += 1
        e = order[at]
        cand = _dominated(graph, e, left)
        best = frozenset([e])
        if len(cand) > 1:  # only a part larger than {e} needs the contraction (one op alone is always convex)
            q = _Quotient(graph, [*others(), *pieces])
            within = {q.unit[v]: v for v in cand}
            ranks = sorted(q.rank[u] for u in within)
            # Two tests before the part's convexity, each a reason it would fail: an output op of cand is an output
            # op of any part holding it; e is in every part, so its readers must be too (`_may_end_a_part`)
            reader_ops = {c for t in graph.op(e).outputs for c in graph.consumers(t) if c in cand}
            viable = _may_end_a_part(graph, e, cand, _outputs_ops(graph, frozenset(cand)), reader_ops)
            for x in sorted(cand, key=graph.position.__getitem__, reverse=True):
                ux = q.unit[x]
                # at most as many candidates as are ranked up to x reach it
                if x not in viable or bisect.bisect_right(ranks, q.rank[ux]) <= len(best):
                    continue
                nodes = q.ancestors(ux, ranks[0]) & within.keys() | {ux}  # x and the candidates reaching it
                if len(nodes) <= len(best):
                    continue
                piece = frozenset(within[u] for u in nodes)
                if not _outputs_ops(graph, piece) - {x} and q.convex(nodes):
                    best = piece
        pieces.append(best)
        left -= best
    return pieces


def _may_end_a_part(graph: Graph, e: str, cand: set[str], leaving: set[str], readers: set[str]) -> set[str]:
    """The ops x of `cand` that pass the first two tests of `_post_prune` (no op of `leaving` but x among x and its
    ancestors in `cand`; every op of `readers` among them, unless x is e), found for all at once in one pass in
    topological order: each op's readers as a bitmask over the few of them, and whether a leaving op is above it.
    Walking each x's ancestors to test it took time quadratic in `cand` (a residual chain of 12,000 blocks beside a
    CNN: 88 CPU s). Every path between two ops of `cand` stays in it: an op of it but e reads only ops of it."""
    bit = {r: 1 << k for k, r in enumerate(sorted(readers))}
    reach: dict[str, int] = {}  # op -> the readers among it and its ancestors in cand
    tainted: dict[str, bool] = {}  # op -> whether a leaving op is among its ancestors in cand
    for v in sorted(cand, key=graph.position.__getitem__):
        preds = {u for t in graph.op(v).inputs if (u := graph.producer(t)) in cand} if v != e else set()
        mask = bit.get(v, 0)
        for u in preds:
            mask |= reach[u]
        reach[v] = mask
        tainted[v] = any(tainted[u] or u in leaving for u in preds)
    full = (1 << len(bit)) - 1
    return {x for x in cand if (x == e or reach[x] == full) and not tainted[x]}


def _one_part(graph: Graph, region: frozenset) -> bool:
    """Whether the region is already one part: its first op dominates it and one op, which every op reaches, is
    its only output op. The walk below would take it whole (the largest part, convex as the region is); found
    here without building the contraction, once per region (a chain of conv, conv, softmax, ... has thousands)."""
    first = min(region, key=graph.position.__getitem__)
    outs = _outputs_ops(graph, region)
    if len(outs) != 1 or _dominated(graph, first, set(region)) != region:
        return False
    return len(_reached_within(graph.predecessors, next(iter(outs)), region)) == len(region)


def _dominated(graph: Graph, e: str, left: set[str]) -> set[str]:
    """e plus the ops of `left` (all after e) whose inputs all come from inside the set: found from e through
    consumers, in topological order (an op whose inputs all come from the set reads one of its members)."""
    cand = {e}
    position = graph.position
    ahead = [(position[c], c) for t in graph.op(e).outputs for c in graph.consumers(t)]
    heapq.heapify(ahead)
    seen: set[str] = set()
    while ahead:
        _, v = heapq.heappop(ahead)
        if v in seen or v not in left:
            continue
        seen.add(v)
        if all(graph.producer(t) in cand for t in graph.op(v).inputs):
            cand.add(v)
            for t in graph.op(v).outputs:
                for c in graph.consumers(t):
                    heapq.heappush(ahead, (position[c], c))
    return cand


def _outputs_ops(graph: Graph, ops: frozenset) -> set[str]:
    """Ops of `ops` whose output is read outside the set or leaves the network."""
    net_out = set(graph.outputs)
    return {v for v in ops for t in graph.op(v).outputs
            if t in net_out or any(c not in ops for c in graph.consumers(t))}


# ---- describing parts ----------------------------------------------------------------
def _describe(graph: Graph, groups: list[tuple[frozenset, int]], device: dict[str, str],
              word_bits: int) -> tuple[Part, ...]:
    ordered = _in_execution_order(graph, [g for g, _ in groups])
    region_of = {g: r for g, r in groups}
    net_out = set(graph.outputs)
    parts = []
    for g in ordered:
        ops = tuple(sorted(g, key=graph.position.__getitem__))
        dev = device[ops[0]]
        inputs = tuple(dict.fromkeys(t for v in ops for t in graph.op(v).inputs if graph.producer(t) not in g))
        outputs = tuple(dict.fromkeys(t for v in ops for t in graph.op(v).outputs
                                      if t in net_out or any(c not in g for c in graph.consumers(t))))
        read, written = set(inputs), set(outputs)  # sets, not the tuples: a Concat of 25,000 inputs is one op
        input_ops = tuple(v for v in ops if any(t in read for t in graph.op(v).inputs))
        output_ops = tuple(v for v in ops if any(t in written for t in graph.op(v).outputs))
        cross_in = [t for t in inputs if _source_device(graph, t, device) != dev]
        cross_out = [t for t in outputs if _sink_devices(graph, t, device, net_out) - {dev}]
        parts.append(Part(dev, ops, inputs, outputs, input_ops, output_ops,
                          graph.bytes_of(inputs, word_bits), graph.bytes_of(outputs, word_bits),
                          graph.bytes_of(cross_in, word_bits) + graph.bytes_of(cross_out, word_bits),
                          region_of[g]))
    return tuple(parts)


def _source_device(graph: Graph, tensor: str, device: dict[str, str]) -> str:
    p = graph.producer(tensor)
    return CPU if p is None else device[p]  # network inputs start on the host


def _sink_devices(graph: Graph, tensor: str, device: dict[str, str], net_out: set[str]) -> set[str]:
    sinks = {device[c] for c in graph.consumers(tensor)}
    return sinks | {CPU} if tensor in net_out else sinks  # network outputs end on the host


def _crossing_total(graph: Graph, device: dict[str, str], word_bits: int) -> int:
    """Bytes of every tensor read or delivered on the other device than the one that holds it first."""
    net_out = set(graph.outputs)
    tensors = list(graph.inputs) + [t for op in graph.ops for t in op.outputs]
    moved = [t for t in tensors if _sink_devices(graph, t, device, net_out) - {_source_device(graph, t, device)}]
    return graph.bytes_of(moved, word_bits)
