"""The oracle of `engine/allocation/baselines.py`: COSMA's comparison schemes as first written, each step tried on a
copy of the whole arena, first fit by sorting the resident tensors, and a scan of them for those that end after
each step. The same plans, in time quadratic in the ops (a fan of 12,000 readers: 50-60 s against 0.3 s)."""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field

from engine.allocation.lifetimes import OutOfTime
from engine.allocation.record import Placement, needs
from engine.graph import Graph

POLICIES = ("belady", "greedy")


@dataclass
class _Arena:
    """Mutable state of one baseline run (copied before each step so a failed step can be redone)."""

    budget: int
    resident: dict = field(default_factory=dict)  # tensor -> (address, step it arrived)
    host: set = field(default_factory=set)  # tensors DRAM holds
    fresh: set = field(default_factory=set)  # inputs/weights whose next load is compulsory
    placements: list = field(default_factory=list)
    spills: list = field(default_factory=list)
    retrievals: list = field(default_factory=list)

    def copy(self) -> _Arena:
        return _Arena(self.budget, dict(self.resident), set(self.host), set(self.fresh), list(self.placements),
                      list(self.spills), list(self.retrievals))

    def first_fit(self, size: int, sizes: dict) -> int | None:
        cur = 0
        for addr, a in sorted((addr, a) for a, (addr, _) in self.resident.items()):
            if addr - cur >= size:
                return cur
            cur = max(cur, addr + sizes[a])
        return cur if self.budget - cur >= size else None


def run(graph: Graph, budget: int, order, policy: str, *, include_params: bool, word_bits: int, carry=None,
        later: frozenset[str] = frozenset(), deadline: float = math.inf):
    """Placements, spills and retrievals of `order` under `budget` with replacement `policy`.

    By default the run starts from an empty chip; given a `carry` (a segment's starting
    state) it starts from that, and tensors in `later` count as read right after `order`.
    Raises `OutOfTime` when `deadline` (a perf_counter time) passes before the run ends.
    """
    uses: dict[str, list[int]] = {}
    steps = []
    for t, op in enumerate(order):
        reads, writes = needs(graph, op, include_params)
        steps.append((reads, writes))
        for a in reads + writes:
            uses.setdefault(a, []).append(t)
    for a in later:
        uses.setdefault(a, []).append(len(order))
    sizes = {a: graph.tensors[a].nbytes(word_bits) for a in uses}
    if carry is None:
        external = {a for reads, _ in steps for a in reads} - {a for _, writes in steps for a in writes}
        arena = _Arena(budget, host=set(external), fresh=set(external))
    else:
        arena = _Arena(budget, {a: (addr, 0) for a, addr in carry.resident.items() if a in uses},
                       set(carry.host), set(carry.fresh))
    ctx = _Context(sizes, uses, policy, frozenset(graph.outputs))
    for t, (reads, writes) in enumerate(steps):
        if deadline < math.inf and time.perf_counter() > deadline:
            raise OutOfTime(f"baseline '{policy}' stopped at step {t} of {len(steps)} by the deadline")
        trial = arena.copy()
        if not _step(trial, ctx, t, reads, writes, flush=False):
            trial = arena.copy()
            _step(trial, ctx, t, reads, writes, flush=True)
        arena = trial
        for a in [a for a in arena.resident if uses[a][-1] <= t]:
            addr, since = arena.resident.pop(a)
            arena.placements.append(Placement(a, since, t, addr, sizes[a]))
    end = len(order) - 1
    arena.placements += [Placement(a, since, end, addr, sizes[a]) for a, (addr, since) in arena.resident.items()]
    return (sorted(arena.placements, key=lambda p: (p.first_step, p.address)), sorted(arena.spills, key=_by_step),
            sorted(arena.retrievals, key=_by_step))


def _by_step(pair):
    return pair[1], pair[0]


@dataclass(frozen=True)
class _Context:
    sizes: dict
    uses: dict  # tensor -> sorted steps that read or write it
    policy: str
    outputs: frozenset

    def next_use(self, a: str, t: int) -> int:
        steps = self.uses[a]
        i = bisect.bisect_right(steps, t)
        return steps[i] if i < len(steps) else 1 << 60

    def eviction_cost(self, arena: _Arena, a: str) -> int:
        """Bytes evicting `a` costs: its spill (if DRAM has no copy) and the retrieval it will need."""
        return self.sizes[a] * (1 + (a not in arena.host))


def _step(arena: _Arena, ctx: _Context, t: int, reads, writes, *, flush: bool) -> bool:
    """Bring the reads of step t on chip and create its writes; False if the op's own tensors block the arena."""
    pinned = set(reads) | set(writes)
    if flush:
        for a in list(arena.resident):
            _evict(arena, ctx, a, t)
    for a in reads:
        if a in arena.resident:
            continue
        if not _place(arena, ctx, a, t, pinned):
            return False
        if a in arena.fresh:
            arena.fresh.discard(a)  # compulsory first load
        else:
            arena.retrievals.append((a, t))
    for a in writes:
        if not _place(arena, ctx, a, t, pinned):
            return False
        if a in ctx.outputs:
            arena.host.add(a)  # its write-back is compulsory, so DRAM holds it from now on
    return True


def _place(arena: _Arena, ctx: _Context, a: str, t: int, pinned: set) -> bool:
    size = ctx.sizes[a]
    while True:
        addr = arena.first_fit(size, ctx.sizes)
        if addr is not None:
            arena.resident[a] = (addr, t)
            return True
        if ctx.policy == "belady":
            victims = [v for v in arena.resident if v not in pinned]
            if not victims:
                return False
            _evict(arena, ctx, max(victims, key=lambda v: (ctx.next_use(v, t), ctx.sizes[v], v)), t)
        else:
            window = _cheapest_window(arena, ctx, size, pinned)
            if window is None:
                return False
            for v in window:
                _evict(arena, ctx, v, t)


def _cheapest_window(arena: _Arena, ctx: _Context, size: int, pinned: set):
    """Tensors to evict to free `size` contiguous bytes at least cost (lowest address on ties), or None.

    An optimal window can slide down until it starts at 0 or at the end of a block, so
    those starts are the only candidates.
    """
    blocks = sorted((addr, addr + ctx.sizes[v], v) for v, (addr, _) in arena.resident.items())
    best = None
    for start in sorted({0} | {end for _, end, _ in blocks}):
        if start + size > arena.budget:
            break
        inside = [v for lo, hi, v in blocks if lo < start + size and hi > start]
        if any(v in pinned for v in inside):
            continue
        cost = sum(ctx.eviction_cost(arena, v) for v in inside)
        if best is None or cost < best[0]:
            best = (cost, inside)
    return None if best is None else best[1]


def _evict(arena: _Arena, ctx: _Context, a: str, t: int) -> None:
    """Take `a` off chip before step t, writing it to DRAM first if DRAM has no copy."""
    addr, since = arena.resident.pop(a)
    arena.placements.append(Placement(a, since, t - 1, addr, ctx.sizes[a]))
    if a not in arena.host:
        arena.spills.append((a, t))
        arena.host.add(a)
