"""engine.fusion.polish: re-solving windows of a beam's plan never costs more, stays valid, is exact as one window."""

from __future__ import annotations

from dataclasses import replace

import pytest

import engine
from engine import zoo
from engine.fusion import fuse, sized
from engine.fusion.cost import Capacity, model_of
from engine.fusion.optimus import Limits, chain_search
from engine.fusion.polish import improve
from engine.fusion.sized import dram_bytes
from tests.test_fusion_search import CASES, _valid, random_graph, solved_case

NARROW = Limits(states=1, groups=3, total=0, narrow_states=1, narrow_groups=3)  # a poor beam, to leave room


def _total(model, cap, groups):
    return sum(dram_bytes(model, g, cap) for g in groups)


@pytest.mark.parametrize("seed,n_ops,buffer", CASES[::2])
def test_polish_improves_a_narrow_beam_towards_the_brute_force_optimum(seed, n_ops, buffer):
    graph, acc, expect = solved_case(seed, n_ops, buffer)
    if expect is None:
        return
    model, cap = model_of(graph, acc), Capacity.of(acc)
    beam = list(chain_search(model, cap, limits=NARROW).groups)
    before = _total(model, cap, beam)
    for budget in (2, 3, 6):  # windows of a few groups: a valid plan between the optimum and the beam
        groups, _ = improve(sized.of(model, cap), beam, budget=budget)
        assert sorted(i for g in groups for i in model.members(g)) == list(range(model.n))
        done = 0
        for g in groups:  # returned in an order they can run: every prefix is a down-set
            done |= g
            assert all(not model.pred[i] & ~done for i in model.members(g))
        names = [tuple(model.names[i] for i in model.members(g)) for g in groups]
        assert _valid(graph, names)
        assert expect <= _total(model, cap, groups) <= before
    whole, _ = improve(sized.of(model, cap), beam, budget=1 << 20, work=1 << 62)  # one window, no work limit: the exact search
    assert _total(model, cap, whole) == expect


def test_fuse_polishes_an_optimus_beam_unless_told_not_to():
    # DARTS at 16 KB, batch 1: windows of 100 down-sets take the beam from 64.64 MB to 63.73 MB
    graph = zoo.build("darts", 1)
    acc = engine.Accelerator.preset("optimus").with_buffer(16 * 1024)
    beam = fuse(graph, acc, bound=False, polish=False)
    polished = fuse(graph, acc, bound=False)
    assert beam.status == polished.status == "beam"
    assert polished.dram_bytes == sum(c.dram_bytes for c in polished.costs) < beam.dram_bytes
    assert polished.groups_evaluated > beam.groups_evaluated
    small = random_graph(3, 9)  # exact plans are left as they are
    acc = engine.Accelerator.preset("optimus").with_buffer(8192)
    same = (replace(fuse(small, acc, polish=p), search_seconds=0.0) for p in (False, True))
    assert next(same) == next(same)
