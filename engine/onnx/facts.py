"""`Facts`: what reading and folding learnt about a model's tensors, read by every later import stage."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import onnx

from engine.errors import ShapeError


@dataclass(frozen=True, eq=False)
class Facts:
    """A model's tensors once folded: static shapes, weight lineage, and the nodes that compute from weights.

    The dicts are the folding pass's own and are not changed after it; `eq=False` because two imports are
    never compared.
    """

    model: onnx.ModelProto
    path: Path
    shapes: dict  # tensor -> static shape, for every tensor whose shape is known
    sources: dict  # every non-activation tensor -> frozenset of the weight tensors it derives from
    computed: frozenset  # names of nodes that compute from weights alone yet stay ops (they have MACs)
    buffers: frozenset  # running statistics ("engine.buffers"): inputs, never parameters

    def shape(self, tensor: str, node: str | None = None) -> tuple[int, ...]:
        """The static shape of `tensor`, or a ShapeError naming the node where shape inference first failed."""
        if tensor not in self.shapes:
            source = self._first_shapeless(tensor)
            why = (f" (ONNX shape inference found none for the output of '{source.op_type}'"
                   + (f" of domain '{source.domain}'" if source.domain else "")
                   + f" node '{source.name}')") if source is not None else ""
            raise ShapeError(self.path, f"the shape of tensor '{tensor}' cannot be inferred{why}; record the "
                                        f"tensor's shape in the model's value_info", node=node)
        return self.shapes[tensor]

    def _first_shapeless(self, tensor: str):
        """The earliest node upstream of `tensor` whose inputs have shapes but whose output has none."""
        writer = {out: n for n in self.model.graph.node for out in n.output}
        node, seen = writer.get(tensor), set()
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            upstream = next((writer[t] for t in node.input if t and t not in self.shapes and t in writer), None)
            if upstream is None:
                return node
            node = upstream
        return node

    def param_inputs(self, node, slots) -> list[str]:
        """Parameter tensors behind the constant inputs of `node` at `slots`, excluding running statistics."""
        found = []
        for slot, t in enumerate(node.input):
            if t and slot in slots and t in self.sources:
                for src in sorted(self.sources[t]):
                    if src not in found and src not in self.buffers and math.prod(self.shape(src)) > 1:
                        found.append(src)
        return found
