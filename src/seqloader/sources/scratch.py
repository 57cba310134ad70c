"""``Scratch``: temporaries kept from block to block.

The node's metadata store is built from blocks of 2^20 tags (``hdf_store._streamed``); a block's
temporaries are tens of MiB each, and a new array of that size is fresh pages that the kernel
zeroes before first use (numpy allocates them with ``mmap``, glibc gives them back on free): at
10^8 tags a third of the first open's CPU time went to zeroing pages. Kept and reused, they are
zeroed once.
"""

from __future__ import annotations

import numpy as np


class Scratch:
    """Temporaries by name, each kept and grown when a block needs more (one thread's: a block
    at a time). ``take`` gives a view of ``count`` items holding whatever the last block left.

    >>> s = Scratch()
    >>> a = s.take("x", 4, np.int64)
    >>> b = s.take("x", 3, np.int64)
    >>> bool(np.shares_memory(a, b)), len(b)
    (True, 3)
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def take(self, name: str, count: int, dtype: type | np.dtype) -> np.ndarray:
        kept = self._arrays.get(name)
        if kept is None or kept.dtype != dtype or len(kept) < count:
            kept = np.empty(count + count // 8, dtype=dtype)  # room for a slightly larger block
            self._arrays[name] = kept
        return kept[:count]
