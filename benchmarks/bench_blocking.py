"""Loop blocking (Yang et al.): speed, DianNao baseline vs optimum (Fig. 5), co-design (Fig. 6-7),
CPU caches vs im2col + GEMM (Fig. 3-4), multi-core (Fig. 9).

Run: .venv/bin/python -m benchmarks.bench_blocking   (prints the markdown tables of docs/blocking.md;
takes a few minutes, most of it the 4-level CPU blockings and the co-designs; add `per-operand` for the
ResNet-50 / TPU-like table alone)
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from engine.accelerator import Accelerator
from engine.blocking import (
    DIMS,
    Hierarchy,
    Layer,
    Memory,
    block,
    codesign,
    diannao_baseline,
    evaluate,
    lowered_cost,
    multicore,
    table4,
)
from engine.blocking.hierarchy import pe_array
from engine.errors import EngineError

KB = 1024
MB = 1024 * KB
CONVS = ("Conv1", "Conv2", "Conv3", "Conv4", "Conv5")


def nfu():
    """DianNao's NFU (the datapath the paper keeps): 16 input channels on the rows x 16 output channels on the
    columns, every cycle full (inputs multicast and partial sums reduced by the adder trees at no extra cost)."""
    return pe_array(Accelerator.preset("diannao"), (0.0, 0.0, 0.0))


def three_level() -> Hierarchy:
    """DianNao's IB/KB/OB with a 512-byte register file in front: a 3-level blocking problem."""
    d = Hierarchy.diannao()
    return Hierarchy((Memory.sram("RF", 512), *d.levels), name="RF + DianNao")


def speed() -> str:
    h = three_level()
    rows = ["| layer | MACs | seconds | (tile pair, order) scored | memory pJ/MAC |", "|---|---:|---:|---:|---:|"]
    for name, layer in table4().items():
        r = block(layer, h)
        rows.append(f"| {name} | {layer.macs:.3g} | {r.seconds:.2f} | {r.evaluated:,} | {r.energy_pj / layer.macs:.2f} |")
    return "\n".join(rows)


def per_operand(preset: str = "tpu-like") -> str:
    """Every distinct conv / fc layer of ResNet-50 on a per-operand preset: exact search time (CPU seconds, so a
    loaded machine does not inflate it), energy, utilisation, the unrolling and DRAM words; then the same search
    over every unrolling (not only the maximal ones), in one line."""
    from dataclasses import replace

    from engine.graph import OpKind
    from engine.zoo import build

    g = build("resnet50", 1)
    layers = {}
    for op in g.ops:
        if op.kind in (OpKind.CONV, OpKind.MATMUL):
            layer = Layer.from_op(g, op)
            layers.setdefault((layer.dims, layer.stride, layer.groups), layer)
    h = Hierarchy.preset(preset)
    rows = ["| layer | MACs | CPU s | pJ/MAC (MACs included) | utilisation | unrolled | DRAM words | levels (order) |",
            "|---|---:|---:|---:|---:|---|---:|---|"]
    total = 0.0
    for layer in layers.values():
        start = time.process_time()
        r = block(layer, h)
        cpu = time.process_time() - start
        total += cpu
        unrolled = " ".join(f"{d}{f}" for d, f in zip(DIMS, r.blocking.unroll) if f > 1)
        order = " < ".join(m.name for m in r.hierarchy.on_chip)
        rows.append(f"| {layer.name} | {layer.macs:.3g} | {cpu:.2f} | {r.cost.total_pj / layer.macs:.3f} | "
                    f"{r.cost.utilisation:.3f} | {unrolled} | {r.cost.at('DRAM'):,} | {order} |")
    rows.append(f"| **all {len(layers)} distinct layers** | | **{total:.1f}** | | | | | |")
    every = replace(h, array=replace(h.array, unrolling="all"))
    start, better = time.process_time(), []
    for layer in layers.values():
        a, b = block(layer, every), block(layer, h)
        if a.energy_pj < b.energy_pj * (1 - 1e-9):
            better.append(f"{layer.name} {1 - a.energy_pj / b.energy_pj:.1%} less memory energy with "
                          + " ".join(f"{d}{f}" for d, f in zip(DIMS, a.blocking.unroll) if f > 1))
    rows += ["", f"Every unrolling (`unrolling=\"all\"`, exact over all of them): {time.process_time() - start:.1f} "
                 f"CPU s for the {len(layers)} layers (both searches); better than the maximal ones on: "
                 f"{'; '.join(better) or 'none'}."]
    return "\n".join(rows)


def fig5() -> tuple[str, dict]:
    h = Hierarchy.diannao()
    rows = ["| layer | schedule | IB | KB | OB | DRAM part | total | KB base / KB opt |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    schedule = {}  # layer -> memory pJ of DianNao's own schedule on its buffers
    for name, layer in table4().items():
        base = evaluate(layer, h, diannao_baseline(layer, h))
        best = block(layer, h)
        schedule[name] = base.memory_pj
        kb_ratio = base.energy_at(tensor="W") / best.cost.energy_at(tensor="W") if layer.has_weights else float("nan")
        for label, cost in (("baseline", base), ("optimal", best.cost)):
            per = [cost.energy_at(tensor=T) / layer.macs for T in "IWO"]
            dram = cost.energy_at("DRAM") / layer.macs
            ratio = f"{kb_ratio:.1f}x" if label == "optimal" and layer.has_weights else ""
            rows.append(f"| {name} | {label} | {per[0]:.2f} | {per[1]:.2f} | {per[2]:.2f} | {dram:.2f} | "
                        f"{cost.memory_pj / layer.macs:.2f} | {ratio} |")
    return "\n".join(rows), schedule


PAPER_RATIO = {1 * MB: "~10x", 8 * MB: ">= 13x"}  # Sec. 5.2 / Fig. 6-7: total energy vs DianNao, optimal schedule


def fig67(schedule: dict) -> tuple[str, str, tuple]:
    """Per-buffer co-design (Sec. 3.5-3.6) on DianNao's NFU, as the paper keeps its datapath: every buffer the blocking
    creates is an SRAM of its (whole array's) tile, priced by Table 3 (512 bits wide) at that size, all within the
    budget. Two levels are exact, three are the search.

    Ratios as the paper states them: total energy (memory + 1 pJ/MAC) against DianNao's buffers with the optimal
    schedule on the same NFU; "ceiling" is that ratio if the co-designed memory cost nothing. Sensitivities, each
    changing one assumption on both sides where it applies: "RF rule" prices buffers under 1 KB by extrapolating
    Table 3 down to 0.25 KB; "vs own schedule" divides by DianNao's own loop order on its buffers and NFU (Fig. 5's left
    bars: 17-25 pJ/MAC of memory, about the "20x" memory-to-compute ratio Sec. 5.2 quotes for DianNao) rather than its
    optimal schedule; "stationary" keeps MAC inputs and weights at the multipliers over the loops inside level 0 that
    skip them (DianNao's NFU reads its 256 weights from SB every cycle), in the design and in both baselines.
    """
    array = nfu()
    diannao = replace(Hierarchy.diannao(), array=array)
    still = replace(diannao, stationary=True)
    rows = ["| layer | budget | levels | buffers: IB / KB / OB per level, innermost first | on chip | memory pJ/MAC | "
            "total vs DianNao optimal (NFU) | paper | ceiling | RF rule | vs own schedule | stationary: memory pJ/MAC | "
            "stationary: vs optimal | stationary: vs own schedule | seconds (stationary) |",
            "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    baselines = ["| layer | optimal, NFU | own schedule, NFU | optimal, NFU, stationary | own schedule, NFU, stationary | "
                 "optimal, no array | own schedule, no array |", "|---|---:|---:|---:|---:|---:|---:|"]
    conv1_8mb = ()
    for name in CONVS:
        layer = table4()[name]
        base, base_st = (block(layer, h).energy_pj / layer.macs for h in (diannao, still))
        own, own_st = (evaluate(layer, h, diannao_baseline(layer, h)).memory_pj / layer.macs for h in (diannao, still))
        baselines.append(f"| {name} | {base:.2f} | {own:.2f} | {base_st:.2f} | {own_st:.2f} | "
                         f"{block(layer, 'diannao').energy_pj / layer.macs:.2f} | {schedule[name] / layer.macs:.2f} |")
        for budget in (1 * MB, 8 * MB):
            for levels in (2, 3):
                res = codesign(layer, total_bytes=budget, levels=levels, array=array)
                rf = codesign(layer, total_bytes=budget, levels=levels, small="extrapolate", array=array)
                st = codesign(layer, total_bytes=budget, levels=levels, array=array, stationary=True)
                mem, mem_rf, mem_st = (r.energy_pj / layer.macs for r in (res, rf, st))
                bufs = "; ".join(" / ".join(_size(b) if b else "-" for b in m.split_bytes)
                                 for m in res.hierarchy.on_chip)
                rows.append(f"| {name} | {budget // MB} MB | {levels}{'' if res.optimal else '*'} | {bufs} | "
                            f"{_size(sum(res.sizes))} | {mem:.2f} | {(base + 1) / (mem + 1):.1f}x | "
                            f"{PAPER_RATIO[budget]} | {base + 1:.1f}x | {(base + 1) / (mem_rf + 1):.1f}x | "
                            f"{(own + 1) / (mem + 1):.1f}x | {mem_st:.2f} | {(base_st + 1) / (mem_st + 1):.1f}x | "
                            f"{(own_st + 1) / (mem_st + 1):.1f}x | {res.seconds:.2f} ({st.seconds:.2f}) |")
                if name == "Conv1" and budget == 8 * MB and levels == 3:
                    conv1_8mb = (res.results[0], st.results[0])
    return "\n".join(rows), "\n".join(baselines), conv1_8mb


def fig34() -> str:
    h = Hierarchy.cpu()
    rows = ["| layer | L2 direct | L2 im2col+GEMM | ratio | L3 direct | L3 im2col+GEMM | ratio | seconds |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in CONVS:
        layer = table4()[name]
        t = time.perf_counter()
        direct = block(layer, h).cost
        low = lowered_cost(layer, h)
        l2, g2 = direct.through("L2"), low.at("L2")
        l3, g3 = direct.through("L3"), low.at("L3")
        rows.append(f"| {name} | {l2:.3g} | {g2:.3g} | {g2 / l2:.1f}x | {l3:.3g} | {g3:.3g} | {g3 / l3:.1f}x | "
                    f"{time.perf_counter() - t:.0f} |")
    return "\n".join(rows)


def fig9(single) -> str:
    """Conv1's co-designed 3-level 8 MB single-core chip (`single`: its BlockingResult), a DianNao NFU per core, shared
    by 1-8 cores: K unrolling partitions KB and OB and broadcasts the input; XY partitions IB and OB and shares KB (Sec.
    3.3). Chip memory stays the same as cores are added; each core's share is re-blocked on its private levels and its
    part of the last."""
    layer = table4()["Conv1"]
    chip = single.hierarchy
    ib, kb, ob = (_size(b) for b in chip.on_chip[-1].split_bytes)
    rows = [f"Last level: IB {ib}, KB {kb}, OB {ob}; per core a 16 x 16 `Cin|Cout` NFU.", "",
            "| cores | unroll | shared | private levels | LL IB | LL KB | LL OB | on chip | DRAM | memory pJ/MAC | "
            "broadcast pJ/word |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cores in (1, 2, 4, 8):
        for unroll, shared in (("K", "IB"), ("XY", "KB")):
            r = multicore(layer, chip, cores=cores, unroll=unroll, partition_last=True)
            part = _bars(r, chip, layer)
            rows.append(f"| {cores} | {unroll} | {shared} | {part['private']:.3f} | {part['I']:.3f} | {part['W']:.3f} | "
                        f"{part['O']:.3f} | {r.energy_pj / layer.macs - part['DRAM']:.3f} | {part['DRAM']:.3f} | "
                        f"{r.energy_pj / layer.macs:.3f} | {r.broadcast_pj:.1f} |")
    return "\n".join(rows)


FIG9_DESIGNS = [(levels, budget) for levels in (2, 3, 4) for budget in (512 * KB, 1 * MB, 2 * MB, 8 * MB)]


def fig9_fixed(stationary: bool = False) -> str:
    """Fig. 9 as the paper draws it: Conv1's four best single-core schedules (sched1-4: the four least-energy distinct
    co-designs over 2-4 levels and 0.5-8 MB budgets, on DianNao's NFU), each kept fixed with its last-level K or XY
    loop unrolled over 1-8 cores that share the chip's last level (Sec. 3.3, `multicore(..., schedule=)`); beside it,
    the same cores re-blocking their share inside the same memories. Bars as the paper's: private buffers, LL IB /
    KB / OB, DRAM (pJ/MAC; no Shuffle term: the paper gives no model of it)."""
    layer = table4()["Conv1"]
    found = {}  # the buffers a design keeps -> (its co-design, the (levels, budget) runs that gave it)
    for levels, budget in FIG9_DESIGNS:
        res = codesign(layer, total_bytes=budget, levels=levels, array=nfu(), stationary=stationary)
        key = tuple((b.tensor, b.nbytes) for b in res.buffers)  # a level that keeps nothing is the same design
        found.setdefault(key, (res, []))[1].append(f"{levels}{'' if res.optimal else '*'} levels, {_size(budget)}")
    scheds = sorted(found.values(), key=lambda d: d[0].energy_pj)[:4]
    rows = ["| schedule | co-designed by (levels, budget) | last level IB / KB / OB | on chip | single core pJ/MAC |",
            "|---|---|---|---:|---:|"]
    for n, (res, runs) in enumerate(scheds, 1):
        last = " / ".join(_size(b) for b in res.hierarchy.on_chip[-1].split_bytes)
        rows.append(f"| sched{n} | {'; '.join(runs)} | {last} | {_size(sum(res.sizes))} | "
                    f"{res.energy_pj / layer.macs:.3f} |")
    rows += ["", "| schedule | cores | unroll | loops over cores | private | LL IB | LL KB | LL OB | DRAM | "
             "memory pJ/MAC | chip memory | re-blocked |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, (res, _) in enumerate(scheds, 1):
        chip, sched = res.hierarchy, res.results[0].blocking
        for cores in (1, 2, 4, 8):
            for unroll in ("K", "XY") if cores > 1 else ("K",):
                again = multicore(layer, chip, cores=cores, unroll=unroll, partition_last=True).energy_pj / layer.macs
                try:
                    r = multicore(layer, chip, cores=cores, unroll=unroll, partition_last=True, schedule=sched)
                except EngineError:  # the schedule's loops at the last level do not split over these cores
                    trips = ", ".join(f"{d} {_trips(sched, d)}" for d in (("K",) if unroll == "K" else ("Y", "X")))
                    rows.append(f"| sched{n} | {cores} | {unroll} | cannot (trips: {trips}) | | | | | | | | {again:.3f} |")
                    continue
                part = _bars(r, chip, layer)
                rows.append(f"| sched{n} | {cores} | {unroll if cores > 1 else '-'} | {r.loops or '-'} | "
                            f"{part['private']:.3f} | {part['I']:.3f} | {part['W']:.3f} | {part['O']:.3f} | "
                            f"{part['DRAM']:.3f} | {r.energy_pj / layer.macs:.3f} | {_size(r.on_chip_bytes)} | "
                            f"{again:.3f} |")
    return "\n".join(rows)


def _trips(sched, d: str) -> int:
    """Trips of loop `d` inside the last on-chip level of a blocking (what a fixed schedule unrolls over cores)."""
    i = DIMS.index(d)
    return sched.tiles[-1][i] // (sched.tiles[-2][i] if len(sched.tiles) > 1 else 1)


def _bars(r, chip, layer) -> dict[str, float]:
    """pJ/MAC of a multi-core result by the paper's bars: 'private' levels, the last level's 'I' / 'W' / 'O', 'DRAM'."""
    last, part = chip.on_chip[-1].name, dict.fromkeys(("private", "I", "W", "O", "DRAM"), 0.0)
    for lv, T, e in r.energy:
        key = T if lv == last else lv if lv == "DRAM" else "private"
        part[key] += e / layer.macs
    return part


def _size(b: int) -> str:
    return f"{b / MB:.3g} MB" if b >= MB else f"{b / KB:.{3 if b < 1000 * KB else 4}g} KB" if b >= KB else f"{b} B"


def main() -> None:
    out = sys.stdout
    t = time.perf_counter()
    out.write("### Per-operand presets: ResNet-50 on the TPU-like preset, exact search over tiles, orders, "
              "unrollings and level orders\n\n" + per_operand("tpu-like") + "\n\n")
    if sys.argv[1:] == ["per-operand"]:
        return
    out.write("### Speed: 3-level blocking (512 B RF, DianNao IB/KB/OB, DRAM), exact search\n\n" + speed() + "\n\n")
    table, schedule = fig5()
    out.write("### Fig. 5: DianNao buffers, baseline vs optimal schedule (pJ per MAC)\n\n" + table + "\n\n")
    table, baselines, conv1_8mb = fig67(schedule)
    out.write("### Fig. 6-7: co-designed buffers under 1 MB and 8 MB on DianNao's 16 x 16 NFU (one 512-bit SRAM per "
              "buffer, sized to its tile; * = search, otherwise exact)\n\nBaselines, memory pJ/MAC:\n\n" + baselines
              + "\n\n" + table + "\n\n")
    out.write("### Fig. 3-4: CPU caches (32 KB L1, 256 KB L2, 12 MB L3), direct blocking vs im2col + GEMM "
              "(accesses in 16-bit words)\n\n" + fig34() + "\n\n")
    out.write("### Fig. 9: Conv1 over cores sharing one chip's last level, an NFU per core (pJ per MAC)\n\n"
              "Each core's share re-blocked inside its part of the chip:\n\n" + fig9(conv1_8mb[0])
              + "\n\nSensitivity: the chip co-designed with stationary MAC operands (the design in the Fig. 6-7 table's "
              "stationary columns), the same per core.\n\n" + fig9(conv1_8mb[1]) + "\n\n")
    out.write("### Fig. 9 as the paper evaluates it: Conv1's four best single-core schedules kept fixed, their last-level "
              "K or XY loop unrolled over the cores (pJ per MAC)\n\nsched1-4 are the four least-energy distinct "
              "co-designs over 2-4 levels and 0.5 / 1 / 2 / 8 MB budgets on DianNao's NFU (* = search). \"cannot\": "
              "the schedule's loop inside the last level has fewer trips than cores (Sec. 3.3 needs the unrolled "
              "dimension to be cores x the level below's); XY takes Y first, then X. \"chip memory\": all cores' "
              "memories (XY keeps each core's input slice with its halo); \"re-blocked\": the table above's mode on "
              "the same chip. No Shuffle bar: the paper gives no model of it.\n\n" + fig9_fixed()
              + "\n\nSensitivity: stationary MAC operands (schedules co-designed with them).\n\n"
              + fig9_fixed(stationary=True) + "\n\n")
    out.write(f"_Total {time.perf_counter() - t:.0f} s._\n")


if __name__ == "__main__":
    main()
