"""Large-neighbourhood search on a beam's plan: re-solve windows of consecutive groups exactly, the rest fixed.

A plan's groups in execution order g_1..g_k make a chain of down-sets; for any a <= b,
P = g_1 + .. + g_(a-1) and P + U, U = g_a + .. + g_b, are down-sets, and every chain of
connected, fitting groups from P to P + U that uses only the ops of U, put in place of
g_a..g_b, gives a valid plan (each prefix is still a down-set). A group's traffic
(Eq. 3) depends on the group alone, so the plan's total changes by exactly the chain's
total less that of g_a..g_b. `optimus.chain_search(start=P, within=U)` finds the least
such chain exactly when U's down-sets above P are few (at most `budget`); the old groups
are one such chain, so no window makes the plan worse, and every group of the result is
costed by the same `dram_bytes` as any plan's. Windows slide over the plan by half their
length, pass after pass while one still improves it; a window whose groups have not
changed since it was re-solved is skipped (its groups are already its optimum). The
plan is then listed in other execution orders (`ORDERS`) and swept again, so that groups
that were not neighbours in one order meet in a window of another.

`fuse` calls it on optimus beams (unless `polish=False`): exact plans are left as they are.
"""

from __future__ import annotations

from dataclasses import replace

from engine.fusion import optimus
from engine.fusion.model import FusionModel
from engine.fusion.plan import execution_order
from engine.fusion.sized import SizedModel

BUDGET = 100  # down-sets per window: NASNet-A Mobile 38.46 -> 35.64 MB in ~2 s CPU (batch 1, 128 KB)
PASSES = 8  # sweeps over the plan, while one still improves it
WORK = 300_000  # groups evaluated in all: NASNet-A Mobile needs ~280,000 at 128 KB; at 512 KB and up it stops here
LONE = 4  # a group alone may be re-solved over up to this many times `BUDGET` down-sets
ORDERS = (  # ranks of a group that list the plan in different execution orders, so that other groups fall together
    lambda m: (m & -m).bit_length(),  # earliest first op first (the plan's own order)
    lambda m: m.bit_length(),  # earliest last op first
    lambda m: -(m & -m).bit_length(),  # latest first op first: one branch run deep before the next
)


def improve(at: SizedModel, groups: list[int], *, budget: int = BUDGET,
            passes: int = PASSES, work: int = WORK) -> tuple[list[int], int]:
    """A plan no costlier than `groups` (masks), in execution order, and the groups evaluated to find it.

    Past `work` groups evaluated, the window being re-solved finishes as a beam (its chain
    is still taken only if it costs less; a down-set may also try at most its share of the
    rest) and the search stops.
    """
    order = list(groups)
    evaluated = 0
    solved: set[tuple[int, int]] = set()  # (down-set before, window's ops) already re-solved: their groups are that window's optimum
    for rank in ORDERS:
        order = execution_order(at.model, order, rank=rank)
        order, evaluated = _sweep(at, order, solved, evaluated, budget=budget, passes=passes, work=work)
    return order, evaluated


def _sweep(at: SizedModel, order: list[int], solved: set[tuple[int, int]], evaluated: int, *, budget: int,
           passes: int, work: int) -> tuple[list[int], int]:
    """`improve` over one execution order: windows slid by half their length, pass after pass while one improves."""
    model = at.model
    for _ in range(passes):
        better = False
        a = 0
        while a < len(order) and evaluated <= work:
            b, states = _window(model, order, a, budget)
            key = (sum(order[:a]), sum(order[a:b]))
            if states and key not in solved:
                solved.add(key)
                rest = work - evaluated  # so that the window evaluates about this many groups at most
                limits = replace(optimus.EXACT, total=rest, groups=max(1, rest // states), narrow_states=1, narrow_groups=0)
                found = optimus.chain_search(model, at.cap, start=key[0], within=key[1], limits=limits)
                evaluated += found.evaluated
                if found.total < at.plan_bytes(order[a:b]):
                    chain = list(found.groups)
                    order[a:b] = chain
                    better = True
                    b = a + len(chain)
            a = max(a + 1, (a + b) // 2) if b < len(order) else len(order)
        if not better or evaluated > work:
            break
    return order, evaluated


def _window(model: FusionModel, order: list[int], a: int, budget: int) -> tuple[int, int]:
    """(b, down-sets): the last b > a whose groups a..b-1 have at most `budget` down-sets above those before.

    Group a alone may have up to `LONE` times `budget`; past that the window is (a + 1, 0), left as it is.
    """
    inside, last = 0, 1
    for b in range(a, len(order)):
        inside |= order[b]
        count = model.downsets(inside, budget)
        if count > budget:
            if b > a:
                return b, last
            count = model.downsets(inside, LONE * budget)
            return a + 1, count if count <= LONE * budget else 0
        last = count
    return len(order), last

