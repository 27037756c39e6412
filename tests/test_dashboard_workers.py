"""A room of users on one server (issue 29): the engine's work in worker processes, stale work never started, and
pages built in pieces that take turns."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures.process import EXTRA_QUEUED_CALLS, BrokenProcessPool
from functools import partial
from types import SimpleNamespace

import pytest
from bokeh.document import Document

import engine
from dashboard import pieces
from dashboard.session import Session, fusion_report
from dashboard.state import ExplorerState
from dashboard.workers import WORKER_NICENESS, WORKERS, Runner, StopCheck, _wait, pool
from engine.explore import EvaluationStopped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_report_computed_in_a_worker_process_is_the_one_computed_here():
    graph, acc = engine.load_network("squeezenet1_0"), engine.Accelerator.preset("optimus").with_buffer(90 * 1024)
    away = Runner(away=True)
    assert away(os.getpid) != os.getpid()  # it runs in another process
    here = fusion_report(graph, acc, ("dnnvm", "optimus"), "mapping")
    there = fusion_report(graph, acc, ("dnnvm", "optimus"), "mapping", away)
    assert there is not here and there.graph is graph  # this process's graph: the views cache by it
    assert {m: (p.dram_bytes, p.groups) for m, p in there.plans.items()} == \
        {m: (p.dram_bytes, p.groups) for m, p in here.plans.items()}
    assert dict(there.energy) == dict(here.energy) and there.oracle_bytes == here.oracle_bytes


def _held_until(path: str) -> None:
    """Work that lasts until the test creates `path` (in a worker process): ordered by the test, not the clock."""
    while not os.path.exists(path):
        time.sleep(0.02)


def test_work_for_a_page_that_stopped_asking_is_never_started(tmp_path):
    # every worker taken, and the pool's queue to them full (calls in it can no longer be cancelled), until released
    release = str(tmp_path / "release")
    busy = [pool().submit(_held_until, release) for _ in range(2 * WORKERS + EXTRA_QUEUED_CALLS)]
    waiting = pool().submit(os.getpid)
    try:
        with pytest.raises(EvaluationStopped, match="closed"):
            _wait(waiting, lambda: True)
        assert waiting.cancelled()  # taken off the queue: the workers are free for the work still wanted
    finally:
        open(release, "w").close()
    assert all(f.result() is None for f in busy)
    with pytest.raises(EvaluationStopped):  # asked for after the stop: not even queued
        Runner(away=True, stop=StopCheck(lambda: True))(os.getpid)


def test_a_superseded_requests_report_is_not_computed():
    s = Session(ExplorerState(network="squeezenet1_0", buffer_kb=64, methods=["dnnvm"]))
    stale = s.new_request()
    s.new_request()  # the slider moved again
    misses = fusion_report.cache_info().misses
    with pytest.raises(EvaluationStopped):
        s.compute_report(181, run=stale.runner)
    assert fusion_report.cache_info().misses == misses + 1 and not s.is_ready(181)
    assert s.compute_report(181, run=s.new_request().runner).acc.buffer_bytes == 181 * 1024  # the current one is


def test_the_workers_run_below_the_servers_priority():
    # os.nice(0) reads a process's niceness; the kernel caps it at 19
    assert Runner(away=True)(os.nice, 0) == min(19, os.nice(0) + WORKER_NICENESS)


def test_a_worker_that_died_fails_its_own_work_only():
    with pytest.raises(BrokenProcessPool):
        Runner(away=True)(os._exit, 1)  # as a worker killed for its memory
    assert Runner(away=True)(os.getpid) != os.getpid()  # the next piece of work runs in a new pool


SERVER = """
import asyncio, signal, sys
from dashboard.workers import WORKERS, pool
from test_dashboard_workers import _busy_in_c
busy = [pool().submit(_busy_in_c, f"{sys.argv[1]}/{i}") for i in range(WORKERS)]
print(flush=True)
loop = asyncio.new_event_loop()
loop.add_signal_handler(signal.SIGTERM, loop.stop)  # as Bokeh's server does: its loop returns, the process exits
loop.run_forever()
"""


def _busy_in_c(started: str) -> None:
    """In a worker: say so by creating `started`, then stay in C code that holds the GIL (for years)."""
    open(started, "w").close()
    sum(range(1 << 62))


def _workers_of(server: int) -> list[int]:
    """The pids of the worker processes `server` spawned (its children running multiprocessing's spawn_main)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == server and b"spawn_main" in cmdline.read():
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def _state(pid: int) -> tuple[str, int]:
    """(state letter, user CPU ticks) of process `pid`; ("gone", 0) once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return "gone", 0
    return ("gone", 0) if fields[0] in "ZX" else (fields[0], int(fields[11]))


def _until(check: Callable[[], bool], bound_s: float = 60.0) -> bool:
    """Poll `check` until it holds or `bound_s` passes (a generous bound: behaviour, not a timing figure)."""
    end = time.monotonic() + bound_s
    while not check() and time.monotonic() < end:
        time.sleep(0.05)
    return check()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table in /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_workers_busy_in_c_code_end_with_their_server_killed_or_stopped(how, tmp_path):
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])})
    workers: list[int] = []
    try:
        assert server.stdout.readline() == b"\n"
        # a worker shows as one once it has exec'd spawn_main (a loaded machine may not have run it yet)
        assert _until(lambda: len(_workers_of(server.pid)) == WORKERS)
        workers = _workers_of(server.pid)
        assert _until(lambda: len(os.listdir(tmp_path)) == WORKERS)  # each in its sum
        server.send_signal(how)
        server.wait(timeout=60)  # the server itself does not wait for its workers' work
        assert _until(lambda: all(_state(w)[0] == "gone" for w in workers)), [_state(w) for w in workers]
    finally:
        server.kill()
        for w in workers:
            if _state(w)[0] != "gone":
                os.kill(w, signal.SIGKILL)


def test_a_free_place_goes_to_work_a_page_asked_for_before_any_prefetch():
    from dashboard.workers import Gate

    gate, entered = Gate(1), []

    def ask(background: bool):
        with gate.place(background, lambda: False):
            entered.append("prefetch" if background else "asked")

    with gate.place(False, lambda: False):  # the one place taken
        waiters = [threading.Thread(target=ask, args=(True,)), threading.Thread(target=ask, args=(False,))]
        waiters[0].start()  # the prefetch came first
        while gate.waiting[True] == 0:
            time.sleep(0.01)
        waiters[1].start()
        while gate.waiting[False] == 0:
            time.sleep(0.01)
    for thread in waiters:
        thread.join(30)
    assert entered == ["asked", "prefetch"] and gate.free == 1
    with pytest.raises(EvaluationStopped), gate.place(False, lambda: False), gate.place(False, lambda: True):
        pass  # no place left, and the page stopped asking


class FakeDoc:
    """A Bokeh document as `dashboard.pieces` sees it: callbacks on the loop's next turn, a session that may end (its
    callbacks then dropped, as Bokeh does), the models and change notices of an empty page."""

    def __init__(self):
        self.session_context = SimpleNamespace(destroyed=False)
        self.page = Document()
        self.models, self.callbacks, self.roots = self.page.models, self.page.callbacks, self.page.roots

    def add_next_tick_callback(self, fn):
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: None if self.session_context.destroyed else fn())


class Frame(list):
    """A layout as a page's piece sees it: views are added to it (`extend`); which thread added them."""

    def extend(self, views):
        super().extend(views)
        self.threads = getattr(self, "threads", set()) | {threading.get_ident()}


def test_pages_built_at_once_take_turns_piece_by_piece_each_made_off_the_loop_and_a_closed_page_stops(monkeypatch):
    monkeypatch.setattr(pieces, "WAIT_S", 0.01)
    monkeypatch.setattr(pieces, "make_models_ahead", lambda frame, views, doc: made.append((frame, tuple(views))))
    pieces._turn.cache_clear()  # the lock belongs to the loop that first used it
    order: list[str] = []
    made: list = []
    makers: set[int] = set()
    a, b, c = FakeDoc(), FakeDoc(), FakeDoc()
    frames = {doc: Frame() for doc in (a, b, c)}

    def piece(doc, name):
        def parts():
            makers.add(threading.get_ident())
            order.append(name)
            if name == "c1":
                doc.session_context.destroyed = True  # page c is closed while its first piece is made
            return [name]
        return pieces.Piece(frames[doc], parts)

    async def three_pages():
        await asyncio.gather(*(pieces.build(doc, [piece(doc, f"{page}{i}") for i in (1, 2, 3)])
                               for doc, page in ((a, "a"), (b, "b"), (c, "c"))))
        return threading.get_ident()

    loop_thread = asyncio.run(three_pages())
    pieces._turn.cache_clear()
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3", "b3"]  # first come, first served; c's page is gone
    assert frames[a] == ["a1", "a2", "a3"] and frames[b] == ["b1", "b2", "b3"] and frames[c] == []
    # the views and their models made in the page-building thread, added to the page on the loop's
    assert makers == {pieces._builder()._threads.copy().pop().ident} and loop_thread not in makers
    assert frames[a].threads == frames[b].threads == {loop_thread}
    assert [views for _, views in made] == [("a1",), ("b1",), ("c1",), ("a2",), ("b2",), ("a3",), ("b3",)]


def test_a_report_is_shown_between_two_pieces_of_its_page_never_while_one_is_made(monkeypatch):
    monkeypatch.setattr(pieces, "WAIT_S", 0.01)
    monkeypatch.setattr(pieces, "make_models_ahead", lambda frame, views, doc: None)
    pieces._turn.cache_clear()
    doc, frame, events = FakeDoc(), Frame(), []
    making = threading.Event()

    def parts(name):
        def run():
            events.append(f"make {name}")
            making.set()
            time.sleep(0.2)  # the report comes meanwhile
            return [name]
        return run

    async def page_and_report():
        built = asyncio.ensure_future(pieces.build(doc, [pieces.Piece(frame, parts("p1")),
                                                         pieces.Piece(frame, parts("p2"))]))
        await asyncio.to_thread(making.wait, 30)
        await pieces.locked(doc, lambda: events.append(f"report after {list(frame)}"))
        await built

    asyncio.run(page_and_report())
    pieces._turn.cache_clear()
    assert events[:2] == ["make p1", "report after ['p1']"] and frame == ["p1", "p2"]


def test_a_piece_that_fails_says_so_in_its_place_and_the_pages_other_pieces_follow(monkeypatch, caplog):
    """A piece whose views could not be made, or not added (as when Panel's link registry was walked while the
    builder added to it), left its frame empty, and a failure in the builder ended the page's build: the pieces
    after it never came. Each now shows an alert naming the error, logged, and the next piece follows."""
    monkeypatch.setattr(pieces, "WAIT_S", 0.01)
    monkeypatch.setattr(pieces, "make_models_ahead", lambda frame, views, doc: None)
    pieces._turn.cache_clear()

    class Refusing(Frame):
        def extend(self, views):
            raise RuntimeError("dictionary changed size during iteration")

    def unmakeable():
        raise ValueError("no such view")

    made_badly, shown_badly, fine = Frame(), Refusing(), Frame()
    with caplog.at_level(logging.ERROR, logger="dashboard.pieces"):
        asyncio.run(pieces.build(FakeDoc(), [pieces.Piece(made_badly, unmakeable),
                                             pieces.Piece(shown_badly, lambda: ["x"]),
                                             pieces.Piece(fine, lambda: ["y"])]))
    pieces._turn.cache_clear()
    assert fine == ["y"]
    alerts = made_badly + shown_badly
    assert [alert.alert_type for alert in alerts] == ["danger", "danger"]
    assert "(ValueError: no such view)" in alerts[0].object
    assert "(RuntimeError: dictionary changed size during iteration)" in alerts[1].object
    assert [record.exc_info[0] for record in caplog.records] == [ValueError, RuntimeError]


def test_a_piece_whose_page_ended_before_it_ran_does_not_wait_forever(monkeypatch):
    monkeypatch.setattr(pieces, "WAIT_S", 0.01)
    doc = FakeDoc()
    doc.session_context.destroyed = True  # the callback is dropped
    ran = []
    asyncio.run(pieces.on_loop(doc, lambda: ran.append(1)))
    assert ran == []


def test_a_dag_layout_is_computed_by_the_runner_asked_first_and_cached_for_every_other():
    from dashboard.views.dag import dag_layout, layered_layout
    from dashboard.views.layout import lay_out

    graph = engine.load_network("squeezenet1_0", batch=5)  # a graph no other test lays out
    away, asked = Runner(away=True), []

    def run(fn, *args):
        asked.append(fn)
        return away(fn, *args)  # in a worker process: a big network's layout no longer holds the server's GIL

    lay = dag_layout(graph, run)
    assert asked == [lay_out]
    assert dag_layout(graph) is lay and layered_layout(graph) is lay.pos and dag_layout(graph, run) is lay
    assert asked == [lay_out]  # asked once, whoever asks later
    here = lay_out(graph)
    assert lay.pos == here.pos and (lay.width, lay.height) == (here.width, here.height)
    assert all((a == b).all() for a, b in zip(lay.paths, here.paths, strict=True))


def test_the_server_starts_with_its_heap_frozen_once_a_pages_garbage_still_collected_and_a_1_ms_gil_switch():
    # in a process of its own: freezing this one's heap would keep the other tests' garbage
    code = """
import gc, sys
from dashboard.app_hooks import on_server_loaded
from dashboard.heap import freeze_startup_heap

class Page:  # a closed page's document: objects in a reference cycle
    def __init__(self):
        self.me = self

assert sys.getswitchinterval() == 0.005  # CPython's
on_server_loaded(None)  # what `panel serve dashboard` runs once started
assert sys.getswitchinterval() == 0.001
frozen = freeze_startup_heap()
assert frozen == gc.get_freeze_count() > 1000, frozen  # the imports' objects
page = Page()
assert freeze_startup_heap() == frozen == gc.get_freeze_count()  # once: the pages' objects are not frozen
del page
assert gc.collect() >= 1  # the page, collected
print("ok")
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


class ServedContext:
    """A page's session context, as far as `dashboard.pieces` reads it (Bokeh's document keeps a weak reference)."""

    destroyed = False


def test_a_piece_waiting_on_a_page_bokeh_destroys_meanwhile_returns_and_frees_the_turn(monkeypatch):
    """Bokeh's `Document.destroy` drops the document's callbacks and its session context: a piece waiting there must
    see the page gone (it read `None` as "still there", held the server's turn forever, and every later page hung)."""
    from bokeh.document import Document

    monkeypatch.setattr(pieces, "WAIT_S", 0.01)
    monkeypatch.setattr(pieces, "make_models_ahead", lambda frame, views, doc: None)
    pieces._turn.cache_clear()
    closed, other = Document(), FakeDoc()
    context = ServedContext()
    closed._session_context = weakref.ref(context)  # a served page, as Bokeh's server context sets it
    session = object()  # the page's ServerSession, as a key
    closed.callbacks.on_change_dispatch_to(session)  # as Bokeh's ServerSession subscribes to its document
    frames = {closed: Frame(), other: Frame()}

    def destroy_before_the_callback_runs(fn):
        closed.destroy(session)  # Bokeh's own destroy: callbacks dropped, `session_context` None

    monkeypatch.setattr(closed, "add_next_tick_callback", destroy_before_the_callback_runs)

    async def two_pages():
        await asyncio.wait_for(pieces.on_loop(closed, lambda: None), 5)
        await asyncio.wait_for(asyncio.gather(pieces.build(closed, [pieces.Piece(frames[closed], lambda: ["c"])]),
                                              pieces.build(other, [pieces.Piece(frames[other], lambda: ["o"])])), 30)

    asyncio.run(two_pages())
    pieces._turn.cache_clear()
    assert frames[other] == ["o"] and frames[closed] == []


def test_a_change_for_a_page_bokeh_destroyed_is_dropped_and_one_for_a_page_never_served_runs_at_once():
    """`pieces.locked` reads a document without a session context as one outside a server (tests, notebooks) and runs
    the change at once; Bokeh's `Document.destroy` drops the context too, and a closed page's report was set then on
    the models Bokeh had destroyed, off the document's lock."""
    closed = Document()
    context = ServedContext()
    closed._session_context = weakref.ref(context)  # a served page, as Bokeh's server context sets it
    session = object()
    closed.callbacks.on_change_dispatch_to(session)
    closed.destroy(session)  # Bokeh's own destroy, as when the page's session ends
    ran: list[str] = []
    for doc, name in [(closed, "closed"), (Document(), "never served"), (None, "no document")]:
        asyncio.run(pieces.locked(doc, partial(ran.append, name)))
    assert ran == ["never served", "no document"] and pieces.destroyed(closed)
