"""`fuse` and `fuse_each`: a graph's fused groups by one of the searches (`METHODS`), each plan priced by `group_cost`.

`engine.fusion` re-exports these names, imported on first use (so that `engine.limit` loads the cost model's tables
without the compiled searches).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial

from engine.accelerator import Accelerator
from engine.errors import EngineError, UnknownNameError
from engine.fusion import dnnvm, efficient_s, none, online, optimus, sized, windowed
from engine.fusion.bound import lower_bound
from engine.fusion.cost import Capacity, model_of
from engine.fusion.model import FusionModel
from engine.fusion.plan import FusionPlan, build_plan, check_runnable
from engine.fusion.polish import improve
from engine.graph import Graph

# method name -> (search over a SizedModel: the graph's model at the buffer's capacity, status of its result)
METHODS = {
    "none": (none.search, "unfused"),
    "dnnvm": (dnnvm.search, "restricted"),
    "efficient_s": (efficient_s.search, "restricted"),
    "optimus": (optimus.search, "optimal"),
    "online": (online.search, "restricted"),
}

MAX_COUNT = 1 << 60  # bytes x positions of a tensor the compiled cost model multiplies (int64, with 8x to spare)

def _check_in_range(graph: Graph, acc: Accelerator) -> None:
    """Refuse a tensor whose bytes times its positions pass MAX_COUNT: the compiled cost model multiplies them
    (halo re-reads: bytes x rows x columns read) in 64-bit integers, and past that its plan would be silently
    wrong (an input 4 x 6 x 2^31 read 9 MB instead of 103 GB), not slow."""
    for t in graph.tensor_list:
        if t.is_weight:
            continue
        positions = math.prod(t.shape[2:]) if len(t.shape) > 2 else t.shape[-1] if t.shape else 1
        if t.nbytes(acc.word_bits) * positions > MAX_COUNT:
            raise EngineError(f"graph '{graph.name}': tensor '{t.name}' of shape {list(t.shape)} is too large to "
                              f"cost exactly ({t.nbytes(acc.word_bits):,} bytes over {positions:,} positions; "
                              f"fusion counts up to 2^60 of their product)")


def fuse(graph: Graph, acc: Accelerator, *, method: str = "optimus", reloads: str = "tile",
         bound: bool = True, polish: bool = True) -> FusionPlan:
    """Partition `graph` into fused operator-groups for `acc` with the search `method`.

    `reloads` picks how streamed parameters are counted (`cost.RELOADS`): "tile"
    (default, a row band of t_n images per parameter load) or "band" (Eq. 3 as printed).
    When the search ends as a beam, `bound` adds a proven lower bound on the optimum
    (`plan.lower_bound_bytes`, `engine.fusion.bound`; seconds on NAS cells); False skips it.
    `polish` re-solves an optimus beam's plan window by window (`engine.fusion.polish`: never
    worse; 0-8 % less traffic on NASNet for 0.1-2.6 s more); False keeps the beam's plan.
    Exact plans are left as they are. A graph of more than `windowed.WINDOW_ABOVE` ops is fused window by
    window (`engine.fusion.windowed`): an optimus plan then says "windowed", with its proven bound.
    """
    return fuse_each(graph, acc, (method,), reloads=reloads, bound=bound, polish=polish)[method]


def fuse_each(graph: Graph, acc: Accelerator, methods: tuple[str, ...], *, reloads: str = "tile", bound: bool = True,
              polish: bool = True, before: Callable[[str], None] | None = None) -> dict[str, FusionPlan]:
    """`fuse` with each of `methods` (method -> plan), all on one model of the graph, or past `windowed.WINDOW_ABOVE`
    ops on one model of each window (built once, not once per method: most of a windowed search's time).

    `before(method)` is called before each method's search (on each window): `evaluate` stops there when told to.
    """
    if not isinstance(graph, Graph) or not isinstance(acc, Accelerator):
        raise EngineError(f"fuse needs an engine.Graph and an engine.Accelerator, got {type(graph).__name__} and "
                          f"{type(acc).__name__} (load one with engine.load_network and engine.Accelerator.preset)")
    _check_in_range(graph, acc)
    for method in methods:
        if not isinstance(method, str) or method not in METHODS:
            raise UnknownNameError("fusion method", str(method), METHODS)
    try:
        if len(graph.ops) > windowed.WINDOW_ABOVE:
            def solve(part: Graph, model: FusionModel, method: str) -> FusionPlan:
                if before is not None:
                    before(method)
                share = efficient_s.WINDOWED_WORK * len(part.ops) // len(graph.ops)  # Efficient-S's work, by ops
                search = partial(efficient_s.search, work_limit=max(1, share)) if method == "efficient_s" else None
                return _fuse(part, acc, method, reloads, False, polish, model, search)

            return windowed.fuse_windows(graph, acc, tuple(methods), solve, cap=Capacity.of(acc, reloads),
                                         with_bound=bound)
        plans = {}
        for method in methods:
            if before is not None:
                before(method)
            plans[method] = _fuse(graph, acc, method, reloads, bound, polish, model_of(graph, acc))
        return plans
    except MemoryError:  # a table past what the process may allocate: refused before it was filled
        raise EngineError(f"graph '{graph.name}' ({len(graph.ops):,} ops) needs more memory than this process may "
                          f"use for method {', '.join(map(repr, methods))} on '{acc.name}'; try method 'dnnvm', a "
                          "smaller buffer (smaller groups), or fuse the network in parts") from None


def _fuse(graph: Graph, acc: Accelerator, method: str, reloads: str, bound: bool, polish: bool, model: FusionModel,
          search: Callable[[sized.SizedModel], tuple[list[int], int, bool]] | None = None) -> FusionPlan:
    """`fuse` once its arguments are checked, on `model` (the graph's): the method's search (or `search` in its
    place), its polish and bound, the plan."""
    search = search or METHODS[method][0]
    status = METHODS[method][1]
    start = time.perf_counter()
    at = sized.of(model, Capacity.of(acc, reloads))  # the buffer bound once
    check_runnable(at, acc)
    groups, evaluated, exact = search(at)
    if polish and method == "optimus" and not exact:
        groups, more = improve(at, groups)
        evaluated += more
    if not groups:
        raise EngineError(f"method '{method}' found no way to run '{graph.name}' on '{acc.name}'")
    seconds = time.perf_counter() - start
    floor = None if exact or not bound else lower_bound(at).bytes  # how far the beam may be from the optimum
    return build_plan(at, groups, method=method, buffer_bytes=acc.buffer_bytes, evaluated=evaluated,
                      seconds=seconds, status=status if exact else "beam", lower_bound=floor)
