"""Writing RETURNN-format HDF files: ``write_hdf`` (from any ``Source``) and ``convert_contiguous``.

Both write to a temporary file next to the destination and ``os.replace`` it at the end, so a
crash never leaves a half-written file under the real name (RETURNN's writers do the same).
Contiguous datasets (the default) can be memory-mapped by ``HDFSource``; ``chunked=True`` imitates
RETURNN's ``SimpleHDFWriter`` (resizable datasets, h5py's small automatic chunks).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import h5py
import numpy as np

from seqloader.errors import DataError
from seqloader.sources.base import KeySpec, Source, read_batch
from seqloader.sources.hdf_layout import (
    DUMMY_TARGET,
    INPUTS,
    SEQ_LENGTHS,
    SEQ_TAGS,
    TARGETS,
    open_h5,
    read_layout,
)

BLOCK_BYTES = 32 << 20  # rows are written in blocks of about this size


@dataclass(frozen=True)
class _Layout:
    """Where each key goes: ``data`` -> ``inputs``; others -> ``targets/data/<key>``, sorted."""

    has_inputs: bool
    target_keys: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """seqLengths columns (RETURNN: a dummy ``classes`` column when there are no targets)."""
        if self.has_inputs and not self.target_keys:
            return ("data", DUMMY_TARGET)
        return (("data",) if self.has_inputs else ()) + self.target_keys

    def h5_path(self, key: str) -> str:
        return INPUTS if key == "data" else f"{TARGETS}/data/{key}"


def write_hdf(path: str | os.PathLike, source: Source, *, chunked: bool = False) -> None:
    """Write ``source`` as a RETURNN HDF file that RETURNN's ``HDFDataset`` reads identically.

    Key ``data`` becomes ``inputs``, every other key ``targets/data/<key>``. RETURNN treats 1-D
    integer keys as sparse, so they come back sparse; their vocabulary is the source's
    ``vocab_size`` or, when it has none, ``max + 1`` of the values.

    >>> write_hdf("corpus.hdf", sl.MemorySource({"data": [np.ones((3, 2), "float32")] * 2}, tags=["a", "b"]))
    >>> src = sl.HDFSource("corpus.hdf")
    >>> len(src), src.tag(1), src.read(1)["data"].shape
    (2, 'b', (3, 2))
    >>> src.close()
    """
    path = os.fspath(path)
    keys = tuple(source.keys)
    for key in keys:
        spec = source.schema[key]
        if np.dtype(spec.dtype).kind not in "biuf":
            raise DataError(
                f"write_hdf {path!r}: key {key!r} has dtype {spec.dtype}; RETURNN HDF files "
                "hold numeric arrays here (expected bool, int, uint or float)"
            )
    layout = _Layout("data" in keys, tuple(sorted(k for k in keys if k != "data")))
    lengths = {k: np.asarray(source.lengths(k), dtype=np.int64) for k in keys}
    with _atomic_h5(path) as f:
        _write_index(f, source, layout, lengths, chunked, path)
        dsets = {
            k: _create(f, layout.h5_path(k), source.schema[k], lengths[k], chunked) for k in keys
        }
        if layout.target_keys:
            f.create_group(f"{TARGETS}/labels")  # RETURNN's reader expects the group
            f.require_group(f"{TARGETS}/size")
        maxima = _copy_sequences(source, dsets, lengths, path)
        _write_attrs(f, source, layout, lengths, maxima)


@contextlib.contextmanager
def _atomic_h5(path: str) -> Iterator[h5py.File]:
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _write_index(
    f: h5py.File,
    source: Source,
    layout: _Layout,
    lengths: dict[str, np.ndarray],
    chunked: bool,
    path: str,
) -> None:
    n = len(source)
    table = np.zeros((n, len(layout.columns)), dtype=np.int64)
    for c, key in enumerate(layout.columns):
        if key in lengths:
            table[:, c] = lengths[key]
    dtype = np.int32 if (not table.size or table.max() < 2**31) else np.int64
    tags = [t.encode("utf-8", "surrogateescape") for t in source.tags]
    for i, t in enumerate(tags):
        if b"\0" in t:
            raise DataError(
                f"write_hdf {path!r}: tag of sequence {i} ({t!r}) contains a NUL byte, which "
                "RETURNN's reader treats as the tag's end; expected tags without NUL"
            )
    if chunked:  # as SimpleHDFWriter: start empty, resizable, grown to size
        sl = f.create_dataset(SEQ_LENGTHS, (0, table.shape[1]), dtype=dtype, maxshape=(None, None))
        sl.resize(table.shape)
        tg = f.create_dataset(SEQ_TAGS, (0,), dtype=h5py.string_dtype(), maxshape=(None,))
        tg.resize((n,))
        if n:
            sl[...] = table
            tg[...] = np.array(tags, dtype=object)
    else:  # as HDFDatasetWriter: fixed-size arrays, tags as S<max + 1>
        f.create_dataset(SEQ_LENGTHS, data=table.astype(dtype))
        width = max((len(t) for t in tags), default=0) + 1
        f.create_dataset(SEQ_TAGS, data=np.array(tags, dtype=f"S{width}").reshape(n))


def _create(
    f: h5py.File, h5_path: str, spec: KeySpec, lengths: np.ndarray, chunked: bool
) -> h5py.Dataset:
    feat = tuple(spec.feature_shape)
    total = int(lengths.sum())
    if not chunked:
        return f.create_dataset(h5_path, (total, *feat), dtype=spec.dtype)
    # SimpleHDFWriter creates `inputs` with the first sequence's shape and targets with 0 rows,
    # both resizable along time; h5py then guesses (small) chunks from that shape.
    first = int(lengths[0]) if h5_path == INPUTS and len(lengths) else 0
    dset = f.create_dataset(h5_path, (first, *feat), dtype=spec.dtype, maxshape=(None, *feat))
    dset.resize((total, *feat))
    return dset


def _copy_sequences(
    source: Source, dsets: dict[str, h5py.Dataset], lengths: dict[str, np.ndarray], path: str
) -> dict[str, int]:
    """Copy all sequences in blocks of ~BLOCK_BYTES; check each against lengths and schema.
    Returns the max value of each integer key (-1 when empty) for vocabulary sizes."""
    n = len(source)
    keys = tuple(dsets)
    row_bytes = {
        k: np.dtype(source.schema[k].dtype).itemsize * _prod(source.schema[k]) for k in keys
    }
    seq_bytes = sum(lengths[k] * row_bytes[k] for k in keys) if keys else np.zeros(n)
    block_of = np.cumsum(seq_bytes, dtype=np.int64) // BLOCK_BYTES if n else np.zeros(0, np.int64)
    bounds = np.flatnonzero(np.diff(block_of)) + 1
    edges = [0, *bounds.tolist(), n] if n else [0]
    offsets = dict.fromkeys(keys, 0)
    maxima = dict.fromkeys(keys, -1)
    for a, b in itertools.pairwise(edges):
        idx = np.arange(a, b, dtype=np.int64)
        seqs = read_batch(source, idx)
        for key in keys:
            spec = source.schema[key]
            parts = [
                _checked(s, key, spec, int(i), lengths, source, path) for i, s in zip(idx, seqs)
            ]
            block = np.concatenate(parts) if parts else np.zeros((0, *spec.feature_shape))
            o = offsets[key]
            if len(block):
                dsets[key][o : o + len(block)] = block
                if np.dtype(spec.dtype).kind in "iu":
                    maxima[key] = max(maxima[key], int(block.max()))
            offsets[key] = o + len(block)
    return maxima


def _checked(
    seq: dict[str, np.ndarray],
    key: str,
    spec: KeySpec,
    i: int,
    lengths: dict[str, np.ndarray],
    source: Source,
    path: str,
) -> np.ndarray:
    a = np.asarray(seq[key])
    want = (int(lengths[key][i]), *spec.feature_shape)
    if a.shape != want or a.dtype != spec.dtype:
        raise DataError(
            f"write_hdf {path!r}: sequence {i} (tag {source.tag(i)!r}) key {key!r} read as "
            f"{a.dtype}{list(a.shape)}, but the source declares {np.dtype(spec.dtype)}{list(want)} "
            "(lengths/schema); fix the source"
        )
    return a


def _prod(spec: KeySpec) -> int:
    return int(np.prod(spec.feature_shape, dtype=np.int64))


def _dim(spec: KeySpec, max_value: int) -> tuple[int, int]:
    """RETURNN's (dim, ndim): ndim counts the time axis; 1-D ints are sparse with dim = vocab."""
    ndim = 1 + len(spec.feature_shape)
    if ndim == 1 and np.dtype(spec.dtype).kind in "iu":
        return (spec.vocab_size if spec.vocab_size is not None else max_value + 1), 1
    return (spec.feature_shape[-1] if spec.feature_shape else 1), ndim


def _write_attrs(
    f: h5py.File,
    source: Source,
    layout: _Layout,
    lengths: dict[str, np.ndarray],
    maxima: dict[str, int],
) -> None:
    for key in layout.target_keys:
        dim, ndim = _dim(source.schema[key], maxima[key])
        f[f"{TARGETS}/size"].attrs[key] = np.array([dim, ndim], dtype=np.int64)
    dim = 1
    if layout.has_inputs:
        dim = max(_dim(source.schema["data"], maxima["data"])[0], 1)
    f.attrs["numTimesteps"] = int(lengths["data"].sum()) if layout.has_inputs else 0
    f.attrs["inputPattSize"] = dim
    f.attrs["numDims"] = 1
    f.attrs["numLabels"] = dim
    f.attrs["numSeqs"] = len(source)


def convert_contiguous(src_path: str | os.PathLike, dst_path: str | os.PathLike) -> None:
    """Rewrite a RETURNN HDF file with every dataset contiguous and unfiltered (same groups,
    attributes and values; still readable by RETURNN), so ``HDFSource`` can memory-map it.
    ``dst_path`` may equal ``src_path`` (the file is replaced atomically).

    >>> sl.write_hdf("r.hdf", sl.MemorySource({"data": [np.ones((3, 2), "float32")] * 2}), chunked=True)
    >>> convert_contiguous("r.hdf", "c.hdf")  # memory-mappable copy: the fastest read path
    >>> src = sl.HDFSource("c.hdf")
    >>> src.read(0)["data"].shape
    (3, 2)
    >>> src.close()
    """
    src_path, dst_path = os.fspath(src_path), os.fspath(dst_path)
    read_layout(src_path)  # validates: a clear error now rather than a strange copy
    with open_h5(src_path) as fin, _atomic_h5(dst_path) as fout:
        _copy_attrs(fin, fout)

        def visit(name: str, obj: h5py.HLObject) -> None:
            if isinstance(obj, h5py.Group):
                _copy_attrs(obj, fout.require_group(name))
            elif isinstance(obj, h5py.Dataset):
                out = fout.create_dataset(name, obj.shape, dtype=obj.dtype)
                _copy_rows(obj, out)
                _copy_attrs(obj, out)

        fin.visititems(visit)


def _copy_attrs(src: h5py.HLObject, dst: h5py.HLObject) -> None:
    for k, v in src.attrs.items():
        dst.attrs[k] = v


def _copy_rows(src: h5py.Dataset, dst: h5py.Dataset) -> None:
    if src.ndim == 0 or src.size == 0 or src.dtype.kind == "O":
        if src.size:
            dst[()] = src[()]
        return
    row = max(1, src.dtype.itemsize * int(np.prod(src.shape[1:], dtype=np.int64)))
    step = max(1, BLOCK_BYTES // row)
    for a in range(0, src.shape[0], step):
        dst[a : a + step] = src[a : a + step]
