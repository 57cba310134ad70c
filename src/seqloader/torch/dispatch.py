"""Which planned batch a failed DataLoader worker held, and the ``WorkerError`` that names it.

torch's multi-worker iterator resets its worker cycle at every ``iter()`` and, with in-order
delivery, sends sampler item ``k`` to worker ``k % num_workers``; it keeps ``prefetch_factor *
num_workers`` items in flight and sends one more each time it hands a batch to the trainer. Our
sampler yields this rank's plan from the resume step, so item ``k`` is step ``first_step + k``, and
after ``c`` batches consumed the items sent are ``[0, c + prefetch * num_workers)`` — one more
while our dispatch thread holds a batch taken ahead, so the count is read from torch's iterator
when it can be. Worker ``w``
therefore held the items ``k >= c`` with ``k % num_workers == w``: the first of them is the one the
trainer is waiting for or will wait for; later ones were prefetched.

Which of those the worker was *building* when it died comes from ``WorkerProgress``, a board in
shared memory each worker updates per batch. Turning torch's errors and signals into these errors is
``seqloader.torch.workers``'s job; this module only knows the plan and the board.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from seqloader.errors import WorkerError
from seqloader.plan.batches import BatchList

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
        self._view: object | None = None  # numpy view, made per process on first use

    def _rows(self):
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


@dataclass(frozen=True)
class Dispatch:
    """What one ``iter(dataloader)`` sent to which worker; ``consumed`` (batches handed to the
    trainer so far, safe in ``state_dict()``) is passed in by the caller that counts it."""

    epoch: int
    rank: int
    share: BatchList  # this rank's batches from first_step on (item k = step first_step + k)
    first_step: int
    num_workers: int
    prefetch_factor: int
    tag: Callable[[int], str]
    pids: tuple[int, ...] = ()
    progress: WorkerProgress | None = field(default=None, repr=False)
    # how many items torch has sent so far, read from its iterator when it can be: a dispatch
    # thread that takes batches ahead of the trainer has sent more than the arithmetic says
    sent: Callable[[], int | None] | None = field(default=None, repr=False)

    def held_items(self, worker_id: int, consumed: int) -> list[int]:
        """Items (0-based in this iteration) sent to ``worker_id`` and not yet consumed."""
        nw = max(self.num_workers, 1)
        counted = self.sent() if self.sent is not None else None
        if counted is None:
            counted = consumed + self.prefetch_factor * nw
        sent = min(len(self.share), max(counted, consumed))
        first = consumed + (worker_id - consumed) % nw
        return list(range(first, sent, nw))

    def describe_batch(self, item: int) -> str:
        seqs, _ = self.share.batch(item)
        shown = ", ".join(repr(self.tag(int(i))) for i in seqs[:_TAGS_SHOWN])
        more = ", ..." if len(seqs) > _TAGS_SHOWN else ""
        return (
            f"epoch {self.epoch} step {self.first_step + item} ({len(seqs)} sequences: indices "
            f"{seqs[:_TAGS_SHOWN].tolist()}{more}, tags {shown}{more})"
        )

    def death_error(self, pids: list[int], what: str, consumed: int) -> WorkerError:
        """The error for the death of the worker among ``pids`` (torch's text: ``what``)."""
        pid = next((p for p in pids if p in self.pids), pids[0] if pids else -1)
        worker_id = self.pids.index(pid) if pid in self.pids else None
        items = self.held_items(worker_id, consumed) if worker_id is not None else []
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
            f"DataLoader {who} of rank {self.rank} died ({what}) {held}. "
            f"{self.resume_hint(consumed)} Likely cause: {cause}."
        )
        # the board can be a moment ahead of the sent count (torch marks an index sent just after
        # putting it in the worker's queue): what the worker builds is held all the same
        kept = sorted({*items, building}) if building is not None else items
        steps = tuple(self.first_step + k for k in kept)
        first = [building] if building is not None else items
        _annotate(err, worker_id, pid, self.epoch, steps, self._tags_of(first))
        err.building = None if building is None else self.first_step + building
        return err

    def exception_error(
        self, worker_id: int, type_name: str, text: str, consumed: int
    ) -> WorkerError:
        """The error for an exception raised in worker ``worker_id`` (torch re-raises it at
        that item's turn, so it failed the batch due now)."""
        item = consumed
        batch = self.describe_batch(item) if item < len(self.share) else f"epoch {self.epoch}"
        err = WorkerError(
            f"DataLoader worker {worker_id} of rank {self.rank} failed with {type_name} on "
            f"{batch}. {self.resume_hint(consumed)} Original error:\n{text}"
        )
        pid = self.pids[worker_id] if worker_id < len(self.pids) else None
        steps = (self.first_step + item,) if item < len(self.share) else ()
        _annotate(err, worker_id, pid, self.epoch, steps, self._tags_of([item]))
        return err

    def resume_hint(self, consumed: int) -> str:
        done = self.first_step + consumed
        return (
            f"The trainer consumed {done} step(s) of epoch {self.epoch}; loader.state_dict() taken "
            "now or before is valid: a new SeqLoader with load_state_dict(state) continues exactly "
            "at the next step."
        )

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

    def _tags_of(self, items: list[int]) -> tuple[str, ...]:
        if not items or items[0] >= len(self.share):
            return ()
        seqs, _ = self.share.batch(items[0])
        return tuple(self.tag(int(i)) for i in seqs[:_TAGS_SHOWN])


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
