"""How many output rows, columns and channels the PE array works on at once under a dataflow.

The Optimus scheduler needs the throughputs T_h, T_w, T_c of Eq. 4 (footnote 4: a
tile smaller than the throughput leaves PEs idle), and the latency model needs the
parallel factor of every loop. Dataflows come from `engine.dataflow`, the vocabulary
blocking reads too; this model knows no layer shape, so each PE axis goes whole to
the first loop it spreads (an "AxB-patch" axis to its A x B outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from engine.accelerator import Accelerator
from engine.dataflow import parse


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
    flow = parse(dataflow)
    factors: dict[str, int] = {}
    for spread, size in ((flow.rows, pe_rows), (flow.cols, pe_cols)):
        if spread.patch:
            factors["oh"], factors["ow"] = spread.patch
        else:
            key = spread.loops[0].lower()
            factors[key] = factors.get(key, 1) * size
    return Throughput(**factors)


def of(acc: Accelerator) -> Throughput:
    """The throughput of an accelerator's PE array under its dataflow."""
    return throughput(acc.dataflow, acc.pe_rows, acc.pe_cols)
