"""How many output rows, columns and channels the PE array works on at once under a dataflow.

The Optimus scheduler needs the throughputs T_h, T_w, T_c of Eq. 4 (footnote 4: a
tile smaller than the throughput leaves PEs idle), and the latency model needs the
parallel factor of every loop. A dataflow is written "ROWS|COLS": the loop spread
over the PE rows, then the loop spread over the PE columns (Interstellar notation,
as Optimus Table 2 writes "Ow|Cout"), or one of the named dataflows below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from engine.accelerator import Accelerator
from engine.errors import UnknownNameError

LOOPS = ("Oh", "Ow", "Cout", "Cin", "Kh", "Kw")

# named dataflow -> (loop on the PE rows, loop on the PE columns)
NAMED = {
    "row-stationary": ("Kh", "Oh"),  # Eyeriss: filter rows down the columns, output rows across
    "output-stationary": ("Oh", "Ow"),  # ShiDianNao: one output pixel per PE
}

_PATCH = re.compile(r"^(\d+)x(\d+)-patch$")  # an Oh x Ow patch of outputs on the PE rows


@dataclass(frozen=True)
class Throughput:
    """Parallel factor of every loop of a convolution on the PE array (1 for serial loops)."""

    oh: int = 1
    ow: int = 1
    cout: int = 1
    cin: int = 1
    kh: int = 1
    kw: int = 1

    @property
    def t_h(self) -> int:
        return self.oh

    @property
    def t_w(self) -> int:
        return self.ow

    @property
    def t_c(self) -> int:
        return self.cout


@cache
def throughput(dataflow: str, pe_rows: int, pe_cols: int) -> Throughput:
    """The parallel factors of `dataflow` on a `pe_rows` x `pe_cols` array."""
    rows, cols = NAMED.get(dataflow, None) or _split(dataflow)
    factors: dict[str, int] = {}
    for loop, size in ((rows, pe_rows), (cols, pe_cols)):
        patch = _PATCH.match(loop)
        if patch:
            factors["oh"], factors["ow"] = int(patch.group(1)), int(patch.group(2))
        else:
            key = loop.lower()
            factors[key] = factors.get(key, 1) * size
    return Throughput(**factors)


def of(acc: Accelerator) -> Throughput:
    """The throughput of an accelerator's PE array under its dataflow."""
    return throughput(acc.dataflow, acc.pe_rows, acc.pe_cols)


def _split(dataflow: str) -> tuple[str, str]:
    parts = dataflow.split("|")
    valid = (*NAMED, "ROWS|COLS with ROWS, COLS in " + "/".join(LOOPS) + " or AxB-patch")
    if len(parts) != 2:
        raise UnknownNameError("dataflow", dataflow, valid)
    for part in parts:
        if part not in LOOPS and not _PATCH.match(part):
            raise UnknownNameError("dataflow", dataflow, valid)
    return parts[0], parts[1]
