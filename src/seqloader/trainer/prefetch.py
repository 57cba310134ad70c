"""The plan-driven cache: fetch exactly the files this rank reads next, ahead of time, within a
disk budget.

The plan says which sequences each rank reads in every (sub-)epoch, so it says which remote files
it needs: ``unique(file_of[share.seqs])`` in order of first use. When epoch ``e`` starts, a thread
of the trainer process fetches this rank's files of ``e`` in that order, then those of ``e + 1``;
files in neither are evicted first (unless another live loader sharing the cache directory needs
them). A worker that needs a file not cached yet fetches it itself under the same per-file lock
(or waits for the thread's download), and the batch reports the wait (``Batch.fetch_wait_s``).

The budget rule: the cache holds at most this rank's files of two consecutive sub-epochs, so
``cache_bytes`` must hold them; checked when the loader starts (over one full epoch's sub-epochs)
and again at every epoch, with an error naming the numbers and the fixes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.batches import BatchList
from seqloader.sources.remote import COUNTERS, RemoteFiles
from seqloader.sources.remote.cache import new_owner

log = logging.getLogger("seqloader")


def files_in_order(remote: RemoteFiles, share: BatchList) -> np.ndarray:
    """The files ``share`` reads (fillers included: they are read too), in order of first use."""
    if not len(share.seqs):
        return np.zeros(0, dtype=np.int64)
    files, first = np.unique(remote.file_of(share.seqs), return_index=True)
    return files[np.argsort(first, kind="stable")]


class PlanPrefetch:
    """This rank's window of cached files (see the module docstring).

    ``share_of(epoch)``: this rank's batches of ``epoch`` from its start (the plan). ``rank`` and
    ``sub_epochs`` (the ``partition_epoch``) word the budget error and bound the start-up check."""

    def __init__(
        self,
        remote: RemoteFiles,
        share_of: Callable[[int], BatchList],
        *,
        rank: int,
        sub_epochs: int,
    ) -> None:
        self.remote = remote
        self.cache = remote.cache
        self.share_of = share_of
        self.rank = rank
        self.sub_epochs = max(1, int(sub_epochs))
        self.sizes = np.array([f.size for f in remote.files], dtype=np.int64)
        self.owner = new_owner()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._checked = False
        self._reported = COUNTERS.prefetched_bytes  # prefetched bytes already in a report
        self.window: np.ndarray = np.zeros(0, dtype=np.int64)  # the files kept now

    def start(self, epoch: int, share: BatchList) -> None:
        """Epoch ``epoch`` begins with ``share`` (this rank's batches from the resume position):
        keep its files and those of ``epoch + 1``, evict the rest, fetch in order of use."""
        self.stop()
        now = files_in_order(self.remote, share)
        following = files_in_order(self.remote, self.share_of(epoch + 1))
        if not self._checked:
            self._check_start(epoch, now, following)
            self._checked = True
        else:
            self._check(epoch, now, following)
        seen = set(now.tolist())
        order = [*now.tolist(), *(f for f in following.tolist() if f not in seen)]
        self.window = np.array(order, dtype=np.int64)
        keep = [self.remote.files[f].key for f in order]
        self.cache.post_needs(self.owner, keep)
        if self.cache.cache_bytes is not None:
            self.cache.evict(keep)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._fetch, args=(order, self._stop), name="seqloader-prefetch", daemon=True
        )
        self._thread.start()

    def _fetch(self, order: list[int], stop: threading.Event) -> None:
        for f in order:
            if stop.is_set():
                return
            try:
                self.cache.ensure(self.remote.files[f], reader=False)
            except Exception as e:  # the reader fetches it again and raises the named error
                log.warning("seqloader: prefetching %s failed: %s", self.remote.files[f].url, e)

    def counts(self) -> tuple[int, int]:
        """At the epoch's end: (bytes fetched ahead since the last call, so every byte is in one
        report: the files of ``e + 1`` in ``e``'s; the cache's high-water mark in bytes)."""
        now = COUNTERS.prefetched_bytes
        fetched, self._reported = now - self._reported, now
        return fetched, self.cache.dir_high_water()

    # ---- the budget ----
    def _check_start(self, epoch: int, now: np.ndarray, following: np.ndarray) -> None:
        """At start-up: this pair and the pairs of the rest of one full epoch's sub-epochs."""
        self._check(epoch, now, following)
        files = following
        for e in range(epoch + 1, epoch + self.sub_epochs):
            after = files_in_order(self.remote, self.share_of(e + 1))
            self._check(e, files, after)
            files = after

    def _check(self, epoch: int, now: np.ndarray, following: np.ndarray) -> None:
        budget = self.cache.cache_bytes
        if budget is None:
            return
        both = np.union1d(now, following)
        need = int(self.sizes[both].sum())
        if need <= budget:
            return
        largest = int(self.sizes.max()) if len(self.sizes) else 0
        raise OptionError(
            f"cache_bytes={budget} is too small for rank {self.rank}: its files of sub-epochs "
            f"{epoch} and {epoch + 1} ({len(now)} files, {int(self.sizes[now].sum())} bytes; "
            f"{len(following)} files, {int(self.sizes[following].sum())} bytes) take {need} "
            f"bytes together ({len(both)} files, the largest {largest} bytes), and the cache "
            "holds one sub-epoch's files while it fetches the next. Fix: cache_bytes >= "
            f"{need}, or more sub-epochs (partition_epoch, now {self.sub_epochs}) so each reads "
            "fewer files, or distribution='files' so each rank reads only its own files."
        )

    def wait(self) -> None:
        """Until this epoch's look-ahead is done: every file of the window fetched (or failed and
        left to its reader). An event, not a time: for a job that ends right after its last
        epoch and wants the next one's files in the cache (and for tests that count fetches)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def close(self) -> None:
        """The loader closes: stop fetching and withdraw this loader's needs note."""
        self.stop()
        self.cache.withdraw_needs()

    def stop(self) -> None:
        """Stop fetching ahead (a download in progress finishes: never a half file)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
