"""Merged drafts -> Graph: tensors with the batch applied, ops with their folded nodes, weights and MACs."""

from __future__ import annotations

import math

from engine.errors import ModelFileError, ShapeError
from engine.graph import MAX_BATCH, Graph, Op, OpKind, Tensor, conv_macs, matmul_macs
from engine.onnx.facts import Facts
from engine.onnx.merge import Draft, Merged
from engine.onnx.nodes import attr


def build_graph(facts: Facts, merged: Merged, nodes, meta: dict, batch: int | None, left_out: list[str],
                assumptions: tuple[str, ...] = ()) -> Graph:
    """The Graph of `merged`'s drafts at `batch` (None: the batch the file records, or its inputs' dim 0).

    `nodes` are the (name, node) pairs merged, `left_out` where a data-dependent part was cut (to say so when
    nothing is left), `assumptions` the data-dependent counts assumed (engine.onnx.counts).
    """
    g = facts.model.graph
    path = facts.path
    initialized = {i.name for i in g.initializer}
    net_inputs = [i.name for i in g.input if i.name not in initialized and i.name not in facts.sources]
    native = facts.shapes[net_inputs[0]][0] if net_inputs and facts.shapes.get(net_inputs[0]) else 1
    recorded = meta.get("engine.batch", str(native))
    if not recorded.isdigit() or not 1 <= int(recorded) <= MAX_BATCH:
        raise ModelFileError(path, f"metadata 'engine.batch' must be a whole number in 1..{MAX_BATCH}, "
                                   f"got {recorded[:40]!r}")
    if batch is not None and batch != native and native != 1 and "engine.batch" not in meta:
        raise ShapeError(path, f"input '{net_inputs[0]}' has a fixed first dimension {native}, and batch={batch} "
                               f"would rewrite it; a file's batch can be changed only when its first dimension is "
                               f"symbolic or 1 (or the file was saved by engine.save_onnx); leave batch unset to "
                               f"load it at {native}")
    batch = batch or int(recorded)

    def batched(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (batch, *shape[1:]) if shape and shape[0] == native else shape

    def act_shape(t: str, node: str | None) -> tuple[int, ...]:
        return batched(facts.shape(t, node))

    node_by_name = dict(nodes)
    tensors: dict[str, Tensor] = {}
    ops = []
    for d in merged.drafts:
        weights = list(d.own_weights)
        folded = [(d.name, d.main_type)]
        for entry, ws in [*d.pre, *d.post]:
            folded.append(entry)
            weights += [w for w in ws if w not in weights]
        for t in d.inputs + d.outputs:
            tensors.setdefault(t, Tensor(t, act_shape(t, d.name)))
        for w in weights:
            tensors.setdefault(w, Tensor(w, facts.shape(w, d.name), is_weight=True))
        op = Op(name=d.name, kind=d.kind, inputs=tuple(dict.fromkeys(d.inputs)), outputs=tuple(d.outputs),
                weights=tuple(weights), kernel=d.attrs.get("kernel", ()), stride=d.attrs.get("stride", ()),
                padding=d.attrs.get("padding", ()), dilation=d.attrs.get("dilation", ()),
                groups=d.attrs.get("groups", 1), macs=_macs(facts, d, node_by_name[d.name], tensors),
                source_type=d.main_type, merged=tuple(folded))
        node = node_by_name[d.name]
        if d.main_type == "Einsum" and len(node.input) > 2:
            ops += _einsum_chain(facts, merged, op, node, tensors, batched)
        else:
            ops.append(op)
    for t in net_inputs:
        tensors.setdefault(t, Tensor(t, act_shape(t, None)))
    if not ops and left_out:
        raise ShapeError(path, f"nothing to model once the part whose shapes depend on the data is left "
                               f"out (from {', '.join(left_out[:5])}); give static input shapes")
    if not ops:
        kinds = sorted({node.op_type for node in g.node})
        raise ModelFileError(path, f"no op to model: every node ({', '.join(kinds)}) only reshapes, or "
                                   f"computes constants")
    produced = {t for op in ops for t in op.outputs}
    outputs = tuple(dict.fromkeys(t for t in (merged.resolve(o.name) for o in g.output) if t in produced))
    if not outputs:
        outputs = tuple(t for op in ops for t in op.outputs if not any(t in o.inputs for o in ops))
    name = meta.get("engine.name", path.stem)
    used_inputs = tuple(t for t in net_inputs if any(t in op.inputs for op in ops))
    return Graph.build(name, ops, tensors.values(), used_inputs, outputs, batch=batch, assumptions=assumptions)


def _macs(facts: Facts, d: Draft, node, tensors: dict[str, Tensor]) -> int:
    """Multiply-accumulates of draft `d` (main node `node`) at the graph's batch."""
    out = tensors[d.outputs[0]].shape
    rescale = math.prod(out) / max(math.prod(facts.shape(d.outputs[0])), 1)  # the batch, when it changed
    if d.kind in (OpKind.CONV, OpKind.DWCONV):
        if d.main_type == "ConvTranspose":
            x, w = facts.shape(node.input[0], d.name), facts.shape(node.input[1], d.name)
            return round(math.prod(x) * rescale) * w[1] * math.prod(w[2:])
        per_group = facts.shape(node.input[1], d.name)[1]  # C_in / groups, whatever reshapes came before
        return conv_macs(out, per_group * d.attrs["groups"], d.attrs["kernel"], d.attrs["groups"])
    if d.main_type == "Einsum" and len(node.input) >= 2:
        return round(_einsum_macs(facts, node, d.name) * rescale)
    if d.kind is OpKind.MATMUL:
        a_shape = facts.shape(node.input[0], d.name)
        reduced = a_shape[0] if d.main_type == "Gemm" and d.attrs.get("trans_a") else a_shape[-1]
        return matmul_macs(out, reduced)
    return 0


def _einsum_macs(facts: Facts, node, name: str) -> int:
    """Multiply-accumulates of an Einsum of two or more operands, contracted pairwise from the left (`_einsum_steps`)."""
    return sum(macs for _, macs in _einsum_steps(facts, node, name)[1])


def _einsum_steps(facts: Facts, node, name: str) -> tuple[dict[str, int], list[tuple[list[str], int]]]:
    """Letter sizes of an Einsum, and per pairwise contraction from the left its result's letters and MACs.

    Each step multiplies the running result by the next operand and sums the letters no later operand nor the
    output needs; it costs one MAC per combination of the letters the two share or keep (for two operands: every
    output element times the contracted letters). Three or more operands are counted in the equation's order,
    as onnxruntime evaluates them, not in the cheapest order.
    """
    raw = attr(node, "equation", b"")
    equation = (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    letters: list[list[str]] = []  # letter -> size; letters of each term, '...' as '.1', '.2' ... from the right
    for term, t in zip(terms, node.input):
        shape = facts.shape(t, name)
        head, dots, tail = term.partition("...")
        if len(head) + len(tail) > len(shape) or (not dots and len(head) != len(shape)):
            raise ModelFileError(facts.path, f"Einsum term '{term}' does not fit input {list(shape)}", node=name)
        broadcast = len(shape) - len(head) - len(tail) if dots else 0
        middle = [f".{broadcast - k}" for k in range(broadcast)]  # right-aligned, as numpy broadcasts
        named = [*head, *middle, *tail]
        for letter, size in zip(named, shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
        letters.append(named)
    if arrow:
        head, dots, tail = rhs.partition("...")
        out = {*head, *tail, *(c for n in letters for c in n if c.startswith("."))} if dots else {*head, *tail}
    else:
        out = {c for c in sizes if c.startswith(".") or sum(n.count(c) for n in letters) == 1}
    steps, running = [], letters[0]
    for k in range(1, len(letters)):
        joined = list(dict.fromkeys(running + letters[k]))
        later = {c for n in letters[k + 1:] for c in n}
        running = [c for c in joined if c in out or c in later]
        steps.append((running, math.prod(sizes[c] for c in joined)))
    return sizes, steps


def _einsum_chain(facts: Facts, merged: Merged, op: Op, node, tensors: dict[str, Tensor], batched) -> list[Op]:
    """An Einsum of three or more operands as the chain of two-operand matmuls onnxruntime evaluates (`_einsum_steps`):
    each a GEMM of its own, so fusion, blocking and the limits model every contraction (and may keep the running
    result on chip) as they model a MatMul. The last keeps the node's name, output and folded nodes; `batched` puts
    the graph's batch into a shape as the importer does for every activation."""
    sizes, steps = _einsum_steps(facts, node, op.name)
    rescale = math.prod(tensors[op.outputs[0]].shape) / max(math.prod(facts.shape(op.outputs[0])), 1)  # the batch
    acts, own = [], []  # per operand: the activation it is (or None), the weights behind it
    for t in node.input:
        sources = sorted(w for w in facts.sources.get(t, ()) if w in op.weights)
        acts.append(None if t in facts.sources else merged.resolve(t))
        own.append(sources)
    claimed = {w for ws in own for w in ws}
    chain, running = [], acts[0]
    for k, (letters, macs) in enumerate(steps, 1):
        last = k == len(steps)
        out = op.outputs[0] if last else f"{op.name}/einsum{k}"
        if not last:
            tensors[out] = Tensor(out, batched(tuple(sizes[c] for c in letters)))
        weights = (own[0] if k == 1 else []) + own[k] + ([w for w in op.weights if w not in claimed] if last else [])
        chain.append(Op(name=op.name if last else out, kind=OpKind.MATMUL,
                        inputs=tuple(dict.fromkeys(t for t in (running, acts[k]) if t is not None)),
                        outputs=(out,), weights=tuple(dict.fromkeys(weights)), macs=round(macs * rescale),
                        source_type="Einsum", merged=op.merged if last else ((op.name, "Einsum"),)))
        running = out
    return chain
