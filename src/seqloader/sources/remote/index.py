"""The metadata index: what ``HDFSource`` reads at open (lengths, tags, keys, dataset layout) for a
remote file, kept in the cache directory under the file's (URL, size, version) key.

The first open on a node reads the metadata with ranged reads (h5py over an fsspec file object:
only the header, ``seqLengths`` and ``seqTags`` travel, not the data); a restart, another rank or
another process on the node loads the index instead (one ``.npz`` per file, written atomically,
under a lock so two processes do not read the same file's metadata at once). A file whose
complete copy is already cached is read locally."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import zipfile
from typing import Any

import h5py
import numpy as np

from seqloader.errors import DataError
from seqloader.sources.base import KeySpec
from seqloader.sources.hdf_layout import FileLayout, PackedTags, layout_of, read_layout
from seqloader.sources.remote.cache import FileCache, RemoteFile, write_atomic
from seqloader.sources.remote.stats import COUNTERS

KIND = "hdf1.npz"  # the index format of HDF layouts; a change of format changes the name
METADATA_BLOCK = 256 << 10  # ranged reads of the header, seqLengths and seqTags


def hdf_layout(cache: FileCache, f: RemoteFile, position: str = "") -> FileLayout:
    """The layout of the remote HDF file ``f``: from the index, else read and indexed."""
    path = cache.index_path(f, KIND)
    found = _load(path, f.url)
    if found is not None:
        return found
    with cache.lock(f"{f.key}.meta"):
        found = _load(path, f.url)  # another process indexed it while this one waited
        if found is not None:
            return found
        if cache.has(f):
            layout = dataclasses.replace(read_layout(cache.path(f), position), path=f.url)
        else:
            layout = _read_remote(cache, f, position)
        _save(path, layout)
    return layout


def zip_member(cache: FileCache, f: RemoteFile, member: str) -> bytes:
    """Member ``member`` of the remote zip file ``f`` (an OggZip corpus' listing): from the index,
    else read with ranged reads (the zip's central directory and that member only) and indexed."""
    path = cache.index_path(f, "member-" + hashlib.sha256(member.encode()).hexdigest()[:16])
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
        return fh.read()
    with cache.lock(f"{f.key}.meta"):
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
            return fh.read()
        if cache.has(f):
            with zipfile.ZipFile(cache.path(f)) as z:
                data = z.read(member)
        else:
            fs = cache.filesystem(f.url)

            def read() -> bytes:
                with (
                    fs.open(f.url, "rb", block_size=METADATA_BLOCK) as fh,
                    zipfile.ZipFile(fh) as z,
                ):
                    return z.read(member)

            data = cache._retry(read, f.url, f"read {member!r} of")
            COUNTERS.metadata_reads += 1
        write_atomic(path, data)
    return data


def _read_remote(cache: FileCache, f: RemoteFile, position: str) -> FileLayout:
    fs = cache.filesystem(f.url)

    def read() -> FileLayout:
        with fs.open(f.url, "rb", block_size=METADATA_BLOCK) as fh:
            try:
                h5 = h5py.File(fh, "r")
            except OSError as e:
                raise DataError(
                    f"remote HDF file {f.url!r}{position} is not a readable HDF5 file "
                    f"({type(e).__name__}: {e}). Fix: re-upload the file."
                ) from e
            with h5:
                return layout_of(h5, f.url, position)

    layout = cache._retry(read, f.url, "read the metadata of")
    COUNTERS.metadata_reads += 1
    return layout


def _save(path: str, lay: FileLayout) -> None:
    keys = list(lay.starts)
    header = {
        "url": lay.path,
        "num_seqs": lay.num_seqs,
        "schema": {
            k: [np.dtype(s.dtype).str, list(s.feature_shape), s.sparse, s.vocab_size]
            for k, s in lay.schema.items()
        },
        "datasets": lay.datasets,
        "skipped": lay.skipped,
        "starts": keys,
    }
    buf, off = lay.tags.buffers()
    arrays = {
        "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        "tags_buf": buf,
        "tags_off": off,
        **{f"starts_{i}": lay.starts[k] for i, k in enumerate(keys)},
    }
    buffer = io.BytesIO()
    savez: Any = np.savez  # numpy's stubs read the keywords as savez's own options
    savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())


def _load(path: str, url: str) -> FileLayout | None:
    """The indexed layout, or None when there is none (or it is unreadable: read again)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(z["header"].tobytes())
            if header["url"] != url:
                return None
            starts = {k: z[f"starts_{i}"] for i, k in enumerate(header["starts"])}
            tags = PackedTags(z["tags_buf"], z["tags_off"])
    except (FileNotFoundError, KeyError, ValueError, OSError, zipfile.BadZipFile):
        return None
    schema = {
        k: KeySpec(np.dtype(d), tuple(shape), bool(sparse), vocab)
        for k, (d, shape, sparse, vocab) in header["schema"].items()
    }
    return FileLayout(
        url,
        int(header["num_seqs"]),
        schema,
        dict(header["datasets"]),
        starts,
        tags,
        dict(header["skipped"]),
    )
