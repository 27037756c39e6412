"""Merging simple nodes into the ops that produce their inputs (Optimus Sec. 3), node by node in topological order.

BatchNormalization, constant scale/bias and element-wise activations fold into the op that produces their
input when it is that input's only reader (or, for a BatchNorm/scale in front of a conv, into that conv);
Reshape-like nodes vanish and their readers read the producer's tensor. Every folded node is recorded on its
owner's `Draft` and later in `Op.merged`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.graph import OpKind
from engine.onnx.classify import classify
from engine.onnx.facts import Facts
from engine.onnx.ops import ACTIVATIONS, AFFINE, COMPUTE_KINDS, PARAM_SLOTS, PASSTHROUGH


@dataclass
class Draft:
    """An op under construction while nodes are merged (mutable: later nodes fold into it)."""

    name: str
    main_type: str
    kind: OpKind
    inputs: list[str]
    outputs: list[str]
    own_weights: list[str]
    attrs: dict
    pre: list[tuple[tuple[str, str], list[str]]] = field(default_factory=list)  # folded in front
    post: list[tuple[tuple[str, str], list[str]]] = field(default_factory=list)  # folded after
    affine: bool = False  # a standalone BatchNorm/scale that may still fold into its consumer


@dataclass(frozen=True, eq=False)
class Merged:
    """The drafts in topological order, and where each vanished reshape's output now reads from."""

    drafts: tuple[Draft, ...]
    alias: dict  # output of a folded reshape-like node -> the tensor it passed through

    def resolve(self, tensor: str) -> str:
        """The tensor that stands for `tensor` once reshape-like nodes are gone."""
        return _resolve(self.alias, tensor)


def merge(facts: Facts, nodes) -> Merged:
    """Fold the simple nodes among `nodes` ((name, node), topological, constants already folded away)."""
    return _Merger(facts, nodes).run()


class _Merger:
    """The walk's state: which draft produces each tensor and which reshapes have vanished."""

    def __init__(self, facts: Facts, nodes):
        self.facts, self.nodes = facts, nodes
        self.alias: dict[str, str] = {}  # as Merged.alias, filled during the walk
        self.graph_outputs = {o.name for o in facts.model.graph.output}
        self.readers: dict[str, list[str]] = {}  # tensor -> names of the nodes reading it
        for name, node in nodes:
            for t in dict.fromkeys(node.input):
                if t:
                    self.readers.setdefault(t, []).append(name)
        self.node_by_name = {name: node for name, node in nodes}
        # tensor -> _reader_count(tensor), once per tensor (readers never change)
        self.reader_counts: dict[str, int] = {}

    def run(self) -> Merged:
        drafts: list[Draft] = []
        producer: dict[str, Draft] = {}
        pending: dict[str, list[tuple[str, str]]] = {}  # network-input tensor -> reshape nodes to attach
        for name, node in self.nodes:
            acts = [t for t in node.input if t and t not in self.facts.sources]
            if name in self.facts.computed:  # a matmul or conv over weights alone: an op with no activation input
                draft = self._draft(name, node, [])
                drafts.append(draft)
                producer.update((out, draft) for out in draft.outputs)
                continue
            if not acts:
                continue  # a constant computation
            src = _resolve(self.alias, acts[0])
            op_type = node.op_type
            if op_type in PASSTHROUGH:
                self.alias[node.output[0]] = src
                if src in producer:
                    producer[src].post.append(((name, op_type), []))
                else:
                    pending.setdefault(src, []).append((name, op_type))
                continue
            owner = producer.get(src)
            if owner is not None and self._reader_count(src) != 1:
                owner = None  # read by others too: not folded into its producer
            if op_type in ACTIVATIONS and len(acts) == 1 and owner is not None:
                owner.post.append(((name, op_type), self.facts.param_inputs(node, {1})))
                _rename_output(owner, src, node.output[0], producer)
                continue
            if op_type in AFFINE and len(acts) == 1 and (op_type == "BatchNormalization" or len(node.input) == 2):
                if owner is not None and (owner.kind in COMPUTE_KINDS or owner.affine):
                    owner.post.append(((name, op_type), self.facts.param_inputs(node, PARAM_SLOTS[op_type])))
                    _rename_output(owner, src, node.output[0], producer)
                    continue
                draft = self._draft(name, node, [src], affine=True)
            else:
                draft = self._draft(name, node, [_resolve(self.alias, t) for t in acts])
            for t in draft.inputs:
                for entry in pending.pop(t, []):
                    draft.pre.append((entry, []))
            drafts.append(draft)
            for out in draft.outputs:
                producer[out] = draft
        return Merged(tuple(self._fold_pre_ops(drafts)), self.alias)

    def _reader_count(self, tensor: str) -> int:
        """Readers of `tensor` through reshape-like nodes; a graph output counts as a reader.

        Memoised: a tensor read by n nodes is asked about by each of them, and n walks of n readers would be
        quadratic (a Concat of 25,000 Relus of one tensor took 90 s to import).
        """
        if tensor in self.reader_counts:
            return self.reader_counts[tensor]
        total, todo = 0, [tensor]
        while todo:
            t = todo.pop()
            total += int(t in self.graph_outputs)
            for reader in self.readers.get(t, []):
                node = self.node_by_name[reader]
                if node.op_type in PASSTHROUGH:
                    todo.append(node.output[0])
                else:
                    total += 1
        self.reader_counts[tensor] = total
        return total

    def _draft(self, name: str, node, inputs: list[str], affine: bool = False) -> Draft:
        op_type = node.op_type
        kind, attrs = classify(self.facts, name, node)
        # parameters sit in known slots; any other op's float constants (a class token, a table) are its own
        slots = PARAM_SLOTS.get(op_type, set(range(len(node.input))))
        if name in self.facts.computed:
            slots = set(range(len(node.input)))
        elif kind is OpKind.MATMUL and op_type in ("MatMul", "Einsum"):
            slots = {i for i, t in enumerate(node.input) if t in self.facts.sources}
        outputs = [o for o in node.output if o and (op_type != "Dropout")]
        return Draft(name, op_type, kind, inputs, outputs, self.facts.param_inputs(node, slots), attrs, affine=affine)

    def _fold_pre_ops(self, drafts: list[Draft]) -> list[Draft]:
        """Fold a standalone BatchNorm/scale into the single conv/matmul reading it (pre-activation nets)."""
        reader_drafts: dict[str, list[Draft]] = {}
        for d in drafts:
            for t in dict.fromkeys(d.inputs):
                reader_drafts.setdefault(t, []).append(d)
        kept = []
        for d in drafts:
            out = d.outputs[0]
            readers = reader_drafts.get(out, [])
            if (d.affine and len(d.outputs) == 1 and len(readers) == 1 and readers[0].kind in COMPUTE_KINDS
                    and out not in self.graph_outputs and readers[0].inputs.count(out) == 1):
                consumer = readers[0]
                consumer.inputs = [d.inputs[0] if t == out else t for t in consumer.inputs]
                reader_drafts.setdefault(d.inputs[0], []).append(consumer)
                consumer.pre = [*d.pre, ((d.name, d.main_type), d.own_weights), *d.post, *consumer.pre]
                continue
            kept.append(d)
        return kept


def _resolve(alias: dict, tensor: str) -> str:
    while tensor in alias:
        tensor = alias[tensor]
    return tensor


def _rename_output(owner: Draft, old: str, new: str, producer: dict) -> None:
    """`owner` now writes `new` (the output of a node folded into it) instead of `old`."""
    owner.outputs = [new if t == old else t for t in owner.outputs]
    producer.pop(old, None)
    producer[new] = owner
