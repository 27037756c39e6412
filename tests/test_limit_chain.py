"""Orojenesis's fused chains (engine/limit/chain.py) against every mapping of the paper's templates (Sec. V, Fig. 16-17)."""

from __future__ import annotations

import random
from itertools import product

import pytest

from engine.limit.chain import Stage, fused_bytes


def brute_force(stages: tuple[Stage, ...], pipelined: bool) -> dict[int, int]:
    """Least accesses (elements) at each buffer (elements) over every FFMT mapping: the row tile M0, which Einsums
    hold their weights, the first Einsum's input depth k0 and output chunk n0 (TiledKN), the second's choice of
    TiledK (the chunk in, whole rows out) or, in a two-Einsum chain without chunks, TiledN, the last's output
    chunk (TiledN), and the weight tile (1 or 2 elements) of every streamed Einsum; Sec. V-B's buffer and V-C's
    accesses, written out loop by loop."""
    rows, last = stages[0].rows, len(stages) - 1
    first = stages[0]
    out0 = first.heads * first.n
    points: dict[int, int] = {}
    for m0, n0, k0, nl, hold, wt, second_n in product(
            range(1, rows + 1), range(1, out0 + 1), range(1, first.heads * first.k + 1),
            range(1, stages[-1].heads * stages[-1].n + 1), product((False, True), repeat=len(stages)),
            product((1, 2), repeat=len(stages)), (False, True)):
        if second_n and (last != 1 or n0 != out0):
            continue
        tiles = []
        for e, s in enumerate(stages):
            inp, out = s.heads * s.k, s.heads * s.n
            if e == 0:
                row = k0 + n0
            elif e == 1 and second_n:
                row = inp + nl
            elif e == 1:
                row = n0 + out
            elif e == last:
                row = inp + nl
            else:
                row = inp + out
            tiles.append(m0 * row)
        held = sum(s.weight_elems() // (1 if s.shared else s.copies) for s, h in zip(stages, hold) if h)
        streamed = [0 if h else w for h, w in zip(hold, wt)]
        buf = held + (sum(streamed) + max(tiles) if pipelined else max(t + w for t, w in zip(tiles, streamed)))
        m1 = -(-rows // m0)
        weights = sum(s.weight_elems() * (1 if h else m1 * (s.copies if s.shared else 1)) for s, h in zip(stages, hold))
        acc = (-(-out0 // n0) * first.heads * first.copies * rows * first.k + weights
               + stages[-1].heads * stages[-1].copies * rows * stages[-1].n)
        if acc < points.get(buf, acc + 1):
            points[buf] = acc
    return points


def _random_chain(rng: random.Random) -> tuple[Stage, ...]:
    rows = rng.randint(2, 5)
    dims = [rng.randint(1, 4) for _ in range(rng.randint(3, 4))]
    copies = rng.choice([1, 2])
    return tuple(Stage(f"e{i}", rows, k, n, copies=copies, shared=rng.random() < 0.7)
                 for i, (k, n) in enumerate(zip(dims, dims[1:])))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("pipelined", [False, True])
def test_fused_chain_is_the_least_of_every_template_mapping(seed, pipelined):
    # at every buffer size: no FFMT mapping that fits moves less than `fused_bytes`, and one moves exactly that
    stages = _random_chain(random.Random(seed))
    points = brute_force(stages, pipelined)
    best = None
    for buf in range(1, max(points) + 2):
        here = points.get(buf)
        best = here if best is None or (here is not None and here < best) else best
        # 8-bit words: bytes are elements
        assert fused_bytes(stages, buf, 8, pipelined=pipelined) == best, buf


def test_pipelined_fusion_needs_more_buffer_than_sequential():
    # Sec. V-B: a pipelined chain holds one element of every streamed weight at once, a sequential one only the
    # current Einsum's: the same traffic needs more room (the paper's reason to report sequential bounds)
    chain = (Stage("a", 64, 32, 128), Stage("b", 64, 128, 16), Stage("c", 64, 16, 48))
    sizes = range(64, 20000, 16)
    seq = [fused_bytes(chain, n) for n in sizes]
    pipe = [fused_bytes(chain, n, pipelined=True) for n in sizes]
    assert all(p is None or s is not None and s <= p for s, p in zip(seq, pipe))
    assert any(s != p for s, p in zip(seq, pipe))


def test_a_stage_of_no_tokens_names_the_stage():
    import engine

    with pytest.raises(engine.EngineError, match="stage 'Q_proj': rows must be .* at least 1.* got 0"):
        Stage("Q_proj", 0, 4096, 4096)
    with pytest.raises(engine.EngineError, match="stage 'bmm_QK': heads .* got -2"):
        Stage("bmm_QK", 2048, 128, 2048, heads=-2)
    chain = (Stage("a", 64, 32, 128), Stage("b", 64, 128, 16))
    # the least row tile: one column of a's output, b's whole row of 16 accumulated, one element of b's weights
    assert fused_bytes(chain, 34) is None and fused_bytes(chain, 36) is not None  # 18 words of 2 bytes
