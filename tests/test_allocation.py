"""COSMA allocation against oracles: an independent validity checker, brute force on tiny graphs, baselines."""

import heapq
import itertools
import random
import time

import pytest

import engine
from engine.allocation import METHODS, allocate, budgets, mpmf
from engine.allocation.problem import requirement
from engine.graph import Graph, Op, Tensor

BITS = 8  # one byte per element: a tensor of shape (1, c) holds c bytes


# ---- graphs ---------------------------------------------------------------
def graph_of(spec, sizes, name="g"):
    """Graph from [(op, inputs, outputs)] and {tensor: bytes}; network inputs = tensors nobody makes."""
    made = {t for _, _, outs in spec for t in outs}
    read = {t for _, ins, _ in spec for t in ins}
    ops = [Op(n, "conv", tuple(ins), tuple(outs)) for n, ins, outs in spec]
    tensors = [Tensor(t, (1, c)) for t, c in sizes.items()]
    return Graph.build(name, ops, tensors, tuple(sorted(read - made)), tuple(sorted(made - read)))


def random_dag(seed, n_ops, max_size=4, two_outputs=0.15):
    """A random DAG: each op reads one or two earlier tensors; some ops write two (sibling) tensors."""
    rng = random.Random(seed)
    sizes, pool, spec = {"x": rng.randint(1, max_size)}, ["x"], []
    for i in range(n_ops):
        k = 1 if len(pool) == 1 or rng.random() < 0.5 else 2
        ins = rng.sample(pool[-4:], k) if rng.random() < 0.8 else rng.sample(pool, k)
        outs = [f"t{i}"] + ([f"t{i}b"] if rng.random() < two_outputs else [])
        for t in outs:
            sizes[t] = rng.randint(1, max_size)
        spec.append((f"op{i}", ins, outs))
        pool += outs
    return graph_of(spec, sizes, f"rand{seed}")


def chain(sizes):
    spec = [(f"op{i}", [f"t{i}"], [f"t{i + 1}"]) for i in range(len(sizes) - 1)]
    return graph_of(spec, {f"t{i}": s for i, s in enumerate(sizes)}, "chain")


# ---- independent checker ----------------------------------------------------
def check(alloc, g, include_params=False):
    """Re-derive validity and cost from placements, spills and retrievals alone; return the off-chip bytes."""
    assert alloc.status in ("optimal", "feasible", "time_limit")
    size = {t.name: t.nbytes(alloc.word_bits) for t in g.tensor_list}
    order = list(alloc.order)
    assert sorted(order) == sorted(op.name for op in g.ops)
    at = {op: i for i, op in enumerate(order)}
    assert all(at[g.producer(t)] < at[op.name] for op in g.ops for t in op.inputs if g.producer(t))
    where = {}  # (tensor, step) -> (address, size)
    on_chip: list[list] = [[] for _ in order]  # step -> (address, size) of each tensor on chip then
    starts = {}
    for p in alloc.placements:
        assert p.size == size[p.tensor] and 0 <= p.address and p.address + p.size <= alloc.budget_bytes
        starts.setdefault(p.tensor, []).append(p.first_step)
        for t in range(p.first_step, p.last_step + 1):
            assert (p.tensor, t) not in where, f"{p.tensor} placed twice at {t}"
            where[p.tensor, t] = (p.address, p.size)
            on_chip[t].append((p.address, p.size))
    for t, spans in enumerate(on_chip):  # no overlap: sort the intervals on chip at t
        spans.sort()
        assert all(lo + n <= hi for (lo, n), (hi, _) in zip(spans, spans[1:])), f"overlap at step {t}"
    dram = set(g.inputs) | ({w for op in g.ops for w in op.weights} if include_params else set())
    first_load = set(dram)
    spilled, back = dict(alloc.spills), set(alloc.retrievals)
    assert len(spilled) == len(alloc.spills)
    for t, name in enumerate(order):
        op = g.op(name)
        reads = op.inputs + (op.weights if include_params else ())
        for a in reads:
            assert (a, t) in where, f"{name} reads {a} off chip at step {t}"
            if (a, t - 1) not in where:  # arrives now: compulsory first load or a listed retrieval
                if a in first_load and (a, t) not in back:
                    first_load.discard(a)
                else:
                    assert (a, t) in back, f"{a} arrives at {t} without a retrieval"
        for a in op.outputs:
            assert (a, t) in where and (a, t - 1) not in where
    for a, t in alloc.retrievals:
        assert (a, t) in where and t in starts[a]
        assert a in dram or a in g.outputs or spilled.get(a, 10**9) <= t, f"{a} retrieved before DRAM holds it"
    for a, t in alloc.spills:  # written out after step t-1; back at t only through a retrieval (relocation)
        assert (a, t - 1) in where and ((a, t) not in where or (a, t) in back)
        assert a not in g.outputs and g.producer(a)
    for a, firsts in starts.items():  # an intermediate that leaves unspilled never comes back
        if len(firsts) > 1 and g.producer(a) and a not in g.outputs:
            assert a in spilled
    return sum(size[a] for a, _ in alloc.spills) + sum(size[a] for a, _ in alloc.retrievals)


# ---- brute force --------------------------------------------------------------
def oracle(g, budget, order=None):
    """Least spill+retrieve bytes over every schedule (or `order`), address and replacement (Dijkstra)."""
    size = {t.name: t.nbytes(BITS) for t in g.tensor_list}
    ops = [op.name for op in g.ops]
    readers = {t: {c for c in g.consumers(t)} for t in g.tensors}
    outputs = set(g.outputs)

    def future(a, done):  # still read by an op not yet run
        return bool(readers[a] - done)

    start = (frozenset(), frozenset(), frozenset(g.inputs), frozenset(g.inputs))
    heap, seen, tick = [(0, 0, start)], {}, itertools.count()
    while heap:
        cost, _, state = heapq.heappop(heap)
        done, resident, host, fresh = state
        if len(done) == len(ops):
            return cost
        if seen.get(state, 10**9) < cost:
            continue
        nxt = [order[len(done)]] if order else [o for o in ops if o not in done and
                                                 all(p in done for p in g.predecessors(o))]
        for o in nxt:
            op, after = g.op(o), done | {o}
            res = dict(resident)
            live = [a for a in res if future(a, done)]
            for keep in itertools.chain.from_iterable(itertools.combinations(live, k) for k in range(len(live) + 1)):
                c, h, fr = cost, set(host), set(fresh)
                for a in set(res) - set(keep):
                    if future(a, done) and a not in h:
                        c += size[a]  # spill
                        h.add(a)
                bring = [a for a in op.inputs if a not in keep]
                if any(a not in h for a in bring):
                    continue  # DRAM must hold what comes back (possibly spilled this very step: a move)
                for a in bring:
                    if a in fr:
                        fr.discard(a)
                    else:
                        c += size[a]
                new = bring + list(op.outputs)
                taken = [(res[a], res[a] + size[a]) for a in keep]
                for addrs in _placements([size[a] for a in new], taken, budget):
                    placed = {a: res[a] for a in keep} | dict(zip(new, addrs))
                    placed = {a: x for a, x in placed.items() if future(a, after)}
                    hh = frozenset(h | (set(op.outputs) & outputs))
                    nstate = (frozenset(after), frozenset(placed.items()), hh, frozenset(fr))
                    if c < seen.get(nstate, 10**9):
                        seen[nstate] = c
                        heapq.heappush(heap, (c, next(tick), nstate))
    return None


def _placements(sizes, taken, budget):
    """Every way to put blocks of `sizes` at integer addresses clear of `taken` and of each other."""
    if not sizes:
        yield ()
        return
    s, rest = sizes[0], sizes[1:]
    for x in range(budget - s + 1):
        if all(x + s <= lo or hi <= x for lo, hi in taken):
            for more in _placements(rest, taken + [(x, x + s)], budget):
                yield (x,) + more


def brute_budgets(g):
    """(M_R, M_P) by enumerating every topological order."""
    size = {t.name: t.nbytes(BITS) for t in g.tensor_list}
    m_r = max(sum(size[a] for a in set(op.inputs + op.outputs)) for op in g.ops)
    best = None
    for perm in itertools.permutations(op.name for op in g.ops):
        pos = {o: i for i, o in enumerate(perm)}
        if any(pos[p] > pos[o] for o in perm for p in g.predecessors(o)):
            continue
        span = {}
        for i, o in enumerate(perm):
            for a in g.op(o).inputs + g.op(o).outputs:
                span.setdefault(a, [i, i])[1] = i
        peak = max(sum(size[a] for a, (lo, hi) in span.items() if lo <= t <= hi) for t in range(len(perm)))
        best = peak if best is None else min(best, peak)
    return m_r, best


# ---- tests ------------------------------------------------------------------------
TINY = [random_dag(seed, 5) for seed in range(8)]


@pytest.mark.parametrize("g", TINY, ids=lambda g: g.name)
def test_budgets_match_bruteforce(g):
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    assert (m_r, m_p) == brute_budgets(g)
    assert m_h == (m_r + m_p) // 2
    assert mpmf(g, word_bits=BITS).peak_bytes == m_p


@pytest.mark.parametrize("g", TINY, ids=lambda g: g.name)
def test_cosma_is_the_bruteforce_optimum(g):
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    for budget in sorted({m_r, m_h, m_p}):
        got = allocate(g, budget, word_bits=BITS, time_limit_s=20)
        got.validate()
        assert got.status == "optimal"
        assert check(got, g) == got.offchip_bytes == oracle(g, budget)


@pytest.mark.parametrize("g", TINY[:4], ids=lambda g: g.name)
def test_fixed_schedule_is_the_bruteforce_optimum(g):
    m_r = budgets(g, word_bits=BITS)[0]
    order = [op.name for op in g.ops]
    got = allocate(g, m_r, schedule=order, word_bits=BITS, time_limit_s=20)
    assert got.order == tuple(order)
    assert check(got, g) == got.offchip_bytes == oracle(g, m_r, order)


@pytest.mark.parametrize("seed", range(12))
def test_cosma_never_above_any_baseline(seed):
    g = random_dag(100 + seed, 8, max_size=5)
    for budget in sorted(set(budgets(g, word_bits=BITS))):
        results = {m: allocate(g, budget, method=m, word_bits=BITS, time_limit_s=20) for m in METHODS}
        for m, a in results.items():
            a.validate()
            assert check(a, g) == a.offchip_bytes, m
        cosma = results.pop("cosma")
        assert cosma.status == "optimal"
        assert all(cosma.offchip_bytes <= a.offchip_bytes for a in results.values())


@pytest.mark.parametrize("sizes", [[3, 5, 2, 7, 1, 4], [8, 8, 8, 8], [1, 9, 2, 9, 1]])
def test_chain_needs_no_spill_at_mp(sizes):
    g = chain(sizes)
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    assert m_r == m_p == max(a + b for a, b in zip(sizes, sizes[1:]))
    got = allocate(g, m_p, word_bits=BITS)
    assert check(got, g) == 0 and got.status == "optimal"


def test_mpmf_schedule_is_used_and_fixed():
    g = TINY[3]
    a = allocate(g, budgets(g, word_bits=BITS)[1], schedule="mpmf", word_bits=BITS)
    assert a.order == mpmf(g, word_bits=BITS).order
    assert check(a, g) == a.offchip_bytes == oracle(g, a.budget_bytes, list(a.order))


def test_divide_and_conquer_is_valid_and_bounded_by_the_optimum():
    # two diamonds joined by one tensor; break node 'd' splits them (the paper's hand-picked division)
    spec = [("a", ["x"], ["p"]), ("b", ["p"], ["q"]), ("c", ["p"], ["r"]), ("d", ["q", "r"], ["s"]),
            ("e", ["s"], ["u"]), ("f", ["s"], ["v"]), ("g", ["u", "v"], ["y"])]
    sizes = {"x": 2, "p": 3, "q": 2, "r": 4, "s": 3, "u": 1, "v": 5, "y": 2}
    g = graph_of(spec, sizes)
    for budget in sorted(set(budgets(g, word_bits=BITS))):
        best = oracle(g, budget)
        split = allocate(g, budget, word_bits=BITS, divide=["d"])
        assert "2 segments" in split.message
        assert check(split, g) == split.offchip_bytes >= best  # a heuristic: never below the optimum
        assert split.status == "feasible" or split.offchip_bytes == best  # "optimal" only where it is
        auto = allocate(g, budget, word_bits=BITS, divide="auto")  # 7 ops fit one segment: exact
        assert check(auto, g) == auto.offchip_bytes == best


def test_divide_auto_solves_a_long_graph_quickly():
    g = random_dag(7, 60, max_size=6, two_outputs=0.0)
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    a = allocate(g, m_h, word_bits=BITS, divide="auto", time_limit_s=10)
    assert check(a, g) == a.offchip_bytes
    assert "3 segments" in a.message


def test_include_params_places_weights():
    spec = [Op("c1", "conv", ("x",), ("h",), weights=("w1",)), Op("c2", "conv", ("h",), ("y",), weights=("w2",))]
    tensors = [Tensor("x", (1, 3)), Tensor("h", (1, 4)), Tensor("y", (1, 2)),
               Tensor("w1", (4, 3), is_weight=True), Tensor("w2", (2, 4), is_weight=True)]
    g = Graph.build("w", spec, tensors, ("x",), ("y",))
    m_r, m_h, m_p = budgets(g, word_bits=BITS, include_params=True)
    assert (m_r, m_p) == (3 + 12 + 4, 3 + 12 + 4)  # c1 with its weights is the peak step
    for budget in (m_r, m_p):
        a = allocate(g, budget, include_params=True, word_bits=BITS)
        a.validate()
        assert check(a, g, include_params=True) == a.offchip_bytes == 0
    assert allocate(g, m_r - 1, include_params=True, word_bits=BITS).status == "infeasible"


def test_time_limit_returns_best_found_with_gap():
    g = random_dag(3, 40, max_size=9, two_outputs=0.1)
    m_r = budgets(g, word_bits=BITS)[0]
    a = allocate(g, m_r, word_bits=BITS, time_limit_s=0.5)
    # the clock stops the search, or the free model is judged too big for 0.5 s and the fixed orders end first
    assert a.status == "time_limit" or (a.status == "feasible" and "free-order ILP was not built" in a.message)
    if a.has_plan:
        assert check(a, g) == a.offchip_bytes and (a.gap is None or a.gap > 0)
    else:
        assert "no solution within" in a.message
    a.validate()


def test_a_limit_passed_before_any_plan_gives_the_plan_built_without_search():
    # a limit spent before the search has a plan (here: at once) gives the plan that runs each op alone on chip,
    # status time_limit and no gap claimed, instead of running the search or a baseline past the limit
    g = random_dag(3, 40, max_size=9, two_outputs=0.1)
    m_r = budgets(g, word_bits=BITS)[0]
    a = allocate(g, m_r, word_bits=BITS, time_limit_s=1e-6)
    assert a.has_plan and a.status == "time_limit" and a.gap is None and "spill-everything" in a.message
    assert a.order == tuple(op.name for op in g.ops) and a.peak_bytes == m_r
    a.validate()
    # every later read is a retrieval, and every intermediate tensor read later is spilled once
    size = {t.name: t.nbytes(BITS) for t in g.tensor_list}
    readers = {a: sum(a in op.inputs for op in g.ops) for a in size}
    made = {a for op in g.ops for a in op.outputs}
    expected = sum(size[a] * (readers[a] - (a not in made) + (a in made and a not in g.outputs and readers[a] > 0))
                   for a in size if readers[a])
    assert check(a, g) == a.offchip_bytes == expected > 0
    mpmf.cache_clear()
    order = mpmf(g, word_bits=BITS).order  # a fixed schedule is kept: the plan runs in it
    assert order != a.order
    fixed = allocate(g, m_r, word_bits=BITS, time_limit_s=1e-6, schedule=order)
    assert fixed.order == order and fixed.status == "time_limit" and "given order" in fixed.message
    fixed.validate()
    assert check(fixed, g) == fixed.offchip_bytes == expected


@pytest.mark.parametrize("schedule", ["free", "mpmf"])
def test_a_passed_limit_with_weights_and_divided_still_answers_validly(schedule):
    # weights on chip too: each is loaded once for free, then retrieved for every further reader
    g = engine.load_network("resnet18")
    m_r = budgets(g, include_params=True, word_bits=BITS, time_limit_s=5)[0]
    a = allocate(g, m_r, include_params=True, word_bits=BITS, time_limit_s=1e-6, schedule=schedule, divide="auto")
    assert a.status == "time_limit" and a.gap is None and a.peak_bytes == m_r
    a.validate()
    assert check(a, g, include_params=True) == a.offchip_bytes


# A contract, not a speed figure: a call's CPU seconds (all its threads'), which the machine's load does not inflate as
# it does wall seconds (a loaded machine took 5.6 s of wall time for a 2 s limit); the slack absorbs model building.
# How closely the limits are kept in wall time is measured in benchmarks/.
LIMIT_S, SLACK_S = 2.0, 3.0


@pytest.mark.parametrize("opts", [dict(include_params=True), dict(schedule="mpmf"), dict(divide="auto"),
                                  dict(schedule="default")], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_time_limit_covers_the_whole_call(opts):
    # the Transformer's MPMF order alone took 15-25 s when cold, and its free model 17 s to build: every
    # stage now shares one deadline, so a 2 s limit gives a valid plan in about 2 s from cold caches
    g = engine.load_network("transformer")
    params = opts.pop("include_params", False)
    if opts.get("schedule") == "default":
        opts["schedule"] = [op.name for op in g.ops]
    m_r = max(requirement(g, op.name, include_params=params, word_bits=BITS) for op in g.ops)
    mpmf.cache_clear()
    began = time.process_time()
    a = allocate(g, m_r, include_params=params, word_bits=BITS, time_limit_s=LIMIT_S, **opts)
    assert time.process_time() - began < LIMIT_S + SLACK_S
    # the limit stops the free paths, unless the free model is skipped as too big and its fixed orders end
    # first (status feasible, saying so); a fixed order may end sooner, at the spill bound (atbound.py)
    assert a.has_plan and a.status in ("time_limit", "optimal", "feasible")
    assert (a.status == "optimal") == (a.gap == 0.0)
    if a.status == "feasible":
        assert not opts and a.gap > 0 and "free-order ILP was not built" in a.message
    assert check(a, g, include_params=params) == a.offchip_bytes


def test_a_search_cut_short_by_the_model_size_is_not_a_time_out():
    # the Transformer's free model (2.8 x 10^5 variables) is skipped as too big for 10 s; where its fixed orders are
    # solved to their own optimum before the limit, the run says why it stopped rather than "time_limit". Whether the
    # skip is decided, and whether the fixed orders are solved, before the limit depends on the machine (at load 20
    # neither was: the message was empty): then the status is the time limit's
    g = engine.load_network("transformer")
    m_r = max(requirement(g, op.name, include_params=False, word_bits=BITS) for op in g.ops)
    a = allocate(g, m_r, word_bits=BITS, time_limit_s=10)
    assert check(a, g) == a.offchip_bytes
    if "free-order ILP was not built" in a.message and "solved to optimality" in a.message:
        assert a.status == "feasible" and 0 < a.gap < 1
        assert "divide='auto'" in a.message and "time_limit_s" in a.message and f"{a.gap:.0%}" in a.message
    else:
        assert a.status == "time_limit" and (a.gap is None or a.gap > 0)


def test_cbc_agrees_with_highs():
    g = TINY[1]
    budget = budgets(g, word_bits=BITS)[0]
    highs = allocate(g, budget, word_bits=BITS)
    cbc = allocate(g, budget, word_bits=BITS, solver="cbc")
    assert check(cbc, g) == cbc.offchip_bytes == highs.offchip_bytes


def test_onnx_resnet50_has_no_spill_at_mp():
    g = engine.load_network("light_resnet50.onnx")
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    a = allocate(g, m_p, word_bits=BITS, time_limit_s=60)
    assert a.status == "optimal" and check(a, g) == 0
    belady = allocate(g, m_p, method="default-belady", word_bits=BITS)
    assert check(belady, g) == belady.offchip_bytes > 0  # the arena fragments where COSMA does not


def test_a_plan_the_checker_rejects_is_never_handed_out(monkeypatch):
    from dataclasses import replace

    import engine.allocation as allocation

    g = random_dag(7, 12, max_size=6, two_outputs=0.0)
    m_r = budgets(g, word_bits=BITS)[0]
    real = allocation.solve_cosma

    def broken(*args, **kwargs):  # a solver plan with a retrieval that starts no placement (whichever plan came)
        got = real(*args, **kwargs)
        starts = {(p.tensor, p.first_step) for p in got.placements}
        bad = next((p.tensor, t) for p in got.placements for t in range(len(got.order)) if (p.tensor, t) not in starts)
        return replace(got, retrievals=tuple(got.retrievals) + (bad,))

    monkeypatch.setattr(allocation, "solve_cosma", broken)
    a = allocate(g, m_r, word_bits=BITS, time_limit_s=5)
    a.validate()
    assert check(a, g) == a.offchip_bytes
    assert a.status == "time_limit" and "failed validation" in a.message and "baseline" in a.message


def fan(n, sizes=None, name="fan"):
    """x -> op0 -> t, read by n element-wise ops (output sizes `sizes`, all 2 by default), joined by one Sum."""
    sizes = sizes or [2] * n
    spec = [("op0", ["x"], ["t"])] + [(f"r{k}", ["t"], [f"f{k}"]) for k in range(n)]
    spec.append(("sum", [f"f{k}" for k in range(n)], ["y"]))
    return graph_of(spec, {"x": 3, "t": 5, "y": 4} | {f"f{k}": s for k, s in enumerate(sizes)}, name)


@pytest.mark.parametrize("sizes", [[2] * 5, [2, 3, 2, 3, 2], [1, 2, 1, 3, 3]], ids=str)
def test_mpmf_of_a_fan_out_matches_bruteforce(sizes):
    # alike readers are run in their given order by the DP (engine.allocation.mpmf._twins): no optimum is lost
    g = fan(len(sizes), sizes, "fan_" + "".join(map(str, sizes)))
    mpmf.cache_clear()
    assert budgets(g, word_bits=BITS)[::2] == brute_budgets(g)


def test_a_wide_fan_out_is_fast_in_budgets_and_allocate():
    # one tensor read by 20 alike ops: the DP visited 200 000 down-sets (18 s) before giving way to the ILP
    g = fan(20)
    mpmf.cache_clear()
    began = time.process_time()
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    assert time.process_time() - began < 5.0
    assert m_p == max(5 + 20 * 2, 20 * 2 + 4) and mpmf(g, word_bits=BITS).status == "optimal"
    for budget in (m_r, m_h):
        mpmf.cache_clear()
        began = time.process_time()
        a = allocate(g, budget, word_bits=BITS, time_limit_s=1.0, schedule="mpmf")
        assert time.process_time() - began < 1.0 + SLACK_S
        a.validate()
        assert check(a, g) == a.offchip_bytes


@pytest.mark.parametrize("limit", [0.01, 1.0])
@pytest.mark.parametrize("schedule", ["free", "mpmf"])
def test_time_limit_holds_on_a_fan_out_of_unlike_readers(limit, schedule):
    # readers of 20 different sizes are not interchangeable: the DP runs until the deadline, then gives way
    g = fan(20, [1 + (7 * k) % 20 for k in range(20)], "fan_unlike")
    mpmf.cache_clear()
    began = time.process_time()
    a = allocate(g, budgets(g, word_bits=BITS, time_limit_s=limit)[0], word_bits=BITS, time_limit_s=limit,
                 schedule=schedule)
    assert time.process_time() - began < 2 * limit + SLACK_S
    assert a.has_plan and (a.status == "optimal") == (a.gap == 0.0)
    a.validate()
    assert check(a, g) == a.offchip_bytes



@pytest.mark.parametrize("schedule", ["free", "mpmf"])
def test_a_tiny_time_limit_is_kept_on_a_wide_net(schedule):
    # NASNet-A mobile at 0.01 s took 4.4 s (free: relaxation and model builds past the deadline) and 0.9 s (mpmf:
    # the footprint ILP built after its deadline); now a plan comes from the cover or the baselines in time
    g = engine.load_network("nasnet_a_mobile")
    m_r = max(requirement(g, op.name, include_params=False, word_bits=BITS) for op in g.ops)
    mpmf.cache_clear()
    began = time.process_time()
    a = allocate(g, m_r, word_bits=BITS, time_limit_s=0.01, schedule=schedule)
    assert time.process_time() - began < 0.01 + SLACK_S
    assert a.has_plan and a.status in ("time_limit", "optimal") and (a.status == "optimal") == (a.gap == 0.0)
    a.validate()
    assert check(a, g) == a.offchip_bytes
