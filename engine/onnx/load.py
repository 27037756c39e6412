"""`load_onnx`: an ONNX file -> Graph, in stages: read, order, bind inputs, find weights, fold, merge, build.

Each stage is one module of this package; this one only runs them in order and turns the IR's own errors
into errors that name the file.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from engine.errors import GraphError, ModelFileError, PartialImportWarning, ShapeError
from engine.graph import MAX_BATCH, Graph, valid_batch
from engine.onnx.build import build_graph
from engine.onnx.counts import DataCounts
from engine.onnx.facts import Facts
from engine.onnx.fold import fold
from engine.onnx.inputs import bind_inputs
from engine.onnx.merge import merge
from engine.onnx.nodes import drop_data_dependent, sorted_nodes
from engine.onnx.read import read_model
from engine.onnx.weights import seed


def load_onnx(path, *, batch: int | None = None, input_shapes: dict | None = None, data_counts=None) -> Graph:
    """Read an ONNX file into a Graph; `batch` rescales dim 0 of activations, `input_shapes` fixes dynamic inputs.

    `input_shapes` maps an input name to its full shape, or a symbolic dim's name (`"sequence"`) to its size.
    `data_counts` sets the data-dependent counts (how many elements a NonZero finds, boxes an NMS keeps): one
    number for all, each clamped to its most, or node name -> count; by default each is its most
    (engine.onnx.counts). The counts used are listed in `Graph.assumptions`.
    """
    path = Path(path)
    if batch is not None and not valid_batch(batch):
        raise ShapeError(path, f"batch must be a whole number in 1..{MAX_BATCH}, got {batch!r}")
    counts = DataCounts.of(data_counts)
    model = read_model(path)
    try:
        return _import(model, path, batch, dict(input_shapes or {}), counts)
    except GraphError as err:  # the IR's own checks: name the file too
        raise ModelFileError(path, str(err)) from None
    except RecursionError:
        raise ModelFileError(path, "the graph nests too deeply to import") from None


def _import(model, path: Path, batch: int | None, input_shapes: dict, counts: DataCounts) -> Graph:
    """The stages in order; warns (at load_onnx's caller) when a data-dependent part is left out."""
    meta = {p.key: p.value for p in model.metadata_props}
    nodes = sorted_nodes(model, path)
    shapes, types = bind_inputs(model, path, input_shapes)
    sources, values, buffers = seed(model, path, meta, nodes)
    folded = fold(model, path, nodes, shapes, types, sources, values, counts)
    unknown = [n for n, _ in counts.by_node if n not in folded.counted]
    if unknown:
        raise ShapeError(path, f"data_counts names '{unknown[0]}', which is no data-dependent count of this file "
                               f"(those it has: {', '.join(sorted(folded.counted)[:8]) or 'none'})")
    facts = Facts(model, path, folded.shapes, folded.sources, folded.computed, buffers)
    live = [(name, node) for name, node in folded.nodes if name not in folded.folded]
    kept, left_out = drop_data_dependent(live, facts.shapes, facts.sources)
    if left_out:
        warnings.warn(PartialImportWarning(
            f"{path}: left out {len(live) - len(kept)} nodes whose shapes depend on the data, from "
            f"{', '.join(left_out[:5])}{' ...' if len(left_out) > 5 else ''}"), stacklevel=3)
    return build_graph(facts, merge(facts, kept), kept, meta, batch, left_out, folded.assumptions)
