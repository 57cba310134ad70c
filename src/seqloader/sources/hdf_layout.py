"""Reading what a RETURNN HDF file holds, at open time: keys, schema, per-sequence offsets, tags.

Follows RETURNN's ``HDFDataset.add_file`` (see docs/returnn-hdf-format): seqLengths column 0 is
``inputs`` (key ``data``) when present, then one column per target key in
``sorted(targets/data keys | targets/size attributes)``; without a ``targets`` group there is one
dummy ``classes`` column. Nothing here reads sequence data, only ``seqLengths``, ``seqTags`` and
dataset shapes, so opening a large corpus stays cheap.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import h5py
import numpy as np

from seqloader.errors import DataError, DataWarning
from seqloader.sources.base import KeySpec
from seqloader.sources.strings import IndexedStrings

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
    try:
        return _layout(f, path, describe_file(path, position))
    except DataError:
        raise
    except Exception as e:  # h5py's errors on damaged metadata (found by tests/test_fuzz_hdf)
        raise DataError(
            f"HDF file {describe_file(path, position)} is damaged: reading its structure "
            f"failed with {type(e).__name__}: {e}. Fix: re-create or re-copy the file."
        ) from e


def _layout(f: h5py.File, path: str, where: str) -> FileLayout:
    if SEQ_LENGTHS not in f:
        raise DataError(
            f"HDF file {where} has no {SEQ_LENGTHS!r} dataset, so it is not in RETURNN's HDF "
            f"format (top-level entries: {sorted(f.keys())}). Fix: write it with RETURNN's "
            "SimpleHDFWriter/HDFDatasetWriter or seqloader.write_hdf."
        )
    has_inputs = INPUTS in f
    target_keys = _target_keys(f)
    column_keys = (["data"] if has_inputs else []) + target_keys
    seq_lengths = _seq_lengths(f, where, len(column_keys), column_keys)
    num_seqs = seq_lengths.shape[0]

    schema: dict[str, KeySpec] = {}
    datasets: dict[str, str] = {}
    starts: dict[str, np.ndarray] = {}
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
                stacklevel=4,
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
        column = seq_lengths[:, col]
        total = int(column.sum())
        if total != dset.shape[0]:
            raise DataError(
                f"HDF file {where}: seqLengths column {col} (key {key!r}) sums to {total} frames, "
                f"but {h5_path!r} has {dset.shape[0]}; the file is inconsistent (partly written?). "
                "Fix: re-create the file."
            )
        begin = np.zeros(num_seqs + 1, dtype=np.int64)
        np.cumsum(column, dtype=np.int64, out=begin[1:])
        schema[key], datasets[key], starts[key] = spec, h5_path, begin
    if not schema:
        raise DataError(
            f"HDF file {where} holds no readable data (no 'inputs', no numeric targets/data; "
            f"skipped: {skipped}); expected RETURNN's HDF format"
        )
    tags = _tags(f, where, num_seqs)
    return FileLayout(path, num_seqs, schema, datasets, starts, tags, skipped)


def _target_keys(f: h5py.File) -> list[str]:
    if TARGETS not in f:
        return [DUMMY_TARGET]
    keys: set[str] = set()
    if f"{TARGETS}/data" in f:
        keys |= set(f[f"{TARGETS}/data"].keys())
    if f"{TARGETS}/size" in f:
        keys |= set(f[f"{TARGETS}/size"].attrs.keys())
    return sorted(keys)


def _seq_lengths(f: h5py.File, where: str, n_cols: int, column_keys: list[str]) -> np.ndarray:
    """Shapes are checked from the metadata *before* any data is read: a damaged header can claim
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
    lengths = np.asarray(dset[()])
    if lengths.ndim == 1:  # very old files: one length for every key
        lengths = np.repeat(lengths[:, None], n_cols, axis=1)
    if not np.issubdtype(lengths.dtype, np.integer):
        raise DataError(f"HDF file {where}: seqLengths has dtype {lengths.dtype}, expected ints")
    if lengths.size and lengths.min() < 0:
        rows = np.flatnonzero((lengths < 0).reshape(len(lengths), -1).any(axis=1))
        row = int(rows[0])
        tag = _one_tag(tags, row) if isinstance(tags, h5py.Dataset) else None
        named = f" (sequence {row}, tag {tag!r})" if tag is not None else f" (sequence {row})"
        raise DataError(
            f"HDF file {where}: seqLengths row {row}{named} is negative: {lengths[row].tolist()} "
            f"({len(rows)} negative row(s) in all); a length counts frames, so the file is "
            "damaged or its writer is broken. Fix: write the file again (seqloader.write_hdf, or "
            "RETURNN's HDFDatasetWriter/SimpleHDFWriter), or leave it out of the file list"
        )
    return lengths.astype(np.int64, copy=False)


def _inputs_spec(f: h5py.File, dset: h5py.Dataset) -> KeySpec:
    """RETURNN: 1-D inputs have vocabulary ``inputPattSize``; sparse iff also integer."""
    dtype = np.dtype(dset.dtype)
    sparse = dset.ndim == 1 and dtype.kind in "iu"
    vocab = None
    if sparse and "inputPattSize" in f.attrs:
        vocab = int(np.asarray(f.attrs["inputPattSize"]).reshape(-1)[0])
    return KeySpec(dtype, tuple(dset.shape[1:]), sparse, vocab)


def _target_spec(key: str, dset: h5py.Dataset, size: object, where: str) -> KeySpec:
    """RETURNN: ``targets/size`` is a scalar dim (ndim = data's ndim) or ``[dim, ndim]``."""
    dtype = np.dtype(dset.dtype)
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
    if SEQ_TAGS not in f:
        raise DataError(
            f"HDF file {where} has no {SEQ_TAGS!r} dataset; every RETURNN HDF file names its "
            "sequences. Fix: re-create the file with tags."
        )
    dset = f[SEQ_TAGS]
    if not isinstance(dset, h5py.Dataset) or len(dset.shape or ()) != 1:
        tags = PackedTags.from_array(np.asarray(dset[()]).reshape(-1))
    else:  # in blocks: a block's decoded objects at a time, not one per tag of the file
        rows = int(dset.shape[0])
        parts = [
            PackedTags.from_array(np.asarray(dset[a : a + TAG_BLOCK]).reshape(-1))
            for a in range(0, rows, TAG_BLOCK)
        ]
        tags = PackedTags.concat(parts) if len(parts) != 1 else parts[0]
    if len(tags) != num_seqs:
        raise DataError(
            f"HDF file {where}: seqTags has {len(tags)} tags but seqLengths has {num_seqs} "
            "sequences; expected one tag per sequence (partly written file?)"
        )
    return tags


#: ``seqTags`` rows read and packed at once: variable-length tags come from h5py as one Python
#: ``bytes`` per tag (about 60 bytes each), so a block bounds them (64 MiB) whatever the file.
TAG_BLOCK = 1 << 20

_P = 1099511628211  # the 64-bit FNV prime (odd, so invertible mod 2^64)
_P_INVERSE = pow(_P, -1, 2**64)
_GOLDEN = 0x9E3779B97F4A7C15


def _powers(base: int, count: int) -> np.ndarray:
    """``base^k`` mod 2^64 for ``k < count`` -> uint64 ``[count]``."""
    out = np.ones(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.cumprod(np.full(count - 1, base, np.uint64), out=out[1:])
    return out


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
            items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
            items = [v.split(b"\0", 1)[0] for v in items]
            lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
            buf = np.frombuffer(b"".join(items), dtype=np.uint8)
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

    def hashes(self, block: int = 1 << 18) -> np.ndarray:
        """A 64-bit polynomial hash of every tag's bytes -> uint64 ``[n]``: tag ``t`` with bytes
        ``b_0 .. b_{m-1}`` hashes to ``sum (b_j + 1) P^j`` (mod 2^64) xor ``m * G``. Equal tags
        have equal hashes, so duplicate search only compares the few tags whose hashes collide.

        Vectorised by prefix sums instead of a per-byte position array: within a block of tags
        (about ``block`` bytes), byte ``i`` contributes ``b_i P^i``; a tag's sum is the
        difference of two prefix sums, shifted back to its start by ``P^-s`` (``P`` is odd, so
        invertible mod 2^64), plus the ``sum P^j`` of its length. Two passes over one uint64
        temporary of the block (small blocks stay in cache: 2^18 bytes is about 3x faster than
        2^22 here); the output is the only array of ``n``."""
        n = len(self)
        out = np.empty(n, dtype=np.uint64)
        if n == 0:
            return out
        off = self._off
        widest = self.max_bytes()
        span = max(block, widest)
        powers = _powers(_P, span + 1)  # P^k
        inverse = _powers(_P_INVERSE, span + 1)  # P^-k
        geometric = np.zeros(span + 1, dtype=np.uint64)  # sum_{j<k} P^j
        with np.errstate(over="ignore"):
            np.cumsum(powers[:span], out=geometric[1:])
        prefix = np.empty(span + 1, dtype=np.uint64)
        prefix[0] = 0
        a = 0
        while a < n:
            # the most tags from a whose bytes fit the span (at least one)
            b = int(np.searchsorted(off, off[a] + span, side="right")) - 1
            b = min(n, max(b, a + 1))
            lo, hi = int(off[a]), int(off[b])
            width = hi - lo
            starts = off[a:b] - lo
            ends = off[a + 1 : b + 1] - lo
            with np.errstate(over="ignore"):
                np.multiply(self._buf[lo:hi], powers[:width], out=prefix[1 : width + 1])
                np.cumsum(prefix[1 : width + 1], out=prefix[1 : width + 1])
                h = prefix[ends] - prefix[starts]
                h *= inverse[starts]
                h += geometric[ends - starts]
                h ^= (ends - starts).astype(np.uint64) * np.uint64(_GOLDEN)
            out[a:b] = h
            a = b
        return out

    def max_bytes(self, block: int = 1 << 22) -> int:
        """The longest tag's byte count (in blocks: no array of ``n``)."""
        off, n = self._off, len(self)
        return max(
            (int(np.diff(off[a : min(n, a + block) + 1]).max()) for a in range(0, n, block)),
            default=0,
        )

    def __repr__(self) -> str:
        return f"PackedTags({len(self)} tags, {len(self._buf)} bytes)"
