"""The graph IR every algorithm reads: frozen `Tensor`s and `Op`s in a `Graph`.

Shapes are concrete and include the batch as the leading dimension of every
activation (batch is chosen when a network is loaded; weights carry no batch).
Sizes are counted in elements; bytes come from an accelerator's word width.
"""

from __future__ import annotations

import graphlib
import heapq
import math
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING

from engine.errors import GraphError

if TYPE_CHECKING:
    import networkx as nx

MAX_BATCH = 1 << 20  # a batch larger than this is a typo, and would overflow the byte counts downstream


def valid_batch(batch) -> bool:
    """True when `batch` is a whole number (not a bool) in 1..MAX_BATCH; loaders raise their own error otherwise."""
    return not isinstance(batch, bool) and isinstance(batch, int) and 1 <= batch <= MAX_BATCH


class OpKind(StrEnum):
    """What an op does, as far as the memory models care."""

    CONV = "conv"
    DWCONV = "dwconv"  # depthwise convolution (groups == input channels)
    MATMUL = "matmul"  # fully connected, Gemm, or an attention matmul
    POOL = "pool"
    ELTWISE = "eltwise"  # add, mul, activations left standing
    CONCAT = "concat"
    SPLIT = "split"
    RESHAPE = "reshape"  # reshape-like data movement that could not be folded (transpose, ...)
    SOFTMAX = "softmax"
    NORM = "norm"  # LRN, LayerNorm, a BatchNorm with no op to fold into
    OTHER = "other"  # modelled only by its real input and output tensors


def word_bytes(elements: int, word_bits: int) -> int:
    """Bytes that `elements` values of `word_bits` bits occupy, rounded up to whole bytes (exact at any size)."""
    return -(-elements * word_bits // 8)


@dataclass(frozen=True)
class Tensor:
    """A named tensor with a concrete shape; `is_weight` marks parameters."""

    name: str
    shape: tuple[int, ...]
    is_weight: bool = False

    def __post_init__(self):
        if any((not isinstance(d, int)) or d <= 0 for d in self.shape):
            raise GraphError(f"tensor '{self.name}' has a non-positive or non-integer dimension: {self.shape}")

    @cached_property
    def elements(self) -> int:  # cached: allocation reads every tensor's size once per op that touches it
        return math.prod(self.shape)

    def nbytes(self, word_bits: int) -> int:
        return word_bytes(self.elements, word_bits)


@dataclass(frozen=True)
class Op:
    """One operator after simple-op merging.

    `inputs`/`outputs` name activation tensors, `weights` name parameter tensors.
    `merged` lists the source (ONNX) nodes this op stands for as (node name, op type)
    pairs, its main node first, then folded nodes in execution order. `weights` follow
    the same order: the main node's own (Conv W[, B]; Gemm B[, C]; MatMul B), then 2 per
    folded BatchNormalization (scale, B; running statistics are buffers, not parameters,
    as torchvision counts them), then 1 per folded constant Mul/Add.
    Spatial attributes are per spatial axis (2 entries for 2-D ops, 3 for 3-D);
    `padding` is (begin..., end...) as ONNX writes it. `macs` is counted at the
    graph's batch: multiply-accumulates of conv and matmul ops, 0 for the rest.
    """

    name: str
    kind: OpKind
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weights: tuple[str, ...] = ()
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    macs: int = 0
    source_type: str = ""
    merged: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "kind", OpKind(self.kind))
        if not self.outputs:
            raise GraphError(f"op '{self.name}' has no outputs")
        if self.groups < 1 or self.macs < 0:
            raise GraphError(f"op '{self.name}': groups must be >= 1 and macs >= 0")


@dataclass(frozen=True)
class Graph:
    """A network: ops in a topological order plus every tensor they name.

    Build with `Graph.build(...)`, which checks the IR's rules. `dag` is the
    op-level networkx DiGraph (edge attribute `tensors`: what flows on it).
    `assumptions` says, one sentence each, what the sizes rest on beyond the file and its input shapes (a
    detector's data-dependent counts, engine.onnx.counts), so a report can show them.
    """

    name: str
    ops: tuple[Op, ...]
    tensor_list: tuple[Tensor, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    batch: int = 1
    assumptions: tuple[str, ...] = ()

    @classmethod
    def build(cls, name, ops, tensors, inputs, outputs, batch=1, assumptions=()) -> Graph:
        """Make a checked graph; `ops` may come in any order and are sorted topologically (stably)."""
        tensors = tuple(tensors)
        by_name = {t.name: t for t in tensors}
        if len(by_name) != len(tensors):
            raise GraphError(f"graph '{name}': two tensors share a name")
        ops = tuple(ops)
        producer: dict[str, str] = {}
        for op in ops:
            for t in op.inputs + op.outputs + op.weights:
                if t not in by_name:
                    raise GraphError(f"graph '{name}': op '{op.name}' names unknown tensor '{t}'")
            for t in op.weights:
                if not by_name[t].is_weight:
                    raise GraphError(f"graph '{name}': op '{op.name}' lists activation '{t}' as a weight")
            for t in op.outputs:
                if t in producer:
                    raise GraphError(f"graph '{name}': tensor '{t}' is produced by both '{producer[t]}' and '{op.name}'")
                producer[t] = op.name
        for t in inputs:
            if t in producer:
                raise GraphError(f"graph '{name}': network input '{t}' is also produced by '{producer[t]}'")
        given = set(inputs)  # a Concat's window may have 100,000 inputs: no scan of the tuple per read
        for op in ops:
            for t in op.inputs:
                if t not in producer and t not in given:
                    raise GraphError(f"graph '{name}': op '{op.name}' reads '{t}', which nothing produces")
        ordered = _stable_topological(name, ops, producer)
        return cls(name, ordered, tensors, tuple(inputs), tuple(outputs), batch, tuple(assumptions))

    def _fields(self) -> tuple:
        """The fields, in order: what a graph is (its lookups are derived from them)."""
        return (self.name, self.ops, self.tensor_list, self.inputs, self.outputs, self.batch, self.assumptions)

    def __reduce__(self):
        """Pickled as its fields alone, without the lookups derived from them (rebuilt on use): a graph crosses to
        the dashboard's worker processes with each piece of work."""
        return (Graph, self._fields())

    def __hash__(self) -> int:
        """The fields' hash, computed once: caches keyed by graph (`fusion.model.model_for`) hash it per call."""
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash(self._fields())

    # ---- lookups -------------------------------------------------------
    @cached_property
    def tensors(self) -> MappingProxyType:
        """Tensor name -> Tensor (read-only)."""
        return MappingProxyType({t.name: t for t in self.tensor_list})

    @cached_property
    def _ops_by_name(self) -> dict[str, Op]:
        return {op.name: op for op in self.ops}

    @cached_property
    def _producers(self) -> dict[str, str]:
        return {t: op.name for op in self.ops for t in op.outputs}

    @cached_property
    def _consumers(self) -> dict[str, tuple[str, ...]]:
        readers: dict[str, list[str]] = {}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                readers.setdefault(t, []).append(op.name)
        return {t: tuple(v) for t, v in readers.items()}

    @cached_property
    def position(self) -> dict[str, int]:
        """Op name -> index in the topological order."""
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def returned(self) -> frozenset[str]:
        """The network's outputs as a set: windows of a graph that returns 100,000 tensors test membership per window."""
        return frozenset(self.outputs)

    def op(self, name: str) -> Op:
        try:
            return self._ops_by_name[name]
        except KeyError:
            raise GraphError(f"graph '{self.name}' has no op '{name}'") from None

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise GraphError(f"graph '{self.name}' has no tensor '{name}'") from None

    def producer(self, tensor: str) -> str | None:
        """The op that writes `tensor`, or None for network inputs and weights."""
        return self._producers.get(tensor)

    def consumers(self, tensor: str) -> tuple[str, ...]:
        """Ops that read activation `tensor`, in topological order."""
        return self._consumers.get(tensor, ())

    def read_once(self, tensor: str) -> bool:
        """Whether one op alone reads `tensor` and the network does not return it: a link its maker and reader can
        keep on chip between them (the fusion's subtrees and pieces)."""
        return len(self.consumers(tensor)) == 1 and tensor not in self.returned

    def predecessors(self, op: str) -> tuple[str, ...]:
        return tuple(self.dag.predecessors(op))

    def successors(self, op: str) -> tuple[str, ...]:
        return tuple(self.dag.successors(op))

    @cached_property
    def dag(self) -> nx.DiGraph:
        """Op-level DAG; edge (a, b) carries `tensors`, the activations a writes and b reads."""
        import networkx as nx  # on first use: `import engine` and loading a network stay fast without it

        g = nx.DiGraph()
        g.add_nodes_from(op.name for op in self.ops)
        for op in self.ops:
            for t in op.inputs:
                src = self._producers.get(t)
                if src is None:
                    continue
                if g.has_edge(src, op.name):
                    g.edges[src, op.name]["tensors"] += (t,)
                else:
                    g.add_edge(src, op.name, tensors=(t,))
        return g

    # ---- totals ----------------------------------------------------------
    @cached_property
    def macs(self) -> int:
        return sum(op.macs for op in self.ops)

    @cached_property
    def params(self) -> int:
        """Parameter count: elements of every weight tensor, each counted once."""
        return sum(self.tensors[t].elements for t in {w for op in self.ops for w in op.weights})

    @cached_property
    def weight_reads(self) -> dict[str, int]:
        """Elements of each weight one run reads: all of it, but of a table only Gathers read (an embedding) the
        entries they gather (their outputs' elements, at most the table), as a lookup touches only those rows."""
        gathered: dict[str, int] = {}
        whole: set[str] = set()
        for op in self.ops:
            if op.source_type == "Gather" and len(op.weights) == 1:
                w = op.weights[0]
                gathered[w] = gathered.get(w, 0) + sum(self.tensors[t].elements for t in op.outputs)
            else:
                whole.update(op.weights)
        return {w: self.tensors[w].elements if w in whole else min(self.tensors[w].elements, gathered[w])
                for op in self.ops for w in op.weights}

    def op_params(self, op: str) -> int:
        return sum(self.tensors[w].elements for w in self.op(op).weights)

    def weight_bytes(self, op: str, word_bits: int) -> int:
        return word_bytes(self.op_params(op), word_bits)

    def bytes_of(self, tensors, word_bits: int) -> int:
        """Total bytes of the named tensors (each counted once)."""
        return sum(self.tensors[t].nbytes(word_bits) for t in dict.fromkeys(tensors))

    @cached_property
    def max_fanout(self) -> int:
        """Largest number of successor ops of any op (Optimus Table 5's max |succ|)."""
        return max((self.dag.out_degree(n) for n in self.dag), default=0)

    def largest_activation(self) -> Tensor:
        acts = [self.tensors[t] for op in self.ops for t in op.outputs] + [self.tensors[t] for t in self.inputs]
        return max(acts, key=lambda t: t.elements)


def _stable_topological(name: str, ops: tuple[Op, ...], producer: dict[str, str]) -> tuple[Op, ...]:
    """Kahn's algorithm (the standard library's `graphlib`) that keeps the given order wherever dependencies allow:
    of the ops ready, the one given first."""
    by_name = {op.name: op for op in ops}
    if len(by_name) != len(ops):
        raise GraphError(f"graph '{name}': two ops share a name")
    rank = {op.name: i for i, op in enumerate(ops)}
    sorter = graphlib.TopologicalSorter({op.name: [producer[t] for t in op.inputs if t in producer] for op in ops})
    try:
        sorter.prepare()
    except graphlib.CycleError as cycle:
        raise GraphError(f"graph '{name}' has a cycle through ops {cycle.args[1][:-1]}") from None
    ready = [(rank[n], n) for n in sorter.get_ready()]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(by_name[n])
        sorter.done(n)
        for m in sorter.get_ready():
            heapq.heappush(ready, (rank[m], m))
    return tuple(order)


def conv_macs(out_shape: tuple[int, ...], in_channels: int, kernel: tuple[int, ...], groups: int = 1) -> int:
    """Multiply-accumulates of a (grouped) convolution producing `out_shape` (N, C_out, spatial...)."""
    return math.prod(out_shape) * (in_channels // groups) * math.prod(kernel)


def matmul_macs(out_shape: tuple[int, ...], reduced: int) -> int:
    """Multiply-accumulates of a matmul producing `out_shape`, summing over `reduced` terms each."""
    return math.prod(out_shape) * reduced
