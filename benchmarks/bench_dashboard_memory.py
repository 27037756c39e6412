"""The dashboard server's memory across many page loads (issue 19 saw 1.3 -> 2.3 GB over 117 loads).

`panel serve dashboard` as `make serve` starts it, driven by headless Chromium (Playwright): each page
opens one of five zoo networks, waits for its report, and is closed; the server's resident memory
(VmRSS) is read once its closed sessions have ended. Run: `.venv/bin/python -m benchmarks.run dashboard_memory`.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from benchmarks.bench_dashboard import served_dashboard

NETWORKS = ("resnet50", "googlenet", "squeezenet1_0", "mobilenet_v2", "vgg16")
LOADS = 100
READ_AT = (1, 5, 10, 25, 50, 75, 100)
SESSION_END_S = 62.0  # make serve drops a session unused for 60 s, checking every second


def family(pid: int) -> list[int]:
    """The process and its descendants (the dashboard's worker processes), Linux's /proc; those already gone left
    out."""
    try:  # each thread's children: the worker processes are started from a worker thread
        children = [c for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    except OSError:
        return []
    return [pid] + [p for child in children for p in family(int(child))]


def resident_mb(pid: int) -> float:
    """The resident memory of the process and its worker processes, MB (Linux's /proc)."""
    total = 0
    for member in family(pid):
        try:
            total += int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{member}/status").read_text()).group(1))
        except OSError:  # ended meanwhile
            pass
    return total / 1024


def memory_over_loads() -> list[tuple[int, float, float]]:
    """(page loads so far, seconds, server MB) after each count in READ_AT."""
    from playwright.sync_api import sync_playwright

    rows, start = [], time.time()
    with served_dashboard() as (port, server), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        for load in range(1, LOADS + 1):
            network = NETWORKS[(load - 1) % len(NETWORKS)]
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"http://127.0.0.1:{port}/dashboard?network={network}", timeout=120_000)
            page.get_by_text(re.compile(f"{network} \\(batch 1\\) on optimus")).first.wait_for(timeout=120_000)
            page.close()
            if load in READ_AT:
                time.sleep(SESSION_END_S)
                rows.append((load, time.time() - start, resident_mb(server.pid)))
        browser.close()
    return rows


def main():
    rows = memory_over_loads()
    print("## Dashboard server memory across page loads\n")
    print(f"`panel serve dashboard` as `make serve` runs it; {LOADS} pages opened in headless Chromium, each on one of "
          f"{', '.join(NETWORKS)} in turn, waiting for its report, then closed. The server's resident memory "
          f"{SESSION_END_S:.0f} s after the last page closed (its session ended):\n")
    print("| page loads | seconds | server MB |")
    print("|---:|---:|---:|")
    for load, seconds, mb in rows:
        print(f"| {load} | {seconds:.0f} | {mb:.0f} |")
    first, last = rows[0][2], rows[-1][2]
    print(f"\nFrom the first load to the {rows[-1][0]}th: {last - first:+.0f} MB ({(last - first) / first:+.0%}).")


if __name__ == "__main__":
    main()
