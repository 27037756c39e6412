"""Our blocking optimizer beside ZigZag (the peer of issue 16), layer by layer, on ZigZag's own accelerators.

ZigZag 3.9.1 (pip `zigzag-dse`; Mei, Houshmand, Jain, Giraldo and Verhelst, "ZigZag: Enlarging Joint
Architecture-Mapping Design Space Exploration for DNN Accelerators", IEEE Transactions on Computers 2021) runs in
a throwaway virtual environment under the system's temporary folder, never in the project's: this script makes it
once (`zigzag-dse==3.9.1` and `six`, which 3.9.1 imports without declaring it) and runs ZigZag's LOMA mapper on
its example ResNet-18 (`inputs/workload/resnet18.onnx`: 21 conv and fc layers) for its `tpu_like` accelerator
(with `inputs/mapping/tpu_like.yaml`) and its `eyeriss_like` one (ZigZag ships no Eyeriss mapping; its
`default.yaml`, K on D1 and C on D2, clipped to the 14 x 12 array). Each layer keeps ZigZag's least-energy
mapping. ZigZag's figures are cached in benchmarks/data/zigzag_*.json, so the table is rebuilt without ZigZag.

Run: .venv/bin/python -m benchmarks.bench_zigzag [tpu_like] [eyeriss_like]   (tables from the cached ZigZag results)
     .venv/bin/python -m benchmarks.bench_zigzag --rerun ...                  (reruns ZigZag first: minutes each)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from engine.blocking import Hierarchy, Layer, block

VERSION = "3.9.1"
ENV = Path(tempfile.gettempdir()) / f"zigzag-{VERSION}-venv"
DATA = Path(__file__).resolve().parent / "data"
PRESETS = {"tpu_like": "tpu-like", "eyeriss_like": "eyeriss-like"}  # ZigZag example -> our preset
NETWORKS = ("resnet18", "mobilenetv2")  # ZigZag's example workloads (inputs/workload/*.onnx) compared
CASES = (("tpu_like", "tpu_like", "loma"), ("eyeriss_like", "default", "loma"))  # hardware yaml, mapping yaml, mapper
EXTRA = (("tpu_like", "tpu_like", "salsa"),)  # only with --rerun: SALSA anneals 1000 steps a layer in a child process
WORKER = """
import json, logging, os, sys, time
from pathlib import Path
import zigzag
from zigzag.mapping.data_movement import DataMoveAttr
from zigzag.mapping.temporal_mapping import TemporalMappingType
from zigzag.stages.evaluation.cost_model_evaluation import CostModelStage
from zigzag.stages.main import MainStage
from zigzag.stages.mapping.salsa import SalsaStage
from zigzag.stages.mapping.spatial_mapping_generation import SpatialMappingGeneratorStage
from zigzag.stages.mapping.temporal_mapping_generator_stage import TemporalMappingGeneratorStage
from zigzag.stages.parser.accelerator_parser import AcceleratorParserStage
from zigzag.stages.parser.onnx_model_parser import ONNXModelParserStage
from zigzag.stages.results.reduce_stages import MinimalEnergyStage
from zigzag.stages.stage import Stage
from zigzag.stages.workload_iterator import WorkloadStage

logging.disable(logging.CRITICAL)


class Timed(Stage):
    # the seconds (wall, CPU with SALSA's child processes) ZigZag spends on one layer: spatial mappings, temporal
    # mapper and cost model
    def run(self):
        wall, cpu = time.perf_counter(), cpu_seconds()
        for cme, _ in self.list_of_callables[0](self.list_of_callables[1:], **self.kwargs).run():
            yield cme, (time.perf_counter() - wall, cpu_seconds() - cpu)


def cpu_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


hardware, mapping, mapper, network = sys.argv[1:5]
inputs = Path(zigzag.__file__).parent / "inputs"
stages = [ONNXModelParserStage, AcceleratorParserStage, WorkloadStage, Timed, MinimalEnergyStage,
          SpatialMappingGeneratorStage, MinimalEnergyStage,
          SalsaStage if mapper == "salsa" else TemporalMappingGeneratorStage, CostModelStage]
main = MainStage(stages, workload=str(inputs / f"workload/{network}.onnx"),
                 accelerator=str(inputs / f"hardware/{hardware}.yaml"), mapping=str(inputs / f"mapping/{mapping}.yaml"),
                 dump_folder="outputs", loma_lpf_limit=6, loma_show_progress_bar=False, nb_mappings_generated=3,
                 enable_mix_spatial_mapping_generation=False, access_same_data_considered_as_no_access=True,
                 temporal_mapping_type=TemporalMappingType("uneven"))
rows = []
for cme, (layer, (seconds, cpu_seconds)) in main.run():
    operands = {}
    for op in layer.layer_operands:
        mem_op = layer.memory_operand_links.layer_to_mem_op(op)
        operands[str(op)] = [
            {"memory": cme.accelerator.get_memory_level(mem_op, lv).name,
             "loops": [[str(d), round(float(s), 4)] for d, s in cme.temporal_mapping.mapping_dic_stationary[op][lv]],
             "elements": {str(k): v for k, v in cme.mapping.unit_mem_data_movement[op][lv]
                          .get_attribute(DataMoveAttr.DATA_ELEM_MOVE_COUNT).data.items()},
             "accesses": {str(k): v for k, v in cme.memory_word_access[op][lv].data.items()},
             "energy_pj": round(float(sum(cme.mem_energy_breakdown_further[op][lv].data.values())), 3)}
            for lv in range(cme.mapping.mem_level[op])]
    rows.append({"name": layer.name, "type": layer.type, "seconds": round(seconds, 3),
                 "cpu_seconds": round(cpu_seconds, 3),
                 "dims": {str(d): int(s) for d, s in layer.layer_dim_sizes.items()},
                 "relations": [str(r) for r in layer.dimension_relations], "padding": str(layer.padding),
                 "precision_bits": {str(k): v for k, v in layer.operand_precision.data.items()},
                 "energy_pj": round(cme.energy_total, 3), "mac_pj": round(cme.mac_energy, 3),
                 "latency_cycles": cme.latency_total2, "ideal_temporal_cycles": cme.ideal_temporal_cycle,
                 "utilisation": round(cme.mac_spatial_utilization, 4), "spatial": str(layer.spatial_mapping),
                 "operands": operands})
print("RESULT " + json.dumps(rows))
"""


def environment() -> Path:
    """The throwaway environment's interpreter, made and filled on first use."""
    exe = ENV / "bin" / "python"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ENV)], check=True)
        subprocess.run([str(exe), "-m", "pip", "install", "-q", f"zigzag-dse=={VERSION}", "six"], check=True,
                       capture_output=True)
    return exe


def cache_path(hardware: str, mapper: str, network: str = "resnet18") -> Path:
    return DATA / (f"zigzag_{hardware}_{mapper}.json" if network == "resnet18"
                   else f"zigzag_{hardware}_{mapper}_{network}.json")


def run_zigzag(hardware: str, mapping: str, mapper: str, network: str = "resnet18") -> list[dict]:
    """ZigZag's least-energy mapping of every layer of `network` on `hardware`, written to the cache and returned."""
    proc = subprocess.run([str(environment()), "-c", WORKER, hardware, mapping, mapper, network], capture_output=True,
                          text=True, timeout=7200, cwd=tempfile.gettempdir(), check=True)
    rows = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")).removeprefix("RESULT "))
    DATA.mkdir(exist_ok=True)
    cache_path(hardware, mapper, network).write_text(json.dumps(
        {"zigzag": VERSION, "hardware": hardware, "mapping": mapping, "mapper": mapper, "network": network,
         "layers": rows}, indent=0) + "\n")
    return rows


def zigzag_layers(hardware: str, mapper: str, network: str = "resnet18") -> list[dict]:
    """The cached ZigZag results of one accelerator, mapper and network."""
    return json.loads(cache_path(hardware, mapper, network).read_text())["layers"]


def layer_of(row: dict) -> Layer:
    """Our `Layer` for one ZigZag layer record (conv: B, G, K, C, OX, OY, FX, FY, with C and K per group G; gemm: D,
    C, K), with its zero border (ZigZag's padding '{IX: (1, 1), IY: (1, 1)}': begin and end along each input axis)."""
    d = row["dims"]
    stride = {m[1]: int(m[2]) for m in (re.match(r"I([XY]) = (\d+)\*O", r) for r in row["relations"]) if m}
    pads = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"I([XY]): \((\d+), (\d+)\)", row.get("padding", ""))}
    layer = Layer(X=d.get("OX", 1), Y=d.get("OY", d.get("D", 1)), C=d["C"], K=d["K"], N=d.get("B", 1),
                  Fw=d.get("FX", 1), Fh=d.get("FY", 1), stride=(stride.get("X", 1), stride.get("Y", 1)),
                  groups=d.get("G", 1), name=row["name"])
    return replace(layer, pad=(*_end_clipped(layer, 0, *pads.get("X", (0, 0))),
                               *_end_clipped(layer, 1, *pads.get("Y", (0, 0)))))


def _end_clipped(layer: Layer, axis: int, begin: int, end: int) -> tuple[int, int]:
    """(begin, end) of a border with the end cut to what the windows reach: the input is the largest that gives the
    layer's outputs (ResNet-18's and MobileNet-V2's even sizes), so a stride-s layer leaves s - 1 padded rows past
    its last window (ZigZag's input sizes: 224 x 224 for conv1, 56 x 56 for layer2.0.conv1)."""
    return begin, max(0, end - (layer.stride[axis] - 1))


def dram_elements(row: dict) -> int:
    """Words ZigZag moves across DRAM's port (reads and writes, all operands)."""
    return sum(sum(level["elements"].values()) for levels in row["operands"].values() for level in levels
               if level["memory"] == "dram")


def like_for_like(hardware: str, unrolling: str | None = None) -> Hierarchy:
    """Our preset for ZigZag's `hardware`, its PE array unrolling C over the rows and K over the columns as
    ZigZag's mapping does (our eyeriss-like preset is row-stationary, a wider choice than ZigZag's run had);
    `unrolling` ("all" or "maximal") overrides which unrollings the preset lets `block` search."""
    preset = Hierarchy.preset(PRESETS[hardware])
    return replace(preset, array=replace(preset.array, dataflow=(("C", "rows"), ("K", "cols")),
                                         unrolling=unrolling or preset.array.unrolling))


def best_of_mappers(hardware: str, network: str = "resnet18") -> list[dict]:
    """Per layer, the least-energy record among ZigZag's cached mappers (LOMA, and SALSA where it was run)."""
    runs = [zigzag_layers(h, m, network) for h, _, m in CASES + EXTRA
            if h == hardware and cache_path(h, m, network).exists()]
    return [min(records, key=lambda r: r["energy_pj"]) for records in zip(*runs)]


def ours(layer: Layer, hierarchy: Hierarchy):
    """(CPU seconds, result) of our exact optimizer on one layer."""
    start = time.process_time()
    result = block(layer, hierarchy)
    return time.process_time() - start, result


def table(hardware: str, rows: list[dict]) -> list[str]:
    """One markdown row per layer: energy, DRAM words, utilisation and search time, ZigZag's and ours (the preset as
    it is, and exact over every unrolling), and ratios; then the worst energy ratio and the least speed-up of each
    against the issue's goals (<= 1.05, >= 10x). Where our preset's own dataflow is not ZigZag's C|K (eyeriss-like
    is row-stationary, which ZigZag has no mapping for), a column gives it too, and where its RFs share one cut of
    the loop nest, a last one has them cut it each at its own point, as ZigZag does (`rf_cuts`)."""
    preset, every = like_for_like(hardware), like_for_like(hardware, "all")
    own = Hierarchy.preset(PRESETS[hardware])
    own = own if own.array.dataflow != preset.array.dataflow else None
    extra = (" own dataflow: ours / ZigZag, PE use | a cut per RF: ours / ZigZag, CPU s |", "---:|---:|") if own \
        else ("", "")
    lines = [f"| layer | K C OX OY FX FY /s | ZigZag uJ | ours uJ | ours / ZigZag | DRAM words ZigZag / ours "
             f"| PE use ZigZag / ours | ZigZag CPU s | ours CPU s | speed-up | every unrolling: ours / ZigZag, "
             f"speed-up |{extra[0]}", f"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|{extra[1]}"]
    totals, ratios, speedups = [0.0] * 7, {"preset": {}, "all": {}}, {"preset": {}, "all": {}}
    for row in rows:
        layer = layer_of(row)
        seconds, result = ours(layer, preset)
        seconds_all, result_all = ours(layer, every)
        energy, dram, theirs = result.cost.total_pj, result.cost.at("DRAM"), dram_elements(row)
        search = row.get("cpu_seconds", row["seconds"])
        name = _short(row["name"])
        for key, e, s in (("preset", energy, seconds), ("all", result_all.cost.total_pj, seconds_all)):
            ratios[key][name], speedups[key][name] = e / row["energy_pj"], search / s
        lines.append(f"| {name} | {layer.K} {layer.C} {layer.X} {layer.Y} {layer.Fw} {layer.Fh} /{layer.stride[0]} "
                     f"| {row['energy_pj'] / 1e6:.2f} | {energy / 1e6:.2f} | {ratios['preset'][name]:.3f} "
                     f"| {theirs:,} / {dram:,} | {row['utilisation']:.2f} / {result.cost.utilisation:.2f} "
                     f"| {search:.1f} | {seconds:.2f} | {speedups['preset'][name]:.0f}x "
                     f"| {ratios['all'][name]:.3f}, {speedups['all'][name]:.0f}x |" + (_own(layer, own, row) + _cuts(layer, preset, row) if own else ""))
        for i, v in enumerate((row["energy_pj"], energy, theirs, dram, search, seconds, seconds_all)):
            totals[i] += v
    e0, e1, d0, d1, s0, s1, s2 = totals
    lines.append(f"| all {len(rows)} | | {e0 / 1e6:.1f} | {e1 / 1e6:.1f} | {e1 / e0:.3f} | {d0:,.0f} / {d1:,.0f} "
                 f"| | {s0:.0f} | {s1:.1f} | {s0 / s1:.0f}x | {s0 / s2:.0f}x |" + (" | |" if own else ""))
    lines.append("")
    for key, label in (("preset", f"The preset ({preset.array.unrolling} unrollings)"), ("all", "Every unrolling")):
        worst, slowest = max(ratios[key], key=ratios[key].get), min(speedups[key], key=speedups[key].get)
        slow = [n for n, v in speedups[key].items() if v < 10]
        lines.append(f"{label}: highest energy ratio {ratios[key][worst]:.3f} ({worst}; goal: at most 1.05), lowest "
                     f"{min(ratios[key].values()):.3f}, least "
                     f"speed-up {speedups[key][slowest]:.0f}x ({slowest}; goal: 10x), below 10x on {len(slow)} of "
                     f"{len(rows)} layers" + (f" ({', '.join(slow)})." if slow else "."))
    return lines


# ZigZag's memories -> our presets' levels
LEVELS = {"tpu_like": {"rf_2B": "O-reg", "rf_128B": "W-reg", "sram_2MB": "SRAM", "dram": "DRAM"},
          "eyeriss_like": {"rf_64B_A": "PE RFs", "rf_64B_W": "PE RFs", "rf_16B": "PE RFs", "sram_8KB": "W/O SRAMs",
                           "sram_64KB": "W/O SRAMs", "sram_1M": "SRAM", "dram": "DRAM"}}
TERMS = {"tpu_like": (("DRAM", "IWO", "the same words"),
                      ("SRAM", "I", "64-bit port granules on conv1 (ZigZag)"),
                      ("SRAM", "O", "partial sums"),
                      ("W-reg", "W", "stationary runs"),
                      ("O-reg", "O", "partial sums")),
         "eyeriss_like": (("DRAM", "IWO", "the same words"),
                          ("SRAM", "IO", "inputs and outputs"),
                          ("W/O SRAMs", "WO", "weights and partial sums"),
                          ("PE RFs", "I", "inputs"),
                          ("PE RFs", "W", "weights: one cut of the nest for three RFs (ours)"),
                          ("PE RFs", "O", "partial sums"))}


def differences(hardware: str, rows: list[dict]) -> list[str]:
    """Per layer, ZigZag's energy minus ours (nJ) at each (level, operands) of the same blocking problem: where the
    two tools' optima part (docs/blocking.md, "Beside ZigZag"), measured; the MACs agree exactly."""
    hierarchy = like_for_like(hardware)
    terms = TERMS[hardware]
    lines = ["| layer | " + " | ".join(f"{lv} {ops}" for lv, ops, _ in terms) + " | total |",
             "|---|" + "---:|" * (len(terms) + 1)]
    sums = [0.0] * (len(terms) + 1)
    for row in rows:
        cost = block(layer_of(row), hierarchy).cost
        theirs: dict[tuple[str, str], float] = {}
        for T, levels in row["operands"].items():  # ZigZag names its layer operands I, W, O as we do
            for level in levels:
                key = LEVELS[hardware][level["memory"]], T
                theirs[key] = theirs.get(key, 0.0) + level["energy_pj"]
        diffs = [sum(theirs.get((lv, T), 0.0) - cost.energy_at(lv, T) for T in ops) / 1e3 for lv, ops, _ in terms]
        diffs.append((row["energy_pj"] - cost.total_pj) / 1e3)
        sums = [a + b for a, b in zip(sums, diffs)]
        lines.append(f"| {_short(row['name'])} | " + " | ".join(f"{d:+,.0f}" for d in diffs) + " |")
    lines.append(f"| all {len(rows)} | " + " | ".join(f"**{d:+,.0f}**" for d in sums) + " |")
    return lines


def rf_cuts(hierarchy: Hierarchy) -> Hierarchy:
    """eyeriss-like with each RF (and each small SRAM) a level of its own, so each cuts the loop nest at its own
    point as in ZigZag (the preset shares one cut per group, which keeps it to one level order; this one has 18)."""
    rfs, srams, *rest = hierarchy.levels
    own = [replace(level, name=f"{T}-{level.name}", holds=T,
                   split_bytes=tuple(b if X == T else 0 for X, b in zip("IWO", level.split_bytes or ())))
           for level in (rfs, srams) for T in level.holds]
    return replace(hierarchy, levels=(*own, *rest), array_level=len(rfs.holds))


def _short(name: str) -> str:
    """'/layer2/layer2.0/downsample/downsample.0/Conv' -> 'layer2.0.downsample.0'."""
    parts = name.strip("/").split("/")[:-1]
    return ".".join(p for p, q in zip(parts, [*parts[1:], ""]) if not q.startswith(p + "."))


def _own(layer: Layer, hierarchy: Hierarchy, row: dict) -> str:
    """The extra cell: our preset with its own dataflow (its maximal unrollings) against ZigZag's C|K mapping."""
    cost = block(layer, hierarchy).cost
    return f" {cost.total_pj / row['energy_pj']:.3f}, {cost.utilisation:.2f} |"


def _cuts(layer: Layer, hierarchy: Hierarchy, row: dict) -> str:
    """The last cell: ZigZag's C|K unrolling with each RF cutting the loop nest at its own point (`rf_cuts`)."""
    seconds, result = ours(layer, rf_cuts(hierarchy))
    return f" {result.cost.total_pj / row['energy_pj']:.3f}, {seconds:.2f} |"


def main(rerun: bool, only: list[str]) -> None:
    print(f"## Beside ZigZag {VERSION}: ResNet-18 and MobileNet-V2 on ZigZag's own accelerators\n")
    print("ZigZag's least-energy mapping per layer (its search: spatial mappings, LOMA's loop orders, its cost model) "
          "against our exact `block` on the matching preset, same layers, same memories and per-access energies, "
          "same unrolling (C over rows, K over columns). CPU seconds on both sides. Both price alike: the zero border "
          "is made on chip (DRAM moves only the real input), partial sums are 16 bits wide (data 8), both ends of "
          "every transfer are charged (fills written into the level below, outputs read out of it, the zero a partial "
          "sum starts from). What still differs is in docs/blocking.md, \"Beside ZigZag\".\n")
    cases = [case for case in CASES + EXTRA if not only or case[0] in only]
    for network in NETWORKS:  # ZigZag reruns on request; only a missing ResNet-18 cache is made unasked
        for hardware, mapping, mapper in cases:
            if (network == "resnet18" or (hardware, mapping, mapper) in CASES) and (
                    rerun or (network == "resnet18" and not cache_path(hardware, mapper).exists()
                              and (hardware, mapping, mapper) in CASES)):
                run_zigzag(hardware, mapping, mapper, network)
    for network in NETWORKS:
        for hardware, mapping, _ in (case for case in CASES if case in cases):
            if not cache_path(hardware, "loma", network).exists():
                print(f"### {network} on {hardware}: no cached ZigZag run (`--rerun {hardware}` makes it: LOMA about "
                      "40 min for MobileNet-V2's 53 layers on this loaded machine)\n")
                continue
            rows = best_of_mappers(hardware, network)
            mappers = [m for h, _, m in CASES + EXTRA if h == hardware and cache_path(h, m, network).exists()]
            print(f"### {network} on {hardware}: ZigZag's `{hardware}.yaml` with `{mapping}.yaml` "
                  f"({' and '.join(m.upper() for m in mappers)}, least energy per layer; ZigZag's seconds are that "
                  f"mapper's), ours: preset `{PRESETS[hardware]}` with C on the rows, K on the columns\n")
            print("\n".join(table(hardware, rows)) + "\n")
            print("Where the optima part, per layer: ZigZag's energy minus ours (nJ) by level and operand (each "
                  "tool's own optimum; the MACs agree). "
                  + "; ".join(f"{lv} {ops}: {why}" for lv, ops, why in TERMS[hardware]) + ".\n")
            print("\n".join(differences(hardware, rows)) + "\n")


if __name__ == "__main__":
    main("--rerun" in sys.argv[1:], [a for a in sys.argv[1:] if a != "--rerun"])
