"""Multi-core blocking (Sec. 3.3): unroll the outermost K or Y loop across cores.

Unrolling K gives each core its own kernels and output channels and broadcasts the shared
input; unrolling Y (XY partitioning) gives each core its own rows of input and output and
broadcasts the shared kernels. The broadcast tensor is fetched from DRAM once and kept in
one global last-level buffer; every word sent from it reaches all cores over a wire whose
energy the paper estimates as one access to a memory the size of all on-chip memory
(Sec. 3.4). The partitioned tensors live in each core's private buffers.

Two ways to lay out the memories: every core gets its own copy of the hierarchy (the default),
or, as in Fig. 9, the hierarchy is the single-core chip and the cores share its last level
(split into IB/KB/OB): each core keeps 1/cores of the partitioned buffers there while the
shared tensor's buffer stays whole, so chip memory stays the same as the cores are added.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.blocking.hierarchy import Hierarchy, Memory, access_energy_pj
from engine.blocking.layer import TENSORS, Layer
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


def multicore(layer: Layer, hierarchy: Hierarchy, *, cores: int, unroll: str = "K", partition_last: bool = False,
              width_bits: int = 512) -> MulticoreResult:
    """Block one core's share of `layer` and total the energy over cores.

    `hierarchy` is one core's memories, or with `partition_last` the whole single-core chip whose
    split last level the cores share (its partitioned IB/KB/OB buffers re-priced by Table 3 at
    1/cores of their size and `width_bits`). The broadcast wire is priced as one access to a memory of the chip's
    on-chip bytes (Sec. 3.4) in the same Table 3 column, `width_bits`.
    """
    if unroll not in SHARED:
        raise UnknownNameError("unrolled loop", unroll, SHARED)
    dim = "K" if unroll == "K" else "Y"
    if cores < 1 or getattr(layer, dim) % cores:
        raise EngineError(f"layer '{layer.name}': {dim} = {getattr(layer, dim)} does not split over {cores} cores")
    share = replace(layer, **{dim: getattr(layer, dim) // cores})
    shared = SHARED[unroll]
    if partition_last:
        hierarchy, on_chip_bytes = _partitioned(hierarchy, cores, shared, width_bits)
    else:
        on_chip_bytes = cores * sum(m.total_bytes for m in hierarchy.on_chip)
    best = block(share, hierarchy)
    top = hierarchy.on_chip[-1].name
    wire = access_energy_pj(on_chip_bytes, width_bits=width_bits, word_bits=hierarchy.word_bits)
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


def _partitioned(chip: Hierarchy, cores: int, shared: str, width_bits: int) -> tuple[Hierarchy, int]:
    """One core's view of `chip` with its split last level shared by `cores` cores, and the chip's on-chip bytes.

    Inner levels are private copies; in the last level the shared tensor's buffer stays whole and
    every other buffer is divided between the cores (Sec. 3.3: "the other buffers can be partitioned").
    """
    last = chip.on_chip[-1]
    if not last.split_bytes:
        raise EngineError(f"partition_last needs the last on-chip level '{last.name}' split into IB/KB/OB buffers; "
                          "build it with Memory.split(...)")
    split = tuple(b if T == shared else max(1, b // cores) for T, b in zip(TENSORS, last.split_bytes))
    energy = tuple(last.energy(T) if T == shared else access_energy_pj(b, width_bits=width_bits,
                                                                        word_bits=chip.word_bits)
                   for T, b in zip(TENSORS, split))
    core = replace(chip, levels=(*chip.on_chip[:-1], Memory(last.name, split_bytes=split, energy_pj=energy),
                                 chip.levels[-1]))  # each core keeps the chip's PE array, if it has one
    return core, cores * sum(m.total_bytes for m in chip.on_chip[:-1]) + sum(last.split_bytes)
