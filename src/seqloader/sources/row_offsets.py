"""Each sequence's row offsets in its file, from its lengths and a sparse index.

A file's row offsets of a key (sequence ``j`` spans rows ``[s[j], s[j + 1])``) are the running
sum of its lengths, which a metadata store keeps anyway (``len.<key>``). Stored in full they were
8 bytes per sequence and key (800 MB of a 10^8-sequence store, written, summed and fsynced by
the node's first process); here the store keeps only every ``STEP``-th value of the running sum
over all files (``sparse_totals``: 1/64 of that, checked in full when the store is mapped), and
a reader adds at most ``STEP - 1`` lengths to it: a few microseconds per batch.

>>> lengths = np.array([3, 1, 2, 5, 4], np.int32)
>>> rows = RowOffsets(lengths, sparse_totals(lengths, step=2), step=2)
>>> rows.file(np.array([0, 2, 5]), 1)[np.array([0, 1, 2, 3])].tolist()
[0, 2, 7, 11]
>>> len(rows.file(np.array([0, 2, 5]), 0)), int(rows.file(np.array([0, 2, 5]), 0)[-1])
(3, 4)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

#: every how many sequences the running sum is stored (a reader adds at most ``STEP - 1``)
STEP = 64


def sparse_totals(lengths: np.ndarray, step: int = STEP) -> np.ndarray:
    """The running sum of ``lengths`` over all files before sequence ``k * step``, for ``k`` in
    ``0 .. n // step`` (int64 ``[n // step + 1]``)."""
    return np.concatenate(list(SparseTotals(step).blocks([np.asarray(lengths)])))


class SparseTotals:
    """``sparse_totals`` of lengths that come block by block (any block sizes, files one after
    another): ``blocks`` yields the sparse values each block completes."""

    def __init__(self, step: int = STEP) -> None:
        self.step, self._total, self._seen = step, 0, 0

    def blocks(self, lengths: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        for block in lengths:
            yield self.add(block)
        yield self.finish()

    def add(self, block: np.ndarray) -> np.ndarray:
        """The sparse values at the positions of ``block`` (the next lengths), maybe none: the
        running sum up to the block's first such position, then the sums of each ``step``
        lengths after it (no temporary of the block's size)."""
        m, step = len(block), self.step
        first = -self._seen % step  # the block's first position that is a multiple of step
        count = max(0, -(-(m - first) // step))
        out = np.empty(count, np.int64)
        if count:
            out[0] = self._total + int(np.sum(block[:first], dtype=np.int64))
            groups = block[first : first + (count - 1) * step].reshape(count - 1, step)
            np.cumsum(groups.sum(axis=1, dtype=np.int64), out=out[1:])
            out[1:] += out[0]
        self._total += int(np.sum(block, dtype=np.int64))
        self._seen += m
        return out

    def finish(self) -> np.ndarray:
        """The last value where the sequences end on a multiple of ``step`` (else none)."""
        return np.array([self._total] if self._seen % self.step == 0 else [], np.int64)

    def rows(self, n: int) -> int:
        """How many values ``n`` sequences give."""
        return n // self.step + 1


class RowOffsets:
    """The running sum of ``lengths`` (int ``[n]``, all files one after another) at any
    position, from ``totals`` (``sparse_totals``); ``file(bounds, f)`` is file ``f``'s row
    offsets (``FileRows``)."""

    def __init__(self, lengths: np.ndarray, totals: np.ndarray, step: int = STEP) -> None:
        self.lengths, self.totals, self.step = lengths, totals, step
        if len(totals) != len(lengths) // step + 1:
            raise ValueError(
                f"row offsets: {len(totals)} sparse totals for {len(lengths)} sequences, "
                f"expected {len(lengths) // step + 1} (every {step})"
            )

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The sum of the lengths before each of ``positions`` (ints in ``[0, n]``) -> int64."""
        pos = np.asarray(positions, dtype=np.int64)
        k = pos // self.step
        out = np.array(self.totals[k], dtype=np.int64)
        rest = pos - k * self.step  # lengths to add: [k * step, pos)
        width = int(rest.max(initial=0))
        if not width:
            return out
        n = len(self.lengths)
        if pos.size * width > 4 * n:  # most of the column: one running sum is cheaper
            full = np.zeros(n + 1, np.int64)
            np.cumsum(self.lengths, out=full[1:])
            return full[pos]
        window = (k * self.step)[..., None] + np.arange(width)
        taken = np.take(self.lengths, np.minimum(window, n - 1), mode="clip").astype(np.int64)
        taken[np.arange(width) >= rest[..., None]] = 0
        return out + taken.sum(axis=-1)

    def one(self, position: int) -> int:
        """``at`` of one position."""
        k = position // self.step
        lo = k * self.step
        return int(self.totals[k]) + int(np.sum(self.lengths[lo:position], dtype=np.int64))

    def file(self, bounds: np.ndarray, f: int) -> FileRows:
        return FileRows(self, int(bounds[f]), int(bounds[f + 1]))


class FileRows:
    """One file's row offsets of one key (``[n_f + 1]``, from 0), computed when indexed: an int,
    or an int array (``s[local]``, ``s[local + 1]``); ``np.asarray`` gives them all."""

    __slots__ = ("_a", "_base", "_m", "_rows")

    def __init__(self, rows: RowOffsets, a: int, b: int) -> None:
        self._rows, self._a, self._m = rows, a, b - a + 1
        self._base = rows.one(a)

    def __len__(self) -> int:
        return self._m

    @property
    def shape(self) -> tuple[int]:
        return (self._m,)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self._m if int(key) < 0 else 0)
            if not 0 <= i < self._m:
                raise IndexError(f"row offset {int(key)} out of range for {self._m}")
            return self._rows.one(self._a + i) - self._base
        if isinstance(key, slice):
            return self.__array__()[key]
        idx = np.asarray(key, dtype=np.int64)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self._m):
            raise IndexError(f"row offsets {idx.min()}..{idx.max()} out of range for {self._m}")
        return self._rows.at(idx + self._a) - self._base

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        lengths = self._rows.lengths[self._a : self._a + self._m - 1]
        out = np.zeros(self._m, np.int64)
        np.cumsum(lengths, out=out[1:])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"FileRows({self._m} row offsets from sequence {self._a})"


#: a file's row offsets as a reader takes them: computed (``FileRows``) or an array
Offsets = FileRows | np.ndarray
