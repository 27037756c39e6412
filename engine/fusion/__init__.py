"""Operator fusion (Optimus, TECS 2022): the fused-group cost model, the searches, and the plan they return.

`fuse(graph, acc, method=...)` partitions the graph's ops into fused groups:
"optimus" finds the minimum DRAM traffic over the whole fusion space (DESIGN.md),
"online" the same search on the pruned space of Sec. 6, "dnnvm" and "efficient_s"
the prior works Optimus compares with, "none" one group per op. Every plan is
costed by the same `group_cost`, so `plan.dram_bytes` equals the sum over its groups.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.fusion.cost import RELOADS, GroupCost, group_cost, oracle_bytes
    from engine.fusion.methods import METHODS, fuse, fuse_each
    from engine.fusion.plan import FusionPlan

# public name -> module that defines it, imported on first access: the searches load the compiled kernel (Numba),
# which `engine.limit` and the cost model's tables do not need
_LAZY = {"fuse": "engine.fusion.methods", "fuse_each": "engine.fusion.methods", "METHODS": "engine.fusion.methods",
         "FusionPlan": "engine.fusion.plan", "GroupCost": "engine.fusion.cost", "group_cost": "engine.fusion.cost",
         "oracle_bytes": "engine.fusion.cost", "RELOADS": "engine.fusion.cost"}

__all__ = ["fuse", "fuse_each", "FusionPlan", "GroupCost", "group_cost", "oracle_bytes", "METHODS", "RELOADS"]


def __getattr__(name: str):
    """A public name from its module, or a submodule (`engine.fusion.optimus`), imported on first access."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    try:
        return import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module '{__name__}' has no attribute '{name}'") from None
