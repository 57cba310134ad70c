"""The row-reader interface of the HDF read paths (``hdf_read``, ``hdf_chunks``) and what they
share for writing sequences into a padded batch: each row of the batch is filled front to back
(the sequence's rows, then zeros) and, when asked, screened for NaN/Inf while its bytes are still
in cache."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np


class SpanRequest(NamedTuple):
    """What ``RowReader.spans_into`` is asked for: rows ``[begin[j], end[j])`` of the dataset into
    row ``pos[j]`` of the padded batch ``out`` (``[B, T, *feature_shape]``), zeros after each,
    for every j; spans with ``screen[j]`` are screened for NaN/Inf. The group travels together
    from the batch's read to every reader and the helpers below, so it is one (immutable) value:
    a named tuple, built per key and batch in well under a microsecond (a frozen dataclass takes
    about 2).

    >>> data, out = np.arange(10), np.full((2, 3), 9)
    >>> request = SpanRequest(np.array([0, 4]), np.array([2, 5]), out, pos=[1, 0])
    >>> into_each(lambda a, b, dst: np.copyto(dst, data[a:b]), request)
    []
    >>> out.tolist()
    [[4, 0, 0], [0, 1, 0]]
    """

    begin: np.ndarray
    end: np.ndarray
    out: np.ndarray
    pos: Sequence[int]
    screen: Sequence[bool] | None = None

    def screened(self, screen: Sequence[bool]) -> SpanRequest:
        """The same spans, with ``screen[j]`` saying which to screen."""
        return self._replace(screen=screen)


class RowScreen:
    """A fast NaN/Inf screen for the float rows of one batch, run right after each row's copy
    (its bytes still in cache): ``dot(v, v)`` is finite when every value is, and NaN/Inf when
    some value is not — or when a square overflows (|x| > ~1e19 in float32), a false alarm the
    caller's exact check settles. One pass, no temporaries (``isfinite(v).all()`` writes a bool
    array first), and two numpy calls per row (the slice, the dot): the sums are tested for
    NaN/Inf all at once in ``suspects``. (A per-row function that reshaped, dotted, tested and
    converted took five, more than the bytes of a short sequence cost.)"""

    __slots__ = ("rows", "sums")

    def __init__(self) -> None:
        self.sums: list = []
        self.rows: list[int] = []

    def add(self, j: int, values: np.ndarray) -> None:
        """Screen ``values`` (1-D, contiguous: one row's copied values) as row ``j``."""
        self.sums.append(values.dot(values))
        self.rows.append(j)

    def suspects(self) -> list[int]:
        """The rows ``j`` that may hold NaN/Inf (an exact check must confirm)."""
        if not self.sums:
            return []
        # one sum of Python floats settles the usual clean batch (~3 instead of ~15 µs for 32
        # rows): every dot is >= 0 or NaN/Inf, so the sum is finite exactly when all are (or it
        # overflows: a false alarm, settled per row below)
        if math.isfinite(sum(map(float, self.sums))):
            return []
        bad = np.flatnonzero(~np.isfinite(np.asarray(self.sums, dtype=np.float64)))
        rows = self.rows
        return [rows[i] for i in bad.tolist()]


def put_row(row: np.ndarray, values: np.ndarray) -> None:
    """One sequence's ``values`` (``[T_i, *feat]``) at the front of its padded ``row``, zeros
    after."""
    n = len(values)
    row[:n] = values
    row[n:] = 0


def into_each(into: Callable[[int, int, np.ndarray], None], request: SpanRequest) -> list[int]:
    """``RowReader.spans_into`` for a reader with ``into(a, b, dst)``: per span j, the copy, the
    zeros after it, and the screen (when ``screen[j]``); returns the j that may hold NaN/Inf."""
    found = RowScreen()
    out, screen = request.out, request.screen
    t_max = out.shape[1]
    for j, (p, a, b) in enumerate(zip(request.pos, request.begin.tolist(), request.end.tolist())):
        n = b - a
        if n > 0:
            dst = out[p, :n]
            into(a, b, dst)
            if screen is not None and screen[j]:
                found.add(j, dst.reshape(-1))
        if n < t_max:
            out[p, max(n, 0) :] = 0
    return found.suspects()


# A 1-D key (e.g. sparse labels) whose padded batch has at most this many values is filled with
# one vectorised gather instead of a copy and a fill per sequence (~60 numpy calls for 32
# sequences, more than the bytes cost).
SMALL_GATHER = 1 << 16


def gather_small(take: Callable[[np.ndarray], np.ndarray], request: SpanRequest) -> bool:
    """Fill rows ``pos`` of a small ``[B, T]`` padded array in one gather; ``take(rows)`` returns
    the dataset's values at global row numbers ``rows`` (any shape). False when ``out`` is not
    small and 1-D per frame, or when spans are to be screened (the caller copies row by row
    then)."""
    begin, end, out, pos = request.begin, request.end, request.out, request.pos
    if request.screen is not None or out.ndim != 2 or len(pos) * out.shape[1] > SMALL_GATHER:
        return False
    t_max = out.shape[1]
    if not t_max:  # every sequence empty: nothing to write
        return True
    rows = begin[:, None] + np.arange(t_max)  # [B, T] global row numbers
    valid = rows < end[:, None]
    # padding reads its own sequence's last row (an empty one's neighbour): a real row, zeroed below
    np.minimum(rows, np.maximum(end - 1, 0)[:, None], out=rows)
    values = take(rows)  # [B, T]
    values[~valid] = 0
    if isinstance(pos, range) and len(pos) == len(out):  # one file: the batch's rows in order
        out[...] = values
    else:
        out[np.asarray(pos, dtype=np.int64)] = values
    return True


class RowReader:
    """Reads row ranges of one dataset. Results are fresh, writable arrays (callers may transform
    them in place), with the dataset's dtype and shape ``[rows, *feature_shape]``."""

    shape: tuple[int, ...]  # the whole dataset's
    dtype: np.dtype
    # values at global row numbers (any shape), for readers that can gather a small 1-D batch
    take: Callable[[np.ndarray], np.ndarray] | None = None

    def rows(self, a: int, b: int) -> np.ndarray:
        raise NotImplementedError

    def spans(self, begin: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
        """Rows ``[begin[j], end[j])`` for every j, in the given order (duplicates allowed)."""
        return [self.rows(int(a), int(b)) for a, b in zip(begin, end)]

    def into(self, a: int, b: int, out: np.ndarray) -> None:
        """Rows ``[a, b)`` written into ``out`` (``[b - a, *feature_shape]``, this dtype)."""
        out[...] = self.rows(a, b)

    def spans_into(self, request: SpanRequest) -> list[int]:
        """Fill row ``pos[j]`` of the padded array ``out`` (``[B, T, *feature_shape]``) with rows
        ``[begin[j], end[j])`` followed by zeros, for every j: the batch is the destination, so no
        sequence is materialised on the way, and each row is written front to back in one pass.
        Spans with ``screen[j]`` (float data only) are screened for NaN/Inf right after their
        copy, while the bytes are in cache (``RowScreen``); returns the j that may hold some."""
        take = self.take
        if take is not None and gather_small(take, request):
            return []
        return into_each(self.into, request)


#: rows read at once by ``all_finite``: a ``dot`` over 1 MiB of mapped rows was the cheapest per
#: byte (256 KiB 1.17x its time, 4-16 MiB 1.02-1.04x)
SCREEN_BLOCK_BYTES = 1 << 20


def all_finite(reader: RowReader) -> bool:
    """Whether every value of ``reader``'s (float) dataset is finite: one ``dot`` per ~1 MiB of
    rows (``RowScreen``'s test; a block that fails it is checked exactly, so a square that
    overflows is no NaN/Inf here). A mapped dataset is read through its map, the whole chunk
    rows of a chunked one too (``ChunkedRows.value_runs``), anything else by ``rows``.

    >>> from seqloader.sources.hdf_read import MappedRows
    >>> a = np.ones((5, 2), np.float32)
    >>> all_finite(MappedRows(a)), a.__setitem__((3, 1), np.inf), all_finite(MappedRows(a))
    (True, None, False)
    """
    array = getattr(reader, "array", None)  # a mapped dataset: its rows as views of the map
    if array is not None:
        runs = [(0, reader.shape[0], array.reshape(-1))]
    else:
        value_runs = getattr(reader, "value_runs", None)
        runs = value_runs() if value_runs is not None else [(0, reader.shape[0], None)]
    row_values = max(1, math.prod(reader.shape[1:]))
    step = max(1, SCREEN_BLOCK_BYTES // (reader.dtype.itemsize * row_values))  # rows
    with np.errstate(over="ignore", invalid="ignore"):
        for a, b, flat in runs:
            for lo in range(a, b, step):
                hi = min(lo + step, b)
                if flat is None:
                    v = reader.rows(lo, hi).reshape(-1)
                else:
                    v = flat[(lo - a) * row_values : (hi - a) * row_values]
                if not math.isfinite(float(v.dot(v))) and not np.isfinite(v).all():
                    return False
    return True
