"""Which planned batches a DataLoader worker held: sent to it, and the one it was building.

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
shared memory each worker updates per batch. The ``WorkerError`` that names them is made in
``seqloader.torch.worker_errors``; this module only knows the plan and the board.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from seqloader.plan.batches import BatchList

TAGS_SHOWN = 3


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
class HeldBatches:
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

    def building(self, worker_id: int | None) -> int | None:
        """The item (0-based in this iteration) the worker was building, if the board says so."""
        if worker_id is None or self.progress is None:
            return None
        found = self.progress.building(worker_id)
        if found is None or found[0] != self.epoch:
            return None
        item = found[1] - self.first_step
        return item if 0 <= item < len(self.share) else None

    def describe_batch(self, item: int) -> str:
        seqs, _ = self.share.batch(item)
        shown = ", ".join(repr(self.tag(int(i))) for i in seqs[:TAGS_SHOWN])
        more = ", ..." if len(seqs) > TAGS_SHOWN else ""
        return (
            f"epoch {self.epoch} step {self.first_step + item} ({len(seqs)} sequences: indices "
            f"{seqs[:TAGS_SHOWN].tolist()}{more}, tags {shown}{more})"
        )

    def steps_text(self, items: list[int]) -> str:
        return ", ".join(str(self.first_step + k) for k in items)

    def tags_of(self, items: list[int]) -> tuple[str, ...]:
        """The first tags of the first of ``items`` (none if there is no such item)."""
        if not items or items[0] >= len(self.share):
            return ()
        seqs, _ = self.share.batch(items[0])
        return tuple(self.tag(int(i)) for i in seqs[:TAGS_SHOWN])
