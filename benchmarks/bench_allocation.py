"""COSMA against its four baselines on the paper's networks (Sec. V), and divide-and-conquer on a NAS-like net.

Run:  .venv/bin/python -m benchmarks.bench_allocation [--full] [--time-limit S] [--nets resnet50,vit_b_16] [--nas]
`python -m benchmarks.run allocation` runs the default set (a few minutes on 2 cores); `--full`
runs all ten of the paper's networks and the NAS-like net with a 60 s limit (about half an hour).
Prints markdown: a summary against the paper's figures, then per network, setting (activations
only, or with parameters) and budget (M_R, M_H, M_P) COSMA's status, gap, time to solution and
off-chip bytes, the baselines' off-chip bytes, and COSMA's reduction against them; then the
time-limit contract: every call path on the Transformer from cold caches, wall time against the limit;
then the zoo's transformers and LLMs at 16-bit with a 10 s limit (issue 18: optimal or a proven gap in 10 s).
Data are 8-bit, batch 1, as in the paper's Fig. 3, except in that last table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import engine
from benchmarks.nas_cells import darts_like
from engine.allocation import METHODS, allocate, budgets, mpmf
from engine.allocation.problem import requirement

PAPER_NETS = ("resnet50", "densenet121", "resnext50_32x4d", "r2plus1d_18", "s3d", "fcn_resnet50",
              "lraspp_mobilenet_v3_large", "deeplabv3_resnet50", "transformer", "vit_b_16")
DEFAULT_NETS = ("resnet50", "r2plus1d_18", "lraspp_mobilenet_v3_large", "densenet121", "vit_b_16")
BASELINES = METHODS[1:]
BITS = 8


def reduction(cosma: int, base: int) -> float | None:
    """Share of a baseline's non-compulsory bytes COSMA avoids (None when the baseline has none)."""
    return None if base == 0 else 1 - cosma / base


def bench_network(g, time_limit: float) -> list[dict]:
    """One record per (setting, budget): COSMA's result and the four baselines' off-chip bytes."""
    runs = []
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
            runs.append(dict(net=g.name, setting="act+par" if params else "act", budget=label, bytes=budget,
                             cosma=cosma, base=base))
    return runs


def row(run: dict) -> str:
    c = run["cosma"]
    cut = [r for r in (reduction(c.offchip_bytes, b) for b in run["base"].values()) if r is not None]
    gap = "-" if c.gap is None else f"{100 * c.gap:.0f}%"
    cells = (run["net"], run["setting"], run["budget"], run["bytes"], c.status, gap, f"{c.solve_time_s:.2f}",
             c.offchip_bytes, *run["base"].values(), f"{100 * statistics.mean(cut):.0f}%" if cut else "-")
    return "| " + " | ".join(map(str, cells)) + " |"


def summary(runs: list[dict], time_limit: float) -> list[str]:
    """The headline figures next to the paper's."""
    times = [r["cosma"].solve_time_s for r in runs]
    cuts = [x for r in runs for x in (reduction(r["cosma"].offchip_bytes, b) for b in r["base"].values())
            if x is not None]
    above = sum(r["cosma"].offchip_bytes > b for r in runs for b in r["base"].values())
    optimal = sum(r["cosma"].status == "optimal" for r in runs)
    rest = Counter(r["cosma"].status for r in runs if r["cosma"].status != "optimal")
    others = "; others: " + ", ".join(f"{n} {s}" for s, n in sorted(rest.items())) if rest else ""
    at_mp = [r for r in runs if r["budget"] == "M_P"]
    zero = sum(r["cosma"].offchip_bytes == 0 for r in at_mp)
    return [
        "| figure | ours | paper |",
        "|---|---|---|",
        f"| runs proven optimal | {optimal} of {len(runs)} ({time_limit:g} s limit{others}) "
        "| all ten human-designed DNNs |",
        f"| time to solution | median {statistics.median(times):.2f} s, mean {statistics.mean(times):.2f} s, "
        f"max {max(times):.1f} s | 0.296 s average (Gurobi, M1 Pro) |",
        f"| COSMA above a baseline | {above} of {len(runs) * len(BASELINES)} comparisons | never |",
        f"| non-compulsory off-chip bytes vs the baselines | {100 * statistics.mean(cuts):.0f} % fewer on average "
        f"({len(cuts)} comparisons with baseline traffic) | 84 % fewer |",
        f"| zero spill at M_P | {zero} of {len(at_mp)} runs | every run |",
    ]


def bench_nas(time_limit: float) -> list[str]:
    g = darts_like()
    lines = [f"{g.name}: {len(g.ops)} ops (benchmarks/nas_cells.py), activations only", "",
             "| budget | bytes | variant | status | time (s) | off-chip bytes | best baseline |",
             "|---|---|---|---|---|---|---|"]
    m_r, m_h, m_p = budgets(g, word_bits=BITS)
    for label, budget in (("M_R", m_r), ("M_H", m_h), ("M_P", m_p)):
        best = min(allocate(g, budget, method=m, word_bits=BITS).offchip_bytes for m in BASELINES)
        variants = {"FS (default)": dict(schedule=[op.name for op in g.ops]), "FS (MPMF)": dict(schedule="mpmf"),
                    "FS (MPMF) + DnC": dict(schedule="mpmf", divide="auto"), "DnC": dict(divide="auto")}
        for name, opts in variants.items():
            start = time.perf_counter()
            a = allocate(g, budget, word_bits=BITS, time_limit_s=time_limit, **opts)
            a.validate()
            lines.append(f"| {label} | {budget} | {name} | {a.status} | {time.perf_counter() - start:.1f} | "
                         f"{a.offchip_bytes} | {best} |")
    return lines


CONTRACT_LIMIT_S = 5.0
LLM_NETS = ("bert_base", "bert_base_512", "gpt2", "gpt3_6.7b_block", "llama3_8b_prefill", "llama3_8b_decode",
            "vit_b_16", "transformer")
LLM_LIMIT_S, LLM_BITS = 10.0, 16


def bench_llm(nets=LLM_NETS, limit: float = LLM_LIMIT_S) -> list[str]:
    """COSMA on the zoo's attention networks, activations only, 16-bit, each budget: status, gap and wall time."""
    lines = [f"### Transformers and LLMs: activations only, {LLM_BITS}-bit, batch 1, {limit:g} s limit", "",
             "| network | ops | budget | bytes | COSMA status | gap | wall (s) | COSMA off-chip | best baseline |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in nets:
        g = engine.load_network(name)
        for label, budget in zip(("M_R", "M_H", "M_P"), budgets(g, word_bits=LLM_BITS, time_limit_s=limit)):
            start = time.perf_counter()
            a = allocate(g, budget, word_bits=LLM_BITS, time_limit_s=limit)
            wall = time.perf_counter() - start
            a.validate()
            best = min(allocate(g, budget, method=m, word_bits=LLM_BITS).offchip_bytes for m in BASELINES)
            gap = "-" if a.gap is None else f"{100 * a.gap:.1f}%"
            lines.append(f"| {name} | {len(g.ops)} | {label} | {budget} | {a.status} | {gap} | {wall:.1f} | "
                         f"{a.offchip_bytes} | {best} |")
    return lines


def bench_contract(net: str = "transformer", limit: float = CONTRACT_LIMIT_S) -> list[str]:
    """Wall time of every call path against `time_limit_s`, each from cold caches (the MPMF order not yet known)."""
    g = engine.load_network(net)
    lines = [f"### Time limit kept: {net} at M_R, {limit:g} s limit, cold caches", "",
             "| setting | schedule | divide | status | off-chip bytes | wall (s) |", "|---|---|---|---|---|---|"]
    for params in (False, True):
        m_r = max(requirement(g, op.name, include_params=params, word_bits=BITS) for op in g.ops)  # M_R, no MPMF
        for schedule, divide in (("free", None), ("mpmf", None), ("default", None), ("free", "auto"),
                                 ("mpmf", "auto")):
            order = [op.name for op in g.ops] if schedule == "default" else schedule
            mpmf.cache_clear()
            start = time.perf_counter()
            a = allocate(g, m_r, include_params=params, word_bits=BITS, time_limit_s=limit, schedule=order,
                         divide=divide)
            wall = time.perf_counter() - start
            a.validate()
            lines.append(f"| {'act+par' if params else 'act'} | {schedule} | {divide or '-'} | {a.status} | "
                         f"{a.offchip_bytes} | {wall:.1f} |")
    mpmf.cache_clear()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="all ten paper networks and the NAS-like net, 60 s limit")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per COSMA run (default 20, full 60)")
    ap.add_argument("--nets", default=None, help="comma-separated zoo names (default: a quick representative set)")
    ap.add_argument("--nas", action="store_true", help="also run the NAS-like net (always with --full)")
    args = ap.parse_args()
    limit = args.time_limit or (60.0 if args.full else 20.0)
    nets = args.nets.split(",") if args.nets else PAPER_NETS if args.full else DEFAULT_NETS
    began = time.perf_counter()
    runs = []
    for name in nets:
        runs.extend(bench_network(engine.load_network(name), limit))
    print("## Allocation (COSMA ILP) against the four baselines\n")
    print(f"{len(nets)} of the COSMA paper's networks ({', '.join(nets)}), activations only (act) and with weights "
          f"(act+par), budgets M_R / M_H / M_P, 8-bit, batch 1; HiGHS through highspy, {limit:g} s limit per run "
          "(time to solution includes the MPMF order and the MIP starts). Reduction = share of a baseline's "
          "non-compulsory bytes COSMA avoids, averaged over the baselines that have any.\n")
    print("\n".join(summary(runs, limit)) + "\n")
    print("| network | tensors placed | budget | bytes | COSMA status | gap | time (s) | COSMA off-chip | "
          + " | ".join(BASELINES) + " | mean reduction |")
    print("|---" * (9 + len(BASELINES)) + "|")
    for r in runs:
        print(row(r))
    if args.full or args.nas:
        print()
        print("\n".join(bench_nas(limit)))
    print()
    print("\n".join(bench_contract()))
    print()
    print("\n".join(bench_llm()))
    full = "" if args.full else " Full sweep: `.venv/bin/python -m benchmarks.bench_allocation --full`."
    print(f"\n_{len(runs)} runs in {time.perf_counter() - began:.0f} s on a shared 2-core machine (timings are "
          f"noisy).{full}_")


if __name__ == "__main__":
    main()
