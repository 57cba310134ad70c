"""torch's DataLoader iterator, driven from background threads: results are received and batches
dispatched off the training thread.

- A *receiving* thread reads worker results (the result pipe, unpickling, building the tensors),
  as torch already does in its pin-memory thread when pinning.
- A *dispatch* thread runs torch's own ``next()`` logic (send the next index, restore order, count
  outstanding tasks, check workers) ``AHEAD`` batches ahead of the loop.

The training thread's ``next()`` then only takes a ready batch from an in-process queue: no index
to send, no torch bookkeeping in the loop's time (cold after each step, it cost ~0.3 ms per batch,
~3% of a 10 ms step). torch's state is reached only through ``_compat``'s accessors.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import wait as wait_for
from typing import Any

import torch
from torch.utils.data import DataLoader

from seqloader.errors import SeqLoaderError
from seqloader.torch._compat import (
    STATUS_CHECK_INTERVAL,
    HookedIter,
    InProcessIter,
    IteratorFactory,
    current_iterator,
    death_text,
    profiling,
    shutdown_workers,
    worker_processes,
)
from seqloader.torch.dataset import PlanSampler, RunPlan
from seqloader.trainer.release import EVERY, signal

# Batches the dispatch thread takes out of torch's iterator before the loop asks for them; with
# torch's own prefetch (prefetch_factor x workers tasks outstanding) this many more are in flight.
# The loop signals room for EVERY batches at once, every EVERY-th batch (one thread wake per
# EVERY batches, ``seqloader.trainer.release``), so the thread may be that many ahead.
AHEAD = EVERY
# Whether torch's next() logic runs in the dispatch thread (the benchmarks switch it off to
# measure what it brings; the library has no option for it).
DISPATCH_THREAD = True


class ReceivingDataLoaderBase(IteratorFactory):
    """A DataLoader whose multi-worker iterator is ``ReceivingIter`` (``InProcessIter`` with
    ``num_workers=0``); ``before_workers()`` runs before each new set of workers starts."""

    #: the last multi-worker iterator made (a weak reference): torch keeps only a persistent
    #: one (``_iterator``), so without this ``shutdown()`` could not reach an epoch's workers
    #: while its generator lives on (e.g. in a traceback), and they would outlive ``close()``
    _latest: weakref.ref | None = None

    def make_iterator(self) -> Any:
        if self.num_workers == 0:
            return InProcessIter(self)
        # no check_worker_number_rationality() here: DataLoader.__init__ ran it (a second call
        # from this line would print torch's worker-count warning a second time)
        self.before_workers()
        it = ReceivingIter(self)
        self._latest = weakref.ref(it)
        return it

    def shutdown(self) -> None:
        """Stop the workers now: the persistent iterator's and those of the last epoch started
        without persistent workers (torch stops these only at the epoch's end or when the
        iterator is collected)."""
        latest = self._latest() if self._latest is not None else None
        self._latest = None
        workers = worker_processes(current_iterator(self)) + worker_processes(latest)
        shutdown_workers(self)
        if latest is not None:
            latest.shutdown_workers()
        # torch sends SIGTERM to a worker still alive after its join timeout (a busy machine)
        # and returns: wait until each has exited, so close() leaves no process behind
        for w in workers:
            w.join(STATUS_CHECK_INTERVAL)
            if w.is_alive():
                w.kill()
                w.join()

    def before_workers(self) -> None:
        """Work to do in this process before workers start (forked ones inherit it)."""


class ReceivingIter(HookedIter):
    """torch's multi-worker iterator with a receiving and a dispatch thread (module docstring).

    torch's iterator state is touched by one thread at a time: the dispatch thread during an
    epoch and at its end (the next epoch's reset ahead), the training thread at an epoch's start
    (reset, after stopping the dispatch thread, unless the reset made ahead is this epoch's) and at
    shutdown (likewise). Dispatch, ordering, prefetch accounting and worker-failure detection stay
    torch's own; an exception there reaches the loop at the batch it concerns."""

    def __init__(self, loader: DataLoader) -> None:
        self._dispatch: _Dispatch | None = None
        # the DataLoader, for the next epoch's reset made ahead (weak: the DataLoader owns us)
        self._loader = weakref.ref(loader)
        super().__init__(loader)  # starts the workers, sends the first indices (reset)
        if not self.pins_memory:  # with pinning, torch's pin-memory thread already receives
            self.receive_in_thread(_receive_loop, "seqloader-receive")
        if DISPATCH_THREAD:
            self._dispatch = _Dispatch(self, self._current())

    def _current(self) -> RunPlan | None:
        """The run torch was just reset for (None: not a ``PlanSampler``'s)."""
        loader = self._loader()
        sampler = None if loader is None else loader.sampler
        return sampler.run if isinstance(sampler, PlanSampler) else None

    def settle(self, use: bool = True) -> None:
        """Once the loop has taken the current epoch's last batch: if the run it asks next is the
        one prepared ahead (``use``), wait until the next epoch's first batches are prepared, or
        known not to be; else stop the preparation now (``_Dispatch.settle``)."""
        dispatch = self._dispatch
        if dispatch is not None:
            dispatch.settle(use)

    @property
    def ahead(self) -> int:
        """Batches taken from torch before the loop asked (beyond torch's prefetch)."""
        return AHEAD

    @property
    def reused_resets(self) -> int:
        """How many epochs started on a reset made ahead (their first batches built before the
        loop asked for them)."""
        return self._reused

    _reused = 0

    def reuse_reset(self, loader: DataLoader) -> bool:
        dispatch = self._dispatch
        sampler = loader.sampler
        if dispatch is None or not isinstance(sampler, PlanSampler):
            return False
        if not dispatch.adopt(self, sampler.run):
            return False
        self._reused += 1
        return True

    def before_reset(self) -> None:
        # a new epoch on persistent workers: the last epoch's dispatch thread (finished, or
        # abandoned mid-epoch, or with the next epoch's batches prepared for another run than
        # the one asked now) stops before torch resets its state in this thread; torch's reset
        # then receives and drops what was in flight
        if self._dispatch is not None:
            self._dispatch.stop()

    def after_reset(self) -> None:
        if self._dispatch is not None:
            self._dispatch = _Dispatch(self, self._current())

    def run_ahead(self, ended: int) -> RunPlan | None:
        """The run to prepare once epoch ``ended``'s run is over (dispatch thread): the
        sampler's guess of the next one, with persistent workers only (others stop at the
        epoch's end)."""
        loader = self._loader()
        if loader is None or not loader.persistent_workers:
            return None
        sampler = loader.sampler
        return sampler.next_run(ended) if isinstance(sampler, PlanSampler) else None

    def reset_ahead(self, run: RunPlan) -> bool:
        """torch's reset for ``run`` now (dispatch thread): its first items go to the workers."""
        loader = self._loader()
        if loader is None or not isinstance(loader.sampler, PlanSampler):
            return False
        with loader.sampler.iterating(run):
            self.plain_reset(loader)
        return True

    def __next__(self):
        dispatch = self._dispatch
        if dispatch is None:  # without the dispatch thread: torch's next() in this thread
            if profiling():
                return super().__next__()
            return self.next_unprofiled()
        return dispatch.run.take()

    def taker(self) -> Callable[[], Any]:
        """This epoch's ``next()`` for the run loop (training thread, after ``iter()``): the
        current run's ``take`` itself, one Python call per batch instead of three (each
        costs the loop µs with the caches cold after a step). It stays with this epoch's run: a
        loop that goes on after the next epoch's ``iter()`` is told that its batches stopped
        coming, instead of taking the new epoch's."""
        dispatch = self._dispatch
        return self.__next__ if dispatch is None else dispatch.run.take

    def received(self, data: Any) -> tuple[bool, Any]:
        if data is _WAKE:  # put by _Dispatch.stop
            dispatch = self._dispatch
            if dispatch is not None and dispatch.stopping_here():
                raise _Stopped
            return False, None  # to anyone else: as if nothing had arrived yet
        if isinstance(data, _Failed):  # the receiving thread could not receive a result
            dead = [str(w.pid) for w in worker_processes(self) if not w.is_alive()]
            if dead:  # torch's own wording, so callers recognise a worker death
                raise RuntimeError(death_text(dead)) from data.error
            raise data.error
        return True, data

    def before_shutdown(self) -> None:
        dispatch = getattr(self, "_dispatch", None)  # absent if __init__ failed early
        if dispatch is not None:
            dispatch.stop()


_STOPPED_TEXT = (
    "seqloader: this epoch's batches stopped coming: the loader was closed, or its workers "
    "started another epoch; to go on after the batches received, load the loader's own "
    "state (loader.load_state_dict(loader.state_dict())) and ask for the epoch again"
)
_WAKE = object()  # wakes a dispatch thread waiting for a result, so that it can stop
_END = object()  # the epoch's last batch was taken


class _Stopped(Exception):
    """Raised in the dispatch thread by ``received`` when it is asked to stop."""


class _Failed:
    """An exception passed from a background thread to the training thread, in order."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Run:
    """One epoch's batches as the dispatch thread takes them from torch, and the loop's side.
    ``plan``: which run it is, for a run prepared ahead (None: the one torch was reset for)."""

    def __init__(
        self, epoch: int, plan: RunPlan | None, length: int | None, profile_name: str
    ) -> None:
        self.epoch = epoch
        self.profile_name = profile_name  # torch's profiler range per next(), when profiling
        self.plan = plan
        self.length = length  # items of the sampler's iteration (None: unknown)
        self.ended = threading.Event()  # the dispatch thread is past this run's end
        self.ready: queue.SimpleQueue = queue.SimpleQueue()
        self.room = threading.Semaphore(AHEAD)  # batches it may take before the loop does
        self.room_signal = signal(partial(self.room.release, EVERY))
        self.done = False  # the loop took the end (or an error): nothing more will come
        self.taken = 0  # batches the loop took

    def take(self, in_range: bool = False) -> Any:
        """The next batch (training thread): a few attribute reads and one queue get. torch
        wraps every next() in a profiler range; outside a profiling session that cost the
        trainer ~0.1 ms per batch (measured, cold caches after a step), so only then."""
        if not in_range and profiling():
            with torch.autograd.profiler.record_function(self.profile_name):
                return self.take(True)
        if self.done:
            raise StopIteration
        item = self.ready.get()
        if item is _END:
            self.done = True
            raise StopIteration
        if isinstance(item, _Failed):
            self.done = True
            raise item.error
        self.taken = taken = self.taken + 1
        if not taken % EVERY or taken == self.length:
            # room for EVERY more (and the end): signalled from the release thread, which this
            # wakes, and to which the run loop passes the batches it is done with in the same
            # request (a semaphore release here cost the loop ~45 µs per batch after a step)
            self.room_signal()
        return item


class _Dispatch:
    """The dispatch thread of an epoch and, once that epoch's end is taken, of the next epoch
    prepared ahead (``prepare_next``): ``run`` is what the loop takes from, ``ahead`` the next
    epoch's batches until the loop asks for that very run (``adopt``)."""

    def __init__(self, it: ReceivingIter, current: RunPlan | None) -> None:
        epoch, length = (0, None) if current is None else (current.epoch, len(current.share))
        self.profile_name = it.profile_name
        self.run = _Run(epoch, None, length, self.profile_name)
        self.ahead: _Run | None = None
        # held while the thread resets torch's iterator ahead: stop() and adopt() wait for it
        self.lock = threading.RLock()
        self.stop_event = threading.Event()
        # a weak reference: a thread waiting for room must not keep an abandoned iterator (and
        # its workers) alive; torch shuts workers down when the iterator is collected
        self.ref = weakref.ref(it)
        self.thread = threading.Thread(
            target=_dispatch_loop, args=(self,), name="seqloader-dispatch", daemon=True
        )
        self.thread.start()

    def prepare_next(self, it: ReceivingIter) -> _Run | None:
        """At an epoch's end (dispatch thread): reset torch for the run the loader will most
        likely ask next, so the workers build its first batches now; the run to go on with."""
        try:
            plan = it.run_ahead(self.run.epoch)
        except Exception:  # only a guess: the next epoch then starts as it always did
            return None
        if plan is None:
            return None
        with self.lock:
            if self.stop_event.is_set():
                return None
            run = _Run(plan.epoch, plan, len(plan.share), self.profile_name)
            self.ahead = run
            try:
                if not it.reset_ahead(plan):
                    self.ahead = None
                    return None
            except _Stopped:  # (a stop's wake cannot come while the lock is held)
                self.ahead = None
                return None
            except BaseException as e:  # torch's state is broken: the run's loop is told
                run.ready.put(_Failed(e))
                return None
        return run

    def settle(self, use: bool = True) -> None:
        """When the loop has taken every batch of the current run: if the next run is the one
        the thread prepares (``use``), wait until it has prepared it (or decided not to): it
        needs no more than the end from torch, the next epoch's plan (planned ahead anyway) and
        torch's reset, which the next epoch would otherwise do in the training thread. If not,
        stop the thread now: whatever it would prepare is dropped, and each batch the workers
        build for it is one more that torch's reset for the run asked waits for. (A loop that
        stopped midway: nothing here; the new run's reset stops the thread.)"""
        run = self.run
        if run.length is None or run.taken < run.length:
            return
        if use:
            run.ended.wait()  # set once the thread has prepared the next run, or decided not to
        else:
            self.stop()

    def adopt(self, it: ReceivingIter, plan: RunPlan) -> bool:
        """Whether the epoch prepared ahead is ``plan`` (training thread, at its ``iter()``);
        if so the loop takes from it from now on."""
        self.settle()
        with self.lock:
            ahead = self.ahead
            if ahead is None or ahead.plan is None or not ahead.plan.same_run(plan):
                return False
            self.ahead = None
            self.run = ahead
            return True

    def stopping_here(self) -> bool:
        return self.stop_event.is_set() and threading.current_thread() is self.thread

    def stop(self) -> None:
        """Stop the thread (it is done, or waits for room, or for a worker result) and wait for
        it, so that torch's state is this thread's again; a run prepared ahead is dropped."""
        if not self.thread.is_alive():
            self.ahead = None
            return
        with self.lock:  # never in the middle of a reset made ahead
            self.stop_event.set()
        run, ahead = self.run, self.ahead
        run.room.release()
        if ahead is not None:
            ahead.room.release()
        it = self.ref()
        if it is not None:
            it.put_result(_WAKE)
            del it
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10 * STATUS_CHECK_INTERVAL)
            self.ahead = None
            # after what the thread took (in order): a loop that goes on asking is told why
            # nothing more comes, instead of waiting for results that stopped workers never send
            run.ready.put(_Failed(SeqLoaderError(_STOPPED_TEXT)))


def _dispatch_loop(d: _Dispatch) -> None:
    """Take batches from torch's iterator (``next_data``: dispatch, order, failure checks) while
    there is room; the end or an exception goes to the run's ``ready`` as well, in order. After
    the end, the next epoch's run prepared ahead (if any) is dispatched the same way."""
    torch.set_num_threads(1)
    try:
        _dispatch_runs(d)
    finally:  # whoever waits for a run's end decision goes on
        for run in (d.run, d.ahead):
            if run is not None:
                run.ended.set()


def _dispatch_runs(d: _Dispatch) -> None:
    run: _Run | None = d.run
    while run is not None:
        run.room.acquire()  # holds no reference to the iterator while it waits
        if d.stop_event.is_set():
            return
        it = d.ref()
        if it is None:
            return
        try:
            item = it.next_data()
        except StopIteration:
            item = _END
        except _Stopped:
            return
        except BaseException as e:
            item = _Failed(e)
        last = item is _END or isinstance(item, _Failed)
        if d.stop_event.is_set() and not last:  # (torch's own shutdown at a non-persistent
            return  # epoch's end stops this thread too, after the end is known: that still goes out)
        run.ready.put(item)
        if item is _END and not d.stop_event.is_set():
            ended = run
            run = d.prepare_next(it)  # the next epoch's first batches, built while this one ends
            ended.ended.set()
        elif last:
            run = None
        del it


def _receive_loop(results, out: queue.Queue, done: threading.Event, wake: int) -> None:
    """Move worker results into ``out`` (unpickling them: that builds the batches) until torch's
    shutdown sets ``done`` and writes to the pipe ``wake`` (``_compat.WakeOnPut``)."""
    torch.set_num_threads(1)
    try:
        _receive(results, out, done, wake)
    finally:
        os.close(wake)


def _receive(results, out: queue.Queue, done: threading.Event, wake: int) -> None:
    while not done.is_set():
        ready = wait_for([results._reader, wake], timeout=STATUS_CHECK_INTERVAL)
        if wake in ready or done.is_set():
            return
        if not ready:
            continue
        try:
            item = results.get(timeout=STATUS_CHECK_INTERVAL)
        except queue.Empty:
            continue
        except Exception as e:
            if done.is_set():  # the queue was closed at shutdown
                return
            # a result that cannot be received (e.g. its worker died while sending it): the
            # trainer's next() raises it
            out.put(_Failed(e))
            if isinstance(e, (OSError, ValueError)):  # the pipe itself is broken or closed
                return
            continue
        if not done.is_set():
            out.put(item)
