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
    rows = ["| layer | budget | level sizes (bytes) | memory pJ/MAC | vs DianNao optimal | grid points | seconds |",
            "|---|---|---|---:|---:|---:|---:|"]
    for name in CONVS:
        layer = table4()[name]
        for budget in (1 * MB, 8 * MB):
            res = codesign(layer, total_bytes=budget, levels=3, ratio=8)
            rows.append(f"| {name} | {budget // MB} MB | {' / '.join(_size(s) for s in res.sizes)} | "
                        f"{res.energy_pj / layer.macs:.2f} | {optimal[name] / res.energy_pj:.1f}x better | "
                        f"{len(res.points)} | {res.seconds:.0f} |")
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
    layer = table4()["Conv1"]
    h = Hierarchy.from_sizes([512, 64 * KB, 1 * MB], name="per core")
    rows = ["| cores | unroll | shared tensor | memory pJ/MAC | broadcast pJ/word |", "|---:|---|---|---:|---:|"]
    for cores in (1, 2, 4, 8):
        for unroll, shared in (("K", "input (IB)"), ("XY", "kernels (KB)")):
            r = multicore(layer, h, cores=cores, unroll=unroll)
            rows.append(f"| {cores} | {unroll} | {shared} | {r.energy_pj / layer.macs:.2f} | {r.broadcast_pj:.2f} |")
    return "\n".join(rows)


def _size(b: int) -> str:
    return f"{b // MB} MB" if b >= MB else f"{b // KB} KB" if b >= KB else f"{b} B"


def main() -> None:
    out = sys.stdout
    t = time.perf_counter()
    out.write("### Speed: 3-level blocking (512 B RF, DianNao IB/KB/OB, DRAM), exact search\n\n" + speed() + "\n\n")
    table, optimal = fig5()
    out.write("### Fig. 5: DianNao buffers, baseline vs optimal schedule (pJ per MAC)\n\n" + table + "\n\n")
    out.write("### Fig. 6-7: co-designed 3-level hierarchy under 1 MB and 8 MB (sizes on a x8 grid)\n\n" + fig67(optimal) + "\n\n")
    out.write("### Fig. 3-4: CPU caches (32 KB L1, 256 KB L2, 12 MB L3), direct blocking vs im2col + GEMM "
              "(accesses in 16-bit words)\n\n" + fig34() + "\n\n")
    out.write("### Fig. 9: Conv1 over cores (per core: 512 B, 64 KB, 1 MB)\n\n" + fig9() + "\n\n")
    out.write(f"_Total {time.perf_counter() - t:.0f} s._\n")


if __name__ == "__main__":
    main()
