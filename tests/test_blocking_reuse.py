"""A blocking reused across buffer sizes (`engine.blocking.reuse`) is the one a fresh search finds at that size."""

from dataclasses import replace

import pytest

import engine.blocking.counts as counts
from engine.accelerator import Accelerator
from engine.blocking import reuse
from engine.blocking.hierarchy import Hierarchy
from engine.blocking.layer import Layer
from engine.blocking.optimizer import block
from engine.blocking.reuse import reusing_block
from engine.loading import load_network
from engine.mapping.nest import op_layer

# CURVE sizes (engine.explore.CURVE_BUFFERS_KB), visited up and down as a slider moves
SIZES_KB = (64, 16384, 8, 512, 128, 2048, 32)


def _shapes(network: str) -> dict:
    g = load_network(network)
    out = {}
    for op in g.ops:
        layer = op_layer(g, op)
        if layer is not None:
            out.setdefault(replace(layer, name=""), op.name)
    return out


def _counts(layer, h, name, once):
    counts._counts.cache_clear()
    c = counts.hierarchy_counts(layer, h, name, weights_once=once)
    return c.blocking, c.levels, c.macs, c.mac_pj, c.rf_skipped, c.loop_nest, c.cycles


@pytest.mark.parametrize("preset, network, sizes_kb", [("optimus", "resnet50", SIZES_KB),
                                                       ("eyeriss-like", "resnet18", SIZES_KB[:4])],
                         ids=["optimus-resnet50", "eyeriss-like-resnet18"])
def test_every_layer_reused_equals_fresh(preset, network, sizes_kb, monkeypatch):
    """Every layer of the network (lone, and with each weight read once), at each size: nest, words and energy per
    level. (Eyeriss-like's searches cost about 5x the optimus preset's: ResNet-18's shapes at four sizes, the first
    size, one the buffer large enough for anything serves, a smaller one and one between.)"""
    acc = Accelerator.preset(preset)
    shapes = _shapes(network)
    searches, fresh = [], []
    monkeypatch.setattr(reuse, "block", lambda layer, h, **kw: searches.append(1) or block(layer, h, **kw))
    for i, kb in enumerate(sizes_kb):
        if i == 1:  # the first size searched each layer twice: at its size and with a buffer large enough for all
            assert len(searches) <= 2 * len(fresh)
            searches.clear()
            fresh.clear()
        h = Hierarchy.from_accelerator(acc.with_buffer(kb * 1024))
        for layer, name in shapes.items():
            for once in (False, True):
                monkeypatch.setattr(counts, "reusing_block", reusing_block)
                reused = _counts(layer, h, name, once)
                monkeypatch.setattr(counts, "reusing_block", lambda layer, h: fresh.append(1) or block(layer, h))
                assert reused == _counts(layer, h, name, once), (preset, kb, name, once)
    # after the first size, reused where it fits: a search at each size for each layer would be as many as the fresh
    # ones (0.35 of them on eyeriss-like, 0.46 on the optimus preset; the whole run's ratio mixes in the first size's
    # two searches a layer, so it depended on how many sizes followed: 0.62 at five sizes, 0.72 at four)
    assert len(searches) < 0.5 * len(fresh)


def test_reused_only_where_it_fits_and_is_searched_once(monkeypatch):
    """A blocking found at a size serves a smaller buffer it fits, not one it overflows, and the one found with the
    buffer large enough for anything serves every buffer; a hierarchy with other energies is searched anew."""
    reuse._found.cache_clear()
    layer = Layer(X=14, Y=14, C=64, K=64, Fw=3, Fh=3, name="conv", pad=(1, 1, 1, 1))
    acc = Accelerator.preset("optimus")
    big = Hierarchy.from_accelerator(acc.with_buffer(16 << 20))
    first = reusing_block(layer, big)
    assert first.blocking == block(layer, big).blocking
    again = reusing_block(layer, Hierarchy.from_accelerator(acc.with_buffer(8 << 20)))
    assert again.evaluated == 0 and again.blocking == first.blocking  # 8 MB holds the whole layer: not searched
    assert again.cost.memory_pj == pytest.approx(first.cost.memory_pj, rel=1e-12)
    small = Hierarchy.from_accelerator(acc.with_buffer(2048))  # 2 KB: the layer's least-energy tiles overflow it
    tight = reusing_block(layer, small)
    assert tight.evaluated > 0 and tight.blocking == block(layer, small).blocking
    assert tight.cost.memory_pj > first.cost.memory_pj
    # after the first size, searched once with the buffer large enough for anything: that serves any larger buffer
    huge = Hierarchy.from_accelerator(acc.with_buffer(64 << 20))
    assert reusing_block(layer, huge).evaluated == 0 and reusing_block(layer, huge).blocking == block(layer, huge).blocking
    dearer = replace(big, mac_pj=big.mac_pj * 2, levels=(replace(big.levels[0], energy_pj=(9.0, 9.0, 9.0)),
                                                        *big.levels[1:]))
    searches = []
    monkeypatch.setattr(reuse, "block", lambda layer, h, **kw: searches.append(h) or block(layer, h, **kw))
    assert reusing_block(layer, dearer).cost.memory_pj == pytest.approx(block(layer, dearer).cost.memory_pj, rel=1e-12)
    assert searches[0] == dearer and [h.levels[1].size_bytes for h in searches[1:]] == [reuse.ANY_SIZE]
    assert reusing_block(layer, small).blocking == tight.blocking and len(searches) == 2  # found at 2 KB: not again
