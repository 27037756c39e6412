"""Network limits at one buffer size: layer by layer (sum of ski-slopes) and fused (no partition does better).

Both are lower bounds on what the engine prices (`engine.fusion.group_cost`), for the
accelerator's capacity as the cost model reads it (`Capacity.of`: a unified buffer, or
fmaps in input+output buffers and parameters in the weight buffer).

*Layer by layer.* `fuse(method="none")` runs every op alone; an op alone costs at least its
ski-slope at the buffer (ops.py), so the plan costs at least their sum. With split buffers
the curve is read at the sum of both (a schedule uses no more room than that).

*Fused, per op* (`NetworkLimit.valid_bytes`). Any partition into groups costs, per group, its fmaps in and out plus its
parameters times their loads (Eq. 3). Summed over groups:
(1) every network input that is read is read once and every network output is written
    once, at least (intermediates may stay on chip: the Oracle's fmaps);
(2) every parameter is loaded once, at least (ceil of the total bits: the cost model rounds
    each group's parameter bytes up);
(3) an op in a group of several ops whose parameters cannot stay on chip (they need more than
    the weight buffer, or the whole unified buffer) reloads them once per sub-group. Within a
    group every op keeps whole rows of its input or of its output at full depth (ISOA lets an
    op chunk its output only when all its producers keep theirs whole, Alg. 2), and every
    tensor advances by at least 1/k of its rows per step (docs/fusion.md, "Tiles"), so with
    t_n images per sub-group the tiles hold t_n * whole / k elements, at most the buffer: the
    sub-groups k * ceil(N / t_n) number at least ceil(N * whole / buffer), `whole` being the
    smaller of the op's input and output elements of one image;
(4) an op alone pays at least its ski-slope, i.e. its compulsory traffic plus the excess.
So each op adds the smaller of (3)'s reloads and (4)'s excess over compulsory to
(1) + (2); a batched GEMM of attention adds nothing (its excess is its streamed operand's
reloads, which (3) does not bound in a group). What this omits: fmaps that must leave the chip because no group holding both
their producer and consumer fits (the bound lets every intermediate stay), and the
reloads an op's group shares with other members beyond its own.

*Fused, tight* (`segments.py`): the graph's chains cut into fused pieces, each cut tensor out and
back, each piece's weights and streamed operands reloaded per sub-group its footprint forces; the
fused limit is the larger of the two. A graph past `windowed.WINDOW_ABOVE` ops gets the per-op bound
alone: the segmentation reads one model of every op (ops x ops masks, 5.6 GB at 100,000 ops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.accelerator import Accelerator
from engine.errors import EngineError
from engine.fusion import dataflow, windowed
from engine.fusion.cost import Capacity, model_of, oracle_bytes
from engine.graph import Graph
from engine.limit.einsum import at
from engine.limit.ops import tables
from engine.limit.segments import excess_bits as excess_bits_of
from engine.limit.segments import segments_of


@dataclass(frozen=True)
class NetworkLimit:
    """Lower bounds on DRAM traffic at one buffer size (bytes), next to the Oracle.

    `fused_bytes` is the larger of two bounds on every plan: the segmentation of the graph's chains
    (`segments.py`) and the per-op bound `valid_bytes` (this module's docstring); `fused_kind` says
    which one it is: "tight" (the segmentation, above the per-op bound) or "valid".
    """

    buffer_bytes: int
    layerwise_bytes: int
    fused_bytes: int
    oracle_bytes: int
    valid_bytes: int = 0
    fused_kind: str = "valid"

    layerwise_meaning: ClassVar[str] = ("no plan that runs every op on its own moves less: each op at its "
                                        "best tiling for this buffer (the Orojenesis ski-slope), summed")
    fused_meaning: ClassVar[str] = ("no plan of fused groups moves less: network inputs, outputs and weights "
                                    "once, plus the least any cut of the graph's chains into fused pieces costs "
                                    "(tensors out and back at the cuts, weights and streamed keys and values "
                                    "reloaded per sub-group), and at least the weight reloads this buffer forces "
                                    "on each op")


def network_limit(graph: Graph, acc: Accelerator) -> NetworkLimit:
    """Both limits of `graph` on `acc` at its buffer size (the per-op curves are cached per graph and word width)."""
    bits = acc.word_bits
    cap = Capacity.of(acc)
    ops = tables(graph, bits, dataflow.of(acc))
    room = cap.fmap + (0 if cap.shared else cap.param)  # elements any schedule can hold at once
    reach = -(-room * bits // 8)  # a mapping of E <= room elements needs ceil(E * bits / 8) <= this many bytes
    layerwise = 0
    excess_bits = 0
    for op in ops:
        lone = at(op.steps, reach)
        if lone is None:
            raise EngineError(f"op '{op.name}' of '{graph.name}' needs at least {op.steps[0][0]} bytes of buffer "
                              f"under any tiling; '{acc.name}' holds {reach}")
        layerwise += lone
        extra = 0 if op.streams else (lone - op.compulsory) * 8
        if op.params and op.can_fuse:
            stays = op.params <= (cap.fmap - 1 if cap.shared else cap.param)
            loads = 1 if stays else max(1, -(-graph.batch * op.whole // max(1, cap.fmap)))
            extra = min(extra, (loads - 1) * op.params * bits)
        excess_bits += max(0, extra)
    once = _once_bits(graph, bits)
    valid = -(-(once + excess_bits) // 8)
    if len(graph.ops) > windowed.WINDOW_ABOVE:  # the segmentation reads one model of every op: ops x ops masks
        return NetworkLimit(acc.buffer_bytes, layerwise, valid, oracle_bytes(graph, acc), valid, "valid")
    chained = -(-(once + excess_bits_of(segments_of(model_of(graph, acc)), cap, reach, graph.batch, bits)) // 8)
    kind = "tight" if chained > valid else "valid"
    return NetworkLimit(acc.buffer_bytes, layerwise, max(valid, chained), oracle_bytes(graph, acc), valid, kind)


def _once_bits(graph: Graph, bits: int) -> int:
    """Bits every partition moves: network inputs that are read and outputs that are made, whole bytes each; weights
    once (of an embedding table, the rows looked up)."""
    read = {t for op in graph.ops for t in op.inputs}
    made = {t for op in graph.ops for t in op.outputs}
    fmaps = {t for t in graph.inputs if t in read} | {t for t in graph.outputs if t in made}
    return graph.bytes_of(fmaps, bits) * 8 + sum(graph.weight_reads.values()) * bits


def curve(graph: Graph, acc: Accelerator, buffers_bytes) -> tuple[NetworkLimit, ...]:
    """`network_limit` at each buffer size of `acc` (the what-if curve); the ski-slopes are computed once."""
    return tuple(network_limit(graph, acc.with_buffer(int(b))) for b in buffers_bytes)
