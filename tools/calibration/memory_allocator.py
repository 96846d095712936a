"""PyTorch's CUDA caching allocator, replayed: what `torch.cuda.max_memory_reserved` reads after
a sequence of allocations and frees on one stream, with no `empty_cache` and no
`expandable_segments` (pytorch c10/cuda/CUDACachingAllocator.cpp, the same constants from v1.13,
nanotron's floor `torch>=1.13.1`, to v2.5.0):

- a request is rounded up to a multiple of 512 B (`round_size`, kMinBlockSize);
- requests up to 1 MiB (kSmallSize) are served from the small pool, whose segments are 2 MiB
  (kSmallBuffer); larger ones from the large pool, whose new segments are 20 MiB (kLargeBuffer)
  for requests under 10 MiB (kMinLargeAlloc) and the request rounded up to 2 MiB (kRoundLarge)
  otherwise (`get_allocation_size`);
- a request takes the smallest free block of its pool at least as large (`get_free_block`:
  the pool's set ordered by size, then address), and splits it when what is left is at least
  512 B (small pool) or more than 1 MiB (large pool) (`should_split`); else it makes a new
  segment (cudaMalloc);
- a freed block merges with its free neighbours in the same segment (`free_block`,
  `try_merge_blocks`), never across segments, and stays reserved.

A cudaMalloc that fails (past `limit`) frees every cached segment no live block uses and tries
again (`release_cached_blocks`; with the default max_split_size no block is "oversize", so
`release_available_cached_blocks` frees none first). `reset_peaks` is
torch.cuda.reset_peak_memory_stats: each peak becomes the current figure (`DeviceStats`
reset_peak_stats), so a peak read later covers only what came after it.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: the largest small-pool request
SMALL_BUFFER = 2 << 20  # kSmallBuffer: a small-pool segment
LARGE_BUFFER = 20 << 20  # kLargeBuffer: a segment for requests between 1 and 10 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_size(n: int) -> int:
    """The request as the allocator books it: a multiple of 512 B, at least 512 B."""
    return max(MIN_BLOCK, -(-n // MIN_BLOCK) * MIN_BLOCK)


def allocation_size(n: int) -> int:
    """The segment a request of n (rounded) bytes makes when no free block fits."""
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-n // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class _Block:
    seg: int
    addr: int  # offset in its segment
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class Allocator:
    """One device's caching allocator on one stream: `alloc` returns a handle for `free`."""

    limit: int | None = None  # what cudaMalloc can give the allocator (None: no limit)
    reserved: int = 0  # the segments' bytes: torch.cuda.memory_reserved
    allocated: int = 0  # the live blocks' bytes: torch.cuda.memory_allocated
    peak_allocated: int = 0
    peak_reserved: int = 0  # torch.cuda.max_memory_reserved
    top_allocated: int = 0  # the live blocks' high-water mark, never reset
    top_reserved: int = 0  # the segments' high-water mark, never reset
    releases: int = 0  # cudaMalloc failures that freed the cached segments
    _pools: dict[bool, list[tuple[int, int, int, int]]] = field(
        default_factory=lambda: {True: [], False: []}
    )
    _blocks: dict[int, _Block] = field(default_factory=dict)  # free-set key id -> block
    _live: dict[int, _Block] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)
    _segs: itertools.count = field(default_factory=itertools.count)

    def _key(self, b: _Block) -> tuple[int, int, int, int]:
        return (b.size, b.seg, b.addr, id(b))

    def _insert(self, b: _Block) -> None:
        b.free = True
        k = self._key(b)
        self._blocks[id(b)] = b
        bisect.insort(self._pools[b.small], k)

    def _remove(self, b: _Block) -> None:
        pool = self._pools[b.small]
        del pool[bisect.bisect_left(pool, self._key(b))]
        del self._blocks[id(b)]
        b.free = False

    def alloc(self, nbytes: int) -> int:
        """Allocate nbytes; the handle frees it."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1, -1, -1))
        if i < len(pool):
            b = self._blocks[pool[i][3]]
            self._remove(b)
        else:
            seg = allocation_size(size)
            if self.limit is not None and self.reserved + seg > self.limit:
                self._release()  # release_cached_blocks, then cudaMalloc again
                if self.reserved + seg > self.limit:
                    raise MemoryError(f"{seg} B over the {self.limit} B limit")
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            self.top_reserved = max(self.top_reserved, self.reserved)
            b = _Block(next(self._segs), 0, seg, small, free=False)
        rest = b.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            tail = _Block(b.seg, b.addr + size, rest, small, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = tail
            b.next, b.size = tail, size
            self._insert(tail)
        h = next(self._ids)
        self._live[h] = b
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.top_allocated = max(self.top_allocated, self.allocated)
        return h

    def reset_peaks(self) -> None:
        """torch.cuda.reset_peak_memory_stats: the peaks restart from the current figures."""
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def _release(self) -> None:
        """Free every cached segment no live block uses (release_cached_blocks)."""
        self.releases += 1
        for b in [b for b in self._blocks.values() if b.prev is None and b.next is None]:
            self._remove(b)
            self.reserved -= b.size

    def free(self, h: int) -> None:
        """Return a block to its pool, merged with its free neighbours in the segment."""
        b = self._live.pop(h)
        self.allocated -= b.size
        for nb in (b.prev, b.next):
            if nb is not None and nb.free:
                self._remove(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        self._insert(b)
