"""The least closure (engine/limit/closure.py): its minimum cut against networkx's, and a closure by hand."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from engine.limit.closure import least_closure, min_cut


@pytest.mark.parametrize("seed", range(20))
def test_the_minimum_cut_is_networkx_s_on_random_graphs(seed):
    # 8-20 nodes, node 0 the source and 1 the sink, capacities 0-9 or unbounded (-1), parallel edges allowed
    rng = random.Random(seed)
    n = rng.randint(8, 20)
    edges = tuple((rng.randrange(n), rng.randrange(n), rng.choice([-1, 0, *range(1, 10)]))
                  for _ in range(rng.randint(10, 60)))
    edges = tuple((u, v, c) for u, v, c in edges if u != v)
    flow = nx.DiGraph()
    flow.add_nodes_from(range(n))
    for u, v, c in edges:
        cap = 10 ** 6 if c < 0 else c
        flow.add_edge(u, v, capacity=flow[u][v]["capacity"] + cap if flow.has_edge(u, v) else cap)
    expected = nx.minimum_cut_value(flow, 0, 1)
    assert min_cut(edges) == expected or (expected >= 10 ** 6 and min_cut(edges) >= 10 ** 6)


def test_a_closure_makes_a_shared_input_once():
    # tensors 0 and 1 are needed; op 0 makes tensor 0 from tensor 2, op 1 makes tensor 1 from tensor 2 too, op 2
    # makes tensor 2. Holding 0 and 1 costs 10 + 10; making them costs widths 1 + 1 and tensor 2 once (held: 6, or
    # made by op 2: width 2, its input 3 held at 50): 1 + 1 + 6 = 8, tensor 2 counted once for both readers
    maker = [0, 1, 2, -1]
    inputs = [(2,), (2,), (3,)]
    width = {0: 1, 1: 1, 2: 2}.__getitem__
    hold = {0: 10, 1: 10, 2: 6, 3: 50}.__getitem__
    assert least_closure([0, 1], maker, inputs, width, hold, {0, 1, 2}, lambda j: hold(j) if maker[j] < 0 else 0) == 8
    # op 2 not allowed and tensor 2 free beyond it: 1 + 1
    assert least_closure([0, 1], maker, inputs, width, hold, {0, 1}, lambda j: 0) == 2
