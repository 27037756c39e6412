"""Multi-core blocking (Sec. 3.3): unroll a K or Y loop across cores.

Unrolling K gives each core its own kernels and output channels and broadcasts the shared
input; unrolling Y (XY partitioning) gives each core its own rows of input and output and
broadcasts the shared kernels. The broadcast tensor is fetched from DRAM once and kept in
one global last-level buffer; every word sent from it reaches all cores over a wire whose
energy the paper estimates as one access to a memory the size of all on-chip memory
(Sec. 3.4). The partitioned tensors live in each core's private buffers.

Two ways to lay out the memories: every core gets its own copy of the hierarchy (the default),
or, as in Fig. 9, the hierarchy is the single-core chip and the cores share its last level
(split into IB/KB/OB): each core keeps 1/cores of the partitioned buffers there while the
shared tensor's buffer stays whole, so the last level's memory stays the same as the cores are added.
On that chip each core's share is either re-blocked inside its part of the memories, or, as the
paper evaluates Fig. 9, a given single-core `schedule` keeps its tiles and its loop at the last
level is unrolled over the cores (Sec. 3.3: "a physical unrolling of an outer loop in the blocking
string"), so DRAM traffic stays the single-core schedule's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.blocking.hierarchy import Hierarchy, Memory, access_energy_pj
from engine.blocking.layer import DIMS, TENSORS, Layer
from engine.blocking.model import Blocking, Cost, SpatialView, evaluate, stored_levels
from engine.blocking.optimizer import BlockingResult, block
from engine.errors import EngineError, UnknownNameError

SHARED = {"K": "I", "XY": "W"}  # unrolled loop -> the tensor every core reads
LOOPS = {"K": ("K",), "XY": ("Y", "X")}  # the loops a fixed schedule unrolls, as many cores as divide on each


@dataclass(frozen=True)
class MulticoreResult:
    """Energy per level and tensor of a layer split over `cores` identical cores."""

    cores: int
    unroll: str
    per_core: BlockingResult  # one core's share: its best blocking, or the fixed schedule's part, on its memories
    energy: tuple[tuple[str, str, float], ...]  # (level, tensor, pJ) over all cores
    broadcast_pj: float  # per word sent from the shared last-level buffer
    on_chip_bytes: int  # memory of all cores together (what the broadcast wire is priced by)
    loops: str = ""  # with a fixed schedule, the loops unrolled over the cores and by how much ("Y4 X2")

    @property
    def energy_pj(self) -> float:
        return sum(e for _, _, e in self.energy)


def multicore(layer: Layer, hierarchy: Hierarchy, *, cores: int, unroll: str = "K", partition_last: bool = False,
              width_bits: int = 512, schedule: Blocking | None = None) -> MulticoreResult:
    """Block one core's share of `layer` (or take it from a fixed `schedule`) and total the energy over cores.

    `hierarchy` is one core's memories, or with `partition_last` the whole single-core chip whose
    split last level the cores share (its partitioned IB/KB/OB buffers re-priced by Table 3 at
    1/cores of their size and `width_bits`). The broadcast wire is priced as one access to a memory of the chip's
    on-chip bytes (Sec. 3.4) in the same Table 3 column, `width_bits`.

    `schedule` (a blocking of `layer` on the chip, needs `partition_last`): the paper's Fig. 9 assumption. Its loop
    inside the last on-chip level is unrolled over the cores (K; for XY the Y loop, and the X loop by the factor of
    the cores Y's trips leave): each core runs the same inner schedule on its share of those trips, keeps its part of
    the chip's last-level tile (input rows and columns with their halo), and DRAM traffic is the single-core
    schedule's.
    """
    if unroll not in SHARED:
        raise UnknownNameError("unrolled loop", unroll, SHARED)
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise EngineError(f"layer '{layer.name}': cores must be a whole number >= 1, got {cores!r}")
    shared = SHARED[unroll]
    if schedule is not None:
        if not partition_last:
            raise EngineError("a fixed schedule runs on the single-core chip whose last level the cores share: "
                              "pass partition_last=True with schedule=")
        return _fixed(layer, hierarchy, schedule, cores, unroll, width_bits)
    dim = "K" if unroll == "K" else "Y"
    if getattr(layer, dim) % cores:
        raise EngineError(f"layer '{layer.name}': {dim} = {getattr(layer, dim)} does not split over {cores} cores")
    share = replace(layer, **{dim: getattr(layer, dim) // cores})
    if partition_last:
        hierarchy, on_chip_bytes = _partitioned(hierarchy, cores, shared, width_bits)
    else:
        on_chip_bytes = cores * sum(m.bounded_bytes for m in hierarchy.on_chip)
    best = block(share, hierarchy)
    wire = access_energy_pj(on_chip_bytes, width_bits=width_bits, word_bits=hierarchy.word_bits)
    energy = _over_cores(best.cost, hierarchy.on_chip[-1].name, shared, cores, wire)
    return MulticoreResult(cores, unroll, best, energy, wire, on_chip_bytes)


def _fixed(layer: Layer, chip: Hierarchy, schedule: Blocking, cores: int, unroll: str,
           width_bits: int) -> MulticoreResult:
    """`schedule` on `chip` with its last on-chip level's K (or Y / X) loop unrolled over `cores` cores."""
    single = evaluate(layer, chip, schedule)  # checks that the schedule belongs to this layer and chip
    if not single.fits:
        raise EngineError(f"layer '{layer.name}': the schedule does not fit chip '{chip.name}': "
                          + "; ".join(single.overflow))
    top = len(chip.on_chip) - 1
    below = schedule.tiles[top - 1] if top else (1,) * len(DIMS)
    trips = {d: schedule.tiles[top][DIMS.index(d)] // below[DIMS.index(d)] for d in LOOPS[unroll]}
    split, left = {}, cores
    for d in LOOPS[unroll]:  # as many cores as possible on the first loop, the rest on the next
        split[d] = math.gcd(trips[d], left)
        left //= split[d]
    if left > 1:
        runs = " and ".join(f"its {d} loop {t}" for d, t in trips.items())
        raise EngineError(f"layer '{layer.name}': the schedule cannot unroll {unroll} over {cores} cores at last "
                          f"level '{chip.on_chip[-1].name}': {runs} trips there, not a multiple of {cores} "
                          f"{'together ' if len(trips) > 1 else ''}(re-block instead: leave schedule out)")
    share = replace(layer, **{d: getattr(layer, d) // s for d, s in split.items()})
    core = Blocking(_divided(schedule.dims, split), (*schedule.tiles[:top], _divided(schedule.tiles[top], split)),
                    schedule.orders, schedule.unroll, schedule.inner)
    view = SpatialView.of(share, schedule.unroll)
    if any(getattr(layer, d) % s for d, s in split.items()) or view.dims != core.dims:
        raise EngineError(f"layer '{layer.name}': " + ", ".join(f"{d} = {getattr(layer, d)}" for d in split)
                          + f" do not split {_loops(split)} over the cores in whole steps of the PE array "
                          f"(unrolled by {dict(zip(DIMS, schedule.unroll))})")
    need = tuple(math.ceil(view.stored(T, core.tiles[top], chip.inside(top)) * chip.word_bits / 8)
                 if T in layer.tensors and top in stored_levels(T, core, chip) else 0 for T in TENSORS)
    hierarchy, on_chip_bytes = _partitioned(chip, cores, SHARED[unroll], width_bits, need)
    cost = evaluate(share, hierarchy, core)
    wire = access_energy_pj(on_chip_bytes, width_bits=width_bits, word_bits=chip.word_bits)
    energy = _over_cores(cost, chip.on_chip[-1].name, SHARED[unroll], cores, wire, single)
    result = BlockingResult(share, hierarchy, core, cost, "fixed", False, 1, 0.0)
    return MulticoreResult(cores, unroll, result, energy, wire, on_chip_bytes, _loops(split))


def _divided(bounds: tuple[int, ...], split: dict[str, int]) -> tuple[int, ...]:
    return tuple(v // split.get(d, 1) for d, v in zip(DIMS, bounds))


def _loops(split: dict[str, int]) -> str:
    """'Y4 X2': the loops unrolled over the cores and by how much."""
    return " ".join(f"{d}{s}" for d, s in split.items() if s > 1)


def _over_cores(cost: Cost, top: str, shared: str, cores: int, wire: float,
                single: Cost | None = None) -> tuple[tuple[str, str, float], ...]:
    """(level, tensor, pJ) over all cores from one core's `cost`: private and partitioned words count once per core,
    a word of the shared tensor from the last level is one broadcast at `wire` pJ, and DRAM sends the shared tensor
    once (or, with the `single`-core schedule's cost, DRAM is that schedule's)."""
    dram = {a.tensor: a.energy_pj for a in single.accesses if a.level == "DRAM"} if single else {}
    energy = []
    for a in cost.accesses:
        if a.level == "DRAM":
            energy.append((a.level, a.tensor, dram[a.tensor] if single else
                           a.energy_pj if a.tensor == shared else cores * a.energy_pj))
        elif a.tensor == shared and a.level == top and cores > 1:
            energy.append((a.level, a.tensor, a.accesses * wire))  # one broadcast serves every core
        else:
            energy.append((a.level, a.tensor, cores * a.energy_pj))
    return tuple(energy)


def _partitioned(chip: Hierarchy, cores: int, shared: str, width_bits: int,
                 need: tuple[int, ...] = (0, 0, 0)) -> tuple[Hierarchy, int]:
    """One core's view of `chip` with its split last level shared by `cores` cores, and the chip's on-chip bytes.

    Inner levels are private copies; in the last level the shared tensor's buffer stays whole and
    every other buffer is divided between the cores (Sec. 3.3: "the other buffers can be partitioned"),
    each part at least `need` bytes (a core's slice of input rows keeps its halo).
    """
    last = chip.on_chip[-1]
    if not last.split_bytes:
        raise EngineError(f"partition_last needs the last on-chip level '{last.name}' split into IB/KB/OB buffers; "
                          "build it with Memory.split(...)")
    split = tuple(b if T == shared else max(n, b // cores, 1 if b else 0)
                  for T, b, n in zip(TENSORS, last.split_bytes, need))
    energy = tuple(last.energy(T) if T == shared else access_energy_pj(b, width_bits=width_bits,
                                                                        word_bits=chip.word_bits)
                   for T, b in zip(TENSORS, split))
    core = replace(chip, levels=(*chip.on_chip[:-1], Memory(last.name, split_bytes=split, energy_pj=energy),
                                 chip.levels[-1]))  # each core keeps the chip's PE array, if it has one
    on_chip = sum(b if T == shared else max(b, cores * s) for T, b, s in zip(TENSORS, last.split_bytes, split))
    return core, cores * sum(m.bounded_bytes for m in chip.on_chip[:-1]) + on_chip
