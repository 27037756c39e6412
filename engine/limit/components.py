"""The links of a graph (tensors one op makes and others read, through folded layout ops) and the components and
chains they join ops into, for the segmentation bound (`segments.py`)."""

from __future__ import annotations

from engine.fusion.model import FusionModel
from engine.limit.parts import Component, Link

MAX_LINKS = 12  # links of a component whose 2^links cuts are tried (a transformer layer's pieces have 1-12)


def chains_of(comps: list[Component], loose: list[Link]) -> tuple[tuple[tuple[int, ...], ...],
                                                                  dict[int, tuple[int, Link, int]]]:
    """Components in a row joined by loose links, each made in one component and read all in the next (the residual
    stream from one layer's component to the next's), where a component reads one such link and makes one."""
    comp_of = {i: c for c, comp in enumerate(comps) for i in comp.ops}
    pairs = []
    for ln in loose:
        readers = {comp_of.get(r, -1) for r in ln.readers}
        a, b = comp_of.get(ln.producer, -1), min(readers)
        if len(readers) == 1 and a >= 0 and b >= 0 and a != b:
            pairs.append((a, b, ln))
    outs = [a for a, _, _ in pairs]
    ins = [b for _, b, _ in pairs]
    joined: dict[int, tuple[int, Link, int]] = {}
    reps: dict[tuple, int] = {}
    for a, b, ln in pairs:
        if outs.count(a) == 1 and ins.count(b) == 1:
            key = (comps[a].kind, comps[b].kind, comps[a].ops.index(ln.producer),
                   tuple(comps[b].ops.index(r) for r in ln.readers))
            joined[b] = (a, ln, reps.setdefault(key, b))
    after = {a: b for b, (a, _, _) in joined.items()}
    chains = []
    for c in range(len(comps)):
        if c not in joined and c in after:
            chain = [c]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            chains.append(tuple(chain))
    return tuple(chains), joined


def components_of(model: FusionModel, links: list[Link]) -> tuple[list[tuple[tuple[int, ...], tuple[Link, ...]]],
                                                                   int, list[Link]]:
    """Ops joined by single-reader links, then by links of several readers (largest first) while a component keeps
    at most `MAX_LINKS` links; (components with their links, how many links are left out, the links of several
    readers among them)."""
    parent = list(range(model.n))
    count = [0] * model.n  # links of the component rooted here

    def root(i: int) -> int:
        return _find(parent, i)

    kept: list[Link] = []
    loose: list[Link] = []
    free = 0
    for ln in sorted(links, key=lambda ln: (len(ln.readers) > 1, -ln.nbytes)):
        roots = {root(ln.producer)} | {root(r) for r in ln.readers}
        total = sum(count[r] for r in roots) + 1
        if len(ln.readers) > 1 and total > MAX_LINKS:
            free += 1
            loose.append(ln)
            continue
        top = roots.pop()
        for r in roots:
            parent[r] = top
        count[top] = total
        kept.append(ln)
    members: dict[int, list[int]] = {}
    for i in range(model.n):
        if not model.folds[i]:
            members.setdefault(root(i), []).append(i)
    own: dict[int, list[Link]] = {}
    for ln in kept:
        own.setdefault(root(ln.producer), []).append(ln)
    out: list[tuple[tuple[int, ...], tuple[Link, ...]]] = []
    for r, ops in members.items():
        mine = tuple(own.get(r, ()))
        if len(mine) > MAX_LINKS:  # a long chain of single-reader links: its ops alone, its links free
            free += len(mine)
            out.extend(((i,), ()) for i in ops)
        else:
            out.append((tuple(ops), mine))
    return out, free, loose


def _find(parent, i: int) -> int:
    """The root of i in a union-find forest (`parent`: a list or dict), halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def links_of(model: FusionModel) -> list[Link]:
    """Every link: a tensor made by an op (with no other output) and read by other ops, as they read it through
    folded layout ops (a one-in, one-out view read alone); not streamed, not a network output. A folded split read
    alone (a packed QKV projection's heads) gives one link per part it passes on, each its own bytes: the maker's
    group writes at least that part and its reader's group reads it when they differ."""
    out = []
    for p in range(model.n):
        if not model.folds[p] and len(model.outs[p]) == 1:
            out.extend(_follow(model, p, model.outs[p][0], model.tbytes[model.outs[p][0]]))
    return out + _stream_links(model)


def _stream_links(model: FusionModel) -> list[Link]:
    """A streamed operand one op makes (through layout views and in-place ops of one input) and one op reads, all
    along: cut, the maker's group writes it and the reader's reads it at least once (`_grouped_bits` counts the
    reads beyond); uncut, the reader's group makes it."""
    out = []
    for r in range(model.n):
        for j in model.ins[r]:
            if not model.stream_elems[j] or model.folds[r]:
                continue
            nbytes, _, made, written = source_of(model, j)
            p = model.producer[j]
            while p >= 0 and model.inplace[p] and len(model.ins[p]) == 1:
                p = model.producer[model.ins[p][0]]
            if made and written and p >= 0 and model.covered[p] and not model.inplace[p]:
                out.append(Link(p, (r,), nbytes, 0, 0, True))
    return out


def _follow(model: FusionModel, p: int, j: int, nbytes: int) -> list[Link]:
    """The links of tensor j (made by op p, or a view of what it made) through folded layout ops read alone."""
    while True:
        readers = model.consumer_mask[j]
        if model.is_graph_output[j] or model.stream[j] or not readers or not nbytes:
            return []
        c = readers.bit_length() - 1
        if readers.bit_count() > 1 or not (model.folds[c] and len(model.ins[c]) == 1):
            break
        if len(model.outs[c]) > 1:  # a split: each part its own link
            return [ln for o in model.outs[c] for ln in _follow(model, p, o, min(nbytes, model.tbytes[o]))]
        j = model.outs[c][0]
        nbytes = min(nbytes, model.tbytes[j])
    ops = FusionModel.members(model.consumer_mask[j])
    if any(model.folds[c] for c in ops):
        return []  # a layout op that does not fold away alone (it has other inputs) leaves its tensors free
    geo = model.tgeo[j]
    rows = geo.h if geo is not None else 1
    return [Link(p, tuple(ops), nbytes, model.held[j] * rows, model.held[j])]


def sources_of(model: FusionModel) -> tuple[int, ...]:
    """Per tensor, the op that makes it looked back through folded one-in layout ops (-1: a network input)."""
    out = []
    for j in range(len(model.tnames)):
        p = model.producer[j]
        while p >= 0 and model.folds[p] and len(model.ins[p]) == 1:
            p = model.producer[model.ins[p][0]]
        out.append(p)
    return tuple(out)


def source_of(model: FusionModel, j: int) -> tuple[int, int, bool, bool]:
    """(bytes, elements, made by an op, written) a group loads at least when it reads streamed tensor j from
    outside: an in-place op's output (a repeat of grouped-query heads, a KV-cache append) may be read as its inputs
    instead, which can be fewer (the cache of the KV heads, not its repeat); `made` is False once a network input is
    among them (its one read is in the once-term); `written` when one op makes it and one reads it, all along."""
    p = model.producer[j]
    single = model.consumer_mask[j].bit_count() == 1
    if p < 0 or not model.inplace[p]:
        return model.tbytes[j], model.stream_elems[j], p >= 0, p >= 0 and single
    parts = [source_of(model, k) for k in model.ins[p]]
    made = all(m for _, _, m, _ in parts)
    written = single and len(parts) == 1 and parts[0][3]
    nbytes, elems = sum(b for b, _, _, _ in parts), sum(e for _, e, _, _ in parts)
    if nbytes >= model.tbytes[j]:
        return model.tbytes[j], model.stream_elems[j], made, written
    return nbytes, elems, made, written
