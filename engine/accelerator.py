"""Accelerator descriptions: `Accelerator`, its `MemoryLevel`s, and presets read from data/."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources

from engine.errors import AcceleratorError, UnknownNameError
from engine.memory_energy import MAC_PJ, TABLE3_DRAM_PJ, access_energy_pj

PRESETS_FILE = resources.files("engine") / "data" / "accelerators.toml"  # package data: found by any install

KB = 1024
MB = 1024 * KB

# Per-word access energies (pJ) of the Eyeriss normalised table (MAC = 1 pJ at 16 bits).
EYERISS_ENERGY = {"mac": 1.0, "rf": 1.0, "array": 2.0, "buffer": 6.0, "dram": 200.0}
# Per-16-bit-word read energies (pJ) of ZigZag's example accelerators (ZigZag, Mei et al., IEEE TC 2021;
# the tpu_like and eyeriss_like inputs of zigzag-dse 3.9): twice the per-byte figures, no array energy.
TABLES = {"eyeriss": EYERISS_ENERGY,
          "tpu-like": {"mac": 0.08, "rf": 0.19, "array": 0.0, "buffer": 3.2512, "dram": 175.0},
          "eyeriss-like": {"mac": 1.0, "rf": 2.0, "array": 0.0, "buffer": 4.1667, "dram": 250.0},
          # AccelForge 1.0.467's examples/arches/tpu_v4i.yaml (after Jouppi et al., ISCA 2023), per bit x 16: MAC
          # 0.084 pJ per 8-bit MAC, weight register 0, GlobalBuffer reads 1.88 pJ/bit, MainMemory 7.03 pJ/bit
          "tpu-v4i": {"mac": 0.168, "rf": 0.0, "array": 0.0, "buffer": 30.08, "dram": 112.48}}
ENERGY_TABLES = (*TABLES, "yang")



@dataclass(frozen=True)
class MemoryLevel:
    """One level of the memory hierarchy: its size and the energy of one word access."""

    name: str
    size_bytes: int | None  # None for DRAM (unbounded)
    energy_pj: float


@dataclass(frozen=True)
class Accelerator:
    """A DNN accelerator as the memory models see it (frozen; `with_*` return copies).

    A split on-chip memory (DianNao, ShiDianNao) sets `input/weight/output_buffer_bytes`;
    `buffer_bytes` is then their sum. `energy` names the per-access energy table.

    `psum_bits` is the width of a partial sum (None: `word_bits`). `arrays` copies of the PE array (each with its own
    levels below the global buffer) run side by side. The vector unit doing element-wise, softmax, norm and pooling
    work has `vector_lanes` operations a cycle and `vector_pj` per operation (None: the PE array does it, one
    operation per PE a cycle at the MAC's energy, as `engine.energy` counts it). Area: `sram_um2_per_byte` and
    `rf_um2_per_byte` (square micrometres per byte of the buffers and of each PE's registers), `mac_um2` per PE's
    datapath, `vector_mm2` for the vector unit (None: not given; `engine.blocking.area_mm2` says which it needs).
    """

    name: str
    buffer_bytes: int
    pe_rows: int
    pe_cols: int
    rf_bytes: int
    word_bits: int = 16
    dataflow: str = "Ow|Cout"
    clock_hz: float = 800e6
    dram_bandwidth: float = 6.4e9
    input_buffer_bytes: int | None = None
    weight_buffer_bytes: int | None = None
    output_buffer_bytes: int | None = None
    energy: str = "eyeriss"
    source: str = ""
    hierarchy: str = ""  # a per-operand blocking hierarchy (engine.blocking presets), "" for RF / buffer / DRAM
    psum_bits: int | None = None
    arrays: int = 1
    vector_lanes: int | None = None
    vector_pj: float | None = None
    sram_um2_per_byte: float | None = None
    rf_um2_per_byte: float | None = None
    mac_um2: float | None = None
    vector_mm2: float | None = None

    def __post_init__(self):
        split = (self.input_buffer_bytes, self.weight_buffer_bytes, self.output_buffer_bytes)
        if any(b is not None for b in split):
            if any(b is None for b in split):
                raise AcceleratorError(f"accelerator '{self.name}': give all three split buffers or none")
            for label, b in zip(("input", "weight", "output"), split):
                _check_int(self.name, f"{label} buffer bytes", b, 1, 1024 * MB)
            object.__setattr__(self, "buffer_bytes", sum(split))
        _check_int(self.name, "buffer bytes", self.buffer_bytes, 1, 1024 * MB)
        _check_int(self.name, "PE rows", self.pe_rows, 1, 4096)
        _check_int(self.name, "PE columns", self.pe_cols, 1, 4096)
        _check_int(self.name, "RF bytes per PE", self.rf_bytes, 1, 1 * MB)
        _check_int(self.name, "word bits", self.word_bits, 1, 64)
        _check_float(self.name, "clock (Hz)", self.clock_hz, 1e3, 1e11)
        _check_float(self.name, "DRAM bandwidth (bytes/s)", self.dram_bandwidth, 1e3, 1e14)
        if self.energy not in ENERGY_TABLES:
            raise UnknownNameError("energy table", self.energy, ENERGY_TABLES)
        if self.psum_bits is not None:
            _check_int(self.name, "partial-sum bits", self.psum_bits, self.word_bits, 64)
        _check_int(self.name, "PE arrays", self.arrays, 1, 1024)
        if self.vector_lanes is not None:
            _check_int(self.name, "vector lanes", self.vector_lanes, 1, 1 << 20)
        for what, value in (("vector_pj", self.vector_pj), ("sram_um2_per_byte", self.sram_um2_per_byte),
                            ("rf_um2_per_byte", self.rf_um2_per_byte), ("mac_um2", self.mac_um2),
                            ("vector_mm2", self.vector_mm2)):
            if value is not None:
                _check_float(self.name, what, value, 0.0, 1e9)

    # ---- presets ---------------------------------------------------------
    @staticmethod
    def presets() -> tuple[str, ...]:
        """Every preset name, in the order of the data file."""
        return tuple(_preset_table())

    @classmethod
    def preset(cls, name: str) -> Accelerator:
        table = _preset_table()
        if name not in table:
            raise UnknownNameError("accelerator preset", name, table)
        return cls(name=name, **table[name])

    # ---- copies ----------------------------------------------------------
    def with_buffer(self, buffer_bytes: int) -> Accelerator:
        """A copy with one unified global buffer of `buffer_bytes` (a split buffer becomes unified)."""
        return replace(self, buffer_bytes=buffer_bytes, input_buffer_bytes=None,
                       weight_buffer_bytes=None, output_buffer_bytes=None)

    def with_pe_array(self, rows: int, cols: int) -> Accelerator:
        return replace(self, pe_rows=rows, pe_cols=cols)

    def with_rf(self, rf_bytes: int) -> Accelerator:
        return replace(self, rf_bytes=rf_bytes)

    def with_word_bits(self, word_bits: int) -> Accelerator:
        return replace(self, word_bits=word_bits)

    def with_bandwidth(self, bytes_per_s: float) -> Accelerator:
        return replace(self, dram_bandwidth=bytes_per_s)

    # ---- derived ---------------------------------------------------------
    @property
    def pes(self) -> int:
        return self.pe_rows * self.pe_cols

    @property
    def word_bytes(self) -> float:
        return self.word_bits / 8

    @property
    def vector_ops_per_cycle(self) -> int:
        """Element-wise operations a cycle: the vector unit's lanes, or one per PE without one."""
        return self.vector_lanes if self.vector_lanes is not None else self.pes * self.arrays

    @property
    def vector_op_pj(self) -> float:
        """Energy of one element-wise operation: the vector unit's, or a MAC's without one."""
        return self.vector_pj if self.vector_pj is not None else self.energy_pj("mac")

    @property
    def split_buffers(self) -> bool:
        return self.input_buffer_bytes is not None

    @property
    def levels(self) -> tuple[MemoryLevel, ...]:
        """The hierarchy from the PE's register file out to DRAM, with per-word access energy."""
        scale = self.word_bits / 16  # tables are per 16-bit word
        if self.energy == "yang":
            def pj(size):
                return access_energy_pj(size) * scale
            rf = MemoryLevel("RF", self.rf_bytes, pj(self.rf_bytes))
            if self.split_buffers:
                bufs = tuple(MemoryLevel(n, b, pj(b)) for n, b in (
                    ("IB", self.input_buffer_bytes), ("KB", self.weight_buffer_bytes), ("OB", self.output_buffer_bytes)))
            else:
                bufs = (MemoryLevel("buffer", self.buffer_bytes, pj(self.buffer_bytes)),)
            return (rf, *bufs, MemoryLevel("DRAM", None, TABLE3_DRAM_PJ * scale))
        e = {k: v * scale for k, v in TABLES[self.energy].items()}
        return (MemoryLevel("RF", self.rf_bytes, e["rf"]),
                MemoryLevel("buffer", self.buffer_bytes, e["buffer"]),
                MemoryLevel("DRAM", None, e["dram"]))

    def energy_pj(self, component: str) -> float:
        """Per-word energy of 'mac', 'rf', 'array', 'buffer' or 'dram' under this accelerator's table."""
        scale = self.word_bits / 16
        if self.energy == "yang":
            table = {"mac": MAC_PJ, "rf": access_energy_pj(self.rf_bytes),
                     "array": access_energy_pj(self.buffer_bytes), "buffer": access_energy_pj(self.buffer_bytes),
                     "dram": TABLE3_DRAM_PJ}
        else:
            table = TABLES[self.energy]
        if component not in table:
            raise UnknownNameError("energy component", component, table)
        return table[component] * scale

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@cache
def _preset_table() -> dict[str, dict]:
    raw = tomllib.loads(PRESETS_FILE.read_text())
    table: dict[str, dict] = {}
    for name, entry in raw.items():
        entry = dict(entry)
        base = entry.pop("base", None)
        merged = {**table[base], **entry} if base else entry
        if base:
            merged["source"] = entry.get("source", merged.get("source", ""))
        if "input_buffer_bytes" in merged:  # a split memory: the global size is the sum
            merged["buffer_bytes"] = sum(merged[f"{k}_buffer_bytes"] for k in ("input", "weight", "output"))
        table[name] = merged
    return table


def _check_int(acc: str, what: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AcceleratorError(f"accelerator '{acc}': {what} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise AcceleratorError(f"accelerator '{acc}': {what} must be between {low} and {high}, got {value}")


def _check_float(acc: str, what: str, value, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise AcceleratorError(f"accelerator '{acc}': {what} must be a number between {low:g} and {high:g}, got {value!r}")
