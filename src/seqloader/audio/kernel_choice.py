"""Which kernel computes a feature in this process: torch's where torch is installed, else numpy's.

torch's kernels (``seqloader.audio.torch_kernels``) import torch inside their functions, so
importing ``audio`` loads no torch; ``use`` replaces the choice (tests, benchmarks).
One object per feature, held by its module: the choice is per process, as torch's threads are.
"""

from __future__ import annotations

import importlib.util
from typing import Generic, TypeVar

K = TypeVar("K")


class KernelChoice(Generic[K]):
    """The kernel a feature uses: ``numpy`` without torch, else ``torch`` (a kernel of
    ``seqloader.audio.torch_kernels``); chosen once, at the first ``get``.

    >>> from seqloader.audio.features import numpy_log_mel
    >>> from seqloader.audio.torch_kernels import log_filterbank
    >>> choice = KernelChoice(numpy_log_mel, log_filterbank)
    >>> previous = choice.use(numpy_log_mel)
    >>> choice.get() is numpy_log_mel
    True
    """

    def __init__(self, numpy: K, torch: K) -> None:
        self._numpy, self._torch = numpy, torch
        self._kernel: K | None = None

    def get(self) -> K:
        if self._kernel is None:
            torch_found = importlib.util.find_spec("torch") is not None
            self._kernel = self._torch if torch_found else self._numpy
        return self._kernel

    def use(self, kernel: K) -> K:
        """Compute with ``kernel`` from now on; returns the previous one (the default if none was
        chosen yet)."""
        previous, self._kernel = self.get(), kernel
        return previous
