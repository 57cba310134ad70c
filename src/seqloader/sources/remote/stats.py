"""Per-process counters of remote fetching, read around each batch by the loader.

Kept apart from ``cache`` (which imports fsspec) so the batch executor can read them for every
source without importing fsspec: a batch carries the seconds its reader waited for a file that was
not cached yet and the bytes it fetched itself (``loading.execute.LoadedBatch``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FetchCounters:
    """What this process waited for and fetched (monotonic; callers take differences)."""

    wait_s: float = 0.0  # reading waited for a file to arrive (fetched here or by another process)
    fetched_bytes: int = 0  # bytes downloaded by this process's readers (whole files)
    prefetched_bytes: int = 0  # bytes downloaded ahead of the plan (seqloader.trainer.prefetch)
    fetched_files: int = 0
    metadata_reads: int = 0  # files whose metadata was read remotely (not from the local index)


COUNTERS = FetchCounters()


def snapshot() -> tuple[float, int]:
    """(wait seconds, fetched bytes) so far in this process."""
    return COUNTERS.wait_s, COUNTERS.fetched_bytes
