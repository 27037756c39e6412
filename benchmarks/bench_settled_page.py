"""What a settled dashboard page costs its browser: a page that shows its report and is left alone should leave the
renderer idle (issue 29: FilePond's endless animation-frame loop kept it at 7.6 % of a core).

`panel serve dashboard` as `make serve` starts it; headless Chromium opens one page (SqueezeNet), waits for the search
to end and SETTLE_S more, then over MEASURE_S reads Chrome's Performance metrics (the renderer's task seconds, style
recalculations, layouts), the animation frames the page requested (each call counted, by the script that made it)
and the CPU seconds of the browser's renderer processes (/proc). CPU seconds are the comparison between runs.
Run: `.venv/bin/python -m benchmarks.run settled_page` (or `python -m benchmarks.bench_settled_page [repeats]`).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from benchmarks.bench_dashboard import served_dashboard
from benchmarks.bench_dashboard_crowd import cpu_seconds
from benchmarks.bench_dashboard_memory import family

SETTLE_S = 5
MEASURE_S = 10
CHROMIUM = "/usr/bin/chromium"
# each requestAnimationFrame call counted by the script file that made it (the first non-inline frame of its stack)
COUNT_FRAMES_SCRIPT = """
(() => {
  const native = window.requestAnimationFrame.bind(window);
  window.__frames = {};
  window.requestAnimationFrame = (callback) => {
    const line = (new Error().stack || "").split("\\n").slice(2).find((l) => /https?:/.test(l)) || "?";
    const file = (line.match(/\\/([^\\/?:]+\\.js)/) || [null, "?"])[1];
    window.__frames[file] = (window.__frames[file] || 0) + 1;
    return native(callback);
  };
})();
"""


def _renderers(browser_pid: int) -> list[int]:
    """The renderer processes among the browser's descendants (/proc)."""
    found = []
    for pid in family(browser_pid):
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def _browser_pid(marker: str) -> int:
    """The browser process launched with `marker` among its arguments."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and b"--type=" not in cmdline:
                return int(entry.name)
    raise RuntimeError("the benchmark's Chromium was not found in /proc")


def settled_page(url: str) -> dict:
    """One page's figures over MEASURE_S once settled."""
    from playwright.sync_api import sync_playwright

    marker = f"--bench-settled-page={os.getpid()}"  # an unknown switch, ignored by Chromium: finds its process
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", marker])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.add_init_script(COUNT_FRAMES_SCRIPT)
        page.set_default_timeout(600_000)
        page.goto(url + "?network=squeezenet1_0")
        page.get_by_text(re.compile(r"squeezenet1_0 \(batch 1\) on optimus")).first.wait_for()
        page.get_by_text(re.compile("still searching")).wait_for(state="detached")
        page.wait_for_timeout(SETTLE_S * 1000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        renderers = _renderers(_browser_pid(marker))

        def metrics():
            return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}

        before, frames, cpu, wall = metrics(), page.evaluate("({...window.__frames})"), \
            sum(cpu_seconds(r) for r in renderers), time.time()
        time.sleep(MEASURE_S)
        after, frames_after, cpu_after, wall = metrics(), page.evaluate("({...window.__frames})"), \
            sum(cpu_seconds(r) for r in renderers), time.time() - wall
        browser.close()
    return {"seconds": wall, "renderer_cpu_s": cpu_after - cpu,
            "task_s": after["TaskDuration"] - before["TaskDuration"],
            "script_s": after["ScriptDuration"] - before["ScriptDuration"],
            "style_recalcs": int(after["RecalcStyleCount"] - before["RecalcStyleCount"]),
            "layouts": int(after["LayoutCount"] - before["LayoutCount"]),
            "frames": {f: n - frames.get(f, 0) for f, n in frames_after.items() if n - frames.get(f, 0)}}


def main(repeats: int = 3) -> None:
    with served_dashboard() as (port, _):
        url = f"http://127.0.0.1:{port}/dashboard"
        rows = [settled_page(url) for _ in range(repeats)]
    print("## Dashboard: what a settled page costs its browser\n")
    print(f"One SqueezeNet page, its search ended, left alone for {SETTLE_S} s, then {MEASURE_S} s measured in "
          "headless Chromium: the renderer processes' CPU seconds (/proc), the renderer's task seconds, script "
          "seconds, style recalculations and layouts (Chrome's Performance metrics), and the animation frames the page "
          "requested, by script. Before FilePond's painter (`dashboard.panel_hooks.FRAME_PAINTER_JS`; commit "
          "7e41716): 600 frames, all from filepond.min.js, 599 style recalculations, 0.81 s of tasks, 1.04 CPU s of "
          "the renderers "
          f"(docs/dashboard.md, \"What a settled page costs its browser\"). Load at the end: {os.getloadavg()[0]:.1f}, "
          f"{os.getloadavg()[1]:.1f} (1, 5 min).\n")
    print("| run | s | renderer CPU s | renderer tasks s | scripts s | style recalcs | layouts | frames requested |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for i, r in enumerate(rows, 1):
        frames = ", ".join(f"{f} {n}" for f, n in sorted(r["frames"].items(), key=lambda x: -x[1])) or "0"
        print(f"| {i} | {r['seconds']:.1f} | {r['renderer_cpu_s']:.2f} | {r['task_s']:.3f} | {r['script_s']:.3f} "
              f"| {r['style_recalcs']} | {r['layouts']} | {frames} |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
