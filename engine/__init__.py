"""The engine: how a DNN runs on an accelerator so that little data crosses the chip boundary.

Public API (DESIGN.md): load a network, pick an accelerator, then fuse, block,
allocate, partition and plan modules; `evaluate` runs them all into one Report.
Heavy parts load on first use, so `import engine` stays fast.
"""

from importlib import import_module

from engine.accelerator import Accelerator, MemoryLevel
from engine.errors import (
    AcceleratorError,
    EngineError,
    GraphError,
    ModelFileError,
    PartialImportWarning,
    ShapeError,
    UnknownNameError,
)
from engine.graph import Graph, Op, OpKind, Tensor

# Imported eagerly: the function shares its module's name, and a lazy import would let the
# import system bind `engine.partition` to the module whenever the module is imported first.
from engine.partition import partition
from engine.sweep import sweep  # same reason as partition

# public name -> module that defines it (imported on first access)
_LAZY = {
    "load_network": "engine.loading",
    "save_onnx": "engine.onnx",
    "fuse": "engine.fusion",
    "FusionPlan": "engine.fusion",
    "block": "engine.blocking",
    "allocate": "engine.allocation",
    "Allocation": "engine.allocation",
    "plan_modules": "engine.module_reuse",
    "evaluate": "engine.explore",
    "Report": "engine.explore",
    "map_plan": "engine.mapping",
    "MappedPlan": "engine.mapping",
}

__all__ = ["Accelerator", "MemoryLevel", "Graph", "Op", "OpKind", "Tensor", "EngineError",
           "AcceleratorError", "GraphError", "ModelFileError", "PartialImportWarning", "ShapeError", "UnknownNameError", "partition",
           "sweep",
           # the lazy names, spelled out so that static tools (and `from engine import *` readers) see strings
           "load_network", "save_onnx", "fuse", "FusionPlan", "block", "allocate", "Allocation", "plan_modules",
           "evaluate", "Report", "map_plan", "MappedPlan"]
assert set(_LAZY) <= set(__all__), "a lazy name missing from __all__"


# subpackages reachable as attributes (`engine.fusion.group_cost`), imported on first access
_SUBMODULES = {"fusion", "allocation", "blocking", "zoo", "module_reuse", "dataflow", "energy", "explore", "onnx",
               "loading", "limit", "mapping",
               "modules", "onnx_import", "onnx_export"}  # old names of module_reuse and of parts of onnx


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f"engine.{name}")
    raise AttributeError(f"module 'engine' has no attribute '{name}'")
