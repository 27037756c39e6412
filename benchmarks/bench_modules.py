"""Module-based on-chip reuse: the paper's Table 1 side by side with ours, and savings on other networks.

Run: .venv/bin/python -m benchmarks.bench_modules   (prints the markdown tables of docs/modules.md)
"""

from __future__ import annotations

import time

import engine

KB = 1024
PRESET = "exynos-npu"

# Table 1 of the module-reuse paper (KB): W, naive FM, proposed FM.
PAPER = {
    "Mixed_5b": ("inception-a1", 249, 2308.5, 0), "Mixed_5c": ("inception-a2", 270, 2835, 0),
    "Mixed_5d": ("inception-a3", 277.5, 3078, 0), "Mixed_6a": ("reduction-a", 1125, 1798.5, 300),
    "Mixed_6b": ("inception-b1", 1264, 2700, 300), "Mixed_6c": ("inception-b2", 1648, 2850, 0),
    "Mixed_6d": ("inception-b3", 1648, 2850, 0), "Mixed_6e": ("inception-b4", 2088, 3000, 0),
    "Mixed_7a": ("reduction-b", 1656, 1580, 0), "Mixed_7b": ("inception-c1", 4920, 808, 0),
    "Mixed_7c": ("inception-c2", 5928, 1096, 0),
}
OTHERS = ("googlenet", "resnet50", "squeezenet1_0")


def table1(acc) -> str:
    """Markdown: per module, the paper's KB next to ours, with processing and access counts."""
    plan = engine.plan_modules(engine.load_network("inception_v3"), acc)
    lines = ["| module (paper) | ours | W paper | W ours | naive FM paper | naive FM ours | proposed FM paper "
             "| proposed FM ours | processing | reads/writes naive | reads/writes proposed |",
             "|---|---|---:|---:|---:|---:|---:|---:|:-:|:-:|:-:|"]
    for m in plan.modules:
        label, w, naive, proposed = PAPER.get(m.name, (m.name, 0, 0, 0))
        lines.append(f"| {label} | {m.name} | {w:g} | {m.weight_bytes / KB:.1f} | {naive:g} | {m.naive.bytes / KB:g} "
                     f"| {proposed:g} | {m.proposed.bytes / KB:g} | {m.processing} | {m.naive.reads}/{m.naive.writes} "
                     f"| {m.proposed.reads}/{m.proposed.writes} |")
    t = plan.table()[-1]
    lines.append(f"| total | | 21073.5 | {t['weight_bytes'] / KB:.1f} | 24904 | {t['naive_fm_bytes'] / KB:g} | 600 "
                 f"| {t['proposed_fm_bytes'] / KB:g} | | {t['naive_reads']}/{t['naive_writes']} "
                 f"| {t['proposed_reads']}/{t['proposed_writes']} |")
    lines.append("")
    lines.append(f"Feature-map traffic kept: paper 2.41 %, ours {100 * t['fm_ratio']:.2f} %; weights + feature maps: "
                 f"paper 47.14 %, ours {100 * t['overall_ratio']:.2f} %.")
    return "\n".join(lines)


def others(acc) -> str:
    """Markdown: module counts, processing choices and savings on the other zoo networks."""
    lines = ["| network | modules | I / II / naive | weights KB | naive FM KB | proposed FM KB | FM kept "
             "| layers outside modules: FM KB | plan time s |",
             "|---|---:|:-:|---:|---:|---:|---:|---:|---:|"]
    for name in ("inception_v3", *OTHERS):
        g = engine.load_network(name)
        start = time.perf_counter()
        plan = engine.plan_modules(g, acc)
        took = time.perf_counter() - start
        kinds = [sum(m.processing == p for m in plan.modules) for p in ("I", "II", "naive")]
        naive, proposed = plan.naive.bytes, plan.proposed.bytes
        lines.append(f"| {name} | {len(plan.modules)} | {' / '.join(map(str, kinds))} | {plan.weight_bytes / KB:.0f} "
                     f"| {naive / KB:.0f} | {proposed / KB:.0f} | {100 * proposed / naive:.1f} % "
                     f"| {plan.outside_traffic.bytes / KB:.0f} | {took:.2f} |")
    return "\n".join(lines)


def main() -> None:
    acc = engine.Accelerator.preset(PRESET)
    print(f"## Table 1: Inception-V3 (299x299, 8-bit) on `{PRESET}` (KB = 1024 B)\n")
    print(table1(acc))
    print(f"\n## Other networks on `{PRESET}` (batch 1, 224x224 unless the network says otherwise)\n")
    print(others(acc))


if __name__ == "__main__":
    main()
