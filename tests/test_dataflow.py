"""One dataflow vocabulary (`engine.dataflow`) read by the fusion throughput and the blocking PE array."""

from dataclasses import replace

import pytest

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import pe_array
from engine.dataflow import YANG, parse
from engine.errors import UnknownNameError
from engine.fusion.dataflow import throughput


@pytest.mark.parametrize("name", Accelerator.presets())
def test_fusion_and_blocking_read_one_dataflow(name):
    """Blocking unrolls every loop an axis spreads; fusion gives each axis whole to the first (or the patch)."""
    acc = Accelerator.preset(name)
    flow = parse(acc.dataflow)
    unrolled = pe_array(acc, (0.0, 0.0, 0.0)).dataflow
    assert unrolled == tuple((YANG[loop], axis) for axis, spread in (("rows", flow.rows), ("cols", flow.cols))
                             for loop in spread.loops)
    tp = throughput(acc.dataflow, acc.pe_rows, acc.pe_cols)
    for spread, size in ((flow.rows, acc.pe_rows), (flow.cols, acc.pe_cols)):
        if spread.patch:
            assert (tp.oh, tp.ow) == spread.patch
        else:
            assert getattr(tp, spread.loops[0].lower()) == size


def test_row_stationary_in_both_models():
    """Eyeriss: filter rows on PE rows, output rows on PE columns; blocking also replicates over C and K."""
    assert pe_array(Accelerator.preset("eyeriss"), (0.0, 0.0, 0.0)).dataflow == (
        ("Fh", "rows"), ("C", "rows"), ("Y", "cols"), ("K", "cols"))
    tp = throughput("row-stationary", 12, 14)
    assert (tp.kh, tp.oh, tp.cin, tp.cout) == (12, 14, 1, 1)


def test_unknown_dataflow_names_the_accelerator():
    bad = replace(Accelerator.preset("eyeriss"), dataflow="Kh|Oh|Cout")
    with pytest.raises(UnknownNameError, match="dataflow of accelerator 'eyeriss'.*row-stationary"):
        pe_array(bad, (0.0, 0.0, 0.0))
    with pytest.raises(UnknownNameError, match="unknown dataflow 'Kh|Oh|Cout'"):
        throughput("Kh|Oh|Cout", 12, 14)
