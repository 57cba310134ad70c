"""``ColumnStore``: per-sequence metadata of a corpus as one memory-mapped file of columns.

What every rank and every DataLoader worker on a node needs about every sequence (lengths per key,
tags, file bounds, where each sequence lies inside its file) is written once into one file and
memory-mapped by every process that opens it: the bytes sit once in the page cache of the node, not
once per rank or per worker, and no Python object exists per sequence. A corpus of 10^8 sequences
costs its columns' bytes on disk (about 4 bytes per sequence per int32 length column, 8 + tag bytes
per tag) and next to nothing in private memory.

One file, laid out as::

    b"SEQCOLS1"  column 0  padding  column 1  ...  header (JSON)  uint64 header length  b"SEQCOLS1"

(the header last, so a writer streams columns of any size straight to disk). The header names the store's ``identity`` (a string the builder derives from its inputs, e.g. size
and ``mtime_ns`` or ETag of every file read), free ``meta`` (JSON) and each column's dtype, shape
and byte offset (64-byte aligned). Columns are plain little-endian arrays; a strings column is two
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
import mmap
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from seqloader.errors import DataError
from seqloader.sources.hdf_layout import PackedTags

MAGIC = b"SEQCOLS1"
ALIGN = 64
VERSION = 1


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


Column = np.ndarray | StringColumn | ChunkedColumn


class StoredStrings(PackedTags):
    """A strings column of a ``ColumnStore``: ``PackedTags`` over the mapped bytes (so tag joins,
    hashes and ``take`` work unchanged), pickled as (store path, identity, name)."""

    __slots__ = ("_name", "_store")

    def __init__(self, store: ColumnStore, name: str) -> None:
        super().__init__(store.column(f"{name}.bytes"), store.column(f"{name}.offsets"))
        self._store, self._name = store, name

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_strings, (self._store, self._name))

    def __repr__(self) -> str:
        return f"StoredStrings({self._name!r}: {len(self)} strings, {len(self._buf)} bytes)"


def _reopen_strings(store: ColumnStore, name: str) -> StoredStrings:
    return StoredStrings(store, name)


class ColumnStore:
    """One memory-mapped column file (see the module docstring). ``store.column(name)`` is a
    read-only array view of the mapping; ``store.strings(name)`` a ``StoredStrings``;
    ``store.meta`` the builder's JSON metadata; ``store.identity`` what it was built from."""

    def __init__(self, path: str | os.PathLike, identity: str | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._map, header = _map(self.path)
        if identity is not None and header["identity"] != identity:
            raise StaleStore(
                f"column store {self.path!r} was built from other inputs (identity "
                f"{header['identity']!r}, expected {identity!r})"
            )
        self.identity: str = header["identity"]
        self.meta: dict[str, Any] = header["meta"]
        self._specs: dict[str, tuple[str, list[int], int]] = {
            name: (spec["dtype"], spec["shape"], spec["offset"])
            for name, spec in header["columns"].items()
        }
        self._views: dict[str, np.ndarray] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The stored column names (a strings column ``X`` shows as ``X.bytes`` and
        ``X.offsets``)."""
        return tuple(self._specs)

    def __contains__(self, name: str) -> bool:
        return name in self._specs or f"{name}.offsets" in self._specs

    def column(self, name: str) -> np.ndarray:
        """Column ``name`` as a read-only view of the mapped file (no copy)."""
        view = self._views.get(name)
        if view is None:
            if name not in self._specs:
                raise KeyError(f"column {name!r} is not in {self!r}; columns: {list(self._specs)}")
            dtype, shape, offset = self._specs[name]
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            if count == 0:
                view = np.zeros(shape, dtype=dt)
                view.flags.writeable = False
            else:
                view = np.frombuffer(self._map, dtype=dt, count=count, offset=offset)
                view = view.reshape(shape)
            self._views[name] = view
        return view

    def strings(self, name: str) -> StoredStrings:
        """Strings column ``name``: decoded one at a time, or a batch at once with ``take``."""
        return StoredStrings(self, name)

    def nbytes(self) -> int:
        """The file's size in bytes."""
        return len(self._map)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ColumnStore, (self.path, self.identity))

    def __repr__(self) -> str:
        return f"ColumnStore({self.path!r}; {len(self._specs)} columns)"


class StaleStore(DataError):
    """The file at a store's path was built from other inputs than expected."""


class StoreWriter:
    """Writes a store column by column, each in one or several chunks, straight into a temporary
    file (nothing of a 10^8-sequence corpus needs to sit in memory twice); ``close()`` appends the
    header and renames the file into place. ``write_store`` is the one-call form."""

    def __init__(
        self, path: str | os.PathLike, identity: str, meta: Mapping[str, Any] | None = None
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.identity, self.meta = identity, dict(meta or {})
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._tmp = f"{self.path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        self._fh = open(self._tmp, "wb")  # noqa: SIM115 - closed by close()/abort()
        self._fh.write(MAGIC)
        self._specs: dict[str, dict[str, Any]] = {}

    def add(self, name: str, column: Column) -> None:
        """Column ``name`` in one piece (a ``StringColumn`` adds ``NAME.bytes`` and
        ``NAME.offsets``)."""
        if isinstance(column, StringColumn):
            self.add(f"{name}.bytes", column.data)
            self.add(f"{name}.offsets", column.offsets)
            return
        if isinstance(column, ChunkedColumn):
            self.add_chunks(name, column.dtype, column.row_shape, column.chunks)
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
        for chunk in chunks:
            c = np.ascontiguousarray(chunk, dtype=dt)
            if c.shape[1:] != tuple(row_shape):
                raise ValueError(f"column {name!r}: chunk rows {c.shape[1:]} != {tuple(row_shape)}")
            self._fh.write(c.tobytes())
            rows += len(c)
        self._specs[name] = {"dtype": dt.str, "shape": [rows, *row_shape], "offset": offset}

    def close(self) -> ColumnStore:
        """Write the header, fsync, rename into place; the store, opened."""
        header = json.dumps(
            {
                "identity": self.identity,
                "meta": self.meta,
                "version": VERSION,
                "columns": self._specs,
            }
        ).encode()
        try:
            self._fh.write(header)
            self._fh.write(np.uint64(len(header)).astype("<u8").tobytes())
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
    meta: Mapping[str, Any] | None = None,
) -> ColumnStore:
    """Write ``columns`` to ``path`` atomically (temporary file, fsync, rename) and open it."""
    writer = StoreWriter(path, identity, meta)
    try:
        for name, col in columns.items():
            writer.add(name, col)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def open_or_build(
    path: str | os.PathLike,
    identity: str,
    build: Callable[[], tuple[Mapping[str, Column], Mapping[str, Any]]],
) -> tuple[ColumnStore, bool]:
    """The store at ``path`` built from ``identity``: opened when it is there, else built with
    ``build()`` -> (columns, meta) and written atomically, once per node however many processes
    ask at the same time (the others wait on ``PATH.lock``, then open it). Returns (store, whether
    this call built it)."""
    path = os.path.abspath(os.fspath(path))
    found = _try_open(path, identity)
    if found is not None:
        return found, False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _lock(f"{path}.lock"):
        found = _try_open(path, identity)  # built by another process while this one waited
        if found is not None:
            return found, False
        columns, meta = build()
        return write_store(path, identity, columns, meta), True


def _try_open(path: str, identity: str) -> ColumnStore | None:
    try:
        return ColumnStore(path, identity)
    except (FileNotFoundError, StaleStore, CorruptStore):
        return None


class CorruptStore(DataError):
    """The file is not a whole column store (rebuilt by ``open_or_build``)."""


def _map(path: str) -> tuple[mmap.mmap, dict[str, Any]]:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        tail = len(MAGIC) + 8
        if size < len(MAGIC) + tail or fh.read(len(MAGIC)) != MAGIC:
            raise CorruptStore(f"{path!r} is not a seqloader column store (bad magic)")
        fh.seek(size - tail)
        trailer = fh.read(tail)
        if trailer[8:] != MAGIC:
            raise CorruptStore(f"{path!r}: column store not complete (no trailer)")
        length = int(np.frombuffer(trailer[:8], dtype="<u8")[0])
        if length > size - tail - len(MAGIC):
            raise CorruptStore(f"{path!r}: column store header length {length} out of range")
        fh.seek(size - tail - length)
        try:
            header = json.loads(fh.read(length))
        except ValueError as e:
            raise CorruptStore(f"{path!r}: unreadable column store header ({e})") from e
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped, header


@contextlib.contextmanager
def _lock(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):  # no flock here: the atomic rename still holds
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
