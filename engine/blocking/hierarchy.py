"""Memory hierarchies to block for: `Memory` levels (shared or split into IB/KB/OB) ending in DRAM,
each holding some operands and bypassing the others, optionally around a `SpatialArray` of PEs.

Access energy per word follows Yang et al. Table 3 (pJ per 16-bit access by SRAM size and
memory width), log-linear between rows, DRAM (320 pJ) beyond 16 MB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.accelerator import Accelerator
from engine.blocking.layer import DIMS, TENSORS
from engine.dataflow import YANG, parse
from engine.errors import EngineError, UnknownNameError
from engine.memory_energy import MAC_PJ, TABLE3_DRAM_PJ, access_energy_pj  # access_energy_pj: re-exported

KB = 1024
MB = 1024 * KB
UNROLLINGS = ("all", "maximal")
# What a transfer between two levels costs: "served" (Yang et al., Eq. 1) charges the level that serves it (reads,
# and the partial sums written back into it); "both-ends" (ZigZag) also charges the fills written into the level
# below, the outputs read out of it on their way up, and the read of the zero a partial sum starts from.
CHARGES = ("served", "both-ends")



@dataclass(frozen=True)
class Memory:
    """One memory level: one shared capacity, or separate IB/KB/OB capacities (`split_bytes`, 0 for no buffer).

    `energy_pj` is the energy of one word access for the input, kernel and output data
    held here; `size_bytes=None` (and no split) marks the unbounded DRAM at the top.
    `holds` names the operands kept here ("IWO" by default); the others bypass the level, so
    their accesses go to the next level up that holds them. A level pays, as in Yang's Eq. 1, for the
    words it serves to the level below and the partial sums written back into it (fills from above are
    not charged); reads at `energy_pj`, writes at `write_pj` (I, W, O) when given, else at `energy_pj`.
    `read_bw` and `write_bw` are the words the level reads or writes per cycle, all its ports together (per PE for a
    level inside the array; None: not limiting), for the mapping's latency; `area_mm2` its silicon (per PE for a level inside the array; None: not given).
    """

    name: str
    size_bytes: int | None = None
    split_bytes: tuple[int, ...] | None = None  # three (IB, KB, OB), checked below
    energy_pj: tuple[float, ...] = (TABLE3_DRAM_PJ,) * 3  # three (I, W, O), checked below
    holds: str = "IWO"
    write_pj: tuple[float, float, float] | None = None
    read_bw: float | None = None
    write_bw: float | None = None
    area_mm2: float | None = None

    def __post_init__(self):
        if not isinstance(self.holds, str) or not self.holds or set(self.holds) - set(TENSORS) \
                or len(set(self.holds)) != len(self.holds):
            raise EngineError(f"memory '{self.name}': holds must name one or more of the operands I, W, O once each, "
                              f"got {self.holds!r}")
        object.__setattr__(self, "holds", "".join(T for T in TENSORS if T in self.holds))
        if self.split_bytes is not None:
            object.__setattr__(self, "split_bytes", tuple(self.split_bytes))
            if len(self.split_bytes) != 3 or any(not isinstance(b, int) or b < 0 for b in self.split_bytes):
                raise EngineError(f"memory '{self.name}': split_bytes must be three byte counts (IB, KB, OB), none "
                                  "negative (0: no buffer, the tensor passes through)")
            if self.size_bytes is not None:
                raise EngineError(f"memory '{self.name}': give size_bytes or split_bytes, not both")
        elif self.size_bytes is not None and (not isinstance(self.size_bytes, int) or self.size_bytes < 1):
            raise EngineError(f"memory '{self.name}': size_bytes must be a positive whole number, got {self.size_bytes!r}")
        if self.split_bytes and self.holds != "IWO":
            for T, b in zip(TENSORS, self.split_bytes):
                if T in self.holds and b == 0:
                    raise EngineError(f"memory '{self.name}': operand {T} is held here with a capacity of 0 bytes; "
                                      f"give it a positive capacity or leave it out of holds ({self.holds!r})")
        object.__setattr__(self, "energy_pj", tuple(float(e) for e in self.energy_pj))
        if len(self.energy_pj) != 3 or any(e < 0 for e in self.energy_pj):
            raise EngineError(f"memory '{self.name}': energy_pj must be three non-negative numbers (I, W, O)")
        if self.write_pj is not None:
            object.__setattr__(self, "write_pj", tuple(float(e) for e in self.write_pj))
            if len(self.write_pj) != 3 or any(e < 0 for e in self.write_pj):
                raise EngineError(f"memory '{self.name}': write_pj must be three non-negative numbers (I, W, O)")
        for what, zero_ok in (("read_bw", False), ("write_bw", False), ("area_mm2", True)):
            v = getattr(self, what)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0 or (v == 0 and not zero_ok)):
                raise EngineError(f"memory '{self.name}': {what} must be a {'non-negative' if zero_ok else 'positive'} "
                                  f"number or None, got {v!r}")

    @property
    def bounded(self) -> bool:
        return self.size_bytes is not None or self.split_bytes is not None

    @property
    def total_bytes(self) -> int | None:
        return sum(self.split_bytes) if self.split_bytes else self.size_bytes

    @property
    def bounded_bytes(self) -> int:
        """`total_bytes` of a level with a size (every on-chip one); DRAM has none."""
        total = self.total_bytes
        if total is None:
            raise EngineError(f"memory '{self.name}' has no size (it is DRAM)")
        return total

    def energy(self, tensor: str) -> float:
        return self.energy_pj[TENSORS.index(tensor)]

    def write_energy(self, tensor: str) -> float:
        """Energy of one word written into this level (the read energy unless `write_pj` is given)."""
        return (self.write_pj or self.energy_pj)[TENSORS.index(tensor)]

    def keeps(self, tensor: str) -> bool:
        """Whether this level holds `tensor` (rather than bypassing it)."""
        return tensor in self.holds

    @classmethod
    def sram(cls, name: str, size_bytes: int, *, width_bits: int = 64, word_bits: int = 16) -> Memory:
        """A shared SRAM level priced by Table 3."""
        e = access_energy_pj(size_bytes, width_bits=width_bits, word_bits=word_bits)
        return cls(name, size_bytes=size_bytes, energy_pj=(e, e, e))

    @classmethod
    def split(cls, name: str, split_bytes: tuple[int, ...], *, widths=(64, 64, 64),
              word_bits: int = 16) -> Memory:
        """Separate IB/KB/OB SRAMs at one level, each priced by its own size and width (Table 3)."""
        return cls(name, split_bytes=tuple(split_bytes), energy_pj=tuple(
            access_energy_pj(b, width_bits=w, word_bits=word_bits) for b, w in zip(split_bytes, widths)))

    @classmethod
    def dram(cls, *, word_bits: int = 16) -> Memory:
        e = TABLE3_DRAM_PJ * word_bits / 16
        return cls("DRAM", energy_pj=(e, e, e))


@dataclass(frozen=True)
class SpatialArray:
    """A PE array: named axes with their sizes, and the dataflow mapping loop dims onto the axes.

    `dataflow` pairs a loop dim (one of `DIMS`) with the axis it unrolls over; several dims may
    share an axis (their factors multiply). `noc_pj` is the energy (I, W, O) of one word delivered
    to, or collected from, one PE over the array's network: an input or weight word is read once
    from the level above the array and multicast to every PE that uses it, and partial sums are
    reduced across the PEs that share an output (one add or forward per PE word). `unrolling="maximal"`
    makes `block` search only the unrollings that no other one exceeds in every factor of an axis (the
    array as full as the dataflow allows): exact over those, much faster, but not over every unrolling.
    """

    axes: tuple[tuple[str, int], ...]
    dataflow: tuple[tuple[str, str], ...]
    noc_pj: tuple[float, float, float] = (0.0, 0.0, 0.0)
    name: str = "PE array"
    unrolling: str = "all"  # which unrollings `block` searches: "all", or "maximal" (none a larger one contains)

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple((str(a), n) for a, n in self.axes))
        object.__setattr__(self, "dataflow", tuple((d, str(a)) for d, a in self.dataflow))
        names = [a for a, _ in self.axes]
        if not self.axes or len(set(names)) != len(names):
            raise EngineError(f"array '{self.name}': give one or more axes with distinct names, got {self.axes!r}")
        for a, n in self.axes:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise EngineError(f"array '{self.name}': axis '{a}' size must be a whole number >= 1, got {n!r}")
        dims = [d for d, _ in self.dataflow]
        for d, a in self.dataflow:
            if d not in DIMS:
                raise EngineError(f"array '{self.name}': dataflow dim '{d}' is not a loop; use one of {', '.join(DIMS)}")
            if a not in names:
                raise EngineError(f"array '{self.name}': dataflow maps {d} to unknown axis '{a}'; axes: {', '.join(names)}")
        if len(set(dims)) != len(dims):
            raise EngineError(f"array '{self.name}': each dim may unroll over one axis only, got {self.dataflow!r}")
        if self.unrolling not in UNROLLINGS:
            raise UnknownNameError(f"unrolling of array '{self.name}'", self.unrolling, UNROLLINGS)
        object.__setattr__(self, "noc_pj", tuple(float(e) for e in self.noc_pj))
        if len(self.noc_pj) != 3 or any(e < 0 for e in self.noc_pj):
            raise EngineError(f"array '{self.name}': noc_pj must be three non-negative numbers (I, W, O)")

    @property
    def pes(self) -> int:
        return math.prod(n for _, n in self.axes)

    def axis_of(self, dim: str) -> str | None:
        return dict(self.dataflow).get(dim)

    def check(self, unroll) -> None:
        """Raise unless `unroll` (factors in `DIMS` order) follows the dataflow and fits every axis."""
        sizes = dict(self.axes)
        used = dict.fromkeys(sizes, 1)
        for d, f in zip(DIMS, unroll):
            if isinstance(f, bool) or not isinstance(f, int) or f < 1:
                raise EngineError(f"array '{self.name}': unroll of {d} must be a whole number >= 1, got {f!r}")
            if f == 1:
                continue
            axis = self.axis_of(d)
            if axis is None:
                raise EngineError(f"array '{self.name}': {d} unrolled by {f} but the dataflow "
                                  f"({', '.join(f'{x}->{a}' for x, a in self.dataflow)}) does not map {d} to an axis")
            used[axis] *= f
        for axis, n in used.items():
            if n > sizes[axis]:
                raise EngineError(f"array '{self.name}': unroll of {n} on axis '{axis}' exceeds its {sizes[axis]} PEs")


@dataclass(frozen=True)
class Hierarchy:
    """Memory levels from the one next to the MACs out to DRAM (unbounded, last, holding every operand).

    With an `array`, the first `array_level` levels sit inside every PE (capacities per PE) and
    the others outside the array, shared by all PEs. With `stationary`, the MACs read an input or weight
    word from its innermost holder once per run of the loops inside level 0's tile that do not index it
    (innermost first; ZigZag's rule), rather than once per MAC. Partial sums are `psum_bits` wide (None: `word_bits`):
    every output word crossing a boundary that some output crosses more than once is priced at that width (as ZigZag
    prices a transfer period holding partial sums), the others at `word_bits`; per-word energies are at `word_bits`.
    `charge` names what a transfer costs (`CHARGES`).
    """

    levels: tuple[Memory, ...]
    word_bits: int = 16
    mac_pj: float = MAC_PJ
    name: str = ""
    array: SpatialArray | None = None
    array_level: int = 0
    stationary: bool = False  # an input or weight word at the MAC is reused over the innermost loops that skip it
    psum_bits: int | None = None
    charge: str = "served"

    def __post_init__(self):
        object.__setattr__(self, "levels", tuple(self.levels))
        if len(self.levels) < 2:
            raise EngineError(f"hierarchy '{self.name}': needs at least one on-chip level and DRAM")
        if self.levels[-1].bounded or any(not m.bounded for m in self.levels[:-1]):
            raise EngineError(f"hierarchy '{self.name}': only the last level (DRAM) may be unbounded, and it must be")
        top = self.levels[-1]
        for T in TENSORS:
            if not top.keeps(T):
                raise EngineError(f"hierarchy '{self.name}': operand {T} has no level that can hold it: the last "
                                  f"level '{top.name}' holds only {top.holds!r} and must hold I, W and O")
        m = len(self.levels) - 1
        if isinstance(self.array_level, bool) or not isinstance(self.array_level, int) \
                or not 0 <= self.array_level <= m or (self.array is None and self.array_level):
            raise EngineError(f"hierarchy '{self.name}': array_level must be between 0 and {m} (levels inside each "
                              f"PE), and 0 without an array; got {self.array_level!r}")
        if not isinstance(self.word_bits, int) or not 1 <= self.word_bits <= 64:
            raise EngineError(f"hierarchy '{self.name}': word_bits must be between 1 and 64, got {self.word_bits!r}")
        if self.psum_bits is not None and (isinstance(self.psum_bits, bool) or not isinstance(self.psum_bits, int)
                                           or not self.word_bits <= self.psum_bits <= 64):
            raise EngineError(f"hierarchy '{self.name}': psum_bits must be a whole number from word_bits "
                              f"({self.word_bits}) to 64, got {self.psum_bits!r}")
        if self.charge not in CHARGES:
            raise UnknownNameError(f"charge of hierarchy '{self.name}'", self.charge, CHARGES)

    @property
    def psum_scale(self) -> float:
        """Energy of a partial-sum word over a final output word's (psum_bits / word_bits)."""
        return (self.psum_bits or self.word_bits) / self.word_bits

    @property
    def both_ends(self) -> bool:
        """Whether fills and read-outs are charged too (`charge="both-ends"`)."""
        return self.charge == "both-ends"

    @property
    def on_chip(self) -> tuple[Memory, ...]:
        return self.levels[:-1]

    @property
    def per_operand(self) -> bool:
        """Whether some level bypasses an operand or prices writes apart, or a PE array is modelled."""
        return self.array is not None or self.stationary or any(mem.holds != "IWO" or mem.write_pj
                                                                for mem in self.levels)

    def inside(self, level: int) -> bool:
        """Whether level `level` sits inside every PE (below the array)."""
        return level < self.array_level

    def capacity_words(self, level: int, tensor: str | None = None) -> int:
        """Words level `level` holds: its shared size, or `tensor`'s buffer when split."""
        m = self.levels[level]
        nbytes = m.split_bytes[TENSORS.index(tensor)] if (m.split_bytes and tensor) else m.bounded_bytes
        return nbytes * 8 // self.word_bits

    def keep(self, names) -> Hierarchy:
        """The hierarchy restricted to the named on-chip levels (DRAM always stays)."""
        names = tuple(names)
        known = [m.name for m in self.on_chip]
        for n in names:
            if n not in known:
                raise UnknownNameError("memory level", n, known)
        kept = tuple(m for m in self.on_chip if m.name in names)
        inner = sum(m.name in names for m in self.on_chip[:self.array_level])
        return replace(self, levels=(*kept, self.levels[-1]), array_level=inner)

    # ---- the hierarchies of the paper's evaluation -------------------------
    @classmethod
    def diannao(cls) -> Hierarchy:
        """DianNao's on-chip buffers (Sec. 5.2): IB 2 KB, KB 32 KB, OB 2 KB, then DRAM.

        NBin and NBout deliver 16 words a cycle (256 bits), SB 256 words (priced at Table 3's
        widest column, 512 bits).
        """
        acc = Accelerator.preset("diannao")
        return cls((Memory.split("buffer", _split_bytes(acc), widths=(256, 512, 256), word_bits=acc.word_bits),
                    Memory.dram(word_bits=acc.word_bits)), acc.word_bits, name="diannao")

    @classmethod
    def cpu(cls) -> Hierarchy:
        """The Xeon E5645 of Sec. 4.1: 32 KB L1, 256 KB L2, 12 MB L3, then DRAM (16-bit data)."""
        return cls((Memory.sram("L1", 32 * KB), Memory.sram("L2", 256 * KB), Memory.sram("L3", 12 * MB),
                    Memory.dram()), 16, name="cpu")

    @classmethod
    def from_sizes(cls, sizes_bytes, *, word_bits: int = 16, width_bits: int = 64, name: str = "") -> Hierarchy:
        """Shared SRAM levels of the given sizes (innermost first), priced by Table 3, then DRAM."""
        levels = tuple(Memory.sram(f"M{i}", s, width_bits=width_bits, word_bits=word_bits)
                       for i, s in enumerate(sizes_bytes))
        return cls((*levels, Memory.dram(word_bits=word_bits)), word_bits, name=name)

    @classmethod
    def from_accelerator(cls, acc: Accelerator) -> Hierarchy:
        """An accelerator's per-PE RF, its PE array with the preset's dataflow, its global buffer (or IB/KB/OB) and
        DRAM, with its own per-word energies; a per-operand preset (`acc.hierarchy`) builds its own memories."""
        if acc.hierarchy:
            if acc.hierarchy not in PRESETS:
                raise UnknownNameError("blocking hierarchy", acc.hierarchy, PRESETS)
            return PRESETS[acc.hierarchy](acc)
        lv = acc.levels
        rf, dram = lv[0], lv[-1]
        levels = [Memory("RF", size_bytes=rf.size_bytes, energy_pj=(rf.energy_pj,) * 3,
                         area_mm2=_area(acc.rf_um2_per_byte, acc.rf_bytes))]
        if acc.split_buffers:
            per_buffer = tuple(m.energy_pj for m in lv[1:-1])  # IB, KB, OB, or one figure for all three
            levels.append(Memory("buffer", split_bytes=_split_bytes(acc),
                                 energy_pj=per_buffer if len(per_buffer) == 3 else per_buffer * 3,
                                 area_mm2=_area(acc.sram_um2_per_byte, acc.buffer_bytes)))
        else:
            levels.append(Memory("buffer", size_bytes=lv[1].size_bytes, energy_pj=(lv[1].energy_pj,) * 3,
                                 area_mm2=_area(acc.sram_um2_per_byte, acc.buffer_bytes)))
        levels.append(Memory("DRAM", energy_pj=(dram.energy_pj,) * 3))
        return cls(tuple(levels), acc.word_bits, acc.energy_pj("mac"), name=acc.name,
                   array=pe_array(acc, (acc.energy_pj("array"),) * 3), array_level=1, psum_bits=acc.psum_bits)

    @classmethod
    def preset(cls, name: str) -> Hierarchy:
        """A per-operand preset ("tpu-like", "eyeriss-like") at its accelerator preset's sizes."""
        if name not in PRESETS:
            raise UnknownNameError("blocking hierarchy", name, PRESETS)
        return PRESETS[name](Accelerator.preset(name))


def pe_array(acc: Accelerator, noc_pj) -> SpatialArray:
    """The accelerator's pe_rows x pe_cols array with its dataflow (`engine.dataflow`, every loop an axis spreads,
    in Yang's letters), searching the maximal unrollings (as full as the dataflow allows;
    `dataclasses.replace(..., unrolling="all")` searches every one)."""
    try:
        flow = parse(acc.dataflow)
    except UnknownNameError as err:
        raise UnknownNameError(f"dataflow of accelerator '{acc.name}'", acc.dataflow, err.valid) from None
    unrolled = tuple((YANG[loop], axis) for axis, spread in (("rows", flow.rows), ("cols", flow.cols))
                     for loop in spread.loops)
    return SpatialArray((("rows", acc.pe_rows), ("cols", acc.pe_cols)), unrolled, noc_pj, unrolling="maximal")


def tpu_like(acc: Accelerator) -> Hierarchy:
    """ZigZag's tpu_like example accelerator (Mei et al., "ZigZag: Enlarging Joint Architecture-Mapping Design
    Space Exploration for DNN Accelerators", IEEE Trans. Computers 2021; zigzag-dse 3.9), after the TPU (Jouppi
    et al., ISCA 2017): per PE a weight register file (W only, 128 B) and an accumulator (one partial sum), a 2 MB
    SRAM holding inputs and outputs (weights bypass it), DRAM; C on the rows, K on the columns.

    Energies per 8-bit word from ZigZag's per-access costs (read / write): registers 0.095 (W, one 8-bit access)
    and 0.021 per 16-bit access of the accumulator (0.0105 a byte), SRAM 416.16 / 378.4 pJ per 2048 bits (1.6256 /
    1.478 pJ a byte), DRAM 700 / 750 pJ per 64 bits (87.5 / 93.75 pJ a byte), MAC 0.04 pJ; partial sums of
    `acc.psum_bits` (ZigZag's 16), both ends of every transfer charged, as ZigZag does. The accumulator's partial
    sum counts as one word of its capacity; multicast and reduction are free, and MAC inputs and weights are
    `stationary`, as in ZigZag. Port widths (ZigZag's bits a cycle) give the bandwidths.
    """
    wb = acc.word_bits // 8 or 1
    scale = acc.word_bits / 8
    def rw(r, w):
        return dict(energy_pj=tuple(x * scale for x in r), write_pj=tuple(x * scale for x in w))
    per_byte = 8 / acc.word_bits  # ZigZag's ports, in bits a cycle, as words
    levels = (Memory("O-reg", split_bytes=(0, 0, wb), holds="O", **rw((0, 0, 0.0105), (0, 0, 0.0105)),
                     read_bw=2 * per_byte, write_bw=2 * per_byte, area_mm2=_area(acc.rf_um2_per_byte, wb)),
              Memory("W-reg", split_bytes=(0, acc.rf_bytes, 0), holds="W", **rw((0, 0.095, 0), (0, 0.095, 0)),
                     read_bw=per_byte, write_bw=per_byte, area_mm2=_area(acc.rf_um2_per_byte, acc.rf_bytes)),
              Memory("SRAM", size_bytes=acc.buffer_bytes, holds="IO", **rw((1.6256, 0, 1.6256), (1.478125, 0, 1.478125)),
                     read_bw=256 * per_byte, write_bw=256 * per_byte,
                     area_mm2=_area(acc.sram_um2_per_byte, acc.buffer_bytes)),
              Memory("DRAM", **rw((87.5,) * 3, (93.75,) * 3)))
    return Hierarchy(levels, acc.word_bits, 0.04 * scale, acc.name, pe_array(acc, (0.0, 0.0, 0.0)), 2, True,
                     psum_bits=acc.psum_bits, charge="both-ends")


def eyeriss_like(acc: Accelerator) -> Hierarchy:
    """Eyeriss (Chen, Krishna, Emer, Sze, "Eyeriss: An Energy-Efficient Reconfigurable Accelerator for Deep
    Convolutional Neural Networks", ISSCC 2016 / JSSC 2017): 12 x 14 PEs, row-stationary; memories and per-access
    energies of ZigZag's eyeriss_like example (Mei et al., IEEE Trans. Computers 2021).

    Per PE: 64 B input, 64 B weight and 16 B partial-sum RFs (8 partial sums of 16 bits), one level with
    three capacities; then an 8 KB partial-sum SRAM and a 64 KB weight SRAM, one level holding W and O with
    two capacities (inputs bypass it); a 1 MB SRAM for inputs and outputs (`acc.buffer_bytes`); DRAM. ZigZag
    lets the three RFs (and the two SRAMs) cut the loop nest at different points; here each group shares
    one cut, which keeps the exact search to one level order.
    Per 8-bit word (read / write): RFs 1.0 / 1.5 pJ (the psum RF 1.5 / 2.0 per 24-bit access, which holds one 16-bit
    partial sum: 0.75 / 1.0 a byte), 8 KB 10 / 15 pJ and 64 KB 20 / 25 pJ per 128 bits, 1 MB 100 / 130 pJ per 384
    bits, DRAM 1000 pJ per 64 bits; MAC 0.5 pJ; partial sums of `acc.psum_bits` (ZigZag's 16), both ends of every
    transfer charged; the array's network is free and MAC inputs and weights are `stationary`, as in ZigZag.
    Bandwidths from ZigZag's ports (bits a cycle, all of a level's memories together; a read-write port counts for
    both): RFs 8 + 8 + 24, W/O SRAMs 128 + 128 (the 64 KB's read or write port, the 8 KB's read-write one), 1 MB 384.
    """
    s = acc.word_bits / 8
    w = 8 / acc.word_bits  # words per bit-a-cycle of a port, x 8
    sram = acc.sram_um2_per_byte
    levels = (Memory("PE RFs", split_bytes=(64, 64, 8), energy_pj=(1.0 * s, 1.0 * s, 0.75 * s),
                     write_pj=(1.5 * s, 1.5 * s, 1.0 * s), read_bw=5 * w, write_bw=5 * w,
                     area_mm2=_area(acc.rf_um2_per_byte, 64 + 64 + 8)),
              Memory("W/O SRAMs", split_bytes=(0, 64 * KB, 8 * KB), holds="WO", energy_pj=(0, 20 / 16 * s, 10 / 16 * s),
                     write_pj=(0, 25 / 16 * s, 15 / 16 * s), read_bw=32 * w, write_bw=32 * w,
                     area_mm2=_area(sram, 72 * KB)),
              Memory("SRAM", size_bytes=acc.buffer_bytes, holds="IO", energy_pj=(100 / 48 * s, 0, 100 / 48 * s),
                     write_pj=(130 / 48 * s, 0, 130 / 48 * s), read_bw=48 * w, write_bw=48 * w,
                     area_mm2=_area(sram, acc.buffer_bytes)),
              Memory("DRAM", energy_pj=(125 * s,) * 3, write_pj=(125 * s,) * 3))
    return Hierarchy(levels, acc.word_bits, 0.5 * s, acc.name, pe_array(acc, (0.0, 0.0, 0.0)), 1, True,
                     psum_bits=acc.psum_bits, charge="both-ends")


def tpu_v4i(acc: Accelerator) -> Hierarchy:
    """TPU v4i (Jouppi et al., "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with Hardware
    Support for Embeddings", ISCA 2023), level by level as AccelForge 1.0.467's examples/arches/tpu_v4i.yaml:
    a one-word weight register per PE (free to read and write), the 128 x 128 array (C over the rows, reduced into
    the outputs; K over the columns, the inputs multicast), a 4 MB LocalBuffer for inputs and outputs (one of four,
    one per array: `acc.arrays`), the 128 MB GlobalBuffer (`acc.buffer_bytes`, the fusion buffer) and MainMemory.

    AccelForge's energies are per bit: LocalBuffer 0.249 / 0.293 pJ (read / write), GlobalBuffer 1.88 / 2.36 pJ,
    MainMemory 7.03 pJ, a MAC 0.084 pJ; GlobalBuffer ports 2048 GB/s read and 1024 GB/s write at 1.05 GHz, the others
    unlimited. Areas: GlobalBuffer 112 mm2, the LocalBuffers 51 mm2 together (both from the paper's Fig. 6; the 51 are
    all four, as AccelForge counts them once: 4 x 51 would make the 16 MiB 15x less dense than the 128 MiB
    GlobalBuffer, 51 makes them 3.7x), the register
    85 um2 per PE (AccelForge: 10 % of Fig. 6's 14 mm2 per 128 x 128 array). Both ends of every transfer are
    charged; no operand is held at the MAC beyond the weight register (not `stationary`).
    """
    bits = acc.word_bits
    def per_word(r, w):
        return dict(energy_pj=(r * bits,) * 3, write_pj=(w * bits,) * 3)
    cycle = acc.clock_hz * bits / 8  # bytes a second per word a cycle
    levels = (Memory("Register", split_bytes=(0, acc.rf_bytes, 0), holds="W", energy_pj=(0, 0, 0),
                     area_mm2=_area(acc.rf_um2_per_byte, acc.rf_bytes)),
              # Fig. 6's 51 mm2 is the four LocalBuffers together (16 MiB of vector memory), as tpu_v4i.yaml counts it
              Memory("LocalBuffer", size_bytes=4 * MB, holds="IO", **per_word(0.249, 0.293),
                     area_mm2=51.0 / acc.arrays),
              Memory("GlobalBuffer", size_bytes=acc.buffer_bytes, **per_word(1.88, 2.36), read_bw=2048e9 / cycle,
                     write_bw=1024e9 / cycle, area_mm2=112.0),
              Memory("MainMemory", **per_word(7.03, 7.03)))
    return Hierarchy(levels, bits, 0.084 * bits / 8, acc.name, pe_array(acc, (0.0, 0.0, 0.0)), 1,
                     psum_bits=acc.psum_bits, charge="both-ends")


PRESETS = {"tpu-like": tpu_like, "eyeriss-like": eyeriss_like, "tpu-v4i": tpu_v4i}


def _area(um2_per_byte: float | None, nbytes: int) -> float | None:
    """mm2 of `nbytes` at `um2_per_byte` (None when the accelerator gives no figure)."""
    return None if um2_per_byte is None else um2_per_byte * nbytes * 1e-6


def _split_bytes(acc: Accelerator) -> tuple[int, int, int]:
    """(IB, KB, OB) bytes of an accelerator with split buffers."""
    ib, kb, ob = acc.input_buffer_bytes, acc.weight_buffer_bytes, acc.output_buffer_bytes
    if ib is None or kb is None or ob is None:
        raise EngineError(f"accelerator '{acc.name}' has no split buffers (IB, KB, OB)")
    return ib, kb, ob
