"""Loop blocking (Yang et al.): speed, DianNao baseline vs optimum (Fig. 5), co-design (Fig. 6-7),
CPU caches vs im2col + GEMM (Fig. 3-4), multi-core (Fig. 9).

Run: .venv/bin/python -m benchmarks.bench_blocking   (prints the markdown tables of docs/blocking.md;
takes a few minutes, most of it the 4-level CPU blockings and the co-design grids)
"""

from __future__ import annotations

import sys
import time

from engine.blocking import (Hierarchy, Memory, block, codesign, diannao_baseline, evaluate, lowered_cost,
                             multicore, table4)
from engine.blocking.codesign import split_last_level

KB = 1024
MB = 1024 * KB
CONVS = ("Conv1", "Conv2", "Conv3", "Conv4", "Conv5")


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


def fig5() -> tuple[str, dict]:
    h = Hierarchy.diannao()
    rows = ["| layer | schedule | IB | KB | OB | DRAM part | total | KB base / KB opt |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    optimal = {}
    for name, layer in table4().items():
        base = evaluate(layer, h, diannao_baseline(layer, h))
        best = block(layer, h)
        optimal[name] = best.energy_pj
        kb_ratio = base.energy_at(tensor="W") / best.cost.energy_at(tensor="W") if layer.has_weights else float("nan")
        for label, cost in (("baseline", base), ("optimal", best.cost)):
            per = [cost.energy_at(tensor=T) / layer.macs for T in "IWO"]
            dram = cost.energy_at("DRAM") / layer.macs
            ratio = f"{kb_ratio:.1f}x" if label == "optimal" and layer.has_weights else ""
            rows.append(f"| {name} | {label} | {per[0]:.2f} | {per[1]:.2f} | {per[2]:.2f} | {dram:.2f} | "
                        f"{cost.memory_pj / layer.macs:.2f} | {ratio} |")
    return "\n".join(rows), optimal


def fig67(optimal: dict) -> str:
    """Co-design at Table 3's widest column (the paper's "wide bit widths"; DianNao's KB is priced there too).

    Ratios as the paper states them: total energy (memory + 1 pJ/MAC) against DianNao with its
    optimal schedule; "ceiling" is that ratio if the co-designed memory cost nothing.
    """
    rows = ["| layer | budget | level sizes (bytes) | memory pJ/MAC | memory vs DianNao optimal | "
            "total vs DianNao optimal | ceiling | grid points | seconds |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for name in CONVS:
        layer = table4()[name]
        base = optimal[name] / layer.macs
        for budget in (1 * MB, 8 * MB):
            res = codesign(layer, total_bytes=budget, levels=3, ratio=8, width_bits=512)
            mem = res.energy_pj / layer.macs
            rows.append(f"| {name} | {budget // MB} MB | {' / '.join(_size(s) for s in res.sizes)} | {mem:.2f} | "
                        f"{base / mem:.1f}x | {(base + 1) / (mem + 1):.1f}x | {base + 1:.1f}x | {len(res.points)} | "
                        f"{res.seconds:.0f} |")
    return "\n".join(rows)


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


def fig9() -> str:
    """Conv1's 4 MB single-core design (256 B, 16 KB, then IB/KB/OB sized to its blocking's last-level tiles)
    shared by 1-8 cores: K unrolling partitions KB and OB and broadcasts the input; XY partitions IB and OB
    and shares KB (Sec. 3.3). Chip memory stays the same as cores are added."""
    layer = table4()["Conv1"]
    single = block(layer, Hierarchy.from_sizes([256, 16 * KB, 4 * MB], width_bits=512))
    chip = split_last_level(single)
    last = chip.on_chip[-1].name
    ib, kb, ob = (_size(b) for b in chip.on_chip[-1].split_bytes)
    rows = [f"Last level: IB {ib}, KB {kb}, OB {ob}.", "",
            "| cores | unroll | shared | private levels | LL IB | LL KB | LL OB | DRAM | memory pJ/MAC | "
            "broadcast pJ/word |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for cores in (1, 2, 4, 8):
        for unroll, shared in (("K", "IB"), ("XY", "KB")):
            r = multicore(layer, chip, cores=cores, unroll=unroll, partition_last=True)
            part = {}
            for lv, T, e in r.energy:
                key = T if lv == last else lv if lv == "DRAM" else "private"
                part[key] = part.get(key, 0.0) + e / layer.macs
            rows.append(f"| {cores} | {unroll} | {shared} | {part['private']:.3f} | {part['I']:.3f} | {part['W']:.3f} | "
                        f"{part['O']:.3f} | {part['DRAM']:.3f} | {r.energy_pj / layer.macs:.3f} | "
                        f"{r.broadcast_pj:.1f} |")
    return "\n".join(rows)


def _size(b: int) -> str:
    return f"{b // MB} MB" if b >= MB else f"{b // KB} KB" if b >= KB else f"{b} B"


def main() -> None:
    out = sys.stdout
    t = time.perf_counter()
    out.write("### Speed: 3-level blocking (512 B RF, DianNao IB/KB/OB, DRAM), exact search\n\n" + speed() + "\n\n")
    table, optimal = fig5()
    out.write("### Fig. 5: DianNao buffers, baseline vs optimal schedule (pJ per MAC)\n\n" + table + "\n\n")
    out.write("### Fig. 6-7: co-designed 3-level hierarchy under 1 MB and 8 MB (sizes on a x8 grid, 512-bit wide)\n\n" + fig67(optimal) + "\n\n")
    out.write("### Fig. 3-4: CPU caches (32 KB L1, 256 KB L2, 12 MB L3), direct blocking vs im2col + GEMM "
              "(accesses in 16-bit words)\n\n" + fig34() + "\n\n")
    out.write("### Fig. 9: Conv1 over cores sharing one chip's last level (pJ per MAC)\n\n" + fig9() + "\n\n")
    out.write(f"_Total {time.perf_counter() - t:.0f} s._\n")


if __name__ == "__main__":
    main()
