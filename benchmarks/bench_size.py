"""Size: time and peak memory of fuse (optimus) and evaluate against the graph's size, each call fenced.

Every case runs in its own subprocess under a CPU-time limit (CPU_LIMIT_S, `RLIMIT_CPU`: the machine is shared,
so wall time measures the neighbours too), a wall-clock timeout (TIMEOUT_S) and an address-space cap
(MEMORY_CAP_BYTES, `resource.setrlimit(RLIMIT_AS)`), so a runaway case is reported as "over the CPU limit",
"timeout" or "MemoryError", never hangs the run. Each call's CPU seconds (`time.process_time`) are printed beside
its wall seconds. Peak memory is the child's `ru_maxrss` (the interpreter, numpy, numba and
the compiled fusion kernel included: about 200 MB before any graph). The solver-limit cases time
`allocate(..., time_limit_s=...)` and `budgets()` on zoo networks beside the limit they were given; the
allocation cases time `budgets()` and `allocate(M_H, time_limit_s=1)` (the fuzz's calls) on its size-stress cases
and wide fans; the partition cases time `partition` of a wide fan and a long chain with every op supported; the
import cases time `load_network`, `partition` and `plan_modules` on ONNX files of the fuzz's stress shapes (a wide
Concat, a residual chain) at 1k, 10k and 25k ops.

Run: .venv/bin/python -m benchmarks.bench_size [CASE[:fuse|:evaluate] ...]   (prints the markdown section of
BENCHMARKS.md)
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time

from engine.graph import Graph, OpKind
from engine.zoo._builder import Net

CPU_LIMIT_S = 60  # the "within 60 s", in CPU seconds of the whole subprocess (imports and graph included)
TIMEOUT_S = 600  # wall: only a hang reaches it
MEMORY_CAP_BYTES = 3 * 1024**3  # address space: numba's LLVM alone reserves ~1 GB of it; resident peaks stay under 2 GB


def chain(ops: int) -> Graph:
    """`ops` / 2 x (Conv 3x3 + Add of the block's input) on a 1x4x8x8 input: a residual chain of `ops` ops."""
    net = Net(f"chain_{ops}", 1)
    x = net.input((4, 8, 8), "x")
    for k in range(ops // 2):
        y = net.conv(x, f"conv{k}", 4, 3, padding=1)
        x = net.eltwise((x, y), f"add{k}")
    return net.graph()


def fan_out(readers: int) -> Graph:
    """A Conv whose output `readers` Relus read, summed by one Sum: readers + 2 ops."""
    net = Net(f"fan_out_{readers}", 1)
    x = net.conv(net.input((4, 8, 8), "x"), "conv", 4, 3, padding=1)
    outs = [net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 4, 8, 8),))[0] for k in range(readers)]
    net.eltwise(outs, "sum", "Sum")
    return net.graph()


def fan_out_open(readers: int) -> Graph:
    """A Conv whose output `readers` Relus read, each Relu's output a network output: readers + 1 ops (a fan
    that can run, unlike `fan_out`, whose Sum must hold every reader's output at once)."""
    net = Net(f"fan_out_open_{readers}", 1)
    x = net.conv(net.input((4, 8, 8), "x"), "conv", 4, 3, padding=1)
    for k in range(readers):
        net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 4, 8, 8),))
    return net.graph()


def fan_out_tree(readers: int) -> Graph:
    """A Conv whose output `readers` Relus read, summed pairwise by a tree of Adds: 2 x readers ops."""
    net = Net(f"fan_out_tree_{readers}", 1)
    x = net.conv(net.input((4, 8, 8), "x"), "conv", 4, 3, padding=1)
    level = [net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (x,), ((1, 4, 8, 8),))[0] for k in range(readers)]
    while len(level) > 1:
        pairs = [level[i:i + 2] for i in range(0, len(level), 2)]
        level = [net.eltwise(tuple(p), f"add{len(net.ops)}") if len(p) == 2 else p[0] for p in pairs]
    return net.graph()


def concat(inputs: int) -> Graph:
    """`inputs` network inputs of 1x1x4x4, each through a Relu, joined by one Concat: `inputs` + 1 ops."""
    net = Net(f"concat_{inputs}", 1)
    relus = [net.add_op(f"relu{k}", OpKind.ELTWISE, "Relu", (net.input((1, 4, 4), f"x{k}"),), ((1, 1, 4, 4),))[0]
             for k in range(inputs)]
    net.concat(relus, "concat")
    return net.graph()


def wide_depthwise(width: int) -> Graph:
    """One depthwise Conv 3x3, stride 2, on x[1, 4, 6, width] (the 272-byte ONNX file of issue 28)."""
    net = Net(f"depthwise_{width}", 1)
    net.conv(net.input((4, 6, width), "x"), "dw", 4, 3, stride=2, groups=4)
    return net.graph()


def llama3_70b(tokens: int) -> Graph:
    """Llama-3-70B (the zoo's Llama code at `llm.LLAMA3_70B`, 80 decoder layers): a prefill of `tokens` tokens, or
    with -`tokens` one token decoded against a KV cache of that many. Not in the zoo: every zoo network runs through
    the suite's per-network tests, and these two would add about 95 s there."""
    from engine.zoo import llm

    net = Net(f"llama3_70b_{'prefill' if tokens > 0 else 'decode'}", 1)
    if tokens > 0:
        llm.llama_prefill(net, tokens, llm.LLAMA3_70B)
    else:
        llm.llama_decode(net, -tokens, llm.LLAMA3_70B)
    return net.graph()


def fuzz_case(number: int) -> Graph:
    """Case `number` of the fuzz's first 300 (seed 1, `tests.fuzz_cases.cases`), imported as the harness does."""
    import tempfile
    import warnings
    from pathlib import Path

    import engine
    from tests.fuzz_cases import cases

    label, data = next(c for k, c in enumerate(cases(1, 300)) if k == number)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a partial import is still a graph to allocate
        path = Path(tmp) / f"case{number}.onnx"
        path.write_bytes(data)
        return engine.load_network(path)


def onnx_wide_concat(ops: int) -> bytes:
    """An ONNX file: a Conv on x[1, 4, 8, 8] whose output `ops` - 2 Relus read, joined by one Concat along the
    channels (the fuzz's `wide_concat`): `ops` ops."""
    from tests.fuzz_cases import relus_joined

    graph = _onnx_graph(f"onnx_wide_concat_{ops}")
    relus_joined(graph, "c", [f"r{k}" for k in range(ops - 2)], "Concat", "y", axis=1)
    return _onnx_file(graph, "y")


def onnx_residual_chain(ops: int) -> bytes:
    """An ONNX file: a Conv on x[1, 4, 8, 8], then (`ops` - 1) / 2 x (Relu of x, Add of x and the Relu), the fuzz's
    `residual_chain`: `ops` ops when odd."""
    from tests.fuzz_cases import residual_blocks

    graph = _onnx_graph(f"onnx_residual_chain_{ops}")
    return _onnx_file(graph, residual_blocks(graph, "c", (ops - 1) // 2))


def _onnx_graph(name: str):
    """An ONNX graph of one Conv, c = conv(x[1, 4, 8, 8], a 4x4x3x3 weight w, padded): the stress shapes' start."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), dtype=np.float32), "w")
    return helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])], name,
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])], [],
                             initializer=[w])


def _onnx_file(graph, output: str) -> bytes:
    """The model's bytes: `graph` returning `output`."""
    from onnx import TensorProto, helper

    graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, None))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


CASES = {  # name -> (builder, argument)
    "chain_1k": (chain, 1_000), "chain_2k": (chain, 2_000), "chain_10k": (chain, 10_000),
    "chain_100k": (chain, 100_000),
    "fan_out_1k": (fan_out, 1_000), "fan_out_5k": (fan_out, 5_000), "fan_out_10k": (fan_out, 10_000),
    "fan_out_100k": (fan_out, 100_000), "fan_out_open_10k": (fan_out_open, 10_000),
    "fan_out_open_100k": (fan_out_open, 100_000),
    "fan_out_tree_10k": (fan_out_tree, 10_000),
    "concat_20k": (concat, 20_000), "concat_100k": (concat, 100_000),
    "depthwise_2^24": (wide_depthwise, 2**24), "depthwise_2^31": (wide_depthwise, 2**31),
    "llama3_70b_prefill": (llama3_70b, 2048), "llama3_70b_decode": (llama3_70b, -2048),
}
CALLS = ("fuse", "evaluate")
LIMITS = {  # name -> (network, what is timed, time limit given in seconds or None)
    **{f"allocate_{net}_M_R_{limit:g}s": (net, "allocate", limit)
       for net in ("resnet1202", "nasnet_a_mobile", "llama3_8b_prefill") for limit in (0.01, 0.1, 1.0)},
    "budgets_llama3_8b_prefill": ("llama3_8b_prefill", "budgets", None),
    "budgets_resnet1202": ("resnet1202", "budgets", None),
    "budgets_nasnet_a_mobile": ("nasnet_a_mobile", "budgets", None),
}
# name -> (graph source, argument): `budgets()` and `allocate(M_H, time_limit_s=1)` as the fuzz calls them
ALLOCATIONS = {
    # residual_chain, wide_concat and wide_fan of seed 1
    **{f"fuzz_case_{n}": (fuzz_case, n) for n in (34, 39, 276)},
    "alloc_fan_out_25k": (fan_out, 25_000), "alloc_fan_out_100k": (fan_out, 100_000),
}
PARTITIONS = {  # name -> (builder, argument): `partition` with every op supported (one region, post-pruned)
    "partition_fan_out_10k": (fan_out, 10_000), "partition_chain_10k": (chain, 10_000),
    "partition_fan_out_100k": (fan_out, 100_000), "partition_chain_100k": (chain, 100_000),
}

IMPORTS = {  # name -> (ONNX file builder, ops): the import, `partition` and `plan_modules` of the fuzz's stress shapes
    f"onnx_{shape}_{label}": (build, ops) for shape, build in (("wide_concat", onnx_wide_concat),
                                                                ("residual_chain", onnx_residual_chain))
    for label, ops in (("1k", 1_001), ("10k", 10_001), ("25k", 25_001))
}
IMPORT_CALLS = ("load_network", "partition", "plan_modules")


def child(name: str, call: str) -> dict:
    """Run one case in this process (the parent fenced it) and return what happened."""
    import engine
    from engine.allocation import budgets, mpmf
    from engine.allocation.problem import requirement

    if name in LIMITS:
        net, call, limit = LIMITS[name]
        g = engine.load_network(net)
        start, cpu = time.perf_counter(), time.process_time()
        if call == "budgets":
            got = budgets(g)
            return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                    "status": "M_R, M_H, M_P = " + ", ".join(map(str, got))}
        m_r = max(requirement(g, op.name, include_params=False, word_bits=16) for op in g.ops)  # M_R, no order
        start, cpu = time.perf_counter(), time.process_time()
        got = engine.allocate(g, m_r, time_limit_s=limit)
        return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "status": got.status,
                "limit": limit}
    if name in ALLOCATIONS:
        build, arg = ALLOCATIONS[name]
        g = build(arg)
        start, cpu = time.perf_counter(), time.process_time()
        got = budgets(g)
        if call == "budgets":
            fp = mpmf(g)
            return {"ops": len(g.ops), "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                    "status": f"M_R, M_H, M_P = {', '.join(map(str, got))}; M_P {fp.status}"
                              + (f" (>= {fp.lower_bytes})" if fp.status != "optimal" else "")}
        start, cpu = time.perf_counter(), time.process_time()
        try:
            plan = engine.allocate(g, got[1], time_limit_s=1.0)
            status = f"{plan.status} (limit 1 s), {plan.offchip_bytes:,} B off chip"
        except MemoryError:
            status = f"MemoryError (over {MEMORY_CAP_BYTES // 1024**3} GB of address space)"
        return {"ops": len(g.ops), "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                "status": status}
    if name in PARTITIONS:
        build, arg = PARTITIONS[name]
        g = build(arg)
        start, cpu = time.perf_counter(), time.process_time()
        got = engine.partition(g, lambda op: True)
        return {"ops": len(g.ops), "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                "status": f"{len(got.parts)} parts"}
    if name in IMPORTS:
        return _imported(name, call)
    build, arg = CASES[name]
    g = build(arg)
    acc = engine.Accelerator.preset("optimus")
    start, cpu = time.perf_counter(), time.process_time()
    try:
        if call == "fuse":
            plan = engine.fuse(g, acc)
            status = f"{plan.status}, {len(plan.groups)} groups, {plan.dram_bytes:,} B" + (
                f", gap <= {plan.dram_bytes - plan.lower_bound_bytes:,} B ({plan.gap:.1%})"
                if plan.lower_bound_bytes is not None else "")
        else:
            report = engine.evaluate(g, acc)
            status = ", ".join(f"{m} {p.status}" for m, p in report.plans.items())
    except engine.EngineError as err:
        status = f"EngineError: {str(err)[:90]}"
    except MemoryError:
        status = f"MemoryError (over {MEMORY_CAP_BYTES // 1024**3} GB of address space)"
    return {"ops": len(g.ops), "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "status": status}


def _imported(name: str, call: str) -> dict:
    """One call on an ONNX file of IMPORTS: its import, or `partition` / `plan_modules` of the imported graph (64 KB
    of buffer, as the fuzz's harness)."""
    import tempfile
    import warnings
    from pathlib import Path

    import engine

    build, ops = IMPORTS[name]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.onnx"
        path.write_bytes(build(ops))
        start, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a Concat's output has no declared shape: the import infers it
            g = engine.load_network(path)
    if call == "partition":
        start, cpu = time.perf_counter(), time.process_time()
        got = engine.partition(g, {"conv", "matmul", "eltwise"})
        status = f"{len(got.parts)} parts, {got.crossing_bytes:,} B crossing"
    elif call == "plan_modules":
        start, cpu = time.perf_counter(), time.process_time()
        plan = engine.plan_modules(g, engine.Accelerator.preset("optimus").with_buffer(64 * 1024))
        status = f"{len(plan.modules)} modules, {plan.proposed.bytes:,} B of {plan.naive.bytes:,} B naive"
    else:
        status = f"{len(g.ops)} ops, {g.macs:,} MACs"
    return {"ops": len(g.ops), "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "status": status}


def fenced(name: str, call: str) -> dict:
    """`child(name, call)` in a subprocess under TIMEOUT_S and MEMORY_CAP_BYTES, with the child's resident peak."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 5))

    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_size", "--child", name, call],
                              capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        return {"seconds": time.perf_counter() - start, "status": f"timeout ({TIMEOUT_S} s)"}
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return {"seconds": time.perf_counter() - start, "status": f"over the CPU limit ({CPU_LIMIT_S} s)"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"seconds": time.perf_counter() - start, "status": f"crashed: {last[:90]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(names: list[str]) -> None:
    print("## Size: fuse and evaluate against the graph's size (`benchmarks/bench_size.py`)\n")
    print(f"Each call in its own subprocess, {CPU_LIMIT_S} CPU seconds and {MEMORY_CAP_BYTES // 1024**3} GB of address "
          "space; CPU s = the call's own (`time.process_time`), wall s = the same call on a shared machine; peak = "
          "the subprocess's resident peak (`ru_maxrss`; about 200 MB of it is the interpreter, numpy and the "
          "compiled kernel). `optimus` preset.\n")
    print("| case | ops | call | CPU s | wall s | peak MB | result |\n|---|---:|---|---:|---:|---:|---|")
    for arg in names or [*CASES, *LIMITS, *ALLOCATIONS, *PARTITIONS, *IMPORTS]:
        name, _, only = arg.partition(":")  # "chain_100k:fuse" runs one call of a case
        calls = (CALLS if name in CASES else ("budgets", "allocate") if name in ALLOCATIONS
                 else IMPORT_CALLS if name in IMPORTS else ("",))
        for call in ((only,) if only else calls):
            got = fenced(name, call)
            peak = got.get("peak_mb")
            cpu = f"{got['cpu']:.2f}" if "cpu" in got else "-"
            what = call or (LIMITS[name][1] if name in LIMITS else "partition")
            print(f"| {name} | {got.get('ops', '')} | {what} | {cpu} | {got['seconds']:.2f} | "
                  f"{peak if peak is not None else '-'} | {got['status']} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        got = child(sys.argv[2], sys.argv[3])
        got["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KB on Linux
        print(json.dumps(got))
    else:
        main(sys.argv[1:])
