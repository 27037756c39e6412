"""One mapping from DRAM to the MACs (engine.mapping): speed of a whole network's evaluation with mapped groups, and
what the mapping says of the plans (energy per component, latency, the objectives).

Run: .venv/bin/python -m benchmarks.bench_mapping   (prints the markdown section of BENCHMARKS.md; `... speed`: the
speed table alone, a minute; `... bound`: each fused group's bound over every band count and the mapping's gap;
`... choices`: where keeping the halos in more bands or recomputing them changes optimus's plan under the energy
objective, what choosing costs, and the bound's gap before and after)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import engine
from engine.mapping import map_plan, plan_bound, refine

KB, MB = 1024, 1024 * 1024
CASES = (("resnet50", "optimus", 128 * KB), ("llama3_8b_prefill", "optimus", 8 * MB),
         ("resnet50", "tpu-v4i", None), ("llama3_8b_prefill", "tpu-v4i", None))
COLD = """
import json, sys, time
start = time.perf_counter()
import engine
g = engine.load_network(sys.argv[1])
acc = engine.Accelerator.preset(sys.argv[2])
acc = acc.with_buffer(int(sys.argv[3])) if sys.argv[3] != "None" else acc
loaded, loaded_cpu = time.perf_counter(), time.process_time()
engine.evaluate(g, acc, methods=("none", "optimus"), access_model="mapping")
print(json.dumps({"load": loaded - start, "evaluate": time.perf_counter() - loaded,
                  "evaluate_cpu": time.process_time() - loaded_cpu}))
"""


def table(intro: str, columns: tuple[str, ...]) -> None:
    """Print a table's introduction, its header and its separator (a column named with a trailing ':' right-aligned),
    as BENCHMARKS.md holds each of this benchmark's tables."""
    print(f"\n{intro}\n")
    print("| " + " | ".join(c.removesuffix(":") for c in columns) + " |")
    print("|" + "|".join("---:" if c.endswith(":") else "---" for c in columns) + "|")


def row(*cells) -> None:
    """Print a table's row."""
    print("| " + " | ".join(str(c) for c in cells) + " |")


def cold(network: str, preset: str, buffer: int | None) -> dict:
    """Seconds (wall, and the evaluation's CPU) to load and to evaluate with mapped groups, as the first calls of a
    fresh process."""
    out = subprocess.run([sys.executable, "-c", COLD, network, preset, str(buffer)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def timed(work, *args, **kwargs):
    """Wall and CPU seconds of `work(*args, **kwargs)`, and its result."""
    start, cpu = time.perf_counter(), time.process_time()
    result = work(*args, **kwargs)
    return time.perf_counter() - start, time.process_time() - cpu, result


def speed() -> list[tuple[str, engine.Accelerator, engine.Graph]]:
    """The speed table (wall seconds, CPU seconds in brackets, and the load average around it); the cases run."""
    print("## One mapping from DRAM to the MACs (engine.mapping)")
    table("`engine.evaluate(g, acc, methods=('none', 'optimus'), access_model='mapping')`: both searches and every "
          "group mapped (lone ops blocked on the whole hierarchy, fused ops' bands below the buffer). *cold*: the "
          "first call of a fresh process (the compiled fusion search already cached on disk, as after `make test`); "
          "*slider move*: fuse and map at the next buffer step (twice the buffer) once the process is warm. Wall "
          "seconds, the process's CPU seconds in brackets (the machine is shared: CPU is what the code costs).",
          ("network", "accelerator", "ops", "load (s)", "evaluate, cold (s)", "slider move: fuse + map (s)",
           "map only (s)"))
    rows = []
    before = os.getloadavg()[0]
    for network, preset, buffer in CASES:
        if preset not in engine.Accelerator.presets():
            continue
        times = cold(network, preset, buffer)
        g = engine.load_network(network)
        acc = engine.Accelerator.preset(preset)
        acc = acc.with_buffer(buffer) if buffer else acc
        engine.evaluate(g, acc, methods=("none", "optimus"), access_model="mapping")
        moved = acc.with_buffer(acc.buffer_bytes * 2)
        fuse_s, fuse_cpu, plan = timed(engine.fuse, g, moved, method="optimus")
        map_s, map_cpu, _ = timed(map_plan, g, plan, moved)
        row(network, f"{preset} {acc.buffer_bytes // KB:,} KB", len(g.ops), f"{times['load']:.2f}",
            f"{times['evaluate']:.2f} ({times['evaluate_cpu']:.2f})",
            f"{fuse_s + map_s:.2f} ({fuse_cpu + map_cpu:.2f})",
            f"{map_s:.2f} ({map_cpu:.2f})")
        rows.append((network, acc, g))
    print(f"\nLoad average (1 min) {before:.1f} before and {os.getloadavg()[0]:.1f} after the table, on "
          f"{os.cpu_count()} cores.")
    return rows


def main() -> None:
    rows = speed()
    table("What the mapping says of each plan (energy in mJ per component, latency in ms, DRAM MB); *refined*: "
          "`engine.mapping.refine` from optimus's plan toward the named objective.",
          ("network", "accelerator", "plan", "DRAM MB", "DRAM", "buffer", "array", "RF", "MAC", "total mJ",
           "latency ms"))
    for network, acc, g in rows:
        optimus = engine.fuse(g, acc, method="optimus")
        plans = {"none": engine.fuse(g, acc, method="none"), "optimus": optimus}
        for objective in ("energy", "latency"):
            plans[f"refined for {objective}"] = refine(g, optimus, acc, objective)
        for name, plan in plans.items():
            m = map_plan(g, plan, acc)
            e = m.energy.as_dict()
            row(network, f"{acc.name} {acc.buffer_bytes // KB:,} KB", name, f"{m.dram_bytes / 1e6:,.1f}",
                *(f"{e[c] / 1e9:,.2f}" for c in ("dram", "buffer", "array", "rf", "mac")),
                f"{m.energy.total_pj / 1e9:,.2f}", f"{m.energy.latency_s * 1e3:,.3f}")
    consistency()


SIZES = (64 * KB, MB, 8 * MB, 64 * MB)


def consistency() -> None:
    """Every plan of every zoo network on the optimus preset at four buffer sizes, mapped: its groups' DRAM bytes
    against fusion's count (equal for every group but lone ops blocked alone, which may move fewer, and ops fusion
    does not model, which it counts at their compulsory traffic)."""
    table("The mapping's DRAM bytes against the plan's: every method's plan of every zoo network on the optimus "
          "preset, mapped. *equal*: groups moving exactly fusion's bytes; *fewer*: lone ops whose own blocking "
          "moves fewer (the mapping takes it only then); *more*: groups moving more, and of them *unmodelled*: ops "
          "fusion leaves out of its tile model and counts at their compulsory traffic, a floor (docs/mapping.md).",
          ("buffer", "plans", "groups", "equal", "fewer", "more", "unmodelled", "plans' DRAM GB", "mapped DRAM GB",
           "seconds"))
    for size in SIZES:
        start = time.perf_counter()
        plans = groups = equal = fewer = more = unmodelled = 0
        planned = mapped_bytes = 0
        for network in engine.zoo.names():
            g = engine.load_network(network)
            acc = engine.Accelerator.preset("optimus").with_buffer(size)
            for method in engine.fusion.METHODS:
                plan = engine.fuse(g, acc, method=method)
                mapped = map_plan(g, plan, acc)
                plans += 1
                planned += plan.dram_bytes
                mapped_bytes += mapped.dram_bytes
                for group, cost in zip(mapped.groups, plan.costs):
                    groups += 1
                    equal += group.dram_bytes == cost.dram_bytes
                    fewer += group.dram_bytes < cost.dram_bytes
                    more += group.dram_bytes > cost.dram_bytes
                    unmodelled += group.dram_bytes > cost.dram_bytes and cost.schedule == "unmodelled"
        row(f"{size // KB:,} KB", plans, f"{groups:,}", f"{equal:,}", f"{fewer:,}", more, unmodelled,
            f"{planned / 1e9:,.2f}", f"{mapped_bytes / 1e9:,.2f}", f"{time.perf_counter() - start:.0f}")


def optimus_case(network: str, preset: str, size: int | None) -> tuple[engine.Graph, engine.Accelerator, engine.FusionPlan]:
    """The network, the preset (at `size` bytes of buffer, or its own) and optimus's plan on it."""
    g = engine.load_network(network)
    acc = engine.Accelerator.preset(preset)
    acc = acc.with_buffer(size) if size else acc
    return g, acc, engine.fuse(g, acc, method="optimus")


BOUND_CASES = (*((network, preset, size) for network in ("resnet50", "mobilenet_v2", "bert_base")
                 for preset, size in (("optimus", 128 * KB), ("optimus", MB), ("tpu-v4i", None))),
               ("llama3_8b_prefill", "optimus", 8 * MB))


def bounds() -> None:
    """Optimus's plan mapped, against the bound on each fused group's energy over every band count that fits
    (`engine.mapping.plan_bound`): the plan's energy, the bound, the gap, the group with the largest gap."""
    table("The mapping against its bound over every band count that fits (optimus's plan; `plan_bound`: each fused "
          "op's least energy over every band height from fusion's count to a row per band; lone ops count as mapped). "
          "CPU seconds of the bound alone.",
          ("network", "accelerator", "fused groups", "mapped mJ:", "bound mJ:", "gap:",
           "largest gap: group, uJ, band counts (fusion's; the ops' best)", "bound CPU s:"))
    for network, preset, size in BOUND_CASES:
        g, acc, plan = optimus_case(network, preset, size)
        mapped = map_plan(g, plan, acc)
        start = time.process_time()
        bound = plan_bound(g, plan, mapped, acc)
        seconds = time.process_time() - start
        worst, cost = max(zip(bound.groups, plan.costs), key=lambda pair: pair[0].gap_pj)
        row(network, f"{acc.name} {acc.buffer_bytes // KB:,} KB", sum(len(c.ops) > 1 for c in plan.costs),
            f"{bound.mapped_pj / 1e9:,.3f}", f"{bound.bound_pj / 1e9:,.3f}", f"{bound.gap:.2%}",
            f"{worst.ops[0]} +{len(worst.ops) - 1}, {worst.gap_pj / 1e6:,.1f}, {cost.row_steps}; "
            f"{'/'.join(str(r) for r in sorted({r for _, r in worst.best_steps})) or '-'}", f"{seconds:.2f}")


_CNN_SIZES = (("optimus", 128 * KB), ("optimus", 512 * KB), ("optimus", MB), ("tpu-v4i", 2 * MB), ("tpu-v4i", None))
CHOICE_CASES = (*((network, preset, size) for network in ("resnet50", "mobilenet_v2") for preset, size in _CNN_SIZES),
                *(("llama3_8b_prefill", preset, size) for preset, size in (
                    ("optimus", 2 * MB), ("optimus", 8 * MB), ("tpu-v4i", 8 * MB), ("tpu-v4i", None))))
GAP_CASES = (*((network, preset, size) for network in ("resnet50", "mobilenet_v2")
               for preset, size in (("optimus", 128 * KB), ("optimus", MB), ("tpu-v4i", None))),
             ("llama3_8b_prefill", "optimus", 8 * MB), ("llama3_8b_prefill", "tpu-v4i", None))


def choices() -> None:
    """Optimus's plan mapped with the halos kept in fusion's bands (the default) and with each fused group's choice by
    the energy objective (`map_plan(..., objective="energy")`: its halos kept in more bands, or recomputed): groups
    that change, MACs again, energy, latency and DRAM bytes before and after, and the CPU seconds of the choice (every
    option of each fused group mapped; the default mappings shared)."""
    table("Keep the halos in more bands or recompute them (optimus's plan; `map_plan(..., objective='energy')` "
          "against the default, which keeps them in fusion's bands). CPU seconds: the choice alone (every option of "
          "each fused group mapped).",
          ("network", "accelerator", "fused groups (in several bands)", "kept in more bands",
           "recompute (with MACs again)", "MACs again:", "energy mJ kept -> chosen", "latency ms", "DRAM MB",
           "choice CPU s:"))
    from engine.fusion.memo import Memo
    from engine.mapping.plan import ALIKE

    for network, preset, size in CHOICE_CASES:
        g, acc, plan = optimus_case(network, preset, size)
        memo = Memo(ALIKE)
        kept = map_plan(g, plan, acc, mapped=memo)
        _, seconds, chosen = timed(map_plan, g, plan, acc, mapped=memo, objective="energy")
        again = [grp for grp in chosen.groups if grp.halos == "recomputed"]
        more = [grp for grp, c in zip(chosen.groups, plan.costs)
                if grp.schedule == "fused" and grp.halos == "kept" and grp.row_steps > c.row_steps]
        fused = [c for c in plan.costs if len(c.ops) > 1]
        row(network, f"{acc.name} {acc.buffer_bytes // KB:,} KB",
            f"{len(fused)} ({sum(c.row_steps > 1 for c in fused)})", len(more),
            f"{len(again)} ({sum(grp.recomputed_macs > 0 for grp in again)})", f"{chosen.recomputed_macs:,}",
            f"{kept.energy.total_pj / 1e9:,.3f} -> {chosen.energy.total_pj / 1e9:,.3f}",
            f"{kept.energy.latency_s * 1e3:,.3f} -> {chosen.energy.latency_s * 1e3:,.3f}",
            f"{kept.dram_bytes / 1e6:,.1f} -> {chosen.dram_bytes / 1e6:,.1f}", f"{seconds:.2f}")
    table("The bound before and after (`plan_bound` of the default mapping, over every band count with the halos "
          "kept; of the energy objective's, over every option it may take). CPU seconds of each bound.",
          ("network", "accelerator", "default: mapped mJ, bound mJ, gap", "energy objective: mapped mJ, bound mJ, gap",
           "bound CPU s:"))
    for network, preset, size in GAP_CASES:
        g, acc, plan = optimus_case(network, preset, size)
        cells, cpu = [], []
        for objective in ("dram_bytes", "energy"):
            mapped = map_plan(g, plan, acc, objective=objective)
            _, seconds, bound = timed(plan_bound, g, plan, mapped, acc)
            cells.append(f"{bound.mapped_pj / 1e9:,.3f}, {bound.bound_pj / 1e9:,.3f}, {bound.gap:.2%}")
            cpu.append(f"{seconds:.2f}")
        row(network, f"{acc.name} {acc.buffer_bytes // KB:,} KB", *cells, " / ".join(cpu))


if __name__ == "__main__":
    {"speed": speed, "bound": bounds, "choices": choices}.get(sys.argv[1] if sys.argv[1:] else "", main)()
