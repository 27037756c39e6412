"""The buffer bound once: `SizedModel` owns the caches keyed by a capacity; every cache is a bounded, locked `Memo`."""

from __future__ import annotations

import threading

import pytest

import engine
from engine import zoo
from engine.fusion import METHODS, fuse, sized
from engine.fusion.cost import Capacity, model_of
from engine.fusion.memo import Memo
from engine.fusion.model import FusionModel
from engine.fusion.plan import build_plan
from engine.fusion.sized import dram_bytes


def test_memo_keeps_the_newest_up_to_its_size():
    memo = Memo(2)
    memo.put("a", 1)
    memo.put("b", None)  # None is a result like any other
    assert memo.get("b", "none") is None
    memo.put("c", 3)
    assert "a" not in memo and memo.get("c") == 3 and len(memo) == 2
    assert memo.get_or_make("d", lambda: 4) == 4 and memo.get_or_make("d", lambda: 5) == 4
    memo.clear()
    assert len(memo) == 0 and memo.get("a", "none") == "none"
    with pytest.raises(ValueError):
        Memo(0)


def test_memo_stays_bounded_under_threads():
    memo = Memo(50)

    def fill(base: int) -> None:
        for i in range(2000):
            memo.put((base, i), i)
            memo.get((base, i // 2))

    threads = [threading.Thread(target=fill, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memo) == 50


def test_one_sized_model_per_capacity_answers_the_cost_functions():
    graph = zoo.build("resnet18", 1)
    acc = engine.Accelerator.preset("optimus")
    model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
    small, large = Capacity.of(acc.with_buffer(64 * 1024)), Capacity.of(acc.with_buffer(1 << 20))
    at = sized.of(model, small)
    assert sized.of(model, small) is at and sized.of(model, large) is not at
    groups = [(1 << i) | (1 << (i + 1)) for i in range(model.n - 1)] + [1 << i for i in range(model.n)]
    costs = [at.dram_bytes(g) for g in groups]
    assert costs == [dram_bytes(model, g, small) for g in groups]
    assert len(at.schedules) > 0
    model.clear()
    assert len(model.capacities) == 0
    assert [sized.of(model, small).dram_bytes(g) for g in groups] == costs  # recomputed, the same


def test_searches_set_no_attribute_on_the_model():
    """Every cache is declared in FusionModel.__init__: a search, its records and its bound add none."""
    graph = zoo.build("googlenet", 1)
    acc = engine.Accelerator.preset("optimus")
    model = FusionModel(graph, model_of(graph, acc).tp, acc.word_bits)
    before = set(vars(model))
    cap = Capacity.of(acc)
    for method in ("optimus", "online", "dnnvm", "efficient_s"):
        groups = METHODS[method][0](sized.of(model, cap))[0]
        build_plan(sized.of(model, cap), groups, method=method, buffer_bytes=acc.buffer_bytes, evaluated=0, seconds=0.0,
                   status="optimal")
    assert set(vars(model)) == before


def test_threads_sharing_a_model_find_the_plans_one_thread_finds():
    graph = zoo.build("squeezenet1_0", 1)
    sizes = [32, 64, 128, 256, 512, 1024]
    alone = {kb: fuse(graph, engine.Accelerator.preset("optimus").with_buffer(kb * 1024)).groups for kb in sizes}
    model_of(graph, engine.Accelerator.preset("optimus")).clear()  # the threads start from empty caches
    found: dict[int, tuple] = {}

    def run(kb: int) -> None:
        found[kb] = fuse(graph, engine.Accelerator.preset("optimus").with_buffer(kb * 1024)).groups

    threads = [threading.Thread(target=run, args=(kb,)) for kb in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == alone
