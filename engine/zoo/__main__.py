"""Zoo summary table: `python -m engine.zoo` prints it, `python -m engine.zoo docs/zoo.md` rewrites it there."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from engine import zoo

BEGIN, END = "<!-- zoo-table:begin -->", "<!-- zoo-table:end -->"


def summary_rows() -> list[str]:
    """One markdown row per network at batch 1: ops, MACs, params, largest activation, max fan-out, build time."""
    rows = ["| network | ops | GMACs | params | largest activation: shape (elements) | max fan-out | build (ms) |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for name in zoo.names():
        start = time.perf_counter()
        g = zoo.build(name)
        ms = (time.perf_counter() - start) * 1000
        big = g.largest_activation()
        rows.append(f"| {name} | {len(g.ops)} | {g.macs / 1e9:.3f} | {g.params:,} | "
                    f"{'x'.join(map(str, big.shape))} ({big.elements:,}) | {g.max_fanout} | {ms:.0f} |")
    return rows


def main(argv: list[str]) -> None:
    table = "\n".join(summary_rows())
    if not argv:
        print(table)
        return
    path = Path(argv[0])
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    path.write_text(pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text))


if __name__ == "__main__":
    main(sys.argv[1:])
