"""How long the dashboard's fusion views take to follow a buffer-slider move (goal: under 100 ms for ResNet-50).

Measures, per network, the work one throttled slider move triggers on the server: the
fusion report at a new buffer size (all three default methods + energy) and building
the Bokeh model of the DAG. Run: `.venv/bin/python -m benchmarks.run dashboard`.
"""

import statistics
import time

import holoviews as hv

from dashboard.app import Session
from dashboard.state import ExplorerState

NETWORKS = ("resnet50", "googlenet", "squeezenet1_0", "densenet121", "mobilenet_v2")
STEPS_KB = (90, 181, 362, 724, 1448)


def measure(network: str) -> tuple[float, float, float]:
    session = Session(ExplorerState(network=network))
    report_ms, render_ms = [], []
    for kb in STEPS_KB:
        t0 = time.perf_counter()
        session.state.buffer_kb = kb  # outside a server the report is computed at once
        t1 = time.perf_counter()
        hv.render(session.dag(session.report), backend="bokeh")
        t2 = time.perf_counter()
        report_ms.append((t1 - t0) * 1e3)
        render_ms.append((t2 - t1) * 1e3)
    return statistics.median(report_ms), statistics.median(render_ms), max(r + d for r, d in zip(report_ms, render_ms))


def main():
    print("## Dashboard: one buffer-slider move\n")
    print("Median over buffer sizes " + ", ".join(f"{k} KB" for k in STEPS_KB) + " (each new to the caches), "
          "methods dnnvm + efficient_s + optimus with energy, batch 1, `optimus` preset.\n")
    print("| network | report (ms) | DAG Bokeh model (ms) | worst total (ms) |")
    print("|---|---:|---:|---:|")
    for net in NETWORKS:
        rep, ren, worst = measure(net)
        print(f"| {net} | {rep:.0f} | {ren:.0f} | {worst:.0f} |")
    print("\nIn a browser the page also has to draw: with Playwright driving headless Chromium without a GPU, "
          "a ResNet-50 slider move took 0.45-0.85 s from mouse release to the new headline (measured by hand "
          "on 2026-11-22; it was ~5 s while plots drew with WebGL, which is now off).")


if __name__ == "__main__":
    main()
