"""``HDFSource``: RETURNN-format HDF files as a random-access ``Source``.

Opening reads only ``seqLengths``, ``seqTags`` and dataset shapes (in the main process), then closes
the files: planning never touches sequence data. Each process that reads opens the files itself,
lazily, and notices a fork by its pid, so a DataLoader worker never uses an h5py handle it inherited;
pickling drops handles, so the source also travels into spawn workers.

Files may be URLs (any fsspec protocol: ``s3://``, ``gs://``, ``file://``, ...): their metadata comes
from ranged reads at open (kept in the cache's local index) and their data from whole local copies
in a ``FileCache``, read by the same fast paths as local files (``seqloader.sources.remote``).
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from seqloader.errors import DataError, SeqLoaderError
from seqloader.parts import by_part, scatter
from seqloader.sources.base import KeySpec, SourceBase
from seqloader.sources.columns import ColumnStore, DamagedStore
from seqloader.sources.hdf_chunks import forget_file, index_files
from seqloader.sources.hdf_layout import FileLayout, FileScan, read_layout, scan_file
from seqloader.sources.hdf_read import OpenFile
from seqloader.sources.hdf_store import (
    FileStarts,
    Metadata,
    dataset_of,
    identity_of,
    metadata_of,
    open_metadata,
)
from seqloader.sources.node_cache import data_mtime
from seqloader.sources.remote import FileCache, RemoteFile, RemoteFiles, cache_for
from seqloader.sources.remote.index import hdf_layout
from seqloader.sources.screen_verdicts import Screened
from seqloader.sources.step_meter import StepMeter

log = logging.getLogger("seqloader")

PathLike = str | os.PathLike

# Handles inherited through fork: kept referenced so that this process never closes (or otherwise
# touches) the parent's HDF5 objects.
_INHERITED: list[OpenFile] = []

# how often a reader of cached remote files looks for evicted files it still holds open (their disk
# space is freed only when closed)
SWEEP_S = 1.0


class HDFSource(SourceBase):
    """One or more RETURNN HDF files, concatenated in the given order.

    Keys are those of the first file (``data`` for ``inputs``, then the target keys); later files
    must have them all (extra keys are dropped, as RETURNN does). String targets cannot be batched
    into tensors and are left out (see ``skipped_keys``). ``keys`` selects a subset. With
    ``use_mmap`` (default) contiguous datasets are memory-mapped; ``use_mmap=False`` reads everything
    through h5py (same bytes, slower).

    The files' per-sequence metadata (lengths, row offsets, tags, file bounds) is read once per
    node into one memory-mapped file in ``index_dir`` (default ``$XDG_CACHE_HOME/seqloader/hdf``),
    keyed by the files' identity; later opens, other ranks and DataLoader workers map it
    (``hdf_store``). ``lengths(key)`` are read-only views of it (int32 where every length fits).

    Remote files: give URLs and ``cache_dir`` (local disk), optionally ``cache_bytes`` (the
    loader keeps each rank's cached files within it, fetching ahead of its plan) and fsspec's
    ``storage_options``; or a ready ``cache=FileCache(...)`` (retries, backoff).

    >>> sl.write_hdf("train.hdf", sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5)]}))
    >>> src = HDFSource("train.hdf")
    >>> src.keys, src.lengths("data").tolist()
    (('data',), [3, 5])
    >>> src.close()
    """

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        keys: Sequence[str] | None = None,
        use_mmap: bool = True,
        cache_dir: PathLike | None = None,
        cache_bytes: int | None = None,
        storage_options: dict | None = None,
        cache: FileCache | None = None,
        index_dir: PathLike | None = None,
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self._paths = tuple(os.fspath(p) for p in paths)
        if not self._paths:
            raise DataError("HDFSource: no files given; expected one path or a list of paths")
        self._use_mmap = bool(use_mmap)
        n = len(self._paths)
        remote = cache_for("HDFSource", self._paths, cache, cache_dir, cache_bytes, storage_options)
        files: list[RemoteFile] = []
        if remote is None:
            for i, p in enumerate(self._paths):
                if not os.path.isfile(p):
                    read_layout(p, _position(i, n))  # raises the DataError naming the file
            identity = identity_of(self._paths, None, None if keys is None else list(keys))
            data_time = data_mtime(self._paths)
        else:
            files = remote.stat(self._paths)
            data_time = None
            identity = identity_of(
                self._paths, [r.key for r in files], None if keys is None else list(keys)
            )

        def read_layouts() -> Sequence[FileLayout | FileScan]:
            if remote is None:  # checked, read block by block as the store is written
                return [scan_file(p, _position(i, n)) for i, p in enumerate(self._paths)]
            return [hdf_layout(remote, r, _position(i, n)) for i, r in enumerate(files)]

        def merge(
            layouts: list[FileLayout | FileScan],
        ) -> tuple[dict[str, KeySpec], dict[str, str]]:
            return _merge_schema(layouts, keys, self._paths)

        origin = f"HDFSource({len(self._paths)} file(s): {', '.join(self._paths)}; keys={keys})"
        with StepMeter() as step:  # seqloader prepare reports what the first open cost
            meta, self.index_built = open_metadata(
                identity, index_dir, read_layouts, merge, origin, data_time
            )
        self.index_step = (step.seconds, step.peak_private)  # plain numbers: pickled
        #: the files' newest modification time (local files), which the node's stores of this
        #: source record (``seqloader cache --superseded``: the newest data's store is kept)
        self.data_mtime = data_time
        self._store = meta.store
        # the screen's verdicts live beside the metadata store (none where it could not be written)
        self._verdict_dir = None if meta.store is None else os.path.dirname(meta.store.path)
        self._schema, self._skipped = meta.schema, meta.skipped
        self._datasets = [{k: dataset_of(k) for k in self._schema}] * n
        self._tags = meta.tags
        self._stored_fingerprint = meta.fingerprint
        self._remote = None if remote is None else RemoteFiles(remote, tuple(files), meta.bounds)
        self._use_columns(meta)
        self._pid: int | None = None
        self._open: list[OpenFile | None] = []
        self._inodes: list[int] = []  # remote files: the inode of each open cached copy
        self._swept = 0.0

    # ---- what planning needs (no data read) ----
    def __len__(self) -> int:
        return int(self._file_start[-1])

    @property
    def paths(self) -> tuple[str, ...]:
        return self._paths

    def file_layout(self) -> np.ndarray:
        """File f (of ``paths``) holds sequences ``[b[f], b[f + 1])`` (``HasFiles``)."""
        return self._file_start

    @property
    def skipped_keys(self) -> dict[str, str]:
        """Keys present in the files but not readable here, with the reason."""
        return dict(self._skipped)

    def fingerprint(self) -> str:
        """``fingerprint_of`` the tags, lengths and schema, computed once when the metadata was
        read from the files and kept with it."""
        return self._stored_fingerprint

    @property
    def store(self) -> ColumnStore | None:
        """The memory-mapped metadata (``hdf_store``); None where no index could be written."""
        return self._store

    def _use_columns(self, meta: Metadata) -> None:
        """Views of the metadata's columns (recreated after unpickling, never pickled)."""
        self._lengths = meta.lengths
        self._file_start = meta.bounds  # [F + 1]
        self._bounds: list[int] = meta.bounds.tolist()  # for bisect: faster than numpy here
        self._starts = FileStarts(meta.starts, meta.bounds)

    def remote_files(self) -> RemoteFiles | None:
        """The remote files and their cache (None for local files): the loader fetches ahead."""
        return self._remote

    def prepare_workers(self) -> None:
        """Called in the trainer process just before DataLoader workers fork: index the files'
        chunked datasets once here, so every worker inherits the index (``hdf_chunks``)."""
        if self._use_mmap:
            if self._remote is None:
                index_files(self._paths)
            else:  # the copies cached by now
                cache = self._remote.cache
                index_files([cache.path(r) for r in self._remote.files if cache.has(r)])

    def locate(self, index: int) -> tuple[int, int]:
        """(file number, sequence number within that file) of global sequence ``index``."""
        bounds = self._bounds
        if not 0 <= index < bounds[-1]:
            raise IndexError(
                f"sequence index {index} out of range for {bounds[-1]} sequences in {self!r}"
            )
        f = bisect.bisect_right(bounds, index) - 1
        return f, index - bounds[f]

    def where(self, index: int) -> str:
        """``file F (sequence J of that file)`` of global sequence ``index``."""
        f, j = self.locate(int(index))
        return f"file {self._paths[f]!r} (sequence {j} of that file)"

    # ---- reading (in the process that reads) ----
    def read(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        f, j = self.locate(index)
        try:
            return self._file(f).read(self._starts[f], j)
        except Exception as e:  # also DataError from opening: add the sequence to the message
            raise self._read_error(index, e) from e

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, np.ndarray]]:
        """Like ``[read(i) for i in indices]``, with as few HDF5 calls as the layout allows. An
        error names the file; ``seqloader.sources.base.read_batch`` (which every reader of batches
        goes through) then reads the batch again one by one and names the broken sequence."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            bad = int(idx[(idx < 0) | (idx >= len(self))][0])
            self.locate(bad)  # raises IndexError naming it
        groups = []
        for f, pos, local in by_part(self._file_start, idx):
            try:
                groups.append((pos, self._file(f).read_many(self._starts[f], local)))
            except SeqLoaderError:
                raise
            except Exception as e:
                raise DataError(
                    f"reading {len(local)} sequences of file {self._paths[f]!r} in one pass "
                    f"failed: {type(e).__name__}: {e}"
                ) from e
        return scatter(len(idx), groups)

    def read_into(
        self, indices: np.ndarray, out: Mapping[str, np.ndarray], screen: bool = False
    ) -> list[int]:
        """Sequence ``indices[j]`` into ``out[key][j, :length]`` for every key (arrays
        ``[B, >= max length, *feature_shape]`` of the key's dtype, e.g. a padded batch): one copy
        from the file's bytes (mmap or chunks) to the destination. Rows past a sequence's length
        are not written. Errors name the sequence, as ``read`` does.

        With ``screen``, float data is screened for NaN/Inf right after each copy (bytes still in
        cache); returns the rows ``j`` that may hold some (an exact check must confirm)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        listed = idx.tolist()  # a batch's few indices: Python's min and max beat two reductions
        if listed and (min(listed) < 0 or max(listed) >= len(self)):
            bad = int(idx[(idx < 0) | (idx >= len(self))][0])
            self.locate(bad)  # raises IndexError naming it
        groups: list[tuple[int, Sequence[int], np.ndarray]]  # (file, rows in out, local indices)
        if len(self._paths) == 1:
            groups = [(0, range(len(idx)), idx)]
        else:
            groups = [
                (f, rows.tolist(), local) for f, rows, local in by_part(self._file_start, idx)
            ]
        suspects: set[int] = set()
        for f, pos, local in groups:
            try:
                suspects |= self._file(f).read_into(self._starts[f], local, out, pos, screen)
            except Exception as e:
                # find and name the sequence that fails; read() raises the named error
                for j in pos:
                    self.read(int(idx[j]))
                tags = [self.tag(int(idx[j])) for j in list(pos)[:3]]
                raise DataError(
                    f"reading sequences {idx[list(pos)].tolist()[:3]}... (tags {tags}...) of file "
                    f"{self._paths[f]!r} into a batch failed: {type(e).__name__}: {e} (each of "
                    "them reads fine alone: check the destination arrays' shapes and dtypes)"
                ) from e
        return sorted(suspects)

    def _file(self, f: int) -> OpenFile:
        pid = os.getpid()
        if self._pid != pid:
            # After a fork the inherited handles belong to the parent: never touch them (no read,
            # no close); this process opens its own.
            _INHERITED.extend(o for o in self._open if o is not None)
            self._open = [None] * len(self._paths)
            self._inodes = [0] * len(self._paths)
            self._pid = pid
        opened = self._open[f]
        if self._remote is not None:
            now = time.monotonic()
            if now - self._swept > SWEEP_S:
                self._swept = now
                self._sweep()
                opened = self._open[f]
        if opened is None:
            path = self._paths[f]
            if self._remote is not None:  # a missing copy is fetched (or waited for) here
                path = self._remote.cache.ensure(self._remote.files[f])
            opened = OpenFile(path, self._datasets[f], self._use_mmap, self._verdict_dir)
            try:
                self._check_unchanged(f, opened)
            except DataError:
                opened.close()
                raise
            self._open[f] = opened
            if self._remote is not None:
                self._inodes[f] = _inode(path)
        return opened

    def screen_files(self) -> list[Screened]:
        """Screen every float key of every file for NaN/Inf now and keep the node's verdicts
        (``OpenFile.screen_whole``; ``seqloader prepare``), so that no process's first epoch
        screens them. Remote files are left to the loader (screening would fetch every byte
        ahead of the plan)."""
        if self._remote is not None:
            return [
                Screened(p, k, "remote", None, 0.0) for p in self._paths for k in self._floats()
            ]
        out = []
        for f, path in enumerate(self._paths):
            was_open = self._pid == os.getpid() and self._open[f] is not None
            opened = self._file(f)
            for key in self._floats():
                if key in opened.readers:
                    started = time.perf_counter()
                    outcome, store = opened.screen_whole(key, self._starts[f][key])
                    out.append(Screened(path, key, outcome, store, time.perf_counter() - started))
            if not was_open:  # one file open at a time, however many there are
                opened.close()
                self._open[f] = None
        return out

    def _floats(self) -> list[str]:
        return [k for k, spec in self._schema.items() if np.dtype(spec.dtype).kind == "f"]

    def _sweep(self) -> None:
        """Close cached copies evicted (or replaced) since they were opened: an open file keeps
        its disk space, so holding evicted ones would let the cache outgrow its budget."""
        assert self._remote is not None
        cache = self._remote.cache
        for g, opened in enumerate(self._open):
            path = cache.path(self._remote.files[g])
            if opened is not None and _inode(path) != self._inodes[g]:
                opened.close()  # a batch still holding a view keeps the mapping until it goes
                self._open[g] = None
                forget_file(path, self._inodes[g])  # its chunk indexes (if any) go with it

    def _check_unchanged(self, f: int, opened: OpenFile) -> None:
        """The offsets come from open time: refuse a file replaced since by other data."""
        for key, reader in opened.readers.items():
            spec, rows = self._schema[key], int(self._starts[f][key][-1])
            if reader.shape != (rows, *spec.feature_shape) or reader.dtype != spec.dtype:
                raise DataError(
                    f"HDF file {self._paths[f]!r} changed since the source was opened: key "
                    f"{key!r} is now {reader.dtype}{list(reader.shape)}, expected "
                    f"{np.dtype(spec.dtype)}{[rows, *spec.feature_shape]}. Open a new HDFSource "
                    "(and a new loader) after replacing data files."
                )

    def _read_error(self, index: int, e: Exception) -> DataError:
        if isinstance(e, DamagedStore):  # the node's metadata store, not the file: as it is
            return e
        f, j = self.locate(index)
        return DataError(
            f"reading sequence {index} (tag {self.tag(index)!r}; sequence {j} of file "
            f"{self._paths[f]!r}) failed: {type(e).__name__}: {e}. The file may be damaged, moved "
            "or changed since the source was opened; check it with h5py or re-create it."
        )

    def mapped_keys(self) -> dict[str, tuple[str, ...]]:
        """Per file, the keys read through mmap in this process (opens the files)."""
        return {p: self._file(f).mapped_keys for f, p in enumerate(self._paths)}

    def close(self) -> None:
        """Close this process's handles (they reopen on the next read)."""
        opened_here = [o for o in self._open if o is not None]
        if self._pid == os.getpid():
            for opened in opened_here:
                opened.close()
        else:
            _INHERITED.extend(opened_here)
        self._open = [None] * len(self._paths)

    def __enter__(self) -> HDFSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_open"] = []
        state["_pid"] = None
        if self._store is not None:  # the store pickles its path: a worker maps it again
            for name in ("_lengths", "_file_start", "_bounds", "_starts"):
                state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "_starts" not in state:
            assert self._store is not None
            self._use_columns(metadata_of(self._store))

    def __repr__(self) -> str:
        names = [Path(p).name for p in self._paths]
        files = names[0] if len(names) == 1 else f"{len(names)} files: {', '.join(names[:3])}"
        if len(names) > 3:
            files += ", ..."
        keys = ", ".join(f"{k}: {s.describe()}" for k, s in self._schema.items())
        return f"HDFSource({files}; {len(self)} seqs; {keys})"


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1


def _position(i: int, n: int) -> str:
    return f" (file {i + 1} of {n})" if n > 1 else ""


def _merge_schema(
    layouts: Sequence[FileLayout | FileScan], keys: Sequence[str] | None, paths: tuple[str, ...]
) -> tuple[dict[str, KeySpec], dict[str, str]]:
    """The first file decides the keys; later ones must hold them with the same spec."""
    first = layouts[0]
    skipped = dict(first.skipped)
    if keys is None:
        wanted = list(first.schema)
    else:
        wanted = list(keys)
        for k in wanted:
            if k not in first.schema:
                why = f" ({skipped[k]})" if k in skipped else ""
                raise DataError(
                    f"HDFSource: key {k!r}{why} is not readable in {paths[0]!r}; "
                    f"readable keys: {list(first.schema)}"
                )
    schema = {k: first.schema[k] for k in wanted}
    for i, lay in enumerate(layouts[1:], start=1):
        where = f"{lay.path!r}{_position(i, len(layouts))}"
        missing = [k for k in schema if k not in lay.schema]
        if missing:
            raise DataError(
                f"HDF file {where} lacks key(s) {missing} that the first file {paths[0]!r} has; "
                "later files must hold every key of the first (extra keys are dropped). Fix: put "
                "the file with the fewest keys first, or select common keys with keys=[...]."
            )
        for k, spec in schema.items():
            other = lay.schema[k]
            if other != spec:
                raise DataError(
                    f"HDF file {where}: key {k!r} is {other.describe()}, but in the first file "
                    f"{paths[0]!r} it is {spec.describe()}; all files must agree on dtype, "
                    "feature shape and vocabulary"
                )
        extra = sorted(set(lay.schema) - set(schema))
        if extra and keys is None:
            log.info("seqloader: %s: dropping key(s) %s not in the first file", where, extra)
    return schema, skipped
