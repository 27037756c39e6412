"""Hunt for a page whose "still searching" never goes (a rare failure of the browser test
`test_cold_loads_of_a_slow_network_end_with_the_dag_drawn`): many pages at once on one server.

`panel serve dashboard` with the browser tests' session options (tests/conftest.py's `served`), its log kept; headless
Chromium (Playwright) opens, round after round and in quick succession: googlenet cold loads (a new batch each round, so
no report is cached, and the one-pass methods' report comes first), pages closed mid-load, and other pages (SqueezeNet
with the slow tabs, googlenet's slider dragged), as the browser file's earlier tests do. A watched page whose headline
still says "still searching" HANG_S after it showed is a hang: `perf` samples its busiest renderer (call chains by frame
pointer, V8's code named by the map `--perf-basic-prof` writes; a page stuck outside a script's interrupt checks answers
no debugger), its console is kept, and the server and its workers write their stacks to the log (`dashboard/stacks.py`).
A page whose console says a view's update failed (what `panel_hooks.READY_GUARD_JS` catches) is counted and its console
kept. A new server every ROUNDS rounds. docs/dashboard.md, "The frozen tab", has what it found.
Run: `python -m benchmarks.stress_dashboard_hang [minutes] [folder]` (default 20 minutes, /tmp/dashboard-hang).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_dashboard import ROOT, _free_port, wait_for_port
from benchmarks.bench_dashboard_memory import family

HANG_S = 120  # googlenet's full report takes ~0.4 CPU s: two minutes is a page that will not end
ROUNDS = 4  # rounds per server (batch 1, 2, ...: cold reports each round)
STEPS = (8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048, 2896, 4096, 5792, 8192)
WATCHED_KB = (1024, 2048)  # every hang seen was at one of these (5 of them, 2026-11-27 and 28)
# tests/conftest.py's `chromium`, and V8 writing /tmp/perf-PID.map for `perf` (its own log to nowhere: per isolate,
# it wrote a file into the working directory)
V8_FLAGS = "--perf-basic-prof --interpreted-frames-native-stack --no-logfile-per-isolate --logfile=/dev/null"
ARGS = [f"--js-flags={V8_FLAGS}", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1500, "height": 1100}


def start_server(log: Path) -> tuple[str, subprocess.Popen]:
    """(url, process) of the dashboard served as the browser tests serve it, writing to `log`."""
    port = _free_port()
    panel = Path(sys.executable).parent / "panel"
    proc = subprocess.Popen([str(panel), "serve", "dashboard", "--port", str(port), "--address", "127.0.0.1",
                             "--allow-websocket-origin", f"127.0.0.1:{port}", "--check-unused-sessions", "1000",
                             "--unused-session-lifetime", "5000"], cwd=ROOT, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wait_for_port(port, 300)
    return f"http://127.0.0.1:{port}/dashboard", proc


def busiest_renderer() -> int:
    """The pid of the Chromium renderer that used the most CPU over the next second (a stuck page's spins)."""
    def cpu(pid):
        try:
            return sum(int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
        except OSError:
            return 0
    pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()
            and b"--type=renderer" in (Path(d, "cmdline").read_bytes() if Path(d, "cmdline").exists() else b"")]
    before = {pid: cpu(pid) for pid in pids}
    time.sleep(1)
    return max(pids, key=lambda pid: cpu(pid) - before[pid])


def perf_stacks(seconds: int = 5) -> str:
    """`perf` samples of the busiest renderer's threads, call chains by frame pointer, V8's code named from the
    /tmp/perf-PID.map that `--perf-basic-prof` writes: where a main thread deaf to the debugger spins."""
    pid = busiest_renderer()
    data = f"/tmp/perf-hang-{pid}.data"
    subprocess.run(["perf", "record", "-g", "-F", "499", "-p", str(pid), "-o", data, "--", "sleep", str(seconds)],
                   capture_output=True, timeout=120)
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-G"],
                            capture_output=True, text=True, timeout=300).stdout
    script = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, timeout=300).stdout
    return f"renderer {pid}\n{report[:200_000]}\n==== perf script (first samples)\n{script[:200_000]}"


class Hunt:
    """One run's pages and what they found."""

    def __init__(self, browser, folder: Path):
        self.browser, self.folder = browser, folder
        self.counts = {"watched": 0, "ended": 0, "hangs": 0, "closed mid-load": 0, "others": 0, "failed": 0}

    async def watched(self, url: str, batch: int, kb: int, server: subprocess.Popen, log: Path, tag: str) -> None:
        """A googlenet cold load: its headline, then "still searching" gone within HANG_S, else a hang's dumps."""
        self.counts["watched"] += 1
        page = await self.browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(HANG_S * 1000)
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{time.time():.1f} {m.type}: {m.text[:4000]}"))
        page.on("pageerror",
                lambda e: console.append(f"{time.time():.1f} pageerror: {e!r} {getattr(e, 'stack', '')}"[:3000]))
        try:
            await page.goto(url + f"?network=googlenet&batch={batch}&buffer_kb={kb}")
            await page.get_by_text(re.compile(f"googlenet \\(batch {batch}\\) on optimus, {kb:,} KB")).first.wait_for()
            try:
                await page.get_by_text(re.compile("still searching")).wait_for(state="detached")
                self.counts["ended"] += 1
                failed = [line for line in console if "update failed" in line or "pageerror" in line]
                if failed:  # what READY_GUARD_JS caught: an update that would have frozen a page with a table
                    self.counts["updates failed"] = self.counts.get("updates failed", 0) + 1
                    (self.folder / f"{tag}.failed.txt").write_text("\n".join(console))
                return
            except Exception:
                self.counts["hangs"] += 1
            print(f"HANG {tag}: googlenet batch {batch} at {kb} KB, load {os.getloadavg()[0]:.1f}", flush=True)
            (self.folder / f"{tag}.perf.txt").write_text(await asyncio.to_thread(perf_stacks))
            (self.folder / f"{tag}.console.txt").write_text("\n".join(console))
            for pid in family(server.pid):
                os.kill(pid, signal.SIGUSR1)
            await asyncio.sleep(3)
            (self.folder / f"{tag}.server.log").write_text(log.read_text())
        except Exception as exc:
            self.counts["failed"] += 1
            print(f"failed {tag}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        finally:
            await page.close()

    async def closed_mid_load(self, url: str, batch: int, kb: int) -> None:
        self.counts["closed mid-load"] += 1
        page = await self.browser.new_page(viewport=VIEWPORT)
        try:
            await page.goto(url + f"?network=googlenet&batch={batch}&buffer_kb={kb}", wait_until="commit")
            await asyncio.sleep(random.uniform(0.2, 4))
        except Exception:  # closed before it answered: what this page is for
            pass
        finally:
            await page.close()

    async def other(self, url: str) -> None:
        """SqueezeNet's slow tabs opened one after the other, or googlenet's slider dragged (the browser file's first
        two tests)."""
        self.counts["others"] += 1
        page = await self.browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(HANG_S * 1000)
        try:
            if random.random() < 0.5:
                await page.goto(url + "?network=squeezenet1_0&buffer_kb=128&theme=dark&colour_by=CPU/accelerator+part")
                await page.get_by_text(re.compile(r"squeezenet1_0 \(batch 1\) on optimus")).first.wait_for()
                for tab in ("What-if curve", "Memory timeline", "Tables"):
                    await page.get_by_text(tab, exact=True).click()
                    await asyncio.sleep(random.uniform(0.5, 4))
            else:
                await page.goto(url + "?network=googlenet&buffer_kb=64")
                await page.get_by_text(re.compile(r"googlenet \(batch 1\) on optimus, 64 KB buffer")).first.wait_for()
                box = await page.locator(".noUi-handle").first.bounding_box()
                y = box["y"] + box["height"] / 2
                await page.mouse.move(box["x"] + box["width"] / 2, y)
                await page.mouse.down()
                await page.mouse.move(box["x"] + random.choice([-150, 80, 150]), y, steps=8)
                await page.mouse.up()
                await asyncio.sleep(random.uniform(0.5, 4))
        except Exception as exc:
            print(f"other page: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        finally:
            await page.close()

    async def round(self, url: str, batch: int, server: subprocess.Popen, log: Path, tag: str) -> None:
        """Three watched cold loads, one to three pages closed mid-load and one other page, started 0-1.5 s apart."""
        jobs = [self.other(url), self.closed_mid_load(url, batch, random.choice(STEPS))]
        for i, kb in enumerate(random.choices(WATCHED_KB, k=3)):
            jobs.append(self.watched(url, batch, kb, server, log, f"{tag}p{i}"))
            if random.random() < 0.5:
                jobs.append(self.closed_mid_load(url, batch, random.choice(STEPS)))
        random.shuffle(jobs)
        started = []
        for job in jobs:
            started.append(asyncio.ensure_future(job))
            await asyncio.sleep(random.uniform(0, 1.5))
        await asyncio.gather(*started)


async def hunt(minutes: float, folder: Path) -> dict:
    from playwright.async_api import async_playwright

    from engine.fusion.optimus import compile_ahead

    compile_ahead()  # as the `served` fixture does: no page waits for the compiler
    folder.mkdir(parents=True, exist_ok=True)
    end, n = time.time() + minutes * 60, 0
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        found = Hunt(browser, folder)
        while time.time() < end:
            n += 1
            log = folder / f"server{n}.log"
            url, server = await asyncio.to_thread(start_server, log)
            try:
                for r in range(ROUNDS):
                    if time.time() < end:
                        await found.round(url, r + 1, server, log, f"s{n}r{r}")
                        print(f"server {n} round {r}: {found.counts}, load {os.getloadavg()[0]:.1f}", flush=True)
            finally:
                server.terminate()
                server.wait(30)
        await browser.close()
    return found.counts


if __name__ == "__main__":
    print(asyncio.run(hunt(float(sys.argv[1]) if len(sys.argv) > 1 else 20,
                           Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/dashboard-hang"))))
