"""Our ski-slopes beside AccelForge's (the peer of issue 18), each tool's curve and time, on the same GEMMs.

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


if __name__ == "__main__":
    main()
