"""Which tensors are parameters: weight lineage and small constant values of initializers and weight inputs.

A float initializer of more than one element is a weight. A graph input is a weight when metadata
"engine.weights" names it (files the exporter wrote), or, without that record, when every node reads it in a
parameter slot; "engine.buffers" names running statistics, which are neither weights nor activations.
"""

from __future__ import annotations

import json
import math

import onnx
from onnx import numpy_helper

from engine.errors import ModelFileError
from engine.onnx.fold import FLOAT_TYPES, MAX_FOLD_ELEMENTS
from engine.onnx.ops import BUFFER_SLOTS, PARAM_SLOTS


def seed(model, path, meta: dict, nodes) -> tuple[dict, dict, frozenset]:
    """Weight lineage (tensor -> frozenset of weights it derives from) and values of the initializers and the graph
    inputs that hold weights, and the running-statistics inputs."""
    g = model.graph
    buffers = _meta_list(meta, path, "engine.buffers") or set()
    declared = _meta_list(meta, path, "engine.weights")
    sources: dict[str, frozenset[str]] = {}
    values = {}
    for init in g.initializer:
        size = math.prod(init.dims)
        weight = init.data_type in FLOAT_TYPES and size > 1
        sources[init.name] = frozenset([init.name]) if weight else frozenset()
        if size <= MAX_FOLD_ELEMENTS and init.data_location != onnx.TensorProto.EXTERNAL:
            try:
                values[init.name] = numpy_helper.to_array(init)
            except Exception as err:  # a tensor whose data does not decode
                raise ModelFileError(path, f"initializer '{init.name}' does not decode "
                                           f"({err.__class__.__name__})") from None
    initialized = {i.name for i in g.initializer}
    uses: dict[str, list[tuple[str, int]]] = {}
    for _, node in nodes:
        for slot, t in enumerate(node.input):
            uses.setdefault(t, []).append((node.op_type, slot))
    for inp in g.input:
        if inp.name in initialized:
            continue
        if inp.name in buffers:
            sources[inp.name] = frozenset()
        elif declared is not None:
            if inp.name in declared:
                sources[inp.name] = frozenset([inp.name])
        elif uses.get(inp.name) and all(_weight_slot(op, slot) for op, slot in uses[inp.name]):
            sources[inp.name] = frozenset([inp.name])
    return sources, values, frozenset(buffers)


def _meta_list(meta: dict, path, key: str) -> set[str] | None:
    """A metadata entry holding a JSON list of tensor names, or None when absent."""
    if key not in meta:
        return None
    try:
        value = json.loads(meta[key])
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ModelFileError(path, f"metadata '{key}' must be a JSON list of tensor names, got {meta[key][:80]!r}")
    return set(value)


def _weight_slot(op_type: str, slot: int) -> bool:
    """True when input `slot` of an `op_type` node holds a parameter or a running statistic."""
    if slot in PARAM_SLOTS.get(op_type, ()) and not (op_type in ("Mul", "Add", "Sub", "Div", "MatMul") and slot == 0):
        return True
    return slot in BUFFER_SLOTS.get(op_type, ())
