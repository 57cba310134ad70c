"""Chunked, unfiltered HDF datasets read straight from the file's bytes.

RETURNN's ``SimpleHDFWriter`` makes resizable datasets whose chunks h5py sizes from the first
sequence (e.g. 173x10 float32): one h5py slice of a 600-frame sequence then walks ~20 chunks through
HDF5's chunk index and costs ~150 µs, which caps any h5py-based reader near 6-7k sequences/s on
one core (docs/performance.md). Uncompressed chunks are stored whole, as plain arrays, at byte
offsets HDF5 reports; with those offsets indexed once per process, a sequence is a few numpy copies
out of an mmap of the file (same bytes, ~1.5x faster).

The index costs ~8 bytes and ~1.3 µs per chunk to build (``DatasetID.chunk_iter``). Indexes are
cached per process by file identity (path, inode, size, mtime and ctime: a file rewritten in place
with its size and mtime restored may have other chunk offsets, and only its ctime says so), and
``index_files`` builds them in the trainer process before DataLoader workers fork, so forked
workers inherit them (copy-on-write) instead of each paying the build before its first batch;
spawned workers build their own.
Datasets with more than ``MAX_INDEXED_CHUNKS`` chunks, filters (compression), non-native byte
order, other than 1 or 2 axes, or unallocated chunks (fill values) are left to h5py.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Sequence

import h5py
import numpy as np

from seqloader.sources.padded_rows import RowReader

MAX_INDEXED_CHUNKS = 2_000_000  # ~2.6 s and 16 MB of index per process at most


def chunk_index(dset: h5py.Dataset) -> np.ndarray | None:
    """Byte offset of every chunk, int64 with the chunk grid's shape, or None when this dataset
    must be read through h5py (see the module docstring)."""
    if dset.chunks is None or dset.ndim not in (1, 2) or dset.size == 0:
        return None
    plist = dset.id.get_create_plist()
    if plist.get_nfilters() != 0 or plist.get_external_count() != 0:
        return None
    tid = dset.id.get_type()
    if tid.get_class() not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        return None
    dtype = np.dtype(dset.dtype)
    if not dtype.isnative or tid.get_size() != dtype.itemsize or np.dtype(tid.dtype) != dtype:
        return None
    grid = tuple(-(-s // c) for s, c in zip(dset.shape, dset.chunks))
    n = math.prod(grid)
    if n > MAX_INDEXED_CHUNKS or dset.id.get_num_chunks() != n:
        return None
    chunk_bytes = math.prod(dset.chunks) * dtype.itemsize
    coords: list[tuple[int, ...]] = []
    offsets: list[int] = []
    sizes: list[int] = []

    def visit(info) -> None:  # ~1 µs per chunk in HDF5 + this: keep it minimal
        coords.append(info.chunk_offset)
        offsets.append(info.byte_offset)
        sizes.append(info.size)  # no filters (checked above), so every chunk is whole

    dset.id.chunk_iter(visit)
    if len(offsets) != n or any(x != chunk_bytes for x in sizes):
        return None
    cells = np.asarray(coords, dtype=np.int64) // np.asarray(dset.chunks, dtype=np.int64)  # [n, d]
    table = np.full(grid, -1, dtype=np.int64)
    table[tuple(cells.T)] = offsets
    if (table < 0).any():
        return None
    return table


class ChunkedRows(RowReader):
    """A ``RowReader`` (see hdf_read) for a dataset indexed by ``chunk_index``.

    Rows go straight from the mapped chunks to their destination (``into``: the padded batch).
    When a chunk row's K chunks lie back to back in the file, they are one ``[K, cr, cc]`` array,
    and consecutive such rows that also follow each other in the file are one ``[m, K, cr, cc]``
    array: then all the whole chunk rows of a sequence are one numpy copy, plus one for each
    partial chunk row at its ends. HDF5 allocates chunks in that order when a writer fills whole
    rows (RETURNN's files: 93-95% of chunk rows measured). Other rows: one copy per chunk.
    """

    def __init__(self, buffer: np.ndarray, table: np.ndarray, dset: h5py.Dataset) -> None:
        self.buffer = buffer  # uint8 view of the whole file (an mmap)
        self.table = table
        self.shape = tuple(dset.shape)
        self.chunks = tuple(dset.chunks)
        self.dtype = np.dtype(dset.dtype)
        self.chunk_bytes = math.prod(self.chunks) * self.dtype.itemsize
        if len(self.shape) == 2:
            step = np.arange(table.shape[1], dtype=np.int64) * self.chunk_bytes  # [K]
            whole = (table == table[:, :1] + step).all(axis=1)  # [R] the row is one block
            self._row_whole = whole
            # the next chunk row continues this one's block in the file
            row_bytes = table.shape[1] * self.chunk_bytes
            follows = whole[:-1] & whole[1:] & (table[1:, 0] == table[:-1, 0] + row_bytes)
            breaks = np.flatnonzero(~np.append(follows, False))  # [runs] last row of each run
            rows = np.arange(len(table), dtype=np.int64)
            self._run_end = breaks[np.searchsorted(breaks, rows)]  # [R] last row of r's run
        else:
            self._row_whole = np.zeros(0, dtype=bool)
            self.take = self._take  # small batches of a 1-D key: one gather (RowReader)

    def _chunk(self, offset: int) -> np.ndarray:
        return self.buffer[offset : offset + self.chunk_bytes].view(self.dtype).reshape(self.chunks)

    def rows(self, a: int, b: int) -> np.ndarray:
        out = np.empty((max(b - a, 0), *self.shape[1:]), dtype=self.dtype)
        if b > a:
            self.into(a, b, out)
        return out

    def into(self, a: int, b: int, out: np.ndarray) -> None:
        cr = self.chunks[0]
        table, buffer, dtype = self.table, self.buffer, self.dtype
        if len(self.shape) == 1:
            for r in range(a // cr, (b - 1) // cr + 1):
                r0 = r * cr
                lo, hi = max(a, r0), min(b, r0 + cr)
                chunk = np.ndarray((cr,), dtype, buffer, int(table[r]))
                out[lo - a : hi - a] = chunk[lo - r0 : hi - r0]
            return
        cc, width = self.chunks[1], self.shape[1]
        k_full = width // cc  # column chunks that are whole inside the dataset's width
        r, r_last = a // cr, (b - 1) // cr
        while r <= r_last:
            r0 = r * cr
            if r0 >= a and self._row_whole[r]:
                # chunk rows r..e lie inside [a, b) and follow each other in the file: one copy
                e = min(int(self._run_end[r]), b // cr - 1)
                if e >= r:
                    self._copy_run(r, e - r + 1, out[r0 - a : (e + 1) * cr - a])
                    r = e + 1
                    continue
            lo, hi = max(a, r0), min(b, r0 + cr)
            dst = out[lo - a : hi - a]  # [h, width]
            row = table[r].tolist()
            r += 1
            if self._row_whole[r - 1]:
                # the row's K chunks are one [K, cr, cc] array in the file: one copy for them all
                k_all = len(row)
                block = np.ndarray((k_all, cr, cc), dtype, buffer, row[0])[:, lo - r0 : hi - r0]
                if k_full:
                    dst[:, : k_full * cc].reshape(hi - lo, k_full, cc)[...] = block[
                        :k_full
                    ].transpose(1, 0, 2)
                if k_full < k_all:  # the last chunk column sticks out of the dataset's width
                    dst[:, k_full * cc :] = block[k_full, :, : width - k_full * cc]
                continue
            for c, offset in enumerate(row):
                c0 = c * cc
                cw = min(cc, width - c0)
                dst[:, c0 : c0 + cw] = self._chunk(offset)[lo - r0 : hi - r0, :cw]

    def value_runs(self) -> list[tuple[int, int, np.ndarray | None]]:
        """The dataset's rows as ``(a, b, values)``: ``values`` a flat view of the mapped file
        holding exactly the values of rows ``[a, b)`` in chunk order (whole chunk rows lying back
        to back in the file, every chunk column inside the width), or None where rows must be
        read (``rows``) to see only their values (a partial chunk row or column). What a screen
        that only needs the set of values (``padded_rows.all_finite``) reads without a copy."""
        rows = self.shape[0]
        if len(self.shape) != 2 or self.shape[1] % self.chunks[1]:
            return [(0, rows, None)]
        cr, k_all = self.chunks[0], self.table.shape[1]
        out: list[tuple[int, int, np.ndarray | None]] = []
        r, whole_rows = 0, rows // cr  # chunk rows inside the dataset
        while r < whole_rows:
            if not self._row_whole[r]:
                out.append((r * cr, (r + 1) * cr, None))
                r += 1
                continue
            e = min(int(self._run_end[r]), whole_rows - 1)
            n = (e - r + 1) * k_all * math.prod(self.chunks)
            flat = np.ndarray((n,), self.dtype, self.buffer, int(self.table[r, 0]))
            out.append((r * cr, (e + 1) * cr, flat))
            r = e + 1
        if whole_rows * cr < rows:
            out.append((whole_rows * cr, rows, None))
        return out

    def _copy_run(self, r: int, m: int, dst: np.ndarray) -> None:
        """Whole chunk rows ``r .. r + m - 1`` (one ``[m, K, cr, cc]`` block in the file) into
        ``dst`` (``[m * cr, width]``)."""
        cr, cc = self.chunks
        width, k_all = self.shape[1], self.table.shape[1]
        k_full = width // cc
        block = np.ndarray((m, k_all, cr, cc), self.dtype, self.buffer, int(self.table[r, 0]))
        if k_full:  # [m * cr, K * cc] seen as [m, cr, K, cc]: views, the copy writes through
            dst[:, : k_full * cc].reshape(m, cr, k_full, cc)[...] = block[:, :k_full].transpose(
                0, 2, 1, 3
            )
        if k_full < k_all:  # the last chunk column sticks out of the dataset's width
            rest = width - k_full * cc
            dst[:, k_full * cc :].reshape(m, cr, rest)[...] = block[:, k_full, :, :rest]

    def _take(self, rows: np.ndarray) -> np.ndarray:
        """Values of a 1-D dataset at global row numbers ``rows`` (any shape), gathered byte by
        byte from the mapped chunks (chunk offsets need not be aligned to the item size)."""
        cr, size = self.chunks[0], self.dtype.itemsize
        r = rows // cr
        at = self.table[r] + (rows - r * cr) * size  # byte offset of each value
        raw = self.buffer[at[..., None] + np.arange(size, dtype=np.int64)]  # [..., size] uint8
        return raw.view(self.dtype)[..., 0]


# (path, device, inode, size, mtime_ns, ctime_ns, dataset name) -> index, or None: "use h5py"
_INDEXES: dict[tuple, np.ndarray | None] = {}
_INDEXED_FILES: dict[tuple, int] = {}  # file identity -> datasets indexed (by index_files)


def _file_key(path: str) -> tuple:
    st = os.stat(path)
    # ctime too: no writer can set it, so a rewrite that restores size and mtime still moves it
    return (
        os.path.realpath(path),
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


def cached_chunk_index(path: str, dset: h5py.Dataset) -> np.ndarray | None:
    """``chunk_index(dset)`` of ``dset`` in the file at ``path``, built once per process (or
    inherited from the process that forked this one)."""
    key = (*_file_key(path), dset.name)
    if key not in _INDEXES:
        _INDEXES[key] = chunk_index(dset)
    return _INDEXES[key]


def forget_file(path: str, inode: int) -> int:
    """Drop this process's indexes of the file that was at ``path`` with ``inode`` (an evicted
    cached copy: a fetched copy again is another file); returns how many went."""
    real = os.path.realpath(path)
    gone = [k for k in _INDEXES if k[0] == real and k[2] == inode]
    for k in gone:
        del _INDEXES[k]
    for k in [k for k in _INDEXED_FILES if k[0] == real and k[2] == inode]:
        del _INDEXED_FILES[k]
    return len(gone)


def index_files(paths: Sequence[str]) -> int:
    """Index every chunked dataset of the given HDF files now (in the trainer process, so that
    forked workers inherit the indexes); returns how many datasets got an index.

    Only a head start: a file that cannot be opened or indexed here is skipped, so its error is
    raised where it is read (in a worker, naming the sequence), not here."""
    found = 0
    for path in paths:
        try:
            key = _file_key(path)
            if key not in _INDEXED_FILES:
                count = 0
                with h5py.File(path, "r") as f:
                    for d in _datasets(f):
                        if d.chunks is not None and cached_chunk_index(path, d) is not None:
                            count += 1
                _INDEXED_FILES[key] = count
            found += _INDEXED_FILES[key]
        except Exception:  # missing, truncated, not HDF5: the reader reports it properly
            continue
    return found


def _datasets(f: h5py.File) -> list[h5py.Dataset]:
    out: list[h5py.Dataset] = []

    def visit(_: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            out.append(obj)

    f.visititems(visit)
    return out


def chunked_reader(
    dset: h5py.Dataset, file_map: Callable[[], mmap.mmap], path: str | None = None
) -> ChunkedRows | None:
    """A direct reader for ``dset`` when its chunks can be indexed, else None (use h5py).
    ``file_map()`` returns an mmap of the whole file (opened only when needed); with ``path`` the
    index comes from the per-process cache."""
    table = chunk_index(dset) if path is None else cached_chunk_index(path, dset)
    if table is None:
        return None
    buffer = np.frombuffer(file_map(), dtype=np.uint8)
    chunk_bytes = math.prod(dset.chunks) * np.dtype(dset.dtype).itemsize
    if int(table.max()) + chunk_bytes > len(buffer):  # a truncated file: let h5py report it
        return None
    return ChunkedRows(buffer, table, dset)
