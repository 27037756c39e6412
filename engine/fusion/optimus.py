"""Optimus's DAG fusion search (Alg. 1), restated over down-sets so that it is exact.

A partition whose contracted graph is acyclic is exactly a chain of down-sets
(predecessor-closed op sets) 0 = S0 < S1 < ... < Sk = V, group i being Si - S(i-1);
so the minimum over the fusion space is a shortest path over down-sets:

    cost(S) = min over groups G with S - G a down-set of cost(S - G) + MemoryCost(G)    (Eq. 2, restated)

where G is weakly connected and fits. Eq. 2 as printed adds vertices one at a time
in reverse topological order and fuses the new vertex v0 with one group of the
optimum for the rest; that misses optima (docs/fusion.md gives the cases), so this
module tabulates cost over down-sets instead. From each down-set S the groups are
the down-sets of the remaining graph, enumerated once each (a group grows only by
an op after its last one in topological order, which keeps it a down-set) and cut
off as soon as the finest tiles stop fitting: fit is monotone as a group grows
upward, so nothing grown from a misfit fits either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.errors import EngineError
from engine.fusion import core, dnnvm, efficient_s
from engine.fusion.cost import Capacity, fits, least_bytes, params_stay
from engine.fusion.floor import split_plan, whole_plan
from engine.fusion.model import FusionModel
from engine.fusion.sized import SizedModel, dram_bytes
from engine.graph import OpKind

INF = float("inf")
WIDE_OPS = 2048  # graphs larger than this (no zoo network: ResNet-1202 has 1,807 ops) get a narrower beam
FEW_DOWNSETS = 2800  # graphs with at most this many down-sets are searched without limits: the search evaluates at
# most D(D+1)/2 <= 3.9 million groups (a group G from the down-set S is the down-set S | G over S); Llama-3-8B
# prefill (2,469) evaluates 551,037 at 128 MB on tpu-v4i (0.6 s CPU) and 2.8 million at 1 GB (8 s, as its beam took)


@dataclass(frozen=True)
class Limits:
    """Where the exact search turns into a beam: down-sets kept per size, groups tried per down-set.

    Up to `total` groups evaluated the limits are `states` and `groups`; past it the
    beam narrows to `narrow_states` and `narrow_groups` so that any graph finishes.
    No network whose Optimus Table 5 figures we compare with reaches them (GoogLeNet
    keeps at most 13 down-sets of one size and evaluates ~107,000 groups at 2 MB);
    NAS cells do, and their plans say "beam".
    """

    states: int = 1000
    groups: int = 20000
    total: int = 400_000
    narrow_states: int = 4
    narrow_groups: int = 250

    @classmethod
    def for_ops(cls, n: int) -> Limits:
        """The limits for a graph of `n` ops: past WIDE_OPS the groups per down-set, the groups before the beam
        narrows and the narrow beam's groups shrink in proportion, so that the work (down-set sizes x groups x
        their growth, each over all ops) stays near a graph of WIDE_OPS's."""
        if n <= WIDE_OPS:
            return cls()
        return cls(groups=max(250, cls.groups * WIDE_OPS // n), total=cls.total * WIDE_OPS // n,
                   narrow_groups=max(8, cls.narrow_groups * WIDE_OPS // n))


EXACT = Limits(states=1 << 62, groups=1 << 62, total=1 << 62)  # a search that never turns into a beam


def limits_for(model: FusionModel) -> Limits:
    """The whole search's limits: none for a graph of at most FEW_DOWNSETS down-sets (its work is bounded by their
    pairs), else `Limits.for_ops` (the count is cached with the model: it does not depend on the buffer)."""
    count = model.counts.get_or_make(FEW_DOWNSETS, lambda: model.downsets((1 << model.n) - 1, FEW_DOWNSETS))
    return EXACT if count <= FEW_DOWNSETS else Limits.for_ops(model.n)


@dataclass(frozen=True)
class Chain:
    """A chain of down-sets found by `chain_search`: its groups, the work done, and which code found it.

    `path` names the implementation that ran ("compiled": `engine.fusion.core`, the engine's; "python": the
    tests' reference, tests/fusion_reference.py). It is left out of equality, so two paths that found the same
    chain compare equal and a test asserts the path on its own.
    """

    groups: tuple[int, ...]  # group masks in execution order; empty when no chain reaches the end
    evaluated: int  # groups examined
    exact: bool  # False when the search outgrew `Limits` and kept a beam
    total: float  # the chain's DRAM bytes (inf when there is none); under `bound_only`, the least sum of bounds
    path: str = field(default="compiled", compare=False)


class KernelLimitError(EngineError):
    """A group the compiled search cannot cost: more than 63 of its members that may hold T_c channels are open
    at once (`core.isoa._isoa` keys its states by one machine word)."""


def ideal_chain(model: FusionModel, cap: Capacity, *, whole_fanout: bool = False, max_size: int = 0,
                limits: Limits = Limits()) -> tuple[list[int], int, bool]:
    """Group masks of a minimum-cost chain of down-sets, in execution order, groups evaluated, and exactness.

    `whole_fanout` admits only groups that hold all consumers of a member or none of them,
    and `max_size` caps the group size (the on-line variant's rules 1 and 3). Past `limits`
    the search keeps going as a beam and reports itself inexact.
    """
    found = chain_search(model, cap, whole_fanout=whole_fanout, max_size=max_size, limits=limits)
    return list(found.groups), found.evaluated, found.exact


def chain_search(model: FusionModel, cap: Capacity, *, whole_fanout: bool = False, max_size: int = 0,
                 limits: Limits = Limits(), bound_only: bool = False, start: int = 0,
                 within: int | None = None) -> Chain:
    """`ideal_chain`, plus the chain's total and the path that ran (`Chain`).

    The search runs in `engine.fusion.core` (Numba), the engine's one implementation; the tests hold it to a
    Python reference (tests/fusion_reference.py) that visits the same down-sets and groups in the same order.
    A group the compiled ISOA program cannot hold (more than 63 members that may be chunked open at once)
    raises `KernelLimitError`: nothing falls back silently.

    `start` and `within` (the windows of `engine.fusion.polish`): chains from the down-set
    `start` to `start | within` that group only the ops `within`, the rest fixed; each group
    is costed alone, so the total is what those groups add to any plan holding `start`'s.

    `bound_only` (the windows of `engine.fusion.bound`): groups need not be connected and
    each costs a lower bound on its traffic (once-loaded bytes plus the parameter reloads it
    surely pays; a lone op, its own schedule's traffic), so the total is the
    least sum of those bounds over chains of down-sets, not a plan's traffic.
    """
    n = model.n
    ops = (1 << n) - 1 if within is None else within
    # interchangeable ops run in index order (a symmetry of the whole search only: windows start anywhere)
    twin = _twins(model) if within is None and not start and not bound_only else [-1] * n
    twinned = any(t >= 0 for t in twin) and not whole_fanout and not max_size
    bound = _known_plan(model, cap) if twinned else INF  # fans: most down-sets cannot beat the layer-wise plan
    return _compiled_search(model, cap, whole_fanout, max_size, limits, start, ops, bound_only, twin, bound)


def _compiled_search(model: FusionModel, cap: Capacity, whole_fanout: bool, max_size: int, limits: Limits, start: int,
                     ops: int, bound_only: bool, twin: list[int], bound: float
                     ) -> Chain:
    """`chain_search` run by `core.search`; `KernelLimitError` when its ISOA program cannot hold a group."""
    n = model.n

    def bits(mask: int) -> np.ndarray:
        return core.bitset(mask, n)

    tables, work = core.tables(model), core.workspace(model)
    lone = core.lone_costs(*tables, *work[:5], bits(ops), cap.fmap, cap.param, cap.shared, cap.per_band, model.batch,
                           model.word_bits)  # DRAM bytes of each op alone; -1 where it cannot run
    ready = _first_ready(model, start, ops, twin)
    batch = 1 if cap.per_band else model.batch  # images that multiply parameter reloads
    options = core.search_options(
        room=cap.fmap, param_room=cap.param, shared=cap.shared, per_band=cap.per_band, batch=batch,
        word_bits=model.word_bits, max_size=max_size, online=whole_fanout, states=limits.states, groups=limits.groups,
        total=limits.total, narrow_states=limits.narrow_states, narrow_groups=limits.narrow_groups,
        bound_only=bound_only)
    chain, evaluated, exact, total, too_big = core.search(
        *tables, *work, len(model.tnames), bits(start), bits(ops), bits(ready), _owed(model), lone, options,
        np.array(twin, np.int64), float(bound))
    if too_big:
        raise KernelLimitError(
            f"graph '{model.graph.name}': a group keeps more than 63 members that may hold T_c channels open at "
            "once, more than the compiled search holds; fuse with method 'efficient_s' or 'dnnvm', or a smaller "
            "buffer (which keeps groups smaller)")
    groups = tuple(int.from_bytes(row.tobytes(), "little") for row in chain)
    return Chain(groups, evaluated, exact, int(total) if groups else INF, "compiled")


def _owed(model: FusionModel) -> int:
    """Bytes any partition moves at least once: unshared weights, network inputs read, network outputs."""
    weights = sum(b for b, shared in zip(model.own_weight_bytes, model.shares_weights) if not shared)
    ins = sum(model.tbytes[j] for j in range(len(model.tnames)) if model.producer[j] < 0 and model.consumer_mask[j])
    outs = sum(model.tbytes[j] for j in range(len(model.tnames)) if model.producer[j] >= 0 and model.is_graph_output[j])
    return weights + ins + outs


def _known_plan(model: FusionModel, cap: Capacity) -> float:
    """The total of the better of two plans any search may compare with: every op alone, and one group of
    all when it is connected and fits with its parameters on chip (inf when neither runs)."""
    everything = (1 << model.n) - 1
    lone = [dram_bytes(model, 1 << i, cap) for i in range(model.n)]
    runs = [c for c in lone if c is not None]
    plans = [sum(runs) if len(runs) == len(lone) else INF]
    if model.is_connected(everything) and fits(model, everything, cap) and params_stay(model, everything, cap):
        plans.append(least_bytes(model, everything))
    return min(plans)


def _first_ready(model: FusionModel, start: int, ops: int, twin: list[int]) -> int:
    """Ops of `ops` whose predecessors (and twin) are all in the down-set `start`."""
    return sum(1 << i for i in model.members(ops)
               if not model.pred[i] & ~start and (twin[i] < 0 or start >> twin[i] & 1))


_TWIN_KINDS = frozenset({OpKind.CONV, OpKind.DWCONV, OpKind.POOL, OpKind.ELTWISE, OpKind.NORM})


def _twins(model: FusionModel) -> list[int]:
    """Op -> the op just before it when the two are interchangeable, else -1.

    Two neighbours in index order of one kind and attributes, reading the same tensors, with unshared weights
    and outputs alike (bytes, rows, views, readers, being a network output) are swapped by an automorphism of
    the graph that keeps every other op's place, so every partition costs what its image does. Running such
    ops in index order (op i + 1 only with or after op i) therefore loses no optimum and makes one tensor
    read by N alike ops N + 1 down-sets of them instead of 2^N (as `engine.allocation.mpmf._twins` does for
    the footprint order).
    """
    ops, graph = model.graph.ops, model.graph

    def signature(i: int):
        op = ops[i]
        if op.kind not in _TWIN_KINDS or model.shares_weights[i]:
            return None
        outs = tuple((model.tbytes[j], model.tgeo[j], model.held[j], model.consumer_mask[j],
                      model.is_graph_output[j], model.views.get(model.tnames[j])) for j in model.outs[i])
        return (op.kind, op.inputs, op.kernel, op.stride, op.padding, op.dilation, op.groups, op.macs,
                tuple((graph.tensors[w].shape, model.weight_elems[w]) for w in op.weights), outs)

    marks = [signature(i) for i in range(model.n)]
    return [-1] + [i - 1 if marks[i] is not None and marks[i] == marks[i - 1] else -1 for i in range(1, model.n)]


def search(at: SizedModel) -> tuple[list[int], int, bool]:
    """The exact minimum over the whole fusion space; past the limits, the best of the beam and the baselines.

    A graph whose covered pieces run whole at the least traffic any partition can have is answered at once
    (`floor.whole_plan`), and so is one that runs in two groups cut where a cut costs least, at the least any
    partition that cuts it can pay (`floor.split_plan`)."""
    proven = whole_plan(at) or split_plan(at)
    if proven is not None:
        return proven, len(proven), True
    groups, evaluated, exact = ideal_chain(at.model, at.cap, limits=limits_for(at.model))
    if exact:
        return groups, evaluated, True
    options = [groups] + [baseline.search(at)[0] for baseline in (efficient_s, dnnvm)]
    return min(options, key=at.plan_bytes), evaluated, False


def compile_ahead() -> None:
    """Compile (or load from Numba's cache) every compiled function of the searches now, not on the first search.

    `make compiled` runs it, so that the first search does not wait the minute the compiler takes.
    """
    from engine import zoo
    from engine.accelerator import Accelerator
    from engine.fusion import fuse

    for method in ("optimus", "online"):
        fuse(zoo.build("squeezenet1_0", 1), Accelerator.preset("optimus"), method=method)
