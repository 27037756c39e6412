"""COSMA against its four baselines on the paper's networks (Sec. V), and divide-and-conquer on a NAS-like net.

Run:  .venv/bin/python -m benchmarks.bench_allocation [--time-limit 60] [--nets resnet50,vit_b_16] [--skip-nas]
Prints markdown tables (the ones in docs/allocation.md): per network, setting (activations
only, or with parameters) and budget (M_R, M_H, M_P), COSMA's status, time to solution
and off-chip bytes, the baselines' off-chip bytes, and COSMA's reduction against them.
Data are 8-bit, batch 1, as in the paper's Fig. 3.
"""

from __future__ import annotations

import argparse
import statistics
import time

import engine
from benchmarks.nas_cells import darts_like
from engine.allocation import METHODS, allocate, budgets

PAPER_NETS = ("resnet50", "densenet121", "resnext50_32x4d", "r2plus1d_18", "s3d", "fcn_resnet50",
              "lraspp_mobilenet_v3_large", "deeplabv3_resnet50", "transformer", "vit_b_16")
BASELINES = METHODS[1:]
BITS = 8


def reduction(cosma: int, base: int) -> float | None:
    """Share of a baseline's non-compulsory bytes COSMA avoids (None when the baseline has none)."""
    return None if base == 0 else 1 - cosma / base


def bench_network(g, time_limit: float, rows: list, reductions: list, times: list) -> None:
    for params in (False, True):
        m_r, m_h, m_p = budgets(g, word_bits=BITS, include_params=params, time_limit_s=time_limit)
        for label, budget in (("M_R", m_r), ("M_H", m_h), ("M_P", m_p)):
            cosma = allocate(g, budget, include_params=params, word_bits=BITS, time_limit_s=time_limit)
            cosma.validate()
            base = {}
            for m in BASELINES:
                a = allocate(g, budget, method=m, include_params=params, word_bits=BITS)
                a.validate()
                base[m] = a.offchip_bytes
            cut = [r for r in (reduction(cosma.offchip_bytes, b) for b in base.values()) if r is not None]
            reductions.extend(cut)
            times.append(cosma.solve_time_s)
            rows.append((g.name, "act+par" if params else "act", label, budget, cosma.status,
                         f"{cosma.solve_time_s:.2f}", cosma.offchip_bytes, *base.values(),
                         f"{100 * statistics.mean(cut):.0f}%" if cut else "-"))
            print("|", " | ".join(map(str, rows[-1])), "|", flush=True)


def bench_nas(time_limit: float) -> None:
    g = darts_like()
    print(f"\n{g.name}: {len(g.ops)} ops (benchmarks/nas_cells.py), activations only\n")
    print("| budget | bytes | variant | status | time (s) | off-chip bytes | best baseline |")
    print("|---|---|---|---|---|---|---|")
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    for label, budget in (("M_R", m_r), ("M_H", m_h), ("M_P", m_p)):
        best = min(allocate(g, budget, method=m, word_bits=BITS).offchip_bytes for m in BASELINES)
        variants = {"FS (default)": dict(schedule=[op.name for op in g.ops]), "FS (MPMF)": dict(schedule="mpmf"),
                    "FS (MPMF) + DnC": dict(schedule="mpmf", divide="auto"), "DnC": dict(divide="auto")}
        for name, opts in variants.items():
            start = time.perf_counter()
            a = allocate(g, budget, word_bits=BITS, time_limit_s=time_limit, **opts)
            a.validate()
            print(f"| {label} | {budget} | {name} | {a.status} | {time.perf_counter() - start:.1f} | "
                  f"{a.offchip_bytes} | {best} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--nets", default=",".join(PAPER_NETS))
    ap.add_argument("--skip-nas", action="store_true")
    args = ap.parse_args()
    print(f"## Allocation: COSMA vs baselines (8-bit data, batch 1, time limit {args.time_limit:g} s)\n")
    print("| network | tensors placed | budget | bytes | COSMA status | time (s) | COSMA off-chip | "
          + " | ".join(BASELINES) + " | mean reduction |")
    print("|---" * (8 + len(BASELINES)) + "|")
    rows, reductions, times = [], [], []
    for name in args.nets.split(","):
        bench_network(engine.load_network(name), args.time_limit, rows, reductions, times)
    if times:
        print(f"\nCOSMA time to solution: mean {statistics.mean(times):.3f} s, median {statistics.median(times):.3f} s, "
              f"max {max(times):.2f} s over {len(times)} runs")
    if reductions:
        print(f"mean reduction of non-compulsory off-chip bytes against the baselines: "
              f"{100 * statistics.mean(reductions):.1f}% over {len(reductions)} comparisons with baseline traffic")
    if not args.skip_nas:
        bench_nas(args.time_limit)


if __name__ == "__main__":
    main()
