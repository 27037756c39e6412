"""`Memo`: a bounded, clearable, thread-safe table of results already computed, owned by the object it serves.

The fusion model's caches (footprints, ISOA decisions, schedules by group) grow with
every group a search costs, and the dashboard's worker threads fill them at once. A
`Memo` keeps at most `size` entries (the oldest go first), takes a lock for each write
and empties on `clear()`; what it holds is always recomputable, so an entry dropped early
only costs time. Reads take no lock: one dict lookup is atomic in CPython, and reads are
the searches' hot path (a lock on each made the baselines about a fifth slower).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

_MISSING = object()


class Memo:
    """At most `size` results by key, oldest dropped first; safe to share between threads."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a Memo holds at least one entry, not {size}")
        self.size = size
        self._items: dict[Hashable, Any] = {}  # in the order they were put
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The result kept for `key`, or `default`."""
        hit = self._items.get(key, _MISSING)
        return default if hit is _MISSING else hit

    def put(self, key: Hashable, value: Any) -> Any:
        """Keep `value` for `key` (dropping the oldest past `size`); returns `value`."""
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                del self._items[next(iter(self._items))]
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The result for `key`, made by `make()` (outside the lock: two threads may both make it) when missing."""
        hit = self.get(key, _MISSING)
        return self.put(key, make()) if hit is _MISSING else hit

    def clear(self) -> None:
        """Forget every result."""
        with self._lock:
            self._items.clear()
