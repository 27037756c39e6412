"""The plan that needs no search: each op alone on chip, every tensor a later op reads spilled and retrieved.

It is valid at any budget of at least M_R (one op's tensors at once) and is built in one pass
over the order, so `allocate` can always answer within its time limit: it is the answer, status
"time_limit", when the limit passes before any other plan exists.
"""

from __future__ import annotations

from engine.allocation.record import Placement


def spill_all(steps, sizes: dict[str, int], outputs):
    """Placements, spills and retrievals (and their bytes) of running each op alone on chip, from address 0.

    `steps` are the (reads, writes) of each op in order and `sizes` every tensor's bytes
    (`record.op_table`); `outputs` the network outputs. A tensor made at step t and read
    later is spilled at t + 1 (an output needs no spill: its write-back is compulsory) and
    retrieved for each later reader; a network input (or weight) is loaded once for free,
    then retrieved for each further reader.
    """
    read_later = {a for reads, _ in steps for a in reads}
    placements: list[Placement] = []
    spills: list[tuple[str, int]] = []
    retrievals: list[tuple[str, int]] = []
    moved = 0
    seen: set[str] = set()  # tensors on chip once already: a later stay is a retrieval
    for t, (reads, writes) in enumerate(steps):
        address = 0
        for a in reads:
            size = sizes[a]
            placements.append(Placement(a, t, t, address, size))
            address += size
            if a in seen:
                retrievals.append((a, t))
                moved += size
            else:
                seen.add(a)  # a first read of an input or weight is its compulsory load
        for a in writes:
            size = sizes[a]
            placements.append(Placement(a, t, t, address, size))
            address += size
            seen.add(a)
            if a in read_later and a not in outputs:
                spills.append((a, t + 1))
                moved += size
    return placements, spills, retrievals, moved
