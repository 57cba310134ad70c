"""Worker failures: name the worker and the planned batch it held, in the trainer process.

torch reports a dead worker as ``RuntimeError: DataLoader worker (pid X) is killed by signal: ...``
(from its SIGCHLD handler, which can fire anywhere in the main thread, e.g. in the middle of the
training step) or, when it notices later, ``... (pid(s) X) exited unexpectedly``. Neither says which
data was lost. We know: torch's ``_MultiProcessingDataLoaderIter`` resets its worker cycle at every
``iter()`` and, with in-order delivery, sends sampler item ``k`` to worker ``k % num_workers``; it
keeps ``prefetch_factor * num_workers`` items in flight and sends one more each time it hands a batch
to the trainer. Our sampler yields this rank's plan from the resume step, so item ``k`` is step
``first_step + k``, and after ``c`` batches consumed the items sent are ``[0, c + prefetch *
num_workers)``. Worker ``w`` therefore held the items ``k >= c`` with ``k % num_workers == w``: the
first of them is the one the trainer is waiting for or will wait for; later ones were prefetched.

Which of those the worker was *building* when it died comes from ``WorkerProgress``, a board in
shared memory each worker updates per batch. ``WorkerError`` carries all of it (epoch, steps,
building, first tags), and says that the ``state_dict()`` of the
consumed position is valid for a restart. The translation runs in two places: around ``next()`` of
the DataLoader iterator, and in a thin wrapper around torch's SIGCHLD handler, so an error raised in
the middle of user code is already a ``WorkerError``.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch.utils.data import DataLoader

from seqloader.errors import SeqLoaderError, WorkerError
from seqloader.plan.batches import BatchList

if TYPE_CHECKING:
    from types import FrameType

    import numpy as np

_DEATH_RE = re.compile(r"DataLoader worker \(pids?\(?s?\)? ([\d, ]+)\)\s*(.*)", re.S)
_RERAISE_RE = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)")
_TAGS_SHOWN = 3


class WorkerProgress:
    """Which planned batch each worker is building right now, in shared memory.

    The dispatch arithmetic above says which batches a dead worker had been *sent*; this board
    says which one it was *building* when it died — the batch whose size or data most likely
    killed it (the out-of-memory killer, a crashing decoder). A worker writes (epoch, step) when it
    starts a batch and clears it when the batch is built: two stores per batch. A shared torch
    tensor, so it reaches forked and spawned workers alike."""

    IDLE = -1

    def __init__(self, num_workers: int) -> None:
        import torch

        self._board = torch.full((max(num_workers, 1), 2), self.IDLE, dtype=torch.int64)
        self._board.share_memory_()
        self._view: np.ndarray | None = None  # numpy view, made per process on first use

    def _rows(self) -> np.ndarray:
        if self._view is None:
            self._view = self._board.numpy()
        return self._view

    def begin(self, worker_id: int, epoch: int, step: int) -> None:
        self._rows()[worker_id] = (epoch, step)

    def end(self, worker_id: int) -> None:
        self._rows()[worker_id] = (self.IDLE, self.IDLE)

    def building(self, worker_id: int) -> tuple[int, int] | None:
        """(epoch, step) the worker started and did not finish, or None (idle)."""
        epoch, step = (int(x) for x in self._rows()[worker_id])
        return None if step == self.IDLE else (epoch, step)

    def __getstate__(self) -> dict:
        return {"_board": self._board, "_view": None}


# pid -> the epoch watch that dispatched work to it (latest epoch wins; entries die with the watch)
_watch_by_pid: weakref.WeakValueDictionary[int, EpochWatch] = weakref.WeakValueDictionary()
_handler_installed = False


@dataclass
class EpochWatch:
    """What one ``iter(dataloader)`` dispatched, so a failure can name the batch it cost.

    ``consumed``: batches handed to the trainer so far in this iteration (items ``< consumed``
    are safe, and included in ``state_dict()``).
    """

    epoch: int
    rank: int
    share: BatchList  # this rank's batches from first_step on (item k = step first_step + k)
    first_step: int
    num_workers: int
    prefetch_factor: int
    tag: Callable[[int], str]
    pids: tuple[int, ...] = ()
    consumed: int = 0
    on_failure: Callable[[], None] | None = None
    progress: WorkerProgress | None = field(default=None, repr=False)
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
        """Register the iterator's worker pids (torch keeps them in ``_workers``; absent with
        ``num_workers=0``) and wrap torch's SIGCHLD handler once per process."""
        workers = getattr(iterator, "_workers", None) or ()
        watch = cls(
            epoch,
            rank,
            share,
            first_step,
            dataloader.num_workers,
            dataloader.prefetch_factor or 2,
            tag,
            tuple(int(w.pid) for w in workers if w.pid is not None),
            on_failure=on_failure,
            progress=progress,
        )
        with contextlib.suppress(TypeError):
            watch._iterator = weakref.ref(iterator)
        for pid in watch.pids:
            _watch_by_pid[pid] = watch
        if watch.pids:
            _install_sigchld_translation()
        return watch

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

    def _death_after(self, exc: BaseException, grace_s: float) -> WorkerError | None:
        """A ``WorkerError`` if a worker is dead (or dies within ``grace_s``: a killed process
        can still look alive for a moment), else None."""
        it = self._iterator() if self._iterator is not None else None
        workers = list(getattr(it, "_workers", None) or ())
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
        """Take the iterator's workers off torch's SIGCHLD check (what its shutdown does first):
        the death was reported once; the next SIGCHLD of any child would raise it again, in
        whatever code runs then. The iterator is shut down later (next epoch, close, GC)."""
        it = self._iterator() if self._iterator is not None else None
        if it is not None and getattr(it, "_worker_pids_set", False):
            from torch.utils.data._utils.signal_handling import _remove_worker_pids

            with contextlib.suppress(Exception):
                _remove_worker_pids(id(it))
                it._worker_pids_set = False

    # ---- naming what was lost ----
    def held_items(self, worker_id: int) -> list[int]:
        """Items (0-based in this iteration) sent to ``worker_id`` and not yet consumed."""
        nw = max(self.num_workers, 1)
        sent = min(len(self.share), self.consumed + self.prefetch_factor * nw)
        first = self.consumed + (worker_id - self.consumed) % nw
        return list(range(first, sent, nw))

    def describe_batch(self, item: int) -> str:
        seqs, _ = self.share.batch(item)
        shown = ", ".join(repr(self.tag(int(i))) for i in seqs[:_TAGS_SHOWN])
        more = ", ..." if len(seqs) > _TAGS_SHOWN else ""
        return (
            f"epoch {self.epoch} step {self.first_step + item} ({len(seqs)} sequences: indices "
            f"{seqs[:_TAGS_SHOWN].tolist()}{more}, tags {shown}{more})"
        )

    def translate(self, exc: BaseException) -> WorkerError | None:
        """A ``WorkerError`` for torch's worker-death / worker-exception errors, else None."""
        found = _translated_in_chain(exc)
        if found is not None:
            return found
        text = str(exc)
        m = _RERAISE_RE.match(text)
        if m:  # a non-seqloader exception inside a worker: it failed the batch now due
            return self._worker_exception(int(m[2]), m[1], text)
        m = _DEATH_RE.search(text)
        if m:
            pids = [int(p) for p in m[1].replace(" ", "").split(",") if p]
            return self.death_error(pids, m[2].strip())
        return None

    def death_error(self, pids: list[int], what: str) -> WorkerError:
        pid = next((p for p in pids if p in self.pids), pids[0] if pids else -1)
        worker_id = self.pids.index(pid) if pid in self.pids else None
        items = self.held_items(worker_id) if worker_id is not None else []
        who = f"worker {worker_id} (pid {pid})" if worker_id is not None else f"worker pid {pid}"
        building = self._building(worker_id)
        if building is not None:
            held = f"while building {self.describe_batch(building)}"
            rest = [k for k in items if k != building]
            if rest:
                held += f"; it had also been sent step(s) {self._steps_text(rest)}"
        elif items:
            held = f"while it held {self.describe_batch(items[0])}"
            if len(items) > 1:
                held += f"; it had also been sent step(s) {self._steps_text(items[1:])}"
        else:
            held = "holding no batch of this epoch (all its batches were consumed)"
        killed = "Killed" in what or "SIGKILL" in what
        cause = (
            "SIGKILL usually means the out-of-memory killer (see `dmesg`): lower num_workers, "
            "prefetch_factor or max_frames, or give the job more memory"
            if killed
            else "a crash in native code (a decoder, h5py) or an exit() in a transform"
        )
        what = what.removeprefix("is ").rstrip(". ") or "exited unexpectedly"
        err = WorkerError(
            f"DataLoader {who} of rank {self.rank} died ({what}) {held}. {self._resume_hint()} "
            f"Likely cause: {cause}."
        )
        steps = tuple(self.first_step + k for k in items)
        first = [building] if building is not None else items
        _annotate(err, worker_id, pid, self.epoch, steps, self._tags_of(first))
        err.building = None if building is None else self.first_step + building
        return err

    def _building(self, worker_id: int | None) -> int | None:
        """The item (0-based in this iteration) the worker was building, if the board says so."""
        if worker_id is None or self.progress is None:
            return None
        found = self.progress.building(worker_id)
        if found is None or found[0] != self.epoch:
            return None
        item = found[1] - self.first_step
        return item if 0 <= item < len(self.share) else None

    def _steps_text(self, items: list[int]) -> str:
        return ", ".join(str(self.first_step + k) for k in items)

    def _worker_exception(self, worker_id: int, type_name: str, text: str) -> WorkerError:
        item = self.consumed  # torch re-raises a worker's exception at that item's turn
        batch = self.describe_batch(item) if item < len(self.share) else f"epoch {self.epoch}"
        err = WorkerError(
            f"DataLoader worker {worker_id} of rank {self.rank} failed with {type_name} on "
            f"{batch}. {self._resume_hint()} Original error:\n{text}"
        )
        pid = self.pids[worker_id] if worker_id < len(self.pids) else None
        steps = (self.first_step + item,) if item < len(self.share) else ()
        _annotate(err, worker_id, pid, self.epoch, steps, self._tags_of([item]))
        return err

    def _resume_hint(self) -> str:
        done = self.first_step + self.consumed
        return (
            f"The trainer consumed {done} step(s) of epoch {self.epoch}; loader.state_dict() taken "
            "now or before is valid: a new SeqLoader with load_state_dict(state) continues exactly "
            "at the next step."
        )

    def _tags_of(self, items: list[int]) -> tuple[str, ...]:
        if not items or items[0] >= len(self.share):
            return ()
        seqs, _ = self.share.batch(items[0])
        return tuple(self.tag(int(i)) for i in seqs[:_TAGS_SHOWN])

    def _failed(self, err: WorkerError) -> None:
        self.error = err
        self.stop()
        if self.on_failure is not None:
            self.on_failure()


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
    """The ``WorkerError`` for a torch worker-death error of any loader watched in this process."""
    found = _translated_in_chain(exc)
    if found is not None:
        return found
    m = _DEATH_RE.search(str(exc))
    if not m:
        return None
    pids = [int(p) for p in m[1].replace(" ", "").split(",") if p]
    for pid in pids:
        watch = _watch_by_pid.get(pid)
        if watch is not None:
            err = watch.death_error(pids, m[2].strip())
            watch.error = err
            watch.stop()  # no shutdown here: we may be inside a signal handler
            watch.unregister_from_torch()  # so later SIGCHLDs don't raise this again
            return err
    return None


def _install_sigchld_translation() -> None:
    """Wrap whatever SIGCHLD handler is installed (torch's, installed by the first multi-worker
    iterator) so its RuntimeError becomes our WorkerError. Main thread only, once per process."""
    global _handler_installed
    if _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGCHLD)
    if not callable(previous):
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            previous(signum, frame)
        except RuntimeError as e:
            err = translate_worker_death(e)
            if err is None:
                raise
            raise err from e

    signal.signal(signal.SIGCHLD, handler)
    _handler_installed = True


def workers_alive(dataloader: DataLoader) -> bool:
    """False when the DataLoader's (persistent) iterator has a dead worker: reusing it would wait
    for that worker (torch notices only after its 5 s status check), so the loader starts fresh."""
    it = getattr(dataloader, "_iterator", None)
    workers = getattr(it, "_workers", None) if it is not None else None
    if not workers or getattr(it, "_shutdown", False):
        return True
    return all(w.is_alive() for w in workers)
