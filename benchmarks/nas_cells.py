"""A DARTS-style NAS network built in code (no NAS model is in the zoo): cells of irregularly wired ops.

Each cell reads the outputs of the two cells before it, preprocesses both (1x1 conv),
computes four nodes that each add two ops (separable/dilated convs, pools, identity-free
skips) applied to two earlier nodes chosen by a fixed seed, and concatenates the nodes.
Reduction cells halve the resolution and double the channels, as in DARTS (Liu et al.).
"""

from __future__ import annotations

import random

from engine.graph import Graph, Op, Tensor


def darts_like(cells: int = 8, channels: int = 16, size: int = 32, seed: int = 0, batch: int = 1) -> Graph:
    """A DARTS-like network of `cells` cells (reduction cells at 1/3 and 2/3 depth) on a size x size image."""
    rng = random.Random(seed)
    ops, tensors = [], {}

    def tensor(name, c, hw):
        tensors[name] = Tensor(name, (batch, c, hw, hw))
        return name

    def op(name, kind, ins, c, hw, kernel=1):
        out = tensor(name, c, hw)
        ops.append(Op(name, kind, tuple(ins), (out,), kernel=(kernel, kernel)))
        return out

    x = tensor("image", 3, size)
    stem = op("stem", "conv", [x], 3 * channels, size, 3)
    prev, prev_prev, hw, c = stem, stem, size, channels
    for k in range(cells):
        reduce = k in (cells // 3, 2 * cells // 3)
        out_hw = hw // 2 if reduce else hw
        c = c * 2 if reduce else c
        s0 = op(f"c{k}.pre0", "conv", [prev_prev], c, hw if prev_prev != prev else hw)
        s1 = op(f"c{k}.pre1", "conv", [prev], c, hw)
        nodes = [s0, s1]
        for j in range(4):
            parts = []
            for m, src in enumerate(rng.sample(range(len(nodes)), 2)):
                kind = rng.choice(["conv", "dwconv", "pool"])
                src_hw = tensors[nodes[src]].shape[2]
                parts.append(op(f"c{k}.n{j}.{m}", kind, [nodes[src]], c, out_hw if src_hw != out_hw else src_hw, 3))
            nodes.append(op(f"c{k}.n{j}", "eltwise", parts, c, out_hw))
        out = op(f"c{k}.cat", "concat", nodes[2:], 4 * c, out_hw)
        prev_prev, prev, hw = prev, out, out_hw
    pooled = op("gap", "pool", [prev], 4 * c, 1)
    op("classifier", "matmul", [pooled], 10, 1)
    return Graph.build("darts_like", ops, list(tensors.values()), (x,), ("classifier",))
