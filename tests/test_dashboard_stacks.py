"""`dashboard.stacks`: SIGUSR1 makes a server write what each thread runs and where each pending task waits."""

import subprocess
import sys

CODE = """
import asyncio, os, signal
from dashboard.stacks import dump_stacks_on_signal

async def a_page_waiting_for_its_report(event):
    await event.wait()

async def main():
    loop = asyncio.get_running_loop()
    dump_stacks_on_signal(loop)
    event = asyncio.Event()
    task = asyncio.ensure_future(a_page_waiting_for_its_report(event))
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGUSR1)
    await asyncio.sleep(0.5)  # the loop's handler runs on a turn of the loop
    event.set()
    await task
    print("ok")

asyncio.run(main())
"""


def test_sigusr1_writes_every_threads_stack_and_where_each_pending_task_waits():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr  # the process goes on after the dump
    assert "Current thread" in done.stderr and "in main" in done.stderr  # faulthandler: the main thread's stack
    assert "pending asyncio tasks" in done.stderr
    assert "coro=<a_page_waiting_for_its_report() running at" in done.stderr  # which coroutine waits, and where


WORKER = """
import os, signal, time
from dashboard.stacks import dump_stacks_on_signal

def computing_a_report():
    dump_stacks_on_signal()  # a worker process: threads only
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)
    print("ok")

computing_a_report()
"""


def test_a_worker_without_a_loop_writes_its_threads_and_goes_on():
    done = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
    assert "in computing_a_report" in done.stderr and "pending asyncio tasks" not in done.stderr
