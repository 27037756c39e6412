"""What makes the COSMA ILP fast without changing its optimum: the capacity row, forced orders, starts, bounds,
the no-spill packing."""

import itertools
import time

import pulp
import pytest

from engine.allocation import allocate, budgets, cosma, model, mpmf, solve
from engine.allocation.bound import spill_bound
from engine.allocation.lifetimes import forced
from engine.allocation.mpmf import footprint
from engine.allocation.packing import pack
from engine.allocation.problem import Carry, make_problem
from engine.allocation.start import best_baseline, objective_at, values_of
from tests.test_allocation import BITS, check, graph_of, oracle, random_dag


def problem_of(g, budget, order=None):
    ops = [op.name for op in g.ops]
    return make_problem(g, ops, budget, Carry.start(g, False), include_params=False, word_bits=BITS, order=order)


@pytest.fixture(scope="module")
def squeeze():
    """'a' is read at the start and the end; 'b' in between leaves no room for it at a budget of 10."""
    spec = [("A", ["x"], ["a"]), ("B", ["a"], ["b"]), ("C", ["b"], ["c"]), ("D", ["a", "c"], ["y"])]
    return graph_of(spec, {"x": 1, "a": 3, "b": 6, "c": 4, "y": 1})


def lp_bound(m) -> float:
    """The LP relaxation's optimum (integrality dropped), in the model's units."""
    lp = m.lp.deepcopy()
    lp.solve(pulp.HiGHS(msg=False, mip=False, timeLimit=20))
    return lp.objective.value()


def test_capacity_row_gives_the_relaxation_a_bound(squeeze):
    # B needs a, b (3 + 6) and C needs b, c (6 + 4): with a kept, step C holds 13 > 10 bytes, so a must
    # leave and come back (3 + 3). Eq. 10's big-M rows alone relax to 0 (u = d = 1/2); the capacity row
    # makes the relaxation see the spill.
    m = model.build(problem_of(squeeze, 10))
    assert any(name.startswith("cap_") for name in m.lp.constraints)
    assert 0 < lp_bound(m) * m.problem.unit <= oracle(squeeze, 10) == 6
    for name in [n for n in m.lp.constraints if n.startswith("cap_")]:
        del m.lp.constraints[name]
    assert lp_bound(m) == pytest.approx(0, abs=1e-6)


def test_chains_force_their_order_and_diamonds_do_not(squeeze):
    chain = graph_of([("A", ["x"], ["a"]), ("B", ["a"], ["b"]), ("C", ["b"], ["y"])], {"x": 1, "a": 2, "b": 3, "y": 1})
    assert forced(problem_of(chain, 10))
    assert forced(problem_of(squeeze, 10))  # D waits for C, which waits for B: one order
    assert not forced(problem_of(random_dag(2, 6), 100))  # random DAGs branch


def test_a_start_at_the_bound_is_optimal_without_a_solve(squeeze):
    m = model.build(problem_of(squeeze, 20, order=[op.name for op in squeeze.ops]))  # room for everything
    start = {v.name: v.varValue for v in _solved(m).lp.variables()}
    fresh = model.build(problem_of(squeeze, 20, order=[op.name for op in squeeze.ops]))
    stats = solve.run(fresh.lp, solver="highs", time_limit_s=5, start=start, bound=0.0)
    assert (stats.status, stats.solver, stats.gap) == ("optimal", "start", 0.0)
    assert fresh.lp.objective.value() == 0
    # a start above the bound goes to the solver, which improves on it
    tight = model.build(problem_of(squeeze, 10, order=[op.name for op in squeeze.ops]))
    stats = solve.run(tight.lp, solver="highs", time_limit_s=5, bound=0.0)
    assert stats.solver == "HiGHS" and tight.lp.objective.value() * tight.problem.unit == 6


def _solved(m):
    solve.run(m.lp, solver="highs", time_limit_s=5)
    return m


def test_divided_plan_is_a_feasible_start_of_the_whole_ilp():
    # 30 ops: longer than one segment, so the whole ILP starts from the divide-and-conquer plan
    g = random_dag(7, 30, max_size=6, two_outputs=0.0)
    m_h = budgets(g, word_bits=BITS)[1]
    m = model.build(problem_of(g, m_h))
    # a few seconds per solve: each check below holds whatever the solver proves in them
    values = cosma._divided_start(m, g, "highs", 4, dict(include_params=False, word_bits=BITS))
    for v in m.lp.variables():
        v.varValue = values.get(v.name, 0.0)
    assert m.lp.valid(1e-6)  # every row of Eq. 1-12 holds at the divided plan
    split = allocate(g, m_h, word_bits=BITS, divide="auto", time_limit_s=4)
    assert "2 segments" in split.message
    if "each proven optimal" in split.message:  # the same plan the start was read from (unless a time limit cut one)
        assert m.lp.objective.value() * m.problem.unit == split.offchip_bytes
    whole = allocate(g, m_h, word_bits=BITS, time_limit_s=4)
    assert check(whole, g) == whole.offchip_bytes


def floor_of(g, budget, order=None) -> int:
    """The spill bound of the whole graph, in bytes."""
    p = problem_of(g, budget, order)
    return spill_bound(p) * p.unit


def test_spill_bound_is_tight_where_live_bytes_force_the_spill(squeeze):
    assert floor_of(squeeze, 10) == oracle(squeeze, 10) == 6  # a (3 bytes) leaves and comes back
    assert floor_of(squeeze, 13) == oracle(squeeze, 13) == 0


FAST = [random_dag(seed, 5) for seed in (0, 2, 3, 4, 6)]  # brute force takes well under a second on these


@pytest.mark.parametrize("g", FAST, ids=lambda g: g.name)
def test_spill_bound_never_exceeds_the_optimum(g):
    # surely-live sets of a fixed order contain those of every order, so its bound is at least the free one
    order = [op.name for op in g.ops]
    m_r = budgets(g, word_bits=BITS)[0]
    free, fixed = floor_of(g, m_r), floor_of(g, m_r, order)
    assert 0 <= free <= oracle(g, m_r)
    assert free <= fixed == oracle(g, m_r, order) > 0  # on these graphs capacity alone forces the traffic


def test_a_fixed_order_meeting_the_bound_skips_the_free_model(squeeze, monkeypatch):
    # E can run anywhere, so the schedule is free; the default order already pays only the forced 6 bytes
    spec = [("E", ["x"], ["e"]), ("A", ["x"], ["a"]), ("B", ["a"], ["b"]), ("C", ["b"], ["c"]), ("D", ["a", "c"], ["y"])]
    g = graph_of(spec, {"x": 1, "e": 1, "a": 3, "b": 6, "c": 4, "y": 1})
    assert not forced(problem_of(g, 10))
    built = []
    real = model.build
    monkeypatch.setattr(model, "build", lambda p, **kw: built.append(p.order) or real(p, **kw))
    got = allocate(g, 10, word_bits=BITS)
    assert (got.status, got.gap) == ("optimal", 0.0)
    assert check(got, g) == got.offchip_bytes == oracle(g, 10) == floor_of(g, 10) == 6
    assert built == []  # the spill bound's cover, as a plan in the default order, meets it: no model is built


def test_a_timed_out_start_gets_its_gap_from_the_spill_bound():
    # no time left to solve: the MIP start is the answer, its gap measured to the spill bound
    g = random_dag(3, 40, max_size=9, two_outputs=0.1)
    m_r, order = budgets(g, word_bits=BITS)[0], [op.name for op in g.ops]
    m = model.build(problem_of(g, m_r, order=order))
    floor = floor_of(g, m_r, order)
    start = best_baseline(m, g, [tuple(order)], include_params=False, word_bits=BITS)
    # a start's plans keep the search's deadline: none is made past it
    assert best_baseline(m, g, [tuple(order)], include_params=False, word_bits=BITS,
                         deadline=time.perf_counter() - 1) is None
    stats = solve.take_start(m.lp, start, bound=floor // m.problem.unit)
    value = m.lp.objective.value() * m.problem.unit
    assert floor > 0 and stats.has_solution and value == objective_at(m, start) * m.problem.unit >= floor
    assert stats.status == "time_limit" and value > floor
    assert stats.gap == pytest.approx((value - floor) / value)


def test_divided_plans_report_their_gap_to_the_whole_graph_bound():
    g = random_dag(7, 60, max_size=6, two_outputs=0.0)
    m_r, order = budgets(g, word_bits=BITS)[0], [op.name for op in g.ops]
    split = allocate(g, m_r, schedule=order, word_bits=BITS, divide="auto", time_limit_s=10)
    assert "2 segments" in split.message and check(split, g) == split.offchip_bytes
    floor = floor_of(g, m_r, order)
    assert floor > 0
    if split.status == "optimal":
        assert split.offchip_bytes == floor
    else:
        assert split.gap == pytest.approx(1 - floor / split.offchip_bytes)


PACKED = [random_dag(seed, 30, max_size=6, two_outputs=0.1) for seed in range(8)]


@pytest.mark.parametrize("g", PACKED, ids=lambda g: g.name)
def test_a_packing_is_a_zero_cost_start_that_fits_or_nothing(g):
    order, m_p = mpmf(g, word_bits=BITS).order, budgets(g, word_bits=BITS)[2]
    loose = problem_of(g, sum(t.nbytes(BITS) for t in g.tensor_list), order)
    assert pack(loose, order) is not None  # room for every tensor at once: it always fits
    for budget in (m_p, m_p * 5 // 4):
        p = problem_of(g, budget, order)
        placed = pack(p, order)
        if placed is None:
            continue
        assert footprint(g, order, word_bits=BITS) <= budget  # a packing never beats the live bytes
        for x, y in itertools.combinations(placed, 2):  # no two stays sharing a step share an address
            apart = x.last_step < y.first_step or y.last_step < x.first_step
            assert apart or x.address + x.size <= y.address or y.address + y.size <= x.address
        assert max(x.address + x.size for x in placed) <= budget
        m = model.build(p)
        values = values_of(m, order, placed, [], [])
        for v in m.lp.variables():
            v.varValue = values.get(v.name, 0.0)
        assert m.lp.valid(1e-6) and objective_at(m, values) == 0  # a feasible start meeting the bound 0


def test_a_packing_that_fits_ends_the_solve_before_it_begins(monkeypatch):
    fits = [g for g in PACKED if pack(problem_of(g, budgets(g, word_bits=BITS)[2]), mpmf(g, word_bits=BITS).order)]
    assert fits  # the test means something
    calls = []
    real = pulp.LpProblem.solve
    monkeypatch.setattr(pulp.LpProblem, "solve", lambda lp, *a, **k: calls.append(lp.name) or real(lp, *a, **k))
    for g in fits:
        got = allocate(g, budgets(g, word_bits=BITS)[2], word_bits=BITS)
        assert (got.status, got.offchip_bytes, check(got, g)) == ("optimal", 0, 0)
    assert calls == []  # neither the spill bound nor the ILP went to a solver


def test_joining_segments_drops_the_retrieval_of_a_tensor_that_stayed_on_chip():
    from types import SimpleNamespace

    from engine.allocation.record import Placement

    first = SimpleNamespace(order=("A", "B"), placements=(Placement("a", 0, 1, 0, 3),), spills=(), retrievals=())
    stayed = SimpleNamespace(order=("C",), placements=(Placement("a", 0, 0, 0, 3),), spills=(), retrievals=(("a", 0),))
    joined = cosma._join([(0, first), (2, stayed)], ["optimal", "optimal"], [0.0, 0.0])
    assert joined.placements == (Placement("a", 0, 2, 0, 3),) and joined.retrievals == ()
    moved = SimpleNamespace(order=("C",), placements=(Placement("a", 0, 0, 0, 3),), spills=(("a", 0),),
                            retrievals=(("a", 0),))  # written out and back at the boundary: two stays
    joined = cosma._join([(0, first), (2, moved)], ["optimal", "optimal"], [0.0, 0.0])
    assert len(joined.placements) == 2 and joined.retrievals == (("a", 2),)


def test_lifetimes_and_models_past_their_deadline_stop_instead_of_overrunning_it():
    """The free schedule's lifetimes (quadratic in the tensors live at a step) and every model's build look at the
    clock: past the deadline they raise OutOfTime, which `allocate` turns into the best plan found so far."""
    from engine.allocation.lifetimes import OutOfTime, analyse

    prob = problem_of(random_dag(3, 14, max_size=6, two_outputs=0.0), 64)
    assert analyse(prob).pairs  # in time: the pairs
    with pytest.raises(OutOfTime):
        analyse(prob, deadline=0.0)
    with pytest.raises(OutOfTime):
        model.build(prob, deadline=0.0)
    assert model.OutOfTime is OutOfTime  # the name callers catch


def test_a_limit_shorter_than_the_free_models_setup_gives_the_best_plan_so_far():
    import engine

    g = engine.load_network("nasnet_a_mobile")  # its free model takes seconds to set up: the limit comes first
    m_r = 1_577_088  # budgets(g)[0], M_R at 16-bit words (its MPMF search takes a minute: issue 28)
    a = allocate(g, m_r, time_limit_s=0.05)
    a.validate()
    assert a.status == "time_limit" and a.offchip_bytes == check(a, g) > 0
