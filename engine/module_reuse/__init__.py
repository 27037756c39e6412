"""Module-based on-chip reuse for multi-branch blocks (Kim et al., "A Simple Method to Reduce Off-chip
Memory Accesses on Convolutional Neural Networks"): `plan_modules(graph, acc)`.

Alg. 1 of the paper, step by step: detect modules (detect.py, Alg. 2), order each
module's branches and walk them with shared MIFM regions, occupied MOFM and
OFM forwarding, choosing processing I or II per module (process.py, Alg. 3-6),
and forward a module's output to the next module when it stays on chip. Sizes
follow the paper's NPU (memory.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.errors import EngineError
from engine.graph import Graph, OpKind
from engine.module_reuse.detect import Structure, detect
from engine.module_reuse.memory import NpuModel
from engine.module_reuse.process import (
    NAIVE,
    PROCESSING_I,
    PROCESSING_II,
    Region,
    Run,
    Step,
    Traffic,
    branch_order,
    layer_traffic,
    naive_traffic,
    run,
)

__all__ = ["plan_modules", "ModulePlan", "Module", "NpuModel", "Region", "Step", "Traffic", "Structure"]


@dataclass(frozen=True)
class Module:
    """One detected module and how it runs: traffic of the paper's Naive and of the proposed processing.

    `branches` lists each branch's ops (sub-modules flattened) in the graph's order;
    `order` is the processing order of Alg. 3 (indices into `branches`). `processing`
    is "I", "II", or "naive" when not even processing II finds room. Feature-map
    traffic counts off-chip reads and writes; weights are read once either way.
    """

    name: str
    start: str | None
    merge: str
    kind: str
    ops: tuple[str, ...]
    layers: tuple[str, ...]
    branches: tuple[tuple[str, ...], ...]
    order: tuple[int, ...]
    mifm_bytes: int
    mofm_bytes: int
    mifm_resident: bool  # the MIFM is on chip at the start (forwarded from the previous layer or module)
    processing: str
    forwards_output: bool  # the whole MOFM stays on chip for whoever reads it next
    weight_bytes: int
    naive: Traffic
    proposed: Traffic
    steps: tuple[Step, ...]
    side: str  # where the MIFM sits: "low" or "high" addresses (consecutive modules alternate)

    @property
    def naive_bytes(self) -> int:
        return self.naive.bytes

    @property
    def proposed_bytes(self) -> int:
        return self.proposed.bytes


@dataclass(frozen=True)
class ModulePlan:
    """Every module of a graph on one accelerator, with totals over the modules (Table 1's layout)."""

    graph: str
    accelerator: str
    npu: NpuModel
    modules: tuple[Module, ...]
    long_skips: tuple[tuple[str, str], ...]  # edges cut before detection (their data comes from off chip)
    outside: tuple[str, ...]  # ops in no module
    outside_traffic: Traffic  # their feature-map traffic when each reads and writes off chip (as Naive)

    @property
    def weight_bytes(self) -> int:
        return sum(m.weight_bytes for m in self.modules)

    @property
    def naive(self) -> Traffic:
        return sum((m.naive for m in self.modules), Traffic())

    @property
    def proposed(self) -> Traffic:
        return sum((m.proposed for m in self.modules), Traffic())

    def table(self) -> list[dict]:
        """Rows of the paper's Table 1 (bytes), one per module and a final 'total'."""
        rows = [_row(m.name, m.weight_bytes, m.naive, m.proposed) for m in self.modules]
        return rows + [_row("total", self.weight_bytes, self.naive, self.proposed)]


def plan_modules(graph: Graph, acc: Accelerator, *, npu: NpuModel | None = None,
                 max_module_layers: int = 16) -> ModulePlan:
    """Detect the graph's modules and plan each on chip; `npu` defaults to `NpuModel.for_accelerator(acc)`.

    Modules with more than `max_module_layers` layers, and skip connections that
    bypass more layers than that, are left out as the paper does.
    """
    if isinstance(max_module_layers, bool) or not isinstance(max_module_layers, int) or max_module_layers < 1:
        raise EngineError(f"max_module_layers must be a whole number of layers, at least 1, got {max_module_layers!r}")
    npu = npu or NpuModel.for_accelerator(acc)
    structures, cut = detect(graph, max_layers=max_module_layers)
    left_off: dict[str, int] = {}  # merge op -> bytes of its output written off chip
    side_of: dict[str, str] = {}  # merge op -> side its module's MIFM used
    modules = []
    for s in structures:
        resident = s.start is not None and left_off.get(s.start, 0) == 0
        side = ("high" if side_of[s.start] == "low" else "low") if resident and s.start in side_of else "low"
        chosen = _choose(graph, s, npu, resident, side)
        module = _module(graph, s, npu, chosen, resident, side, cut)
        left_off[s.merge] = chosen.out_offchip
        side_of[s.merge] = side
        modules.append(module)
    inside = {v for s in structures for v in s.ops}
    outside = tuple(op.name for op in graph.ops if op.name not in inside)
    return ModulePlan(graph.name, acc.name, npu, tuple(modules), tuple(sorted(cut)), outside,
                      layer_traffic(graph, [v for v in outside if graph.op(v).kind != OpKind.CONCAT], npu))


def _choose(graph: Graph, s: Structure, npu: NpuModel, resident: bool, side: str) -> Run:
    """Processing I when every layer can forward its OFM; else II when every layer finds room; else naive."""
    first = run(graph, s, npu, PROCESSING_I, mifm_resident=resident, side=side)
    if first.fits:
        return first
    second = run(graph, s, npu, PROCESSING_II, mifm_resident=resident, side=side)
    if second.feasible:
        return second
    out = sum(npu.fm_bytes(graph, t) for t in graph.op(s.merge).outputs)
    return Run(NAIVE, second.steps, naive_traffic(graph, s, npu), out, False, False)


def _module(graph: Graph, s: Structure, npu: NpuModel, chosen: Run, resident: bool, side: str,
            cut) -> Module:
    proposed = chosen.traffic
    if chosen.processing != NAIVE:  # long skips reach the module through off-chip memory
        for u, v in cut:
            tensors = graph.dag.edges[u, v]["tensors"]
            size = sum(npu.fm_bytes(graph, t) for t in tensors)
            if v in s.ops:
                proposed += Traffic(len(tensors), 0, size, 0)
            if u in s.ops and u != s.merge:
                proposed += Traffic(0, len(tensors), 0, size)
    ops = tuple(sorted(s.ops, key=graph.position.__getitem__))  # the graph's order, at the module's cost
    branches = tuple(tuple(v for v in ops if v in _branch_ops(b)) for b in s.branches)
    return Module(
        name=_label(ops), start=s.start, merge=s.merge, kind=s.kind, ops=ops, layers=s.layers,
        branches=branches, order=branch_order(graph, s, npu),
        mifm_bytes=sum(npu.fm_bytes(graph, t) for t in s.mifm),
        mofm_bytes=sum(npu.fm_bytes(graph, t) for t in graph.op(s.merge).outputs),
        mifm_resident=resident, processing=chosen.processing, forwards_output=chosen.out_offchip == 0,
        weight_bytes=sum(graph.weight_bytes(v, npu.word_bits) for v in s.layers),
        naive=naive_traffic(graph, s, npu), proposed=proposed, steps=chosen.steps, side=side)


def _branch_ops(branch) -> set[str]:
    return {v for item in branch for v in (item.ops if isinstance(item, Structure) else (item,))}


def _label(ops: tuple[str, ...]) -> str:
    """The longest dotted prefix all the module's op names share (e.g. 'Mixed_5b'), else the last op's name."""
    common = os.path.commonprefix([op.split(".") for op in ops])
    return ".".join(common) if common else ops[-1]


def _row(name: str, weights: int, naive: Traffic, proposed: Traffic) -> dict:
    overall_naive, overall_proposed = weights + naive.bytes, weights + proposed.bytes
    return {"module": name, "weight_bytes": weights, "naive_fm_bytes": naive.bytes,
            "naive_overall_bytes": overall_naive, "proposed_fm_bytes": proposed.bytes,
            "proposed_overall_bytes": overall_proposed,
            "overall_ratio": overall_proposed / overall_naive if overall_naive else 0.0,
            "fm_ratio": proposed.bytes / naive.bytes if naive.bytes else 0.0,
            "naive_reads": naive.reads, "naive_writes": naive.writes,
            "proposed_reads": proposed.reads, "proposed_writes": proposed.writes}
