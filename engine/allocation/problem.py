"""One allocation instance: ops to run, what each needs on chip, and the memory state it starts from.

The whole graph is one `Problem`; divide-and-conquer makes one per segment, each starting
from the `Carry` the previous segment left (tensors on chip at fixed addresses, tensors
DRAM holds, inputs not yet loaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import gcd
from types import MappingProxyType

from engine.allocation.record import needs
from engine.graph import Graph


@dataclass(frozen=True)
class Carry:
    """Memory state between two segments."""

    resident: MappingProxyType  # tensor -> address (bytes) of tensors on chip
    host: frozenset[str]  # tensors DRAM holds a copy of
    fresh: frozenset[str]  # network inputs and weights never loaded yet (their next load is compulsory)

    @classmethod
    def start(cls, graph: Graph, include_params: bool) -> Carry:
        """Nothing on chip; DRAM holds the network inputs (and the weights)."""
        ext = set(graph.inputs) | ({w for op in graph.ops for w in op.weights} if include_params else set())
        return cls(MappingProxyType({}), frozenset(ext), frozenset(ext))


@dataclass(frozen=True, eq=False)
class Problem:
    """Ops (in a topological order) to run from a `Carry`, under `budget` bytes.

    `keep` are tensors that later segments still read. `order` fixes the schedule
    (COSMA Eq. 16) when given. `free_spill` are network outputs: writing them to DRAM is
    their compulsory write-back, so spilling them costs nothing.
    """

    ops: tuple[str, ...]
    reads: MappingProxyType
    writes: MappingProxyType
    size: MappingProxyType
    free_spill: frozenset[str]
    carry: Carry
    keep: frozenset[str]
    budget: int
    order: tuple[str, ...] | None = None

    @cached_property
    def tensors(self) -> tuple[str, ...]:
        seen = dict.fromkeys(a for op in self.ops for a in self.reads[op] + self.writes[op])
        seen.update(dict.fromkeys(a for a in self.carry.resident if a in self.keep))
        return tuple(seen)

    @cached_property
    def producer(self) -> dict[str, str]:
        return {a: op for op in self.ops for a in self.writes[op]}

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for op in self.ops:
            for a in self.reads[op]:
                out.setdefault(a, []).append(op)
        return {a: tuple(v) for a, v in out.items()}

    @cached_property
    def preds(self) -> dict[str, tuple[str, ...]]:
        """Op -> ops in this problem it depends on."""
        return {op: tuple(dict.fromkeys(self.producer[a] for a in self.reads[op] if a in self.producer))
                for op in self.ops}

    @cached_property
    def unit(self) -> int:
        """Largest byte count dividing every size and carried address: the ILP counts in these units."""
        u = 0
        for a in self.tensors:
            u = gcd(u, self.size[a])
        for addr in self.carry.resident.values():
            u = gcd(u, addr)
        return u or 1


def requirement(graph: Graph, op: str, *, include_params: bool, word_bits: int) -> int:
    """Bytes `op` needs on chip at once: its inputs and outputs (and weights): COSMA's per-op M_R term."""
    reads, writes = needs(graph, op, include_params)
    return graph.bytes_of(reads + writes, word_bits)


def make_problem(graph: Graph, ops, budget: int, carry: Carry, *, include_params: bool, word_bits: int,
                 later: frozenset[str] = frozenset(), order=None) -> Problem:
    """The problem of running `ops` (a down-set of what is left) from `carry`; `later` = tensors read afterwards."""
    ops = tuple(ops)
    reads, writes = {}, {}
    for op in ops:
        reads[op], writes[op] = needs(graph, op, include_params)
    touched = {a for op in ops for a in reads[op] + writes[op]} | set(carry.resident)
    size = {a: graph.tensor(a).nbytes(word_bits) for a in touched}
    keep = frozenset(touched & later)
    return Problem(ops, MappingProxyType(reads), MappingProxyType(writes), MappingProxyType(size),
                   frozenset(graph.outputs) & touched, carry, keep, budget,
                   tuple(order) if order is not None else None)
