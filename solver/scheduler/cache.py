"""A bounded, thread-safe answer cache (least recently used out first), over cachetools.

It memoises whole answers by cache key; it is not a cost-model cache (what depends on the model,
GPU, cluster size and framework is cached under plan() itself). Bounded in entries, or in bytes
when given the weight of an answer (`sizeof`): an answer weighing more than the whole bound is
not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")

# A CurveResult held in memory, measured with tracemalloc over curves of 64 and 1,024 cells
# parsed from their JSON: 4.8 KB a cell (about 6x its JSON), and the answer's own fields.
CURVE_CELL_BYTES = 4_800
CURVE_BASE_BYTES = 8_192


def curve_bytes(curve: object) -> int:
    """The memory a curve answer holds (bytes), from its number of cells."""
    return CURVE_BASE_BYTES + CURVE_CELL_BYTES * len(getattr(curve, "cells", ()))


class AnswerCache(Generic[V]):
    """At most `max_size` answers, or with `sizeof` at most `max_size` bytes of answers;
    get() refreshes an entry, put() evicts the least recently used."""

    def __init__(self, max_size: int = 256, sizeof: Callable[[V], int] | None = None) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._items: LRUCache[str, V] = LRUCache(max_size, getsizeof=sizeof)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            return value

    def put(self, key: str, value: V) -> None:
        with self._lock:
            try:
                self._items[key] = value
            except ValueError:  # heavier than the whole bound: not kept
                self._items.pop(key, None)

    __setitem__ = put

    @property
    def size(self) -> int:
        """What the answers kept weigh (bytes with `sizeof`, else their number)."""
        with self._lock:
            return int(self._items.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
