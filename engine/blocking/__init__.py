"""Loop blocking of one layer on a memory hierarchy (Yang et al., "A Systematic Approach to Blocking CNNs").

`Layer` is the loop nest, `Hierarchy` the memories, `Blocking` a schedule; `evaluate` scores
any blocking (accesses and energy per level, Eq. 1), `block` finds the least-energy one,
`codesign` also designs the memories (one SRAM per buffer, Sec. 3.5-3.6), `multicore` splits a layer over cores
(Sec. 3.3), `layer_access_counts` gives an accelerator's RF/buffer/DRAM traffic of a graph op, and `area_mm2`
its silicon area per component.
"""

from engine.blocking.area import area_mm2
from engine.blocking.baselines import diannao_baseline, im2col, lowered_cost
from engine.blocking.codesign import CodesignResult, codesign
from engine.blocking.counts import OpAccessCounts, layer_access_counts
from engine.blocking.hierarchy import Hierarchy, Memory, SpatialArray, access_energy_pj
from engine.blocking.layer import DIMS, TENSORS, Layer, table4
from engine.blocking.model import Blocking, Cost, LevelAccess, describe, evaluate
from engine.blocking.multicore import MulticoreResult, multicore
from engine.blocking.optimizer import BlockingResult, block

__all__ = ["DIMS", "TENSORS", "Layer", "table4", "Hierarchy", "Memory", "SpatialArray", "access_energy_pj", "Blocking", "Cost",
           "LevelAccess", "describe", "evaluate", "BlockingResult", "block", "codesign", "CodesignResult",
           "multicore", "MulticoreResult", "layer_access_counts", "OpAccessCounts", "diannao_baseline", "im2col",
           "lowered_cost", "area_mm2"]
