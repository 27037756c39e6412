"""Lone attention matmuls on their ski-slope, and layout ops folded: the GPT-3-6.7B block before and after (issue 27).

The block as AccelForge's workload has it: the zoo's GPT-3-6.7B block (d 4096, 32 heads of 128, FFN 16384) at
8,192 tokens in one sequence, 8-bit words, on the `optimus` preset at each buffer size. "Before" figures were
measured with the same calls at commit 322793b (the tile model tiled a lone matmul of two activations in token rows only,
and priced the four head split/merge transposes as ops of their own); they are constants here, the rest is
computed.

Run: .venv/bin/python -m benchmarks.bench_lone_ops   (prints the markdown section of BENCHMARKS.md; a few minutes, most of
them the `optimus` searches on the 8,192-token block)
"""

from __future__ import annotations

import time

import engine
from engine.fusion import fuse, group_cost
from engine.limit import at, gemm, ski_slope
from engine.zoo._builder import Net
from engine.zoo.llm import _gpt_block

KB, MIB = 1024, 1 << 20
SIZES = (("64 KB", 64 * KB), ("1 MB", MIB), ("32 MiB", 32 * MIB))
# this script's figures at commit 322793b (MB): per buffer, scores and context alone, `none`, `optimus`, and the
# layer-by-layer limit
BEFORE = {"64 KB": (20535.3, 13186.9, 51985.8, 51683.8, 22683.9), "1 MB": (3355.4, 2885.7, 14831.7, 7751.7, 13019.4),
          "32 MiB": (2248.1, 2214.6, 10301.3, 1157.7, 10267.7)}
BEFORE_1024 = 503.4  # the layer-by-layer limit at 1,024 tokens and 1 GiB at commit 322793b (MB)
ATTENTION = (("block.attn.scores", (8192, 128, 8192)), ("block.attn.context", (8192, 8192, 128)))


def gpt3_block(tokens: int) -> engine.Graph:
    """The zoo's GPT-3-6.7B block at `tokens` tokens in one sequence (GPT-3's own context, 2,048, is what the zoo's
    name allows; AccelForge's workload runs 8,192)."""
    net = Net(f"gpt3_6.7b_block_{tokens}", 1)
    _gpt_block(net, net.input((tokens, 4096), "hidden_states"), "block", 32, 4 * 4096, packed=False,
               mlp=("mm_1", "mm_2"))
    return net.graph()


def main() -> None:
    g = gpt3_block(8192)
    print("## Lone attention matmuls and folded layout ops (issue 27)\n")
    print("GPT-3-6.7B block (zoo), 8,192 tokens in one sequence, 8-bit words, `optimus` preset. Scores Q K^T and "
          "context P V alone (`none`) against their ski-slope point (a batched GEMM per head, "
          "`engine.limit.op_curve`); the block's plans and limits. MB; before: commit 322793b. The layer-by-layer "
          "limit rises at 64 KB (the two matmuls have their ski-slope now, not a flat curve at compulsory traffic) "
          "and falls elsewhere by the folded transposes (four of 67.1 MB each at 8,192 tokens: 33.6 MB in, 33.6 out).\n")
    print("| buffer | scores alone, before / after / ski-slope | context alone, before / after / ski-slope | "
          "`none` before / after | `optimus` before / after | layer-by-layer limit before / after | fused limit, per-op / tight |")
    print("|---|---|---|---|---|---|---|")
    start = time.time()
    for label, nbytes in SIZES:
        acc = engine.Accelerator.preset("optimus").with_buffer(nbytes).with_word_bits(8)
        cells = []
        for (name, (m, k, n)), before in zip(ATTENTION, BEFORE[label][:2]):
            cost = group_cost(g, [name], acc).dram_bytes
            point = at(ski_slope(gemm(m, k, n, 8, batch=32), 8), nbytes)
            cells.append(f"{before:,.1f} / {cost / 1e6:,.1f} / {point / 1e6:,.1f}")
        none, opt = (fuse(g, acc, method=method) for method in ("none", "optimus"))
        lim = engine.limit.network(g, acc)
        b_none, b_opt, b_lw = BEFORE[label][2:]
        print(f"| {label} | {cells[0]} | {cells[1]} | {b_none:,.1f} / {none.dram_bytes / 1e6:,.1f} | "
              f"{b_opt:,.1f} / {opt.dram_bytes / 1e6:,.1f} | {b_lw:,.1f} / {lim.layerwise_bytes / 1e6:,.1f} | "
              f"{lim.valid_bytes / 1e6:,.1f} / {lim.fused_bytes / 1e6:,.1f} |")
    small = gpt3_block(1024)
    acc = engine.Accelerator.preset("optimus").with_buffer(1 << 30).with_word_bits(8)
    lw = engine.limit.network(small, acc).layerwise_bytes
    eltwise = sum(group_cost(small, [op.name], acc).dram_bytes for op in small.ops
                  if op.kind in (engine.OpKind.NORM, engine.OpKind.ELTWISE))
    print(f"\nUnfused at 1,024 tokens (a 1 GiB buffer: every op at its compulsory traffic): layer-by-layer limit "
          f"{lw / 1e6:,.1f} MB (before: {BEFORE_1024:,.1f}, the four head split/merge transposes 8.4 MB each); "
          f"less the two LayerNorms and two residual adds ({eltwise / 1e6:,.1f} MB), which AccelForge's workload "
          f"leaves out: {(lw - eltwise) / 1e6:,.1f} MB, against AccelForge's unfused 427.8 MB (as issue 27 reports "
          f"its run of AccelForge 1.0.467). A batched GEMM's ski-slope, computed once per shape (Llama-3-8B "
          f"prefill's scores and context, grouped-query rows stacked): {_curve_ms((8192, 128, 2048))} and "
          f"{_curve_ms((8192, 2048, 128))} ms. Whole section: {time.time() - start:.0f} s.")


def _curve_ms(shape: tuple[int, int, int]) -> str:
    """Wall ms of one uncached ski-slope of a 16-bit batched GEMM of 8 heads (rows x reduction x columns)."""
    start = time.perf_counter()
    ski_slope.__wrapped__(gemm(*shape, 16, batch=8), 16)
    return f"{(time.perf_counter() - start) * 1000:.0f}"


if __name__ == "__main__":
    main()
