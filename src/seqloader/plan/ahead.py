"""The next epoch's plan, computed ahead on a background thread.

Planning a large corpus takes seconds (10^7-10^8 sequences: permuting, sorting, batching), and at
an epoch boundary the training loop would wait for it. The plan is a pure function of (data,
options, epoch, world size), so it can be computed while the current epoch trains and taken at the
boundary: the loop then waits only if the plan is not ready yet, and never gets another plan than
it would have computed itself (the same function, the same arguments).

One epoch is planned ahead at a time. A failure in the background is not raised there: ``take``
returns None and the caller plans on its own thread, so an error surfaces where it always did.
numpy releases the GIL in the heavy parts (permutation, sorts, gathers), so the thread mostly uses
a core the training loop is not using.

``after``: an event the computation waits for before it starts (set by whoever needs the result
first, or after ``AFTER_TIMEOUT_S`` at the latest). The loader starts the next epoch's planning and
the report's figures at the epoch boundary but lets them run only once the epoch's first batch is
handed over: started at once, their Python between numpy calls held the GIL while the training
thread reset the iterator and waited for the first batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

# the longest a computation waits for its ``after`` event (a loop that never asks for its first
# batch must not keep the thread parked for ever)
AFTER_TIMEOUT_S: float | None = 2.0


def _wait(after: threading.Event | None) -> None:
    if after is not None:
        after.wait(AFTER_TIMEOUT_S)


class PlanAhead(Generic[T]):
    """``compute(epoch)`` run on a daemon thread for the epoch asked by ``request``."""

    def __init__(self, compute: Callable[[int], T]) -> None:
        self._compute = compute
        self._epoch: int | None = None
        self._thread: threading.Thread | None = None
        self._result: T | None = None
        self._failed = False
        self._after: threading.Event | None = None

    def request(self, epoch: int, after: threading.Event | None = None) -> None:
        """Start planning ``epoch`` once ``after`` is set (a request for another epoch replaces
        a pending one: its result is dropped when it ends)."""
        if self._epoch == epoch:
            return
        if self._after is not None:  # a replaced request: let its thread run out
            self._after.set()
        self._epoch, self._result, self._failed, self._after = epoch, None, False, after
        thread = threading.Thread(
            target=self._run, args=(epoch, after), name=f"seqloader-plan-ahead-{epoch}", daemon=True
        )
        self._thread = thread
        thread.start()

    def _run(self, epoch: int, after: threading.Event | None) -> None:
        _wait(after)
        try:
            result = self._compute(epoch)
        except Exception:  # the caller plans again and sees the error on its own thread
            result, failed = None, True
        else:
            failed = False
        if self._epoch == epoch and threading.current_thread() is self._thread:
            self._result, self._failed = result, failed

    def take(self, epoch: int) -> T | None:
        """The plan of ``epoch`` if it was requested (waiting for it to finish), else None; None
        also if computing it failed. Taking it forgets it."""
        thread = self._thread
        if self._epoch != epoch or thread is None:
            return None
        if self._after is not None:  # needed now
            self._after.set()
        thread.join()
        result = None if self._failed else self._result
        self._epoch, self._thread, self._result, self._after = None, None, None, None
        return result

    def peek(self, epoch: int) -> T | None:
        """The plan of ``epoch`` without taking it, waiting for it if it is being computed (for
        a background thread that prepares the next epoch's first batches); None if ``epoch`` was
        not requested, computing it failed, or it was taken meanwhile."""
        thread = self._thread
        if self._epoch != epoch or thread is None or thread.ident is None:  # (not started yet)
            return None
        thread.join()
        result = self._result
        if self._epoch != epoch or self._thread is not thread or self._failed:
            return None
        return result

    @property
    def pending(self) -> int | None:
        """The epoch requested and not taken yet (None: none)."""
        return self._epoch


class InBackground(Generic[T]):
    """``compute()`` started on a daemon thread now; calling the object waits for its result
    (or raises its error on the caller's thread). For figures of a plan that cost O(n) and are
    read later, if at all (the epoch report's step imbalance), so the loop does not wait for them
    at the epoch boundary; it starts once ``after`` is set (module docstring)."""

    def __init__(self, compute: Callable[[], T], after: threading.Event | None = None) -> None:
        self._compute = compute
        self._result: T | None = None
        self._error: BaseException | None = None
        self._after = after
        self._thread = threading.Thread(target=self._run, name="seqloader-figures", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        _wait(self._after)
        try:
            self._result = self._compute()
        except BaseException as e:  # raised where the result is asked for
            self._error = e

    def __call__(self) -> T:
        if self._after is not None:  # needed now
            self._after.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._result)
