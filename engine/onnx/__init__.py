"""ONNX <-> Graph: read a file safely, fold its constants, import it as a Graph, export a Graph back.

Import runs in stages, one module each: `read` (size limits, tensor checks, opsets), `nodes` (names, wiring,
order, the data-dependent tail), `inputs` (static input shapes), `weights` (which tensors are parameters),
`fold` (shapes and constants, node by node), `merge` (simple ops fold into their producers, Optimus Sec. 3),
`build` (the Graph); `load` runs them. `ops` holds the operator families both directions read.
"""

from engine.onnx.export import save_onnx, to_model
from engine.onnx.load import load_onnx
from engine.onnx.read import read_model

__all__ = ["load_onnx", "save_onnx", "to_model", "read_model"]
