"""Multi-core blocking (Sec. 3.3): unroll the outermost K or Y loop across cores.

Unrolling K gives each core its own kernels and output channels and broadcasts the shared
input; unrolling Y (XY partitioning) gives each core its own rows of input and output and
broadcasts the shared kernels. The broadcast tensor is fetched from DRAM once and kept in
one global last-level buffer; every word sent from it reaches all cores over a wire whose
energy the paper estimates as one access to a memory the size of all on-chip memory
(Sec. 3.4). The partitioned tensors live in each core's private buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.blocking.hierarchy import Hierarchy, access_energy_pj
from engine.blocking.layer import Layer
from engine.blocking.optimizer import BlockingResult, block
from engine.errors import EngineError, UnknownNameError

SHARED = {"K": "I", "XY": "W"}  # unrolled loop -> the tensor every core reads


@dataclass(frozen=True)
class MulticoreResult:
    """Energy per level and tensor of a layer split over `cores` identical cores."""

    cores: int
    unroll: str
    per_core: BlockingResult  # the best blocking of one core's share, on one core's hierarchy
    energy: tuple[tuple[str, str, float], ...]  # (level, tensor, pJ) over all cores
    broadcast_pj: float  # per word sent from the shared last-level buffer

    @property
    def energy_pj(self) -> float:
        return sum(e for _, _, e in self.energy)


def multicore(layer: Layer, hierarchy: Hierarchy, *, cores: int, unroll: str = "K") -> MulticoreResult:
    """Block one core's share of `layer` on `hierarchy` (one core's memories) and total the energy over cores."""
    if unroll not in SHARED:
        raise UnknownNameError("unrolled loop", unroll, SHARED)
    dim = "K" if unroll == "K" else "Y"
    if cores < 1 or getattr(layer, dim) % cores:
        raise EngineError(f"layer '{layer.name}': {dim} = {getattr(layer, dim)} does not split over {cores} cores")
    share = replace(layer, **{dim: getattr(layer, dim) // cores})
    best = block(share, hierarchy)
    shared = SHARED[unroll]
    top = hierarchy.on_chip[-1].name
    on_chip_bytes = cores * sum(m.total_bytes for m in hierarchy.on_chip)
    wire = access_energy_pj(on_chip_bytes, word_bits=hierarchy.word_bits)
    energy = []
    for a in best.cost.accesses:
        if a.tensor != shared:
            energy.append((a.level, a.tensor, cores * a.energy_pj))
        elif a.level == "DRAM":
            energy.append((a.level, a.tensor, a.energy_pj))  # fetched once for all cores
        elif a.level == top and cores > 1:
            energy.append((a.level, a.tensor, a.accesses * wire))  # one broadcast serves every core
        else:
            energy.append((a.level, a.tensor, cores * a.energy_pj))
    return MulticoreResult(cores, unroll, best, tuple(energy), wire)
