"""Static shapes of a model's graph inputs and initializers, with the caller's `input_shapes` applied.

A dynamic batch becomes 1 (the loader rescales it); any other dynamic dim must be bound by the caller, by input
name or by the symbolic dim's name, and the error shows how.
"""

from __future__ import annotations

import numpy as np

from engine.errors import ShapeError
from engine.onnx.fold import too_large


def bind_inputs(model, path, input_shapes: dict) -> tuple[dict, dict]:
    """Static shapes and element types of the graph inputs and initializers, `input_shapes` applied."""
    g = model.graph
    initialized = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in initialized]
    dim_names = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param}
    for key in input_shapes:
        if key not in {i.name for i in inputs} and key not in dim_names:
            raise ShapeError(path, f"input_shapes names '{key}', which is neither a graph input nor a "
                                   f"symbolic dim (inputs: {', '.join(i.name for i in inputs)}"
                                   + (f"; dims: {', '.join(sorted(dim_names))}" if dim_names else "") + ")")
    shapes, types = {}, {}
    for init in g.initializer:
        shapes[init.name], types[init.name] = tuple(int(d) for d in init.dims), init.data_type
    for inp in inputs:
        types[inp.name] = inp.type.tensor_type.elem_type
        shapes[inp.name] = _input_shape(inp, path, input_shapes)
        too_large(path, f"input '{inp.name}'", shapes[inp.name])
    return shapes, types


def _input_shape(inp, path, input_shapes: dict) -> tuple[int, ...]:
    """The static shape of graph input `inp`: given in input_shapes, declared, or bound by dim name."""
    dims = inp.type.tensor_type.shape.dim
    given = input_shapes.get(inp.name)
    if given is not None:
        shape = _whole_dims((given,) if isinstance(given, int) else given, path, f"input_shapes['{inp.name}']")
        if dims and len(shape) != len(dims):
            raise ShapeError(path, f"input '{inp.name}' has rank {len(dims)}, input_shapes gives {shape}")
        return shape
    if not inp.type.tensor_type.HasField("shape"):
        raise ShapeError(path, f"input '{inp.name}' declares no shape; pass one, e.g. "
                               f"input_shapes={{'{inp.name}': (1, 3, 224, 224)}}")
    found: list[int | None] = []
    unbound: list[str] = []
    for axis, d in enumerate(dims):
        if d.HasField("dim_value") and d.dim_value <= 0:
            raise ShapeError(path, f"input '{inp.name}' declares dimension {axis} as {d.dim_value}: an empty tensor "
                                   f"has nothing to run; every dimension must be at least 1")
        if d.HasField("dim_value"):
            found.append(int(d.dim_value))
        elif d.dim_param and d.dim_param in input_shapes:
            found.append(_whole_dims([input_shapes[d.dim_param]], path, f"input_shapes['{d.dim_param}']")[0])
        elif axis == 0 and len(dims) > 1:
            found.append(1)  # a dynamic batch: 1, rescaled by `batch`
        else:
            found.append(None)
            unbound.append(d.dim_param or f"dim {axis}")
    if unbound:
        shown = [s if s is not None else (d.dim_param or "?") for s, d in zip(found, dims)]
        example = ", ".join(f"'{u}': 128" for u in unbound if not u.startswith("dim "))
        raise ShapeError(path, f"input '{inp.name}' has a dynamic or missing shape {shown}: bind "
                               f"{', '.join(unbound)} with a static shape, e.g. input_shapes="
                               f"{{'{inp.name}': (1, 3, 224, 224)}}"
                               + (f" or {{{example}}}" if example else ""))
    return tuple(s for s in found if s is not None)  # every one: a None is unbound, raised above


def _whole_dims(value, path, what: str) -> tuple[int, ...]:
    """`value` as a tuple of positive whole numbers, or a ShapeError naming `what`."""
    try:
        dims = tuple(value)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ShapeError(path, f"{what} must be positive whole numbers, got {value!r}")
    return tuple(int(d) for d in dims)
