"""The staged bound: a free schedule that runs in forced stages (an LLM's layers) is bounded stage by stage."""

import pytest

from engine import zoo
from engine.allocation import budgets
from engine.allocation.bound import spill_bound, staged_bound
from engine.allocation.lifetimes import analyse
from engine.allocation.problem import Carry, make_problem
from tests.test_allocation import BITS, graph_of, oracle


def block(i: int, x: str) -> tuple[list, dict]:
    """A decode-like attention block: the value concat VC may run before KC, between, or after the scores S.

    KC (cache 4 + h 1 + out 4) and VC fill a budget of 9 alone, so whichever tensor is live across VC
    (kc or kt 4, s 2) goes off chip and comes back: the least is s, 2 + 2 bytes. No tensor is live
    across VC in every order, so the spill bound sees nothing.
    """
    n = lambda t: f"{t}{i}"  # noqa: E731
    spec = [(n("A"), [x], [n("h")]), (n("KC"), [n("pk"), n("h")], [n("kc")]), (n("KT"), [n("kc")], [n("kt")]),
            (n("S"), [n("kt"), n("h")], [n("s")]), (n("VC"), [n("pv"), n("h")], [n("vc")]),
            (n("C"), [n("s"), n("vc")], [n("y")])]
    sizes = {n("h"): 1, n("pk"): 4, n("pv"): 4, n("kc"): 4, n("kt"): 4, n("s"): 2, n("vc"): 4, n("y"): 1}
    return spec, sizes


def blocks(count: int):
    spec, sizes, x = [], {"x0": 1}, "x0"
    for i in range(count):
        s, z = block(i, x)
        spec, sizes, x = spec + s, sizes | z, f"y{i}"
    return graph_of(spec, sizes, name=f"blocks{count}")


def problem(g, budget):
    return make_problem(g, [op.name for op in g.ops], budget, Carry.start(g, False), include_params=False,
                        word_bits=BITS)


@pytest.mark.parametrize("count", [1, 2])
def test_stages_see_what_every_order_pays(count):
    g = blocks(count)
    p = problem(g, 9)
    assert budgets(g, word_bits=BITS)[0] == 9
    assert spill_bound(p) == 0
    assert staged_bound(p, analyse(p))[0] * p.unit == 4 * count == oracle(g, 9)


@pytest.mark.parametrize("count,budget", [(2, 9), (2, 10), (2, 11), (1, 13)])  # brute force: 0.5-2.5 s each
def test_never_above_the_optimum(count, budget):
    g = blocks(count)
    p = problem(g, budget)
    assert 0 <= staged_bound(p, analyse(p))[0] * p.unit <= oracle(g, budget)


def test_fixed_orders_are_left_to_the_spill_bound():
    g = blocks(1)
    p = problem(g, 9)
    assert staged_bound(make_problem(g, p.ops, 9, p.carry, include_params=False, word_bits=BITS, order=p.ops),
                        analyse(p)) == (0, None)


def test_llama_decode_pays_one_score_tensor_per_layer_at_m_h():
    # at M_H (8.46 MB, 16-bit words) the value-cache concat (8.39 MB of I/O) leaves no room for the
    # softmax output (131,136 B), the cheapest tensor live across it in any order: 32 x 2 x 131,136 B
    g = zoo.build("llama3_8b_decode")
    m_h = budgets(g, word_bits=16)[1]
    p = make_problem(g, [op.name for op in g.ops], m_h, Carry.start(g, False), include_params=False, word_bits=16)
    assert spill_bound(p) == 0
    assert staged_bound(p, analyse(p), time_limit_s=20)[0] * p.unit == 32 * 2 * 131_136
