"""COSMA's comparison schemes (Sec. V-A2): a fixed order, a TensorFlow Lite style arena, and a replacement policy.

The arena places each tensor, in order of allocation, at the lowest gap that fits (first
fit, as TFLite's simple memory arena). When nothing fits, a replacement policy evicts
tensors the current op does not use: Belady evicts the one read furthest in the future
(optimal for equal sizes, not here); greedy takes the locally cheapest decision, the
contiguous window whose evictions cost the fewest off-chip bytes now (spill, if DRAM has
no copy, plus the retrieval each victim will need). Should the op's own tensors block
every window, the arena is flushed and the op's tensors re-placed from address 0, which
always fits a budget of at least M_R.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field

from engine.allocation.freelist import FreeList
from engine.allocation.lifetimes import OutOfTime
from engine.allocation.record import Placement, needs
from engine.graph import Graph

POLICIES = ("belady", "greedy")


@dataclass
class _Arena:
    """Mutable state of one baseline run. A step is tried on it with its changes journaled, so that a failed step
    is undone in the time it took (a copy of the whole state before each step made a run quadratic in the ops)."""

    budget: int
    resident: dict = field(default_factory=dict)  # tensor -> (address, step it arrived)
    host: set = field(default_factory=set)  # tensors DRAM holds
    fresh: set = field(default_factory=set)  # inputs/weights whose next load is compulsory
    placements: list = field(default_factory=list)
    spills: list = field(default_factory=list)
    retrievals: list = field(default_factory=list)
    journal: list = field(default_factory=list)  # (undo function, its argument), for the step being tried
    free: FreeList = field(init=False)  # the gaps between the resident tensors, for first fit (`hold`)

    def hold(self, sizes: dict) -> None:
        """Start the free list: the budget, less the blocks of the tensors resident at the start (a carried state)."""
        self.free = FreeList(self.budget)
        for a, (address, _) in self.resident.items():
            if not self.free.reserve(address, sizes[a]):
                raise RuntimeError(f"the carried tensor '{a}' at {address} overlaps another or leaves the budget")

    def arrive(self, a: str, address: int, size: int, t: int) -> None:
        """`a` on chip at `address` from step `t`."""
        self.resident[a] = (address, t)
        self.free.reserve(address, size)
        self.journal.append((self._unarrive, (a, size)))

    def leave(self, a: str, size: int) -> tuple[int, int]:
        """`a` off chip: the (address, step it arrived) it had."""
        where = self.resident.pop(a)
        self.free.release(where[0], size)
        self.journal.append((self._unleave, (a, where, size)))
        return where

    def _unarrive(self, what) -> None:
        a, size = what
        self.free.release(self.resident.pop(a)[0], size)

    def _unleave(self, what) -> None:
        a, where, size = what
        self.resident[a] = where
        self.free.reserve(where[0], size)

    def to_host(self, a: str) -> None:
        """DRAM holds a copy of `a` from now on."""
        if a not in self.host:
            self.host.add(a)
            self.journal.append((self.host.discard, a))

    def first_load(self, a: str) -> None:
        """`a`'s compulsory load is done: a later one is a retrieval."""
        self.fresh.discard(a)
        self.journal.append((self.fresh.add, a))

    def attempt(self) -> tuple[int, int, int]:
        """Start journaling a step: the lengths its records had, for `undo`."""
        self.journal.clear()
        return len(self.placements), len(self.spills), len(self.retrievals)

    def undo(self, lengths: tuple[int, int, int]) -> None:
        """Back to the state `attempt` saw."""
        for fn, arg in reversed(self.journal):
            fn(arg)
        self.journal.clear()
        for records, n in zip((self.placements, self.spills, self.retrievals), lengths):
            del records[n:]

    def first_fit(self, size: int) -> int | None:
        """The lowest address where `size` bytes fit between the resident tensors, or None."""
        return self.free.lowest(size)


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
    arena.hold(sizes)
    ctx = _Context(sizes, uses, policy, frozenset(graph.outputs))
    ending: list[list[str]] = [[] for _ in steps]  # step -> tensors last used there (off chip after it)
    for a, at in uses.items():
        if at[-1] < len(steps):
            ending[at[-1]].append(a)
    for t, (reads, writes) in enumerate(steps):
        if deadline < math.inf and time.perf_counter() > deadline:
            raise OutOfTime(f"baseline '{policy}' stopped at step {t} of {len(steps)} by the deadline")
        before = arena.attempt()
        if not _step(arena, ctx, t, reads, writes, flush=False):
            arena.undo(before)
            _step(arena, ctx, t, reads, writes, flush=True)
        for a in [a for a in ending[t] if a in arena.resident]:
            addr, since = arena.leave(a, sizes[a])
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
            arena.first_load(a)  # compulsory
        else:
            arena.retrievals.append((a, t))
    for a in writes:
        if not _place(arena, ctx, a, t, pinned):
            return False
        if a in ctx.outputs:
            arena.to_host(a)  # its write-back is compulsory, so DRAM holds it from now on
    return True


def _place(arena: _Arena, ctx: _Context, a: str, t: int, pinned: set) -> bool:
    size = ctx.sizes[a]
    while True:
        addr = arena.first_fit(size)
        if addr is not None:
            arena.arrive(a, addr, size, t)
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
    those starts are the only candidates. The blocks are apart and in address order, so the
    ones a window overlaps are a run of them that only moves up as the window does: one pass.
    """
    blocks = sorted((addr, addr + ctx.sizes[v], v) for v, (addr, _) in arena.resident.items())
    best = None
    first = stop = cost = held = 0  # the window overlaps blocks[first:stop]: their eviction cost, pinned ones
    for start in sorted({0} | {end for _, end, _ in blocks}):
        if start + size > arena.budget:
            break
        while stop < len(blocks) and blocks[stop][0] < start + size:
            v = blocks[stop][2]
            cost, held, stop = cost + ctx.eviction_cost(arena, v), held + (v in pinned), stop + 1
        while first < stop and blocks[first][1] <= start:
            v = blocks[first][2]
            cost, held, first = cost - ctx.eviction_cost(arena, v), held - (v in pinned), first + 1
        if not held and (best is None or cost < best[0]):
            best = (cost, first, stop)
    return None if best is None else [v for _, _, v in blocks[best[1]:best[2]]]


def _evict(arena: _Arena, ctx: _Context, a: str, t: int) -> None:
    """Take `a` off chip before step t, writing it to DRAM first if DRAM has no copy."""
    addr, since = arena.leave(a, ctx.sizes[a])
    arena.placements.append(Placement(a, since, t - 1, addr, ctx.sizes[a]))
    if a not in arena.host:
        arena.spills.append((a, t))
        arena.to_host(a)
