"""The staged bound: a free schedule that runs in forced stages (an LLM's layers) is bounded stage by stage."""

import pytest

from engine import zoo
from engine.allocation import budgets
from engine.allocation.bound import spill_bound, staged_bound
from engine.allocation.lifetimes import analyse
from engine.allocation.problem import Carry, make_problem
from tests.test_allocation import BITS, graph_of, oracle


def block(i: int, x: str, residual: bool = False) -> tuple[list, dict]:
    """A decode-like attention block: the value concat VC may run before KC, between, or after the scores S.

    KC (cache 4 + h 1 + out 4) and VC fill a budget of 9 alone, so whichever tensor is live across VC
    (kc or kt 4, s 2) goes off chip and comes back: the least is s, 2 + 2 bytes. No tensor is live
    across VC in every order, so the spill bound sees nothing. With `residual`, R adds the block's input
    x to C's output, so x waits across the block as an LLM's residual stream does.
    """
    n = lambda t: f"{t}{i}"  # noqa: E731
    spec = [(n("A"), [x], [n("h")]), (n("KC"), [n("pk"), n("h")], [n("kc")]), (n("KT"), [n("kc")], [n("kt")]),
            (n("S"), [n("kt"), n("h")], [n("s")]), (n("VC"), [n("pv"), n("h")], [n("vc")]),
            (n("C"), [n("s"), n("vc")], [n("c" if residual else "y")])]
    sizes = {n("h"): 1, n("pk"): 4, n("pv"): 4, n("kc"): 4, n("kt"): 4, n("s"): 2, n("vc"): 4, n("y"): 1}
    if residual:
        spec.append((n("R"), [n("c"), x], [n("y")]))
        sizes[n("c")] = 1
    return spec, sizes


def blocks(count: int, residual: bool = False):
    spec, sizes, x = [], {"x0": 1}, "x0"
    for i in range(count):
        s, z = block(i, x, residual)
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


@pytest.mark.parametrize("count,budget,residual", [(2, 9, False), (2, 10, False), (2, 11, False), (2, 9, True),
                                                   (1, 10, True), (1, 11, True)])
def test_never_above_the_optimum(count, budget, residual):  # brute force: 0.1-2 s each
    g = blocks(count, residual)
    p = problem(g, budget)
    assert 0 <= staged_bound(p, analyse(p))[0] * p.unit <= oracle(g, budget)


def test_a_waiting_tensor_is_charged_its_way_off_chip_once():
    # with the residual, x (1 byte) is live across KC and VC too: at 9 bytes it leaves and comes back in
    # every block (the first block's x is a network input DRAM holds: its retrieval only), beside s's 4 bytes
    g = blocks(2, residual=True)
    p = problem(g, 9)
    assert staged_bound(p, analyse(p))[0] * p.unit == oracle(g, 9) == 4 + 1 + 4 + 2


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
