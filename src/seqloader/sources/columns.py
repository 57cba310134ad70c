"""``ColumnStore``: per-sequence metadata of a corpus as one memory-mapped file of columns.

What every rank and every DataLoader worker on a node needs about every sequence (lengths per key,
tags, file bounds, where each sequence lies inside its file) is written once into one file and
memory-mapped by every process that opens it: the bytes sit once in the page cache of the node, not
once per rank or per worker, and no Python object exists per sequence. A corpus of 10^8 sequences
costs its columns' bytes on disk (about 4 bytes per sequence per int32 length column, 8 + tag bytes
per tag) and next to nothing in private memory.

One file, laid out as::

    b"SEQCOLS2"  column 0  padding  column 1  ...  sums  header (JSON)  uint64 header length
    uint64 header CRC  b"SEQCOLS2"

(the header last, so a writer streams columns of any size straight to disk). The header names the store's ``identity`` (a string the builder derives from its inputs, e.g. size
and ``mtime_ns`` or ETag of every file read), its ``format`` (the builder's version of its columns
and meta: a store of another format is never read as data, ``open_or_build`` rebuilds it), free
``meta`` (JSON) and each column's dtype, shape
and byte offset (64-byte aligned). Contents are checksummed (``column_sums``): an XXH3-64 per
64 KiB block of every column (the ``sums`` array, itself summed in the header; the trailer holds
the header's CRC-32): a process that maps the store checks the header, the sums and every column but the
``lazy`` ones (strings, and what the builder names, e.g. row offsets read a few rows at a time)
in full; those it checks per block on first use (``StoredStrings``, ``ColumnStore.rows``). A
damaged store is never served: ``open_or_build`` rebuilds one found damaged when mapped (with a
``DataWarning``), and a block found damaged later raises ``DamagedStore`` naming the file, the
column and the rows, and the command that rebuilds it. Columns are plain little-endian arrays; a strings column is two
of them, ``NAME.bytes`` (uint8, the utf-8 bytes of all strings) and ``NAME.offsets`` (int64
``[n + 1]``), read back as ``StoredStrings`` (a ``Sequence[str]`` that decodes a string only when
asked, and a batch's strings in one ``take``).

Building is atomic: the file is written under a temporary name in the same directory, fsynced and
renamed into place, under an advisory lock (``flock`` on ``PATH.lock``) so that processes racing
on a node build it once and the others wait and open the result; without the lock (a file system
without ``flock``) the rename still leaves one whole file. An existing file whose identity differs
from the expected one is stale: ``open_or_build`` rebuilds it.

Pickling a store (or a ``StoredStrings`` or a column view obtained through ``ColumnStore.column``
and kept by a source that pickles the store instead) pickles its path and identity: a spawned
worker maps the same file again, nothing is copied.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import mmap
import os
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqloader.errors import DataError, DataWarning
from seqloader.sources.column_sums import (
    BLOCK,
    BlockSums,
    block_count,
    block_sum,
    blocks_of_ranges,
    first_mismatch,
    seed,
)
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.tag_hash import CHUNK

MAGIC = b"SEQCOLS2"
#: what stores of earlier versions start with (listed and cleaned by ``seqloader cache``, rebuilt)
MAGICS = (MAGIC, b"SEQCOLS1")
ALIGN = 64
VERSION = 2
#: bytes summed and then written at once: the write's copy into the page cache reads them from the
#: core's cache, where the sum has just left them, not from memory (a block of the metadata store
#: is tens of MiB)
SLICE = 1 << 19
#: False: no content checks (the header's CRC and layout are still checked); for measuring what
#: the checks cost, never for running
CHECK_CONTENTS = True
#: what a damaged store's message tells to run (a store's ``meta["rebuild"]`` can say more)
REBUILD = (
    "delete it (rm {path!r}) and run again: the next open rebuilds it from the data (or rebuild "
    "the node's stores ahead of the job with `seqloader prepare DATA [loader options]`; "
    "`seqloader cache` lists them)"
)
SUMS = ".sums"  # the name the block sums are checked under


def narrow_lengths(lengths: np.ndarray) -> np.ndarray:
    """``lengths`` as int32 when every value fits, else int64: half the bytes for the usual case."""
    a = np.asarray(lengths)
    if a.size == 0 or (int(a.min()) >= 0 and int(a.max()) < 2**31):
        return a.astype(np.int32, copy=False)
    return a.astype(np.int64, copy=False)


def identity_of_files(paths: Iterable[str], extra: str = "") -> str:
    """An identity of local files: a hash of each path's size and ``mtime_ns`` (no data read), so a
    file replaced or rewritten gives another identity."""
    h = hashlib.sha256(f"v{VERSION}\0{extra}\0".encode())
    for p in paths:
        st = os.stat(p)
        h.update(f"{os.path.abspath(p)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


class StringColumn:
    """Strings to be stored: the utf-8 bytes of all of them and int64 offsets ``[n + 1]``."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data = np.ascontiguousarray(data, dtype=np.uint8)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> StringColumn:
        encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    @classmethod
    def from_bytes(cls, items: Sequence[bytes]) -> StringColumn:
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in items], out=offsets[1:])
        return cls(np.frombuffer(b"".join(items), dtype=np.uint8), offsets)


class ChunkedColumn:
    """A column to be stored chunk after chunk (its rows concatenated), so that the writer never
    holds it whole: ``dtype``, the shape of one row, and the chunks (read once, when written)."""

    def __init__(
        self, dtype: np.dtype | type, row_shape: Sequence[int], chunks: Iterable[np.ndarray]
    ) -> None:
        self.dtype, self.row_shape, self.chunks = np.dtype(dtype), tuple(row_shape), chunks


class FilledColumn:
    """A column of known size filled while *later* columns are written: the writer reserves its
    bytes where it comes in the file and hands it a place to write to, and the generators of the
    columns after it ``write`` its chunks in order (a value computed as another column streams:
    each tag's hash while the tag bytes are written, with no second pass and no copy of ``n``
    in memory). ``write_store`` refuses a store whose filled columns did not get every row.

    >>> import tempfile
    >>> hashes = FilledColumn(np.uint64, 3)
    >>> def values():
    ...     for block in (np.arange(2), np.arange(2, 3)):
    ...         hashes.write(block * 10)
    ...         yield block
    >>> store = write_store(
    ...     tempfile.mkdtemp() + "/s.cols", "id",
    ...     {"hash": hashes, "value": ChunkedColumn(np.int64, (), values())},
    ... )
    >>> store.column("hash").tolist()
    [0, 10, 20]
    """

    def __init__(self, dtype: np.dtype | type, rows: int, row_shape: Sequence[int] = ()) -> None:
        self.dtype, self.rows, self.row_shape = np.dtype(dtype), int(rows), tuple(row_shape)
        self._sink: _Reserved | None = None

    def write(self, chunk: np.ndarray) -> None:
        """The next rows of the column (the writer must have reserved it: it comes earlier)."""
        if self._sink is None:
            raise RuntimeError("FilledColumn.write before the writer reserved the column")
        self._sink.write(chunk)


class _Reserved:
    """The bytes of a ``FilledColumn`` in the temporary file, written with ``pwrite`` in order,
    summed as they come."""

    def __init__(self, writer: StoreWriter, name: str, column: FilledColumn, offset: int) -> None:
        self.name, self.column, self.offset = name, column, offset
        self._writer, self._written = writer, 0
        self._dtype = column.dtype.newbyteorder("<")
        self._sums = BlockSums(seed(writer.identity, name))

    def write(self, chunk: np.ndarray) -> None:
        c = np.ascontiguousarray(chunk, dtype=self._dtype)
        if c.shape[1:] != self.column.row_shape or self._written + len(c) > self.column.rows:
            raise ValueError(
                f"column {self.name!r}: rows {c.shape} after {self._written} do not fit "
                f"{self.column.rows} rows of {self.column.row_shape}"
            )
        data = c.reshape(-1).view(np.uint8).data
        pos = self.offset + self._written * self._dtype.itemsize * math.prod(c.shape[1:])
        fd = self._writer._fh.fileno()
        for lo in range(0, len(data), SLICE):  # each slice written while in cache
            piece = data[lo : lo + SLICE]
            self._sums.update(piece)
            done = 0
            while done < len(piece):  # pwrite may write less than asked
                done += os.pwrite(fd, piece[done:], pos + lo + done)
        self._written += len(c)

    def finish(self) -> list[int]:
        if self._written != self.column.rows:
            raise ValueError(
                f"column {self.name!r}: {self._written} of its {self.column.rows} rows were "
                "written (the columns after it did not fill it)"
            )
        return self._sums.finish()


Column = np.ndarray | StringColumn | ChunkedColumn | FilledColumn
#: a store's meta, or a function giving it once the columns are written (``write_store``)
Meta = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


class StoredStrings(PackedTags):
    """A strings column of a ``ColumnStore``: ``PackedTags`` over the mapped bytes (so tag joins,
    hashes and ``take`` work unchanged), pickled as (store path, identity, name). What a string
    is read from is checked first: per block for ``take`` and single strings, in full for
    ``buffers``, iteration and hashing. A store that kept the hash values more than one string
    has (a uint64 column ``NAME.repeats``) serves them from there."""

    __slots__ = ("_columns", "_name", "_store")

    def __init__(self, store: ColumnStore, name: str) -> None:
        super().__init__(store.raw_column(f"{name}.bytes"), store.raw_column(f"{name}.offsets"))
        self._store, self._name = store, name
        self._columns = (f"{name}.offsets", f"{name}.bytes")  # named once: checked per batch

    def _check(self, indices: np.ndarray) -> None:
        """Check the blocks that strings ``indices`` are read from (their offsets, their bytes)."""
        store = self._store
        off_name, bytes_name = self._columns
        if store.checked(off_name) and store.checked(bytes_name):
            return
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        store.check_rows(off_name, idx, idx + 2)
        store.check_rows(bytes_name, self._off[idx], self._off[idx + 1])

    def _check_all(self) -> None:
        self._store.column(f"{self._name}.offsets")
        self._store.column(f"{self._name}.bytes")

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        self._check_all()
        return super().buffers()

    def raw(self, index: int) -> bytes:
        self._check(np.array([index], dtype=np.int64))
        return super().raw(index)

    def take(self, indices: np.ndarray) -> list[str]:
        self._check(np.asarray(indices))
        return super().take(indices)

    def __iter__(self) -> Iterator[str]:
        self._check_all()
        return super().__iter__()

    def hashes(self, block: int = CHUNK) -> np.ndarray:
        """The strings' hashes, from bytes checked in full first."""
        self._check_all()
        return super().hashes(block)

    def repeats(self) -> np.ndarray:
        """The kept repeated hash values where the store has them (``NAME.repeats``, found as
        the hashes were written: a few values, checked in full), else found from the hashes."""
        kept = f"{self._name}.repeats"
        if kept in self._store.names:
            return self._store.column(kept)
        return super().repeats()

    def max_bytes(self, block: int = 1 << 22) -> int:
        self._store.column(f"{self._name}.offsets")
        return super().max_bytes(block)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_strings, (self._store, self._name))

    def __repr__(self) -> str:
        return f"StoredStrings({self._name!r}: {len(self)} strings, {len(self._buf)} bytes)"


def _reopen_strings(store: ColumnStore, name: str) -> StoredStrings:
    return StoredStrings(store, name)


class CheckedRows:
    """A column read a few rows at a time (``ColumnStore.rows``): ``rows[i]``, ``rows[a:b]`` and
    ``rows[indices]`` (an integer array) check the blocks those rows lie in first (a boolean
    mask, the whole column); ``np.asarray(rows)`` and any other key (``True``, ``...``, a tuple)
    check the whole column."""

    def __init__(self, store: ColumnStore, name: str) -> None:
        self._store, self._name = store, name
        self._view = store.raw_column(name)
        self.dtype, self.shape = self._view.dtype, self._view.shape

    def __len__(self) -> int:
        return len(self._view)

    def __getitem__(self, key: int | slice | np.ndarray) -> Any:
        if isinstance(key, slice):
            a, b, step = key.indices(len(self._view))
            lo, hi = (a, b) if step > 0 else (b + 1, a + 1)  # the rows it covers
            self._store.check_span(self._name, lo, max(lo, hi))
        elif isinstance(key, np.ndarray | list):
            at = np.asarray(key)
            if at.dtype == bool:
                self._store.column(self._name)
            else:
                self._store.check_items(self._name, at)
        elif isinstance(key, int | np.integer) and not isinstance(key, bool):
            i = int(key) + (len(self._view) if int(key) < 0 else 0)
            self._store.check_span(self._name, i, i + 1)
        else:  # True (the whole column, a new axis), ..., None, a tuple: all of it checked
            self._store.column(self._name)
        return self._view[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        full = self._store.column(self._name)
        return full if dtype is None else full.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return (CheckedRows, (self._store, self._name))

    def __repr__(self) -> str:
        return f"CheckedRows({self._name!r} of {self._store!r})"


class ColumnStore:
    """One memory-mapped column file (see the module docstring). ``store.column(name)`` is a
    read-only array view of the mapping (checked in full on first use); ``store.rows(name)`` the
    same, checked per block as rows are read; ``store.strings(name)`` a ``StoredStrings``;
    ``store.meta`` the builder's JSON metadata; ``store.identity`` what it was built from.
    Mapping it checks the header, the block sums and every column that is not ``lazy``."""

    def __init__(
        self,
        path: str | os.PathLike,
        identity: str | None = None,
        format: str | None = None,
        defer: Iterable[str] = (),
    ) -> None:
        """``identity``, ``format``: what the store must have been built from and in (else
        ``StaleStore``; ``StaleFormat`` for a format this reader does not read). ``defer``:
        columns this reader reads a few rows at a time or not at all (through ``rows``), checked
        per block on first use as the ``lazy`` ones are, instead of in full now."""
        self.path = os.path.abspath(os.fspath(path))
        self._map, header, data_end = _map(self.path)
        if identity is not None and header["identity"] != identity:
            raise StaleStore(
                f"column store {self.path!r} was built from other inputs (identity "
                f"{header['identity']!r}, expected {identity!r})"
            )
        #: what its builder wrote it as (``open_or_build``'s ``format``; "" before stores said)
        self.format: str = str(header.get("format", ""))
        if format is not None and self.format and self.format != format:
            raise StaleFormat(
                f"column store {self.path!r} is of format {self.format!r}, and this seqloader "
                f"reads {format!r} there: none of it is read as data (it is rebuilt in this "
                f"format; `seqloader cache --clean --superseded` removes the other)",
                self.format,
            )
        self.identity: str = header["identity"]
        self.meta: dict[str, Any] = header["meta"]
        self._specs = _layout(self.path, header, data_end)
        self._views: dict[str, np.ndarray] = {}
        self._checked: dict[str, np.ndarray] = {}  # name -> bool [blocks] checked here
        self._whole: set[str] = set()  # columns checked in full in this process
        self._sums = self._mapped_sums(header)
        self._defer = tuple(defer)
        lazy = set(header.get("lazy", ())) | set(self._defer)
        for name in self._specs:
            if name not in lazy:
                self.column(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The stored column names (a strings column ``X`` shows as ``X.bytes`` and
        ``X.offsets``)."""
        return tuple(self._specs)

    def __contains__(self, name: str) -> bool:
        return name in self._specs or f"{name}.offsets" in self._specs

    def raw_column(self, name: str) -> np.ndarray:
        """Column ``name`` as a view of the mapping, *not checked*: for readers that check the
        rows they serve (``StoredStrings``, ``CheckedRows``) through ``check_rows``."""
        view = self._views.get(name)
        if view is None:
            if name not in self._specs:
                raise KeyError(f"column {name!r} is not in {self!r}; columns: {list(self._specs)}")
            spec = self._specs[name]
            if spec.count == 0:
                view = np.zeros(spec.shape, dtype=spec.dtype)
                view.flags.writeable = False
            else:
                view = np.frombuffer(self._map, spec.dtype, spec.count, spec.offset)
                view = view.reshape(spec.shape)
            self._views[name] = view
        return view

    def column(self, name: str) -> np.ndarray:
        """Column ``name`` as a read-only view of the mapped file (no copy), its contents checked
        in full the first time this process asks for it."""
        view = self.raw_column(name)
        if name not in self._whole:
            spec = self._specs[name]
            self._check_blocks(name, np.arange(block_count(spec.nbytes), dtype=np.int64))
            self._whole.add(name)
        return view

    def rows(self, name: str) -> CheckedRows:
        """Column ``name`` read a few rows at a time, each block checked on first use."""
        return CheckedRows(self, name)

    def checked(self, name: str) -> bool:
        """Whether column ``name`` is checked in full in this process."""
        return name in self._whole

    def check_rows(self, name: str, lo: np.ndarray, hi: np.ndarray) -> None:
        """Check the blocks of column ``name`` that rows ``[lo, hi)`` (arrays) lie in."""
        if name in self._whole:
            return
        spec = self._specs[name]
        lo = np.asarray(lo, dtype=np.int64) * spec.row_bytes
        hi = np.asarray(hi, dtype=np.int64) * spec.row_bytes
        self._check_blocks(name, blocks_of_ranges(lo, np.minimum(hi, spec.nbytes)))

    def check_items(self, name: str, at: np.ndarray) -> None:
        """``check_rows`` of rows ``at`` (any integer array, negative counting from the end), in
        one pass over them and the column's blocks (no sort: a rank's draw of a bucket index's
        members is 10^5 positions)."""
        if name in self._whole or not CHECK_CONTENTS or at.size == 0:
            return
        spec = self._specs[name]
        rows = spec.shape[0] if spec.shape else 0
        at = np.asarray(at, dtype=np.int64).reshape(-1)
        at = np.where(at < 0, at + rows, at)
        if int(at.min()) < 0 or int(at.max()) >= rows:
            raise IndexError(f"rows out of range for column {name!r} of {rows} rows")
        if spec.nbytes == 0:
            return
        if spec.row_bytes > BLOCK:  # a row over three blocks or more: every block between
            self.check_rows(name, at, at + 1)
            return
        touched = np.zeros(block_count(spec.nbytes), dtype=bool)
        touched[at * spec.row_bytes // BLOCK] = True
        touched[((at + 1) * spec.row_bytes - 1) // BLOCK] = True
        done = self._checked.get(name)
        if done is not None:
            touched &= ~done
        self._check_blocks(name, np.flatnonzero(touched))

    def check_span(self, name: str, a: int, b: int) -> None:
        """``check_rows`` of one range ``[a, b)``, with no array made once its blocks are checked
        (a file's row offsets are sliced per batch and per sequence read)."""
        if name in self._whole:
            return
        spec = self._specs[name]
        lo, hi = a * spec.row_bytes, min(b * spec.row_bytes, spec.nbytes)
        if hi <= lo:
            return
        first, last = lo // BLOCK, (hi - 1) // BLOCK + 1
        done = self._checked.get(name)
        if done is None or not (done[first] if last - first == 1 else done[first:last].all()):
            self._check_blocks(name, np.arange(first, last, dtype=np.int64))

    def _check_blocks(self, name: str, blocks: np.ndarray) -> None:
        if not CHECK_CONTENTS or len(blocks) == 0:
            return
        spec = self._specs[name]
        done = self._checked.get(name)
        if done is None:
            done = self._checked[name] = np.zeros(block_count(spec.nbytes), dtype=bool)
        todo = blocks[~done[blocks]]
        if len(todo) == 0:
            return
        column = memoryview(self._map)[spec.offset : spec.offset + spec.nbytes]
        sums = self._sums[spec.first_block + todo]
        bad = first_mismatch(column, todo, sums, seed(self.identity, name))
        if bad is not None:
            raise self._damaged(name, bad)
        done[todo] = True
        if done.all():  # every block checked: the column is, and reads skip the check
            self._whole.add(name)

    def _damaged(self, name: str, block: int) -> DamagedStore:
        spec = self._specs[name]
        a, b = block * BLOCK, min(spec.nbytes, (block + 1) * BLOCK)
        per_row = max(1, spec.row_bytes)
        rows = f"rows {a // per_row}..{(b - 1) // per_row}"
        fix = str(self.meta.get("rebuild", REBUILD)) if isinstance(self.meta, dict) else REBUILD
        return DamagedStore(
            f"column store {self.path!r}, column {name!r}: bytes {a}..{b - 1} ({rows}) differ "
            "from what was written (checksum mismatch): the file changed after it was built, so "
            "nothing of it is served. It is this node's cache built from the data, not the data "
            f"files: those are not at fault. Fix: {fix.format(path=self.path)}",
            self.path,
            name,
        )

    def _mapped_sums(self, header: Mapping[str, Any]) -> np.ndarray:
        """The block sums (checked against the header's sum of them)."""
        spec = header["sums"]
        count = int(spec["count"])
        sums = np.frombuffer(self._map, "<u8", count, int(spec["offset"])) if count else None
        if sums is None:
            return np.zeros(0, np.uint64)
        if CHECK_CONTENTS and block_sum(sums.data, seed(self.identity, SUMS)) != spec["sum"]:
            raise DamagedStore(
                f"column store {self.path!r}: its block sums differ from what was written "
                "(checksum mismatch): the file changed after it was built, so nothing of it is "
                f"served. Fix: {REBUILD.format(path=self.path)}",
                self.path,
                SUMS,
            )
        return sums

    def byte_range(self, name: str) -> tuple[int, int]:
        """(offset, byte count) of column ``name`` in the file.

        >>> import tempfile
        >>> store = write_store(tempfile.mkdtemp() + "/s.cols", "id", {"a": np.arange(3)})
        >>> store.byte_range("a")
        (64, 24)
        """
        spec = self._specs[name]
        return spec.offset, spec.nbytes

    def check_all(self) -> None:
        """Check every column in full (``DamagedStore`` at the first damaged block)."""
        for name in self._specs:
            self.column(name)

    def strings(self, name: str) -> StoredStrings:
        """Strings column ``name``: decoded one at a time, or a batch at once with ``take``."""
        return StoredStrings(self, name)

    def nbytes(self) -> int:
        """The file's size in bytes."""
        return len(self._map)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remap, (self.path, self.identity, self._defer))

    def __repr__(self) -> str:
        return f"ColumnStore({self.path!r}; {len(self._specs)} columns)"


def _remap(path: str, identity: str, defer: tuple[str, ...]) -> ColumnStore:
    """A store unpickled (a spawned DataLoader worker maps it again by path): one removed since
    it was mapped is a ``DataError`` naming it and the fix, not a bare ``FileNotFoundError``."""
    try:
        return ColumnStore(path, identity, None, defer)
    except FileNotFoundError:
        raise DataError(
            f"column store {path!r} is gone: it was removed after this job mapped it (`seqloader "
            "cache --clean` removes node stores no lock holds; a mapped store holds none), and a "
            "process that maps it again by path (a spawned DataLoader worker) cannot; restart "
            "the job (it builds the store again), and clean the cache between jobs"
        ) from None


class StaleStore(DataError):
    """The file at a store's path was built from other inputs than expected."""


class StaleFormat(StaleStore):
    """The file at a store's path was written in another format (``found``) than its reader
    reads: by another version of seqloader, say. Never read as data; ``open_or_build`` rebuilds
    it with a ``DataWarning``."""

    def __init__(self, message: str, found: str) -> None:
        super().__init__(message)
        self.found = found

    def __reduce__(self) -> tuple[Any, ...]:  # whole across processes (a worker's error)
        return (type(self), (str(self), self.found))


class StoreWriter:
    """Writes a store column by column, each in one or several chunks, straight into a temporary
    file (nothing of a 10^8-sequence corpus needs to sit in memory twice); ``close()`` appends the
    header and renames the file into place. ``write_store`` is the one-call form."""

    def __init__(
        self,
        path: str | os.PathLike,
        identity: str,
        meta: Mapping[str, Any] | None = None,
        lazy: Iterable[str] = (),
        format: str = "",
    ) -> None:
        """``lazy``: prefixes of the columns that are read a few rows at a time (through
        ``ColumnStore.rows``), checked per block on first use instead of when mapped; strings
        columns always are. ``format``: what the columns and meta are (the builder's version
        of them), written into the header (``ColumnStore.format``)."""
        self.path = os.path.abspath(os.fspath(path))
        self.identity, self.meta, self.format = identity, dict(meta or {}), format
        self._lazy_prefixes = tuple(lazy)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._tmp = f"{self.path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        self._fh = open(self._tmp, "wb")  # noqa: SIM115 - closed by close()/abort()
        self._fh.write(MAGIC)
        self._specs: dict[str, dict[str, Any]] = {}
        self._sums: list[int] = []
        self._lazy: list[str] = []
        self._reserved: list[_Reserved] = []

    def add(self, name: str, column: Column) -> None:
        """Column ``name`` in one piece (a ``StringColumn`` adds ``NAME.bytes`` and
        ``NAME.offsets``)."""
        if isinstance(column, StringColumn):
            self.add(f"{name}.bytes", column.data)
            self.add(f"{name}.offsets", column.offsets)
            self._lazy += [f"{name}.bytes", f"{name}.offsets"]
            return
        if isinstance(column, ChunkedColumn):
            self.add_chunks(name, column.dtype, column.row_shape, column.chunks)
            return
        if isinstance(column, FilledColumn):
            self.reserve(name, column)
            return
        a = np.ascontiguousarray(column)
        self.add_chunks(name, a.dtype, a.shape[1:], [a])

    def add_chunks(
        self,
        name: str,
        dtype: np.dtype | type,
        row_shape: Sequence[int],
        chunks: Iterable[np.ndarray],
    ) -> None:
        """Column ``name`` of ``dtype`` and rows of ``row_shape``, written chunk after chunk
        (the chunks' rows concatenated)."""
        if name in self._specs:
            raise ValueError(f"column {name!r} written twice")
        dt = np.dtype(dtype).newbyteorder("<")
        if dt.hasobject:
            raise TypeError(f"column {name!r}: object arrays cannot be stored")
        pos = self._fh.tell()
        offset = -(-pos // ALIGN) * ALIGN
        self._fh.write(b"\0" * (offset - pos))
        rows = 0
        sums = BlockSums(seed(self.identity, name))
        for chunk in chunks:
            c = np.ascontiguousarray(chunk, dtype=dt)
            if c.shape[1:] != tuple(row_shape):
                raise ValueError(f"column {name!r}: chunk rows {c.shape[1:]} != {tuple(row_shape)}")
            data = c.reshape(-1).view(np.uint8).data
            for lo in range(0, len(data), SLICE):  # each slice written while in cache
                piece = data[lo : lo + SLICE]
                sums.update(piece)
                self._fh.write(piece)
            rows += len(c)
        self._specs[name] = {
            "dtype": dt.str,
            "shape": [rows, *row_shape],
            "offset": offset,
            "block0": len(self._sums),
        }
        self._sums += sums.finish()
        if self._lazy_prefixes and name.startswith(self._lazy_prefixes):
            self._lazy.append(name)

    def reserve(self, name: str, column: FilledColumn) -> None:
        """Column ``name``'s bytes kept free here, filled through ``column.write`` while the
        columns after it are written (``FilledColumn``)."""
        if name in self._specs:
            raise ValueError(f"column {name!r} written twice")
        dt = column.dtype.newbyteorder("<")
        pos = self._fh.tell()
        offset = -(-pos // ALIGN) * ALIGN
        nbytes = column.rows * dt.itemsize * math.prod(column.row_shape)
        self._fh.seek(offset + nbytes)  # the gap is filled by pwrite (a hole until then)
        self._specs[name] = {"dtype": dt.str, "shape": [column.rows, *column.row_shape]}
        self._specs[name].update(offset=offset, block0=-1)
        column._sink = _Reserved(self, name, column, offset)
        self._reserved.append(column._sink)
        if self._lazy_prefixes and name.startswith(self._lazy_prefixes):
            self._lazy.append(name)

    def close(self) -> ColumnStore:
        """Write the header, fsync, rename into place; the store, opened."""
        try:
            for sink in self._reserved:  # every filled column complete, its sums after the rest
                self._specs[sink.name]["block0"] = len(self._sums)
                self._sums += sink.finish()
            pos = self._fh.tell()
            offset = -(-pos // ALIGN) * ALIGN
            self._fh.write(b"\0" * (offset - pos))
            sums = np.array(self._sums, dtype="<u8")
            self._fh.write(sums.tobytes())
            header = json.dumps(
                {
                    "identity": self.identity,
                    "format": self.format,
                    "meta": self.meta,
                    "version": VERSION,
                    "columns": self._specs,
                    "lazy": self._lazy,
                    "block": BLOCK,
                    "hash": "xxh3_64",
                    "sums": {
                        "offset": offset,
                        "count": len(sums),
                        "sum": block_sum(sums.tobytes(), seed(self.identity, SUMS)),
                    },
                }
            ).encode()
            self._fh.write(header)
            self._fh.write(np.array([len(header), zlib.crc32(header)], "<u8").tobytes())
            self._fh.write(MAGIC)
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self._tmp, self.path)
        finally:
            self.abort()
        return ColumnStore(self.path, self.identity)

    def abort(self) -> None:
        """Drop the temporary file (nothing appears under the store's path)."""
        if not self._fh.closed:
            self._fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)


def write_store(
    path: str | os.PathLike,
    identity: str,
    columns: Mapping[str, Column],
    meta: Meta | None = None,
    lazy: Iterable[str] = (),
    format: str = "",
) -> ColumnStore:
    """Write ``columns`` to ``path`` atomically (temporary file, fsync, rename) and open it
    (``lazy``, ``format``: see ``StoreWriter``). ``meta`` may be a function, called once every
    column is written (a meta computed from chunks as they were written: a digest, say)."""
    writer = StoreWriter(path, identity, None if callable(meta) else meta, lazy, format)
    try:
        for name, col in columns.items():
            writer.add(name, col)
        if callable(meta):
            writer.meta = dict(meta())
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def open_or_build(
    path: str | os.PathLike,
    identity: str,
    build: Callable[[], tuple[Mapping[str, Column], Meta]],
    lazy: Iterable[str] = (),
    format: str = "",
    defer: Iterable[str] = (),
) -> tuple[ColumnStore, bool]:
    """The store at ``path`` built from ``identity``: opened when it is there, else built with
    ``build()`` -> (columns, meta) and written atomically, once per node however many processes
    ask at the same time (the others wait on ``PATH.lock``, then open it). A store found damaged
    when mapped (a changed byte in its header, sums or a column checked then), or written in
    another ``format`` than this one (the builder's version of its columns and meta, recorded in
    the header), is rebuilt, with a ``DataWarning`` naming it; nothing of it is read as data.
    Returns (store, whether this call built it). ``lazy``: see ``StoreWriter``; ``defer``: see
    ``ColumnStore`` (a store found; one built here was checked in full as it was written)."""
    path = os.path.abspath(os.fspath(path))
    defer = tuple(defer)
    found, problem = _try_open(path, identity, format, defer)
    if found is not None:
        return found, False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _lock(f"{path}.lock"):
        # built by another process while this waited
        found, again = _try_open(path, identity, format, defer)
        if found is not None:
            return found, False
        columns, meta = build()
        store = write_store(path, identity, columns, meta, lazy, format)
    problem = again if again is not None else problem
    if isinstance(problem, DamagedStore):
        warnings.warn(
            f"column store {path!r}, column {problem.column!r}: its contents differed from what "
            "was written (the file changed after it was built; this node's cache, not the data "
            "files): rebuilt from the data now, nothing of the damaged file was served",
            DataWarning,
            stacklevel=3,
        )
    elif problem is not None:
        warnings.warn(
            f"column store {path!r} was of format {problem.found!r} (written by another version "
            f"of seqloader), not {format!r}: rebuilt from the data in this format now, nothing of "
            "it was read",
            DataWarning,
            stacklevel=3,
        )
    return store, True


def _try_open(
    path: str, identity: str, format: str = "", defer: tuple[str, ...] = ()
) -> tuple[ColumnStore | None, DamagedStore | StaleFormat | None]:
    """(the store, None), or (None, why it is not read: damaged, of another format; None when it
    is missing, stale or cut)."""
    try:
        return ColumnStore(path, identity, format or None, defer), None
    except (DamagedStore, StaleFormat) as e:
        return None, e
    except (FileNotFoundError, StaleStore, CorruptStore):
        return None, None


class CorruptStore(DataError):
    """The file is not a whole column store (rebuilt by ``open_or_build``)."""


class DamagedStore(CorruptStore):
    """A store's contents differ from what was written (``path``, ``column``): never served;
    rebuilt by ``open_or_build`` when found at mapping, else refused with the command that
    rebuilds it."""

    def __init__(self, message: str, path: str, column: str) -> None:
        super().__init__(message)
        self.path, self.column = path, column

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole: a DataLoader worker's refusal reaches the training loop as itself
        (else unpickling it failed with a ``TypeError`` about these arguments)."""
        return (type(self), (str(self), self.path, self.column))


@dataclass(frozen=True)
class _Spec:
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int
    count: int  # items
    nbytes: int
    first_block: int  # of its sums

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape[1:])


def _map(path: str) -> tuple[mmap.mmap, dict[str, Any], int]:
    """The mapping, the header (its CRC checked) and where the header starts."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        tail = 16 + len(MAGIC)
        first = fh.read(len(MAGIC))
        if first != MAGIC:
            old = first in MAGICS
            why = "written by an earlier seqloader" if old else "bad magic"
            raise CorruptStore(f"{path!r} is not a seqloader column store of this version ({why})")
        if size < len(MAGIC) + tail:
            raise CorruptStore(f"{path!r}: column store not complete (no trailer)")
        fh.seek(size - tail)
        trailer = fh.read(tail)
        if trailer[16:] != MAGIC:
            raise CorruptStore(f"{path!r}: column store not complete (no trailer)")
        length, crc = (int(v) for v in np.frombuffer(trailer[:16], dtype="<u8"))
        if length > size - tail - len(MAGIC):
            raise DamagedStore(
                f"{path!r}: column store header length {length} out of range: the file changed "
                f"after it was built. Fix: {REBUILD.format(path=path)}",
                path,
                "header",
            )
        fh.seek(size - tail - length)
        raw = fh.read(length)
        if zlib.crc32(raw) != crc:
            raise DamagedStore(
                f"column store {path!r}: its header differs from what was written (checksum "
                f"mismatch): the file changed after it was built, so nothing of it is served. "
                f"Fix: {REBUILD.format(path=path)}",
                path,
                "header",
            )
        try:
            header = json.loads(raw)
        except ValueError as e:
            raise CorruptStore(f"{path!r}: unreadable column store header ({e})") from e
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped, header, size - tail - length


def _layout(path: str, header: Mapping[str, Any], data_end: int) -> dict[str, _Spec]:
    """The columns' places, each checked to lie within the file's data (a header that says
    otherwise is refused naming the column, not left to fail as a bare buffer error)."""
    specs: dict[str, _Spec] = {}
    sums = header["sums"]
    blocks = int(sums["count"])
    if int(sums["offset"]) + 8 * blocks > data_end:
        raise DamagedStore(
            f"column store {path!r}: its block sums lie beyond its data. Fix: "
            f"{REBUILD.format(path=path)}",
            path,
            SUMS,
        )
    for name, spec in header["columns"].items():
        dtype = np.dtype(spec["dtype"])
        shape = tuple(int(d) for d in spec["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        offset, nbytes, first = int(spec["offset"]), count * dtype.itemsize, int(spec["block0"])
        inside = min(shape, default=0) >= 0 and offset >= len(MAGIC)
        if not inside or offset + nbytes > data_end or first + block_count(nbytes) > blocks:
            raise DamagedStore(
                f"column store {path!r}, column {name!r}: the header says {shape} of "
                f"{dtype} at byte {offset}, beyond the file's {data_end} bytes of data: the "
                f"file changed after it was built, so nothing of it is served. Fix: "
                f"{REBUILD.format(path=path)}",
                path,
                name,
            )
        specs[name] = _Spec(dtype, shape, offset, count, nbytes, first)
    return specs


@contextlib.contextmanager
def _lock(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):  # no flock here: the atomic rename still holds
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
