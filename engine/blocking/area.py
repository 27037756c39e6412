"""Silicon area of an accelerator, component by component, from the figures its preset cites (`Accelerator` area
fields and the per-operand presets' own memories), so energy and latency can be weighed against it."""

from __future__ import annotations

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.errors import AcceleratorError


def area_mm2(acc: Accelerator) -> dict[str, float]:
    """mm2 of each on-chip memory level of `acc`'s blocking hierarchy (a level inside the PEs once per PE), its PE
    array's datapaths and its vector unit; everything below the last on-chip level (the global buffer, one on the
    chip) is there once per PE array (`acc.arrays`). DRAM is off chip.

    A figure the model needs and the preset does not give is an `AcceleratorError` naming it.
    """
    h = Hierarchy.from_accelerator(acc)
    pes = acc.pes * acc.arrays
    out: dict[str, float] = {}
    for level, mem in enumerate(h.on_chip):
        if mem.area_mm2 is None:
            field = "rf_um2_per_byte" if h.inside(level) else "sram_um2_per_byte"
            raise AcceleratorError(f"accelerator '{acc.name}' gives no area for memory level '{mem.name}': set "
                                   f"{field} (square micrometres per byte, with its source)")
        out[mem.name] = mem.area_mm2 * (pes if h.inside(level) else 1 if level == len(h.on_chip) - 1 else acc.arrays)
    if acc.mac_um2 is None:
        raise AcceleratorError(f"accelerator '{acc.name}' gives no area for its PEs: set mac_um2 (square micrometres "
                               "per PE's datapath, with its source)")
    out["PE array"] = acc.mac_um2 * pes * 1e-6
    if acc.vector_lanes is not None:  # without its own vector unit the PE array does that work
        if acc.vector_mm2 is None:
            raise AcceleratorError(f"accelerator '{acc.name}' has a vector unit ({acc.vector_lanes} lanes) but no "
                                   "area for it: set vector_mm2 (mm2 of one array's vector unit, with its source)")
        out["vector unit"] = acc.vector_mm2 * acc.arrays
    return out
