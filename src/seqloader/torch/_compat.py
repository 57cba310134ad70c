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
import weakref
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


# ---- receiving results in a background thread ----
class ReceivingDataLoaderBase(DataLoader):
    """A DataLoader whose multi-worker iterator is ``ReceivingIter`` (``InProcessIter`` with
    ``num_workers=0``); ``before_workers()`` runs before each new set of workers starts."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return InProcessIter(self)
        # no check_worker_number_rationality() here: DataLoader.__init__ ran it (a second call
        # from this line would print torch's worker-count warning a second time)
        self.before_workers()
        return ReceivingIter(self)

    def before_workers(self) -> None:
        """Work to do in this process before workers start (forked ones inherit it)."""


# Batches the dispatch thread takes out of torch's iterator before the loop asks for them; with
# torch's own prefetch (prefetch_factor x workers tasks outstanding) this many more are in flight.
AHEAD = 1
# Whether torch's next() logic runs in the dispatch thread (the benchmarks switch it off to
# measure what it brings; the library has no option for it).
DISPATCH_THREAD = True


class ReceivingIter(_MultiProcessingDataLoaderIter):
    """torch's multi-worker iterator, driven from background threads.

    - A *receiving* thread reads worker results (the result pipe, unpickling, building the
      tensors), as torch already does in its pin-memory thread when pinning.
    - A *dispatch* thread runs torch's own ``next()`` logic (``_next_data``: send the next index,
      restore order, count outstanding tasks, check workers) ``AHEAD`` batches ahead of the loop.

    The training thread's ``next()`` then only takes a ready batch from an in-process queue: no
    index to send, no torch bookkeeping in the loop's time (cold after each step, it cost ~0.3 ms
    per batch, ~3% of a 10 ms step). torch's iterator state is touched by one thread at a time:
    the dispatch thread during an epoch, the training thread at an epoch's start (``_reset``,
    after stopping the previous epoch's dispatch thread) and at shutdown (likewise). Dispatch,
    ordering, prefetch accounting and worker-failure detection stay torch's own; an exception
    there reaches the loop at the batch it concerns."""

    def __init__(self, loader: DataLoader) -> None:
        self._dispatch: _Dispatch | None = None
        super().__init__(loader)  # starts the workers, sends the first indices (_reset)
        if not self._pin_memory:  # with pinning, torch's pin-memory thread already receives
            # Named as torch's pin-memory thread, so that torch's shutdown protocol (set the
            # event, wake the thread with a (None, None) item, join, close the queue) stops it.
            self._pin_memory_thread_done_event = threading.Event()
            self._data_queue = queue.Queue()
            thread = threading.Thread(
                target=_receive_loop,
                args=(
                    self._worker_result_queue,
                    self._data_queue,
                    self._pin_memory_thread_done_event,
                ),
                name="seqloader-receive",
                daemon=True,
            )
            thread.start()
            self._pin_memory_thread = thread
        if DISPATCH_THREAD:
            self._dispatch = _Dispatch(self)

    @property
    def ahead(self) -> int:
        """Batches taken from torch before the loop asked (beyond torch's prefetch)."""
        return AHEAD

    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
        # a new epoch on persistent workers: the last epoch's dispatch thread (finished, or
        # abandoned mid-epoch) stops before torch resets its state in this thread
        if self._dispatch is not None:
            self._dispatch.stop()
        super()._reset(loader, first_iter)
        if self._dispatch is not None:
            self._dispatch = _Dispatch(self)

    def __next__(self):
        dispatch = self._dispatch
        if dispatch is None:  # without the dispatch thread: torch's next() in this thread
            if torch.autograd.profiler._is_profiler_enabled:
                return super().__next__()
            return _next_unprofiled(self)
        # torch wraps every next() in a profiler range; outside a profiling session that costs
        # the trainer ~0.1 ms per batch (measured, cold caches after a step), so skip it then.
        if torch.autograd.profiler._is_profiler_enabled:
            with torch.autograd.profiler.record_function(self._profile_name):
                return dispatch.take(self)
        return dispatch.take(self)

    def _try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL):
        ok, data = super()._try_get_data(timeout)
        if ok and data is _WAKE:  # put by _Dispatch.stop
            dispatch = self._dispatch
            if dispatch is not None and dispatch.stopping_here():
                raise _Stopped
            return False, None  # to anyone else: as if nothing had arrived yet
        if ok and isinstance(data, _ReceiveFailed):
            dead = [str(w.pid) for w in self._workers if not w.is_alive()]
            if dead:  # torch's own wording, so callers recognise a worker death
                raise RuntimeError(death_text(dead)) from data.error
            raise data.error
        return ok, data

    def _shutdown_workers(self) -> None:
        dispatch = getattr(self, "_dispatch", None)  # absent if __init__ failed early
        if dispatch is not None:
            dispatch.stop()
        super()._shutdown_workers()


_WAKE = object()  # wakes a dispatch thread waiting for a result, so that it can stop
_END = object()  # the epoch's last batch was taken


class _Stopped(Exception):
    """Raised in the dispatch thread by ``_try_get_data`` when it is asked to stop."""


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Dispatch:
    """One epoch's dispatch thread and the queue of batches it took from torch."""

    def __init__(self, it: ReceivingIter) -> None:
        self.ready: queue.SimpleQueue = queue.SimpleQueue()
        self.room = threading.Semaphore(AHEAD)  # batches it may take before the loop does
        self.stop_event = threading.Event()
        self.done = False  # the loop took the end (or an error): nothing more will come
        # a weak reference: a thread waiting for room must not keep an abandoned iterator (and
        # its workers) alive; torch shuts workers down when the iterator is collected
        self.ref = weakref.ref(it)
        self.thread = threading.Thread(
            target=_dispatch_loop,
            args=(self.ref, self.ready, self.room, self.stop_event),
            name="seqloader-dispatch",
            daemon=True,
        )
        self.thread.start()

    def take(self, it: ReceivingIter):
        """The next batch (training thread): a few attribute reads and one queue get."""
        if self.done:
            raise StopIteration
        item = self.ready.get()
        if item is _END:
            self.done = True
            raise StopIteration
        if isinstance(item, _Raised):
            self.done = True
            raise item.error
        self.room.release()
        it._num_yielded += 1
        return item

    def stopping_here(self) -> bool:
        return self.stop_event.is_set() and threading.current_thread() is self.thread

    def stop(self) -> None:
        """Stop the thread (it is done, or waits for room, or for a worker result) and wait for
        it, so that torch's state is this thread's again."""
        if not self.thread.is_alive():
            return
        self.stop_event.set()
        self.room.release()
        it = self.ref()
        if it is not None:
            it._data_queue.put(_WAKE)
            del it
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10 * MP_STATUS_CHECK_INTERVAL)


def _dispatch_loop(
    ref: weakref.ref, ready: queue.SimpleQueue, room: threading.Semaphore, stop: threading.Event
) -> None:
    """Take batches from torch's iterator (``_next_data``: dispatch, order, failure checks) while
    there is room; the end or an exception goes to ``ready`` as well, in order."""
    torch.set_num_threads(1)
    while True:
        room.acquire()  # holds no reference to the iterator while it waits
        if stop.is_set():
            return
        it = ref()
        if it is None:
            return
        try:
            item = it._next_data()
        except StopIteration:
            item = _END
        except _Stopped:
            return
        except BaseException as e:
            item = _Raised(e)
        del it
        last = item is _END or isinstance(item, _Raised)
        if stop.is_set() and not last:  # (torch's own shutdown at a non-persistent epoch's end
            return  # stops this thread too, after the end is known: that still goes out)
        ready.put(item)
        if last:
            return


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
