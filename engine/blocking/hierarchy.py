"""Memory hierarchies to block for: `Memory` levels (shared or split into IB/KB/OB) ending in DRAM.

Access energy per word follows Yang et al. Table 3 (pJ per 16-bit access by SRAM size and
memory width), log-linear between rows, DRAM (320 pJ) beyond 16 MB.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.errors import EngineError, UnknownNameError
from engine.blocking.layer import TENSORS
from engine.memory_energy import MAC_PJ, TABLE3_DRAM_PJ, access_energy_pj  # access_energy_pj: re-exported

KB = 1024
MB = 1024 * KB



@dataclass(frozen=True)
class Memory:
    """One memory level: one shared capacity, or separate IB/KB/OB capacities (`split_bytes`, 0 for no buffer).

    `energy_pj` is the energy of one word access for the input, kernel and output data
    held here; `size_bytes=None` (and no split) marks the unbounded DRAM at the top.
    """

    name: str
    size_bytes: int | None = None
    split_bytes: tuple[int, int, int] | None = None
    energy_pj: tuple[float, float, float] = (TABLE3_DRAM_PJ,) * 3

    def __post_init__(self):
        if self.split_bytes is not None:
            object.__setattr__(self, "split_bytes", tuple(self.split_bytes))
            if len(self.split_bytes) != 3 or any(not isinstance(b, int) or b < 0 for b in self.split_bytes):
                raise EngineError(f"memory '{self.name}': split_bytes must be three byte counts (IB, KB, OB), none "
                                  "negative (0: no buffer, the tensor passes through)")
            if self.size_bytes is not None:
                raise EngineError(f"memory '{self.name}': give size_bytes or split_bytes, not both")
        elif self.size_bytes is not None and (not isinstance(self.size_bytes, int) or self.size_bytes < 1):
            raise EngineError(f"memory '{self.name}': size_bytes must be a positive whole number, got {self.size_bytes!r}")
        object.__setattr__(self, "energy_pj", tuple(float(e) for e in self.energy_pj))
        if len(self.energy_pj) != 3 or any(e < 0 for e in self.energy_pj):
            raise EngineError(f"memory '{self.name}': energy_pj must be three non-negative numbers (I, W, O)")

    @property
    def bounded(self) -> bool:
        return self.size_bytes is not None or self.split_bytes is not None

    @property
    def total_bytes(self) -> int | None:
        return sum(self.split_bytes) if self.split_bytes else self.size_bytes

    def energy(self, tensor: str) -> float:
        return self.energy_pj[TENSORS.index(tensor)]

    @classmethod
    def sram(cls, name: str, size_bytes: int, *, width_bits: int = 64, word_bits: int = 16) -> "Memory":
        """A shared SRAM level priced by Table 3."""
        e = access_energy_pj(size_bytes, width_bits=width_bits, word_bits=word_bits)
        return cls(name, size_bytes=size_bytes, energy_pj=(e, e, e))

    @classmethod
    def split(cls, name: str, split_bytes: tuple[int, int, int], *, widths=(64, 64, 64),
              word_bits: int = 16) -> "Memory":
        """Separate IB/KB/OB SRAMs at one level, each priced by its own size and width (Table 3)."""
        return cls(name, split_bytes=tuple(split_bytes), energy_pj=tuple(
            access_energy_pj(b, width_bits=w, word_bits=word_bits) for b, w in zip(split_bytes, widths)))

    @classmethod
    def dram(cls, *, word_bits: int = 16) -> "Memory":
        e = TABLE3_DRAM_PJ * word_bits / 16
        return cls("DRAM", energy_pj=(e, e, e))


@dataclass(frozen=True)
class Hierarchy:
    """Memory levels from the one next to the MACs out to DRAM (unbounded, last)."""

    levels: tuple[Memory, ...]
    word_bits: int = 16
    mac_pj: float = MAC_PJ
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "levels", tuple(self.levels))
        if len(self.levels) < 2:
            raise EngineError(f"hierarchy '{self.name}': needs at least one on-chip level and DRAM")
        if self.levels[-1].bounded or any(not m.bounded for m in self.levels[:-1]):
            raise EngineError(f"hierarchy '{self.name}': only the last level (DRAM) may be unbounded, and it must be")
        if not isinstance(self.word_bits, int) or not 1 <= self.word_bits <= 64:
            raise EngineError(f"hierarchy '{self.name}': word_bits must be between 1 and 64, got {self.word_bits!r}")

    @property
    def on_chip(self) -> tuple[Memory, ...]:
        return self.levels[:-1]

    def capacity_words(self, level: int, tensor: str | None = None) -> int:
        """Words level `level` holds: its shared size, or `tensor`'s buffer when split."""
        m = self.levels[level]
        nbytes = m.split_bytes[TENSORS.index(tensor)] if (m.split_bytes and tensor) else m.total_bytes
        return nbytes * 8 // self.word_bits

    def keep(self, names) -> "Hierarchy":
        """The hierarchy restricted to the named on-chip levels (DRAM always stays)."""
        names = tuple(names)
        known = [m.name for m in self.on_chip]
        for n in names:
            if n not in known:
                raise UnknownNameError("memory level", n, known)
        kept = tuple(m for m in self.on_chip if m.name in names)
        return Hierarchy((*kept, self.levels[-1]), self.word_bits, self.mac_pj, self.name)

    # ---- the hierarchies of the paper's evaluation -------------------------
    @classmethod
    def diannao(cls) -> "Hierarchy":
        """DianNao's on-chip buffers (Sec. 5.2): IB 2 KB, KB 32 KB, OB 2 KB, then DRAM.

        NBin and NBout deliver 16 words a cycle (256 bits), SB 256 words (priced at Table 3's
        widest column, 512 bits).
        """
        acc = Accelerator.preset("diannao")
        split = (acc.input_buffer_bytes, acc.weight_buffer_bytes, acc.output_buffer_bytes)
        return cls((Memory.split("buffer", split, widths=(256, 512, 256), word_bits=acc.word_bits),
                    Memory.dram(word_bits=acc.word_bits)), acc.word_bits, name="diannao")

    @classmethod
    def cpu(cls) -> "Hierarchy":
        """The Xeon E5645 of Sec. 4.1: 32 KB L1, 256 KB L2, 12 MB L3, then DRAM (16-bit data)."""
        return cls((Memory.sram("L1", 32 * KB), Memory.sram("L2", 256 * KB), Memory.sram("L3", 12 * MB),
                    Memory.dram()), 16, name="cpu")

    @classmethod
    def from_sizes(cls, sizes_bytes, *, word_bits: int = 16, width_bits: int = 64, name: str = "") -> "Hierarchy":
        """Shared SRAM levels of the given sizes (innermost first), priced by Table 3, then DRAM."""
        levels = tuple(Memory.sram(f"M{i}", s, width_bits=width_bits, word_bits=word_bits)
                       for i, s in enumerate(sizes_bytes))
        return cls((*levels, Memory.dram(word_bits=word_bits)), word_bits, name=name)

    @classmethod
    def from_accelerator(cls, acc: Accelerator) -> "Hierarchy":
        """An accelerator's RF, global buffer (or IB/KB/OB) and DRAM, with its own per-word energies."""
        lv = acc.levels
        rf, dram = lv[0], lv[-1]
        levels = [Memory("RF", size_bytes=rf.size_bytes, energy_pj=(rf.energy_pj,) * 3)]
        if acc.split_buffers:
            per_buffer = tuple(m.energy_pj for m in lv[1:-1])  # IB, KB, OB, or one figure for all three
            levels.append(Memory("buffer", split_bytes=(acc.input_buffer_bytes, acc.weight_buffer_bytes,
                                                        acc.output_buffer_bytes),
                                 energy_pj=per_buffer if len(per_buffer) == 3 else per_buffer * 3))
        else:
            levels.append(Memory("buffer", size_bytes=lv[1].size_bytes, energy_pj=(lv[1].energy_pj,) * 3))
        levels.append(Memory("DRAM", energy_pj=(dram.energy_pj,) * 3))
        return cls(tuple(levels), acc.word_bits, acc.energy_pj("mac"), name=acc.name)
