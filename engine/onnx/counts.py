"""Data-dependent counts (NonZero, NonMaxSuppression, Unique, Compress, TopK with a k from the data): the size
each is assumed to have, so the network after it is counted too.

How many elements a NonZero finds or an NMS keeps depends on the image, not the network. Each count has a most
that follows from its inputs' shapes (NonZero: every element; NMS: batches x classes x min(max boxes per
class, boxes); ...). By default a count is that most, so the fixed sizes a model cuts it to later (a
detector's `keep[:post_nms_top_n]`, its 100 detections) decide what runs after it, as they do on an image
where enough survives. A caller's `data_counts` sets the counts instead: one number for every count (each
clamped to its most), or node name -> count (at least 1 and at most that node's most). Every count used is
one sentence on the Graph (`Graph.assumptions`), naming the node, the count and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from engine.errors import EngineError, ShapeError
from engine.onnx.nodes import attr

COUNTED = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress", "TopK"})


@dataclass(frozen=True)
class DataCounts:
    """The caller's counts, checked and hashable (a load cache's key): `every` for all of them (None: each its
    most), `by_node` (node name, count) pairs, sorted."""

    every: int | None = None
    by_node: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, data_counts) -> DataCounts:
        """`data_counts` (None, a whole number >= 1, or a mapping node name -> whole number >= 1) checked."""
        if data_counts is None or isinstance(data_counts, DataCounts):
            return data_counts or cls()
        if isinstance(data_counts, Mapping):
            pairs = tuple(sorted((_name(k), _count(v, f"data_counts['{k}']")) for k, v in data_counts.items()))
            return cls(None, pairs)
        return cls(_count(data_counts, "data_counts"), ())


def _name(key) -> str:
    if not isinstance(key, str):
        raise EngineError(f"data_counts keys must be node names (text), got {key!r}")
    return key


def _count(value, what: str) -> int:
    """`value` as a whole number >= 1, or an EngineError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(f"{what} must be a whole number of at least 1 (a data-dependent count: how many "
                          f"elements survive), got {value!r}")
    return int(value)


def count_shapes(path, name: str, node, shapes: dict, values: dict, counts: DataCounts):
    """Output shapes of counted node `name` at its assumed count, and the sentence saying so; None when its
    inputs' shapes are not all known (the part stays out of the graph, with a warning)."""
    most = _most(node, shapes, values)
    if most is None:
        return None
    bound, why = most
    given = dict(counts.by_node).get(name)
    if given is not None and given > bound:
        raise ShapeError(path, f"data_counts gives {node.op_type} '{name}' {given:,}, more than its most "
                               f"{bound:,} ({why})", node=name)
    given = counts.every if given is None else given
    if given is not None and given < bound:
        count, reason = given, f"as given; its most {bound:,}"
    else:
        count, reason = bound, f"its most: {why}" + ("" if given is None else f"; {given:,} given")
    sentence = f"{node.op_type} '{name}' keeps {count:,} ({reason})"
    return _shapes_at(node, shapes, count), sentence


def _most(node, shapes: dict, values: dict) -> tuple[int, str] | None:
    """The largest count `node` can give, from its inputs' shapes (and constant inputs), and why; at least 1."""
    ins = list(node.input)
    if not ins or any(t and t not in shapes for t in ins[:3]):
        return None
    x = shapes[ins[0]]
    op = node.op_type
    if op == "NonZero":
        return max(math.prod(x), 1), f"every one of its input's {math.prod(x):,} elements"
    if op == "NonMaxSuppression":
        if len(ins) < 2 or len(x) != 3 or len(shapes[ins[1]]) != 3:
            return None
        batches, classes, boxes = x[0], shapes[ins[1]][1], x[1]
        limit = values.get(ins[2]) if len(ins) > 2 and ins[2] else None
        per_class = boxes if limit is None or limit.size != 1 else min(boxes, max(int(limit.reshape(-1)[0]), 0))
        return max(batches * classes * per_class, 1), (f"{batches} x {classes} x {per_class:,}: batches x classes "
                                                       f"x boxes each class keeps")
    if op == "TopK":
        axis = _axis(node, x)
        return (None if axis is None else (max(x[axis], 1), f"all {x[axis]:,} along axis {axis}"))
    if op == "Unique":
        axis = _axis(node, x, default=None)
        n = math.prod(x) if axis is None else x[axis]
        return max(n, 1), (f"every one of its input's {n:,} elements" if axis is None else f"all {n:,} along axis {axis}")
    if op == "Compress":
        if len(ins) < 2 or not ins[1]:
            return None
        axis = _axis(node, x, default=None)
        n = min(math.prod(x) if axis is None else x[axis], math.prod(shapes[ins[1]]))
        return max(n, 1), f"every one of the {n:,} the condition covers"
    return None


def _axis(node, x, default=-1) -> int | None:
    """`node`'s axis attribute made non-negative; None when it is unset and `default` is None, or out of range."""
    axis = attr(node, "axis", default)
    if axis is None or not -len(x) <= axis < len(x):
        return None
    return axis % len(x)


def _shapes_at(node, shapes: dict, count: int) -> list[tuple[int, ...] | None]:
    """Shapes of `node`'s outputs when its data-dependent size is `count` (None for an output not written)."""
    x = shapes[node.input[0]]
    op = node.op_type
    if op == "NonZero":
        return [(len(x), count)]
    if op == "NonMaxSuppression":
        return [(count, 3)]
    axis = _axis(node, x, default=None if op in ("Unique", "Compress") else -1)
    along = (count,) if axis is None else (*x[:axis], count, *x[axis + 1:])
    if op == "TopK":
        return [along, along]
    if op == "Compress":
        return [along]
    inverse = (math.prod(x),) if axis is None else (x[axis],)
    return [along, (count,), inverse, (count,)]  # Unique: Y, indices, inverse_indices, counts
