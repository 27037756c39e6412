"""How long the dashboard's fusion views take to follow a buffer-slider move (goal: under 100 ms for ResNet-50).

Two measurements. On the server: the fusion report at a new buffer size (three methods +
energy) and patching the Fusion tab's views with it. In a browser: `panel serve dashboard`
driven by headless Chromium (Playwright), from the mouse release on the slider to the
frame after the page applied the last message that carries the new report.
Run: `.venv/bin/python -m benchmarks.run dashboard` (`.venv/bin/python benchmarks/bench_dashboard.py server`: the
server's table alone).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import holoviews as hv
from param.parameterized import discard_events

from dashboard.session import Session
from dashboard.state import BUFFER_STEPS_KB, ExplorerState
from dashboard.tabs.fusion import FusionTab

NETWORKS = ("resnet50", "googlenet", "squeezenet1_0", "densenet121", "mobilenet_v2")
STEPS_KB = (90, 181, 362, 724, 1448)
# a chain with residuals, inception branches, and a transformer (the zoo's Llama prefill where it has one); "floor" is
# benchmarks/floor_app.py: the same template and slider with one line of text, what any move costs at least
FLOOR = "floor"
BROWSER_NETWORKS = (FLOOR, "resnet50", "googlenet", "vit_b_16")
MOVES = 10
ROOT = Path(__file__).resolve().parent.parent

# Times, in the page, each websocket message's handling and the frame after it; marks the mouse release
# and each mouse move with the button held.
TIMING_SCRIPT = """
(() => {
  window.__frames = [];
  const Native = window.WebSocket;
  class Timed extends Native {
    set onmessage(handler) {
      super.onmessage = (event) => {
        const arrived = performance.now();
        const result = handler.call(this, event);
        const text = typeof event.data === 'string' ? event.data : '';
        const entry = {header: /msgtype/.test(text), arrived, applied: 0, done: 0,
                       bytes: typeof event.data === 'string' ? event.data.length : (event.data.byteLength || 0),
                       content: /"(ModelChanged|ColumnDataChanged|ColumnsPatched|RootAdded)"/.test(text)
                                && !/"loader"|"attr":"search"/.test(text)};   // not the spinner, not the URL
        window.__frames.push(entry);
        Promise.resolve(result).then(() => { entry.applied = performance.now();
          requestAnimationFrame(() => setTimeout(() => { entry.done = performance.now(); })); });
        return result;
      };
    }
    get onmessage() { return super.onmessage; }
  }
  window.WebSocket = Timed;
  const mark = () => { window.__release = performance.now(); window.__frames = []; };
  document.addEventListener('mouseup', mark, true);
  document.addEventListener('mousemove', (e) => { if (e.buttons) mark(); }, true);   // a drag step, handle held
  window.__drawnAfter = () => {   // ms from the release to: the last content message's arrival, its application, the frame after
    const f = window.__frames;
    let last = -1;
    f.forEach((e, i) => { if (e.content) last = i; });
    if (last < 0) return null;
    let first = last;
    while (first > 0 && !f[first].header) first -= 1;   // the message's header frame
    let bytes = 0;
    for (let i = first; i <= last; i++) bytes += f[i].bytes;
    while (last + 1 < f.length && !f[last + 1].header) { last += 1; bytes += f[last].bytes; }   // its binary buffers
    const t0 = window.__release;
    return {arrived: f[first].arrived - t0, applied: f[last].applied - t0, drawn: f[last].done - t0, bytes};
  };
})();
"""


def server_side(network: str) -> tuple[float, float, float, float, float]:
    """Median report and patch times over the steps, the worst total, the median report's CPU time (all new to the
    caches), and the median move back to a step already computed (cached report and patch), in ms."""
    session = Session(ExplorerState(network=network, buffer_kb=64))
    tab = FusionTab(session)
    report_ms, patch_ms, cpu_ms, again_ms = [], [], [], []
    for kb in STEPS_KB:
        with discard_events(session.state):  # move the buffer without telling the views: time report and patch apart
            session.state.buffer_kb = kb
        t0, c0 = time.perf_counter(), time.process_time()
        rep = session.prepared()  # the report and the views' data, as the worker thread makes them
        t1, c1 = time.perf_counter(), time.process_time()
        tab.show(rep)
        t2 = time.perf_counter()
        report_ms.append((t1 - t0) * 1e3)
        cpu_ms.append((c1 - c0) * 1e3)
        patch_ms.append((t2 - t1) * 1e3)
    for kb in STEPS_KB:  # each size computed once already: what a move costs once its sizes are (prefetched)
        with discard_events(session.state):
            session.state.buffer_kb = kb
        t0 = time.perf_counter()
        tab.show(session.prepared())
        again_ms.append((time.perf_counter() - t0) * 1e3)
    return (statistics.median(report_ms), statistics.median(patch_ms), max(map(sum, zip(report_ms, patch_ms))),
            statistics.median(cpu_ms), statistics.median(again_ms))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float = 90) -> None:
    """Until the local server listens on `port` (or `seconds` pass)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)


@contextlib.contextmanager
def served_dashboard(*apps: str, env: dict | None = None, setup: str = "", cpus: str = ""):
    """(port, process) of `panel serve` on `apps` (the dashboard by default) with `make serve`'s session options, on
    a free loopback port, running this checkout's code (and the `setup` script first, if any), on the CPUs `cpus`
    only if given (taskset's list, e.g. "0"); stopped on exit (killed if a search outlives 10 s)."""
    port = _free_port()
    panel = Path(sys.executable).parent / "panel"
    pinned = ("taskset", "-c", cpus) if cpus else ()
    server = subprocess.Popen([*pinned, str(panel), "serve", *(apps or ("dashboard",)), "--port", str(port),
                               "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{port}",
                               "--check-unused-sessions", "1000", "--unused-session-lifetime", "60000",
                               *(("--setup", setup) if setup else ())],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)})
    try:
        wait_for_port(port)
        yield port, server
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:  # a search still running in a worker thread
            server.kill()
            server.wait(10)


def browser_side(networks, prefetch: bool) -> dict[str, list[dict]]:
    """Per network, ten moves' ms from the slider move to the new report's message arriving, applied and drawn.

    Without prefetch, from the release (the report is computed then); with it, from the mouse
    move that carries the held handle onto the next step (the views follow the drag).
    """
    from playwright.sync_api import sync_playwright

    with served_dashboard("dashboard", "benchmarks/floor_app.py",
                          env={"DASHBOARD_PREFETCH": "1" if prefetch else "0"}) as (port, _), sync_playwright() as p:
        results = {}
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        for net in networks:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.add_init_script(TIMING_SCRIPT)
            path = "floor_app" if net == FLOOR else f"dashboard?network={net}&buffer_kb=8"
            page.goto(f"http://127.0.0.1:{port}/{path}", timeout=120_000)
            page.get_by_text(re.compile(r"best plan \(")).first.wait_for(timeout=120_000)  # the headline's
            page.wait_for_timeout(5000)
            step = page.locator(".noUi-target").first.bounding_box()["width"] / (len(BUFFER_STEPS_KB) - 1)
            move = _one_drag_step if prefetch else _one_move
            results[net] = [move(page, step) for _ in range(MOVES)]  # 8 KB up, a new size each time
            page.close()
        browser.close()
        return results


def _one_move(page, dx: float) -> dict:
    """Drag the handle one step and release it; ms from the release to the new report arriving, applied, drawn."""
    x, y = _grab_handle(page)
    page.mouse.move(x + dx, y, steps=4)
    page.mouse.up()
    _until_quiet(page)
    return page.evaluate("window.__drawnAfter()")


def _one_drag_step(page, dx: float) -> dict:
    """Carry the held handle onto the next step in one mouse move; ms from that move to the new report drawn (as
    `_one_move`)."""
    x, y = _grab_handle(page)
    page.mouse.move(x + dx, y)
    _until_quiet(page)
    drawn = page.evaluate("window.__drawnAfter()")
    page.mouse.up()
    _until_quiet(page)
    return drawn


def _grab_handle(page) -> tuple[float, float]:
    box = page.locator(".noUi-handle").first.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    return x, y


def _until_quiet(page):
    """Wait until no websocket message arrived for 1.5 s."""
    seen, quiet_since = -1, time.time()
    while time.time() - quiet_since < 1.5:
        page.wait_for_timeout(100)
        count = page.evaluate("window.__frames.length")
        if count != seen:
            seen, quiet_since = count, time.time()


def browser_networks() -> tuple[str, ...]:
    """BROWSER_NETWORKS, with the 32-layer Llama prefill in place of ViT where the zoo has it."""
    from engine import zoo

    return tuple("llama3_8b_prefill" if n == "vit_b_16" and "llama3_8b_prefill" in zoo.names() else n
                 for n in BROWSER_NETWORKS)


def main():
    print("## Dashboard: one buffer-slider move\n")
    server_table()
    browser_table()


def server_table():
    """The server's part of a move (report and patch), per network."""
    print("### On the server\n")
    print("Median over buffer sizes " + ", ".join(f"{k} KB" for k in STEPS_KB) + " (each new to the caches), "
          "methods dnnvm + efficient_s + optimus with energy, batch 1, `optimus` preset. \"Report\" is the worker "
          "thread's part: the report and the views' data derived from it. \"Patch\" puts them "
          "into the Fusion tab (headline, DAG colours, table, energy and latency bars) without drawing anything anew. "
          "Each plan is priced by its mapping (the dashboard's default access model). *Computed size*: the move back "
          "to a size already computed (prefetched, or visited): the cached report and the patch.\n")
    print("| network | report (ms) | report CPU (ms) | patch views (ms) | worst total (ms) | computed size (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    load = os.getloadavg()[0]
    for net in NETWORKS:
        rep, patch, worst, cpu, again = server_side(net)
        print(f"| {net} | {rep:.0f} | {cpu:.0f} | {patch:.0f} | {worst:.0f} | {again:.1f} |")
    print(f"\nLoad average (1 min) {load:.1f} before and {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores.")


def browser_table():
    """Ten moves per network in headless Chromium, cold and prefetched."""
    print("\n### In a browser\n")
    if not shutil.which("chromium"):
        print("(skipped: Debian's chromium is not installed; `make browser` installs it)")
        return
    print("`panel serve dashboard`, headless Chromium without a GPU on this machine, ten slider moves per network, each one step up from 8 KB, "
          "to the frame after the last message carrying the new report was applied (the DAG: recoloured boxes, "
          "new group outlines and legend). "
          "Cold (`DASHBOARD_PREFETCH=0`): every move computes its report when the handle is released; ms from the release. "
          "Prefetched (the default): the other buffer steps were computed in the background after the page loaded, so the "
          "views follow the handle while it is dragged; ms from the mouse move that carries the held handle onto the next step. "
          "*floor*: `benchmarks/floor_app.py`, the same template and slider with one line of text that follows it, what any "
          "move costs at least. *message arrives*: the last message carrying the new report reaches the page (the server's "
          "part, and the slider's own messages before it); *applied*: BokehJS has applied it; *message*: its size.\n")
    print("| network | reports | median (ms) | fastest | slowest | message arrives | applied | message (KB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for prefetch in (False, True):
        for net, moves in browser_side(browser_networks(), prefetch).items():
            moves = [m for m in moves if m is not None]
            if not moves:  # no content message after any move: say so rather than fail
                print(f"| {net} | {'prefetched' if prefetch else 'cold'} | - | - | - | - | - | - |")
                continue
            drawn = [m["drawn"] for m in moves]
            print(f"| {net} | {'prefetched' if prefetch else 'cold'} | {statistics.median(drawn):.0f} | "
                  f"{min(drawn):.0f} | {max(drawn):.0f} | {statistics.median(m['arrived'] for m in moves):.0f} | "
                  f"{statistics.median(m['applied'] for m in moves):.0f} | "
                  f"{statistics.median(m['bytes'] for m in moves) / 1e3:.0f} |")

if __name__ == "__main__":
    hv.extension("bokeh")
    server_table() if sys.argv[1:] == ["server"] else main()
