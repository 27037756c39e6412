"""A proven lower bound on the least DRAM traffic over the fusion space, for graphs the exact search cannot finish.

Cut the ops, in topological order, into windows W_1..W_m (each prefix union is a
down-set). Any valid partition's group G meets window k in a piece P = G & W_k, and
G's traffic is at least the sum over its pieces of

    f(P) = reads of tensors made in W_k outside P (or network inputs read only in W_k)
         + writes of tensors P makes that W_k outside P reads (or the network returns)
         + P's parameters, times the reloads P surely forces on G (Eq. 3, once if none)

each read and write counted in one window only. Tensors crossing into W_k from earlier
windows are free there (G may make them) and held on chip at min(T_c, C) channels, as a
member's ofmap under ISOA (Alg. 2) would be; a concat's or split's, which shares its
inputs' buffer, at none. With that accounting P's finest tiles are no larger than
G's (removing ops that feed no other member never grows Eq. 4's footprint, and the
earlier-window members of G hold at least those tiles), so P fits; and if P's
parameters cannot stay beside P's tiles, G's cannot stay beside G's, so G reloads them
at least as often as P's whole-image footprint demands (N x whole-image footprint / buffer, at least). The
pieces of one window also form a chain of down-sets of it (a path leaving and entering
one piece would leave and enter its group), and each piece's connected components
are pieces too (they share no tensor, and each fits), so the exact chain search of
`optimus` with f as group cost (`chain_search(bound_only=True)`) gives each window's
least sum, and the windows' sums plus the weights two ops share (loaded at least once,
left out of the windows) bound every valid partition from below.

Windows are ranges of the topological order with at most `budget` down-sets each (the
exact search's states), cut where the fewest bytes cross in all (they are what the
bound gives away), by a shortest path over cut positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.fusion import sized
from engine.fusion.cost import Capacity, least_bytes
from engine.fusion.model import FusionModel
from engine.fusion.optimus import EXACT, chain_search
from engine.graph import Graph

PLACE_DP_OPS = 700  # graphs up to this many ops (the NAS cells: 636) get their windows by the shortest path,
# larger ones greedily (the path costs a window's down-sets per op: 20 s on a chain of 1,000)
BUDGET = 1000  # down-sets per window: ~2 s on NASNet-A Mobile for 67.1 MB of the beam's 119.0 MB (batch 4, 128 KB)
INF = float("inf")


@dataclass(frozen=True)
class LowerBound:
    """A lower bound on the traffic of every valid partition, and how it was found."""

    bytes: int
    windows: tuple[tuple[int, int], ...]  # op index ranges [start, end) of the topological order
    groups_evaluated: int


def lower_bound(at: sized.SizedModel, *, budget: int = BUDGET) -> LowerBound:
    """The windows' exact least sums of piece bounds plus the shared weights; cached per capacity."""
    return at.results.get_or_make(("lower bound", budget), lambda: _lower_bound(at.model, at.cap, budget))


def lower_bound_of(model: FusionModel, cap: Capacity, *, budget: int = BUDGET) -> LowerBound:
    """`lower_bound` of a model no `SizedModel` keeps (a window of `engine.fusion.windowed`), uncached, its windows
    placed greedily (each as long as the budget allows)."""
    return _lower_bound(model, cap, budget, _greedy(model, budget))


def _lower_bound(model: FusionModel, cap: Capacity, budget: int,
                 cuts: tuple[tuple[int, int], ...] | None = None) -> LowerBound:
    """`lower_bound` computed afresh (over `cuts`, else `windows`)."""
    if _apart(model):  # a fan's readers (their shared input free): no window search, each op on its own
        return LowerBound(sum(least_bytes(model, 1 << i) for i in range(model.n)), ((0, model.n),), 0)
    placed = tuple(windows(model, budget=budget)) if cuts is None else cuts
    shared = shared_weight_bytes(model)
    total: float = shared  # plus each window's least sum of bounds (`Chain.total`)
    evaluated = 0
    for lo, hi in placed:  # a window of all ops is the model itself when no weight is shared
        sub = model if not shared and (lo, hi) == (0, model.n) else window_model(model, lo, hi)
        if _unlinked(model, lo, hi):  # every piece's ops apart: each op's once-loaded bytes, no search needed
            total += sum(least_bytes(sub, 1 << i) for i in range(sub.n))
            continue
        found = chain_search(sub, cap, limits=EXACT, bound_only=True)
        total += found.total
        evaluated += found.evaluated
    return LowerBound(int(total), placed, evaluated)


def _unlinked(model: FusionModel, lo: int, hi: int) -> bool:
    """Whether no two of the ops lo..hi-1 share a tensor: then every piece is apart, and its bound is at least the
    sum of its ops' once-loaded bytes (fmaps and parameters once, `cost.least_bytes`), which a lone op never beats."""
    inside = (1 << hi) - (1 << lo)
    return hi - lo > 1 and not any(model.link[i] & inside & ~(1 << i) for i in range(lo, hi))


def _apart(model: FusionModel) -> bool:
    """Whether the ops of `model` share no tensor that costs bytes (only free ones: a window's border), feed none
    of each other, read no parameters (nor streamed operands) and pass no softmax between them: then a group's
    `io` is the sum of its members' and no reload multiplies it, so every partition costs the sum of the ops'
    once-loaded bytes (`cost.least_bytes`), the search's own answer, found without it (the down-sets of k such
    ops are 2^k)."""
    if model.n < 2 or any(model.pred) or any(model.io(1 << i)[2] for i in range(model.n)):
        return False
    if any(qk >= 0 for qk, _ in model.spill_on) or any(s >= 0 for s in model.spill_off):
        return False
    return not any(readers & (readers - 1) and (model.tbytes[j] or model.stream_elems[j])
                   for j, readers in enumerate(model.consumer_mask))


def windows(model: FusionModel, *, budget: int = BUDGET) -> list[tuple[int, int]]:
    """Consecutive op ranges of at most `budget` down-sets each, cut so that the fewest bytes cross the cuts in all
    (independent of the buffer: cached on the model, so a new buffer size does not place them again)."""
    return list(model.windows.get_or_make(budget, lambda: _place(model, budget)))


def _place(model: FusionModel, budget: int) -> tuple[tuple[int, int], ...]:
    """`windows`, computed: a shortest path over cut positions (up to PLACE_DP_OPS ops; past it, each window as
    long as the budget allows, which costs one window's down-sets per window instead of per op)."""
    n = model.n
    if n > PLACE_DP_OPS:
        return _greedy(model, budget)
    cross = _crossings(model)
    best = [(0, 0)] + [(INF, 0)] * n  # cut position -> (bytes given away up to it, windows)
    back = [0] * (n + 1)
    for lo in range(n):
        for hi in _ends(model, lo, budget):
            cand = (best[lo][0] + (cross[hi] if hi < n else 0), best[lo][1] + 1)
            if cand < best[hi]:
                best[hi], back[hi] = cand, lo
    cuts, hi = [], n
    while hi:
        cuts.append((back[hi], hi))
        hi = back[hi]
    return tuple(cuts[::-1])


def _greedy(model: FusionModel, budget: int) -> tuple[tuple[int, int], ...]:
    """Windows each as long as the budget allows, from the first op on."""
    cuts: list[tuple[int, int]] = []
    lo = 0
    while lo < model.n:
        cuts.append((lo, _ends(model, lo, budget)[-1]))
        lo = cuts[-1][1]
    return tuple(cuts)


def _ends(model: FusionModel, lo: int, budget: int) -> list[int]:
    """Window ends lo+1.. whose window [lo, end) has at most `budget` down-sets (at least one end)."""
    ideals = [0]
    ends: list[int] = []
    for x in range(lo, model.n):
        need = model.pred[x] & ~((1 << lo) - 1)
        ideals += [d | 1 << x for d in ideals if not need & ~d]
        if len(ideals) > budget and ends:
            break
        ends.append(x + 1)
    return ends


def _crossings(model: FusionModel) -> list[int]:
    """Bytes crossing each cut 0..n (tensors made before op `cut` and read from it on: what a window boundary
    there gives away), in one pass: a tensor crosses the cuts after its producer up to its last reader."""
    diff = [0] * (model.n + 2)
    for j, p in enumerate(model.producer):
        readers = model.consumer_mask[j]
        if p >= 0 and readers.bit_length() - 1 > p:
            diff[p + 1] += model.tbytes[j]
            diff[readers.bit_length()] -= model.tbytes[j]
    cross, running = [], 0
    for c in range(model.n + 1):
        running += diff[c]
        cross.append(running)
    return cross


def shared_weight_bytes(model: FusionModel) -> int:
    """Bytes of the weights several ops read: loaded at least once by any partition."""
    shared = {w for i in range(model.n) if model.shares_weights[i] for w in model.weights[i]}
    return -(-sum(model.weight_elems[w] for w in shared) * model.word_bits // 8)


def window_model(model: FusionModel, lo: int, hi: int) -> FusionModel:
    """The ops lo..hi-1 as a graph of their own, with the border accounting of the module docstring."""
    graph = model.graph
    ops = graph.ops[lo:hi]
    inside = (1 << hi) - (1 << lo)
    made = {t for op in ops for t in op.outputs}
    free = {w: 0 for i in range(lo, hi) for w in model.weights[i] if model.shares_weights[i] or w in model.free}
    border = []
    for t in dict.fromkeys(t for op in ops for t in op.inputs if t not in made):
        j = model.tindex[t]
        p, geo = model.producer[j], model.tgeo[j]
        border.append(t)
        if t in model.free:  # free in the model itself (a window of engine.fusion.windowed): as it is there
            free[t] = model.held[j]
            continue
        if p < 0 and not model.consumer_mask[j] & ~inside:
            continue  # a network input read in this window only: read here, at full depth
        free[t] = 0 if geo is None or (p >= 0 and model.inplace[p]) else min(model.tp.t_c, geo.channels) * geo.w
    names = {t for op in ops for t in op.inputs + op.outputs + op.weights}
    sub = Graph.build(f"{graph.name}[{lo}:{hi}]", ops, [graph.tensors[t] for t in sorted(names)], tuple(border),
                      tuple(t for t in graph.outputs if t in made), graph.batch)
    return FusionModel(sub, model.tp, model.word_bits, free=free, views=model.views,
                       online=model.online)
