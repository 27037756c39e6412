"""Per-operand hierarchies and the spatial PE array: the model against a walk of every PE's data, the exact
search against brute force over every tile chain, loop order, unrolling and level order, and bad input."""

import itertools
import math
import random
from dataclasses import replace

import pytest

from engine.blocking import Blocking, Hierarchy, Layer, Memory, SpatialArray, block, evaluate
from engine.blocking.exhaustive import divisor_chains, every_unroll
from engine.blocking.layer import DIMS, RELEVANT
from engine.blocking.model import SpatialView, holders, stored_levels
from engine.errors import EngineError


def tpu_like(rows=4, cols=4, sram=256):
    """A small weight-stationary array: per-PE weight and accumulator registers, an I/O SRAM, DRAM."""
    arr = SpatialArray((("rows", rows), ("cols", cols)), (("C", "rows"), ("K", "cols")), noc_pj=(0.5, 0.7, 0.9))
    return Hierarchy((Memory("O-reg", split_bytes=(0, 0, 4), energy_pj=(0, 0, 0.2), holds="O"),
                      Memory("W-reg", split_bytes=(0, 2, 0), energy_pj=(0, 0.1, 0), holds="W", write_pj=(0, 0.3, 0)),
                      Memory("SRAM", size_bytes=sram, energy_pj=(3, 3, 4), holds="IO", write_pj=(2, 2, 5)),
                      Memory.dram()), array=arr, array_level=2, name="tpu-small")


def row_stationary():
    """A shared per-PE RF, a buffer that weights bypass, and Fh x Y over a 3 x 2 array (Eyeriss-like)."""
    arr = SpatialArray((("rows", 3), ("cols", 2)), (("Fh", "rows"), ("Y", "cols")), noc_pj=(1, 1, 1))
    return Hierarchy((Memory("RF", size_bytes=16, energy_pj=(0.3, 0.3, 0.3)),
                      Memory("buf", size_bytes=128, energy_pj=(2, 2, 2), holds="IO", write_pj=(1, 1, 3)),
                      Memory("DRAM", energy_pj=(100,) * 3)), array=arr, array_level=1, name="rs-small")


def network_priced():
    """Per-PE RFs and a buffer both holding every operand, on a 2 x 4 Fh|K array whose network costs more than the
    buffer: a tile the buffer passes on unchanged still crosses the network."""
    arr = SpatialArray((("rows", 2), ("cols", 4)), (("Fh", "rows"), ("K", "cols")), noc_pj=(20, 20, 20))
    return Hierarchy((Memory("RF", size_bytes=16, energy_pj=(0.3, 0.3, 0.3)),
                      Memory("buf", size_bytes=128, energy_pj=(2, 2, 2)),
                      Memory("DRAM", energy_pj=(100,) * 3)), array=arr, array_level=1, name="noc-priced")


# ---- the model against a walk of every PE's data ----------------------------------------------
def words(layer, T, unroll, starts, extents, pe=None, clip=False):
    """The distinct real words of T that temporal extents (per dim, from `starts`) touch on one PE (`pe`: its index
    per dim) or on the whole array, enumerated index by index; a padded index (past the layer's bound) touches
    nothing, nor, with `clip` (loads from DRAM), does an input position in the zero border."""
    ranges = []
    for d, s, t0, n in zip(DIMS, unroll, starts, extents):
        js = [pe[DIMS.index(d)]] if pe is not None else range(s)
        ranges.append([t * s + j for t in range(t0, t0 + n) for j in js if t * s + j < getattr(layer, d)])
    x, y, c, k, n_, fw, fh = ranges
    (sx, sy), (dx, dy) = layer.stride, layer.dilation
    (x0, x1), (y0, y1) = (layer.real_range(0), layer.real_range(1)) if clip else ((-1, 10**9), (-1, 10**9))
    if T == "I":  # the zero border is made on chip: DRAM moves only real input positions
        return len({(b, ch, a * sx + p * dx, r * sy + q * dy) for b in n_ for ch in c for a in x for p in fw
                    for r in y for q in fh if x0 <= a * sx + p * dx < x1 and y0 <= r * sy + q * dy < y1})
    if T == "W":
        return len({(kk, ch, p, q) for kk in k for ch in c for p in fw for q in fh})
    return len({(b, kk, a, r) for b in n_ for kk in k for a in x for r in y})


def simulate(layer, h, b):
    """Walk every temporal step; count a refill whenever a stored tile's indices change; words by enumeration.

    Returns {(level, T): reads}, {(level, T): writes}, {T: network words} and {(level, T): energy}: a boundary that
    some output crosses more than once carries partial sums (priced `h.psum_scale` times a word); with
    `h.both_ends` the level a tile lands in (the outermost holder below its source) writes the fills and reads the
    outputs out, and partial sums read their zero too.
    """
    m = len(b.tiles)
    loops = [(blk, d, b.trips(blk)[d]) for blk in reversed(range(m)) for d in reversed(b.orders[blk])]
    loops += [(-1, d, t) for d, t in zip(DIMS, b.tiles[0])]  # the steps inside level 0's tile
    pes = list(itertools.product(*(range(s) for s in b.unroll)))
    reads, writes, noc = {}, {}, dict.fromkeys("IWO", 0)
    ones = (1,) * len(DIMS)

    def units(T, level, tile, starts, clip):
        if h.inside(level):
            return sum(words(layer, T, b.unroll, starts, tile, pe, clip) for pe in pes)
        return words(layer, T, b.unroll, starts, tile, clip=clip)

    def add(table, key, n):
        table[key] = table.get(key, 0) + n

    links = {}  # (child, src, T) -> [words at src, first-fill words at src, words at the level below, below]
    for T in layer.tensors:
        keep = stored_levels(T, b, h)
        chain = [(None, holders(h, T)[0])] + list(zip(keep, [*keep[1:], m]))
        last, seen = {}, set()
        for point in itertools.product(*(range(t) for _, _, t in loops)):
            for child, src in chain:
                lo = -1 if child is None else child
                key = tuple(p for p, (blk, d, _) in zip(point, loops) if blk >= lo and d in RELEVANT[T])
                if child is not None and last.get(child) == key:
                    continue
                last[child] = key
                tile = ones if child is None else b.tiles[child]
                starts = [0] * len(DIMS)  # the tile's first temporal step per dim
                for p, (blk, d, _) in zip(point, loops):
                    if blk >= lo:
                        starts[DIMS.index(d)] += p * (b.tiles[blk][DIMS.index(d)] if blk >= 0 else 1)
                clip = src == m
                n_src = units(T, src, tile, starts, clip)
                n_pe = units(T, 0, tile, starts, clip) if h.array and not h.inside(src) \
                    and (child is None or h.inside(child)) else 0
                first = (child, key) not in seen
                seen.add((child, key))
                below = None if child is None else max(x for x in holders(h, T) if x < src)
                link = links.setdefault((child, src, T), [0, 0, 0, below])
                link[0] += n_src
                link[1] += n_src if first else 0
                link[2] += 0 if below is None else units(T, below, tile, starts, clip)
                noc[T] += n_pe * (1 if first or T != "O" else 2)
    energy = {}
    for (_child, src, T), (n, first, n_below, below) in links.items():
        psum = T == "O" and n > first
        x = h.psum_scale if psum else 1.0
        if T == "O":  # written up; read back down unless this is the output's first fill (both-ends: that too)
            back = n if h.both_ends and psum else n - first
            add(writes, (src, T), n)
            add(reads, (src, T), back)
            add(energy, (src, T), x * (back * h.levels[src].energy(T) + n * h.levels[src].write_energy(T)))
        else:
            add(reads, (src, T), n)
            add(energy, (src, T), n * h.levels[src].energy(T))
        if h.both_ends and below is not None:
            low = h.levels[below]
            if T == "O":
                add(reads, (below, T), n_below)
                add(writes, (below, T), n - first)
                add(energy, (below, T), x * (n_below * low.energy(T) + (n - first) * low.write_energy(T)))
            else:
                add(writes, (below, T), n_below)
                add(energy, (below, T), n_below * low.write_energy(T))
    return reads, writes, noc, energy


def random_blocking(layer, h, rng):
    unroll = rng.choice(every_unroll(layer, h))
    dims = SpatialView.of(layer, unroll).dims
    m = len(h.on_chip)
    chains = [rng.choice(list(divisor_chains(n, m))) for n in dims]
    tiles = tuple(tuple(c[l] for c in chains) for l in range(m))
    return Blocking(dims, tiles, tuple(tuple(rng.sample(DIMS, len(DIMS))) for _ in range(m)), unroll)


def rows_and_lanes():
    """Row-stationary with channels too: Fh and C over 6 rows, Y and K over 4 columns, every operand in the RF."""
    arr = SpatialArray((("rows", 6), ("cols", 4)), (("Fh", "rows"), ("C", "rows"), ("Y", "cols"), ("K", "cols")),
                       noc_pj=(1, 1, 1))
    return Hierarchy((Memory("RF", size_bytes=24, energy_pj=(0.3, 0.3, 0.3)),
                      Memory("buf", size_bytes=96, energy_pj=(2, 2, 2)),
                      Memory("DRAM", energy_pj=(100,) * 3)), array=arr, array_level=1, name="rs-lanes")


def zigzag_priced(h):
    """`h` priced as ZigZag does: 32-bit partial sums of 16-bit words, both ends of every transfer charged."""
    return replace(h, psum_bits=32, charge="both-ends", name=h.name + "-zz")


WALK = [(Layer(X=3, Y=2, C=3, K=5, Fw=2, name="conv"), tpu_like(2, 4)),
        (Layer(X=2, Y=3, C=2, K=2, Fh=3, name="rows"), row_stationary()),
        (Layer(X=2, Y=4, C=2, K=2, Fw=2, Fh=3, stride=(2, 2), name="strided"), row_stationary()),
        (Layer(X=2, Y=2, C=4, K=2, Fw=2, Fh=3, stride=(2, 2), name="strided-lanes"), rows_and_lanes()),
        (Layer(X=3, Y=2, C=3, K=5, Fw=3, pad=(1, 1, 0, 0), name="padded"), zigzag_priced(tpu_like(2, 4))),
        (Layer(X=3, Y=2, C=2, K=2, Fh=3, Fw=2, pad=(0, 1, 1, 1), name="padded-rows"), zigzag_priced(row_stationary())),
        (Layer(X=2, Y=3, C=4, K=2, Fw=3, Fh=2, stride=(2, 1), pad=(2, 1, 1, 0), name="padded-lanes"),
         zigzag_priced(rows_and_lanes()))]


@pytest.mark.parametrize("layer, h", WALK, ids=lambda x: getattr(x, "name", ""))
def test_evaluate_matches_walk_of_every_pe(layer, h):
    rng = random.Random(11)
    for _ in range(30):
        b = random_blocking(layer, h, rng)
        cost = evaluate(layer, h, b)
        reads, writes, noc, pj = simulate(layer, h, b)
        names = [x.name for x in h.levels]
        energy = sum(h.array.noc_pj["IWO".index(T)] * n for T, n in noc.items())
        for a in cost.accesses:
            if a.level == h.array.name:
                assert a.reads == noc[a.tensor], (b, a)
                continue
            key = names.index(a.level), a.tensor
            assert (a.reads, a.writes) == (reads.get(key, 0), writes.get(key, 0)), (b, a)
            assert a.energy_pj == pytest.approx(pj.get(key, 0.0)), (b, a)
            energy += pj.get(key, 0.0)
        assert cost.memory_pj == pytest.approx(energy)


# ---- the exact search against brute force -------------------------------------------------------
BRUTE = [(Layer(X=2, Y=2, C=4, K=3, name="wide-C"), tpu_like(2, 2, 64)),
         (Layer(X=3, C=2, K=5, Fw=2, name="partial-K"), tpu_like(2, 4, 48)),
         (Layer(X=2, Y=3, C=2, K=2, Fh=3, name="rows"), row_stationary()),
         (Layer(X=2, Y=2, C=3, K=2, Fh=2, stride=(2, 2), name="strided"), row_stationary()),
         (Layer(X=3, C=2, K=4, Fw=2, name="passed-on"), network_priced()),
         (Layer(X=2, Y=2, C=2, K=4, Fh=2, name="passed-on-rows"), network_priced()),
         (Layer(X=2, Y=2, C=4, K=3, name="wide-C-zz"), zigzag_priced(tpu_like(2, 2, 64))),
         (Layer(X=4, C=2, K=4, Fw=3, pad=(1, 1, 0, 0), name="padded-zz"), zigzag_priced(tpu_like(2, 2, 64))),
         (Layer(X=3, Y=2, C=2, K=2, Fw=3, Fh=2, pad=(1, 1, 1, 0), name="padded-rows-zz"),
          zigzag_priced(row_stationary())),
         (Layer(X=3, C=2, K=4, Fw=2, name="passed-on-zz"), zigzag_priced(network_priced()))]


@pytest.mark.parametrize("layer, h", BRUTE, ids=lambda x: getattr(x, "name", ""))
def test_exact_equals_exhaustive_per_operand_and_spatial(layer, h):
    fast = block(layer, h)
    slow = block(layer, h, method="exhaustive")
    assert fast.energy_pj == pytest.approx(slow.energy_pj, rel=1e-12)
    assert fast.cost.fits and slow.evaluated > 1000


def test_utilisation_counts_idle_rows_and_padding():
    h = tpu_like(32, 32, 2 ** 20)
    first = block(Layer(X=4, Y=4, C=3, K=64, Fw=3, Fh=3, name="rgb"), h)
    assert first.blocking.unroll[DIMS.index("C")] == 3 and first.blocking.unroll[DIMS.index("K")] == 32
    assert first.cost.utilisation == pytest.approx(3 / 32)
    odd = Layer(X=2, C=64, K=40, name="k40")  # K = 40 on 32 columns: 2 steps, the second one padded
    cost = evaluate(odd, h, Blocking.of(odd, {}, {}, {}, unroll={"C": 32, "K": 32}))
    assert cost.cycles == 2 * 2 * 2
    assert cost.utilisation == pytest.approx(64 * 40 * 2 / (32 * 32 * 8))
    # padded words move nothing: K = 64 runs the same steps, and K = 40 moves 40/64 of its weight and output words
    full = Layer(X=2, C=64, K=64)
    cost64 = evaluate(full, h, Blocking.of(full, {}, {}, {}, unroll={"C": 32, "K": 32}))
    assert cost64.cycles == cost.cycles
    for T in "WO":
        assert cost.at("DRAM", T) * 64 == cost64.at("DRAM", T) * 40 > 0
    assert cost.at("DRAM", "I") == cost64.at("DRAM", "I") > 0
    assert cost.at("DRAM", "W") == 64 * 40  # each real weight once (the innermost X loop reuses it)


# ---- bad input ------------------------------------------------------------------------------------
def test_bad_input_names_level_operand_and_value():
    with pytest.raises(EngineError, match="operand W has no level.*'DRAM' holds only 'IO'"):
        Hierarchy((Memory("SRAM", size_bytes=64), Memory("DRAM", holds="IO")))
    with pytest.raises(EngineError, match="'W-reg': operand W is held here with a capacity of 0"):
        Memory("W-reg", split_bytes=(0, 0, 4), holds="W")
    with pytest.raises(EngineError, match="size_bytes must be a positive"):
        Memory("SRAM", size_bytes=0)
    h = tpu_like(4, 4)
    layer = Layer(X=2, C=8, K=4)
    with pytest.raises(EngineError, match="unroll of 8 on axis 'rows' exceeds its 4 PEs"):
        evaluate(layer, h, Blocking.of(layer, {}, {}, {}, unroll={"C": 8}))
    with pytest.raises(EngineError, match="X unrolled by 2 but the dataflow"):
        evaluate(layer, h, Blocking.of(layer, {}, {}, {}, unroll={"X": 2}))
    with pytest.raises(EngineError, match="level 'W-reg'.*operand\\(s\\) W"):
        block(layer, Hierarchy((Memory("W-reg", split_bytes=(0, 1, 0), holds="W"), Memory.dram())))
    with pytest.raises(EngineError, match="array_level"):
        Hierarchy((Memory("S", size_bytes=64), Memory.dram()), array_level=1)


def test_maximal_unrollings_fill_each_axis():
    from dataclasses import replace

    from engine.blocking.grid import unrollings

    h = tpu_like(12, 4)
    rows = replace(h, array=SpatialArray((("rows", 12), ("cols", 4)), (("Fh", "rows"), ("C", "rows"), ("K", "cols")),
                                         unrolling="maximal"))
    layer = Layer(X=4, C=128, K=4, Fh=3)
    got = {(u[DIMS.index("Fh")], u[DIMS.index("C")], u[DIMS.index("K")]) for u in unrollings(layer, rows)}
    assert got == {(1, 12, 4), (2, 6, 4), (3, 4, 4)}
    assert len(unrollings(layer, replace(rows, array=replace(rows.array, unrolling="all")))) > 40
    with pytest.raises(EngineError, match="unknown unrolling"):
        SpatialArray((("rows", 2),), (("C", "rows"),), unrolling="some")


def test_maximal_filter_keeps_exactly_the_combos_no_other_one_covers():
    """The vectorised filter (compared a block of rows at a time) against the pairwise definition, on random axes."""
    from engine.blocking.grid import _unbeaten

    rng = random.Random(3)
    for _ in range(120):  # arrays of up to 64 PEs an axis: the pairwise check is quadratic (at 256, 2,000 combos)
        size = rng.choice([2, 4, 16, 32, 64])
        options = [sorted({-(-n // -(-n // f)) for f in range(1, min(size, n) + 1)})
                   for n in (rng.randint(1, 300) for _ in range(rng.randint(1, 3)))]
        combos = [c for c in itertools.product(*options) if math.prod(c) <= size]
        pairwise = [c for c in combos if not any(o != c and all(x >= y for x, y in zip(o, c)) for o in combos)]
        assert _unbeaten(combos) == _unbeaten(combos, block=7) == pairwise
    assert _unbeaten([(128,), (64,), (1,)]) == [(128,)]  # one dim on an axis: its largest factor alone


STATIONARY = [(Layer(X=3, C=2, K=4, Fw=2, name="ws"), tpu_like(2, 2, 48), 11879.2),
              (Layer(X=2, Y=2, C=2, K=3, Fh=2, name="rs"), row_stationary(), 3707.2)]


@pytest.mark.parametrize("layer, h, pj", STATIONARY, ids=lambda x: getattr(x, "name", ""))
def test_stationary_operands_against_run_counts_and_brute_force(layer, h, pj):
    """ZigZag's rule: a MAC input or weight is read once per run of the innermost loops of level 0 that skip it."""
    from dataclasses import replace

    h = replace(h, stationary=True)
    rng = random.Random(5)
    for _ in range(6):
        b = random_blocking(layer, h, rng)
        b = replace(b, inner=tuple(rng.sample(DIMS, len(DIMS))))
        cost = evaluate(layer, h, b)
        run = {T: 1 for T in "IW"}
        for T in run:
            for d in b.inner:
                t = b.tiles[0][DIMS.index(d)]
                if t > 1 and d in RELEVANT[T]:
                    break
                run[T] *= t
        plain = evaluate(layer, replace(h, stationary=False), b)
        w0 = h.levels[holders(h, "W")[0]].name  # inside the PEs: one word per busy PE per step, or per run
        macs = math.prod(b.unroll) * math.prod(b.dims)
        assert cost.at(w0, "W") == plain.at(w0, "W") - macs + macs // run["W"]
        assert cost.at(h.levels[holders(h, "I")[0]].name, "I") <= plain.at(h.levels[holders(h, "I")[0]].name, "I")
    fast = block(layer, h)
    slow = block(layer, h, method="exhaustive")
    assert fast.energy_pj == pytest.approx(slow.energy_pj, rel=1e-12) == pj  # brute force's figure
    assert fast.energy_pj <= block(layer, replace(h, stationary=False)).energy_pj  # rs: 3714.4 without the rule


NOT_MAXIMAL = [(Layer(X=1, Y=2, C=3, K=5, Fw=2, name="k3"), tpu_like(2, 4, 48), 16806.0, 16821.0),
               (Layer(X=2, Y=3, C=2, K=2, Fh=3, name="fh3"), row_stationary(), 4656.8, 4660.0)]


@pytest.mark.parametrize("layer, h, pj, maximal_pj", NOT_MAXIMAL, ids=lambda x: getattr(x, "name", ""))
def test_every_unrolling_equals_brute_force_where_a_non_maximal_one_wins(layer, h, pj, maximal_pj):
    """unrolling="all" is exact over every unrolling: brute force over every factor of every mapped dim agrees, on
    layers whose best unrolling leaves an axis less full than another unrolling would (K by 3 of 4 columns; Fh by 3
    with Y left temporal), so the maximal search misses it."""
    from dataclasses import replace

    from engine.blocking.grid import unrollings

    h = replace(h, stationary=True) if h.name == "rs-small" else h
    fast = block(layer, h)
    maximal = block(layer, replace(h, array=replace(h.array, unrolling="maximal")))
    assert fast.energy_pj == pytest.approx(block(layer, h, method="exhaustive").energy_pj, rel=1e-12)
    assert (fast.energy_pj, maximal.energy_pj) == (pytest.approx(pj), pytest.approx(maximal_pj))
    assert fast.blocking.unroll not in unrollings(layer, replace(h, array=replace(h.array, unrolling="maximal")))


@pytest.mark.parametrize("unroll", [(1, 2, 2, 2, 1, 1, 3), (2, 1, 3, 2, 1, 2, 1), (1, 1, 1, 4, 1, 1, 1)])
def test_the_searchs_words_per_load_are_the_models(unroll):
    """The DP's vectorised words per load (`_Grid`) equal `SpatialView.real` over the tile's positions, inside the
    array (every PE lane of a loop that skips the operand holds its own copy: K lanes copy inputs) and outside."""
    from engine.blocking.grid import tile_grid

    layer = Layer(X=4, Y=4, C=5, K=4, Fw=2, Fh=3, stride=(2, 2), name="lanes")
    grid = tile_grid(layer, unroll)
    view = grid.view
    for i in range(grid.size):
        tile = grid.tile(i)
        for T in layer.tensors:
            for inside, moved in ((True, grid.moved_pe), (False, grid.moved)):
                assert moved[T][i] * view.positions(T, tile) == pytest.approx(view.real(T, tile, inside)), (T, tile)


def test_a_network_priced_search_keeps_its_optimum_under_a_cap():
    """Eyeriss's array network costs 2 pJ a PE word: the search priced inputs' K-lane copies at half their words and
    took a 0.5 % dearer blocking of ResNet-50's layer4.0.conv2 than it found when capped."""
    from engine.accelerator import Accelerator
    from engine.blocking.dp import exact_unrolled

    h = Hierarchy.from_accelerator(Accelerator.preset("eyeriss"))
    layer = Layer(X=7, Y=7, C=512, K=512, Fw=3, Fh=3, stride=(2, 2), name="layer4.0.conv2")
    unroll = (1, 7, 4, 2, 1, 1, 3)
    free, _ = exact_unrolled(layer, h, unroll)
    capped, _ = exact_unrolled(layer, h, unroll, 0.98804e9)
    assert evaluate(layer, h, free).memory_pj <= evaluate(layer, h, capped).memory_pj


def test_a_window_span_counts_each_input_position_once():
    """A PE's rows under an unrolled window stride by the output lanes and step by the window lanes: the positions
    a * stride + b * dilation, counted as a set (stride 2 and dilation 3 reach 14 of the 16 rows from 0 to 15)."""
    from engine.blocking.layer import span

    for outputs, taps, stride, dilation in itertools.product(range(1, 7), range(1, 7), range(1, 6), range(1, 6)):
        reached = {a * stride + b * dilation for a in range(outputs) for b in range(taps)}
        assert span(outputs, taps, stride, dilation) == len(reached), (outputs, taps, stride, dilation)
    assert span(4, 4, 2, 3) == 14
