"""The NaN/Inf screen's verdicts, kept per node: a float dataset of an unchanged file that one
process screened whole is not screened again, by its later epochs or by any later process.

The screen of batches read straight into their padded memory (``loading.direct``) reads each
float row's bytes once more after its copy (a BLAS ``dot`` per row: the part of a first epoch at
0 workers that a plain numpy loop does not do). Its answer depends only on the dataset's values.
So when every sequence of a file's dataset has been screened clean in one process, that process
writes a small store (``columns.open_or_build``: checksummed, written atomically, once per node)
beside the files' metadata store, whose identity holds:

- the file as the operating system sees it when it is opened: absolute path, device, inode, size,
  ``mtime_ns`` and ``ctime_ns``. No writer can set ``ctime``: a file rewritten in place with its
  old size and its old ``mtime`` restored still gets another identity, so its values are screened
  again (the metadata store's identity, path, size and ``mtime_ns``, would not notice that);
- the dataset: its path in the file, dtype and shape (every row of it: the verdict is written only
  when the file's sequences cover them all);
- the screen's version (``SCREEN_VERSION``).

``seqloader prepare`` (``sl.prepare``) writes the same verdicts ahead of a job: it screens every
float dataset whole (``HDFSource.screen_files``), so that no first epoch on the node screens it.

Only datasets whose values all lie in the file itself get verdicts (``hdf_here.values_here``): a
dataset reached through an external link, a virtual dataset or one with external raw storage
keeps its values in other files, whose changes this identity cannot see; those are screened in
every process, as before.

A file changed within one tick of the file system's clock after its previous write keeps both of
its times (the tick is 1-10 ms on local disks, up to 2 s elsewhere). So a file is settled only
when its ``mtime`` and ``ctime`` lie at least ``SETTLE_S`` before the moment it is opened (git's
rule for racy index entries): any later change then moves one of them. Files not settled get no
verdict, looked up or written; they are screened as before. That moment is read on the
reader's clock, which set the file's times on a local file system (``local_clock``). On any other
(NFS, SMB, Lustre, FUSE) the times are the server's clock, which may lag the reader's, and a file
written just now would look settled: there a file must also be older than ``CLOCK_SKEW_S`` (see
there). Nothing is written into the data's folder to read the server's clock: a shared corpus
is mostly mounted read-only, and a probe file left by a killed process would litter it.

DataLoader workers each screen a share of a file and would never finish one alone: each keeps
the sequences it found clean as its *part* (a store of its own, in the verdict's own folder of
parts ``screenparts-*/``) whenever it has found another ``1/PARTS`` of the file clean
(``shares_files``), and every process takes in the parts it finds; the process whose union is
whole keeps the verdict and drops the parts, and a process that starts screens only what no part
names. Looking for a verdict's parts lists that folder alone: its cost does not grow with the
other stores of the node's folder (tens of thousands on a shared node). Parts of the earlier
layout (``screenpart-*.cols`` beside the verdicts, written by seqloader before ``PART_FORMAT``
/2) are never read here: the sequences they named are screened again (a part is a few bytes per
sequence; ``seqloader cache --clean --older-than`` removes them once unused).

Datasets smaller than ``MIN_BYTES`` get none: for them the screen costs less than a verdict.
A verdict store that is damaged (one changed byte of its header, sums or column) is never
trusted: the lookup warns naming the store and the column, the dataset is screened again and the
store rebuilt when the next whole pass is clean. A dataset that holds NaN/Inf never gets a verdict:
its sequences are screened (and reported) in every epoch, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import multiprocessing
import os
import re
import time
import uuid
import warnings
from typing import NamedTuple

import numpy as np

from seqloader.errors import DataWarning
from seqloader.sources.columns import (
    ColumnStore,
    CorruptStore,
    DamagedStore,
    StaleStore,
    open_or_build,
    write_store,
)
from seqloader.sources.node_cache import about

#: the screen's version in each verdict's identity (a changed screen gets new verdicts)
SCREEN_VERSION = "seqloader-nonfinite-screen/1"
#: the verdict stores' format (their columns and meta under this screen), written into their
#: header: ``seqloader cache --clean --superseded`` keeps this one over another version's
FORMAT = f"{SCREEN_VERSION} verdict/1"
#: the parts' format: /2 keeps each verdict's parts in a folder of their own (``screenparts-*``)
PART_FORMAT = f"{SCREEN_VERSION} verdict-part/2"
#: a file whose mtime or ctime is younger than this when opened gets no verdict (see above)
SETTLE_S = 2.0
#: what ``seqloader cache`` lists these stores as
KIND = "NaN/Inf screen verdict"
#: datasets smaller than this get no verdict. Writing one (a small file, fsynced) took ~16 ms and
#: looking one up ~0.2 ms (measured on this project's machine), while screening 64 MiB of float32
#: rows costs ~4.5 ms: a smaller dataset is cheaper to screen in each process than its verdict is
#: to write, and a corpus of many small files would stall its first epoch once per file
MIN_BYTES = 64 << 20
#: a process keeps its part of a pass (the sequences it found clean) each time it has found
#: another 1/PARTS of a file's sequences clean, and takes in the parts other processes kept: the
#: DataLoader's workers (or the ranks), each screening only its batches, make a verdict together
PARTS = 4


class Screened(NamedTuple):
    """One float dataset of one file screened ahead of the batches (``HDFSource.screen_files``,
    for ``seqloader prepare``): ``outcome`` "found" or "kept" (the verdict, in ``store``),
    "nonfinite", "small" (under ``MIN_BYTES``), "none" (no verdict may be kept for it) or
    "remote" (left to the loader)."""

    path: str
    key: str
    outcome: str
    store: str | None
    seconds: float


#: file systems whose file times come from this machine's own clock (the reader's): on any
#: other the file times are the server's (``CLOCK_SKEW_S``)
LOCAL_FILE_SYSTEMS = frozenset(
    [
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "bcachefs",
        "f2fs",
        "jfs",
        "nilfs2",
        "reiserfs",
        "zfs",
        "tmpfs",
        "ramfs",
        "overlay",
        "squashfs",
        "erofs",
        "vfat",
        "exfat",
        "ntfs3",
        "hfsplus",
    ]
)
#: how much further in the past (s, on the reader's clock) a file's times must lie on a file
#: system whose times come from another machine's clock (NFS, SMB, Lustre, FUSE: the server's),
#: which may lag the reader's. Clocks apart by more than minutes break NFS and Kerberos anyway
#: (Kerberos refuses 5 min by default), so a cluster's clocks agree well within this: a corpus
#: written more than this ago gets its verdict, a file changed within it is screened as before
CLOCK_SKEW_S = 600.0
#: st_dev -> whether that file system's times come from this machine's clock (``local_clock``)
_LOCAL: dict[int, bool] = {}


def now() -> float:
    """The reader's wall clock (tests put another in its place)."""
    return time.time()


def settle_s(path: str, st: os.stat_result) -> float:
    """How long before the reader's clock (``now``) the times of the file at ``path`` (stat
    ``st``) must lie for it to be settled: ``SETTLE_S`` on a local file system, plus
    ``CLOCK_SKEW_S`` on any other (its times are another machine's clock)."""
    if st.st_dev not in _LOCAL:
        _LOCAL[st.st_dev] = local_clock(path)
    return SETTLE_S if _LOCAL[st.st_dev] else SETTLE_S + CLOCK_SKEW_S


def local_clock(path: str) -> bool:
    """Whether the file system of ``path`` takes its file times from this machine's clock
    (``LOCAL_FILE_SYSTEMS``, by the longest mount point in ``/proc/self/mountinfo`` that holds
    it); False where that cannot be read."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields, _, rest = line.partition(" - ")
                parts = fields.split()
                if len(parts) < 5 or not rest:
                    continue
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[4])
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, rest.split()[0]
    except OSError:
        return False
    return kind in LOCAL_FILE_SYSTEMS


def shares_files() -> bool:
    """Whether this process keeps parts: one started by another Python process through
    ``multiprocessing`` (a DataLoader worker) screens only a share of each file; a process on its
    own (0 workers, a rank started by torchrun) reads its files whole over its epochs, so it keeps
    only the verdict and its first epoch pays no part writes (~16 ms each, fsynced)."""
    return multiprocessing.parent_process() is not None


def worth_keeping(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Whether a dataset of this dtype and shape is large enough for a verdict (``MIN_BYTES``).

    >>> worth_keeping(np.dtype("float32"), (10**6, 80)), worth_keeping(np.dtype("float32"), (500, 80))
    (True, False)
    """
    return math.prod(shape) * np.dtype(dtype).itemsize >= MIN_BYTES


def _part_stores(folder: str) -> list[str]:
    """The part stores in one verdict's folder of parts (none when it does not exist)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names) if n.endswith(".cols")]


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileVerdicts:
    """The node's verdicts about one file, as it was when opened (``settled``).

    >>> import h5py, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with h5py.File(f"{folder}/a.hdf", "w") as f:
    ...     _ = f.create_dataset("x", data=np.ones((4, 2), "float32"))
    >>> os.utime(f"{folder}/a.hdf", (now() - 60, now() - 60))  # a file written a minute ago
    >>> FileVerdicts.settled(folder, f"{folder}/a.hdf") is None  # its ctime is still new
    True
    """

    __slots__ = ("folder", "path", "stat", "token")

    def __init__(self, folder: str, path: str, stat: tuple[int, ...]) -> None:
        self.folder, self.path, self.stat = folder, path, stat
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # names this process's parts

    @classmethod
    def settled(cls, folder: str, path: str) -> FileVerdicts | None:
        """The verdicts of the file at ``path`` (kept in ``folder``), or None when the file was
        modified less than ``settle_s`` ago (a change now might keep its times)."""
        try:
            st = os.stat(path)
        except OSError:  # opening the file says what is wrong
            return None
        if now() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < settle_s(path, st):
            return None
        return cls(folder, os.path.abspath(path), _stat_key(st))

    def unchanged(self) -> bool:
        """Whether the file is still the one that was stat'ed when opened."""
        try:
            return _stat_key(os.stat(self.path)) == self.stat
        except OSError:
            return False

    def store_path(self, dataset: str, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[str, str]:
        """(path, identity) of the verdict store of ``dataset`` (its dtype and shape)."""
        h = hashlib.sha256()
        parts = (SCREEN_VERSION, self.path, *map(str, self.stat), dataset, np.dtype(dtype).str)
        for part in (*parts, *map(str, shape)):
            h.update(part.encode("utf-8", "surrogateescape"))
            h.update(b"\0")
        identity = h.hexdigest()
        return os.path.join(self.folder, f"screen-{identity[:24]}.cols"), identity

    def _parts(self, dataset: str, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[str, str]:
        """(the folder of the part stores of ``dataset``'s verdict, their identity)."""
        path, identity = self.store_path(dataset, dtype, shape)
        name = os.path.basename(path)[len("screen-") : -len(".cols")]
        return os.path.join(self.folder, f"screenparts-{name}"), identity + "/part"

    def screened_before(
        self, dataset: str, dtype: np.dtype, shape: tuple[int, ...], n: int
    ) -> np.ndarray | None:
        """The union of the sequences (of ``n``) that processes found clean in this very file and
        kept as parts (``keep_part``): bool ``[n]``, or None when there is none. A damaged part
        is not trusted (``DataWarning`` naming it)."""
        if not worth_keeping(dtype, shape):
            return None
        folder, identity = self._parts(dataset, dtype, shape)
        union = None
        for part in _part_stores(folder):
            try:
                store = ColumnStore(part, identity, PART_FORMAT)
            except DamagedStore as e:
                warnings.warn(
                    f"{KIND} {e.path!r} (a part), column {e.column!r}: its contents differ from "
                    "what was written (this node's cache, not the data files), so it is not "
                    f"trusted: the sequences of {dataset!r} of {self.path!r} it names are "
                    "screened again, and the verdict rebuilt from the data once all are clean",
                    DataWarning,
                    stacklevel=5,
                )
                continue
            except (OSError, StaleStore, CorruptStore):  # gone, or half a file, or another's
                continue
            clean = store.column("clean")
            if clean.shape != (n,) or store.meta.get("dataset") != dataset:
                continue
            union = clean != 0 if union is None else union | (clean != 0)
        return union

    def keep_part(
        self, dataset: str, dtype: np.dtype, shape: tuple[int, ...], clean: np.ndarray
    ) -> bool:
        """Keep "sequences ``clean`` (bool ``[n]``) of ``dataset`` are finite" as this
        process's part (replacing its earlier one); False where it cannot be written or the file
        changed since it was opened."""
        if not worth_keeping(dtype, shape) or not self.unchanged():
            return False
        folder, identity = self._parts(dataset, dtype, shape)
        meta = {
            "dataset": dataset,
            "file": self.path,
            "about": about(f"{KIND} (part {self.token}): {dataset!r} of {self.path}"),
        }
        column = np.ascontiguousarray(clean, dtype=np.uint8)
        try:
            os.makedirs(folder, exist_ok=True)
            part = os.path.join(folder, f"{self.token}.cols")
            write_store(part, identity, {"clean": column}, meta, format=PART_FORMAT)
        except OSError:  # (also: the parts just dropped with their folder, the verdict kept)
            return False
        return True

    def drop_parts(self, dataset: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        """Remove the parts of ``dataset``'s verdict (once the verdict itself is kept)."""
        folder, _ = self._parts(dataset, dtype, shape)
        for part in _part_stores(folder):
            with contextlib.suppress(OSError):
                os.unlink(part)
        with contextlib.suppress(OSError):  # (not empty: a part written meanwhile, left)
            os.rmdir(folder)

    def finite(self, dataset: str, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
        """Whether a process screened every value of ``dataset`` in this very file and found
        none NaN/Inf. A damaged verdict is not trusted (``DataWarning`` naming it)."""
        if not worth_keeping(dtype, shape):
            return False
        path, identity = self.store_path(dataset, dtype, shape)
        try:
            store = ColumnStore(path, identity, FORMAT)
        except DamagedStore as e:
            warnings.warn(
                f"{KIND} {e.path!r}, column {e.column!r}: its contents differ from what was "
                f"written (this node's cache, not the data files), so it is not trusted: "
                f"{dataset!r} of {self.path!r} is screened again, and the verdict rebuilt from "
                "the data once a whole pass over it is clean",
                DataWarning,
                stacklevel=5,
            )
            return False
        except (OSError, StaleStore, CorruptStore):  # none yet, or half a file, or another's
            return False
        rows = store.column("rows")
        return rows.shape == (1,) and int(rows[0]) == shape[0] and store.meta["dataset"] == dataset

    def record(self, dataset: str, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
        """Keep the verdict "every value of ``dataset`` is finite" for this file; False where it
        cannot be written (no writable folder) or the file changed since it was opened."""
        if not worth_keeping(dtype, shape) or not self.unchanged():
            return False
        path, identity = self.store_path(dataset, dtype, shape)
        rows = np.array([shape[0]], dtype=np.int64)
        meta = {
            "dataset": dataset,
            "file": self.path,
            "about": about(f"{KIND}: {dataset!r} of {self.path}"),
            "data_mtime": self.stat[3] / 1e9,  # ``seqloader cache --superseded``: newest data
        }
        try:
            open_or_build(path, identity, lambda: ({"rows": rows}, meta), format=FORMAT)
        except OSError:
            return False
        return True
