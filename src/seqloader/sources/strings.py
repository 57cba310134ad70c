"""``IndexedStrings``: the ``Sequence[str]`` face of a packed string table (one byte buffer plus
offsets): an index decodes one string, a slice decodes a list; the tables differ only in how one
string is decoded and checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload


class IndexedStrings(Sequence[str]):
    """Base of packed string tables: a subclass gives ``__len__`` and ``_string(i)`` (string ``i``
    decoded, ``i`` possibly negative, an ``IndexError`` naming the table when out of range).

    >>> class Letters(IndexedStrings):
    ...     def __len__(self):
    ...         return 3
    ...     def _string(self, i):
    ...         return "abc"[i]
    >>> Letters()[1], Letters()[::2]
    ('b', ['a', 'c'])
    """

    __slots__ = ()

    def _string(self, i: int) -> str:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._string(k) for k in range(*i.indices(len(self)))]
        return self._string(i)
