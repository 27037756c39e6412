"""Our ski-slopes beside AccelForge's (the peer of issue 18), each tool's curve and time, on GEMMs and a 3x3 conv.

AccelForge 1.0.467 (pip `accelforge`, Python >= 3.12; Orojenesis's Snowcat architecture as its example) runs in a
throwaway virtual environment under the system's temporary folder, never in the project's: this script finds a
Python 3.12+ (`python3.12` on PATH, or pyenv's), makes the environment once, and runs AccelForge's own ski-slope
recipe (`accelforge/plotting/skislope.py`: `examples/workloads/matmuls.yaml` on `examples/arches/snowcat.yaml`)
in a subprocess. Its detail pass draws mappings with Graphviz, so `dot` must be installed.

Run: .venv/bin/python -m benchmarks.bench_accelforge
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from engine.limit import at, gemm, ski_slope
from engine.limit.einsum import SAME, WINDOW, Einsum, Rank

VERSION = "1.0.467"
ENV = Path(tempfile.gettempdir()) / f"accelforge-{VERSION}-venv"
SHAPES = (64, 256, 1024)  # M = K = N, 8-bit words as in AccelForge's matmuls.yaml
WORKER = """
import json, sys, time
import accelforge as af
usage, accesses = "reservation<SEP>GlobalBuffer<SEP>-1<SEP>right", "Total<SEP>energy"
m, kn = int(sys.argv[1]), int(sys.argv[2])
start = time.perf_counter()
spec = af.Spec.from_yaml(af.examples.workloads.matmuls, af.examples.arches.snowcat,
                         jinja_parse_data={"M": m, "KN": kn, "N_EINSUMS": 1})
spec.mapper.metrics = af.Metrics.ENERGY | af.Metrics.RESOURCE_USAGE
data = spec.map_workload_to_arch().data[[usage, accesses]].sort_values(usage)
size = spec.arch.nodes["GlobalBuffer"].size
points = [(float(u) * size, float(a)) for u, a in zip(data[usage], data[accesses])]
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "points": points}))
"""


def python312() -> str | None:
    """A Python >= 3.12 interpreter on this machine, or None."""
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)
        if found:
            return found
    found = sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1[23]*/bin/python")))
    return found[0] if found else None


def environment(python: str) -> Path:
    """The throwaway environment's interpreter, made and filled on first use."""
    exe = ENV / "bin" / "python"
    if not exe.exists():
        subprocess.run([python, "-m", "venv", str(ENV)], check=True)
        subprocess.run([str(exe), "-m", "pip", "install", "-q", f"accelforge=={VERSION}"], check=True,
                       capture_output=True)
    return exe


def accelforge_curve(exe: Path, n: int) -> tuple[float, list[tuple[int, int]]]:
    """(seconds, Pareto points in bits) of AccelForge's Snowcat ski-slope of an n x n x n GEMM."""
    proc = subprocess.run([str(exe), "-c", WORKER, str(n), str(n)], capture_output=True, text=True, timeout=1800,
                          cwd=ENV)  # it draws mapping.svg into its working folder
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    return out["seconds"], [(round(b), round(a)) for b, a in out["points"]]


CONV_JSON = Path(__file__).parent / "data" / "accelforge_conv3x3.json"  # one AccelForge run, cached (85 s)
CONV_YAML = """
workload:
  rank_sizes: {B: 1, H: 58, W: 58, P: 56, Q: 56, C: 64, K: 64}
  bits_per_value: {All: 8}
  einsums:
  - name: Conv
    tensor_accesses:
    - name: I
      projection: {H: p + r, W: q + s, C: c, B: b}
    - {name: Wt, projection: [k, c, r, s]}
    - {name: O, projection: [b, k, p, q], output: True}
    renames: {input: I, output: O, weight: Wt}
    iteration_space_shape: [0 <= r < 3, 0 <= s < 3]
"""
CONV_WORKER = """
import json, sys, time
import accelforge as af
usage, accesses = "reservation<SEP>GlobalBuffer<SEP>-1<SEP>right", "Total<SEP>energy"
start = time.perf_counter()
spec = af.Spec.from_yaml(sys.argv[1], af.examples.arches.snowcat)
spec.mapper.metrics = af.Metrics.ENERGY | af.Metrics.RESOURCE_USAGE
data = spec.map_workload_to_arch().data[[usage, accesses]].sort_values(usage)
size = spec.arch.nodes["GlobalBuffer"].size
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start,
                              "points": [(float(u) * size, float(a)) for u, a in zip(data[usage], data[accesses])]}))
"""


def conv_einsum() -> Einsum:
    """Ours for AccelForge's conv workload: 3x3 windows over a 58x58 input without padding, 64 -> 64 channels."""
    window = Rank(56, 58, (WINDOW, 3, 1))
    return Einsum((Rank(1, 1, (SAME, 1, 1)), window, window), 64, 64, 9, 1, 58 * 58 * 64, 64 * 64 * 9, 56 * 56 * 64)


def accelforge_conv(exe: Path | None) -> dict | None:
    """AccelForge's conv ski-slope: the cached run (benchmarks/data), else one run now (saved), else None."""
    if CONV_JSON.exists():
        return json.loads(CONV_JSON.read_text())
    if exe is None:
        return None
    yaml = ENV / "conv3x3.yaml"
    yaml.write_text(CONV_YAML)
    proc = subprocess.run([str(exe), "-c", CONV_WORKER, str(yaml)], capture_output=True, text=True, timeout=1800,
                          cwd=ENV)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")).removeprefix("RESULT "))
    record = {"tool": f"accelforge {VERSION}", "seconds": round(out["seconds"], 1),
              "workload": "3x3 conv, 64 -> 64 channels, 58x58 input (56x56 output, no padding), batch 1, 8-bit",
              "points_bits": [[round(b), round(a)] for b, a in out["points"]]}
    CONV_JSON.write_text(json.dumps(record, indent=1) + "\n")
    return record


def conv_section(exe: Path | None) -> None:
    """The conv layer's curves side by side (AccelForge's from its cached run)."""
    record = accelforge_conv(exe)
    if record is None:
        return
    ski_slope.cache_clear()
    start = time.perf_counter()
    ours = tuple((b * 8, t * 8) for b, t in ski_slope(conv_einsum(), 8, 1))
    mine = time.perf_counter() - start
    theirs = record["points_bits"]
    same = sum(at(ours, b) == a for b, a in theirs)
    below = sum(at(ours, b) is not None and at(ours, b) < a for b, a in theirs)
    none = sum(at(ours, b) is None for b, _ in theirs)
    print(f"\n{record['workload']}, bits on both axes (AccelForge's points from its one cached run, "
          f"`{CONV_JSON.relative_to(Path(__file__).parent.parent)}`):\n")
    print("| conv | AccelForge (s) | ours (s) | steps AccelForge / ours | full reuse at (bits) AccelForge / ours "
          "| AccelForge points ours equals / goes below / has no mapping |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| 3x3, 64 -> 64, 56x56 | {record['seconds']:.1f} | {mine:.3f} | {len(theirs)} / {len(ours)} "
          f"| {theirs[-1][0]:,} / {ours[-1][0]:,} | {same} / {below} / {none} |")


def main() -> None:
    print("## Ski-slopes beside AccelForge's (engine.limit vs AccelForge 1.0.467)\n")
    python = python312()
    if python is None or shutil.which("dot") is None:
        print("Not run: needs a Python >= 3.12 and Graphviz's `dot` on this machine.")
        return
    exe = environment(python)
    print("n x n x n GEMM, 8-bit words, bits on both axes; ours with one element of room for the streamed operand "
          "(the paper's convention, `ski_slope(e, 8, stream=1)`). AccelForge tiles with perfect factors, ours with "
          "any tile (ceil trips), so ours has more steps and is at or below AccelForge's curve everywhere.\n")
    print("| GEMM | AccelForge (s) | ours (s) | steps AccelForge / ours | full reuse at (bits) AccelForge / ours "
          "| AccelForge points ours equals / goes below / goes above |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in SHAPES:
        seconds, theirs = accelforge_curve(exe, n)
        ski_slope.cache_clear()
        start = time.perf_counter()
        ours = [(b * 8, t * 8) for b, t in ski_slope(gemm(n, n, n, 8), 8, 1)]
        mine = time.perf_counter() - start
        same = below = above = 0
        for bits, accesses in theirs:
            value = at(tuple(ours), bits)
            same += value == accesses
            below += value is not None and value < accesses
            above += value is None or value > accesses
        print(f"| {n}^3 | {seconds:.1f} | {mine:.3f} | {len(theirs)} / {len(ours)} | {theirs[-1][0]:,} / {ours[-1][0]:,} "
              f"| {same} / {below} / {above} |")
    conv_section(exe)


if __name__ == "__main__":
    main()
