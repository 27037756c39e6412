"""PE-array dataflows in one vocabulary: which loops a dataflow spreads over the PE rows and over the PE columns.

A dataflow is written "ROWS|COLS", the loop over the PE rows then the loop over the PE columns (Interstellar
notation, as Optimus Table 2 writes "Ow|Cout"), each one of `LOOPS` or an "AxB-patch" of outputs, or is one of
the `NAMED` dataflows. The fusion cost model (`engine.fusion.dataflow`) and the blocking search
(`engine.blocking.hierarchy.pe_array`) both read a dataflow from here; blocking writes the loops in Yang et
al.'s letters (`YANG`).

An axis may spread several loops, in order. The first takes the whole axis wherever a model knows no layer
shape: the fusion model's throughput (Optimus Eq. 4, footnote 4) is a property of the accelerator alone. The
others fill the PEs the first leaves idle on a small layer, which only blocking, searching each layer's
unrollings, can model. Row-stationary (Eyeriss, Chen et al. ISCA 2016) is the case in point: filter rows
down the PE rows and output rows across the columns, the array replicated over input channels and filters
when a 3-row filter or a 13-row output leaves PEs free; the fusion model keeps the first pair only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from engine.errors import EngineError, UnknownNameError

LOOPS = ("Oh", "Ow", "Cout", "Cin", "Kh", "Kw")  # output rows and columns, output and input channels, window
YANG = {"Ow": "X", "Oh": "Y", "Cin": "C", "Cout": "K", "Kw": "Fw", "Kh": "Fh"}  # the same loops in Yang Sec. 3.1

_PATCH = re.compile(r"^(\d+)x(\d+)-patch$")  # an Oh x Ow patch of outputs on one axis


@dataclass(frozen=True)
class Spread:
    """The loops one PE axis spreads, in order; `patch` (Oh, Ow) for an "AxB-patch" axis of fixed size."""

    loops: tuple[str, ...]
    patch: tuple[int, int] | None = None

    def __post_init__(self):
        if not self.loops or set(self.loops) - set(LOOPS):
            raise EngineError(f"a PE axis spreads loops among {', '.join(LOOPS)}, got {self.loops!r}")


@dataclass(frozen=True)
class Dataflow:
    """Which loops run in parallel over the PE rows and over the PE columns."""

    rows: Spread
    cols: Spread


# named dataflows; the preset strings "Ow|Cout", "Cin|Cout" and "4x4-patch|Cout" parse as ROWS|COLS
NAMED = {
    # Eyeriss: filter rows down the PE rows, output rows across the columns; then channels and filters
    "row-stationary": Dataflow(Spread(("Kh", "Cin")), Spread(("Oh", "Cout"))),
    "output-stationary": Dataflow(Spread(("Oh",)), Spread(("Ow",))),  # ShiDianNao: one output pixel per PE
}


@cache
def parse(dataflow: str) -> Dataflow:
    """The dataflow named `dataflow`, or written "ROWS|COLS"; an UnknownNameError lists what is allowed."""
    if dataflow in NAMED:
        return NAMED[dataflow]
    parts = dataflow.split("|") if isinstance(dataflow, str) else []
    if len(parts) != 2 or not all(part in LOOPS or _PATCH.match(part) for part in parts):
        raise UnknownNameError("dataflow", dataflow,
                               (*NAMED, "ROWS|COLS with ROWS, COLS in " + "/".join(LOOPS) + " or AxB-patch"))
    return Dataflow(*map(_spread, parts))


def _spread(part: str) -> Spread:
    patch = _PATCH.match(part)
    if patch:  # the patch's columns, then its rows, share the axis (Yang's X then Y)
        return Spread(("Ow", "Oh"), (int(patch.group(1)), int(patch.group(2))))
    return Spread((part,))
