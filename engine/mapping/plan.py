"""`map_plan`: one mapping of a whole fusion plan from DRAM to the MACs, with its energy per component and latency.

Each group of the plan becomes a `GroupMapping`: a fused group's tile loop at the fusion level (fusion's row
bands and batch tiles, which fix its DRAM traffic) with each op's nest below it (`nest.tile_nest`), or a lone op
blocked on the whole hierarchy (`nest.lone_nest`). Energy is each level's reads and writes at that level's
per-word energies, as the blocking model charges them (a level pays for the words it serves to the level below
and for those written into it from below); latency per group is the larger of its compute time and its DRAM time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.accelerator import Accelerator
from engine.blocking.hierarchy import Hierarchy
from engine.energy import COMPONENTS, EnergyBreakdown
from engine.errors import UnknownNameError
from engine.fusion.cost import GroupCost, at_steps
from engine.fusion.memo import Memo
from engine.fusion.plan import FusionPlan
from engine.graph import Graph, OpKind
from engine.mapping import alike, recompute
from engine.mapping.nest import OpNest, band_counts, fusion_level, height_of, lone_nest, nest_memo, op_layer, tile_nest


@dataclass(frozen=True)
class GroupMapping:
    """One group's mapping: its tile loop at the fusion level, each op's nest, its traffic, time and energy.

    `schedule` is "fused" (the group runs in `row_steps` bands of `image_tiles` batch tiles, its tiles held in
    the fusion level: `footprint_bytes` of `capacity_bytes`), "bands" (one op in fusion's layer-wise bands, its
    band blocked below the fusion level) or "alone" (one op blocked on the whole hierarchy).
    `level_s` is each on-chip level's transfer time (its reads and writes at its read and write bandwidth, separate
    ports: the larger of the two), for the levels whose bandwidth is given; `bottleneck` names what bounds its
    latency: "compute", "DRAM" or such a level (a roofline per level, as AccelForge's FFM models it).
    `halos` says whether the bands keep the rows the next band's windows need or recompute them (LoopTree's choice,
    `engine.mapping.recompute`); `recomputed_macs` counts the MACs run again.
    """

    ops: tuple[str, ...]
    schedule: str
    row_steps: int
    image_tiles: int
    nests: tuple[OpNest, ...]
    dram_bytes: int
    footprint_bytes: int
    capacity_bytes: int
    energy_pj: tuple[tuple[str, float], ...]  # (component, pJ) in COMPONENTS order
    compute_s: float
    memory_s: float
    level_s: tuple[tuple[str, float], ...] = ()  # (on-chip level, transfer seconds), innermost first
    halos: str = "kept"  # a fused group's: "kept" (fusion's line buffer) or "recomputed" (`recompute.schedule`)

    @property
    def bounds_s(self) -> tuple[tuple[str, float], ...]:
        """Every bound on the group's latency: its compute, its DRAM transfers, each bandwidth-limited level's."""
        return (("compute", self.compute_s), ("DRAM", self.memory_s), *self.level_s)

    @property
    def latency_s(self) -> float:
        return max(t for _, t in self.bounds_s)

    @property
    def bottleneck(self) -> str:
        return max(self.bounds_s, key=lambda bound: bound[1])[0]

    @property
    def total_pj(self) -> float:
        return sum(pj for _, pj in self.energy_pj)

    @property
    def recomputed_macs(self) -> int:
        return sum(n.recomputed_macs for n in self.nests)

    def nest(self, op: str) -> OpNest:
        return next(n for n in self.nests if n.op == op)

    def tile_loop(self) -> tuple[str, ...]:
        """The group's loops at the fusion level, as text."""
        if self.schedule == "alone":
            return (f"# {self.ops[0]} alone: blocked on the whole hierarchy, DRAM included",)
        streamed = [n.op for n in self.nests if any(lv.kind == "dram" for lv in n.levels)]
        passing = (f"    # weights of {', '.join(streamed)} pass by from DRAM, each read once per band: in each nest "
                   "the weight block is outermost and the band's rows stream past it",) if streamed else ()
        halos = ((f"    # recompute: no row outlives its band (halos computed again), an op's rows dropped once read; "
                  f"{self.recomputed_macs:,} MACs run again",) if self.halos == "recomputed" else ())
        return (f"for image_tile in range({self.image_tiles}):", f"  for band in range({self.row_steps}):",
                f"    # the fusion level holds {self.footprint_bytes:,} of {self.capacity_bytes:,} bytes: "
                "the band's inputs, intermediates and outputs", *halos, *passing,
                *(f"    run {n.op}" for n in self.nests))


@dataclass(frozen=True)
class MappedPlan:
    """A fusion plan mapped down to the MACs: its groups' mappings and the energy and latency they add up to."""

    method: str
    groups: tuple[GroupMapping, ...]
    energy: EnergyBreakdown
    objective: str = "dram_bytes"  # what chose between kept and recomputed halos (`map_plan`)

    @property
    def dram_bytes(self) -> int:
        return sum(g.dram_bytes for g in self.groups)

    @property
    def macs(self) -> int:
        return sum(n.macs for g in self.groups for n in g.nests)

    @property
    def recomputed_macs(self) -> int:
        return sum(n.recomputed_macs for g in self.groups for n in g.nests)

    def group_of(self, op: str) -> GroupMapping:
        return next(g for g in self.groups if op in g.ops)


ALIKE = 4096  # mappings `map_plan` keeps by `alike.key` (distinct groups: a few hundred in the largest zoo network)
OBJECTIVES = ("dram_bytes", "energy", "latency", "edp")
SCORES: dict[str, Callable[[float, float], float]] = {"energy": lambda e, t: e, "latency": lambda e, t: t,
                                                      "edp": lambda e, t: e * t}  # (plan pJ, plan s) -> objective


def check_objective(objective: str) -> str:
    """`objective` if it is one of `OBJECTIVES`, else an error that lists them."""
    if objective not in OBJECTIVES:
        raise UnknownNameError("objective", str(objective), OBJECTIVES)
    return objective


def map_plan(graph: Graph, plan: FusionPlan, acc: Accelerator, *, mapped: Memo | None = None,
             objective: str = "dram_bytes") -> MappedPlan:
    """Map every group of `plan` on `acc` (see the module docstring), and total its energy and latency.

    With `objective` "dram_bytes" every fused group keeps its halos in fusion's bands (fusion's DRAM bytes); with
    "energy", "latency" or "edp" each fused group takes, of that and its `choices` (its halos kept in more bands, or
    recomputed in as many or fewer), the one that lowers the plan's objective most (group by group in the plan's
    order: exact for energy and latency, which add up over groups; one pass of coordinate descent for the product).
    A group that maps as one already mapped on `acc` (`alike.key`: the same ops, shapes and schedule up to names)
    takes that mapping renamed; `mapped` keeps them by accelerator and key (plans on several accelerators may
    share one), else a `Memo` of `ALIKE` for this call.
    """
    check_objective(objective)
    hierarchy = Hierarchy.from_accelerator(acc)
    mapped = Memo(ALIKE) if mapped is None else mapped
    nests = nest_memo(mapped, acc, hierarchy)  # shared by the groups, their choices and the counts of one height
    groups = []
    for cost in plan.costs:
        same = (acc, alike.key(graph, cost))  # a mapping is the accelerator's: its levels, array and energies
        hit = mapped.get(same)
        if hit is None:
            hit = mapped.put(same, map_group(graph, cost, acc, hierarchy, nests=nests))
        groups.append(alike.renamed(hit, cost.ops))
    if objective != "dram_bytes":
        score = SCORES[objective]
        energy, latency = sum(g.total_pj for g in groups), sum(g.latency_s for g in groups)
        for k, cost in enumerate(plan.costs):
            again = (acc, "choices", alike.key(graph, cost))
            options = mapped.get(again)
            if options is None:
                options = mapped.put(again, choices(graph, cost, acc, hierarchy, nests=nests))
            kept = groups[k]
            for option in options:
                e, t = energy - kept.total_pj + option.total_pj, latency - kept.latency_s + option.latency_s
                if score(e, t) < score(energy, latency) * (1 - 1e-9):
                    groups[k], energy, latency = alike.renamed(option, cost.ops), e, t
                    kept = groups[k]
    return MappedPlan(plan.method, tuple(groups), _breakdown(tuple(groups), acc), objective)


def map_group(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy, *,
              nests: Memo | None = None) -> GroupMapping:
    """One group's mapping: a lone op blocked whole, or fusion's tile loop with each op's nest inside a tile (`nests`:
    the band nests made before on `acc`, `nest.nest_memo`)."""
    capacity = fusion_level(hierarchy).bounded_bytes
    image_tiles = max(1, cost.subgroups // max(1, cost.row_steps))
    rows = dict(cost.tile_rows)
    if len(cost.ops) == 1:  # the least energy of the mappings that move no more than the plan counts
        options = _lone_options(graph, cost, acc, hierarchy, capacity, image_tiles, nests)
        within = [g for g in options if g.dram_bytes <= cost.dram_bytes] or options
        return min(within, key=lambda g: g.total_pj)
    made = tuple(tile_nest(graph, graph.op(name), acc, hierarchy, rows.get(name, 1 << 62), cost.row_steps,
                           cost.batch_tile, weights_streamed=streams(graph, name, cost), memo=nests) for name in cost.ops)
    return _group(cost, "fused", cost.row_steps, image_tiles, made, _dram_bytes(cost, made, acc),
                  cost.footprint_bytes, capacity, _boundary(cost, hierarchy, acc, *made), hierarchy, acc)


def recompute_options(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy, *,
                      nests: Memo | None = None) -> tuple[GroupMapping, ...]:
    """The group's mappings under recompute, one per band count whose schedule fits (`recompute.fitting`)."""
    return tuple(recompute_mapping(graph, cost, acc, hierarchy, s, nests=nests)
                 for s in recompute.fitting(graph, cost, acc))


def kept_options(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy, *,
                 nests: Memo | None = None) -> tuple[GroupMapping, ...]:
    """The fused group's mappings with its halos kept in more bands than fusion's (every such count fits: the
    footprint never grows with the count), one per count at which the band height of some op with a loop nest changes
    (`band_counts`, the counts the bound ranges over; between two such counts only the streamed parameters' passes
    grow)."""
    if cost.schedule != "fused" or len(cost.ops) < 2:
        return ()
    nested = [op for op in map(graph.op, cost.ops) if op_layer(graph, op) is not None]  # the others: one pass at any count
    counts = {r for op in nested for r in band_counts(height_of(graph.tensors[op.outputs[0]].shape),
                                                      cost.row_steps).values()}
    return tuple(map_group(graph, at_steps(graph, cost, acc, r), acc, hierarchy, nests=nests)
                 for r in sorted(counts - {cost.row_steps}))


def choices(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy, *,
            nests: Memo | None = None) -> tuple[GroupMapping, ...]:
    """What an objective other than DRAM bytes lets a group choose besides fusion's schedule: its halos kept in
    more bands (`kept_options`) or recomputed in as many or fewer (`recompute_options`)."""
    return (*kept_options(graph, cost, acc, hierarchy, nests=nests),
            *recompute_options(graph, cost, acc, hierarchy, nests=nests))


def recompute_mapping(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy,
                      s: recompute.RecomputeSchedule, *, nests: Memo | None = None) -> GroupMapping:
    """The group run as the recompute schedule `s`: each op's nest blocked for its tallest band and run as often as
    its computed rows fill such bands, the group inputs' rows read from DRAM once, streamed weights once per band."""
    image_tiles = max(1, cost.subgroups // max(1, cost.row_steps))
    once = cost.param_bytes if cost.params_resident else cost.param_bytes // max(1, cost.subgroups)
    computed, tallest = dict(s.computed), dict(s.band_rows)
    fin = sum(round(graph.tensors[t].nbytes(acc.word_bits) * rows / height) for t, rows, height in s.input_rows)
    again = replace(cost, row_steps=s.row_steps, subgroups=s.row_steps * image_tiles, fmap_in_bytes=fin,
                    footprint_bytes=s.footprint_bytes,
                    param_bytes=once if cost.params_resident else once * s.row_steps * image_tiles)
    made = tuple(tile_nest(graph, graph.op(name), acc, hierarchy, tallest[name], s.row_steps, cost.batch_tile,
                           weights_streamed=streams(graph, name, cost), recompute=(tallest[name], computed[name]),
                           memo=nests) for name in cost.ops)
    group = _group(again, "fused", s.row_steps, image_tiles, made, _dram_bytes(again, made, acc),
                   s.footprint_bytes, fusion_level(hierarchy).bounded_bytes, _boundary(again, hierarchy, acc, *made),
                   hierarchy, acc)
    return replace(group, halos="recomputed")


def streams(graph: Graph, name: str, cost: GroupCost) -> bool:
    """Whether the op's second operand (its weights, or K^T / V read as weights are) passes by instead of staying."""
    op = graph.op(name)
    return not cost.params_resident and bool(op.weights or set(op.inputs[1:2]) & set(cost.streamed))


def _dram_bytes(cost: GroupCost, nests: tuple[OpNest, ...], acc: Accelerator) -> int:
    """A banded group's DRAM bytes: its feature maps as fusion counts them, resident parameters once, and streamed
    ones as often as the nests read them."""
    return cost.fmap_in_bytes + cost.fmap_out_bytes + max(cost.param_bytes, _streamed_bytes(nests, acc))


def _streamed_bytes(nests: tuple[OpNest, ...], acc: Accelerator) -> int:
    """Bytes of the weights the nests read from DRAM (their biases, fusion counts with the parameters, aside)."""
    return round(sum(lv.reads for n in nests for lv in n.levels if lv.kind == "dram") * acc.word_bits / 8)


def _lone_options(graph: Graph, cost: GroupCost, acc: Accelerator, hierarchy: Hierarchy, capacity: int,
                  image_tiles: int, nests: Memo | None) -> list[GroupMapping]:
    """A lone op's mappings: blocked on the whole hierarchy, and in fusion's own bands with each band blocked below
    the buffer (fusion's line buffer reads each input row once, which the blocking's tiles cannot express)."""
    op = graph.op(cost.ops[0])
    if cost.schedule == "folded":  # a layout op its neighbours' addressing absorbs: no pass of its own
        folded = OpNest(op.name, None, 0.0, (), 0, 0, 0.0, 0, ("# folded into its neighbours' addressing",))
        return [_group(cost, "alone", 1, 1, (folded,), cost.dram_bytes, 0, capacity, _Boundary(), hierarchy, acc)]
    nest = lone_nest(graph, op, acc, hierarchy)
    dram = next((c for c in nest.levels if c.kind == "dram"), None)
    if dram is None:  # no loop nest: its traffic is fusion's
        return [_group(cost, "alone", 1, 1, (nest,), cost.dram_bytes, cost.footprint_bytes, capacity,
                       _boundary(cost, hierarchy, acc), hierarchy, acc)]
    bias = _bias_words(graph, op.name, nest)  # read once beside the nest, as fusion counts them with the parameters
    options = [_group(cost, "alone", 1, 1, (nest,), round((dram.reads + dram.writes + bias) * acc.word_bits / 8),
                      cost.footprint_bytes, capacity, _bias_boundary(bias, hierarchy), hierarchy, acc)]
    rows = dict(cost.tile_rows).get(op.name)
    height = height_of(graph.tensors[op.outputs[0]].shape)
    if cost.schedule in ("fused", "layerwise") and rows:
        steps = 1 if cost.row_steps == 1 else -(-height // rows)  # one step: the whole op is the band
        blocks = cost.row_steps // steps  # a matmul's blocks of output columns (a GEMM's layer-wise schedule)
        if steps * blocks == cost.row_steps and (blocks == 1 or op.kind is OpKind.MATMUL):  # no image column cuts
            banded = tile_nest(graph, op, acc, hierarchy, rows, steps, cost.batch_tile, max(blocks, cost.input_passes),
                               streams(graph, op.name, cost), memo=nests)
            options.append(_group(cost, "bands", cost.row_steps, image_tiles, (banded,),
                                  _dram_bytes(cost, (banded,), acc), cost.footprint_bytes, capacity,
                                  _boundary(cost, hierarchy, acc, banded), hierarchy, acc))
    return options


def _bias_words(graph: Graph, name: str, nest: OpNest) -> int:
    """Words of the op's parameters its loop nest does not read (its bias): the parameters fusion counts beyond
    the nest's weights."""
    layer = nest.layer
    kernel = layer.groups * layer.footprint("W", layer.dims) if layer is not None else 0
    return max(0, sum(graph.tensors[w].elements for w in graph.op(name).weights) - kernel)


@dataclass(frozen=True)
class _Boundary:
    """A group's traffic between DRAM and the fusion level outside its nests: pJ at each end, and the words written
    into and read out of the fusion level where the hierarchy charges both ends of a transfer."""

    dram_pj: float = 0.0
    store_pj: float = 0.0
    store_writes: float = 0.0
    store_reads: float = 0.0


def _bias_boundary(words: int, hierarchy: Hierarchy) -> _Boundary:
    """Reading `words` bias words from DRAM into the fusion level."""
    dram, store = hierarchy.levels[-1], fusion_level(hierarchy)
    if not hierarchy.both_ends:
        return _Boundary(words * dram.energy("W"))
    return _Boundary(words * dram.energy("W"), words * store.write_energy("W"), words)


def _boundary(cost: GroupCost, hierarchy: Hierarchy, acc: Accelerator, *nests: OpNest) -> _Boundary:
    """A group's traffic outside its nests: feature maps read and results written as fusion counts them, and the
    parameter bytes fusion counts beyond what the nests stream (whose reads are in their DRAM rows). Where the
    hierarchy charges both ends of a transfer (ZigZag's rule), the fusion level also pays for the words written
    into it from DRAM and read out of it to DRAM."""
    dram, store, word = hierarchy.levels[-1], fusion_level(hierarchy), acc.word_bits / 8
    fin, fout = cost.fmap_in_bytes / word, cost.fmap_out_bytes / word
    params = max(0, cost.param_bytes - _streamed_bytes(nests, acc)) / word
    dram_pj = fin * dram.energy("I") + params * dram.energy("W") + fout * dram.write_energy("O")
    if not hierarchy.both_ends:
        return _Boundary(dram_pj)
    return _Boundary(dram_pj, fin * store.write_energy("I") + params * store.write_energy("W") + fout * store.energy("O"),
                     fin + params, fout)


def _group(cost: GroupCost, schedule: str, steps: int, image_tiles: int, nests: tuple[OpNest, ...], dram_bytes: int,
           footprint: int, capacity: int, boundary: _Boundary, hierarchy: Hierarchy, acc: Accelerator) -> GroupMapping:
    if schedule != "alone":  # the fusion level holds the group's band: its occupancy is the band's footprint
        words = 8 / acc.word_bits
        nests = tuple(replace(n, levels=tuple(
            replace(lv, stored_words=round(footprint * words), capacity_words=round(capacity * words))
            if lv.kind == "buffer" and lv.capacity_words is None else lv for lv in n.levels)) for n in nests)
    energy = dict.fromkeys(COMPONENTS, 0.0)
    energy["dram"], energy["buffer"] = boundary.dram_pj, boundary.store_pj
    for n in nests:
        for c in n.levels:
            energy[c.kind] += c.energy_pj
        energy["mac"] += n.mac_pj
    # a nest's steps are one PE array's; `acc.arrays` arrays share each op's loops (the vector unit's are its own)
    cycles = sum(n.cycles / (acc.arrays if n.layer is not None else 1) for n in nests)
    return GroupMapping(cost.ops, schedule, steps, image_tiles, nests, dram_bytes, footprint, capacity,
                        tuple(energy.items()), cycles / acc.clock_hz, dram_bytes / acc.dram_bandwidth,
                        _level_seconds(nests, boundary, hierarchy, acc))


def _level_seconds(nests: tuple[OpNest, ...], boundary: _Boundary, hierarchy: Hierarchy,
                   acc: Accelerator) -> tuple[tuple[str, float], ...]:
    """Each on-chip level's transfer time where its bandwidth is given: the larger of its reads over its read
    bandwidth and its writes over its write bandwidth (separate ports, as AccelForge's tpu_v4i GlobalBuffer). A
    level below the fusion level has a copy per PE array, a level inside the array one per PE, each with that
    bandwidth. A pass over the buffer (a nest without loops) reads and writes the fusion level."""
    on_chip = hierarchy.on_chip
    index = {mem.name: i for i, mem in enumerate(on_chip)}
    top = len(on_chip) - 1
    reads, writes = [0.0] * len(on_chip), [0.0] * len(on_chip)
    reads[top], writes[top] = boundary.store_reads, boundary.store_writes
    for n in nests:
        for lv in n.levels:
            at = index.get(lv.level, top if lv.kind == "buffer" else None)
            if at is not None:
                reads[at] += lv.reads
                writes[at] += lv.writes
    out = []
    for i, mem in enumerate(on_chip):
        if mem.read_bw is None and mem.write_bw is None:
            continue
        copies = (acc.arrays if i < top else 1) * (hierarchy.array.pes if hierarchy.array and hierarchy.inside(i) else 1)
        cycles = max(reads[i] / (mem.read_bw * copies) if mem.read_bw else 0.0,
                     writes[i] / (mem.write_bw * copies) if mem.write_bw else 0.0)
        out.append((mem.name, cycles / acc.clock_hz))
    return tuple(out)


def _breakdown(groups: tuple[GroupMapping, ...], acc: Accelerator) -> EnergyBreakdown:
    """The groups' energies and times added up, in the shape every energy model reports."""
    pj = dict.fromkeys(COMPONENTS, 0.0)
    words = dict.fromkeys(COMPONENTS, 0)
    mac_cycles = useful = 0
    for g in groups:
        for c, e in g.energy_pj:
            pj[c] += e
        for n in g.nests:
            for lv in n.levels:
                words[lv.kind] += lv.reads + lv.writes
            words["mac"] += n.macs
            if n.layer is not None:
                mac_cycles += n.cycles
                useful += n.useful_macs
        if not any(lv.kind == "dram" for n in g.nests for lv in n.levels):
            words["dram"] += round(g.dram_bytes / (acc.word_bits / 8))
    return EnergyBreakdown(pj["dram"], pj["buffer"], pj["array"], pj["rf"], pj["mac"],
                           sum(g.latency_s for g in groups), sum(g.compute_s for g in groups),
                           sum(g.memory_s for g in groups),
                           useful / (mac_cycles * acc.pes) if mac_cycles else 0.0,
                           tuple(words.items()), tuple(g.latency_s for g in groups))
