"""Worker failures, translated: torch's errors and signals become ``WorkerError`` in the trainer.

torch reports a dead worker as ``RuntimeError: DataLoader worker (pid X) is killed by signal: ...``
(from its SIGCHLD handler, which can fire anywhere in the main thread, e.g. in the middle of the
training step) or, when it notices later, ``... (pid(s) X) exited unexpectedly``; a worker's own
exception comes back as ``Caught E in DataLoader worker process N``. None says which data was lost.
``EpochWatch`` translates them, in two places: around ``next()`` of the DataLoader iterator, and in
a thin wrapper around torch's SIGCHLD handler, so an error raised in the middle of user code is
already a ``WorkerError``. Which batch the worker held comes from ``seqloader.torch.dispatch``; the
torch texts and handlers it relies on are in ``seqloader.torch._compat``.
"""

from __future__ import annotations

import contextlib
import signal
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from torch.utils.data import DataLoader

from seqloader.errors import SeqLoaderError, WorkerError
from seqloader.plan.batches import BatchList
from seqloader.torch import _compat
from seqloader.torch._compat import workers_alive
from seqloader.torch.dispatch import Dispatch, WorkerProgress

__all__ = ["EpochWatch", "WorkerProgress", "translate_worker_death", "workers_alive"]

# pid -> the epoch watch that dispatched work to it (latest epoch wins; entries die with the watch)
_watch_by_pid: weakref.WeakValueDictionary[int, EpochWatch] = weakref.WeakValueDictionary()


@dataclass
class EpochWatch:
    """Watches one ``iter(dataloader)``: counts the batches handed to the trainer (``consumed``;
    items ``< consumed`` are safe, and included in ``state_dict()``) and turns a failure into the
    ``WorkerError`` that ``dispatch`` words."""

    dispatch: Dispatch
    consumed: int = 0
    on_failure: Callable[[], None] | None = None
    error: WorkerError | None = field(default=None, repr=False)
    _iterator: weakref.ref | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        dataloader: DataLoader,
        iterator: Iterator,
        *,
        epoch: int,
        rank: int,
        share: BatchList,
        first_step: int,
        tag: Callable[[int], str],
        on_failure: Callable[[], None] | None = None,
        progress: WorkerProgress | None = None,
    ) -> EpochWatch:
        """Register the iterator's worker pids (none with ``num_workers=0``) and wrap torch's
        SIGCHLD handler once per process."""
        workers = _compat.worker_processes(iterator)
        dispatch = Dispatch(
            epoch,
            rank,
            share,
            first_step,
            dataloader.num_workers,
            dataloader.prefetch_factor or 2,
            tag,
            tuple(int(w.pid) for w in workers if w.pid is not None),
            progress=progress,
            sent=_sent_counter(iterator),
        )
        watch = cls(dispatch, on_failure=on_failure)
        with contextlib.suppress(TypeError):
            watch._iterator = weakref.ref(iterator)
        for pid in dispatch.pids:
            _watch_by_pid[pid] = watch
        if dispatch.pids:
            _compat.wrap_sigchld(translate_worker_death)
        return watch

    @property
    def pids(self) -> tuple[int, ...]:
        return self.dispatch.pids

    def next(self, iterator: Iterator):
        """``next(iterator)``, with worker deaths and failures turned into ``WorkerError``."""
        if self.error is not None:  # raised before (in user code); the iterator is broken
            raise self.error
        try:
            item = next(iterator)
        except SeqLoaderError as e:
            if isinstance(e, WorkerError):
                self._failed(e)
            raise
        except Exception as e:
            # a worker killed while sending shows first as a broken pipe (EOFError, OSError) in
            # the thread that receives; its death is what to report
            grace = 2.0 if isinstance(e, EOFError | OSError) else 0.0
            err = self.translate(e) or self._death_after(e, grace)
            if err is None:
                raise
            self._failed(err)
            raise err from e
        self.consumed += 1
        return item

    def translate(self, exc: BaseException) -> WorkerError | None:
        """A ``WorkerError`` for torch's worker-death / worker-exception errors, else None."""
        found = _translated_in_chain(exc)
        if found is not None:
            return found
        text = str(exc)
        reraised = _compat.parse_reraise(text)
        if reraised is not None:  # a non-seqloader exception inside a worker
            worker_id, type_name = reraised
            return self.dispatch.exception_error(worker_id, type_name, text, self.consumed)
        death = _compat.parse_death(text)
        if death is not None:
            return self.death_error(*death)
        return None

    def death_error(self, pids: list[int], what: str) -> WorkerError:
        return self.dispatch.death_error(pids, what, self.consumed)

    def _death_after(self, exc: BaseException, grace_s: float) -> WorkerError | None:
        """A ``WorkerError`` if a worker is dead (or dies within ``grace_s``: a killed process
        can still look alive for a moment), else None."""
        workers = _compat.worker_processes(self._iterator() if self._iterator else None)
        deadline = time.monotonic() + grace_s
        while workers:
            dead = [w for w in workers if not w.is_alive()]
            if dead:
                code = dead[0].exitcode
                what = (
                    f"killed by signal: {signal.Signals(-code).name}"
                    if code is not None and code < 0 and -code in signal.valid_signals()
                    else f"exited with code {code} ({type(exc).__name__}: {exc})"
                )
                return self.death_error([int(w.pid) for w in dead], what)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return None

    def stop(self) -> None:
        for pid in self.pids:
            if _watch_by_pid.get(pid) is self:
                del _watch_by_pid[pid]

    def unregister_from_torch(self) -> None:
        """Take the iterator's workers off torch's SIGCHLD check: the death was reported once;
        the next SIGCHLD of any child would raise it again, in whatever code runs then. The
        iterator is shut down later (next epoch, close, GC)."""
        _compat.unregister_worker_pids(self._iterator() if self._iterator else None)

    def _failed(self, err: WorkerError) -> None:
        self.error = err
        self.stop()
        if self.on_failure is not None:
            self.on_failure()


def _sent_counter(iterator: Iterator) -> Callable[[], int | None] | None:
    """Reads torch's sent count without keeping the iterator (and its workers) alive."""
    try:
        ref = weakref.ref(iterator)
    except TypeError:
        return None
    return lambda: _compat.sent_items(ref())


def _translated_in_chain(exc: BaseException | None) -> WorkerError | None:
    """torch wraps an error raised by the SIGCHLD handler inside its queue wait into "exited
    unexpectedly" (raised *from* ours): find ours."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, WorkerError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def translate_worker_death(exc: BaseException) -> WorkerError | None:
    """The ``WorkerError`` for a torch worker-death error of any loader watched in this process
    (what the SIGCHLD wrapper raises instead of torch's error)."""
    found = _translated_in_chain(exc)
    if found is not None:
        return found
    death = _compat.parse_death(str(exc))
    if death is None:
        return None
    pids, what = death
    for pid in pids:
        watch = _watch_by_pid.get(pid)
        if watch is not None:
            err = watch.death_error(pids, what)
            watch.error = err
            watch.stop()  # no shutdown here: we may be inside a signal handler
            watch.unregister_from_torch()  # so later SIGCHLDs don't raise this again
            return err
    return None
