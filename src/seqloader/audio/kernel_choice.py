"""Which kernel computes a feature in this process: torch's where torch is installed, else numpy's.

torch's kernels (``seqloader.torch.log_mel``) are looked up by name when features are first
computed, so importing ``audio`` loads no torch; ``use`` replaces the choice (tests, benchmarks).
One object per feature, held by its module: the choice is per process, as torch's threads are.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Generic, TypeVar

K = TypeVar("K")


class KernelChoice(Generic[K]):
    """The kernel a feature uses: ``numpy`` without torch, else ``seqloader.torch.log_mel``'s
    function named ``torch_name``; chosen once, at the first ``get``.

    >>> from seqloader.audio.features import numpy_log_mel
    >>> choice = KernelChoice(numpy_log_mel, "log_filterbank")
    >>> previous = choice.use(numpy_log_mel)
    >>> choice.get() is numpy_log_mel
    True
    """

    def __init__(self, numpy: K, torch_name: str) -> None:
        self._numpy, self._torch_name = numpy, torch_name
        self._kernel: K | None = None

    def get(self) -> K:
        if self._kernel is None:
            if importlib.util.find_spec("torch") is None:
                self._kernel = self._numpy
            else:
                module = importlib.import_module("seqloader.torch.log_mel")
                self._kernel = getattr(module, self._torch_name)
        return self._kernel

    def use(self, kernel: K) -> K:
        """Compute with ``kernel`` from now on; returns the previous one (the default if none was
        chosen yet)."""
        previous, self._kernel = self.get(), kernel
        return previous
