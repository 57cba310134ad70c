"""``Forwarding``: the metadata half of the ``Source`` protocol answered by a wrapped source, so a
wrapper (a progress counter, a subset view) writes only what it changes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.sources.base import Schema, Source


class Forwarding:
    """Base of wrappers of one source (``_inner``): length, keys, schema, lengths, tags, reads and
    the fingerprint are the wrapped source's unless the wrapper overrides them.

    >>> from seqloader.sources.memory import MemorySource
    >>> class Same(Forwarding):
    ...     def __init__(self, inner):
    ...         self._inner = inner
    >>> view = Same(MemorySource({"data": [[1.0], [2.0, 3.0]]}))
    >>> len(view), view.keys, view.lengths("data").tolist()
    (2, ('data',), [1, 2])
    """

    _inner: Source

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._inner.keys

    @property
    def schema(self) -> Schema:
        return self._inner.schema

    @property
    def tags(self) -> Sequence[str]:
        return self._inner.tags

    def lengths(self, key: str) -> np.ndarray:
        return self._inner.lengths(key)

    def tag(self, index: int) -> str:
        return self._inner.tag(index)

    def read(self, index: int) -> dict[str, np.ndarray]:
        return self._inner.read(index)

    def fingerprint(self) -> str:
        return self._inner.fingerprint()
