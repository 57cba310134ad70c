"""``read_ahead``: the next items of an iterator produced in a thread while the caller works on
the last one.

The node's metadata store is written from blocks read from the files (``hdf_store._streamed``):
reading a block (``pread`` of heap references and collections, placing and cutting the strings:
numpy and the kernel, both without the interpreter lock in their heavy parts) and the work on the
block before it (hashing, writing, checksumming: the same) can run at once on two cores, and a
block's disk reads wait while the other core computes. The items come in their order, each once;
an exception raised while producing one is raised to the caller in its place; closing the
returned iterator early (the caller failed) stops the thread after at most one more item and
closes the source iterator in the thread that ran it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


def read_ahead(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """``items``, produced in a thread up to ``depth`` items ahead of the caller.

    >>> list(read_ahead(x * x for x in range(4)))
    [0, 1, 4, 9]
    """
    if depth < 1:
        raise ValueError(f"read_ahead: depth must be at least 1, got {depth}")
    ready: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        source = iter(items)
        try:
            for item in source:
                ready.put((item, None))
                if stop.is_set():  # the caller left: at most this one item after it
                    return
            ready.put((_END, None))
        except BaseException as e:  # raised in the caller's thread, in the item's place
            ready.put((_END, e))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="seqloader-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while True:  # room for the producer's last put, so that it never blocks
            try:
                ready.get_nowait()
            except queue.Empty:
                break
        thread.join()
