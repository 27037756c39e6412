"""The fusion kernel: the down-set search and the cost of groups, compiled with Numba (the engine's one path).

`optimus.chain_search` runs `search`; `cost.records` runs `schedules`; `online.size_limit`
runs `window_limit`. They read a `FusionModel` through `tables` and grow groups in the
arrays of `workspace`. One module per job:

| module | job |
|---|---|
| `tables` | the model's tables in one array, the workspace's layout, its log and undo |
| `grow` | an op added to a group (rows, halos, traffic, ISOA bounds); every group from a down-set; Alg. 3's windows |
| `isoa` | the exact ISOA program (Alg. 2) of a grown group |
| `schedule` | Eq. 3 and 4 of a grown group, a lone op's layer-wise schedule, the records of a plan |
| `search` | the down-sets, their hash table, levels and beam |

The Python reference every function is held to lives with the tests
(tests/fusion_reference.py) and in the cost model `group_cost` runs (`engine.fusion.cost`).

Numba caches each module's machine code beside it and checks only that module's source,
so a function compiled against another module's (the search against `grow`, `grow` against
`isoa`) would keep a stale copy when only the other changed. `_drop_stale_cache` therefore
keys the whole kernel's cache by a hash of all its sources, and drops it when they change.

Numba compiles a callee once for each literal value a caller passes it (`_tiled(..., 1, ..., False)`
is a second copy of `_tiled`), so the big callees are handed `np.int64(1)` and `np.bool_(False)`,
and depths start at `np.int64(0)`: one copy each, a compile of 50 CPU s instead of 68.
"""

import hashlib
from pathlib import Path


def _drop_stale_cache() -> None:
    """Remove Numba's cached machine code of this package when any of its sources changed since it was cached.

    Where the package's folder cannot be written (an installed copy), Numba keeps its cache elsewhere and
    nothing is dropped."""
    here = Path(__file__).parent
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
    cache = here / "__pycache__"
    stamp = cache / "kernel-sources.sha256"
    try:
        if stamp.exists() and stamp.read_text() == digest:
            return
        cache.mkdir(exist_ok=True)
        for f in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            f.unlink(missing_ok=True)
        stamp.write_text(digest)
    except OSError:
        return


_drop_stale_cache()

# imported after `_drop_stale_cache`, so that Numba loads no stale machine code: the order is the point
from engine.fusion.core.grow import window_limit  # noqa: E402
from engine.fusion.core.schedule import (  # noqa: E402
    FOLDED,
    FUSED,
    LAYERWISE,
    UNMODELLED,
    group_dram,
    lone_costs,
    schedules,
)
from engine.fusion.core.search import options as search_options  # noqa: E402
from engine.fusion.core.search import search  # noqa: E402
from engine.fusion.core.tables import bitset, tables, workspace  # noqa: E402

__all__ = ["FOLDED", "FUSED", "LAYERWISE", "UNMODELLED", "bitset", "group_dram", "lone_costs", "schedules", "search",
           "search_options", "tables", "window_limit", "workspace"]
