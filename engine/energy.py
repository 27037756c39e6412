"""Energy breakdown and latency of a fusion plan: DRAM, global buffer, PE array, RF and MAC.

The Optimus evaluation (Sec. 7.1, Fig. 13) splits energy the way the Eyeriss analysis
framework does: accesses at each level times that level's energy per word
(`Accelerator.energy_pj`: the Eyeriss normalised table, or Yang's Table 3 by memory
size). Access counts per op, with T_h x T_w x T_c the output block the PE array
computes at once under its dataflow (`engine.fusion.dataflow`):

  blocks  = N * ceil(O_h/T_h) * ceil(O_w/T_w) * ceil(C_out/T_c)
  buffer  = blocks * (ifmap words of one block + weight words of one block)   reads
          + ofmap words                                                       writes
          + DRAM words of the plan (each word fetched is written into the buffer,
            each word stored is read out of it)
  array   = blocks * (ifmap words x T_c' + weight words x T_h'T_w') + ofmap words
            (an operand read from the buffer is multicast to every PE of the block
            that uses it; T' is the throughput clipped to the layer's size)
  RF      = 3 per MAC (two operand reads and one partial-sum update), 2 per
            element-wise operation
  MAC     = MACs of conv and matmul ops, plus one ALU operation per pooled or
            added element (pool: K_h K_w per output, eltwise: one per input)
  DRAM    = plan.dram_bytes / word bytes

The ifmap words of one block are C_in/groups x ((T_h-1)S+K_h) x ((T_w-1)S+K_w); a
one-input matmul is a 1x1 conv over its rows (C_in = all its input features). MAC
ops outside this model (3-D convolutions, matmuls of two activations) read their
inputs and weights from the buffer once and run at full PE use. ISOA's
recomputation of tile overlaps is not added to the MACs.

Latency: per group, max(compute time, DRAM time); compute cycles of a MAC op are
N * prod over loops (O_h, O_w, C_out, C_in/g, K_h, K_w) of ceil(loop / parallel
factor), element-wise ops take ceil(operations / PEs); DRAM time is the group's
bytes over the DRAM bandwidth. Utilisation is MACs / (MAC-op cycles x PEs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.errors import EngineError
from engine.fusion import dataflow
from engine.fusion.plan import FusionPlan
from engine.graph import Graph, Op, OpKind

COMPONENTS = ("dram", "buffer", "array", "rf", "mac")


@dataclass(frozen=True)
class OpAccesses:
    """Word accesses at each level and compute cycles of one op (DRAM traffic belongs to groups)."""

    buffer: int
    array: int
    rf: int
    mac: int
    cycles: int
    macs: int


@dataclass(frozen=True)
class EnergyBreakdown:
    """Energy (pJ) per component and latency (s) of one plan on one accelerator."""

    dram_pj: float
    buffer_pj: float
    array_pj: float
    rf_pj: float
    mac_pj: float
    latency_s: float
    compute_s: float  # sum over groups of compute time alone
    memory_s: float  # sum over groups of DRAM time alone
    utilisation: float  # MACs / (cycles of MAC ops x PEs)
    accesses: tuple[tuple[str, int], ...]  # (component, word accesses or operations)
    group_latency_s: tuple[float, ...]

    @property
    def total_pj(self) -> float:
        return self.dram_pj + self.buffer_pj + self.array_pj + self.rf_pj + self.mac_pj

    def as_dict(self) -> dict[str, float]:
        """Component -> pJ, in the order DRAM, buffer, PE array, RF, MAC."""
        return {c: getattr(self, f"{c}_pj") for c in COMPONENTS}


def op_accesses(graph: Graph, op: Op, acc: Accelerator) -> OpAccesses:
    """Buffer, array and RF word accesses, ALU operations and cycles of one op under the dataflow."""
    tp = dataflow.of(acc)
    out_elems = sum(graph.tensors[t].elements for t in op.outputs)
    in_elems = sum(graph.tensors[t].elements for t in dict.fromkeys(op.inputs))
    w_elems = graph.op_params(op.name)
    if op.macs:
        loops = _loops(graph, op)
        if loops is None:  # a MAC op outside the blocked model: whole input and weights once per C_out block
            reads = in_elems + w_elems
            return OpAccesses(reads + out_elems, reads + out_elems, 3 * op.macs, op.macs,
                              math.ceil(op.macs / acc.pes), op.macs)
        n, oh, ow, cout, cin, kh, kw, sh, sw = loops
        th, tw, tc = min(tp.t_h, oh), min(tp.t_w, ow), min(tp.t_c, cout)
        blocks = n * math.ceil(oh / tp.t_h) * math.ceil(ow / tp.t_w) * math.ceil(cout / tp.t_c)
        in_block = cin * ((th - 1) * sh + kh) * ((tw - 1) * sw + kw)
        w_block = tc * cin * kh * kw
        cycles = n * math.prod(math.ceil(size / par) for size, par in (
            (oh, tp.oh), (ow, tp.ow), (cout, tp.cout), (cin, tp.cin), (kh, tp.kh), (kw, tp.kw)))
        return OpAccesses(blocks * (in_block + w_block) + out_elems,
                          blocks * (in_block * tc + w_block * th * tw) + out_elems,
                          3 * op.macs, op.macs, cycles, op.macs)
    alu = _alu_ops(op, out_elems, in_elems)
    return OpAccesses(in_elems + out_elems, in_elems + out_elems, 2 * alu, alu, math.ceil(alu / acc.pes), 0)


@dataclass(frozen=True)
class VectorCost:
    """Element-wise work of one op on the accelerator's vector unit: operations, energy (pJ) and cycles."""

    operations: int
    energy_pj: float
    cycles: int


def vector_cost(graph: Graph, op: Op | str, acc: Accelerator) -> VectorCost:
    """Operations, energy and cycles of an op without MACs (element-wise, softmax, norm, pooling) on `acc`'s vector
    unit (`Accelerator.vector_ops_per_cycle` and `vector_op_pj`); the operations are `op_accesses`' ALU count.

    Ops with MACs run on the PE array: asking for one is an `EngineError`.
    """
    op = graph.op(op) if isinstance(op, str) else op
    if op.macs and op.kind is not OpKind.POOL:
        raise EngineError(f"op '{op.name}' ({op.kind}) has {op.macs:,} MACs and runs on the PE array; vector_cost "
                          "prices element-wise, softmax, norm and pooling work")
    out_elems = sum(graph.tensors[t].elements for t in op.outputs)
    in_elems = sum(graph.tensors[t].elements for t in dict.fromkeys(op.inputs))
    ops = _alu_ops(op, out_elems, in_elems)
    return VectorCost(ops, ops * acc.vector_op_pj, math.ceil(ops / acc.vector_ops_per_cycle))


def _alu_ops(op: Op, out_elems: int, in_elems: int) -> int:
    """Element operations of an op without MACs: pooling windows, element-wise inputs, one per output otherwise."""
    if op.kind == OpKind.POOL:
        return out_elems * (math.prod(op.kernel) if op.kernel else max(1, in_elems // max(out_elems, 1)))
    if op.kind == OpKind.ELTWISE:
        return in_elems
    if op.kind in (OpKind.CONCAT, OpKind.SPLIT, OpKind.RESHAPE):
        return 0
    return out_elems


def _loops(graph: Graph, op: Op) -> tuple[int, ...] | None:
    """(N, O_h, O_w, C_out, C_in per group, K_h, K_w, S_h, S_w) of a 2-D conv or a one-input matmul."""
    out = graph.tensors[op.outputs[0]].shape
    x: tuple[int, ...] = graph.tensors[op.inputs[0]].shape if op.inputs else ()
    if op.kind in (OpKind.CONV, OpKind.DWCONV) and len(out) == 4 and len(x) == 4 and len(op.kernel) == 2:
        sh, sw = op.stride or (1, 1)
        return out[0], out[2], out[3], out[1], x[1] // op.groups, op.kernel[0], op.kernel[1], sh, sw
    if op.kind == OpKind.MATMUL and len(op.inputs) == 1 and len(out) in (2, 3) and x:
        rows = out[1] if len(out) == 3 else 1
        return out[0], rows, 1, out[-1], math.prod(x[1:]) // rows, 1, 1, 1, 1
    return None


def energy_breakdown(graph: Graph, plan: FusionPlan, acc: Accelerator) -> EnergyBreakdown:
    """Energy per component and latency of running `plan` on `acc` (see the module docstring for the counts)."""
    word = acc.word_bits / 8
    dram_words = plan.dram_bytes / word
    counts = {c: 0.0 for c in COMPONENTS}
    counts["dram"] = dram_words
    counts["buffer"] = dram_words
    compute = memory = latency = 0.0
    mac_cycles = macs = 0
    group_latency = []
    for group, cost in zip(plan.groups, plan.costs):
        cycles = 0
        for name in group:
            a = op_accesses(graph, graph.op(name), acc)
            counts["buffer"] += a.buffer
            counts["array"] += a.array
            counts["rf"] += a.rf
            counts["mac"] += a.mac
            cycles += a.cycles
            if a.macs:
                mac_cycles += a.cycles
                macs += a.macs
        t_compute = cycles / acc.clock_hz
        t_memory = cost.dram_bytes / acc.dram_bandwidth
        compute += t_compute
        memory += t_memory
        group_latency.append(max(t_compute, t_memory))
        latency += group_latency[-1]
    pj = {c: counts[c] * acc.energy_pj(c) for c in COMPONENTS}
    return EnergyBreakdown(pj["dram"], pj["buffer"], pj["array"], pj["rf"], pj["mac"], latency, compute, memory,
                           macs / (mac_cycles * acc.pes) if mac_cycles else 0.0,
                           tuple((c, round(counts[c])) for c in COMPONENTS), tuple(group_latency))
