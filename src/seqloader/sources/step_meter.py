"""Time and peak private memory of one step of this process, for ``seqloader prepare``'s report.

A node's first process builds its stores one after another (a source's metadata, the
duplicate-tag verdict, the bucket index); what each step costs in wall time and in private
(anonymous) memory is what decides whether the node can afford it. Private memory is
``RssAnon`` (mapped files are page cache, not counted; read from ``/proc/self/statm``), sampled
by a thread while the step runs; its peak above the value before the step is the step's figure.
Where ``/proc`` is missing the memory figure is -1 (unknown).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

#: seconds between two samples of the private memory while a step runs
EVERY = 0.005
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_anon() -> int:
    """This process's ``RssAnon`` in bytes, -1 where ``/proc`` does not say: resident pages less
    file and shared-memory pages, the same counters, from ``/proc/self/statm`` (about 2 us of CPU
    against 21 us for ``/proc/self/status``; the meter samples every ``EVERY`` seconds through
    every first open of a file)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * PAGE
    except (OSError, IndexError, ValueError):
        return -1


class StepMeter:
    """``with StepMeter() as m: step()`` -> ``m.seconds``, ``m.peak_private`` (bytes above the
    value before, -1 unknown). ``clock``, ``sample`` and ``every`` are injectable (tests).

    >>> with StepMeter() as m:
    ...     block = bytearray(1 << 20)
    >>> m.seconds >= 0 and m.peak_private >= -1
    True
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        sample: Callable[[], int] = rss_anon,
        every: float = EVERY,
    ) -> None:
        self._clock, self._sample, self._every = clock, sample, every
        self.seconds, self.peak_private = 0.0, -1
        self._stop = threading.Event()
        self._peak = self._before = -1

    def __enter__(self) -> StepMeter:
        self._before = self._peak = self._sample()
        self._started = self._clock()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self._every):
            self._peak = max(self._peak, self._sample())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = self._clock() - self._started
        self._peak = max(self._peak, self._sample())
        self.peak_private = -1 if self._before < 0 else self._peak - self._before
