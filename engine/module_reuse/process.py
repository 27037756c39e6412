"""Processing one module on chip (Alg. 3-6 of the module-reuse paper) and the off-chip traffic it leaves.

Branches run in descending order of the memory they need (Alg. 3). The module's
input feature map (MIFM) stays in a shared region while its branches run, one
region per nesting depth (Alg. 4); the outputs of finished branches occupy the
module-output (MOFM) region (Alg. 5). Each layer forwards its OFM to the next
layer when what it needs fits in what is left (Alg. 6). Processing I keeps the
whole MOFM on chip for the next module; processing II gives that up, writing each
branch's output off chip, so later branches get more room.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph import Graph
from engine.module_reuse.detect import Structure
from engine.module_reuse.memory import NpuModel

PROCESSING_I, PROCESSING_II, NAIVE = "I", "II", "naive"


@dataclass(frozen=True)
class Region:
    """A span of on-chip memory during one step: what it holds and where."""

    kind: str  # "mifm", "mofm", "ifm", "ofm", "wm" (working memory), "w" (weights)
    tensor: str  # the feature map held ("" for weights and working memory)
    offset: int
    size: int


@dataclass(frozen=True)
class Step:
    """One layer of a module as Alg. 6 runs it: what it needs, what is free, whether its OFM stays on chip."""

    op: str
    branch: int  # index of the branch in its module's own order (before re-ordering)
    layer: int  # k: 1-based position in the branch
    depth: int  # nesting depth of the module that holds it (1 = top level)
    req: int
    avail: int
    fwd: bool
    regions: tuple[Region, ...]


@dataclass(frozen=True)
class Traffic:
    """Off-chip feature-map transfers: how many and how many bytes, each way."""

    reads: int = 0
    writes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.reads + other.reads, self.writes + other.writes,
                       self.read_bytes + other.read_bytes, self.write_bytes + other.write_bytes)

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass(frozen=True)
class Run:
    """A module processed one way: its steps, traffic, and the bytes of its output left off chip."""

    processing: str
    steps: tuple[Step, ...]
    traffic: Traffic
    out_offchip: int
    feasible: bool  # every layer found room for at least its partial IFM, OFM, working memory and weights
    fits: bool  # every layer could forward its OFM (processing I needs this)


def naive_traffic(graph: Graph, s: Structure, npu: NpuModel) -> Traffic:
    """Every layer reads its IFMs from and writes its OFMs to off-chip memory (the paper's Naive)."""
    return layer_traffic(graph, s.layers, npu)


def layer_traffic(graph: Graph, layers, npu: NpuModel) -> Traffic:
    """Off-chip traffic of `layers` when each reads its inputs and writes its outputs once."""
    t = Traffic()
    for v in layers:
        op = graph.op(v)
        ins, outs = tuple(dict.fromkeys(op.inputs)), op.outputs
        t += Traffic(len(ins), len(outs), sum(npu.fm_bytes(graph, x) for x in ins),
                     sum(npu.fm_bytes(graph, x) for x in outs))
    return t


def branch_order(graph: Graph, s: Structure, npu: NpuModel) -> tuple[int, ...]:
    """Alg. 3: branches by descending required memory (the largest layer need, MIFM and MOFM excluded)."""
    need = [max((_need(graph, npu, v, fwd_prev=k > 0, partial_out=False)
                 for k, v in enumerate(_flat(branch))), default=0) for branch in s.branches]
    return tuple(sorted(range(len(s.branches)), key=lambda b: -need[b]))


def run(graph: Graph, s: Structure, npu: NpuModel, processing: str, *, mifm_resident: bool,
        side: str = "low") -> Run:
    """Process module `s` with processing I or II; `side` is where the MIFM sits ("low" or "high" addresses)."""
    r = _Runner(graph, npu, processing, side)
    if not mifm_resident:
        r.traffic += Traffic(len(s.mifm), 0, sum(npu.fm_bytes(graph, t) for t in s.mifm), 0)
    r.mifms.append((s.mifm, sum(npu.fm_bytes(graph, t) for t in s.mifm)))
    _, off = r.module(s, depth=1, at_end=True)
    return Run(processing, tuple(r.steps), r.traffic, off, r.feasible, r.fits)


def _flat(branch) -> list[str]:
    return [v for item in branch for v in (item.layers if isinstance(item, Structure) else (item,))]


def _need(graph: Graph, npu: NpuModel, v: str, *, fwd_prev: bool, partial_out: bool) -> int:
    """Alg. 6's size_req(b, k): IFM (whole when forwarded, else a chunk) + OFM + working memory + weights."""
    op = graph.op(v)
    ins = tuple(dict.fromkeys(op.inputs))
    ifm = sum((npu.fm_bytes if fwd_prev else npu.ifm_partial)(graph, t) for t in ins)
    ofm = sum((npu.ofm_partial if partial_out else npu.fm_bytes)(graph, t) for t in op.outputs)
    return ifm + ofm + npu.working(graph, op) + npu.weights_partial(graph, op)


class _Runner:
    """Walks a module's branches in processing order, tracking on-chip regions and off-chip transfers."""

    def __init__(self, graph: Graph, npu: NpuModel, processing: str, side: str):
        self.graph, self.npu, self.processing, self.side = graph, npu, processing, side
        self.mifms: list[tuple[tuple[str, ...], int]] = []  # shared MIFM regions, outermost first
        self.held: list[tuple[str, int]] = []  # outputs kept on chip (occupied MOFM), oldest first
        self.steps: list[Step] = []
        self.traffic = Traffic()
        self.feasible = self.fits = True

    def fm(self, tensors) -> int:
        return sum(self.npu.fm_bytes(self.graph, t) for t in tensors)

    def module(self, s: Structure, depth: int, at_end: bool) -> tuple[int, int]:
        """Run every branch of `s`; returns (bytes of its output on chip, bytes written off chip)."""
        mark = len(self.held)
        off = 0
        for b in branch_order(self.graph, s, self.npu):
            items, prev_off = s.branches[b], 0
            for k, item in enumerate(items):
                end = at_end and k == len(items) - 1
                if prev_off:  # the previous item wrote (part of) its output off chip: read it back
                    self.traffic += Traffic(1, 0, prev_off, 0)
                fwd_prev = k > 0 and not prev_off
                if isinstance(item, Structure):
                    stacked = {t for m, _ in self.mifms for t in m}
                    self._release(item.mifm)  # a forwarded OFM becomes the sub-module's MIFM
                    self.mifms.append((item.mifm, 0 if set(item.mifm) <= stacked else self.fm(item.mifm)))
                    _, prev_off = self.module(item, depth + 1, end)
                    self.mifms.pop()
                else:
                    fwd = self.layer(item, b, k, depth, fwd_prev, end)
                    prev_off = 0 if fwd else self.fm(self.graph.op(item).outputs)
            off += prev_off
        if s.kind == "add":
            return self._add(s, depth, at_end, mark)
        return self._collapse(mark, self.graph.op(s.merge).outputs), off

    def layer(self, v: str, branch: int, k: int, depth: int, fwd_prev: bool, end: bool) -> bool:
        """Alg. 6 for one layer; returns fwd(k), holding the OFM on chip when it is forwarded."""
        graph, npu = self.graph, self.npu
        op = graph.op(v)
        write_out = end and self.processing == PROCESSING_II
        req = _need(graph, npu, v, fwd_prev=fwd_prev, partial_out=write_out)
        least = _need(graph, npu, v, fwd_prev=fwd_prev, partial_out=True)
        held = sum(size for t, size in self.held if not (fwd_prev and t in op.inputs))  # a forwarded IFM is in req
        avail = npu.mem_bytes - sum(size for _, size in self.mifms) - held
        fwd = req <= avail and not write_out
        self.feasible &= least <= avail
        self.fits &= req <= avail
        self.steps.append(Step(v, branch, k + 1, depth, req, avail, fwd, self._layout(op, fwd_prev, fwd)))
        if fwd_prev:
            self._release(op.inputs)
        if fwd:
            self.held.extend((t, npu.fm_bytes(graph, t)) for t in op.outputs)
        else:
            self.traffic += Traffic(0, len(op.outputs), 0, self.fm(op.outputs))
        return fwd

    def _collapse(self, mark: int, outputs: tuple[str, ...]) -> int:
        """Branch outputs held since `mark` become the merge's output, laid out contiguously; its bytes."""
        on = sum(size for _, size in self.held[mark:])
        del self.held[mark:]
        if on:
            self.held.append((",".join(outputs), on) if len(outputs) > 1 else (outputs[0], on))
        return on

    def _add(self, s: Structure, depth: int, at_end: bool, mark: int) -> tuple[int, int]:
        """An add merge: reads back branch outputs written off chip, writes its sum in place of the first."""
        op = self.graph.op(s.merge)
        here = {t for t, _ in self.held} | {t for m, _ in self.mifms for t in m}
        back = [t for t in dict.fromkeys(op.inputs) if t not in here]
        self.traffic += Traffic(len(back), 0, self.fm(back), 0)
        keep = not (at_end and self.processing == PROCESSING_II)
        held = sum(size for _, size in self.held[:mark])
        avail = self.npu.mem_bytes - sum(size for _, size in self.mifms) - held
        self.steps.append(Step(s.merge, len(s.branches), 1, depth, self.fm(op.outputs), avail, keep,
                               self._layout(op, False, keep, in_place=True)))
        del self.held[mark:]
        out = self.fm(op.outputs)
        if keep:
            self.held.extend((t, self.npu.fm_bytes(self.graph, t)) for t in op.outputs)
            return out, 0
        self.traffic += Traffic(0, len(op.outputs), 0, out)
        return 0, out

    def _release(self, tensors) -> None:
        """Drop forwarded intermediate OFMs once the next layer has consumed them."""
        gone = set(tensors)
        self.held = [(t, size) for t, size in self.held if t not in gone]

    def _layout(self, op, fwd_prev: bool, fwd: bool, in_place: bool = False) -> tuple[Region, ...]:
        """Addresses this step uses: MIFMs from the MIFM side, held outputs from the other, work between.

        An add merge (`in_place`) reads the held branch outputs where they are and writes over them.
        """
        graph, npu, mem = self.graph, self.npu, self.npu.mem_bytes
        regions, low = [], 0
        for tensors, size in self.mifms:
            if size:
                regions.append(Region("mifm", ",".join(tensors), low, size))
                low += size
        high = mem
        for t, size in self.held:
            if t in op.inputs and fwd_prev:
                continue
            high -= size
            regions.append(Region("mofm", t, high, size))
        ins = [t for t in dict.fromkeys(op.inputs) if not (in_place and t in {n for n, _ in self.held} |
                                                          {x for m, _ in self.mifms for x in m})]
        ifm = sum((npu.fm_bytes if fwd_prev else npu.ifm_partial)(graph, t) for t in ins)
        work = [("ifm", ",".join(dict.fromkeys(op.inputs)), ifm), ("wm", "", npu.working(graph, op)),
                ("w", "", npu.weights_partial(graph, op)),
                ("ofm", ",".join(op.outputs), 0 if in_place and fwd else
                 sum((npu.fm_bytes if fwd else npu.ofm_partial)(graph, t) for t in op.outputs))]
        for kind, tensor, size in work:
            if size:
                regions.append(Region(kind, tensor, low, size))
                low += size
        if self.side == "high":
            regions = [Region(r.kind, r.tensor, mem - r.offset - r.size, r.size) for r in regions]
        return tuple(regions)
