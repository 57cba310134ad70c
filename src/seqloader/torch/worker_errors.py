"""Where a DataLoader worker's death or exception becomes a ``WorkerError`` in the trainer.

torch reports a dead worker as ``RuntimeError: DataLoader worker (pid X) is killed by signal: ...``
(from its SIGCHLD handler, which can fire anywhere in the main thread, e.g. in the middle of the
training step) or, when it notices later, ``... (pid(s) X) exited unexpectedly``; a worker's own
exception comes back as ``Caught E in DataLoader worker process N``. None says which data was lost.
``EpochWatch`` translates them, in two places: around ``next()`` of the DataLoader iterator, and in
a thin wrapper around torch's SIGCHLD handler, so an error raised in the middle of user code is
already a ``WorkerError``. Which batches the worker held comes from
``seqloader.torch.held_batches``; the torch texts and handlers it relies on are read through
``seqloader.torch._compat``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

from torch.utils.data import DataLoader

from seqloader.errors import SeqLoaderError, WorkerError
from seqloader.plan.batches import BatchList
from seqloader.torch import _compat
from seqloader.torch._compat import workers_alive
from seqloader.torch.held_batches import HeldBatches, WorkerProgress

__all__ = [
    "EpochWatch",
    "WorkerProgress",
    "WorkerRaised",
    "WorkerTraceback",
    "translate_worker_death",
    "workers_alive",
]


class WorkerTraceback(Exception):
    """The cause of a seqloader error re-raised in the trainer: where, in which worker, it was
    raised, with the worker's traceback."""


@dataclass(frozen=True)
class WorkerRaised:
    """A seqloader error (``DataError``: file, tag, fix) raised while a worker built a batch,
    returned as that batch's result. torch would re-raise a copy whose message begins with its
    own "Caught DataError in DataLoader worker process N. Original Traceback ..." and ends with
    ours; the trainer raises the error itself instead (``reraise``): our message first, the
    worker's traceback as its ``__cause__``."""

    error: SeqLoaderError
    traceback: str
    worker_id: int
    pid: int

    @classmethod
    def capture(cls, error: SeqLoaderError, worker_id: int) -> WorkerRaised | None:
        """The result that carries ``error`` to the trainer, or None if the error does not
        pickle (then torch's own re-raise carries it, as for any other exception)."""
        try:
            pickle.dumps(error)
        except Exception:
            return None
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(error, text, worker_id, os.getpid())

    def reraise(self) -> NoReturn:
        cause = WorkerTraceback(
            f"raised in DataLoader worker process {self.worker_id} (pid {self.pid}); its "
            f"traceback there:\n{self.traceback.rstrip()}"
        )
        raise self.error from cause


# pid -> the epoch watch that dispatched work to it (latest epoch wins; entries die with the watch)
_watch_by_pid: weakref.WeakValueDictionary[int, EpochWatch] = weakref.WeakValueDictionary()


@dataclass
class EpochWatch:
    """Watches one ``iter(dataloader)``: counts the batches handed to the trainer (``consumed``;
    items ``< consumed`` are safe, and included in ``state_dict()``) and turns a failure into the
    ``WorkerError`` that names the batches the worker held (``held``)."""

    held: HeldBatches
    consumed: int = 0
    on_failure: Callable[[], None] | None = None
    error: SeqLoaderError | None = field(default=None, repr=False)  # WorkerError, or RunStop's
    _iter_ref: weakref.ref | None = field(default=None, repr=False)

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
        held = HeldBatches(
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
        watch = cls(held, on_failure=on_failure)
        with contextlib.suppress(TypeError):
            watch._iter_ref = weakref.ref(iterator)
        for pid in held.pids:
            _watch_by_pid[pid] = watch
        if held.pids:
            _compat.wrap_sigchld(translate_worker_death)
        return watch

    @property
    def pids(self) -> tuple[int, ...]:
        return self.held.pids

    def failure(self, exc: Exception) -> WorkerError | None:
        """The ``WorkerError`` to raise for ``exc``, raised by the iterator's ``next()``, when
        it is a worker's death or failure told in torch's words (the watch is then failed: the
        iterator is broken); None: raise ``exc`` itself (a ``WorkerError`` already is one, and
        fails the watch too). The training thread calls ``next()`` itself inside ``try`` (no
        wrapper call per batch: ``run_epoch``), and this only when it raised."""
        if isinstance(exc, SeqLoaderError):
            if isinstance(exc, WorkerError):
                self._failed(exc)
            return None
        # a worker killed while sending shows first as a broken pipe (EOFError, OSError) in
        # the thread that receives; its death is what to report
        grace = 2.0 if isinstance(exc, EOFError | OSError) else 0.0
        err = self.translate(exc) or self._death_after(exc, grace)
        if err is not None:
            self._failed(err)
        return err

    def translate(self, exc: BaseException) -> WorkerError | None:
        """A ``WorkerError`` for torch's worker-death / worker-exception errors, else None."""
        found = _translated_in_chain(exc)
        if found is not None:
            return found
        text = str(exc)
        reraised = _compat.parse_reraise(text)
        if reraised is not None:  # a non-seqloader exception inside a worker
            worker_id, type_name = reraised
            return self.exception_error(worker_id, type_name, text)
        death = _compat.parse_death(text)
        if death is not None:
            return self.death_error(*death)
        return None

    def death_error(self, pids: list[int], what: str) -> WorkerError:
        """The error for the death of the worker among ``pids`` (torch's text: ``what``)."""
        held, consumed = self.held, self.consumed
        pid = next((p for p in pids if p in held.pids), pids[0] if pids else -1)
        worker_id = held.pids.index(pid) if pid in held.pids else None
        items = held.held_items(worker_id, consumed) if worker_id is not None else []
        who = f"worker {worker_id} (pid {pid})" if worker_id is not None else f"worker pid {pid}"
        building = held.building(worker_id)
        what = self._exit_status(pid) if "exited unexpectedly" in what else what
        if building is not None:
            what_held = f"while building {held.describe_batch(building)}"
            rest = [k for k in items if k != building]
            if rest:
                what_held += f"; it had also been sent step(s) {held.steps_text(rest)}"
        elif items:
            what_held = f"while it held {held.describe_batch(items[0])}"
            if len(items) > 1:
                what_held += f"; it had also been sent step(s) {held.steps_text(items[1:])}"
        else:
            what_held = "holding no batch of this epoch (all its batches were consumed)"
        killed = "Killed" in what or "SIGKILL" in what
        cause = (
            "SIGKILL usually means the out-of-memory killer (see `dmesg`): lower num_workers, "
            "prefetch_factor or max_frames, or give the job more memory"
            if killed
            else "a crash in native code (a decoder, h5py) or an exit() in a transform"
        )
        what = what.removeprefix("is ").rstrip(". ") or "exited unexpectedly"
        err = WorkerError(
            f"DataLoader {who} of rank {held.rank} died ({what}) {what_held}. "
            f"{self.resume_hint()} Likely cause: {cause}."
        )
        # the board can be a moment ahead of the sent count (torch marks an index sent just after
        # putting it in the worker's queue): what the worker builds is held all the same
        kept = sorted({*items, building}) if building is not None else items
        steps = tuple(held.first_step + k for k in kept)
        first = [building] if building is not None else items
        _annotate(err, worker_id, pid, held.epoch, steps, held.tags_of(first))
        err.building = None if building is None else held.first_step + building
        return err

    def exception_error(self, worker_id: int, type_name: str, text: str) -> WorkerError:
        """The error for an exception raised in worker ``worker_id`` (torch re-raises it at
        that item's turn, so it failed the batch due now)."""
        held, item = self.held, self.consumed
        batch = held.describe_batch(item) if item < len(held.share) else f"epoch {held.epoch}"
        err = WorkerError(
            f"DataLoader worker {worker_id} of rank {held.rank} failed with {type_name} on "
            f"{batch}. {self.resume_hint()} Original error:\n{text}"
        )
        pid = held.pids[worker_id] if worker_id < len(held.pids) else None
        steps = (held.first_step + item,) if item < len(held.share) else ()
        _annotate(err, worker_id, pid, held.epoch, steps, held.tags_of([item]))
        return err

    def resume_hint(self) -> str:
        done = self.held.first_step + self.consumed
        return (
            f"The trainer consumed {done} step(s) of epoch {self.held.epoch}; loader.state_dict() "
            "taken now or before is valid: a new SeqLoader with load_state_dict(state) continues "
            "exactly at the next step."
        )

    def _exit_status(self, pid: int) -> str:
        """How worker ``pid`` ended, from its exit code, where torch's status check says only
        "exited unexpectedly" (it notices a death before the SIGCHLD handler could say how)."""
        workers = _compat.worker_processes(self._iter_ref() if self._iter_ref else None)
        code = next((w.exitcode for w in workers if w.pid == pid and not w.is_alive()), None)
        if code is not None and code < 0 and -code in signal.valid_signals():
            return f"killed by signal: {signal.Signals(-code).name}"
        return "exited unexpectedly" if code is None else f"exited with code {code}"

    def _death_after(self, exc: BaseException, grace_s: float) -> WorkerError | None:
        """A ``WorkerError`` if a worker is dead (or dies within ``grace_s``: a killed process
        can still look alive for a moment), else None."""
        workers = _compat.worker_processes(self._iter_ref() if self._iter_ref else None)
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
        _compat.unregister_worker_pids(self._iter_ref() if self._iter_ref else None)

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


def _annotate(
    err: WorkerError,
    worker_id: int | None,
    pid: int | None,
    epoch: int,
    steps: tuple[int, ...],
    tags: tuple[str, ...],
) -> None:
    """Attributes set after construction, so the error still pickles and rebuilds from its one
    message argument (``BaseException.__reduce__`` keeps ``__dict__``)."""
    err.worker_id = worker_id
    err.pid = pid
    err.epoch = epoch
    err.steps = steps
    err.tags = tags
    err.building = None  # the step the worker was building when it died, when known
