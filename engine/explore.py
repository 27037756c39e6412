"""`evaluate`: run the engine's parts in order on one network and accelerator, into one `Report`.

Each part that fails on this input (an infeasible budget, an unsupported shape) leaves
its error message in `Report.errors` instead of sinking the whole report, so the
dashboard can show an honest partial result.
"""

from __future__ import annotations

import copyreg
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from engine.accelerator import Accelerator
from engine.blocking import layer_access_counts
from engine.energy import EnergyBreakdown, energy_breakdown, op_accesses
from engine.errors import EngineError, UnknownNameError
from engine.fusion.memo import Memo
from engine.graph import Graph, OpKind
from engine.limit import NetworkLimit, network
from engine.mapping import MappedPlan
from engine.mapping.objective import check_objective, refine
from engine.mapping.plan import ALIKE, map_plan
from engine.partition import Partition, partition

if TYPE_CHECKING:  # imported where they run, for their cost (measured in a fresh interpreter after this module):
    # the fusion searches load the compiled kernel (Numba, llvmlite, networkx: 1.1 CPU s), allocation pandas, PuLP
    # and HiGHS (0.5 s), module reuse networkx (0.13 s), the frames pandas (0.3-0.4 s); a limit curve or a dashboard
    # page that never evaluates does not pay them. The parts above load numpy and nothing heavier.
    import pandas as pd

    from engine.allocation import Allocation
    from engine.fusion import FusionPlan
    from engine.module_reuse import ModulePlan

KB = 1024
CURVE_BUFFERS_KB = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def read_only(items: dict) -> MappingProxyType:
    """A read-only view of `items`: how a pickled Report's mappings are made again."""
    return MappingProxyType(items)


# a Report's read-only mappings pickle as copies of their dicts: reports come back from the dashboard's worker processes
copyreg.pickle(MappingProxyType, lambda proxy: (read_only, (dict(proxy),)))


class EvaluationStopped(EngineError):
    """`evaluate` was told to stop (its `should_stop` said so) before it finished."""


@dataclass(frozen=True, eq=False)
class Report:
    """Everything the dashboard shows for one (network, accelerator, options) choice.

    Compared and hashed by identity, so what a view derives from a report can be cached per report.
    """

    graph: Graph
    acc: Accelerator
    plans: MappingProxyType[str, FusionPlan]  # fusion method -> its plan
    energy: MappingProxyType[str, EnergyBreakdown]  # fusion method -> its plan's energy
    oracle_bytes: int
    allocation: Allocation | None = None
    budget_bytes: int | None = None
    partition: Partition | None = None
    modules: ModulePlan | None = None
    errors: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))  # part -> message
    limit: NetworkLimit | None = None  # at the accelerator's buffer
    mappings: MappingProxyType[str, MappedPlan] | None = None  # method -> its plan mapped to the MACs ("mapping")
    objective: str = "dram_bytes"  # what the plans minimise (engine.mapping.objective.OBJECTIVES)

    def groups_frame(self, method: str) -> pd.DataFrame:
        """One row per fused group of `method`: ops, DRAM bytes split, sub-groups."""
        import pandas as pd

        plan = self.plans[method]
        rows = []
        for i, (grp, cost) in enumerate(zip(plan.groups, plan.costs)):
            rows.append({"group": i, "ops": " ".join(grp), "n_ops": len(grp), "dram_bytes": cost.dram_bytes,
                         "fmap_in_bytes": cost.fmap_in_bytes, "fmap_out_bytes": cost.fmap_out_bytes,
                         "param_bytes": cost.param_bytes, "subgroups": cost.subgroups})
        return pd.DataFrame(rows)

    def summary_frame(self) -> pd.DataFrame:
        """One row per fusion method: DRAM bytes, groups, energy and latency, status and proven gap (None: unknown).

        `x_limit` is the plan's DRAM bytes over the fused limit (engine.limit): how far any plan could still go.
        """
        import pandas as pd

        rows = []
        fused = self.limit.fused_bytes if self.limit is not None else None
        for method, plan in self.plans.items():
            e = self.energy[method]
            rows.append({"method": method, "dram_bytes": plan.dram_bytes, "groups": len(plan.groups),
                         "energy_uJ": round(e.total_pj / 1e6, 1), "latency_ms": round(e.latency_s * 1e3, 3),
                         "x_oracle": round(plan.dram_bytes / self.oracle_bytes, 2) if self.oracle_bytes else None,
                         "x_limit": round(plan.dram_bytes / fused, 2) if fused else None,
                         "status": plan.status, "gap": None if plan.gap is None else round(plan.gap, 3)})
        return pd.DataFrame(rows)

    def to_json(self) -> str:
        """The whole report as JSON (network with the sizes it assumed, accelerator, per-method groups and costs,
        allocation, errors)."""
        out = {
            "network": {"name": self.graph.name, "batch": self.graph.batch, "ops": len(self.graph.ops),
                        "macs": self.graph.macs, "params": self.graph.params,
                        "assumptions": list(self.graph.assumptions)},
            "accelerator": self.acc.as_dict(),
            "oracle_bytes": self.oracle_bytes,
            "limit": None if self.limit is None else {"layerwise_bytes": self.limit.layerwise_bytes,
                                                      "fused_bytes": self.limit.fused_bytes},
            "fusion": {m: {"dram_bytes": p.dram_bytes, "groups": [list(g) for g in p.groups],
                           "energy_pj": self.energy[m].as_dict(), "latency_s": self.energy[m].latency_s}
                       for m, p in self.plans.items()},
            "errors": dict(self.errors),
        }
        if self.allocation is not None:
            a = self.allocation
            out["allocation"] = {"method": a.method, "status": a.status, "budget_bytes": self.budget_bytes,
                                 "offchip_bytes": a.offchip_bytes, "peak_bytes": a.peak_bytes, "order": list(a.order),
                                 "spills": [list(s) for s in a.spills], "retrievals": [list(r) for r in a.retrievals]}
        return json.dumps(out, indent=1, default=str)


ACCESS_MODELS = ("dataflow", "blocking", "mapping")


def evaluate(graph: Graph, acc: Accelerator, *, methods=("dnnvm", "efficient_s", "optimus"),
             allocation: str | None = None, budget="M_H", time_limit_s: float = 10.0,
             cpu_kinds=(), modules: bool = False, access_model: str = "mapping", objective: str = "dram_bytes",
             should_stop: Callable[[], bool] | None = None) -> Report:
    """Fuse with each method, price the energy, and (optionally) allocate, partition and plan modules.

    `access_model` prices each plan by one mapping of it from DRAM to the MACs ("mapping": each fused group's
    tile loop with every op's nest below it, `engine.mapping`), by each layer's best loop blocking on its own
    (Yang et al.; "blocking", the plan's DRAM bytes), or by the PE array's dataflow blocks ("dataflow", fast).
    `objective` is what each method's plan minimises: "dram_bytes" (the searches' own answers), or "energy",
    "latency" or "edp" of the plan's mapping (`engine.mapping.refine`, from the method's plan; "mapping" only),
    each fused group then keeping or recomputing its halos, whichever lowers it (`engine.mapping.map_plan`).
    `should_stop` is asked before each part (each method's search, the energy, the limit); once it
    says True the call raises `EvaluationStopped` (a closed dashboard page's work ends there).
    """
    from engine.fusion import fuse_each, oracle_bytes

    if access_model not in ACCESS_MODELS:
        raise EngineError(f"access_model must be one of {', '.join(ACCESS_MODELS)}, got '{access_model}'")
    if check_objective(objective) != "dram_bytes" and access_model != "mapping":
        raise EngineError(f"objective '{objective}' is the plan's mapping's: give access_model='mapping' "
                          f"(got '{access_model}')")
    methods, cpu_kinds = _names(methods, "methods"), _names(cpu_kinds, "cpu_kinds")
    for kind in cpu_kinds:
        if kind not in {k.value for k in OpKind}:
            raise UnknownNameError("op kind in cpu_kinds", kind, [k.value for k in OpKind])
    def check(part: str) -> None:
        if should_stop is not None and should_stop():
            raise EvaluationStopped(f"evaluation of '{graph.name}' on '{acc.name}' stopped before {part}")

    found = fuse_each(graph, acc, methods, before=lambda m: check(f"the '{m}' search"))  # one model for all methods
    alike = Memo(ALIKE)  # the methods' plans share most groups' mappings and band nests (refine's too)
    plans = {m: refine(graph, found[m], acc, objective, mapped=alike) for m in methods}
    check("the energy")
    mapped = None
    if access_model == "mapping":
        mapped = {m: map_plan(graph, plans[m], acc, mapped=alike, objective=objective) for m in methods}
        energy = {m: mapped[m].energy for m in methods}
    else:
        price = blocked_energy if access_model == "blocking" else energy_breakdown
        energy = {m: price(graph, plans[m], acc) for m in methods}
    errors: dict[str, str] = {}
    alloc = budget_bytes = part = mods = None
    if allocation:
        try:
            alloc, budget_bytes = allocate_for_budget(graph, acc, allocation, budget, time_limit_s)
        except EngineError as err:
            errors["allocation"] = str(err)
    if cpu_kinds:
        try:
            part = partition(graph, lambda op: op.kind.value not in cpu_kinds)
        except EngineError as err:
            errors["partition"] = str(err)
    if modules:
        try:
            from engine.module_reuse import plan_modules

            mods = plan_modules(graph, acc)
        except EngineError as err:
            errors["modules"] = str(err)
    limit = None
    check("the attainable limit")
    try:
        limit = network(graph, acc)
    except EngineError as err:
        errors["limit"] = str(err)
    return Report(graph, acc, MappingProxyType(plans), MappingProxyType(energy), oracle_bytes(graph, acc),
                  alloc, budget_bytes, part, mods, MappingProxyType(errors), limit,
                  None if mapped is None else MappingProxyType(mapped), objective)


def _names(value, what: str) -> tuple[str, ...]:
    """`value` as a tuple of names: one bare string is one name (not its letters); anything else must hold strings."""
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise EngineError(f"{what} must be a name or a list of names, got {value!r}") from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise EngineError(f"{what} must hold names (strings), got {bad[0]!r}")
    return names


def blocked_energy(graph: Graph, plan, acc: Accelerator):
    """The plan's energy with buffer and RF accesses taken from each layer's best blocking (Yang et al.).

    DRAM traffic stays the plan's (fusion decides what crosses the chip boundary); the
    buffer, RF and PE-array words and energies of every op with a loop nest are those of its
    least-energy blocking on `acc`'s per-operand hierarchy and PE array
    (`engine.blocking.layer_access_counts`); ops without one (element-wise, concat, ...) keep
    the dataflow model's counts.
    """
    base = energy_breakdown(graph, plan, acc)
    buffer = plan.dram_bytes / (acc.word_bits / 8)  # each DRAM word passes through the buffer once
    words = {"buffer": buffer, "rf": 0.0, "array": 0.0}
    pj = {"buffer": buffer * acc.energy_pj("buffer"), "rf": 0.0, "array": 0.0}
    for op in graph.ops:
        counts = layer_access_counts(graph, op, acc)
        if counts is None:
            a = op_accesses(graph, op, acc)
            for kind in words:
                words[kind] += getattr(a, kind)
                pj[kind] += getattr(a, kind) * acc.energy_pj(kind)
            continue
        for level in counts.levels:  # each level at its own per-word energies (per-operand hierarchies)
            if level.kind != "dram":
                words[level.kind] += level.reads + level.writes
                pj[level.kind] += level.energy_pj
    accesses = dict(base.accesses, **{kind: round(n) for kind, n in words.items()})
    return replace(base, buffer_pj=pj["buffer"], rf_pj=pj["rf"], array_pj=pj["array"],
                   accesses=tuple(accesses.items()))


def budget_bytes_for(graph: Graph, acc: Accelerator, budget, *, time_limit_s: float = 60.0) -> int:
    """A budget given as 'M_R', 'M_H', 'M_P' (COSMA's three; M_P's MPMF order within `time_limit_s`) or bytes."""
    from engine.allocation import budgets

    if isinstance(budget, str):
        names = ("M_R", "M_H", "M_P")
        if budget not in names:
            raise EngineError(f"budget must be one of {', '.join(names)} or a number of bytes, got '{budget}'")
        return int(budgets(graph, word_bits=acc.word_bits, time_limit_s=time_limit_s)[names.index(budget)])
    if budget <= 0:
        raise EngineError(f"budget must be a positive number of bytes, got {budget}")
    return int(budget)


def allocate_for_budget(graph: Graph, acc: Accelerator, method: str, budget, time_limit_s: float):
    """(Allocation, budget bytes) for a budget named as COSMA does ('M_R', 'M_H', 'M_P') or in bytes."""
    from engine.allocation import allocate

    nbytes = budget_bytes_for(graph, acc, budget, time_limit_s=time_limit_s)  # the dashboard's wait stays bounded
    return allocate(graph, nbytes, method=method, time_limit_s=time_limit_s, word_bits=acc.word_bits), nbytes


# curve rows of engine.limit's bounds, when asked for: layer by layer, fused (tight where the segmentation sets it),
# and the per-op fused bound where it lies below the tight one
LIMIT_ROWS = ("limit_layerwise", "limit_fused", "limit_fused_valid")


def buffer_curve(graph: Graph, acc: Accelerator, methods, buffers_kb=CURVE_BUFFERS_KB, *,
                 limits: bool = False) -> pd.DataFrame:
    """DRAM bytes of every method and the Oracle at each buffer size: tidy (buffer_kb, method, dram_mb)."""
    import pandas as pd

    return pd.DataFrame([row for kb in buffers_kb for row in curve_rows(graph, acc, tuple(methods), kb, limits=limits)])


def curve_rows(graph: Graph, acc: Accelerator, methods: tuple[str, ...], buffer_kb: int, *,
               limits: bool = False) -> tuple[dict, ...]:
    """`buffer_curve`'s rows at one size: each method's DRAM MB, then the Oracle's (the dashboard draws each size as it comes).

    `limits` adds the layer-by-layer and fused limits (engine.limit) as methods LIMIT_ROWS, after the Oracle: the
    fused one as `NetworkLimit.fused_bytes`, and its per-op bound `valid_bytes` too where that is lower.
    """
    from engine.fusion import fuse, oracle_bytes

    sized = acc.with_buffer(buffer_kb * KB)
    # the curve shows traffic only: no lower bound for a beam (seconds on NAS cells)
    rows = [{"buffer_kb": buffer_kb, "method": m, "dram_mb": fuse(graph, sized, method=m, bound=False).dram_bytes / 1e6}
            for m in methods]
    rows.append({"buffer_kb": buffer_kb, "method": "oracle", "dram_mb": oracle_bytes(graph, acc) / 1e6})
    if limits:
        lim = network(graph, sized)
        bounds = (lim.layerwise_bytes, lim.fused_bytes, lim.valid_bytes if lim.valid_bytes < lim.fused_bytes else None)
        rows += [{"buffer_kb": buffer_kb, "method": name, "dram_mb": nbytes / 1e6}
                 for name, nbytes in zip(LIMIT_ROWS, bounds) if nbytes is not None]
    return tuple(rows)
