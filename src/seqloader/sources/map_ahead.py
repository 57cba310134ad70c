"""Mapping a contiguous dataset's cached pages into the process in a background thread, in a few
large calls, before the batches touch them (``hdf_read.OpenFile``).

A first epoch over a memory-mapped file pays for the mapping itself: each first touch of a part
of the map is a minor fault that maps it, ~35 faults and ~150 µs of a ~700 µs batch of the
reference corpus (32 sequences, 3.3 MB) on the 2-core test machine, batch after batch until the
whole file has been read once; a second epoch pays none. ``madvise(MADV_POPULATE_READ)`` (Linux
5.14+) maps the same pages in a few calls: less CPU in all (13-20 ms for the 520 MB reference
file, against ~23 ms of faults over its epoch), in another thread and without the interpreter
lock (a ctypes call). Reading the rows with ``preadv`` instead (no mapping) and populating each
row's pages just before its copy were measured too, and neither was cheaper than the faults.

Only pages already in the page cache are mapped (``mincore`` per span first): populating reads
missing pages from disk, which a process that reads only a part of a file must not pay for the
rest. Only a process that reads its files whole does it (not a DataLoader worker, see
``screen_verdicts.shares_files``), and at most ``MAX_BYTES`` at a time per process (page tables:
~2 MB per GB mapped).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np

MADV_POPULATE_READ = 22  # linux/mman.h, Linux 5.14+; older kernels answer EINVAL (then: faults)
SPAN = 8 << 20  # bytes per call: the process's memory map is locked for reading during one
MAX_BYTES = 8 << 30  # mapped ahead at a time per process (files open at once)

_PAGE = mmap.PAGESIZE
_lock = threading.RLock()  # re-entrant: a collection may give a budget back in any thread
_left = MAX_BYTES


def _libc() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """(madvise, mincore) of the C library, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise, mincore = libc.madvise, libc.mincore
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    mincore.restype = ctypes.c_int
    return madvise, mincore


_CALLS = _libc()


MIN_RUN = 16  # pages: a shorter run of cached pages is left to one fault (it maps ~16 at once)


def cached_runs(cached: np.ndarray) -> list[tuple[int, int]]:
    """The runs ``[a, b)`` of at least ``MIN_RUN`` nonzero entries of ``cached`` (one per page,
    as ``mincore`` fills it).

    >>> cached_runs(np.array([1] * 20 + [0] + [1] * 5 + [0] + [1] * 16, dtype=np.uint8))
    [(0, 20), (27, 43)]
    """
    if cached.all():
        return [(0, len(cached))] if len(cached) >= MIN_RUN else []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], cached != 0, [0])).astype(np.int8)))
    return [(a, b) for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist()) if b - a >= MIN_RUN]


class MapAhead:
    """A thread mapping ``spans`` ((address, bytes) inside the live map ``owner``, which it
    keeps alive) span by span, ``SPAN`` bytes per call, each only where every page is cached.
    ``stop()`` returns once the thread has ended (before the map may be closed)."""

    def __init__(self, owner: object, spans: Sequence[tuple[int, int]], nbytes: int) -> None:
        self.nbytes = nbytes  # taken from the process's budget, given back by ``stop``
        self.mapped = 0  # bytes mapped so far
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(owner, list(spans)), name="seqloader-map-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, owner: object, spans: list[tuple[int, int]]) -> None:
        assert _CALLS is not None
        madvise, mincore = _CALLS
        for start, nbytes in spans:
            at, end = start - start % _PAGE, start + nbytes
            while at < end and not self._stop.is_set():
                n = min(SPAN, end - at)
                cached = np.empty(-(-n // _PAGE), dtype=np.uint8)  # one byte per page
                if mincore(at, n, cached.ctypes.data) != 0:
                    return
                # the runs of pages in memory are mapped; the rest is left to the faults (no disk
                # reads here); an error means an older kernel, or a file that shrank: faults too
                for a, b in cached_runs(cached & 1):
                    if madvise(at + a * _PAGE, (b - a) * _PAGE, MADV_POPULATE_READ) != 0:
                        return
                    self.mapped += (b - a) * _PAGE
                at += n
        del owner

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the thread has ended (within ``timeout`` seconds)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """End the thread (after at most the call under way) and give back its budget."""
        self._stop.set()
        self._thread.join()
        self.release()

    def release(self) -> None:
        """Give back the budget (once) and ask the thread to end, not waiting for it: what a map
        collected unclosed does (its pages are unmapped with it; the thread holds it until it
        ends)."""
        global _left
        self._stop.set()
        with _lock:
            _left += self.nbytes
            self.nbytes = 0


def map_ahead(owner: mmap.mmap, spans: Sequence[tuple[int, int]]) -> MapAhead | None:
    """Map ``spans`` of ``owner`` ahead in a thread (``MapAhead``); None where this cannot be
    done (off Linux) or the process's ``MAX_BYTES`` are taken. The budget comes back at
    ``stop`` or when ``owner`` is collected, whichever comes first."""
    global _left
    nbytes = sum(n for _, n in spans)
    if _CALLS is None or nbytes <= 0:
        return None
    with _lock:
        if nbytes > _left:
            return None
        _left -= nbytes
    ahead = MapAhead(owner, spans, nbytes)
    # a map collected without ``stop`` (its file dropped unclosed) gives the budget back with it
    weakref.finalize(owner, ahead.release).atexit = False
    return ahead
