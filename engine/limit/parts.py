"""What the segmentation bound reads and builds: links, components, streamed operands, pieces, cuts (data only)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.limit.ops import OpTable

INF = float("inf")


BIG = 1e30  # INF in the cut sums (0 * inf is not 0); bit counts stay below 2^53, exact in float64


@dataclass(frozen=True)
class Link:
    """A tensor one op makes and `readers` read (folded layout ops looked through)."""

    producer: int
    readers: tuple[int, ...]
    nbytes: int  # its bytes (the smaller of the tensor made and the view read)
    whole: int  # elements of one image its one reader holds at full depth when it reads it from outside
    finest: int  # elements of one row of it held so
    streamed: bool = False  # a streamed operand (keys, values): read as parameters are, so held nowhere


@dataclass(frozen=True)
class Component:
    """Ops joined by links, and a key shared by every component alike (a model's identical layers)."""

    ops: tuple[int, ...]
    links: tuple[Link, ...]
    kind: int


@dataclass(frozen=True)
class Streamed:
    """A streamed operand (keys, values, a KV cache) one op reads: loaded as parameters are unless made whole on chip."""

    nbytes: int
    elems: int  # elements of every image
    made: bool  # made by an op (no read counted in the once-term) or a network input (one read counted)
    written: bool  # its maker's group must write it when another group reads it (one reader all along)
    producer: int  # the op that makes the tensor read (-1: a network input); it and its ancestors are the cone


@dataclass(frozen=True, eq=False)
class Segments:
    """What the segmentation bound reads of one graph, independent of the buffer (compared by identity)."""

    components: tuple[Component, ...]
    tables: tuple[OpTable, ...]
    whole: tuple[tuple[int, int], ...]  # per op: (output elements of one image, chunked under ISOA) at full rows
    finest: tuple[tuple[int, int], ...]  # per op: the same at its least tile rows
    streamed: tuple[tuple[Streamed, ...], ...]  # per op
    read: tuple[tuple[tuple[int, int, int], ...], ...]  # per op: (tensor, whole, finest) of inputs no group makes
    passes: tuple[bool, ...]  # per op: may chunk whatever its producers keep (element-wise on token matrices)
    inplace: tuple[bool, ...]
    covered: tuple[bool, ...]
    cone: tuple[int, ...]  # per op: the mask of it and its ancestors
    below: tuple[int, ...]  # per op: the mask of it and its descendants
    free_links: int  # links left out of every component (loose: priced where their readers share one, else free)
    feeds: tuple[tuple[int, ...], ...] = ()  # per op: its input tensors that are not streamed
    maker: tuple[int, ...] = ()  # per tensor: the covered op that makes it (-1: a network input or an uncovered op's)
    outside: tuple[tuple[int, int], ...] = ()  # per tensor: (whole-image, finest) elements held from another group
    source: tuple[int, ...] = ()  # per tensor: the op that makes it, looked back through folded layout ops
    ins: tuple[tuple[int, ...], ...] = ()  # per op: every input tensor
    hold: tuple[int, ...] = ()  # per tensor: whole-image elements a group making a streamed operand whole holds
    # of it when it reads it (a streamed tensor cannot be: `UNBOUNDED`)
    cuts: tuple[Cuts, ...] = ()  # per kind of component: its pieces under every subset of cut links
    chains: tuple[tuple[int, ...], ...] = ()  # components in a row, each the readers' of a loose link the one before
    # makes (a residual stream between layers): per component of a chain but the first, (the one before, the link,
    # the first component of the same kinds and positions: their joint pieces are priced once)
    joined: Mapping[int, tuple[int, Link, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Piece:
    """Ops of a component one group holds, and lower bounds on the elements of its tiles (one image; finest)."""

    ops: tuple[int, ...]
    whole: int
    finest: int
    # per set of the streamed operands its members read (bit k: the k-th, in order) made whole in the group: the
    # elements of one image their cones hold at every row step (`_need`), and (whole-image, finest) elements of the
    # tiles outside the cones, which shrink with the row steps while the cones do not
    rest: tuple[tuple[int | float, int, int], ...] = ()
    linked: tuple[bool, ...] = ()  # per streamed operand: whether a link of the component carries it
    params: int = 0  # elements of its members' own parameters
    streams: tuple[Streamed, ...] = ()  # the streamed operands its members read, in order
    runs: bool = True  # one op, or every member in the tile model (else no group holds them)


@dataclass(frozen=True, eq=False)
class Cuts:
    """Every way to cut a component: row s cuts links `cut_bits[s]` bits' worth (twice their bytes) and leaves
    the pieces `uses[s]` marks (buffer-independent; priced per size by `piece_bits`)."""

    pieces: tuple[Piece, ...]
    uses: np.ndarray  # (subsets, pieces) of 0 / 1
    cut_bits: np.ndarray  # (subsets,)
    masks: tuple[int, ...]  # per piece: its ops as bits of the component's (k: the k-th)
    owner: np.ndarray  # (subsets, ops): the piece each op is in
