"""Fuzz the ONNX importer and every API call after it with mutated and hostile files (tests/fuzz_cases.py).

    .venv/bin/python -m benchmarks.fuzz_onnx --cases 5000 --seed 1 [--timeout 60] [--memory-gb 4]

Each case runs in its own forked process with an address-space limit and a CPU-time limit (resource.setrlimit),
so that its verdict does not depend on what else the machine runs, and a wall-clock backstop (ten times the CPU
limit) for a case that waits without computing: load_network, then on success fuse (optimus), evaluate (dnnvm),
allocate (COSMA, 1 s limit), partition and plan_modules. A case ends as ok, EngineError (with the step), another
exception type (a crash), killed by the memory limit (MemoryError or a signal), or a hang (over the CPU limit, or
over the backstop while waiting). Prints a markdown section.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

import engine
from tests.fuzz_cases import base_models, cases, run_case


def _forked(path: Path, cpu_seconds: float, memory_bytes: int) -> tuple[str, str]:
    """run_case in a child process with memory and CPU-time limits (SIGXCPU ends it) and a wall-clock backstop."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: limit, run, report through the pipe, leave without cleanup
        os.close(read)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a solver's banner is not the report
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        cpu = max(1, round(cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        outcome, detail = run_case(path)
        os.write(write, f"{outcome}\t{detail}".encode(errors="replace")[:4000])
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 10 * cpu_seconds
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return "hang", f"over {10 * cpu_seconds:.0f} s of wall time (waiting, not computing)"
        time.sleep(0.01)
    text = os.read(read, 4096).decode(errors="replace")
    os.close(read)
    if not text:
        signalled = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if signalled == signal.SIGXCPU or (signalled == signal.SIGKILL and usage.ru_utime > cpu_seconds):
            return "hang", f"over {cpu_seconds:.0f} CPU s"
        return "memory" if os.WIFSIGNALED(status) else "crash", f"exit status {status}"
    outcome, _, detail = text.partition("\t")
    return outcome, detail


def _warm_up(path: Path) -> None:
    """Load every lazily imported module and compiled function before the children fork, so each case costs
    only itself. Not allocate: a child forked after HiGHS has run can deadlock."""
    acc = engine.Accelerator.preset("optimus").with_buffer(64 * 1024)
    for model in base_models():
        path.write_bytes(model.SerializeToString())
        graph = engine.load_network(path)
        engine.fuse(graph, acc, method="optimus")
        engine.evaluate(graph, acc, methods=("dnnvm",))
        engine.partition(graph, {"conv", "matmul", "eltwise"})
        engine.plan_modules(graph, acc)
        engine.allocation.budgets(graph)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0, help="CPU seconds a case may take")
    parser.add_argument("--memory-gb", type=float, default=4.0)
    args = parser.parse_args(argv)
    counts = collections.Counter()
    by_mutation = collections.defaultdict(collections.Counter)
    bad = []
    from engine.fusion.optimus import compile_ahead

    compile_ahead()  # once here, not in every child
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "case" / "model.onnx"
        path.parent.mkdir()
        _warm_up(path)
        for label, data in cases(args.seed, args.cases):
            path.write_bytes(data)
            outcome, detail = _forked(path, args.timeout, int(args.memory_gb * 1024**3))
            counts[outcome] += 1
            by_mutation[label.rsplit(":", 1)[1]][outcome] += 1
            if sum(counts.values()) % 250 == 0:
                print(f"{sum(counts.values())} cases: {dict(counts)}", file=sys.stderr, flush=True)
            if outcome not in ("ok", "engine_error"):
                bad.append(f"{label}: {outcome} {detail}")
                print(bad[-1], file=sys.stderr, flush=True)
    elapsed = time.time() - started
    outcomes = ("ok", "engine_error", "crash", "memory", "hang")
    print("## ONNX fuzz (import and every API call after it)\n")
    print(f"{args.cases} mutated files (seed {args.seed}), each in its own process with {args.memory_gb:g} GB of "
          f"address space and {args.timeout:g} CPU s (a wall backstop at ten times that); {elapsed:.0f} s in all.\n")
    print("| mutation | " + " | ".join(outcomes) + " |")
    print("| --- |" + " ---: |" * len(outcomes))
    for mutation in sorted(by_mutation):
        print(f"| {mutation} | " + " | ".join(str(by_mutation[mutation][o]) for o in outcomes) + " |")
    print("| **all** | " + " | ".join(f"**{counts[o]}**" for o in outcomes) + " |")
    if bad:
        print("\nNot an EngineError:\n")
        print("\n".join(f"- {b}" for b in bad[:40]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
