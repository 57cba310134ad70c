"""Reading what a RETURNN HDF file holds, at open time: keys, schema, per-sequence offsets, tags.

Follows RETURNN's ``HDFDataset.add_file`` (see docs/returnn-hdf-format): seqLengths column 0 is
``inputs`` (key ``data``) when present, then one column per target key in
``sorted(targets/data keys | targets/size attributes)``; without a ``targets`` group there is one
dummy ``classes`` column. Nothing here reads sequence data, only ``seqLengths``, ``seqTags`` and
dataset shapes, so opening a large corpus stays cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import warnings
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

import h5py
import numpy as np

from seqloader.errors import DataError, DataWarning
from seqloader.sources.base import KeySpec
from seqloader.sources.hdf_here import elsewhere
from seqloader.sources.hdf_vlen import VlenStrings
from seqloader.sources.repeats import repeated_values
from seqloader.sources.scratch import Scratch
from seqloader.sources.strings import IndexedStrings
from seqloader.sources.tag_hash import CHUNK, tag_hashes

INPUTS = "inputs"
SEQ_LENGTHS = "seqLengths"
SEQ_TAGS = "seqTags"
TARGETS = "targets"
DUMMY_TARGET = "classes"  # RETURNN's placeholder column when there is no ``targets`` group


@dataclass(frozen=True)
class FileLayout:
    """One file's keys and offsets. ``starts[key]`` is int64 ``[n + 1]``: sequence j of ``key``
    spans rows ``[starts[key][j], starts[key][j + 1])`` of dataset ``datasets[key]``."""

    path: str
    num_seqs: int
    schema: dict[str, KeySpec]
    datasets: dict[str, str]  # key -> HDF path ("inputs" or "targets/data/<key>")
    starts: dict[str, np.ndarray]
    tags: PackedTags
    skipped: dict[str, str]  # key -> why it cannot be read (string data, no data)


def describe_file(path: str, position: str = "") -> str:
    """``'x.hdf'`` or ``'x.hdf' (file 2 of 3)`` for messages."""
    return f"{path!r}{position}"


def open_h5(path: str, position: str = "") -> h5py.File:
    """Open read-only, turning "missing", "not HDF5" and "truncated" into ``DataError``s."""
    where = describe_file(path, position)
    if not os.path.exists(path):
        raise DataError(f"HDF file {where} does not exist; check the path (cwd: {os.getcwd()!r})")
    if os.path.isdir(path):
        raise DataError(f"HDF file {where} is a directory; expected a RETURNN .hdf file")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        kind = "not an HDF5 file" if not h5py.is_hdf5(path) else "a damaged HDF5 file"
        raise DataError(
            f"HDF file {where} is {kind} (truncated or overwritten?): {e}. "
            "Fix: re-create or re-copy the file."
        ) from e


def read_layout(path: str, position: str = "") -> FileLayout:
    """The layout of one RETURNN HDF file (opens and closes it)."""
    with open_h5(path, position) as f:
        return layout_of(f, path, position)


def layout_of(f: h5py.File, path: str, position: str = "") -> FileLayout:
    """The layout of an open HDF file (``path`` names it in messages; a remote file is opened
    over a file object, so only the metadata it reads travels)."""
    where = describe_file(path, position)
    with named_damage(where):  # h5py's errors on damaged metadata (found by tests/test_fuzz_hdf)
        return _layout(f, path, where)


@contextlib.contextmanager
def named_damage(where: str, what: str = "its structure") -> Iterator[None]:
    """h5py's (and the heap reader's) errors on a damaged file as a ``DataError`` naming the file
    and the fix: an ``OSError`` let through would read as the metadata store's directory failing
    (``hdf_store.open_metadata`` keeps the metadata in memory then, blaming the directory)."""
    try:
        yield
    except DataError:
        raise
    except Exception as e:
        raise DataError(
            f"HDF file {where} is damaged: reading {what} failed with "
            f"{type(e).__name__}: {e}. Fix: re-create or re-copy the file."
        ) from e


def _layout(f: h5py.File, path: str, where: str) -> FileLayout:
    scan, starts = _scan(f, path, where, keep_starts=True)
    tags = _tags(f, where, scan.num_seqs)
    return FileLayout(path, scan.num_seqs, scan.schema, scan.datasets, starts, tags, scan.skipped)


@dataclass(frozen=True)
class FileScan:
    """One local file's keys, counts and longest lengths, checked as ``read_layout`` checks
    them, without its per-sequence arrays: the node's metadata store is written from it block
    by block (``length_blocks``, ``tag_blocks`` open the file again), so a file of 10^8
    sequences never sits in memory whole. ``layout()`` reads the arrays (the in-memory form)."""

    path: str
    position: str
    num_seqs: int
    schema: dict[str, KeySpec]
    datasets: dict[str, str]
    columns: dict[str, int]  # key -> its column of seqLengths
    longest: dict[str, int]  # key -> its longest sequence (0 without sequences)
    skipped: dict[str, str]
    #: metadata datasets whose values lie in other files, each with where ("'seqLengths': it is
    #: ..."): the file's identity does not cover them, so no store may be kept for it
    foreign: tuple[str, ...] = ()

    def length_blocks(self, key: str) -> Iterator[np.ndarray]:
        """``key``'s lengths, ``ROW_BLOCK`` sequences at a time (the file's integer dtype): each
        block an array kept and refilled for the next one (used before asking for it)."""
        where = describe_file(self.path, self.position)
        kept = Scratch()
        with open_h5(self.path, self.position) as f:
            dset = f[SEQ_LENGTHS]
            for a in range(0, self.num_seqs, ROW_BLOCK):
                b = min(self.num_seqs, a + ROW_BLOCK)
                with named_damage(where, f"{SEQ_LENGTHS!r}"):
                    block = _column(dset, a, b, self.columns[key], kept)
                yield block

    def tag_blocks(self, ring: int = 0) -> Iterator[PackedTags]:
        """The tags, ``TAG_BLOCK`` at a time (one block's Python objects at once); ``ring``: a
        caller that drops each block before ``ring`` more are read gets blocks read from the
        heap in ``ring`` pairs of arrays reused in turn (``VlenStrings.block``)."""
        where = describe_file(self.path, self.position)
        with open_h5(self.path, self.position) as f:
            blocks = _tag_blocks(f, where, self.num_seqs, ring)
            try:
                while True:  # each block read under named_damage, never a yield inside it
                    with named_damage(where, "its seqTags"):
                        block = next(blocks, None)
                    if block is None:
                        return
                    yield block
            finally:  # a caller that stops early: the heap reader closed before the file
                blocks.close()

    def layout(self) -> FileLayout:
        return read_layout(self.path, self.position)


def scan_file(path: str, position: str = "") -> FileScan:
    """``FileScan`` of one local RETURNN HDF file: every check of ``read_layout`` (shapes,
    negative lengths, lengths against the datasets, one tag per sequence), no array of ``n``."""
    where = describe_file(path, position)
    with open_h5(path, position) as f, named_damage(where):  # h5py's errors, as layout_of
        scan, _ = _scan(f, path, where, keep_starts=False)
        _tag_count(f, where, scan.num_seqs)
    return dataclasses.replace(scan, position=position)


#: ``seqLengths`` rows read at once when checking a file and writing its store (8 MiB of int32
#: per column): bounds the temporaries whatever the file's size
ROW_BLOCK = 1 << 20


def _column(
    dset: h5py.Dataset, a: int, b: int, col: int, kept: Scratch | None = None
) -> np.ndarray:
    """Rows ``[a, b)`` of seqLengths column ``col`` (very old files: one length for all keys);
    read into ``kept``'s arrays where given (a new array each block is fresh pages to zero)."""
    if kept is None or dset.ndim not in (1, 2) or not dset.dtype.isnative:
        rows = np.asarray(dset[a:b])
    else:
        rows = kept.take("rows", (b - a) * math.prod(dset.shape[1:]), dset.dtype)
        rows = rows.reshape(b - a, *dset.shape[1:])
        if b > a:
            dset.read_direct(rows, np.s_[a:b])
    if rows.ndim == 1:
        return rows
    out = np.empty(b - a, rows.dtype) if kept is None else kept.take("column", b - a, rows.dtype)
    np.copyto(out, rows[:, col])
    return out


def _scan(
    f: h5py.File, path: str, where: str, keep_starts: bool
) -> tuple[FileScan, dict[str, np.ndarray]]:
    """The file's keys and checks, reading ``seqLengths`` in blocks -> (scan, each key's row
    offsets int64 ``[n + 1]`` when ``keep_starts``, else empty)."""
    if SEQ_LENGTHS not in f:
        raise DataError(
            f"HDF file {where} has no {SEQ_LENGTHS!r} dataset, so it is not in RETURNN's HDF "
            f"format (top-level entries: {sorted(f.keys())}). Fix: write it with RETURNN's "
            "SimpleHDFWriter/HDFDatasetWriter or seqloader.write_hdf."
        )
    has_inputs = INPUTS in f
    target_keys = _target_keys(f)
    column_keys = (["data"] if has_inputs else []) + target_keys
    num_seqs = _seq_lengths(f, where, len(column_keys), column_keys)

    schema: dict[str, KeySpec] = {}
    datasets: dict[str, str] = {}
    columns: dict[str, int] = {}
    skipped: dict[str, str] = {}
    size_attrs = f[f"{TARGETS}/size"].attrs if f"{TARGETS}/size" in f else {}
    for col, key in enumerate(column_keys):
        if key == "data":
            h5_path = INPUTS
        elif TARGETS not in f:
            continue  # the dummy "classes" column: no data behind it
        else:
            h5_path = f"{TARGETS}/data/{key}"
        if h5_path not in f:
            skipped[key] = "named in targets/size but has no targets/data dataset"
            warnings.warn(
                f"HDF file {where}: key {key!r} is named in targets/size but has no {h5_path!r}; "
                "it is left out (RETURNN's HDFDataset cannot read such a file). If the key should "
                "be there, the file is damaged: re-create it.",
                DataWarning,
                stacklevel=5,
            )
            continue
        dset = f[h5_path]
        if not isinstance(dset, h5py.Dataset) or dset.ndim == 0:
            raise DataError(
                f"HDF file {where}: {h5_path!r} is not an array with a time axis first "
                f"(got {dset!r}); expected [total_frames, ...]"
            )
        if h5py.check_string_dtype(dset.dtype) is not None or dset.dtype.kind not in "biuf":
            skipped[key] = f"holds {dset.dtype} (strings/objects cannot be batched into tensors)"
            continue
        if key == "data":
            spec = _inputs_spec(f, dset)
        else:
            spec = _target_spec(key, dset, size_attrs.get(key), where)
        schema[key], datasets[key], columns[key] = spec, h5_path, col
    if not schema:
        raise DataError(
            f"HDF file {where} holds no readable data (no 'inputs', no numeric targets/data; "
            f"skipped: {skipped}); expected RETURNN's HDF format"
        )
    starts = {k: np.zeros(num_seqs + 1, dtype=np.int64) for k in schema} if keep_starts else {}
    totals, longest = dict.fromkeys(schema, 0), dict.fromkeys(schema, 0)
    lengths_dset = f[SEQ_LENGTHS]
    for a in range(0, num_seqs, ROW_BLOCK):  # one pass over seqLengths, a block at a time
        b = min(num_seqs, a + ROW_BLOCK)
        rows = np.asarray(lengths_dset[a:b])
        _check_block(f, where, rows, a)
        for key, col in columns.items():
            column = rows if rows.ndim == 1 else rows[:, col]
            if key in starts:
                np.cumsum(column, dtype=np.int64, out=starts[key][a + 1 : b + 1])
                starts[key][a + 1 : b + 1] += totals[key]
            totals[key] += int(column.sum(dtype=np.int64))
            longest[key] = max(longest[key], int(column.max()))
    for key in schema:
        col, h5_path = columns[key], datasets[key]
        frames = int(f[h5_path].shape[0])
        if totals[key] != frames:
            raise DataError(
                f"HDF file {where}: seqLengths column {col} (key {key!r}) sums to {totals[key]} "
                f"frames, but {h5_path!r} has {frames}; the file is inconsistent (partly "
                "written?). Fix: re-create the file."
            )
    scan = FileScan(path, "", num_seqs, schema, datasets, columns, longest, skipped, _foreign(f))
    return scan, starts


def _foreign(f: h5py.File) -> tuple[str, ...]:
    """The metadata the store is built from (``seqLengths``, ``seqTags``, ``targets/size``'s
    attributes) kept outside ``f``, each named with where it is."""
    found = []
    for name in (SEQ_LENGTHS, SEQ_TAGS, f"{TARGETS}/size"):
        obj = f.get(name) if name in f else None
        if isinstance(obj, (h5py.Dataset, h5py.Group)) and (why := elsewhere(obj, f)) is not None:
            found.append(f"{name!r}: {why}")
    return tuple(found)


def _target_keys(f: h5py.File) -> list[str]:
    if TARGETS not in f:
        return [DUMMY_TARGET]
    keys: set[str] = set()
    if f"{TARGETS}/data" in f:
        keys |= set(f[f"{TARGETS}/data"].keys())
    if f"{TARGETS}/size" in f:
        keys |= set(f[f"{TARGETS}/size"].attrs.keys())
    return sorted(keys)


def _seq_lengths(f: h5py.File, where: str, n_cols: int, column_keys: list[str]) -> int:
    """The number of sequences. Shapes are checked from the metadata *before* any data is read: a damaged header can claim
    a shape of billions of rows, and reading that first would take minutes or all memory."""
    dset = f[SEQ_LENGTHS]
    shape = tuple(getattr(dset, "shape", ()) or ())
    if (
        not isinstance(dset, h5py.Dataset)
        or len(shape) not in (1, 2)
        or (len(shape) == 2 and shape[1] != n_cols)
    ):
        raise DataError(
            f"HDF file {where}: seqLengths has shape {list(shape)}, expected "
            f"[num_seqs, {n_cols}] (columns: {column_keys}); the file does not follow RETURNN's "
            "HDF layout"
        )
    tags = f.get(SEQ_TAGS)
    if isinstance(tags, h5py.Dataset) and tags.shape and tags.shape[0] != shape[0]:
        raise DataError(
            f"HDF file {where}: seqTags has {tags.shape[0]} tags but seqLengths has {shape[0]} "
            "sequences; expected one tag per sequence (partly written or damaged file?)"
        )
    if not np.issubdtype(dset.dtype, np.integer):
        raise DataError(f"HDF file {where}: seqLengths has dtype {dset.dtype}, expected ints")
    return int(shape[0]) if shape else 0


def _check_block(f: h5py.File, where: str, rows: np.ndarray, first: int) -> None:
    """Rows ``first ..`` of seqLengths: no negative length (named by sequence and tag)."""
    if not rows.size or rows.min() >= 0:
        return
    bad = np.flatnonzero((rows < 0).reshape(len(rows), -1).any(axis=1))
    row = first + int(bad[0])
    tags = f.get(SEQ_TAGS)
    tag = _one_tag(tags, row) if isinstance(tags, h5py.Dataset) else None
    named = f" (sequence {row}, tag {tag!r})" if tag is not None else f" (sequence {row})"
    count = _negative_rows(f[SEQ_LENGTHS])
    raise DataError(
        f"HDF file {where}: seqLengths row {row}{named} is negative: "
        f"{rows[int(bad[0])].tolist()} ({count} negative row(s) in all); a length counts frames, "
        "so the file is damaged or its writer is broken. Fix: write the file again "
        "(seqloader.write_hdf, or RETURNN's HDFDatasetWriter/SimpleHDFWriter), or leave it out "
        "of the file list"
    )


def _negative_rows(dset: h5py.Dataset) -> int:
    """Rows of seqLengths with a negative length (for the message), in blocks."""
    n = int(dset.shape[0])
    count = 0
    for a in range(0, n, ROW_BLOCK):
        rows = np.asarray(dset[a : a + ROW_BLOCK])
        count += int((rows < 0).reshape(len(rows), -1).any(axis=1).sum())
    return count


def native(dtype: np.dtype | str) -> np.dtype:
    """The dtype in this machine's byte order: a big-endian file's '>f4' batches as float32 (torch
    takes native arrays only; the readers swap the bytes as they copy)."""
    return np.dtype(dtype).newbyteorder("=")


def _inputs_spec(f: h5py.File, dset: h5py.Dataset) -> KeySpec:
    """RETURNN: 1-D inputs have vocabulary ``inputPattSize``; sparse iff also integer."""
    dtype = native(dset.dtype)
    sparse = dset.ndim == 1 and dtype.kind in "iu"
    vocab = None
    if sparse and "inputPattSize" in f.attrs:
        vocab = int(np.asarray(f.attrs["inputPattSize"]).reshape(-1)[0])
    return KeySpec(dtype, tuple(dset.shape[1:]), sparse, vocab)


def _target_spec(key: str, dset: h5py.Dataset, size: object, where: str) -> KeySpec:
    """RETURNN: ``targets/size`` is a scalar dim (ndim = data's ndim) or ``[dim, ndim]``."""
    dtype = native(dset.dtype)
    dim: int | None
    if size is None:  # RETURNN then assumes dim 1 for 1-D keys; we say "unknown" (None)
        ndim = dset.ndim
        dim = None if ndim == 1 else int(dset.shape[-1])
    else:
        arr = np.asarray(size)
        if arr.ndim == 0:
            dim, ndim = int(arr), dset.ndim
        elif arr.shape == (2,):
            dim, ndim = int(arr[0]), int(arr[1])
        else:
            raise DataError(
                f"HDF file {where}: targets/size attribute {key!r} is {arr.tolist()}, expected a "
                "scalar dim or [dim, ndim]"
            )
    sparse = dtype.kind in "iu" and ndim <= 1
    return KeySpec(dtype, tuple(dset.shape[1:]), sparse, dim if sparse else None)


def _one_tag(tags: h5py.Dataset, row: int) -> str | None:
    """Tag ``row`` of a ``seqTags`` dataset for a message (None when it cannot be read)."""
    try:
        raw = tags[row]
    except (OSError, ValueError, IndexError):
        return None
    raw = raw.reshape(-1)[0] if isinstance(raw, np.ndarray) and raw.size else raw
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _tags(f: h5py.File, where: str, num_seqs: int) -> PackedTags:
    parts = list(_tag_blocks(f, where, num_seqs))
    return PackedTags.concat(parts) if len(parts) != 1 else parts[0]


def _tag_count(f: h5py.File, where: str, num_seqs: int) -> None:
    """One tag per sequence, from the dataset's shape (``_tag_blocks`` checks what it reads)."""
    dset = _tags_dataset(f, where)
    if isinstance(dset, h5py.Dataset) and len(dset.shape or ()) == 1:
        _check_tag_count(where, int(dset.shape[0]), num_seqs)


def _tags_dataset(f: h5py.File, where: str) -> object:
    if SEQ_TAGS not in f:
        raise DataError(
            f"HDF file {where} has no {SEQ_TAGS!r} dataset; every RETURNN HDF file names its "
            "sequences. Fix: re-create the file with tags."
        )
    return f[SEQ_TAGS]


def _check_tag_count(where: str, count: int, num_seqs: int) -> None:
    if count != num_seqs:
        raise DataError(
            f"HDF file {where}: seqTags has {count} tags but seqLengths has {num_seqs} "
            "sequences; expected one tag per sequence (partly written file?)"
        )


def _tag_blocks(
    f: h5py.File, where: str, num_seqs: int, ring: int = 0
) -> Generator[PackedTags, None, None]:
    """The tags packed ``TAG_BLOCK`` rows at a time: a block's decoded objects at a time, not
    one per tag of the file; the count checked against ``num_seqs``."""
    dset = _tags_dataset(f, where)
    if not isinstance(dset, h5py.Dataset) or len(dset.shape or ()) != 1:
        tags = PackedTags.from_array(np.asarray(dset[()]).reshape(-1))  # type: ignore[index]
        _check_tag_count(where, len(tags), num_seqs)
        yield tags
        return
    rows = int(dset.shape[0])
    _check_tag_count(where, rows, num_seqs)
    if rows == 0:
        yield PackedTags.from_array(np.asarray(dset[0:0]).reshape(-1))
    reader = VlenStrings.open(f, dset, ring) if FAST_VLEN else None
    try:
        for a in range(0, rows, TAG_BLOCK):
            b = min(rows, a + TAG_BLOCK)
            packed = None if reader is None else reader.block(a, b)
            if packed is not None:
                yield PackedTags(*packed)
            else:  # through h5py: one Python object per tag of the block
                yield PackedTags.from_array(np.asarray(dset[a:b]).reshape(-1))
    finally:
        if reader is not None:
            reader.close()


#: ``seqTags`` rows read and packed at once: variable-length tags come from h5py as one Python
#: ``bytes`` per tag (about 60 bytes each), so a block bounds them (64 MiB) whatever the file;
#: read from the heap directly (``hdf_vlen``), a block is its collections' bytes (~50 MiB).
TAG_BLOCK = 1 << 20
#: False: every block of variable-length tags through h5py (``hdf_vlen`` checks, tests compare)
FAST_VLEN = True


class PackedTags(IndexedStrings):
    """Sequence tags as one byte buffer plus offsets: ~(len + 8) bytes per tag instead of a Python
    ``str`` each, so 10M tags stay small and copy-on-write friendly in forked workers. Tags are
    decoded (utf-8) on access; a tag ends at its first NUL byte, as RETURNN reads them."""

    __slots__ = ("_buf", "_off")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        self._buf = np.ascontiguousarray(buffer, dtype=np.uint8)  # [total bytes]
        self._off = np.ascontiguousarray(offsets, dtype=np.int64)  # [n + 1]

    @classmethod
    def from_array(cls, values: np.ndarray) -> PackedTags:
        """From what h5py returns: fixed-length ``S<n>`` or an object array of bytes/str."""
        if values.dtype.kind == "S":
            width = max(values.dtype.itemsize, 1)
            chars = np.ascontiguousarray(values).view(np.uint8).reshape(len(values), width)
            step = max(1, (1 << 24) // width)  # rows per block: bounds the temporary masks
            lens, bufs = [], []
            for a in range(0, len(values), step):
                block = chars[a : a + step]  # [rows, width]
                keep = ~np.logical_or.accumulate(block == 0, axis=1)  # before the first NUL
                lens.append(keep.sum(axis=1))
                bufs.append(block[keep])
            lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
            buf = np.concatenate(bufs) if bufs else np.zeros(0, np.uint8)
        else:
            items = values.tolist()
            try:  # bytes without a NUL (what h5py returns for tags): joined as they are
                joined: bytes | None = b"".join(items)
            except TypeError:  # str among them
                joined = None
            if joined is None or b"\0" in joined:
                items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in items]
                items = [v.split(b"\0", 1)[0] for v in items]
                joined = b"".join(items)
            lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
            buf = np.frombuffer(joined, dtype=np.uint8)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(buf, offsets)

    @classmethod
    def from_strings(cls, tags: Sequence[str]) -> PackedTags:
        return cls.from_array(np.array([t.encode("utf-8", "surrogateescape") for t in tags], "O"))

    @classmethod
    def concat(cls, parts: Sequence[PackedTags]) -> PackedTags:
        if not parts:
            return cls(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        bufs, offs, base = [], [np.zeros(1, np.int64)], 0
        for p in parts:
            buf, off = p.buffers()  # a store's strings: checked
            bufs.append(buf)
            offs.append(off[1:] + base)
            base += len(buf)
        return cls(np.concatenate(bufs), np.concatenate(offs))

    def __len__(self) -> int:
        return len(self._off) - 1

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """(bytes ``[total]``, offsets ``[n + 1]``): what ``PackedTags(buffer, offsets)`` takes."""
        return self._buf, self._off

    def raw(self, index: int) -> bytes:
        return self._buf[self._off[index] : self._off[index + 1]].tobytes()

    def take(self, indices: np.ndarray) -> list[str]:
        """The tags at ``indices`` (valid indices; one batch's worth): no per-tag numpy call."""
        mv, off = self._buf.data, self._off  # .data: a memoryview
        a, b = off[indices].tolist(), off[np.asarray(indices) + 1].tolist()
        return [str(mv[x:y], "utf-8", "surrogateescape") for x, y in zip(a, b)]

    def _string(self, index: int) -> str:
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"tag index {index} out of range for {n} sequences")
        return self.raw(i).decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        data = self._buf.tobytes()
        off = self._off.tolist()
        for a, b in itertools.pairwise(off):
            yield data[a:b].decode("utf-8", "surrogateescape")

    def hashes(self, block: int = CHUNK) -> np.ndarray:
        """A 64-bit hash of every tag's bytes -> uint64 ``[n]`` (``sources/tag_hash.py``: eight
        bytes at a time, ``block`` tags at once). Equal tags have equal hashes, so duplicate
        search only compares the few tags whose hashes collide."""
        return tag_hashes(self._buf, self._off, block)

    def repeats(self) -> np.ndarray:
        """The hash values (``hashes``) that more than one tag has -> uint64, ascending, unique
        (equal tags, or a 64-bit collision): what the duplicate-tag screen looks for."""
        return repeated_values(self.hashes())

    def max_bytes(self, block: int = 1 << 22) -> int:
        """The longest tag's byte count (in blocks: no array of ``n``)."""
        off, n = self._off, len(self)
        return max(
            (int(np.diff(off[a : min(n, a + block) + 1]).max()) for a in range(0, n, block)),
            default=0,
        )

    def __repr__(self) -> str:
        return f"PackedTags({len(self)} tags, {len(self._buf)} bytes)"
