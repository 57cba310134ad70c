"""``FileCache``: whole remote files (any fsspec URL) copied into a local directory, once per node.

The directory (local disk: ``flock`` must work on it) holds::

    files/<key>_<name>             complete copies: created only by renaming a verified download
    files/.<key>.<pid>.<n>.part    downloads in progress; a killed process's leftovers are removed
                                   by the next FileCache that finds their entry unlocked
    locks/<key>.lock               one flock per entry: held while fetching or evicting it
    index/<key>.npz                metadata read at open (``remote.index``)
    seals/<key>.json               what was verified of a complete copy: size, mtime_ns, ctime_ns,
                                   inode and the content's MD5 (the ETag where it is one, else
                                   computed while downloading)
    needs/<owner>.json + .lock     the entries each live loader needs now; eviction keeps them
    fetch.log                      one line per completed fetch: pid, bytes, URL
    high_water                     the most bytes ever under files/ (measured after each change)

An entry's key hashes (URL, size, version), the version being the store's ETag, else its
modification time: a file replaced on the store gets a new key, so an old copy is never read as
the new file. A download is written to a temporary name, fsynced, checked (size; the content's MD5
where the ETag is one), and only then renamed into place, so a copy under its final name is whole.
Processes that share the directory take the entry's lock before fetching, so a file is fetched
once per node however many ranks and workers ask for it; the others wait for it.

A copy that changes on disk after it was verified (edited, overwritten, bit-flipped by a tool) is
never served: every open (``has``/``ensure``) stats the copy and compares size, mtime, ctime and
inode with its seal, and a copy that differs (or has no seal) is fetched again, with a
``DataWarning`` naming it. ``verify="checksum"`` also hashes the whole copy at every open and
compares it with the sealed MD5, catching what leaves the stat unchanged (media bit rot), at the
cost of reading the file once more (``benchmarks/cache_verify.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from seqloader.errors import DataError, DataWarning, FetchError, OptionError
from seqloader.extras import require
from seqloader.sources.remote.stats import COUNTERS

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_NAME = re.compile(r"[^A-Za-z0-9._\-]")

BlockHook = Callable[["RemoteFile", int], None]
VERIFY_MODES = ("stat", "checksum")
SEAL_FIELDS = ("size", "mtime_ns", "ctime_ns", "ino")


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme://...``; ``file://`` too) rather than a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


@dataclass(frozen=True)
class RemoteFile:
    """A remote file as the store described it at open: size and version (ETag or mtime)."""

    url: str
    size: int
    version: str

    @property
    def key(self) -> str:
        text = f"{self.url}\0{self.size}\0{self.version}"
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:24]

    @property
    def name(self) -> str:
        """The entry's file name: the key, then the URL's last part (readable in ``ls``)."""
        base = _NAME.sub("_", self.url.rstrip("/").rsplit("/", 1)[-1])[-80:]
        return f"{self.key}_{base}"


def _version(info: dict[str, Any]) -> str:
    """The store's ETag (quotes stripped), else the modification time, else ""."""
    for name in ("ETag", "etag", "md5"):
        if info.get(name):
            return str(info[name]).strip('"')
    for name in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(name)
        if value is not None:
            stamp = value.timestamp() if hasattr(value, "timestamp") else value
            return f"mtime:{stamp}"
    return ""


class FileCache:
    """Local copies of remote files under ``cache_dir`` (see the module docstring).

    ``cache_bytes``: the budget the loader's plan-driven prefetcher keeps per rank (None: no
    limit, nothing evicted). ``storage_options`` go to ``fsspec`` (e.g. ``endpoint_url`` via
    ``client_kwargs``, credentials). A failed or short download is retried ``retries`` times,
    waiting ``backoff_s``, then twice that, and so on. ``on_block(file, bytes_so_far)`` is called
    after every block read (tests and benchmarks slow the network or break a download with it;
    it must pickle for spawn workers). ``verify``: ``"stat"`` (default: one ``stat`` per open,
    compared with what was recorded when the copy was verified) or ``"checksum"`` (also the
    whole copy's MD5 at every open).

    >>> cache = FileCache("cache", cache_bytes=2 * 10**9)  # whole local copies of remote files
    >>> cache.cache_bytes
    2000000000
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike,
        cache_bytes: int | None = None,
        storage_options: dict[str, Any] | None = None,
        *,
        retries: int = 3,
        backoff_s: float = 0.5,
        block_bytes: int = 8 << 20,
        on_block: BlockHook | None = None,
        verify: str = "stat",
    ) -> None:
        if cache_bytes is not None and (isinstance(cache_bytes, bool) or int(cache_bytes) <= 0):
            raise OptionError(f"cache_bytes: got {cache_bytes!r}, expected a positive int or None")
        if int(retries) < 0 or float(backoff_s) < 0 or int(block_bytes) <= 0:
            raise OptionError(
                f"FileCache: got retries={retries!r}, backoff_s={backoff_s!r}, "
                f"block_bytes={block_bytes!r}; expected retries >= 0, backoff_s >= 0, "
                "block_bytes > 0"
            )
        if verify not in VERIFY_MODES:
            raise OptionError(
                f"verify: got {verify!r}, expected one of {VERIFY_MODES} ('stat': a stat per "
                "open; 'checksum': also the copy's MD5 per open)"
            )
        self.verify = verify
        self._seals: dict[str, dict] = {}  # key -> seal, as last read (memo of seals/)
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.cache_bytes = None if cache_bytes is None else int(cache_bytes)
        self.storage_options = dict(storage_options or {})
        self.retries, self.backoff_s = int(retries), float(backoff_s)
        self.block_bytes = int(block_bytes)
        self.on_block = on_block
        for sub in ("files", "locks", "index", "needs", "seals"):
            os.makedirs(os.path.join(self.cache_dir, sub), exist_ok=True)
        self.high_water = 0  # the most bytes this process saw under files/
        self._fs: dict[str, Any] = {}
        self._pid = os.getpid()
        self._needs: tuple[str, int] | None = None  # (owner, fd holding needs/<owner>.lock)
        self.clean()

    # ---- where things are ----
    def _sub(self, *parts: str) -> str:
        return os.path.join(self.cache_dir, *parts)

    def path(self, f: RemoteFile) -> str:
        """Where the complete copy of ``f`` lies (whether or not it is there yet)."""
        return self._sub("files", f.name)

    def index_path(self, f: RemoteFile, kind: str) -> str:
        """Where the metadata index keeps ``kind`` (a format name and extension) of ``f``."""
        return self._sub("index", f"{f.key}.{kind}")

    def seal_path(self, f: RemoteFile) -> str:
        """Where what was verified of ``f``'s copy is recorded."""
        return self._sub("seals", f"{f.key}.json")

    def has(self, f: RemoteFile) -> bool:
        """Whether the complete, verified copy of ``f`` is in the cache, unchanged since."""
        return self.check_copy(f) is None

    def check_copy(self, f: RemoteFile) -> str | None:
        """None when ``f``'s copy is there and is what was verified (a stat compared with its
        seal; with ``verify="checksum"`` also its MD5); else why not: ``"missing"``, or what
        changed."""
        path = self.path(f)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "missing"
        seal = self._seals.get(f.key)
        if seal is None or _stat_changes(seal, st, f.size):
            seal = self._read_seal(f)  # another process may have fetched it again since
        if seal is None:
            return (
                "no record of its verification (its fetch was cut short, or an older "
                "seqloader wrote it)"
            )
        changes = _stat_changes(seal, st, f.size)
        if changes:
            return f"changed on disk since it was verified: {changes}"
        if self.verify == "checksum":
            digest = _md5_of(path)
            if digest != seal["md5"]:
                return f"its content MD5 is {digest}, but {seal['md5']} was verified"
        return None

    def _read_seal(self, f: RemoteFile) -> dict | None:
        try:
            with open(self.seal_path(f), "rb") as fh:
                seal = json.loads(fh.read())
        except (FileNotFoundError, ValueError):
            return None
        if not isinstance(seal, dict) or any(k not in seal for k in (*SEAL_FIELDS, "md5")):
            return None
        self._seals[f.key] = seal
        return seal

    def _seal(self, f: RemoteFile, path: str, md5: str) -> None:
        st = os.stat(path)
        seal = {k: getattr(st, f"st_{k}") for k in SEAL_FIELDS} | {"md5": md5}
        write_atomic(self.seal_path(f), json.dumps(seal).encode())
        self._seals[f.key] = seal

    # ---- the store ----
    def filesystem(self, url: str) -> Any:
        """This process's fsspec filesystem for ``url``'s protocol (made after a fork anew)."""
        if self._pid != os.getpid():
            self._fs, self._pid, self._needs = {}, os.getpid(), None
        proto = url.split("://", 1)[0]
        fs = self._fs.get(proto)
        if fs is None:
            fsspec = require("fsspec", f"reading remote files ({url!r})")
            fs = fsspec.core.url_to_fs(url, **self.storage_options)[0]
            self._fs[proto] = fs
        return fs

    def stat(self, urls: Sequence[str]) -> list[RemoteFile]:
        """Size and version of each URL: one listing per directory (one request per ~1000 files
        on S3) where several files share it, else one ``info`` each."""
        by_dir: dict[str, list[int]] = {}
        for i, url in enumerate(urls):
            by_dir.setdefault(url.rstrip("/").rsplit("/", 1)[0], []).append(i)
        out: list[RemoteFile | None] = [None] * len(urls)
        for parent, members in by_dir.items():
            fs = self.filesystem(urls[members[0]])
            with contextlib.suppress(Exception):
                fs.invalidate_cache(parent)  # fsspec keeps listings: ask the store itself
            listed: dict[str, dict] = {}
            if len(members) > 1:
                with contextlib.suppress(Exception):  # not listable: ask per file
                    entries = self._retry(partial(fs.ls, parent, detail=True), parent, "list")
                    listed = {fs._strip_protocol(e["name"]): e for e in entries}
            for i in members:
                info = listed.get(fs._strip_protocol(urls[i]))
                if info is None:
                    info = self._info(urls[i])
                out[i] = RemoteFile(urls[i], int(info["size"]), _version(info))
        return out  # type: ignore[return-value]

    def _info(self, url: str) -> dict:
        fs = self.filesystem(url)
        try:
            info = fs.info(url)
        except FileNotFoundError as e:
            raise DataError(
                f"remote file {url!r} does not exist (or is not readable with the given "
                "storage_options); check the URL and the credentials"
            ) from e
        except Exception:
            info = self._retry(lambda: fs.info(url), url, "stat")
        if info.get("type") == "directory":
            raise DataError(f"remote path {url!r} is a directory; expected a file URL")
        return info

    def _retry(self, call: Callable[[], Any], url: str, what: str) -> Any:
        errors: list[str] = []
        for attempt in range(self.retries + 1):
            try:
                return call()
            except (FileNotFoundError, DataError):
                raise
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                if attempt < self.retries:
                    time.sleep(self.backoff_s * 2**attempt)
        raise FetchError(self._failed(url, what, errors))

    def _failed(self, url: str, what: str, errors: list[str]) -> str:
        return (
            f"could not {what} {url!r}: {len(errors)} attempt(s) failed (last: {errors[-1]}; "
            f"waits {self.backoff_s:g}s doubling). Fix: check the network, the endpoint and "
            "the credentials (storage_options), or raise FileCache(retries=..., backoff_s=...)"
        )

    # ---- fetching ----
    def ensure(self, f: RemoteFile, *, reader: bool = True) -> str:
        """The local path of ``f``'s complete copy; fetched now (under the entry's lock) when
        missing, or waited for when another process is fetching it. ``reader``: a reader needs
        it now, so the time counts as fetch wait and the bytes as the reader's (the prefetcher
        passes False)."""
        path = self.path(f)
        if self.check_copy(f) is None:
            return path
        start = time.perf_counter()
        try:
            with self._entry_lock(f.key):
                why = self.check_copy(f)
                if why is not None:
                    if why != "missing":  # never served: dropped and fetched again, said aloud
                        warnings.warn(
                            f"cached copy {path} of {f.url!r} is not served: {why}; fetching "
                            "it again",
                            DataWarning,
                            stacklevel=2,
                        )
                        _unlink(path)
                        _unlink(self.seal_path(f))
                    self._fetch(f, path, reader=reader)
        finally:
            if reader:
                COUNTERS.wait_s += time.perf_counter() - start
        return path

    def _fetch(self, f: RemoteFile, path: str, reader: bool = True) -> None:
        errors: list[str] = []
        for attempt in range(self.retries + 1):
            tmp = self._sub("files", f".{f.key}.{os.getpid()}.{attempt}.part")
            try:
                try:
                    md5 = self._download(f, tmp)
                except OSError as e:
                    if type(e).__name__ != "FileExpired":  # fsspec: the ETag is not the store's
                        raise
                    self._raise_if_changed(f)
                    raise
                os.replace(tmp, path)
                _fsync_dir(os.path.dirname(path))
                self._seal(f, path, md5)
                break
            except FetchError:
                _unlink(tmp)
                raise
            except Exception as e:
                _unlink(tmp)
                errors.append(f"{type(e).__name__}: {e}")
                if attempt == self.retries:
                    raise FetchError(self._failed(f.url, "fetch", errors)) from e
                time.sleep(self.backoff_s * 2**attempt)
            except BaseException:  # interrupted: no half file stays behind under any name
                _unlink(tmp)
                raise
        if reader:
            COUNTERS.fetched_bytes += f.size
        else:
            COUNTERS.prefetched_bytes += f.size
        COUNTERS.fetched_files += 1
        self._log(f"{os.getpid()} {f.size} {f.url}\n")
        self.usage()

    def _download(self, f: RemoteFile, tmp: str) -> str:
        """Download ``f`` to ``tmp``, checked (size; MD5 where the ETag is one); returns the
        content's MD5 (what its seal records)."""
        fs = self.filesystem(f.url)
        md5 = hashlib.md5(usedforsecurity=False)
        n = 0
        with fs.open(f.url, "rb", block_size=self.block_bytes) as src, open(tmp, "wb") as dst:
            while True:
                buf = src.read(self.block_bytes)
                if not buf:
                    break
                dst.write(buf)
                n += len(buf)
                md5.update(buf)
                if self.on_block is not None:
                    self.on_block(f, n)
            dst.flush()
            os.fsync(dst.fileno())
        etag_is_md5 = _MD5.match(f.version) is not None
        if n == f.size and (not etag_is_md5 or md5.hexdigest() == f.version):
            return md5.hexdigest()
        got = f"{n} bytes" + (f", MD5 {md5.hexdigest()}" if etag_is_md5 else "")
        self._raise_if_changed(f)
        raise OSError(f"download incomplete: got {got}, expected {f.size} bytes / ETag {f.version}")

    def _raise_if_changed(self, f: RemoteFile) -> None:
        """A ``FetchError`` (not retried) when the store's file is no longer the one opened."""
        now = self.stat([f.url])[0]
        if now != f:
            raise FetchError(
                f"remote file {f.url!r} changed since the source was opened (then {f.size} "
                f"bytes, version {f.version!r}; now {now.size} bytes, version {now.version!r}). "
                "Fix: open a new source (and loader) after replacing data files."
            )

    # ---- sharing the directory ----
    def lock(self, name: str) -> contextlib.AbstractContextManager[bool]:
        """Hold the lock named ``name`` (``locks/<name>.lock``) until the block ends."""
        return self._entry_lock(name)

    @contextlib.contextmanager
    def _entry_lock(self, key: str, blocking: bool = True) -> Iterator[bool]:
        """Hold ``locks/<key>.lock`` (flock: per open file, so threads exclude each other too);
        non-blocking: yields False when another holds it."""
        fd = os.open(self._sub("locks", f"{key}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def clean(self) -> int:
        """Remove downloads left by killed processes (their entry is unlocked); returns how many."""
        removed = 0
        for name in os.listdir(self._sub("files")):
            if not (name.startswith(".") and name.endswith(".part")):
                continue
            with self._entry_lock(name.split(".")[1], blocking=False) as free:
                if free:
                    _unlink(self._sub("files", name))
                    removed += 1
        return removed

    def post_needs(self, owner: str, keys: Iterable[str]) -> None:
        """Say which entries this loader (``owner``) needs now; eviction by any process keeps
        them while this process lives (it holds ``needs/<owner>.lock``)."""
        if self._pid != os.getpid():
            self._fs, self._pid, self._needs = {}, os.getpid(), None
        if self._needs is None or self._needs[0] != owner:
            fd = os.open(self._sub("needs", f"{owner}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._needs = (owner, fd)
        write_atomic(self._sub("needs", f"{owner}.json"), json.dumps(sorted(keys)).encode())

    def withdraw_needs(self) -> None:
        """This loader needs nothing any more (closed): its note goes, eviction may take all."""
        if self._needs is None or self._pid != os.getpid():
            return
        owner, fd = self._needs
        self._needs = None
        _unlink(self._sub("needs", f"{owner}.json"))
        _unlink(self._sub("needs", f"{owner}.lock"))
        os.close(fd)

    def live_needs(self) -> set[str]:
        """The entries live loaders sharing this directory need (stale notes are removed)."""
        keys: set[str] = set()
        for name in os.listdir(self._sub("needs")):
            if not name.endswith(".json"):
                continue
            stem = self._sub("needs", name[: -len(".json")])
            fd = os.open(stem + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its owner lives
                    with (
                        contextlib.suppress(FileNotFoundError, ValueError),
                        open(stem + ".json", "rb") as fh,
                    ):
                        keys.update(json.loads(fh.read()))
                    continue
                _unlink(stem + ".json")  # its owner is gone
                _unlink(stem + ".lock")
            finally:
                os.close(fd)
        return keys

    def evict(self, keep: Iterable[str] = ()) -> int:
        """Delete complete entries that neither ``keep`` nor a live loader sharing the directory
        needs (skipping any being fetched); returns the bytes freed. A reader that still has a
        deleted file open keeps reading it (POSIX) and reopens a fetched copy later."""
        wanted = set(keep) | self.live_needs()
        freed = 0
        for name in os.listdir(self._sub("files")):
            key = name.split("_", 1)[0]
            if name.startswith(".") or key in wanted:
                continue
            with self._entry_lock(key, blocking=False) as free:
                if free:
                    path = self._sub("files", name)
                    with contextlib.suppress(FileNotFoundError):
                        freed += os.stat(path).st_size
                        os.unlink(path)
                    _unlink(self._sub("seals", f"{key}.json"))
        self.usage()
        return freed

    def usage(self) -> int:
        """Bytes under files/ now (downloads in progress included); updates the high-water mark
        of this process and the directory's (``high_water``)."""
        total = 0
        with os.scandir(self._sub("files")) as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        self.high_water = max(self.high_water, total)
        with self._entry_lock(".stats"):
            path = self._sub("high_water")
            try:
                with open(path) as fh:
                    before = int(fh.read() or 0)
            except (FileNotFoundError, ValueError):
                before = 0
            if total > before:
                write_atomic(path, str(total).encode())
        return total

    def dir_high_water(self) -> int:
        """The most bytes ever measured under files/ by any process using this directory."""
        try:
            with open(self._sub("high_water")) as fh:
                return int(fh.read() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def fetch_log(self) -> list[tuple[int, int, str]]:
        """(pid, bytes, URL) of every completed fetch into this directory."""
        try:
            with open(self._sub("fetch.log")) as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            pid, size, url = line.split(" ", 2)
            out.append((int(pid), int(size), url))
        return out

    def _log(self, line: str) -> None:
        fd = os.open(self._sub("fetch.log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_fs"], state["_pid"], state["_needs"], state["_seals"] = {}, None, None, {}
        return state

    def __repr__(self) -> str:
        budget = "no limit" if self.cache_bytes is None else f"{self.cache_bytes} bytes"
        return f"FileCache({self.cache_dir!r}, {budget})"


def new_owner() -> str:
    """A name for one loader's needs note, unique on the node."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _stat_changes(seal: dict, st: os.stat_result, size: int) -> str:
    """What differs between a copy's stat and its seal ("" when nothing)."""
    now = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
           "ino": st.st_ino}  # fmt: skip
    diffs = [f"{k} {seal.get(k)} -> {v}" for k, v in now.items() if seal.get(k) != v]
    if st.st_size != size:
        diffs.insert(0, f"{st.st_size} bytes, the store's file has {size}")
    return ", ".join(diffs)


def _md5_of(path: str, block: int = 8 << 20) -> str:
    md5 = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while buf := fh.read(block):
            md5.update(buf)
    return md5.hexdigest()


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """``data`` under ``path``, or nothing: a temporary name, fsync, rename."""
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
