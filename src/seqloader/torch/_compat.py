"""Every private torch name seqloader uses, in one module, each with the reason it is needed.

torch's DataLoader has no public hooks for what seqloader does around it: receive results in a
background thread, name the batch a dead worker held, stop workers on ``close()``. Those need torch
internals; they live here and nowhere else, listed in ``PRIVATE`` (where, name, why).
``tests/test_torch_compat.py`` checks that each still exists in the installed torch and that the
regular expressions below still match the texts torch produces. Tested torch: the range declared in
``pyproject.toml`` (2.13); a torch upgrade starts by running that test.
"""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType

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
     "subclassed by ReceivingIter: torch's dispatch, order and failure checks, our receiving"),
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
     "the factory of the per-epoch iterator: ours are ReceivingIter and InProcessIter"),
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


# ---- receiving results in a background thread ----
class ReceivingDataLoaderBase(DataLoader):
    """A DataLoader whose multi-worker iterator is ``ReceivingIter`` (``InProcessIter`` with
    ``num_workers=0``); ``before_workers()`` runs before each new set of workers starts."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return InProcessIter(self)
        self.check_worker_number_rationality()
        self.before_workers()
        return ReceivingIter(self)

    def before_workers(self) -> None:
        """Work to do in this process before workers start (forked ones inherit it)."""


class ReceivingIter(_MultiProcessingDataLoaderIter):
    """torch's multi-worker iterator, but worker results are received in a background thread.

    Receiving a batch (reading the result pipe, unpickling, building the tensors) then happens
    while the trainer computes, as torch already does in its pin-memory thread when pinning; the
    trainer's ``next()`` only takes a ready batch from an in-process queue. Dispatch, ordering,
    prefetch accounting and worker-failure detection stay torch's own."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        if self._pin_memory:  # torch's pin-memory thread already receives in the background
            return
        # Named as torch's pin-memory thread, so that torch's shutdown protocol (set the event,
        # wake the thread with a (None, None) item, join, close the queue) stops it too.
        self._pin_memory_thread_done_event = threading.Event()
        self._data_queue = queue.Queue()
        thread = threading.Thread(
            target=_receive_loop,
            args=(self._worker_result_queue, self._data_queue, self._pin_memory_thread_done_event),
            name="seqloader-receive",
            daemon=True,
        )
        thread.start()
        self._pin_memory_thread = thread

    def __next__(self):
        # torch wraps every next() in a profiler range; outside a profiling session that costs
        # the trainer ~0.1 ms per batch (measured, cold caches after a step), so skip it then.
        if torch.autograd.profiler._is_profiler_enabled:
            return super().__next__()
        return _next_unprofiled(self)

    def _try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL):
        ok, data = super()._try_get_data(timeout)
        if ok and isinstance(data, _ReceiveFailed):
            dead = [str(w.pid) for w in self._workers if not w.is_alive()]
            if dead:  # torch's own wording, so callers recognise a worker death
                raise RuntimeError(death_text(dead)) from data.error
            raise data.error
        return ok, data


def _next_unprofiled(it):
    """torch's ``__next__`` without its per-call profiler range outside a profiling session
    (measured ~0.1 ms per batch on this machine with cold caches after a step)."""
    if it._sampler_iter is None:
        it._reset()
    data = it._next_data()
    it._num_yielded += 1
    return data


class InProcessIter(_SingleProcessDataLoaderIter):
    """``num_workers=0``: torch's iterator, minus the profiler range per batch."""

    def __next__(self):
        if torch.autograd.profiler._is_profiler_enabled:
            return super().__next__()
        return _next_unprofiled(self)


class _ReceiveFailed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _receive_loop(results, out: queue.Queue, done: threading.Event) -> None:
    """Move worker results into ``out`` (unpickling them: that builds the batches)."""
    torch.set_num_threads(1)
    while not done.is_set():
        try:
            item = results.get(timeout=MP_STATUS_CHECK_INTERVAL)
        except queue.Empty:
            continue
        except Exception as e:
            if done.is_set():  # the queue was closed at shutdown
                return
            # a result that cannot be received (e.g. its worker died while sending it): the
            # trainer's next() raises it
            out.put(_ReceiveFailed(e))
            if isinstance(e, (OSError, ValueError)):  # the pipe itself is broken or closed
                return
            continue
        if not done.is_set():
            out.put(item)
