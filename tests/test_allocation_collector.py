"""The cyclic collector held off during short time-limited allocations, and always put back as it was."""

import gc

import engine
from engine.allocation import allocate, collector
from engine.allocation.problem import requirement


def test_a_short_limit_holds_the_collector_off_and_a_long_one_does_not():
    assert gc.isenabled()
    with collector.held_off(0.01):
        assert not gc.isenabled()
    assert gc.isenabled()
    with collector.held_off(collector.PAUSE_BELOW_S):
        assert gc.isenabled()


def test_overlapping_holds_put_the_collector_back_when_the_last_one_ends():
    # two calls in two threads: the first to end must not switch it on under the second, nor leave it off
    first, second = collector.held_off(0.01), collector.held_off(0.01)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_the_caller_switched_off_stays_off():
    gc.disable()
    try:
        with collector.held_off(0.01):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_short_allocation_runs_at_most_a_young_pass_and_gives_a_valid_plan():
    # a full collection pass (44 ms with ResNet-1202 loaded, a fresh process) fell inside a 0.01 s call, among some
    # 20 young passes; now none runs while it works, and the one pass its allocations leave due when the collector
    # is back on is young (the older generations' counts start at 0 here)
    g = engine.load_network("resnet1202")
    m_r = max(requirement(g, op.name, include_params=False, word_bits=16) for op in g.ops)
    passes = []

    def seen(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        a = allocate(g, m_r, time_limit_s=0.01)
    finally:
        gc.callbacks.remove(seen)
    assert passes in ([], [0]) and gc.isenabled()
    assert a.has_plan and a.status in ("time_limit", "optimal")
    a.validate()


def test_a_time_limited_allocation_imports_no_networkx():
    """NASNet-A Mobile at M_R within 0.1 s spent 0.12-0.33 CPU s importing networkx inside the call (the schedule's
    check and the lossless cuts asked the graph's networkx DAG for neighbours); a fresh interpreter says none now."""
    import subprocess
    import sys
    from pathlib import Path

    script = ("import sys, engine\n"
              "from engine.allocation.problem import requirement\n"
              "g = engine.load_network('nasnet_a_mobile')\n"
              "m_r = max(requirement(g, op.name, include_params=False, word_bits=16) for op in g.ops)\n"
              "order = [op.name for op in g.ops]\n"
              "engine.allocate(g, m_r, time_limit_s=0.1)\n"
              "engine.allocate(g, m_r, time_limit_s=0.1, schedule=order)\n"
              "print('networkx' in sys.modules)")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.split("\n")[0] == "False"
