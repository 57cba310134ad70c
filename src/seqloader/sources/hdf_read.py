"""Reading sequence rows out of one open HDF file, in the process that reads.

Three ways, same bytes:
- contiguous, unfiltered numeric datasets are memory-mapped (h5py gives the byte offset), so a
  sequence is a numpy slice of the page cache, no HDF5 call at all (a first epoch pays the map's
  first-touch faults; mapping the cached pages ahead in a thread at open was measured, 1.00x
  CPU per first-epoch batch in fresh processes, and removed);
- chunked, uncompressed numeric datasets with 1 or 2 axes (what RETURNN's SimpleHDFWriter makes):
  their chunk offsets are indexed once per process and chunks copied out of the mapped file
  (``hdf_chunks``; ~2.5x faster than h5py on RETURNN's small chunks);
- anything else (compressed, big-endian, enums, huge chunk counts) goes through h5py. For a batch, spans are
  sorted and neighbouring ones merged into one read when that at most doubles the rows read, so a
  nearly contiguous batch costs one HDF5 call instead of one per sequence, and chunks shared by
  neighbouring sequences are decoded once.

Batches without a transform are read straight into the padded batch (``OpenFile.read_into``,
``HDFSource.read_into``; see ``loading.direct``): from the map one call of the compiled row
kernel per key where it is built (``row_kernel``: copies, padding and the NaN/Inf test in one
pass), else one copy + ``memset`` per sequence, from chunks one copy per run of whole chunk rows, through h5py one copy out of its
buffer; the NaN/Inf screen runs on each sequence right after its copy, once per process, and
not at all where the node keeps the verdict that the unchanged file's dataset is finite
(``screen_verdicts``: written by a process that screened it whole).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import mmap
import operator
from collections.abc import Mapping, Sequence

import h5py
import numpy as np

from seqloader.sources import row_kernel, screen_verdicts
from seqloader.sources.hdf_chunks import chunked_reader
from seqloader.sources.hdf_here import values_here
from seqloader.sources.padded_rows import (
    RowReader,
    RowScreen,
    SpanRequest,
    all_finite,
    gather_small,
    into_each,
)
from seqloader.sources.screen_verdicts import PARTS, FileVerdicts

_memset = ctypes.memset

# Merged reads stop growing at this size: HDF5 reads of tiny-chunked data were fastest at about
# 250-500 KB per call (measured: 1.5x faster than 3 MB calls, 2x faster than 10 MB ones).
MAX_RUN_BYTES = 256 << 10


class MappedRows(RowReader):
    """A contiguous dataset viewed through an mmap of the file."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array  # read-only view [total_rows, *feat] into the mmap
        # the rows it gives are native: a big-endian file's ('>f4', mapped as it lies) are not
        # raw-copied (``raw`` differs from ``dtype``) but swapped by numpy as they are copied
        self.shape, self.raw = array.shape, array.dtype
        self.dtype = array.dtype.newbyteorder("=")
        self.frame_bytes = array.dtype.itemsize * math.prod(array.shape[1:])
        self.address = array.ctypes.data  # of row 0 in the mapping (lives as long as the array)
        # the dataset's bytes as one flat memoryview (read-only, of the same mapping): a row is
        # copied by a slice assignment between two memoryviews, pure C inside the interpreter,
        # ~0.3 µs a row less than a ctypes call's argument conversion
        self.bytes = array.data.cast("B") if array.flags.c_contiguous else None

    def rows(self, a: int, b: int) -> np.ndarray:
        return np.array(self.array[a:b], dtype=self.dtype)

    def into(self, a: int, b: int, out: np.ndarray) -> None:
        out[...] = self.array[a:b]

    def spans_into(self, request: SpanRequest) -> list[int]:
        out, pos, screen = request.out, request.pos, request.screen
        src = self.bytes
        if src is not None and row_kernel.KERNEL is not None and self._kernel_fits(out):
            # one C call for the whole key: copies, padding, NaN/Inf test (``row_kernel``)
            rows = row_kernel.copy_rows(
                src, self.frame_bytes, request.begin, request.end, out, pos, screen
            )
            if rows is not None:
                return rows
        # plain ints: the loop runs per sequence
        a_list, b_list = request.begin.tolist(), request.end.tolist()
        if src is None or not self._fits(a_list, b_list, out, pos):
            if gather_small(self.array.__getitem__, request):
                return []
            return into_each(self.into, request)  # numpy checks and raises
        # Every span lies inside the dataset and its batch row (checked above), so each row is
        # one slice assignment between memoryviews of the map and of the batch (C inside the
        # interpreter; numpy's five operations per sequence cost more than the bytes here, a
        # ctypes memmove's argument conversion ~0.3 µs more a row), after its padding's zeros.
        # A small 1-D key (labels) takes the same loop: 32 rows of it cost ~21 µs this way
        # against ~32 µs for the vectorised gather (``gather_small``, 7 numpy calls on [B, T]).
        # When this file fills every row of ``out`` (a batch from one file), the whole array is
        # zeroed with one memset first and each row is then one copy: that took 0.86-1.03x the
        # time of one memset per row's padding over batches filled 32-91% (min of 8
        # alternations, destinations not in cache, as a batch block is), one call less per row.
        if out.size == 0:  # no frames to write (every span empty: checked)
            return []
        frame = self.frame_bytes
        row = out.shape[1] * frame
        dst = out.data.cast("B")  # flat bytes: out is C-contiguous (checked)
        base = out.ctypes.data
        whole = isinstance(pos, range) and pos == range(len(out))
        if whole:
            _memset(base, 0, len(out) * row)
        if screen is None:
            if whole:
                at = 0
                for a, b in zip(a_list, b_list):
                    dst[at : at + (b - a) * frame] = src[a * frame : b * frame]
                    at += row
                return []
            for p, a, b in zip(pos, a_list, b_list):
                n = (b - a) * frame
                at = p * row
                dst[at : at + n] = src[a * frame : b * frame]
                if n < row:
                    _memset(base + at + n, 0, row - n)
            return []
        flat = out.reshape(out.shape[0], -1)  # a view: out is C-contiguous (checked)
        per_frame = flat.shape[1] // out.shape[1] if out.shape[1] else 0  # values per frame
        found = RowScreen()
        for j, (p, a, b, check) in enumerate(zip(pos, a_list, b_list, screen)):
            n = (b - a) * frame
            at = p * row
            dst[at : at + n] = src[a * frame : b * frame]
            if n < row and not whole:
                _memset(base + at + n, 0, row - n)
            if check:  # right after its copy, while the row's bytes are in cache
                found.add(j, flat[p, : (b - a) * per_frame])
        return found.suspects()

    def _kernel_fits(self, out: np.ndarray) -> bool:
        """Whether ``out`` is what the kernel writes into (it checks every span itself)."""
        flags = out.flags
        return (
            out.dtype == self.raw
            and out.shape[2:] == self.shape[1:]
            and flags.c_contiguous
            and flags.writeable
        )

    def _fits(self, a_list: list[int], b_list: list[int], out: np.ndarray, pos) -> bool:
        """Whether raw copies of these spans into rows ``pos`` of ``out`` stay inside the
        dataset and the destination (else the caller lets numpy copy, which checks and raises).
        A few C-level passes over the batch's ints (no generator: this runs per key and batch)."""
        if out.dtype != self.raw or out.shape[2:] != self.shape[1:] or len(a_list) != len(pos):
            return False
        flags = out.flags
        if not (flags.c_contiguous and flags.writeable):
            return False
        if not a_list:
            return True
        sizes = list(map(operator.sub, b_list, a_list))
        if not (
            min(a_list) >= 0
            and max(b_list) <= self.shape[0]
            and min(sizes) >= 0
            and max(sizes) <= out.shape[1]
        ):
            return False
        if isinstance(pos, range) and pos.step == 1:
            return pos.start >= 0 and pos.stop <= out.shape[0]
        return min(pos) >= 0 and max(pos) < out.shape[0]


class H5Rows(RowReader):
    """Any dataset, through h5py."""

    def __init__(self, dset: h5py.Dataset) -> None:
        self.dset = dset
        self.shape, self.dtype = tuple(dset.shape), dset.dtype.newbyteorder("=")
        self.feature_shape = self.shape[1:]
        self.row_bytes = max(
            1, dset.dtype.itemsize * int(np.prod(self.feature_shape, dtype=np.int64))
        )

    def rows(self, a: int, b: int) -> np.ndarray:
        # plain slicing takes h5py's fast path: measured 3-4x faster than read_direct or
        # low-level reads with hand-made dataspaces for one hyperslab
        if b <= a:
            return np.empty((0, *self.feature_shape), dtype=self.dtype)
        rows = self.dset[a:b]
        return rows if rows.dtype == self.dtype else rows.astype(self.dtype)  # big-endian: swap

    def spans(self, begin: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
        b_, e_ = begin.tolist(), end.tolist()  # plain ints: this loop runs per sequence
        order = sorted((i for i in range(len(b_)) if e_[i] > b_[i]), key=b_.__getitem__)
        out: list[np.ndarray | None] = [None] * len(b_)
        max_rows = max(1, MAX_RUN_BYTES // self.row_bytes)
        for run in merge_runs([b_[i] for i in order], [e_[i] for i in order], max_rows):
            members = [order[j] for j in run]
            lo = b_[members[0]]
            buf = self.rows(lo, max(e_[i] for i in members))
            if len(members) == 1:
                out[members[0]] = buf
                continue
            seen: set[tuple[int, int]] = set()
            for i in members:
                span = (b_[i] - lo, e_[i] - lo)
                # views of one buffer; a repeated span gets its own copy so that transforming
                # one sequence in place never changes another
                view = buf[span[0] : span[1]]
                out[i] = view.copy() if span in seen else view
                seen.add(span)
        return [self.rows(0, 0) if o is None else o for o in out]  # empty spans need no read

    def spans_into(self, request: SpanRequest) -> list[int]:
        # through HDF5 a copy out of its buffer is unavoidable; merged reads keep their speed
        found = RowScreen()
        out, screen = request.out, request.screen
        t_max = out.shape[1]
        for j, (p, rows) in enumerate(zip(request.pos, self.spans(request.begin, request.end))):
            n = len(rows)
            dst = out[p, :n]
            dst[...] = rows
            if n < t_max:
                out[p, n:] = 0
            if screen is not None and screen[j] and n:
                found.add(j, dst.reshape(-1))
        return found.suspects()


def merge_runs(begin: Sequence[int], end: Sequence[int], max_rows: int) -> list[list[int]]:
    """Group spans (sorted by begin, non-empty) into runs read with one call each; returns
    positions into the input. A span joins the current run only if the run then still uses at
    least half of the rows it covers (never more than twice the useful rows read) and covers at
    most ``max_rows`` (a longer span is read alone)."""
    runs: list[list[int]] = []
    lo = hi = useful = 0
    for j in range(len(begin)):
        a, b = int(begin[j]), int(end[j])
        if runs:
            new_hi = max(hi, b)
            new_useful = useful + max(0, b - max(a, hi))
            if new_hi - lo <= min(2 * new_useful, max_rows):
                runs[-1].append(j)
                hi, useful = new_hi, new_useful
                continue
        runs.append([j])
        lo, hi, useful = a, b, b - a
    return runs


def mappable(dset: h5py.Dataset) -> bool:
    """Whether the dataset's bytes lie in the file exactly as numpy expects them."""
    if dset.ndim == 0 or dset.size == 0:
        return False
    plist = dset.id.get_create_plist()
    if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_nfilters() != 0:
        return False
    if plist.get_external_count() != 0:
        return False
    tid = dset.id.get_type()
    if tid.get_class() not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        return False
    dtype = np.dtype(dset.dtype)
    if tid.get_size() != dtype.itemsize or np.dtype(tid.dtype) != dtype:
        return False
    # every property of the file's type (precision, offset, sign; a float's bit fields, exponent
    # bias, normalisation, padding) as numpy's: h5py maps a damaged or unusual type to the same
    # numpy dtype by class and size, and HDF5 converts (or refuses) where raw bytes would not
    return bool(tid.equal(h5py.h5t.py_create(dtype)))


def _covers(starts: np.ndarray, rows: int) -> bool:
    """Whether a file's sequences (row offsets ``starts``, ``[n + 1]``) cover all ``rows`` of
    its dataset: only then does "every sequence clean" speak of every value."""
    return len(starts) > 1 and int(starts[0]) == 0 and int(starts[-1]) == rows


_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def plain_superblock(path: str) -> bool:
    """Whether the file's superblock places every address where a mapped read looks for it: its
    base address at the superblock itself (0 without a user block) and its end-of-file address at
    the file's end, as every HDF5 writer leaves them. A damaged base or end address makes HDF5
    read elsewhere or refuse (an address past the end) where the raw bytes would still be read
    from the map, so such a file is read through HDF5 only, never mapped.

    >>> import h5py
    >>> with h5py.File("plain.hdf", "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(6))
    >>> plain_superblock("plain.hdf")
    True
    """
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        at = 0
        while at + 64 <= size:  # HDF5 looks at 0, 512, 1024, 2048, ... (after a user block)
            fh.seek(at)
            head = fh.read(64)
            if head[:8] == _SIGNATURE:
                break
            at = 512 if at == 0 else at * 2
        else:
            return False
    version = head[8]
    if version in (0, 1):
        width, base_at = head[13], 24 + 4 * version  # v1 adds the indexed storage K (+4)
    elif version in (2, 3):
        width, base_at = head[9], 12
    else:
        return False
    if width not in (2, 4, 8) or base_at + 3 * width > len(head):
        return False

    def field(i: int) -> int:
        return int.from_bytes(head[base_at + i * width : base_at + (i + 1) * width], "little")

    base, end = field(0), field(2)  # base, (free space | extension) address, end of file
    return base == at and end == size  # the end of file is stored as an absolute address


class OpenFile:
    """One HDF file opened in this process, with a reader per key."""

    def __init__(
        self,
        path: str,
        datasets: Mapping[str, str],
        use_mmap: bool,
        verdict_dir: str | None = None,
    ) -> None:
        self.path = path
        # stat'ed before the file is opened, and again once it is (``FileVerdicts``)
        verdicts = None if verdict_dir is None else FileVerdicts.settled(verdict_dir, path)
        h5 = h5py.File(path, "r")
        use_mmap = use_mmap and plain_superblock(path)
        self.h5: h5py.File | None = h5
        self._mmap: mmap.mmap | None = None
        self.readers: dict[str, RowReader] = {}
        self._datasets = dict(datasets)
        self._clean: dict[str, np.ndarray] = {}  # key -> bool [sequences]: screened, no NaN/Inf
        self._left: dict[str, int] = {}  # key -> at most the sequences not yet found clean
        self._kept: dict[str, int] = {}  # key -> sequences clean when this process's part was kept
        self._finite: set[str] = set()  # keys with every value known finite: no screen at all
        self._here: set[str] = set()  # keys whose values all lie in this file (``values_here``)
        try:
            for key, h5_path in datasets.items():
                dset = h5[h5_path]
                if values_here(dset, h5):
                    self._here.add(key)
                self.readers[key] = self._reader(dset, use_mmap and key in self._here)
        except BaseException:
            self.close()
            raise
        self._verdicts = verdicts if verdicts is not None and verdicts.unchanged() else None

    def _verdicts_of(self, key: str, s: np.ndarray) -> FileVerdicts | None:
        """The node's verdicts where they may speak of every value of ``key``: its values lie in
        this file (``values_here``) and its sequences (row offsets ``s``) cover all its rows."""
        if key not in self._here or not _covers(s, self.readers[key].shape[0]):
            return None
        return self._verdicts

    def _reader(self, dset: h5py.Dataset, use_mmap: bool) -> RowReader:
        if use_mmap and mappable(dset):
            offset = dset.id.get_offset()
            nbytes = dset.size * dset.dtype.itemsize
            mm = self._map()
            if offset is not None and offset + nbytes <= len(mm):
                array = np.ndarray(dset.shape, dset.dtype, buffer=mm, offset=offset)
                return MappedRows(array)
        if use_mmap:  # uncompressed chunks copied out of the mapped file (hdf_chunks)
            chunked = chunked_reader(dset, self._map, self.path)
            if chunked is not None:
                return chunked
        return H5Rows(dset)

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            # the map holds its own duplicate of the descriptor: no file object stays open (an
            # unclosed one would warn at interpreter exit when the user never closes the source)
            with open(self.path, "rb") as raw:
                self._mmap = mmap.mmap(raw.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mmap

    @property
    def mapped_keys(self) -> tuple[str, ...]:
        return tuple(k for k, r in self.readers.items() if isinstance(r, MappedRows))

    def read(self, starts: Mapping[str, np.ndarray], j: int) -> dict[str, np.ndarray]:
        return {
            key: reader.rows(int(starts[key][j]), int(starts[key][j + 1]))
            for key, reader in self.readers.items()
        }

    def read_many(
        self, starts: Mapping[str, np.ndarray], local: Sequence[int] | np.ndarray
    ) -> list[dict[str, np.ndarray]]:
        local = np.asarray(local, dtype=np.int64)
        out: list[dict[str, np.ndarray]] = [{} for _ in range(len(local))]
        for key, reader in self.readers.items():
            s = starts[key]
            for d, arr in zip(out, reader.spans(s[local], s[local + 1])):
                d[key] = arr
        return out

    def read_into(
        self,
        starts: Mapping[str, np.ndarray],
        local: np.ndarray,
        out: Mapping[str, np.ndarray],
        pos: Sequence[int],
        screen: bool = False,
    ) -> set[int]:
        """Sequences ``local`` (of this file) into rows ``pos`` of the padded arrays ``out``
        (zeros after each end); returns the rows that may hold NaN/Inf (with ``screen``).

        The screen covers float keys, and only sequences not yet found clean: the file is mapped
        read-only and was checked unchanged at open, so bytes screened once stay screened (from
        the second epoch on, a batch costs no screen at all). A key whose every sequence was found
        clean in this process, or by an earlier process on this node (``FileVerdicts``: the file
        unchanged since), is not screened at all; a whole clean pass leaves that verdict."""
        suspects: set[int] = set()
        after = local + 1
        for key, dst in out.items():
            reader, s = self.readers[key], starts[key]
            request = SpanRequest(s[local], s[after], dst, pos)
            if not screen or reader.dtype.kind != "f" or key in self._finite:
                reader.spans_into(request)
                continue
            clean = self._clean.get(key)
            if clean is None:
                clean = self._start_screen(key, s)
                if clean is None:  # the node's verdict: every value finite
                    reader.spans_into(request)
                    continue
            todo = ~clean[local]  # [B]
            if not todo.any():  # every sequence was screened before: no screen at all
                reader.spans_into(request)
                continue
            with np.errstate(over="ignore", invalid="ignore"):  # the screen's false alarms
                bad = reader.spans_into(request.screened(todo.tolist()))
            if bad:
                todo[bad] = False
                suspects.update(pos[j] for j in bad)
            clean[local[todo]] = True
            # counted down by the rows found clean (a sequence twice in a batch counts twice, so
            # this is at most what is left); counted exactly only when it reaches 0
            left = self._left.get(key, 0) - int(np.count_nonzero(todo))
            n = len(clean)
            if left > 0 and n - left - self._kept.get(key, 0) >= n / PARTS:
                left = self._share(key, s, clean)  # another share screened: kept, others' taken
            elif left <= 0:
                left = n - int(np.count_nonzero(clean))
            if left == 0:
                self._all_clean(key, s)
                continue
            self._left[key] = left
        return suspects

    def _start_screen(self, key: str, s: np.ndarray) -> np.ndarray | None:
        """The first screened read of ``key`` here: None when the node keeps the verdict that
        every value of it in this file is finite (nothing to screen), else the bitmap of its
        sequences known clean: those the parts of other processes name (``FileVerdicts``)."""
        reader, verdicts = self.readers[key], self._verdicts_of(key, s)
        clean = None
        if verdicts is not None:  # the verdict speaks of them all
            dataset = self._datasets[key]
            if verdicts.finite(dataset, reader.dtype, reader.shape):
                self._finite.add(key)
                return None
            clean = verdicts.screened_before(dataset, reader.dtype, reader.shape, len(s) - 1)
        if clean is None:
            clean = np.zeros(len(s) - 1, dtype=bool)
        left = len(clean) - int(np.count_nonzero(clean))
        if left == 0:
            self._all_clean(key, s)
            return None
        self._clean[key], self._left[key] = clean, left
        self._kept[key] = len(clean) - left
        return clean

    def _share(self, key: str, s: np.ndarray, clean: np.ndarray) -> int:
        """Keep this process's clean sequences of ``key`` as its part of the node's verdict (a
        DataLoader worker: ``shares_files``) and take in the parts of other processes (into
        ``clean``); returns how many are left."""
        reader, verdicts = self.readers[key], self._verdicts_of(key, s)
        if verdicts is not None:
            dataset = self._datasets[key]
            if screen_verdicts.shares_files():
                verdicts.keep_part(dataset, reader.dtype, reader.shape, clean)
            others = verdicts.screened_before(dataset, reader.dtype, reader.shape, len(clean))
            if others is not None:
                clean |= others
        left = len(clean) - int(np.count_nonzero(clean))
        self._kept[key] = len(clean) - left
        return left

    def screen_whole(self, key: str, s: np.ndarray) -> tuple[str, str | None]:
        """Screen every value of the float ``key`` (row offsets ``s``) now, ahead of the batches
        (``seqloader prepare``), where the node may keep its verdict: (outcome, the verdict's
        store or None). "found" (kept already), "kept" (all finite, the verdict written),
        "nonfinite" (the batches holding NaN/Inf are reported as they are read), "small" (a
        dataset under ``MIN_BYTES``) or "none" (no verdict here: see ``screen_verdicts``);
        nothing is read for the last two."""
        reader, verdicts = self.readers[key], self._verdicts_of(key, s)
        if verdicts is None:
            return "none", None
        dataset, dtype, shape = self._datasets[key], reader.dtype, reader.shape
        if not screen_verdicts.worth_keeping(dtype, shape):
            return "small", None
        store = verdicts.store_path(dataset, dtype, shape)[0]
        if verdicts.finite(dataset, dtype, shape):
            self._finite.add(key)
            return "found", store
        if not all_finite(reader):
            return "nonfinite", None
        return ("kept", store) if self._all_clean(key, s) else ("none", None)

    def _all_clean(self, key: str, s: np.ndarray) -> bool:
        """Every sequence of ``key`` in this file screened clean here: no more screen or
        bookkeeping for it in this process, and the node's verdict written for later ones
        (returns whether it was)."""
        self._finite.add(key)  # (a batch read in another thread meanwhile may still screen)
        self._clean.pop(key, None)
        self._left.pop(key, None)
        self._kept.pop(key, None)
        reader, verdicts = self.readers[key], self._verdicts_of(key, s)
        if verdicts is None:
            return False
        dataset = self._datasets[key]
        if not verdicts.record(dataset, reader.dtype, reader.shape):
            return False
        verdicts.drop_parts(dataset, reader.dtype, reader.shape)
        return True

    def close(self) -> None:
        self.readers = {}
        if self._mmap is not None:
            # a caller may still hold a view: then the GC unmaps it later
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None
        if self.h5 is not None:
            self.h5.close()
            self.h5 = None
