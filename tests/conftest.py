"""Shared fixtures: small ONNX models built in code, the onnx package's light models, and the browser tests'
(tests/test_dashboard_e2e*.py) dashboard server and headless Chromium."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from onnx import TensorProto, checker, helper

from engine.loading import onnx_light_models

LIGHT_MODELS = sorted(p.name for p in onnx_light_models().glob("*.onnx"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's: the browser tests skip without it
ROOT = Path(__file__).resolve().parent.parent


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown where it is not loaded (-p no:xdist)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`'s workers: one more than the cores this process may use, as the browser files' workers mostly wait on
    pages and timers while a third computes (make test 9:30 -> 8:06 on two cores); PYTEST_XDIST_AUTO_NUM_WORKERS, when
    set, decides instead."""
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(env) if env else len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items):
    """The grouped files first (each an `xdist_group`, run in turn on one worker: the browser files, the suite's longest
    chains at about four and two minutes, and the mapping bound's shared brute force), the rest in their order: with
    `--dist loadgroup` a group starts where the queue reaches it, and from the middle of the queue the longer one ran
    on past every other test."""
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


@pytest.fixture
def light_dir():
    return onnx_light_models()


def conv_bn_relu_model(input_shape=(1, 3, 8, 8), opset=17, dynamic=False):
    """Input -> Conv(3x3, 4 ch) -> BN -> Relu -> MaxPool -> Flatten -> Gemm(10): weights as graph inputs."""
    x_shape = ["N", *input_shape[1:]] if dynamic else list(input_shape)
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("mean", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("var", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("fc_w", TensorProto.FLOAT, [10, 64]),
        helper.make_tensor_value_info("fc_b", TensorProto.FLOAT, [10]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [input_shape[0], 10])
    model = helper.make_model(helper.make_graph(nodes, "tiny", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    checker.check_model(model)
    return model


# ---- the browser tests: one dashboard server per pytest worker, one Chromium per test module ---------------------
# (each browser file's xdist_group runs on one worker: tests/test_dashboard_e2e_room.py shares the server of
# tests/test_dashboard_e2e_inputs.py, warm, instead of starting and warming a third: about 13 CPU s)

# Every browser wait's hang guard (a page's default timeout, and the tests' polling deadlines): it ends only a test that
# hangs, never one on a slow machine. At load 17-25 with three pytest workers a first report took over 120 s to show;
# how fast a page answers is measured in benchmarks/, not here.
HANG_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served(NamedTuple):
    """A test's dashboard server: its URL, its process and its log (stdout and stderr)."""

    url: str
    proc: subprocess.Popen
    log: Path


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """`Served`: `panel serve dashboard` on a free loopback port, for every browser test this process runs."""
    from engine.fusion.optimus import compile_ahead

    compile_ahead()  # Numba's cache filled first, as `make serve` does: the served page must not wait for the compiler
    port = _free_port()
    panel = Path(sys.executable).parent / "panel"
    log_path = tmp_path_factory.mktemp("serve") / "panel.log"
    log = log_path.open("w+")  # a file: a full pipe would stall the server
    proc = subprocess.Popen([str(panel), "serve", "dashboard", "--port", str(port), "--address", "127.0.0.1",
                             "--allow-websocket-origin", f"127.0.0.1:{port}",  # default 20 MB messages: uploads come in chunks
                             # make serve keeps an unused session 15 s; 5 s here ends a closed page's work sooner (the stall
                             # test waits for it), and a page slower than that to connect is built twice: time, no verdict
                             "--check-unused-sessions", "1000", "--unused-session-lifetime", "5000"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's code, whatever is installed
    url = f"http://127.0.0.1:{port}/dashboard"
    deadline = time.time() + HANG_S
    while time.time() < deadline:  # wait for the port only: each page request would build a new session
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        log.seek(0)
        pytest.fail(f"panel serve did not listen within {HANG_S} s:\n" + log.read())
    yield Served(url, proc, log_path)
    proc.terminate()
    try:
        proc.wait(2)
    except subprocess.TimeoutExpired:  # Python waits for a search still running in a worker thread: 8 s once
        proc.kill()
        proc.wait(10)
    log.close()


@pytest.fixture(scope="session")
def server(served):
    return served.url


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a server's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed gets what its server was doing (`dashboard.stacks`: every thread and pending task
    of the server, every worker's threads), the server log's end and whether each open page still runs scripts in its
    report: a page that waits forever says on what (a stress run caught one whose renderer spun, the server done); and
    a screenshot of each of those pages."""
    report = yield
    browser = item.funcargs.get("browser") if report.failed and call.when == "call" else None
    if isinstance(browser, OfflineBrowser):
        pages = browser.open_pages()
        said = [_runs_scripts(page) for page in pages]
        said += [_screenshot(page, f"{item.name}-{i}") for i, page in enumerate(pages)]
        report.sections.append(("browser pages", "\n".join(said)))
    served = item.funcargs.get("served") if report.failed and call.when == "call" else None
    if isinstance(served, Served) and served.proc.poll() is None:
        for pid in [served.proc.pid, *_children(served.proc.pid)]:
            os.kill(pid, signal.SIGUSR1)
        time.sleep(2)  # the loop's task dump runs on its next turn
        report.sections.append(("dashboard server log (end)", served.log.read_text()[-60_000:]))
    return report


def _runs_scripts(page, within_s: float = 5) -> str:
    """Whether `page`'s renderer runs a script within `within_s` (one busy in its own JavaScript or layout does not)."""
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function("() => true", timeout=within_s * 1000)
    except PageTimeout:
        return f"{page.url}: ran no script within {within_s} s: its renderer is busy"
    return f"{page.url}: runs scripts"


SHOTS = ROOT / "test-output" / "screenshots"


def _screenshot(page, name: str) -> str:
    """A failed browser test's open page, whole, as test-output/screenshots/`name`.png (where a test passes none is
    taken: 10 full pages per run cost CPU seconds no check reads)."""
    from playwright.sync_api import Error

    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"
    try:
        page.screenshot(path=str(path), full_page=True, timeout=10_000)
    except Error as e:  # a renderer too busy to paint (_runs_scripts says so)
        return f"{page.url}: no screenshot ({str(e).splitlines()[0]})"
    return f"{page.url}: screenshot {path}"


LOOPBACK = re.compile(r"(https?|wss?)://127\.0\.0\.1[:/]|blob:|data:|about:")


class OfflineBrowser:
    """Headless Chromium whose pages record every request that leaves loopback: the dashboard must work without
    internet, so each test fails on any such request (`browser` below), on a server that has served every test's
    sessions before it. A page waits up to HANG_S for anything (its default timeout)."""

    def __init__(self, browser):
        self.browser, self.outside, self.pages = browser, [], []

    def new_page(self, **options):
        page = self.browser.new_page(**options)
        self.pages.append(page)
        page.set_default_timeout(HANG_S * 1000)
        page.on("request", lambda request: None if LOOPBACK.match(request.url) else self.outside.append(request.url))
        return page

    def open_pages(self) -> list:
        """The pages this test opened and has not closed."""
        return [page for page in self.pages if not page.is_closed()]


@pytest.fixture(scope="module")
def chromium():
    """Headless Chromium, launched once for the test module that asks for a `browser`: per module, not per worker,
    since Playwright's sync API keeps an event loop running in the thread until it stops, and a later module's
    `asyncio.run` (tests/test_dashboard.py's, on the same worker) then fails."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture
def browser(chromium):
    """The module's Chromium for one test: every page the test opens took everything from the dashboard's server
    (stylesheets from cdn.holoviz.org came once a server had served a few sessions: issue 29), else it fails. The pages
    the test left open are closed after it: a settled page's renderer and its server session spend about 0.035 CPU s
    a second (a GoogLeNet page), for as long as it stays open."""
    offline = OfflineBrowser(chromium)
    yield offline
    for page in offline.open_pages():
        page.close()
    assert not offline.outside, sorted(set(offline.outside))
