"""The attainable limit (engine.limit): Orojenesis's published findings reproduced, limits beside plans, speed.

Run: .venv/bin/python -m benchmarks.bench_limit   (prints the markdown section of BENCHMARKS.md; docs/limit.md
quotes its reproduction tables)
"""

from __future__ import annotations

import time

import engine
from engine.explore import CURVE_BUFFERS_KB
from engine.fusion import fuse
from engine.graph import OpKind
from engine.limit import gemm, ski_slope
from engine.limit.chain import Stage, fused_bytes, segmented_bytes, unfused_bytes
from engine.limit.einsum import ski_slope as _ski_slope
from engine.limit.ops import tables
from engine.zoo._builder import Net

KB, MIB = 1024, 1 << 20
# GPT-3-6.7B (Huang et al. Sec. VII): d 4096, 32 heads of 128, FFN 16384, 2048 tokens x batch 16, 2-byte words
L, BATCH, D, HEADS, F, C = 2048, 16, 4096, 32, 128, 16384


def gpt3_block(flash: bool) -> tuple[tuple[Stage, ...], tuple[Stage, ...]]:
    """(the fused chain Q_proj .. mm_2, the two projections the paper leaves unfused: K_proj, V_proj).

    FlashAttention-style (Sec. VII-A): bmm_QK TiledN (query rows, one key column at a time), bmm_QKV TiledK (one
    key's probabilities, output rows accumulated): F + 1 elements per row and head under the sequential rule;
    FLAT: bmm_QK TiledK (whole score rows), bmm_QKV TiledN: L + 1. Element-wise ops and softmax statistics are
    left out, as the paper does.
    """
    held = F + 1 if flash else None
    qk = Stage("bmm_QK", L, F, L, heads=HEADS, copies=BATCH, shared=False, row_elems=held or 1 + L)
    qkv = Stage("bmm_QKV", L, L, F, heads=HEADS, copies=BATCH, shared=False, row_elems=held or L + 1)
    chain = (Stage("Q_proj", L, D, D, copies=BATCH), qk, qkv, Stage("Final_proj", L, D, D, copies=BATCH),
             Stage("mm_1", L, D, C, copies=BATCH), Stage("mm_2", L, C, D, copies=BATCH))
    return chain, (Stage("K_proj", L, D, D, copies=BATCH), Stage("V_proj", L, D, D, copies=BATCH))


def reproduction() -> str:
    chain, side = gpt3_block(flash=True)
    lines = ["### GPT-3-6.7B block: fused vs unfused (paper Fig. 22: 2.5x fewer accesses at 50 MB, 4.7 G fewer; up to "
             "5.6x above 320 MB, 6 G fewer)", "",
             "The paper's templates (Fig. 16-17: TiledKN, TiledK, Full, TiledN by position) and sequential buffer rule "
             "(Sec. V-B); accesses of 2 bytes.", "",
             "| buffer | unfused (GB) | fused, best segmentation (GB) | unfused / fused | accesses saved (G) | paper |",
             "|---|---:|---:|---:|---:|---|"]
    paper = {50 * MIB: "2.5x, 4.7 G", 512 * MIB: "5.6x, 6 G (above 320 MB)"}
    sizes = [("1 MiB", MIB), ("4 MiB", 4 * MIB), ("16 MiB", 16 * MIB), ("32 MiB", 32 * MIB), ("50 MB", 50_000_000),
             ("50 MiB", 50 * MIB), ("70 MiB", 70 * MIB), ("80 MiB", 80 * MIB), ("100 MiB", 100 * MIB),
             ("200 MiB", 200 * MIB), ("320 MiB", 320 * MIB),
             ("352 MiB", 352 * MIB), ("352.04 MiB", 369_139_712), ("512 MiB", 512 * MIB)]
    for label, nbytes in sizes:
        un = unfused_bytes(chain + side, nbytes)
        fu = segmented_bytes(chain, nbytes) + unfused_bytes(side, nbytes)
        lines.append(f"| {label} | {un / 1e9:.2f} | {fu / 1e9:.2f} | {un / fu:.2f}x | {(un - fu) / 2e9:.2f} | "
                     f"{paper.get(nbytes, '')} |")
    lines += ["", "### Multi-head attention (bmm_QK, softmax, bmm_QKV) fused: FlashAttention vs FLAT "
              "(paper Fig. 20: > 6x fewer at 16 MB, equal at 32 MB)", "",
              "| buffer | unfused (GB) | FLAT (GB) | FlashAttention (GB) | FLAT / FlashAttention | "
              "the same, row tiles dividing 2048 (perfect factors) |", "|---|---:|---:|---:|---:|---:|"]
    mha = {flash: gpt3_block(flash)[0][1:3] for flash in (True, False)}
    for label, nbytes in (("8 MiB", 8 * MIB), ("16 MB", 16_000_000), ("16 MiB", 16 * MIB), ("32 MB", 32_000_000),
                          ("32 MiB", 32 * MIB), ("33 MiB", 33 * MIB), ("64 MiB", 64 * MIB)):
        un = unfused_bytes(mha[True], nbytes)
        flat, flash = fused_bytes(mha[False], nbytes), fused_bytes(mha[True], nbytes)
        flat_f, flash_f = (fused_bytes(mha[f], nbytes, factors=True) for f in (False, True))
        lines.append(f"| {label} | {un / 1e9:.2f} | {_gb(flat)} | {_gb(flash)} | {_ratio(flat, flash)} | "
                     f"{_ratio(flat_f, flash_f)} |")
    return "\n".join(lines)


def _ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _gb(nbytes: int | None) -> str:
    return "no tile fits" if nbytes is None else f"{nbytes / 1e9:.2f}"


def gemm_first_principle() -> str:
    lines = ["### GEMM: maximal effectual buffer (paper Sec. IV-1: smallest operand + smallest rank + 1 elements)", "",
             "| M x K x N | full reuse at (elements) | smallest operand + smallest rank + 1 | share of all operands | paper Fig. 11 |",
             "|---|---:|---:|---:|---:|"]
    for m, k, n, paper in ((2048, 2048, 2048, "33%"), (2048, 4096, 4096, "25%"), (2048, 2048, 4096, "20%"),
                           (8192, 2048, 2048, "11%")):
        full = ski_slope(gemm(m, k, n, 8), 8, 1)[-1][0]  # 8-bit words: bytes are elements
        formula = min(m * k, k * n, m * n) + min(m, k, n) + 1
        lines.append(f"| {m} x {k} x {n} | {full:,} | {formula:,} | {full / (m * k + k * n + m * n):.0%} | {paper} |")
    return "\n".join(lines)


def llama_like(layers: int = 32, seq: int = 2048, hidden: int = 4096, ffn: int = 14336, heads: int = 32,
               kv_heads: int = 8, vocab: int = 128256) -> engine.Graph:
    """A Llama-3-8B-shaped prefill (GQA projections, SwiGLU) built with the zoo's Net, for timing only."""
    net = Net("llama_like", 1)
    dh = hidden // heads
    x = net.input((seq, hidden))
    for i in range(layers):
        p = f"layers.{i}"
        h = net.unary(x, f"{p}.input_norm", "RMSNorm", OpKind.NORM, own=((f"{p}.input_norm.weight", (hidden,)),))
        q = net.linear(h, f"{p}.q_proj", hidden, bias=False)
        k = net.linear(h, f"{p}.k_proj", kv_heads * dh, bias=False)
        v = net.linear(h, f"{p}.v_proj", kv_heads * dh, bias=False)
        q = net.reshape(q, f"{p}.q_heads", (1, seq, heads, dh))
        k = net.reshape(k, f"{p}.k_heads", (1, seq, kv_heads, dh))
        v = net.reshape(v, f"{p}.v_heads", (1, seq, kv_heads, dh))
        s = net.matmul(net.transpose(q, f"{p}.q_t", (0, 2, 1, 3)), net.transpose(k, f"{p}.k_t", (0, 2, 3, 1)),
                       f"{p}.scores")
        a = net.matmul(net.unary(s, f"{p}.softmax", "Softmax", OpKind.SOFTMAX), net.transpose(v, f"{p}.v_t", (0, 2, 1, 3)),
                       f"{p}.context")
        a = net.reshape(net.transpose(a, f"{p}.merge", (0, 2, 1, 3)), f"{p}.merge_view", (1, seq, hidden))
        x = net.eltwise((net.linear(a, f"{p}.o_proj", hidden, bias=False), x), f"{p}.add_1")
        h = net.unary(x, f"{p}.post_norm", "RMSNorm", OpKind.NORM, own=((f"{p}.post_norm.weight", (hidden,)),))
        gate = net.linear(h, f"{p}.gate_proj", ffn, bias=False, act="Swish")
        up = net.linear(h, f"{p}.up_proj", ffn, bias=False)
        x = net.eltwise((net.linear(net.eltwise((gate, up), f"{p}.swiglu", "Mul"), f"{p}.down_proj", hidden, bias=False),
                         x), f"{p}.add_2")
    net.linear(net.unary(x, "norm", "RMSNorm", OpKind.NORM, own=(("norm.weight", (hidden,)),)), "lm_head", vocab,
               bias=False)
    return net.graph()


def speed() -> str:
    lines = ["### Speed: the whole curve of limits (14 buffer sizes, 8 KB .. 64 MB), `optimus` preset, batch 1", "",
             "CPU seconds (`time.process_time`: the machine is shared).", "",
             "| network | ops | first curve (CPU s) | again, cached ski-slopes and cuts (CPU ms) |", "|---|---:|---:|---:|"]
    acc = engine.Accelerator.preset("optimus")
    sizes = [kb * KB for kb in CURVE_BUFFERS_KB]
    graphs = [(name, engine.load_network(name)) for name in ("resnet50", "vit_b_16", "transformer")]
    names = engine.zoo.names()
    graphs += [(n, engine.load_network(n)) for n in ("llama3_8b_prefill",) if n in names]
    graphs.append(("Llama-3-8B-shaped prefill (32 layers, seq 2048; built here)", llama_like()))
    for name, g in graphs:
        tables.cache_clear()
        _ski_slope.cache_clear()
        start = time.process_time()
        engine.limit.curve(g, acc, sizes)
        cold = time.process_time() - start
        start = time.process_time()
        engine.limit.curve(g, acc, sizes)
        warm = time.process_time() - start
        lines.append(f"| {name} | {len(g.ops)} | {cold:.2f} | {warm * 1e3:.1f} |")
    return "\n".join(lines)


FIRST_CURVE = """
import time
start, cpu = time.perf_counter(), time.process_time()
import engine
from engine.explore import CURVE_BUFFERS_KB
g = engine.load_network("llama3_8b_prefill")
engine.limit.curve(g, engine.Accelerator.preset("optimus"), [kb * 1024 for kb in CURVE_BUFFERS_KB])
print(time.perf_counter() - start, time.process_time() - cpu, time.process_time())
"""


def cold_start(runs: int = 5) -> str:
    """The first limit curve of a fresh process, imports included: wall and CPU seconds of the whole interpreter, and
    CPU seconds from the first import to the curve (imports, load, curve), with the machine's load beside them.

    One interpreter runs first, untimed, so that Python's compiled bytecode of the engine is on disk as it is after
    any first run (an environment that sets PYTHONDONTWRITEBYTECODE would otherwise compile every module each time)."""
    import os
    import resource
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", FIRST_CURVE], capture_output=True, text=True, check=True, env=env)
    walls, cpus, inner = [], [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", FIRST_CURVE], capture_output=True, text=True, check=True, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", FIRST_CURVE], capture_output=True, text=True, check=True, env=env)
        inner.append(float(out.stdout.split()[1]))
    load = os.getloadavg()[0]
    return ("### The first curve of a fresh process (issue 27: under 1 s)\n\n"
            f"`llama3_8b_prefill`, the 14 sizes of the what-if curve, `optimus` preset, {runs} fresh interpreters: "
            f"median {_median(cpus):.2f} CPU s for the whole process (best {min(cpus):.2f}), of which "
            f"{_median(inner):.2f} CPU s from the first import to the curve (engine imported, network loaded, every "
            f"limit computed; neither Numba nor networkx is imported); wall {_median(walls):.2f} s (best "
            f"{min(walls):.2f}) with the load average at {load:.1f} on {os.cpu_count()} cores.")


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def beside_plans() -> str:
    lines = ["### Plans beside the limits (MB of DRAM traffic, batch 1, `optimus` preset)", "",
             "| network | buffer | none | layer-by-layer limit | optimus | fused limit | optimus / fused limit | Oracle |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    base = engine.Accelerator.preset("optimus")
    cnn, llm = (32, 512, 8192), (128, 1024, 8192, 65536)
    for name, sizes in (("resnet50", cnn), ("mobilenet_v2", cnn), ("googlenet", cnn), ("vit_b_16", cnn),
                        ("transformer", cnn), ("bert_base", llm), ("gpt2", llm), ("llama3_8b_prefill", llm),
                        ("llama3_8b_decode", (2048, 8192))):
        g = engine.load_network(name)
        for kb in sizes:
            acc = base.with_buffer(kb * KB)
            lim = engine.limit.network(g, acc)
            none, best = (fuse(g, acc, method=m, bound=False).dram_bytes for m in ("none", "optimus"))
            lines.append(f"| {name} | {kb} KB | {none / 1e6:.2f} | {lim.layerwise_bytes / 1e6:.2f} | {best / 1e6:.2f} "
                         f"| {lim.fused_bytes / 1e6:.2f} | {best / lim.fused_bytes:.2f} | {lim.oracle_bytes / 1e6:.2f} |")
    return "\n".join(lines)


LANGUAGE_MODELS = ("bert_base", "gpt2", "vit_b_16", "gpt3_6.7b_block", "llama3_8b_prefill", "llama3_8b_decode")


def language_models(sizes_kb=CURVE_BUFFERS_KB) -> str:
    """Every zoo transformer and LLM against the tight fused limit at every size of the what-if curve."""
    lines = ["### Transformers and LLMs against the tight fused limit (MB, batch 1, `optimus` preset, 16-bit)", "",
             "`bound`: `tight` where the segmentation sets the fused limit, `valid` where the per-op bound does. "
             "`search`: the plan's status (`optimal`: no partition of the cost model moves less, so a gap above "
             "1.10x is the bound's, not the plan's).", "",
             "| network | buffer | optimus | fused limit | bound | per-op bound | optimus / limit | search |",
             "|---|---:|---:|---:|---|---:|---:|---|"]
    base = engine.Accelerator.preset("optimus")
    for name in LANGUAGE_MODELS:
        g = engine.load_network(name)
        for kb in sizes_kb:
            acc = base.with_buffer(kb * KB)
            try:
                plan = fuse(g, acc, method="optimus")
            except engine.EngineError:
                lines.append(f"| {name} | {kb} KB | does not run | | | | | |")
                continue
            lim = engine.limit.network(g, acc)
            lines.append(f"| {name} | {kb} KB | {plan.dram_bytes / 1e6:,.1f} | {lim.fused_bytes / 1e6:,.1f} | "
                         f"{lim.fused_kind} | {lim.valid_bytes / 1e6:,.1f} | {plan.dram_bytes / lim.fused_bytes:.3f} | "
                         f"{plan.status} |")
    return "\n".join(lines)


def main() -> None:
    print("## Attainable limit (Orojenesis ski-slope), `engine.limit`\n")
    print("Figures from Huang et al., \"Mind the Gap\" (ISCA 2024), next to ours; docs/limit.md says where and why they "
          "differ. GB = 1e9 bytes, MiB = 2^20 bytes, 2-byte words.\n")
    for part in (reproduction, gemm_first_principle, beside_plans, language_models, speed, cold_start):
        print(part())
        print()


if __name__ == "__main__":
    main()
