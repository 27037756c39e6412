"""Our fused plan's energy, DRAM bytes and latency beside the Fast & Fusiest Mapper's (FFM; the peer of issue 26).

FFM (AccelForge 1.0.467, pip `accelforge`; "The Fast and Fusiest Mapper", arXiv 2602.15166, 2026) maps the
GPT-3-6.7B block as AccelForge ships it (`examples/workloads/gpt3_6.7B.yaml`: the Q/K/V projections, QK, softmax,
AV, the output projection Z and the two FFN matmuls, 8-bit, no norms, residuals, biases or GELU) onto its TPU v4i
(`examples/arches/tpu_v4i.yaml`, after Jouppi et al., "TPU v4", ISCA 2023), fused and unfused, minimising energy,
as its tutorial `notebooks/tutorials/mapper.ipynb` runs it (unfused: the outermost memory keeps every tensor; at
most one fused loop per partial mapping, `max_fused_loops = 1`). It runs in the throwaway environment of
`bench_accelforge` (Python >= 3.12, Graphviz's `dot`) with one job, in its own process, so its CPU seconds are
measured; its figures are cached in benchmarks/data/ffm_gpt3.json, so the table is rebuilt without it.

Ours: the same Einsums built with the zoo's builder, fused by `none` and `optimus` and priced by
`engine.evaluate` on the `tpu-v4i` preset with the `mapping` access model where they exist, else on a provisional
TPU v4i (the `tpu-like` preset's energies and blocking hierarchy, TPU v4i's buffer, array, clock and bandwidth)
with the `blocking` model; the table says which.

Run: .venv/bin/python -m benchmarks.bench_ffm               (table from the cached FFM results)
     .venv/bin/python -m benchmarks.bench_ffm --rerun-ffm   (reruns FFM first: tens of minutes a run here)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import engine
from benchmarks.bench_accelforge import ENV, VERSION, environment, python312
from engine.blocking.area import area_mm2
from engine.explore import ACCESS_MODELS
from engine.graph import Graph, OpKind
from engine.zoo._builder import Net

DATA = Path(__file__).resolve().parent / "data" / "ffm_gpt3.json"
TOKENS = (1024, 2048, 8192)  # 8,192 is the tutorial's; a rerun of all six takes FFM about 15 CPU minutes
MB = 1024 * 1024
# The workload's ranks (gpt3_6.7B.yaml): D = H x E model width, 32 heads of 128, FFN width C
D, HEADS, HEAD_DIM, FFN = 4096, 32, 128, 16384
WORKER = """
import json, sys, time
import accelforge as af
tokens, fused = int(sys.argv[1]), sys.argv[2] == "fused"
af.set_n_parallel_jobs(1)  # in this process, so its CPU seconds count
spec = af.Spec.from_yaml(af.examples.arches.tpu_v4i, af.examples.workloads.gpt3_6_7B,
                         jinja_parse_data={"BATCH_SIZE": 1, "N_TOKENS": tokens})
if not fused:  # AccelForge's recipe (notebooks/tutorials/mapper.ipynb): the outermost memory keeps every tensor
    next(n for n in spec.arch.nodes if isinstance(n, af.arch.Memory)).tensors.keep = "All"
spec.mapper.metrics = af.Metrics.ENERGY
spec.mapper.max_fused_loops = 1  # as the tutorial runs it ("commenting this will be slower")
wall, cpu = time.perf_counter(), time.process_time()
m = spec.map_workload_to_arch(print_progress=False)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
if len(m) > 1:
    m = m[int(m.data["Total<SEP>energy"].values.argmin())]
mapping = m.mapping()
print("RESULT " + json.dumps({
    "wall_s": wall, "cpu_s": cpu, "mappings": len(m),
    "energy_j": [[*map(str, k), float(v)] for k, v in m.energy(per_einsum=True, per_component=True, per_tensor=True,
                                                                 per_action=True).items()],
    "actions_bits": [[*map(str, k), float(v)] for k, v in m.actions(per_einsum=True, per_tensor=True).items()],
    "latency_s": [[e, c, float(v)] for (e, c), v in m.latency(per_einsum=True, per_component=True).items()],
    "area_m2": {k: float(v) for k, v in spec.calculate_component_costs().arch.per_component_total_area.items()},
    "einsums": [[e.name, sorted(e.input_tensor_names), sorted(e.output_tensor_names)] for e in spec.workload.einsums],
    "mapping": mapping.compact_str() if hasattr(mapping, "compact_str") else str(mapping),
}))
"""


# ---- FFM's side ----------------------------------------------------------------------------------------------------
def run_ffm(exe: Path, tokens: int, fused: bool) -> dict:
    """One FFM run (minimum energy) in a subprocess, summarised into the record ffm_gpt3.json keeps."""
    proc = subprocess.run([str(exe), "-c", WORKER, str(tokens), "fused" if fused else "unfused"], capture_output=True,
                          text=True, timeout=6 * 3600, cwd=ENV)  # it may draw into its working folder
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"FFM failed at {tokens} tokens ({'fused' if fused else 'unfused'}):\n{proc.stderr[-3000:]}")
    return summarise(json.loads(lines[0].removeprefix("RESULT ")), tokens, fused)


def summarise(raw: dict, tokens: int, fused: bool) -> dict:
    """Per-component energy (pJ), off-chip bytes, latency, area (mm2), time and fused groups of one FFM run."""
    by_component: dict[str, float] = {}
    by_action: dict[str, float] = {}
    for _, component, _, action, joules in raw["energy_j"]:
        by_component[component] = by_component.get(component, 0.0) + joules * 1e12
        key = f"{component} {action}"
        by_action[key] = by_action.get(key, 0.0) + joules * 1e12
    offchip: dict[str, float] = {}  # tensor -> MainMemory bytes read and written
    actions: dict[str, float] = {}  # "component action" -> bits accessed (memories) or operations (compute units)
    computes: dict[str, float] = {}  # einsum -> operations of its compute unit (MACs, or softmax's scalar ops)
    for einsum, component, tensor, action, count in raw["actions_bits"]:
        key = f"{component} {action}"
        actions[key] = actions.get(key, 0.0) + count
        if component == "MainMemory" and count:
            offchip[tensor] = offchip.get(tensor, 0.0) + count / 8
        if action == "compute":
            computes[einsum] = computes.get(einsum, 0.0) + count
    latency: dict[str, tuple[str, float]] = {}  # einsum -> (bottleneck component, seconds)
    for einsum, component, seconds in raw["latency_s"]:
        if einsum not in latency or seconds > latency[einsum][1]:
            latency[einsum] = (component, seconds)
    return {"tokens": tokens, "fused": fused, "wall_s": round(raw["wall_s"], 1), "cpu_s": round(raw["cpu_s"], 1),
            "energy_pj": sum(by_component.values()),
            "energy_pj_by_component": by_component, "energy_pj_by_action": by_action, "actions": actions,
            "computes_by_einsum": computes,
            "offchip_bytes": sum(offchip.values()), "offchip_bytes_by_tensor": offchip,
            "latency_s": sum(s for _, s in latency.values()),
            "latency_s_by_einsum": {e: s for e, (_, s) in latency.items()},
            "bottleneck_by_einsum": {e: c for e, (c, _) in latency.items()},
            "area_mm2_by_component": {k: v * 1e6 for k, v in raw["area_m2"].items()},
            "groups": fused_groups(raw["einsums"], offchip), "mapping": raw["mapping"]}


def fused_groups(einsums: list, offchip: dict[str, float]) -> list[list[str]]:
    """Einsums joined by an intermediate tensor that never reaches MainMemory, in workload order."""
    writer = {t: name for name, _, outs in einsums for t in outs}
    group = {name: i for i, (name, _, _) in enumerate(einsums)}  # einsum -> group id (union by relabelling)
    for name, ins, _ in einsums:
        for t in ins:
            if t in writer and not offchip.get(t):
                old, new = group[writer[t]], group[name]
                group = {e: new if g == old else g for e, g in group.items()}
    order = list(dict.fromkeys(group[name] for name, _, _ in einsums))
    return [[name for name, _, _ in einsums if group[name] == g] for g in order]


def ffm_records(rerun: bool) -> list[dict] | None:
    """Every FFM run: the cached ones, or all rerun now (and cached); None if FFM cannot run here and none is cached."""
    if DATA.exists() and not rerun:
        return json.loads(DATA.read_text())["runs"]
    python = python312()
    if python is None or shutil.which("dot") is None:
        return None
    exe = environment(python)
    runs = [run_ffm(exe, n, fused) for n in TOKENS for fused in (True, False)]
    save(runs)
    return runs


def save(runs: list[dict]) -> None:
    """Cache FFM's runs in benchmarks/data/ffm_gpt3.json."""
    DATA.write_text(json.dumps({
        "tool": f"accelforge {VERSION}, Fast & Fusiest Mapper, max_fused_loops 1, metric energy, one job",
        "workload": "examples/workloads/gpt3_6.7B.yaml (batch 1)", "arch": "examples/arches/tpu_v4i.yaml",
        "units": "pJ, bytes, s, mm2", "runs": runs}, indent=1) + "\n")


# ---- our side ------------------------------------------------------------------------------------------------------
def ffm_block(tokens: int) -> Graph:
    """gpt3_6.7B.yaml's Einsums as our graph: Q/K/V, QK, softmax, AV, Z, FFA, FFB; no bias, norm, residual or GELU.

    Q, K and V are written token-major and read per head through folded views (the Einsums index them
    [b, m, h, e] directly), so no transpose op moves data that FFM never moves.
    """
    net = Net(f"gpt3-6.7b-ffm-{tokens}", 1)
    x = net.input((tokens, D), "I")
    q, k, v = (net.linear(x, name, D, bias=False) for name in ("Q", "K", "V"))
    net.reshape(q, "Q.heads", (1, HEADS, tokens, HEAD_DIM))
    net.reshape(k, "K.heads", (1, HEADS, HEAD_DIM, tokens))
    net.reshape(v, "V.heads", (1, HEADS, tokens, HEAD_DIM))
    scores = net.unary(net.matmul(q, k, "QK"), "QK_softmax", "Softmax", OpKind.SOFTMAX)
    av = net.matmul(scores, v, "AV")
    net.reshape(av, "AV.merge", (1, tokens, D))
    net.linear(net.linear(net.linear(av, "Z", D, bias=False), "FFA", FFN, bias=False), "FFB", D, bias=False)
    return net.graph()


def our_accelerator() -> tuple[engine.Accelerator, str]:
    """The `tpu-v4i` preset, else a provisional TPU v4i on the `tpu-like` energies; and the access model to use."""
    model = "mapping" if "mapping" in ACCESS_MODELS else "blocking"
    if "tpu-v4i" in engine.Accelerator.presets():
        return engine.Accelerator.preset("tpu-v4i"), model
    base = engine.Accelerator.preset("tpu-like")
    # tpu_v4i.yaml: 128 MB GlobalBuffer, four 128 x 128 MAC arrays, 1.05 GHz, 614 GB/s MainMemory
    return replace(base, name="tpu-v4i (provisional: tpu-like energies)", buffer_bytes=128 * MB, pe_rows=128,
                   pe_cols=4 * 128, clock_hz=1.05e9, dram_bandwidth=614e9), model


def ours(tokens: int) -> dict[str, dict]:
    """Our `none` and `optimus` plans of the block: energy by component (pJ), DRAM bytes, latency, groups, seconds.

    Both plans come from one `evaluate` call, so each carries that call's time (both searches and both pricings).
    """
    acc, model = our_accelerator()
    graph = ffm_block(tokens)
    wall, cpu = time.perf_counter(), time.process_time()
    report = engine.evaluate(graph, acc, methods=("none", "optimus"), access_model=model)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    mapped = report.mappings or {}
    ports = {method: sum(dict(g.level_s).get("GlobalBuffer", 0.0) for g in mapped[method].groups)
             if method in mapped else None for method in ("none", "optimus")}
    return {method: {"globalbuffer_s": ports[method], "energy_pj_by_component": report.energy[method].as_dict(),
                     "energy_pj": report.energy[method].total_pj, "dram_bytes": report.plans[method].dram_bytes,
                     "latency_s": report.energy[method].latency_s, "groups": report.plans[method].groups,
                     "wall_s": wall, "cpu_s": cpu, "acc": acc.name, "model": model} for method in ("none", "optimus")}


def least_energy(tokens: int) -> dict:
    """Our least-energy plan of the block (the better of `none` and `optimus`, each refined for energy)."""
    acc, model = our_accelerator()
    cpu = time.process_time()
    report = engine.evaluate(ffm_block(tokens), acc, methods=("none", "optimus"), access_model=model,
                             objective="energy")
    cpu = time.process_time() - cpu
    best = min(("none", "optimus"), key=lambda m: report.energy[m].total_pj)
    return {"energy_pj": report.energy[best].total_pj, "dram_bytes": report.plans[best].dram_bytes,
            "groups": report.plans[best].groups, "cpu_s": cpu}


# ---- the section ---------------------------------------------------------------------------------------------------
def main(argv: list[str]) -> None:
    print("## The GPT-3-6.7B block beside the Fast & Fusiest Mapper (engine vs AccelForge 1.0.467 FFM, tpu_v4i)\n")
    runs = ffm_records("--rerun-ffm" in argv)
    if runs is None:
        print("Not run: no cached FFM results, and FFM needs a Python >= 3.12 and Graphviz's `dot` "
              "(Debian: `apt-get install graphviz`) on this machine.")
        return
    mine = {n: ours(n) for n in sorted({r["tokens"] for r in runs})}
    acc, model = next(iter(mine.values()))["optimus"]["acc"], next(iter(mine.values()))["optimus"]["model"]
    print(f"FFM's figures from its cached runs (`{DATA.relative_to(DATA.parent.parent.parent)}`); ours on "
          f"`{acc}` with access_model=\"{model}\". Energies in uJ, latency in ms, off-chip in MiB (read + written).\n")
    print("| tokens | plan | FFM energy | ours energy | ours / FFM | FFM off-chip | ours DRAM | FFM latency "
          "| ours latency | FFM s (CPU / wall) | ours s (CPU / wall) | speed-up (CPU) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        o = mine[r["tokens"]]["optimus" if r["fused"] else "none"]
        print(f"| {r['tokens']:,} | {'fused' if r['fused'] else 'unfused'} | {r['energy_pj'] / 1e6:,.0f} "
              f"| {o['energy_pj'] / 1e6:,.0f} | {o['energy_pj'] / r['energy_pj']:.2f} "
              f"| {r['offchip_bytes'] / MB:,.1f} | {o['dram_bytes'] / MB:,.1f} | {r['latency_s'] * 1e3:.2f} "
              f"| {o['latency_s'] * 1e3:.2f} | {r['cpu_s']:.0f} / {r['wall_s']:.0f} "
              f"| {o['cpu_s']:.2f} / {o['wall_s']:.2f} | {r['cpu_s'] / o['cpu_s']:,.0f}x |")
    print("\nEnergy by component (uJ):\n")
    print("| tokens | plan | FFM | ours |")
    print("|---:|---|---|---|")
    for r in runs:
        o = mine[r["tokens"]]["optimus" if r["fused"] else "none"]
        theirs = ", ".join(f"{c} {v / 1e6:,.0f}" for c, v in r["energy_pj_by_component"].items() if v)
        own = ", ".join(f"{c} {v / 1e6:,.0f}" for c, v in o["energy_pj_by_component"].items() if v)
        print(f"| {r['tokens']:,} | {'fused' if r['fused'] else 'unfused'} | {theirs} | {own} |")
    print("\nThe GlobalBuffer's ports (tpu_v4i.yaml: 2,048 GB/s read, 1,024 GB/s write, apart; the only on-chip "
          "level with a limit), in us: FFM's from its actions over the run (the larger of reads and writes over their "
          "ports), ours summed over the groups of the mapping (`GroupMapping.level_s`); neither bounds an Einsum or "
          "group here.\n")
    print("| tokens | plan | FFM reads | FFM writes | FFM GlobalBuffer | ours GlobalBuffer |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in runs:
        o = mine[r["tokens"]]["optimus" if r["fused"] else "none"]
        reads = r["actions"].get("GlobalBuffer read", 0.0) / (8 * 2048e9)  # bits over bits a second
        writes = r["actions"].get("GlobalBuffer write", 0.0) / (8 * 1024e9)
        own = "-" if o["globalbuffer_s"] is None else f"{o['globalbuffer_s'] * 1e6:,.1f}"
        print(f"| {r['tokens']:,} | {'fused' if r['fused'] else 'unfused'} | {reads * 1e6:,.1f} | {writes * 1e6:,.1f} "
              f"| {max(reads, writes) * 1e6:,.1f} | {own} |")
    fused = [r for r in runs if r["fused"]]
    if fused:
        print("\nFused groups (FFM's: Einsums joined by an intermediate that never reaches MainMemory):\n")
    for r in fused:
        o = mine[r["tokens"]]["optimus"]
        print(f"- {r['tokens']:,} tokens: FFM {' | '.join(' '.join(g) for g in r['groups'])}; "
              f"ours {' | '.join(' '.join(g) for g in o['groups'])}")
    print("\nMinimising energy as FFM does (`evaluate(..., objective=\"energy\")`: each method's plan refined by merges "
          "and splits priced by the mapping), our least-energy plan beside FFM's fused one:\n")
    print("| tokens | FFM energy | ours energy | ours / FFM | FFM off-chip | ours DRAM | ours groups | ours CPU s (warm) |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in fused:
        o = least_energy(r["tokens"])
        print(f"| {r['tokens']:,} | {r['energy_pj'] / 1e6:,.0f} | {o['energy_pj'] / 1e6:,.0f} "
              f"| {o['energy_pj'] / r['energy_pj']:.2f} | {r['offchip_bytes'] / MB:,.1f} | {o['dram_bytes'] / MB:,.1f} "
              f"| {'; '.join(' '.join(g) for g in o['groups'])} | {o['cpu_s']:.2f} |")
    missing = sorted({r["tokens"] for r in runs} - {r["tokens"] for r in fused})
    if missing:
        print(f"\nNo fused FFM run cached at {', '.join(f'{n:,}' for n in missing)} tokens (`--rerun-ffm`).")
    area = runs[0]["area_mm2_by_component"]
    our_area = area_mm2(engine.Accelerator.preset("tpu-v4i"))
    print(f"\nFFM's area of tpu_v4i: {sum(area.values()):,.1f} mm2 ("
          + ", ".join(f"{c} {v:,.1f}" for c, v in area.items() if v) + f"); ours of `tpu-v4i`: {sum(our_area.values()):,.1f} "
          "mm2 (" + ", ".join(f"{c} {v:,.1f}" for c, v in our_area.items() if v) + ").")
    print("\nWhy the energies differ, term by term: docs/blocking.md, \"Modelling differences from FFM\". FFM's "
          "seconds are one job's CPU seconds (wall in the same cell) on this 2-core machine shared with other "
          "sessions; ours are one `evaluate` call (both searches, both pricings and the limit). FFM reruns with "
          "`.venv/bin/python -m benchmarks.bench_ffm --rerun-ffm` (its CPU seconds above, per run).")


if __name__ == "__main__":
    main(sys.argv[1:])
