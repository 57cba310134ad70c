"""Batches the training loop is done with are freed in a background thread.

Freeing a padded batch (its tensors, the numpy views under them, the finalizer that returns its
slot or block) cost the training thread 0.2 ms per batch on a quiet machine and up to 0.9 ms on a
busy one, measured right where a loop writes ``batch = next(it)``: the assignment drops the
previous batch. The run loop therefore keeps one reference to each batch it hands out and, one
request later (the loop has replaced it by then), with workers passes that reference to this
thread, so the last reference — and the work of freeing — goes away here. (Without workers it
drops it itself at that request, inside the measured wait: everything runs in the training thread
then, and the batch's block is free again before the next batch is built into it.) A loop that keeps batches only delays
their freeing; nothing is freed while any reference to it is alive.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger("seqloader")
_lock = threading.Lock()
_queue: queue.SimpleQueue | None = None
_thread: threading.Thread | None = None
_pid: int | None = None
_stopped = False  # at interpreter exit: batches are then freed where they are dropped
_STOP = object()
#: the signals bound to this process's queue (``signal``), rebound in a forked child
_signals: weakref.WeakSet[functools.partial[None]] = weakref.WeakSet()
# batches the training loop hands back per wake of this thread: the run loop passes them on every
# EVERY-th request, the one whose take signalled the dispatch thread's room through this thread
# (``seqloader.torch.receiving``), so its put lands in an awake thread's queue
EVERY = 2


def release(item: object) -> None:
    """Drop ``item`` (usually the last reference to a batch) in the release thread."""
    q = _queue
    if q is not None and not _stopped:  # the common case: two reads and a put (a forked
        q.put(item)  # child starts with no queue: _forget)
        return
    _release_slowly(item)


def _release_slowly(item: object) -> None:
    q = _started()
    if q is not None:
        q.put(item)
    # else no thread may start or free torch memory now: the caller's reference goes, and with
    # it the batch, right here


def _started() -> queue.SimpleQueue | None:
    """This process's release queue, its thread started on first use (and in a forked child);
    None at interpreter exit."""
    global _queue, _thread, _pid
    if _stopped or sys.is_finalizing():
        return None
    q = _queue
    if q is None or _pid != os.getpid():  # first use, or a forked child: start this process's
        with _lock:
            if _queue is None or _pid != os.getpid():
                q = queue.SimpleQueue()
                _thread = threading.Thread(
                    target=_release_loop, args=(q,), name="seqloader-release", daemon=True
                )
                _thread.start()
                _queue, _pid = q, os.getpid()
            q = _queue
    return q


def releaser() -> Callable[[object], None]:
    """``release`` for a per-batch loop (made once per epoch): the queue's own ``put``, a
    C-level call, where ``release`` is a Python call, µs with the caches cold after a step.
    (A thread that runs on into interpreter exit then only queues what it releases.)"""
    q = _started()
    return release if q is None else q.put


def _forget() -> None:
    """In a forked child: the parent's release thread is not there; a first use starts one.
    The signals made before the fork put into the parent's queue, a dead copy here (no thread
    reads it): each is rebound to ``later``, this process's own thread."""
    global _queue, _thread, _pid
    _queue = _thread = _pid = None
    for send in list(_signals):
        token = send.args[0]
        send.__setstate__((later, (token.fn,), {}, None))  # type: ignore[attr-defined]
    _signals.clear()


os.register_at_fork(after_in_child=_forget)


def later(fn: Callable[[], object]) -> None:
    """Call ``fn()`` in the release thread, after what was released before it.

    For a signal to another thread that the training thread would otherwise send itself: waking
    a sleeping thread (a futex wake) cost the training thread 20-50 µs after a 10 ms step on this
    machine, while a second item put into this thread's queue in the same request, when the
    thread is awake already, costs ~1 µs. So each request wakes one thread, this one.

    >>> import threading
    >>> done = threading.Event()
    >>> later(done.set)
    >>> done.wait(10)
    True
    """
    if _stopped or sys.is_finalizing():
        fn()
        return
    release(_Later(fn))


def signal(fn: Callable[[], object]) -> Callable[[], None]:
    """A function that calls ``later(fn)``, with its queue item made once (for a per-batch
    signal: no allocation in the training thread).

    >>> import threading
    >>> done = threading.Event()
    >>> set_later = signal(done.set)
    >>> set_later()
    >>> done.wait(10)
    True

    The function is the queue's own ``put`` of the item (a C-level call) where the thread can
    run when it is made. A process forked after that has no thread reading that queue: there the
    function is rebound at the fork to put into the child's own release thread (its call never
    reaches the parent, another process, and is not lost in the child).
    """
    token = _Later(fn)
    q = _started()
    if q is not None:
        bound = functools.partial(q.put, token)
        _signals.add(bound)  # rebound in a forked child (``_forget``)
        return bound

    def send() -> None:
        q = _queue
        if q is not None and not _stopped:  # as release(): two reads and a put
            q.put(token)
        elif _stopped or sys.is_finalizing():
            fn()
        else:
            _release_slowly(token)

    return send


def flush(timeout: float = 10.0) -> bool:
    """Wait until everything released so far in this process is freed; False on timeout. For
    callers that must know the memory is back now (tests of slot reuse on a loaded machine)."""
    q = _queue
    if q is None or _pid != os.getpid() or _stopped:
        return True
    done = threading.Event()
    q.put(done)
    return done.wait(timeout)


class _Later:
    """A call to make in the release thread (``later``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn


def _release_loop(q: queue.SimpleQueue) -> None:
    while True:
        item = q.get()
        if item is _STOP:
            return
        if type(item) is _Later:
            try:
                item.fn()
            except Exception:  # never ends the thread; never silent
                log.exception("seqloader: a call in the release thread failed")
            continue
        if isinstance(item, threading.Event):  # put by flush(): all before it is freed
            item.set()
            continue
        del item  # the batch's memory goes back (slot/block finalizers run here)


@atexit.register
def _stop() -> None:
    """Before the interpreter shuts down: free what is queued and end the thread, so that no
    batch is freed by a daemon thread while the interpreter (and torch) are being torn down."""
    global _stopped
    _stopped = True
    q, thread = _queue, _thread
    if q is not None and thread is not None and _pid == os.getpid():
        q.put(_STOP)
        thread.join(timeout=5)
