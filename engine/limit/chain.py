"""Fused chains of matmuls (Orojenesis Sec. V-VII): the least traffic of a chain run in row tiles at a buffer size.

Huang et al. (ISCA 2024) fuse a chain of Einsums that share the row rank M (tokens): every
Einsum runs on a tile of M0 rows before the next one starts (sequential fusion), so only the
chain's first input and last output cross the chip boundary; each Einsum's weights are either
held for the whole chain (loaded once, their room reserved) or streamed once per row tile
(M1 = ceil(M / M0) times, Sec. V-C). The buffer must hold the largest Einsum's row tiles
(FFMT-Full: whole input and output rows, Fig. 16a) plus the held weights (Sec. V-B). A stage
whose "weights" are per sequence (the keys and values of attention) reloads them once per
row tile of its own sequence. Attention fused FlashAttention-style holds only query and output
rows (the scores stream in key tiles with an online softmax); FLAT-style it holds whole score
rows (Sec. VII-A). Unfused Einsums get their single-Einsum ski-slope (`einsum.ski_slope`), and a
chain's best segmentation takes, at each buffer size, the cheapest split into fused segments
(Sec. VI-B).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from engine.errors import EngineError
from engine.limit.einsum import at, gemm, ski_slope


@dataclass(frozen=True)
class Stage:
    """One matmul of a chain: B[rows, n] = A[rows, k] W[k, n] per head, for `copies` sequences of `rows` tokens.

    `shared`: W is the same for every sequence (a projection); else each sequence has its own (keys, values).
    `row_elems`: elements per row and head the stage holds when fused (default k + n, FFMT-Full).
    """

    name: str
    rows: int
    k: int
    n: int
    heads: int = 1
    copies: int = 1
    shared: bool = True
    row_elems: int | None = None

    def __post_init__(self):
        for field in ("rows", "k", "n", "heads", "copies"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise EngineError(f"stage '{self.name}': {field} must be a whole number of at least 1 (tokens, "
                                  f"reduction, output columns, heads, sequences), got {value!r}")

    @property
    def held_per_row(self) -> int:
        return self.heads * (self.row_elems if self.row_elems is not None else self.k + self.n)

    def weight_elems(self) -> int:
        """Elements of W over every sequence (a shared W once)."""
        return self.heads * self.k * self.n * (1 if self.shared else self.copies)

    def einsum(self, word_bits: int):
        """The stage alone as a batched GEMM (heads x copies independent GEMMs; a shared W counted once)."""
        if self.shared and self.heads == 1:
            return gemm(self.rows * self.copies, self.k, self.n, word_bits)
        return gemm(self.rows, self.k, self.n, word_bits, batch=self.heads * self.copies)


def unfused_bytes(stages: tuple[Stage, ...], buffer_bytes: int, word_bits: int = 16) -> int | None:
    """Sum of every stage's single-Einsum bound at the buffer (each runs alone, with the whole buffer); None
    when some stage has no mapping that fits it."""
    total = 0
    for s in stages:
        alone = at(ski_slope(s.einsum(word_bits), word_bits, 1), buffer_bytes)
        if alone is None:
            return None
        total += alone
    return total


def fused_bytes(stages: tuple[Stage, ...], buffer_bytes: int, word_bits: int = 16, *,
                factors: bool = False, pipelined: bool = False) -> int | None:
    """Least traffic of the whole chain fused in row tiles at the buffer (the paper's FFMT, Sec. V), or None when
    no row tile fits.

    Templates by position (Fig. 17): the first Einsum TiledKN (its input one element deep, its output in chunks
    of n0 columns: its input is read once per chunk, N2), the second TiledK (it reads the n0-column chunk and
    accumulates whole output rows), the middle ones Full (whole input and output rows), the last TiledN (whole
    input rows, one output column at a time); a stage with `row_elems` keeps that row (an attention strategy's
    own tiles) and takes no chunk. Each Einsum's weights are held for the whole chain (their room reserved) or
    streamed once per row tile, M1 times (Sec. V-C). Sequential fusion (one Einsum at a time) needs the held
    weights, one element of each streamed one, and the largest Einsum's row tiles; `pipelined` (all at once,
    Sec. V-B) one element per streamed Einsum instead of one in all. `factors`: row tiles that divide the rows
    only (perfect factorisation, as Timeloop-style mappers tile)."""
    return _fused(stages, buffer_bytes * 8 // word_bits, word_bits, factors, pipelined)


@lru_cache(maxsize=4096)
def _fused(stages: tuple[Stage, ...], room: int, word_bits: int, factors: bool = False,
           pipelined: bool = False) -> int | None:
    rows = stages[0].rows
    first, last = stages[0], stages[-1]
    out0 = first.heads * first.n
    into = first.heads * first.copies * rows * first.k
    out = last.heads * last.copies * rows * last.n
    best = None
    for chunks in _chunk_counts(stages):
        n0 = -(-out0 // chunks)
        per_row = [_row(stages, e, n0) for e in range(len(stages))]
        for hold in product((False, True), repeat=len(stages)):
            reserved = sum(s.weight_elems() // (1 if s.shared else s.copies) for s, h in zip(stages, hold) if h)
            if pipelined:  # every Einsum's tiles at once: one element of each streamed operand beside the held ones
                reserved += sum(not h for h in hold)
            # sequential: Einsum e alone needs its row tiles and, when it streams its weights, one element of them
            m0 = min(rows, min((room - reserved - (not h and not pipelined)) // r for r, h in zip(per_row, hold)))
            while factors and m0 > 1 and rows % m0:
                m0 -= 1
            if m0 < 1:
                continue
            tiles = -(-rows // m0)
            loads = sum(s.weight_elems() * (1 if h else tiles * (s.copies if s.shared else 1))
                        for s, h in zip(stages, hold))
            elems = into * chunks + out + loads
            best = elems if best is None else min(best, elems)
    return None if best is None else -(-best * word_bits // 8)


def _chunk_counts(stages: tuple[Stage, ...]) -> list[int]:
    """Every distinct N2(0): how many column chunks the first Einsum's output takes (1 when the second stage keeps
    a fixed row: it needs its input whole)."""
    if len(stages) < 2 or stages[1].row_elems is not None or stages[0].row_elems is not None:
        return [1]
    n = stages[0].heads * stages[0].n
    return sorted({-(-n // j) for j in range(1, n + 1)})


def _row(stages: tuple[Stage, ...], e: int, n0: int) -> int:
    """Elements per row tile of Einsum e under its template (Fig. 16-17) when the first Einsum makes n0-column chunks."""
    s = stages[e]
    full = s.held_per_row
    if s.row_elems is not None:
        return full
    inp, out = s.heads * s.k, s.heads * s.n
    if e == 0:
        return 1 + n0  # TiledKN: one input element, an output chunk
    if e == 1:
        if n0 == stages[0].heads * stages[0].n and e == len(stages) - 1:
            return inp + 1  # no chunks: the last Einsum takes TiledN
        return n0 + out  # TiledK: the chunk in, whole output rows accumulated
    if e == len(stages) - 1:
        return inp + 1  # TiledN: whole input rows, an output column at a time
    return full


def segmented_bytes(stages: tuple[Stage, ...], buffer_bytes: int, word_bits: int = 16) -> int | None:
    """Least traffic over every split of the chain into consecutive segments, each fused (one stage: alone);
    None when no split fits the buffer."""
    n = len(stages)
    best: list[int | None] = [0] + [None] * n  # best[i]: least traffic of the first i stages
    for j in range(1, n + 1):
        for i in range(j):
            seg = stages[i:j]
            cost = unfused_bytes(seg, buffer_bytes, word_bits) if len(seg) == 1 else fused_bytes(
                seg, buffer_bytes, word_bits)
            before, now = best[i], best[j]
            if cost is not None and before is not None and (now is None or before + cost < now):
                best[j] = before + cost
    return best[n]
