"""Every private torch name seqloader uses, in one module, each with the reason it is needed.

torch's DataLoader has no public hooks for what seqloader does around it: receive results in a
background thread, name the batch a dead worker held, stop workers on ``close()``. Those need torch
internals; they live here and nowhere else, listed in ``PRIVATE`` (where, name, why), and the rest
of seqloader reaches them only through this module's accessors (functions, and the hooks of
``IteratorFactory`` / ``HookedIter`` / ``InProcessIter``, which have public names).
``tests/test_torch_compat.py`` checks that each still exists in the installed torch, that the
regular expressions below still match the texts torch produces, and that no other module names a
private of the list. Tested torch: the range declared in ``pyproject.toml`` (2.13); a torch upgrade
starts by running that test.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL
from torch.utils.data._utils.signal_handling import _remove_worker_pids
from torch.utils.data.dataloader import (
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

#: (where, name, why) of every private torch name used in seqloader. "DataLoader" and "iterator"
#: mean an instance (attributes set in ``__init__``); the others are modules.
PRIVATE: tuple[tuple[str, str, str], ...] = (
    ("torch.utils.data.dataloader", "_MultiProcessingDataLoaderIter",
     "subclassed by HookedIter: torch's dispatch, order and failure checks, our receiving"),
    ("torch.utils.data.dataloader", "_SingleProcessDataLoaderIter",
     "subclassed by InProcessIter (num_workers=0): next() without the profiler range"),
    ("torch.utils.data._utils", "MP_STATUS_CHECK_INTERVAL",
     "the receive loop polls as often as torch's own status check"),
    ("torch.utils.data._utils.signal_handling", "_remove_worker_pids",
     "a death reported once must not be raised again by the next SIGCHLD of any child"),
    ("torch.autograd.profiler", "_is_profiler_enabled",
     "skip torch's per-batch profiler range outside a profiling session (~0.1 ms per batch)"),
    ("torch.UntypedStorage", "_new_shared",
     "slots are shared memory from the start, through torch's fd sharing (no /dev/shm names)"),
    ("torch.utils.data.DataLoader", "_get_iterator",
     "the factory of the per-epoch iterator (IteratorFactory.make_iterator)"),
    ("DataLoader", "_iterator", "the persistent iterator: its workers, its shutdown on close()"),
    ("iterator", "_workers", "worker processes: pids for WorkerError, liveness"),
    ("iterator", "_worker_pids_set", "whether torch's SIGCHLD check still watches the workers"),
    ("iterator", "_shutdown", "a shut-down iterator's dead workers are no failure"),
    ("iterator", "_shutdown_workers", "close() stops workers now, not at garbage collection"),
    ("iterator", "_pin_memory", "with pinning, torch's own thread already receives"),
    ("iterator", "_pin_memory_thread",
     "our receiving thread takes this name so torch's shutdown stops and joins it"),
    ("iterator", "_pin_memory_thread_done_event", "the stop event torch's shutdown sets"),
    ("iterator", "_worker_result_queue", "what the receiving thread reads"),
    ("iterator", "_data_queue", "what torch's next() reads: the receiving thread fills it"),
    ("iterator", "_try_get_data", "a result that could not be received surfaces here"),
    ("iterator", "_next_data", "next() without the profiler range"),
    ("iterator", "_sampler_iter", "next() without the profiler range: torch's reset check"),
    ("iterator", "_reset", "next() without the profiler range: torch's reset"),
    ("iterator", "_num_yielded", "next() without the profiler range: torch's count"),
    ("iterator", "_send_idx",
     "how many items torch has sent to workers: which batches a dead worker held"),
    ("iterator", "_profile_name", "the profiler range our next() opens while profiling"),
)  # fmt: skip

# torch's worker-death texts: from its SIGCHLD handler "DataLoader worker (pid 12) is killed by
# signal: Killed." and from its status check "DataLoader worker (pid(s) 12, 13) exited unexpectedly"
DEATH_RE = re.compile(r"DataLoader worker \(pids?\(?s?\)? ([\d, ]+)\)\s*(.*)", re.S)
# a worker's own exception, re-raised by torch: "Caught ValueError in DataLoader worker process 0."
RERAISE_RE = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)")


def parse_death(text: str) -> tuple[list[int], str] | None:
    """(pids, what happened) from torch's worker-death text, else None."""
    m = DEATH_RE.search(text)
    if not m:
        return None
    return [int(p) for p in m[1].replace(" ", "").split(",") if p], m[2].strip()


def parse_reraise(text: str) -> tuple[int, str] | None:
    """(worker id, exception type name) from torch's re-raised worker exception, else None."""
    m = RERAISE_RE.match(text)
    return (int(m[2]), m[1]) if m else None


def death_text(pids: Sequence[int | str]) -> str:
    """torch's own wording for dead workers, so ``parse_death`` (and users) recognise ours."""
    return f"DataLoader worker (pid(s) {', '.join(str(p) for p in pids)}) exited unexpectedly"


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """``nbytes`` of shared memory, allocated there (not copied there, as ``share_memory_()``
    would), through torch's file-descriptor sharing: a worker's slot or fallback tensor."""
    return torch.UntypedStorage._new_shared(nbytes)


# ---- the DataLoader's iterator and its workers ----
def current_iterator(dataloader: DataLoader) -> object | None:
    """The DataLoader's persistent iterator (None before the first ``iter`` or after a close)."""
    return getattr(dataloader, "_iterator", None)


def worker_processes(iterator: object | None) -> list:
    """The iterator's worker processes (empty with ``num_workers=0``)."""
    return list(getattr(iterator, "_workers", None) or ())


def sent_items(iterator: object | None) -> int | None:
    """How many sampler items torch's iterator has sent to its workers (None if unknown)."""
    sent = getattr(iterator, "_send_idx", None)
    return sent if isinstance(sent, int) else None


def workers_alive(dataloader: DataLoader) -> bool:
    """False when the DataLoader's (persistent) iterator has a dead worker: reusing it would wait
    for that worker (torch notices only after its 5 s status check), so the loader starts fresh."""
    it = current_iterator(dataloader)
    workers = worker_processes(it)
    if not workers or getattr(it, "_shutdown", False):
        return True
    return all(w.is_alive() for w in workers)


def shutdown_workers(dataloader: DataLoader) -> None:
    """Stop the DataLoader's workers now and drop its iterator (torch does it only when the
    iterator is garbage-collected)."""
    it = current_iterator(dataloader)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    dataloader._iterator = None


def unregister_worker_pids(iterator: object | None) -> None:
    """Take the iterator's workers off torch's SIGCHLD check (what its shutdown does first)."""
    if iterator is not None and getattr(iterator, "_worker_pids_set", False):
        with contextlib.suppress(Exception):
            _remove_worker_pids(id(iterator))
            iterator._worker_pids_set = False  # type: ignore[attr-defined]


_sigchld_wrapped = False


def wrap_sigchld(translate: Callable[[RuntimeError], BaseException | None]) -> None:
    """Wrap whatever SIGCHLD handler is installed (torch's, installed by the first multi-worker
    iterator) so the ``RuntimeError`` it raises for a dead worker becomes ``translate(error)``
    (unless that is None). Main thread only, once per process."""
    global _sigchld_wrapped
    if _sigchld_wrapped or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGCHLD)
    if not callable(previous):
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            previous(signum, frame)
        except RuntimeError as e:
            err = translate(e)
            if err is None:
                raise
            raise err from e

    signal.signal(signal.SIGCHLD, handler)
    _sigchld_wrapped = True


# ---- torch's iterators, their private steps behind public names ----
#: seconds torch's status check waits for a result before it checks its workers
STATUS_CHECK_INTERVAL: float = MP_STATUS_CHECK_INTERVAL


#: ``profiling()``: whether a torch profiling session is on (torch opens a profiler range per
#: ``next()``). A C-level call (no Python frame): it runs in the training thread per batch.
profiling: Callable[[], bool] = functools.partial(
    getattr, torch.autograd.profiler, "_is_profiler_enabled"
)


def next_unprofiled(it: Any) -> Any:
    """torch's ``__next__`` without its per-call profiler range outside a profiling session
    (measured ~0.1 ms per batch on this machine with cold caches after a step)."""
    if it._sampler_iter is None:
        it._reset()
    data = it._next_data()
    it._num_yielded += 1
    return data


class IteratorFactory(DataLoader):
    """A DataLoader whose per-epoch iterator comes from ``make_iterator()`` (torch's own factory,
    ``_get_iterator``, is private)."""

    def _get_iterator(self):
        return self.make_iterator()

    def make_iterator(self) -> Any:
        """The iterator of a new ``iter(dataloader)`` (default: torch's)."""
        return super()._get_iterator()


class InProcessIter(_SingleProcessDataLoaderIter):
    """``num_workers=0``: torch's iterator, minus the profiler range per batch."""

    def __next__(self):
        if profiling():
            return super().__next__()
        return next_unprofiled(self)


class HookedIter(_MultiProcessingDataLoaderIter):
    """torch's multi-worker iterator, with the private steps seqloader builds on behind public
    names: hooks it calls (``before_reset``/``after_reset`` around a new epoch's reset,
    ``received`` on each result torch takes from its data queue, ``before_shutdown``), and
    accessors of its state (``next_data``, ``receive_in_thread``, ...)."""

    # ---- hooks (defaults: torch's behaviour) ----
    def reuse_reset(self, loader: DataLoader) -> bool:
        """At a new epoch's ``iter()`` (not the first): True when the iterator was already reset
        for what ``loader`` asks now (``plain_reset`` ahead, in a background thread), so torch's
        reset is skipped and the batches already sent stay."""
        return False

    def before_reset(self) -> None:
        """Before torch resets the iterator for a new epoch (also once in ``__init__``)."""

    def after_reset(self) -> None:
        """After torch reset the iterator (and sent the first indices)."""

    def received(self, data: Any) -> tuple[bool, Any]:
        """A result torch took from its data queue -> (received, data) as torch's
        ``_try_get_data`` returns them; may raise instead."""
        return True, data

    def before_shutdown(self) -> None:
        """Before torch shuts the workers down (``close()``, garbage collection, an epoch's end
        without persistent workers)."""

    # ---- torch's private steps, overridden only to call the hooks ----
    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
        if not first_iter and self.reuse_reset(loader):
            return
        self.before_reset()
        super()._reset(loader, first_iter)
        self.after_reset()

    def _try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL):
        ok, data = super()._try_get_data(timeout)
        return self.received(data) if ok else (ok, data)

    def _shutdown_workers(self) -> None:
        self.before_shutdown()
        super()._shutdown_workers()

    # ---- accessors ----
    @property
    def pins_memory(self) -> bool:
        """Whether torch's pin-memory thread receives the results (``pin_memory=True``)."""
        return bool(self._pin_memory)

    @property
    def profile_name(self) -> str:
        """The name of the profiler range torch opens per ``next()``."""
        return self._profile_name

    def shutdown_workers(self) -> None:
        """torch's shutdown of this iterator's workers (once; later calls do nothing)."""
        self._shutdown_workers()

    def plain_reset(self, loader: DataLoader) -> None:
        """torch's reset for a new epoch on persistent workers, without the hooks: a round trip
        to each worker (results still in flight are received and dropped), then the first
        ``prefetch_factor x num_workers`` items of the sampler's new iteration are sent."""
        _MultiProcessingDataLoaderIter._reset(self, loader, False)

    def next_data(self) -> Any:
        """torch's ``next()`` logic: send the next index, restore order, check the workers."""
        return self._next_data()

    def next_unprofiled(self) -> Any:
        """torch's ``__next__`` without the profiler range."""
        return next_unprofiled(self)

    def put_result(self, item: object) -> None:
        """Put ``item`` into the queue torch's ``next()`` reads (``received`` sees it)."""
        self._data_queue.put(item)

    def receive_in_thread(
        self, loop: Callable[[Any, queue.Queue, threading.Event, int], None], name: str
    ) -> None:
        """Run ``loop(results, out, done, wake)`` in a thread that takes the place of torch's
        pin-memory thread: it reads the workers' result queue into the queue torch's ``next()``
        reads, and stops when torch's shutdown sets ``done`` and wakes it (``WakeOnPut``: through
        the pipe whose read end is ``wake``, not through the workers' queue), joins it and closes
        the queue."""
        self._pin_memory_thread_done_event = done = threading.Event()
        self._data_queue = out = queue.Queue[Any]()
        results = self._worker_result_queue
        wake, wake_write = os.pipe()
        self._worker_result_queue = WakeOnPut(results, wake_write)  # type: ignore[assignment]
        thread = threading.Thread(
            target=loop, args=(results, out, done, wake), name=name, daemon=True
        )
        thread.start()
        self._pin_memory_thread = thread


class WakeOnPut:
    """The workers' result queue as torch's shutdown sees it once a receiving thread reads it:
    the ``(None, None)`` torch puts to wake that thread goes down a pipe of the thread's own.

    Put into the queue itself, the item would wait in this process's feeder thread for the
    queue's write lock, which the workers share: a worker that exits or is killed while sending a
    result (torch's workers do not wait for their sends at shutdown; a worker still busy after the
    join timeout is killed) leaves that lock taken for good, and the feeder thread waits forever.

    >>> import multiprocessing as mp
    >>> r, w = os.pipe()
    >>> q = WakeOnPut(mp.get_context("fork").Queue(), w)
    >>> q.put((None, None)); os.read(r, 1)
    b'\\x00'
    >>> q.close(); os.close(r)
    """

    def __init__(self, results: Any, wake_write: int) -> None:
        self._results, self._wake_write = results, wake_write

    def put(self, item: object, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(OSError):  # the thread has stopped and closed its end
            os.write(self._wake_write, b"\0")

    def cancel_join_thread(self) -> None:
        self._results.cancel_join_thread()

    def close(self) -> None:
        self._results.close()
        with contextlib.suppress(OSError):
            os.close(self._wake_write)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._results, name)
