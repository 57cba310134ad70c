"""Variable-length string datasets (``seqTags`` as RETURNN's ``SimpleHDFWriter`` writes them) read
without a Python object per string.

h5py returns a variable-length string dataset as one Python ``bytes`` per element, and HDF5 finds
each in the file's global heap one at a time: about 0.5 us per tag here, most of a node's first
open of a corpus of 10^8 tags. On disk the dataset is ``n`` heap references (HDF5 file format,
"Variable-length" datatype: a uint32 byte count, the address of a global heap collection and a
uint32 object index), and a collection (``GCOL``, version 1) is a 16-byte header followed by its
objects, each a 16-byte header (uint16 index, uint16 reference count, 4 reserved bytes, uint64
size) and its bytes padded to 8. ``VlenStrings`` reads a block of references and the collections
they name with ``pread`` (no mapping: nothing of the file stays counted as this process's
memory), places every referenced object by the sizes of the objects before it in its collection
(one running sum over the block's rows, shifted per run of consecutive objects), and checks each
placed object's header (its index and size) before using a byte of it; a collection whose objects
the block does not all name (it spans two blocks) is walked header by header. The strings are then cut out of the
collections in runs of adjacent objects.

Anything else (a chunked or filtered dataset, a file with other address sizes, an object whose
header does not check, a NUL inside a string, too sparse a heap) makes ``block`` return None, and
the caller reads that block through h5py: the result is the same, only slower.
"""

from __future__ import annotations

import os
import struct

import h5py
import numpy as np

from seqloader.sources.hdf_here import values_here
from seqloader.sources.scratch import Scratch

#: one element of a variable-length dataset on disk (address and length sizes of 8 bytes)
ENTRY = np.dtype([("len", "<u4"), ("addr", "<u8"), ("idx", "<u4")])
GCOL = b"GCOL\x01"
HEADER = 16  # bytes of a collection's header, and of an object's
#: the most heap bytes read per referenced string byte (a heap of mostly other data is read
#: through h5py instead)
SPARSE = 8


class VlenStrings:
    """``block(a, b)``: strings ``[a, b)`` of a local file's contiguous variable-length string
    dataset as (bytes, int64 offsets ``[b - a + 1]``), or None where this reader cannot tell
    (then read the block with h5py). ``open`` returns None for datasets it never reads.

    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/t.hdf"
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("t", data=np.array([b"ab", b"", b"c"], object),
    ...                          dtype=h5py.string_dtype())
    >>> with h5py.File(path, "r") as f:
    ...     data, offsets = VlenStrings.open(f, f["t"]).block(0, 3)
    >>> data.tobytes(), offsets.tolist()
    (b'abc', [0, 2, 2, 3])
    """

    def __init__(self, path: str, offset: int, base: int, ring: int = 0) -> None:
        self._path, self._offset, self._base = path, offset, base
        self._fd = os.open(path, os.O_RDONLY)
        self._scratch = Scratch()
        self._ring, self._blocks = ring, 0

    @classmethod
    def open(cls, f: h5py.File, dset: h5py.Dataset, ring: int = 0) -> VlenStrings | None:
        """A reader of ``dset`` (a dataset of the open local file ``f``), or None where its
        layout is not the one read here. ``ring``: see ``block``."""
        info = h5py.check_string_dtype(dset.dtype)
        if info is None or info.length is not None or dset.ndim != 1 or f.driver != "sec2":
            return None
        plist = dset.id.get_create_plist()
        if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_external_count():
            return None
        if plist.get_nfilters() or f.id.get_create_plist().get_sizes() != (8, 8):
            return None
        if not values_here(dset, f):  # e.g. an external link: its offset is in another file
            return None
        offset = dset.id.get_offset()
        n = int(dset.shape[0])
        if offset is None or dset.id.get_storage_size() != n * ENTRY.itemsize:
            return None
        if not os.path.isfile(f.filename):
            return None
        return cls(f.filename, int(offset), int(f.userblock_size), ring)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> VlenStrings:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_into(self, out: np.ndarray, at: int) -> np.ndarray:
        """``out`` filled with the file's bytes from ``at`` on."""
        done = 0
        while done < len(out):
            got = os.preadv(self._fd, [out.data[done:]], at + done)
            if got <= 0:
                raise OSError(f"{self._path!r}: short read at byte {at + done}")
            done += got
        return out

    def block(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Strings ``[a, b)`` as (bytes, offsets), or None (read them with h5py). The arrays
        returned are new, or with ``ring`` (a caller that holds at most ``ring`` blocks at once,
        each dropped before the block ``ring`` later is read) one of ``ring`` pairs of arrays
        kept and reused in turn: tens of MiB per block whose fresh pages the kernel would zero
        again each time. The reader's temporaries are its own (``Scratch``), reused from block
        to block (one block at a time per reader)."""
        m, s = b - a, self._scratch
        slot = self._blocks % self._ring if self._ring else -1
        self._blocks += 1
        entries = self._read_into(
            s.take("entries", m * ENTRY.itemsize, np.uint8), self._offset + a * ENTRY.itemsize
        )
        e = entries.view(ENTRY)
        lengths = s.take("lengths", m, np.int64)
        np.copyto(lengths, e["len"])
        offsets = np.empty(m + 1, np.int64) if slot < 0 else s.take(f"off{slot}", m + 1, np.int64)
        offsets[0] = 0
        np.cumsum(lengths, out=offsets[1:])
        present = int(np.count_nonzero(lengths))  # an empty string names no object
        if not present:
            return np.zeros(0, np.uint8), offsets
        if present == m:  # no empty string (the usual case): no gather
            size = lengths
            addr, index = s.take("addr", m, np.int64), s.take("index", m, np.uint64)
            np.copyto(addr, e["addr"], casting="unsafe")
            np.copyto(index, e["idx"])
        else:
            rows = np.flatnonzero(lengths)
            size, addr, index = lengths[rows], e["addr"][rows].astype(np.int64), e["idx"][rows]
            index = index.astype(np.uint64)
        addr += self._base
        heap = self._collections(addr, int(offsets[-1]))
        if heap is None:
            return None
        buf, starts, which = heap  # which: each row's collection
        at = _place(buf, starts, which, index, size, s)
        if at is None:
            return None
        at += HEADER  # each object's bytes
        data = _cut(buf, at, size, s, None if slot < 0 else f"data{slot}")
        if data is None:
            return None
        return data, offsets

    def _collections(
        self, addr: np.ndarray, total: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The collections ``addr`` names, read into one buffer -> (buffer, each collection's
        start in it, each row's collection number), or None."""
        s = self._scratch
        runs = np.concatenate([[0], np.flatnonzero(addr[1:] != addr[:-1]) + 1])  # of one address
        named = np.unique(addr[runs])
        sizes = np.empty(len(named), dtype=np.int64)
        for k, c in enumerate(named.tolist()):
            head = os.pread(self._fd, HEADER, c)
            if len(head) != HEADER or head[:5] != GCOL:
                return None
            sizes[k] = struct.unpack_from("<Q", head, 8)[0]
        allowed = min(os.fstat(self._fd).st_size, SPARSE * (total + HEADER * len(addr)) + (1 << 20))
        if sizes.min() < HEADER or int(sizes.sum()) > allowed:  # damaged, or mostly other data
            return None
        starts = np.zeros(len(named) + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        if (sizes % 8).any():  # each collection 8-aligned in the buffer: headers read as uint64
            return None  # (HDF5 rounds collections to 8 bytes; where they lie in the file is free)
        buf = s.take("heap", int(starts[-1]) + 8, np.uint8)
        # adjacent collections in one read
        gap = np.flatnonzero(named[1:] != named[:-1] + sizes[:-1]) + 1
        first = np.concatenate([[0], gap])
        last = np.concatenate([gap, [len(named)]])
        for i, j in zip(first.tolist(), last.tolist(), strict=True):
            lo, hi = int(starts[i]), int(starts[j])
            self._read_into(buf[lo:hi], int(named[i]))
        buf[-8:] = 0
        # each row's collection: one search per run of rows naming the same collection, spread
        # over the run's rows by a running sum of the changes
        which = s.take("which", len(addr), np.int64)
        _spread(which, runs, np.searchsorted(named, addr[runs]))
        return buf, starts[:-1], which


def _spread(out: np.ndarray, first: np.ndarray, values: np.ndarray) -> None:
    """``out[i] = values[k]`` for the rows ``i`` of run ``k`` (runs start at ``first``, the first
    at 0): ``np.repeat`` into ``out``, with no new array of the rows."""
    out[:] = 0
    out[first] = values
    out[first[1:]] -= values[:-1]
    np.cumsum(out, out=out)


def _place(
    buf: np.ndarray,
    starts: np.ndarray,
    which: np.ndarray,
    index: np.ndarray,
    size: np.ndarray,
    s: Scratch,
) -> np.ndarray | None:
    """Where each row's object header lies in ``buf``: 16 bytes after its collection's start plus
    the padded objects of lower index named in the block; checked against the headers (index and
    size), and found by walking the collection where that fails. None: not found. The result is
    ``s``'s array ``at``.

    Rows come in runs naming objects ``i, i + 1, ..`` of one collection (HDF5 writes a slice's
    objects in order, cutting them into collections as they fill); a run's objects follow each
    other, and a run starts after the runs of its collection with lower indices. So the positions
    are one running sum of the objects' sizes plus each run's shift, from a sort of the runs
    (about a thousand per block), not of the rows."""
    n = len(index)
    if int(index.min()) < 1:
        return None
    own = s.take("own", n, np.int64)  # each object's bytes with its header and padding
    np.add(size, 7, out=own)
    own &= ~7
    own += HEADER
    cut = s.take("cut", n, np.bool_)
    cut[0] = True
    np.not_equal(which[1:], which[:-1], out=cut[1:])
    following = s.take("following", n, np.uint64)[: n - 1]
    np.add(index[:-1], np.uint64(1), out=following)
    cut[1:] |= index[1:] != following
    first = np.flatnonzero(cut)
    before = s.take("before", n + 1, np.int64)  # the block's object bytes before each row
    before[0] = 0
    np.cumsum(own, out=before[1:])
    bytes_of = np.diff(before[np.append(first, n)])
    collection = which[first]
    order = np.lexsort((index[first], collection))  # the runs by collection, then first index
    ordered = bytes_of[order]
    lower = np.cumsum(ordered) - ordered  # bytes of the runs before, in that order ...
    grouped = collection[order]
    group = np.flatnonzero(np.concatenate([[True], grouped[1:] != grouped[:-1]]))
    lower -= np.repeat(lower[group], np.diff(np.append(group, len(order))))  # ... of its own
    shift = np.empty(len(first), dtype=np.int64)
    shift[order] = starts[grouped] + HEADER + lower
    shift -= before[first]
    at = s.take("at", n, np.int64)
    _spread(at, first, shift)
    at += before[:-1]
    words = buf[: len(buf) // 8 * 8].view("<u8")
    bad = _unchecked(words, at, index, size, s)
    if len(bad):
        for c in np.unique(which[bad]).tolist():
            table = _walk(buf, int(starts[c]))
            picked = bad[which[bad] == c]
            at[picked] = [table.get(i, -1) for i in index[picked].tolist()]
        if (at[bad] < 0).any() or len(_unchecked(words, at[bad], index[bad], size[bad], None)):
            return None
    ends = np.r_[starts[1:], len(buf) - 8]
    reach = s.take("reach", n, np.int64)  # each object's end ...
    np.add(at, size, out=reach)
    reach += HEADER
    limit = s.take("limit", n, np.int64)  # ... against its collection's
    np.take(ends, which, out=limit, mode="clip")  # "raise" would copy
    over = s.take("over", n, np.bool_)
    if np.greater(reach, limit, out=over).any():
        return None
    return at


def _unchecked(
    words: np.ndarray, at: np.ndarray, index: np.ndarray, size: np.ndarray, s: Scratch | None
) -> np.ndarray:
    """The rows whose object header at ``at`` (8-aligned) is not (index, size); ``index`` uint64,
    ``size`` int64. ``s``: where the temporaries go (None: new arrays)."""
    n = len(at)
    if not n:
        return np.zeros(0, dtype=np.int64)
    w = np.empty(n, np.int64) if s is None else s.take("w", n, np.int64)
    if int(at.min()) >= 0 and int(at.max()) + HEADER <= len(words) * 8:
        np.right_shift(at, 3, out=w)
        inside = None
    else:  # some position outside the buffer: those rows fail
        inside = (at >= 0) & (at + HEADER <= len(words) * 8)
        np.right_shift(np.where(inside, at, 0), 3, out=w)
    head = np.empty(n, np.uint64) if s is None else s.take("head", n, np.uint64)
    np.take(words, w, out=head, mode="clip")  # w is inside
    head &= np.uint64(0xFFFF)
    ok = np.empty(n, np.bool_) if s is None else s.take("ok", n, np.bool_)
    np.equal(head, index, out=ok)
    w += 1
    np.take(words, w, out=head, mode="clip")  # w is inside
    ok &= head == size.view(np.uint64)
    if inside is not None:
        ok &= inside
    return np.flatnonzero(~ok)


def _walk(buf: np.ndarray, start: int) -> dict[int, int]:
    """Object index -> header position of every object of the collection at ``start``."""
    raw = buf.data
    (size,) = struct.unpack_from("<Q", raw, start + 8)
    end, at, table = start + size, start + HEADER, {}
    while at + HEADER <= end:
        index, _, _, length = struct.unpack_from("<HHIQ", raw, at)
        if index == 0:  # the collection's free space: the rest of it
            break
        table[index] = at
        at += HEADER + ((length + 7) & ~7)
    return table


def _cut(
    buf: np.ndarray, begin: np.ndarray, size: np.ndarray, s: Scratch, into: str | None = None
) -> np.ndarray | None:
    """The bytes ``buf[begin[i] : begin[i] + size[i]]`` one after another, or None if a string
    holds a NUL (RETURNN cuts a tag there: the caller's h5py path does). Rows whose objects follow
    each other in the heap with one size (tags of one pattern) are copied as one strided block
    each where such segments are few (``_by_segments``, into ``s``'s array ``into`` where
    named), else by one mask (``_by_mask``)."""
    n = len(begin)
    end = s.take("end", n, np.int64)
    np.add(begin, size, out=end)
    after = s.take("after", n, np.int64)[: n - 1]  # where the next object's bytes would start
    np.add(end[:-1], 7, out=after)
    after &= ~7
    after += HEADER
    follows = s.take("follows", n, np.bool_)[: n - 1]
    np.equal(begin[1:], after, out=follows)
    alike = s.take("alike", n, np.bool_)[: n - 1]
    np.equal(size[1:], size[:-1], out=alike)
    alike &= follows
    first = np.flatnonzero(np.concatenate([[True], ~alike]))
    if len(first) <= SEGMENTS:
        out_at = s.take("out_at", n + 1, np.int64)
        out_at[0] = 0
        np.cumsum(size, out=out_at[1:])
        total = int(out_at[-1])
        out = np.empty(total, np.uint8) if into is None else s.take(into, total, np.uint8)
        data = _by_segments(buf, begin, size, first, out_at, out)
    else:
        data = _by_mask(buf, begin, end, follows)
    return data if data.all() else None


#: the most segments of equal-size adjacent objects a block is copied by (a Python step each);
#: beyond it (tags of many lengths) one mask over the block's runs
SEGMENTS = 4096


def _by_segments(
    buf: np.ndarray,
    begin: np.ndarray,
    size: np.ndarray,
    first: np.ndarray,
    out_at: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """Segment ``k`` (rows ``first[k]`` to the next segment) holds objects of one size ``L``
    one stride apart: a strided view ``[rows, L]`` of the heap, copied into place in ``out``
    (``out_at``: each row's place in it, ``[rows + 1]``)."""
    bounds = np.concatenate([first, [len(begin)]]).tolist()
    lengths, starts, places = size[first].tolist(), begin[first].tolist(), out_at[first].tolist()
    for k in range(len(first)):
        rows, width = bounds[k + 1] - bounds[k], lengths[k]
        stride = HEADER + ((width + 7) & ~7)
        # a strided view of the heap (the constructor checks it lies within ``buf``), each
        # string one item of ``width`` bytes: copied whole, not byte by byte (4x faster)
        item = np.dtype((np.void, width))
        src = np.ndarray((rows,), item, buf, starts[k], (stride,))
        out[places[k] : places[k] + rows * width].view(item)[...] = src
    return out


def _by_mask(
    buf: np.ndarray, begin: np.ndarray, end: np.ndarray, follows: np.ndarray
) -> np.ndarray:
    """Rows whose objects follow each other in the heap form a run, each run is copied once,
    and the headers and padding between a run's objects are dropped by one mask."""
    first = np.flatnonzero(np.concatenate([[True], ~follows]))
    last = np.concatenate([first[1:], [len(begin)]]) - 1
    lo, hi = begin[first].tolist(), end[last].tolist()
    runs = np.concatenate([buf[x:y] for x, y in zip(lo, hi, strict=True)])
    # keep a row's bytes, drop the gap to the next row of its run (none between runs)
    gaps = np.zeros(len(begin), dtype=np.int64)
    gaps[:-1] = begin[1:] - end[:-1]
    gaps[last] = 0
    counts = np.empty(2 * len(begin), dtype=np.int64)
    counts[0::2], counts[1::2] = end - begin, gaps
    keep = np.repeat(np.tile(np.array([True, False]), len(begin)), counts)
    return runs[keep]
