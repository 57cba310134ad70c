"""The node's stores under ``$XDG_CACHE_HOME/seqloader``: where they live, what was built, and
which ones are stale.

Large corpora keep per-node files there (``seqloader.sources.columns.open_or_build``): a source's
metadata (``hdf/``, ``shards/``, a ``ConcatSource``'s one index space: ``concat/``), the
duplicate-tag verdict (``checks/``) and indexed planning's
bucket index (``buckets/``). They are built once per node and then only read, so nothing deletes
them; ``list_stores`` says what is there (size, when last used, what each belongs to) and
``remove`` deletes the ones asked for, never one a process is building (the builder holds
``PATH.lock``, which is tried without waiting) and never a half-written one of a live build.
A process that has a removed store mapped keeps reading it (the pages stay until it unmaps).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from seqloader.sources.columns import MAGICS, ColumnStore, CorruptStore

#: the longest ``about`` a store keeps (a source's description can list many files)
ABOUT_CHARS = 300


def cache_root() -> str:
    """``$XDG_CACHE_HOME/seqloader`` (else ``~/.cache/seqloader``): the node's stores."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "seqloader")


def cache_dir(kind: str) -> str:
    """The folder of one kind of store, e.g. ``cache_dir("buckets")``."""
    return os.path.join(cache_root(), kind)


def size_text(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``3.1 MiB``, ``2.4 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def about(text: str) -> str:
    """What a store belongs to, shortened to ``ABOUT_CHARS`` for its header."""
    return text if len(text) <= ABOUT_CHARS else text[: ABOUT_CHARS - 3] + "..."


@dataclass(frozen=True)
class NodeStore:
    """One store a loader of a node needs: ``path`` None when it is kept in memory instead
    (``note`` says why); ``built`` whether this call built it (else it was found);
    ``seconds`` how long building or opening took here, ``private_peak`` the peak private
    memory it took (bytes, -1 unknown; ``seqloader.sources.step_meter``)."""

    kind: str
    path: str | None
    built: bool
    seconds: float
    nbytes: int = 0
    note: str = ""
    private_peak: int = -1

    @classmethod
    def of(cls, kind: str, store: ColumnStore, built: bool, seconds: float) -> NodeStore:
        return cls(kind, store.path, built, seconds, store.nbytes())


@dataclass(frozen=True)
class CachedStore:
    """A file found under the cache: a store (``state`` "ok"), a store being built
    ("building": its lock is held), a leftover of a build that died ("leftover": a temporary
    file no process is writing) or a file that is not a whole store ("incomplete")."""

    path: str
    kind: str  # the folder under the cache root: buckets, checks, hdf, shards, ...
    nbytes: int
    last_used: float  # seconds since the epoch: the later of modification and access
    state: str
    identity: str = ""
    about: str = ""  # what it belongs to (the source, options), where the builder said
    sequences: int | None = None
    format: str = ""  # what its builder wrote it as ("" for stores written before they said)
    #: the newest modification time of the data it was built from, where its builder knew the
    #: files (``data_mtime``); None for the others and for stores written before they said
    data_mtime: float | None = None

    def age_days(self, now: float | None = None) -> float:
        return max(0.0, ((time.time() if now is None else now) - self.last_used) / 86400)


def data_mtime(paths: Iterable[str | os.PathLike]) -> float | None:
    """The newest modification time of local files ``paths`` (seconds; None when one cannot be
    stat'ed): what a store records of the data it is built from (``stale``, ``--superseded``)."""
    try:
        return max((os.stat(p).st_mtime_ns for p in paths), default=0) / 1e9
    except OSError:
        return None


def with_data_time(meta: dict[str, object], data_time: float | None) -> dict[str, object]:
    """A store's ``meta`` with the data's newest modification time, where it is known."""
    return meta if data_time is None else {**meta, "data_mtime": data_time}


def list_stores(folders: Sequence[str] | None = None) -> list[CachedStore]:
    """Every store (and leftover) under ``folders`` (default: the cache root), sorted by path."""
    found: list[CachedStore] = []
    for top in folders or [cache_root()]:
        for path in _files(top):
            item = _describe(top, path)
            if item is not None:
                found.append(item)
    return sorted(found, key=lambda s: s.path)


def stale(
    stores: Iterable[CachedStore],
    older_than_days: float | None = None,
    superseded: bool = False,
    now: float | None = None,
    formats: Collection[str] = (),
) -> list[CachedStore]:
    """The stores to remove: leftovers and incomplete files always; stores unused for more than
    ``older_than_days``; with ``superseded``, every store whose ``about`` (same source and
    options) has a preferred store of the same kind (``_superseded``). A store being built is
    never stale."""
    items = [s for s in stores if s.state != "building"]
    out = {s.path: s for s in items if s.state in ("leftover", "incomplete")}
    ok = [s for s in items if s.state == "ok"]
    if older_than_days is not None:
        out.update({s.path: s for s in ok if s.age_days(now) > older_than_days})
    if superseded:
        groups: dict[tuple[str, str], list[CachedStore]] = {}
        for s in ok:
            if s.about:
                groups.setdefault((s.kind, s.about), []).append(s)
        for group in groups.values():
            out.update({s.path: s for s in _superseded(group, formats)})
    return sorted(out.values(), key=lambda s: s.path)


def _superseded(group: list[CachedStore], formats: Collection[str]) -> list[CachedStore]:
    """Of one source's stores (same kind and ``about``), all but the one to keep. By data first:
    a store of older data than another is never read again by any version (each one's next open
    sees the data changed), so it goes whatever its format. Then, among the stores of the newest
    data, this seqloader's format (``formats``: those it writes, so reads) over another
    version's (never read here), then the newest build."""
    built = {s.path: _built_at(s) for s in group}
    current = [a for a in group if not any(_older_data(a, b, built) for b in group)]
    keep = max(current or group, key=lambda s: (s.format in formats, built[s.path]))
    return [s for s in group if s.path != keep.path]


def _older_data(a: CachedStore, b: CachedStore, built: dict[str, float]) -> bool:
    """Whether ``a`` was built from older data than ``b``: both recorded data times (one
    clock: the data's file system's) older *and* ``a`` built before ``b`` (data restored with
    its older modification time kept, by ``tar``, ``rsync -a`` or ``cp -p``, is the data there
    now: its store, built last, is not older data; where the two orders disagree nothing is
    known), else ``a`` built before the data ``b`` records changed. Nothing is known when ``b``
    records none."""
    if b.data_mtime is None:
        return False
    if a.data_mtime is not None:
        return a.data_mtime < b.data_mtime and built[a.path] < built[b.path]
    return built[a.path] < b.data_mtime


def remove(stores: Iterable[CachedStore]) -> tuple[list[str], list[str]]:
    """Delete these stores (and their lock files) -> (removed paths, skipped paths). A store whose
    lock another process holds (it is being built, or a leftover of a build still running) is
    skipped, as is a file that changed since it was listed."""
    removed: list[str] = []
    skipped: list[str] = []
    for s in stores:
        lock = _lock_of(_store_of(s.path))
        with _try_lock(lock) as held:
            if not held or not _unchanged(s):
                skipped.append(s.path)
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(s.path)
            removed.append(s.path)
            if s.state != "leftover":  # the store's own lock goes with it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
    return removed, skipped


def _files(top: str) -> Iterator[str]:
    for folder, _, names in os.walk(top):
        for name in sorted(names):
            if not name.endswith(".lock"):
                yield os.path.join(folder, name)


def _describe(top: str, path: str) -> CachedStore | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:  # removed meanwhile
        return None
    rel = os.path.relpath(path, top)
    kind = rel.split(os.sep)[0] if os.sep in rel else "."
    used = max(st.st_mtime, st.st_atime)
    if path.endswith(".tmp"):
        with _try_lock(_lock_of(_store_of(path))) as free:
            state = "leftover" if free else "building"
        return CachedStore(path, kind, st.st_size, used, state)
    if not _has_magic(path):
        return None  # not a store of ours (left alone)
    try:
        store = ColumnStore(path)
    except CorruptStore:
        with _try_lock(_lock_of(path)) as free:
            state = "incomplete" if free else "building"
        return CachedStore(path, kind, st.st_size, used, state)
    meta: dict[str, Any] = store.meta if isinstance(store.meta, dict) else {}
    with _try_lock(_lock_of(path)) as free:
        state = "ok" if free else "building"
    n = meta.get("sequences")
    return CachedStore(
        path,
        kind,
        st.st_size,
        used,
        state,
        store.identity,
        str(meta.get("about", "")),
        int(n) if isinstance(n, int) else None,
        store.format,
        _seconds(meta.get("data_mtime")),
    )


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _has_magic(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGICS[0])) in MAGICS
    except OSError:
        return False


def _store_of(path: str) -> str:
    """The store a file belongs to: itself, or for a build's temporary file
    (``StoreWriter``'s ``PATH.PID.HEX.tmp``) the store being built."""
    return path.rsplit(".", 3)[0] if path.endswith(".tmp") else path


def _lock_of(path: str) -> str:
    return f"{path}.lock"


def _built_at(s: CachedStore) -> float:
    try:
        return os.stat(s.path).st_mtime
    except FileNotFoundError:
        return 0.0


def _unchanged(s: CachedStore) -> bool:
    """The file is still the one listed (not rebuilt or replaced since)."""
    try:
        st = os.stat(s.path)
    except FileNotFoundError:
        return True
    return st.st_size == s.nbytes and (s.state != "ok" or _identity_of(s.path) == s.identity)


def _identity_of(path: str) -> str:
    try:
        return ColumnStore(path).identity
    except (CorruptStore, OSError):
        return ""


@contextlib.contextmanager
def _try_lock(path: str) -> Iterator[bool]:
    """Hold ``path``'s ``flock`` if no other process holds it (True), else False at once. A lock
    file that does not exist is free (nothing is being built); it is not created."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        except OSError:  # no flock on this file system: nothing can be known to be building
            yield True
            return
        yield True
    finally:
        os.close(fd)
