"""The baselines (`engine/allocation/baselines.py`) against their first, plainer version (`baselines_reference.py`):
the same placements, spills and retrievals, from an empty chip or a carried state, on small random graphs and on a
fan wide enough to evict."""

from types import MappingProxyType

import pytest

from engine.allocation import baselines, budgets
from engine.allocation.problem import Carry
from tests import baselines_reference
from tests.test_allocation import BITS, graph_of, random_dag


def both(g, budget, order, policy, **kw):
    """(the baseline's plan, the reference's) for the same call."""
    args = dict(include_params=kw.pop("include_params", False), word_bits=BITS, **kw)
    return (baselines.run(g, budget, order, policy, **args),
            baselines_reference.run(g, budget, order, policy, **args))


@pytest.mark.parametrize("policy", baselines.POLICIES)
@pytest.mark.parametrize("seed", range(8))
def test_the_baselines_plan_as_their_reference_does(seed, policy):
    g = random_dag(300 + seed, 12, max_size=6)
    order = [op.name for op in g.ops]
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    spilled = 0
    for budget in sorted({m_r, (m_r + m_h) // 2, m_h, m_p}):
        got, want = both(g, budget, order, policy)
        assert got == want, budget
        spilled += len(got[1])
    assert spilled  # the cases exercise eviction
    with_weights = max(budgets(g, include_params=True, word_bits=BITS))
    got, want = both(g, with_weights, order, policy, include_params=True)
    assert got == want


@pytest.mark.parametrize("policy", baselines.POLICIES)
@pytest.mark.parametrize("seed", range(6))
def test_from_a_carried_state_the_baselines_plan_as_their_reference_does(seed, policy):
    """The second half of the order, from the state the first half's plan leaves (a divided run's segment)."""
    g = random_dag(400 + seed, 12, max_size=6)
    order = [op.name for op in g.ops]
    budget = budgets(g, word_bits=BITS)[0]
    first, second = order[:6], order[6:]
    later = frozenset(a for op in second for a in g.op(op).inputs)
    placements, spills, _ = baselines_reference.run(g, budget, first, policy, include_params=False, word_bits=BITS,
                                                    later=later)
    resident = {p.tensor: p.address for p in placements if p.last_step == len(first) - 1 and p.tensor in later}
    carry = Carry(MappingProxyType(resident), frozenset(g.inputs) | {a for a, _ in spills}, frozenset())
    got, want = both(g, budget, second, policy, carry=carry)
    assert got == want
    assert resident or not later  # the carried state is not empty where the second half reads the first's


def fan_then_back(n: int):
    """t read by n ops (outputs f0..f{n-1}, sizes 1-3), then each f read again, last first, by an op of its own:
    at M_R most fs wait off chip for their second reader."""
    spec = [("op0", ["x"], ["t"])] + [(f"r{k}", ["t"], [f"f{k}"]) for k in range(n)]
    spec += [(f"s{k}", [f"f{k}"], [f"g{k}"]) for k in reversed(range(n))]
    sizes = {"x": 3, "t": 5} | {f"f{k}": 1 + k % 3 for k in range(n)} | {f"g{k}": 2 for k in range(n)}
    return graph_of(spec, sizes, f"fan_then_back_{n}")


@pytest.mark.parametrize("policy", baselines.POLICIES)
def test_a_wide_fan_evicts_as_the_reference_does(policy):
    g = fan_then_back(400)
    order = [op.name for op in g.ops]
    m_r, m_h, _ = budgets(g, word_bits=BITS)
    for budget in (m_r, (m_r + m_h) // 2):
        got, want = both(g, budget, order, policy)
        assert got == want and len(got[1]) > 100, budget
