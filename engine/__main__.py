"""Command line: `python -m engine info NETWORK` prints a per-layer table of a zoo name or an .onnx file (with
the data-dependent counts it assumed, `--data-counts` to set them);
`python -m engine block NETWORK --accelerator tpu-like` each layer's least-energy loop blocking on a preset's
memories and PE array (`--layer NAME` prints its loop nest); `python -m engine sweep ...` runs a grid of fusion
searches (engine/sweep.py)."""

from __future__ import annotations

import argparse
import sys

from engine.errors import EngineError


def info_table(graph, word_bits: int) -> str:
    """Per-op table (kind, output shape, MACs, params, output activation bytes) with totals."""
    rows = [("op", "kind", "output shape", "MACs", "params", "act bytes")]
    for op in graph.ops:
        out = graph.tensors[op.outputs[0]]
        rows.append((op.name, op.kind.value, "x".join(map(str, out.shape)), f"{op.macs:,}",
                     f"{graph.op_params(op.name):,}", f"{graph.bytes_of(op.outputs, word_bits):,}"))
    acts = sum(graph.bytes_of(op.outputs, word_bits) for op in graph.ops)
    rows.append(("total", f"{len(graph.ops)} ops", f"batch {graph.batch}", f"{graph.macs:,}", f"{graph.params:,}",
                 f"{acts:,}"))
    return _aligned(rows, left=3)


def block_table(graph, hierarchy) -> str:
    """Per-layer least-energy blocking on `hierarchy`: energy per MAC, DRAM words, array utilisation, search time."""
    import time

    from engine.blocking import Layer, block
    from engine.errors import GraphError

    rows = [("op", "kind", "pJ/MAC", "DRAM words", "utilisation", "seconds")]
    total_pj = 0.0
    total_macs = total_dram = 0
    started = time.perf_counter()
    for op in graph.ops:
        try:
            layer = Layer.from_op(graph, op)
        except GraphError:
            continue  # element-wise, concat, reshape, ...: no loop nest to block
        best = block(layer, hierarchy)
        dram = best.cost.at(hierarchy.levels[-1].name)
        total_pj, total_macs, total_dram = total_pj + best.cost.total_pj, total_macs + layer.macs, total_dram + dram
        rows.append((op.name, op.kind.value, f"{best.cost.total_pj / layer.macs:.3f}", f"{dram:,}",
                     f"{best.cost.utilisation:.2f}", f"{best.seconds:.3f}"))
    if len(rows) == 1:
        raise EngineError(f"'{graph.name}' has no layer with a loop nest to block (conv, matmul, pool, LRN)")
    rows.append(("total", f"{len(rows) - 1} layers", f"{total_pj / total_macs:.3f}", f"{total_dram:,}", "",
                 f"{time.perf_counter() - started:.3f}"))
    return _aligned(rows, left=2)


def _aligned(rows, left: int) -> str:
    """Rows as columns, the first `left` left-aligned and the rest right-aligned; rules under the head and above
    the total."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0 or n == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the command `argv` names; any problem is one line on stderr and a non-zero exit, never a traceback."""
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="per-layer ops, MACs, parameters and activation bytes")
    info.add_argument("network", help="a zoo name or a path to an .onnx file")
    info.add_argument("--batch", type=int, default=None)
    info.add_argument("--word-bits", type=_word_bits, default=16, help="bits per value, 1..64 (default 16)")
    info.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                      help="static shape of an ONNX input (ids=1x128) or size of a symbolic dim (sequence=128); "
                           "repeat for several")
    counts_help = ("data-dependent counts of an ONNX file (how many elements a NonZero finds, boxes an NMS keeps): N "
                   "for all, each at most its most, or NODE=N for one; repeat for several (default: each its most)")
    info.add_argument("--data-counts", action="append", default=[], metavar="N|NODE=N", help=counts_help)
    blk = sub.add_parser("block", help="each layer's least-energy loop blocking on a preset's memories and PE array")
    blk.add_argument("network", help="a zoo name or a path to an .onnx file")
    blk.add_argument("--accelerator", default="tpu-like", help="a preset name (default tpu-like)")
    blk.add_argument("--batch", type=int, default=None)
    blk.add_argument("--layer", default=None, help="print this op's loop nest: each operand's tile per level, "
                                                   "the unrolling and the utilisation")
    blk.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS", help="as for info")
    blk.add_argument("--data-counts", action="append", default=[], metavar="N|NODE=N", help="as for info")
    blk.add_argument("--unrolling", choices=("maximal", "all"), default=None,
                     help="the PE array's unrollings to search: as full as the dataflow allows (the presets' "
                          "default, fast) or every one (exact over all, slower)")
    from engine.sweep import add_arguments
    from engine.sweep import main as run_sweep

    add_arguments(sub.add_parser("sweep", help="DRAM traffic of every network x accelerator x buffer x method"))
    args = parser.parse_args(argv)
    try:
        if args.command == "sweep":
            return run_sweep(args)
        from engine.loading import load_network

        shapes = dict(_input_shape(text) for text in args.input_shape)
        graph = load_network(args.network, batch=args.batch, input_shapes=shapes or None,
                             data_counts=_data_counts(args.data_counts))
        for assumption in graph.assumptions:
            print(f"assumed: {assumption}")
        if args.command == "block":
            return _block(graph, args.accelerator, args.layer, args.unrolling)
        print(f"{graph.name}: {len(graph.ops)} ops, {graph.macs / 1e9:.3f} GMACs, {graph.params:,} parameters")
        print(info_table(graph, args.word_bits))
        return 0
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a defect of ours: still one line, naming it, so a user can report it
        print(f"error: internal error ({type(err).__name__}: {str(err)[:200]}); please report it", file=sys.stderr)
        return 3


def _block(graph, preset: str, layer_name: str | None, unrolling: str | None) -> int:
    """The `block` command: a layer's loop nest, or the table of every layer's best blocking."""
    from dataclasses import replace

    from engine.accelerator import Accelerator
    from engine.blocking import Hierarchy, Layer, block

    acc = Accelerator.preset(preset)
    hierarchy = Hierarchy.from_accelerator(acc)
    if unrolling and hierarchy.array is not None:
        hierarchy = replace(hierarchy, array=replace(hierarchy.array, unrolling=unrolling))
    if layer_name is None:
        searched = f", {hierarchy.array.unrolling} unrollings" if hierarchy.array is not None else ""
        print(f"{graph.name} on {acc.name}: least-energy blocking of every layer (MAC and memory energy{searched})")
        print(block_table(graph, hierarchy))
        return 0
    best = block(Layer.from_op(graph, graph.op(layer_name)), hierarchy)
    print("\n".join(best.describe()))
    return 0


def _word_bits(text: str) -> int:
    """A --word-bits value: a whole number of bits in 1..64."""
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"word bits must be a whole number in 1..64, got '{text}'")
    return int(text)


def _input_shape(text: str) -> tuple[str, object]:
    """NAME=1x128 -> (NAME, (1, 128)); NAME=128 -> (NAME, 128), a symbolic dim's size."""
    name, sep, dims = text.partition("=")
    parts = dims.lower().split("x")
    if not sep or not name or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise EngineError(f"--input-shape '{text}': write NAME=DIMS with positive whole dims, e.g. ids=1x128 or "
                          f"sequence=128")
    values = tuple(int(p) for p in parts)
    return name, values if len(values) > 1 else values[0]


def _data_counts(texts: list[str]):
    """--data-counts values -> load_network's data_counts: None, N (one value, for all), or {NODE: N}."""
    if not texts:
        return None
    if len(texts) == 1 and "=" not in texts[0]:
        if not texts[0].strip().isdigit():
            raise EngineError(f"--data-counts '{texts[0]}': write a whole number N (every count) or NODE=N")
        return int(texts[0])
    counts = {}
    for text in texts:
        name, sep, value = text.rpartition("=")
        if not sep or not name or not value.strip().isdigit():
            raise EngineError(f"--data-counts '{text}': write NODE=N (a node name, a whole number) for each count, "
                              f"or one N for every count")
        counts[name] = int(value)
    return counts


if __name__ == "__main__":
    sys.exit(main())
