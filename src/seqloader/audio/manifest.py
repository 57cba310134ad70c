"""Utterance manifests: JSON lines and RETURNN OggZip corpora, parsed into one column layout.

- JSON lines: one ``{"audio": path, "duration": seconds, "text": ..., "id": ...}`` per line;
  relative audio paths are resolved against the manifest's folder; tag = ``id``, else ``audio``.
- OggZip (RETURNN's ``OggZipDataset``): ``NAME.zip`` holds ``NAME.txt``, a Python-literal list of
  ``{"file", "duration", "text", "seq_name"?}`` dicts (parsed with ``ast``, never ``eval``), and the
  audio under ``NAME/``; tag = ``seq_name``, else ``file`` (RETURNN's rule). An OggZip may be a URL
  (``s3://.../NAME.zip``, read through a ``FileCache``): its listing is read with ranged reads and
  indexed locally, and the zip is read from its whole cached copy (``seqloader.sources.remote``).

Columns are numpy arrays and byte blobs (``StringTable``), not lists of Python objects: a forked
worker shares them copy-on-write instead of touching millions of refcounts. Every entry keeps its
line number, so errors name ``manifest line N`` and the file. Every line is checked at open
(``seqloader.audio.manifest_lines``): a non-UTF-8 byte, a NaN, infinite, negative or non-number
duration is a ``DataError`` naming the file, the line and the fix, before anything is planned.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import os
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from seqloader.audio.flac import import_soundfile, read_audio
from seqloader.audio.manifest_lines import (
    decode_listing,
    json_entry,
    manifest_error,
    seconds,
    text_lines,
)
from seqloader.errors import DataError, OptionError
from seqloader.sources.remote import FileCache, RemoteFile
from seqloader.sources.remote.index import zip_member
from seqloader.sources.strings import IndexedStrings


class StringTable(IndexedStrings):
    """Immutable strings as one utf-8 blob plus offsets (``table[i]`` decodes one)."""

    def __init__(self, strings: Iterable[str]) -> None:
        encoded = [s.encode("utf-8") for s in strings]
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self._offsets[1:])
        self._blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _string(self, i: int) -> str:
        return self.raw(i).tobytes().decode("utf-8")

    def raw(self, i: int) -> np.ndarray:
        """The utf-8 bytes of string ``i`` as a uint8 view."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"StringTable index {i} out of range for {len(self)} strings")
        i %= len(self)
        return self._blob[self._offsets[i] : self._offsets[i + 1]]

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self._offsets)

    def content_hash(self) -> str:
        """sha256 of the strings (lengths and bytes), for fingerprints."""
        h = hashlib.sha256(self._offsets.tobytes())
        h.update(self._blob.tobytes())
        return h.hexdigest()


@dataclass
class Manifest:
    """One manifest file's utterances, and lazy access to their audio (one zip handle per process,
    reopened after fork; dropped when pickled for spawn)."""

    path: str  # the manifest (.jsonl or .zip) as given
    listing: str  # where the entries' lines are: the .jsonl, or "NAME.zip:NAME.txt"
    audio: StringTable  # absolute file paths (JSON lines) or zip member names (OggZip)
    durations: np.ndarray  # float64 [n] seconds
    texts: StringTable | None  # None when no entry has a text
    tags: StringTable
    lines: np.ndarray  # int64 [n] line of each entry in the manifest (1-based)
    in_zip: bool
    remote: RemoteFile | None = None  # an OggZip behind a URL, read from its cached copy
    cache: FileCache | None = None

    def text_table(self) -> StringTable:
        """The texts of a manifest whose every entry has one (sources check that at open)."""
        if self.texts is None:
            raise DataError(f"audio manifest {self.listing}: its entries have no 'text'")
        return self.texts

    def __post_init__(self) -> None:
        self._zip: zipfile.ZipFile | None = None
        self._zip_pid = -1
        self._zip_inode = -1

    def __len__(self) -> int:
        return len(self.durations)

    def where(self, j: int) -> str:
        """``manifest line N (file F)`` for error messages."""
        inside = f"{self.path}:" if self.in_zip else ""
        return f"{self.listing} line {int(self.lines[j])} (audio {inside}{self.audio[j]})"

    def read_audio(self, j: int) -> tuple[np.ndarray, int]:
        """Decode entry ``j`` -> (mono float32 ``[samples]``, sample rate). Raises the decoder's
        own error; the source adds the manifest line."""
        path = self.audio[j]
        if self.in_zip:
            wave, rate = read_audio(self._zipfile().read(path))
        elif path.lower().endswith(".flac"):  # dr_flac decodes from memory
            with open(path, "rb") as f:
                wave, rate = read_audio(f.read())
        else:
            wave, rate = import_soundfile().read(path, dtype="float32", always_2d=True)
        mono = wave[:, 0] if wave.shape[1] == 1 else wave.mean(axis=1)
        return np.ascontiguousarray(mono, dtype=np.float32), int(rate)

    def _zipfile(self) -> zipfile.ZipFile:
        stale = self._zip is None or self._zip_pid != os.getpid()  # never reuse across fork
        if not stale and self.remote is not None and self._evicted():
            self.close()  # its cached copy was evicted: free its disk space, fetch it again
            stale = True
        if stale:
            path = self.path
            if self.remote is not None:
                assert self.cache is not None  # set together
                path = self.cache.ensure(self.remote)  # a missing copy is fetched (waited for)
                self._zip_inode = os.stat(path).st_ino
            self._zip = zipfile.ZipFile(path)
            self._zip_pid = os.getpid()
        assert self._zip is not None
        return self._zip

    def _evicted(self) -> bool:
        assert self.cache is not None and self.remote is not None
        try:
            return os.stat(self.cache.path(self.remote)).st_ino != self._zip_inode
        except FileNotFoundError:
            return True

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_zip"], state["_zip_pid"] = None, -1
        return state

    def close(self) -> None:
        if self._zip is not None and self._zip_pid == os.getpid():
            self._zip.close()
        self._zip = None


@dataclass(frozen=True)
class OggZip:
    """A RETURNN OggZip corpus laid out as ``OggZipDataset`` reads it: the ``zip``, its listing
    (``None``: ``NAME.txt`` inside the zip; else a separate ``NAME.txt`` or ``NAME.txt.gz``, as the
    official LibriSpeech preparation writes it), and whether the listing's ``file`` names sit under
    ``NAME/`` in the zip (RETURNN's ``zip_audio_files_have_name_as_prefix``). A path-like of the zip.

    >>> OggZip("dev-clean.zip", listing="dev-clean.txt.gz", name_as_prefix=False).name
    'dev-clean'
    """

    zip: str
    listing: str | None = None
    name_as_prefix: bool = True

    @property
    def name(self) -> str:
        """RETURNN's internal name: the zip's file name without ``.zip``."""
        return os.path.basename(self.zip)[: -len(".zip")]

    def __fspath__(self) -> str:
        return self.zip


@dataclass(frozen=True)
class ReadManifest:
    """A manifest read already (e.g. a ``LibriSpeechPart`` whose headers were read once), given to
    ``AudioSource`` in place of its path; a path-like of the manifest's file."""

    manifest: Manifest

    def __fspath__(self) -> str:
        return self.manifest.path

    def open_manifest(self) -> Manifest:
        return self.manifest


def open_manifest(path: str | os.PathLike, cache: FileCache | None = None) -> Manifest:
    """Parse a ``.jsonl`` / ``.json`` lines manifest or a RETURNN OggZip ``.zip`` (an ``OggZip``
    for a separate listing or audio without the name prefix; with ``cache``: an OggZip URL). A
    corpus layout that reads itself (``open_manifest()``, e.g. ``LibriSpeechPart``) is read so."""
    opener = getattr(path, "open_manifest", None)
    if callable(opener):
        return opener()
    if isinstance(path, OggZip) and (path.listing is not None or not path.name_as_prefix):
        if cache is not None:
            raise OptionError(
                f"OggZip {path.zip!r}: a separate listing or audio without the name prefix is "
                "read from local files only; copy the corpus to local disk"
            )
        return _read_oggzip_layout(path)
    p = os.fspath(path)
    if cache is not None:
        return _read_remote_oggzip(p, cache)
    if not p.endswith((".zip", ".jsonl", ".json", ".ndjson")):
        raise OptionError(
            f"audio manifest {p!r}: unknown kind; expected a JSON-lines file (.jsonl) or a RETURNN "
            "OggZip corpus (NAME.zip holding NAME.txt and NAME/...)"
        )
    if not os.path.isfile(p):
        raise DataError(f"audio manifest {p!r} does not exist or is not a file")
    return _read_oggzip(p) if p.endswith(".zip") else _read_jsonl(p)


class _Columns:
    """Collects entries (one dict each) into a ``Manifest``, checking fields as it goes."""

    def __init__(self, path: str, listing: str, audio_field: str) -> None:
        self.path, self.listing, self.audio_field = path, listing, audio_field
        self.audio: list[str] = []
        self.durations: list[float] = []
        self.texts: list[str | None] = []
        self.tags: list[str] = []
        self.lines: list[int] = []

    def add(self, entry: object, line: int, audio: str | None, tag_field: str) -> None:
        where = f"{self.listing} line {line}"
        if not isinstance(entry, dict):
            raise manifest_error(
                where, f"got {type(entry).__name__}", "write one dict per utterance"
            )
        name = entry.get(self.audio_field)
        if not isinstance(name, str) or not name:
            raise manifest_error(
                where,
                f"missing {self.audio_field!r} (the audio file name)",
                f"give every entry its {self.audio_field!r}",
            )
        duration = seconds(where, "duration", entry.get("duration"))
        assert duration is not None  # required
        text = entry.get("text")
        if text is not None and not isinstance(text, str):
            raise manifest_error(
                where, f"'text' got {type(text).__name__}", "write the text as a string"
            )
        tag = entry.get(tag_field, name)
        self.audio.append(audio if audio is not None else name)
        self.durations.append(duration)
        self.texts.append(text)
        self.tags.append(str(tag))
        self.lines.append(line)

    def build(self, in_zip: bool) -> Manifest:
        if not self.audio:
            raise DataError(f"audio manifest {self.listing}: no utterances")
        has_text = [t is not None for t in self.texts]
        if any(has_text) and not all(has_text):
            line = self.lines[has_text.index(False)]
            raise DataError(
                f"{self.listing} line {line}: no 'text', but other entries have one; give every "
                'entry a text ("" for none) or none'
            )
        texts = StringTable([t for t in self.texts if t is not None]) if all(has_text) else None
        return Manifest(
            self.path,
            self.listing,
            StringTable(self.audio),
            np.asarray(self.durations, dtype=np.float64),
            texts,
            StringTable(self.tags),
            np.asarray(self.lines, dtype=np.int64),
            in_zip,
        )


def _read_jsonl(path: str) -> Manifest:
    folder = os.path.dirname(os.path.abspath(path))
    cols = _Columns(path, path, "audio")
    with open(path, "rb") as f:
        for line_no, line in text_lines(path, f):
            if not line.strip():
                continue
            entry = json_entry(path, line_no, line)
            name = entry.get("audio")
            resolved = os.path.join(folder, name) if isinstance(name, str) and name else None
            cols.add(entry, line_no, resolved, "id")
    return cols.build(in_zip=False)


def _read_oggzip(path: str) -> Manifest:
    name = os.path.basename(path)[: -len(".zip")]
    try:
        with zipfile.ZipFile(path) as z:
            data = z.read(f"{name}.txt")
    except (OSError, EOFError, zlib.error, KeyError, zipfile.BadZipFile) as e:  # zlib: damaged
        raise _unreadable_listing(path, name, e) from e
    return _parse_oggzip(path, name, decode_listing(f"{path}:{name}.txt", data))


def _read_oggzip_layout(corpus: OggZip) -> Manifest:
    """An OggZip with its listing outside the zip and/or audio names without ``NAME/``."""
    if not os.path.isfile(corpus.zip):
        raise DataError(f"OggZip corpus {corpus.zip!r} does not exist or is not a file")
    name, listing_path = corpus.name, corpus.listing
    label = listing_path or f"{corpus.zip}:{name}.txt"
    try:
        if listing_path is None:
            with zipfile.ZipFile(corpus.zip) as z:
                data = z.read(f"{name}.txt")
        elif listing_path.endswith(".gz"):
            with gzip.open(listing_path, "rb") as f:
                data = f.read()
        else:
            with open(listing_path, "rb") as f:
                data = f.read()
    except (OSError, EOFError, zlib.error, KeyError, zipfile.BadZipFile) as e:  # zlib: damaged
        raise DataError(
            f"OggZip corpus {corpus.zip}: cannot read its listing {label} ({type(e).__name__}: "
            f"{e}). Fix: copy the listing again (a .gz one: check it with `gzip -t`)"
        ) from e
    listing = decode_listing(label, data)
    return _parse_oggzip(corpus.zip, name, listing, label, corpus.name_as_prefix)


def _unreadable_listing(path: str, name: str, e: Exception) -> DataError:
    return DataError(
        f"OggZip corpus {path}: cannot read {name}.txt from it ({type(e).__name__}: {e}). Fix: "
        "NAME.zip must hold NAME.txt and the audio under NAME/; if it does, the zip is damaged: "
        "copy it again"
    )


def _read_remote_oggzip(url: str, cache: FileCache) -> Manifest:
    if not url.endswith(".zip"):
        raise OptionError(
            f"audio manifest {url!r}: a remote manifest must be an OggZip corpus (.zip); a "
            "JSON-lines manifest names its audio files one by one, which the file cache does not "
            "fetch. Fix: pack the corpus as an OggZip (NAME.zip holding NAME.txt and NAME/...), "
            "or copy it to local disk."
        )
    remote = cache.stat([url])[0]
    name = url.rstrip("/").rsplit("/", 1)[-1][: -len(".zip")]
    try:
        data = zip_member(cache, remote, f"{name}.txt")
    except (KeyError, EOFError, zlib.error, zipfile.BadZipFile) as e:  # zlib: damaged
        raise _unreadable_listing(url, name, e) from e
    manifest = _parse_oggzip(url, name, decode_listing(f"{url}:{name}.txt", data))
    manifest.remote, manifest.cache = remote, cache
    return manifest


def _parse_oggzip(
    path: str, name: str, listing: str, label: str | None = None, name_as_prefix: bool = True
) -> Manifest:
    label = label or f"{path}:{name}.txt"
    try:
        tree = ast.parse(listing, filename=label, mode="eval")
    except SyntaxError as e:
        raise manifest_error(
            f"{label} line {e.lineno}",
            f"not a Python literal ({e})",
            "write the listing as RETURNN does: a Python list of dicts",
        ) from e
    if not isinstance(tree.body, ast.List):
        raise manifest_error(
            label,
            f"got {type(tree.body).__name__}",
            "write the listing as RETURNN does: a Python list of dicts",
        )
    cols = _Columns(path, label, "file")
    for node in tree.body.elts:
        try:
            entry = ast.literal_eval(node)
        except ValueError as e:
            raise manifest_error(
                f"{label} line {node.lineno}",
                f"not a literal ({e}); only literals are read, nothing is evaluated",
                "write plain values (strings, numbers) in every entry",
            ) from e
        file = entry.get("file") if isinstance(entry, dict) else None
        member = None
        if isinstance(file, str) and file:
            member = f"{name}/{file}" if name_as_prefix else file
        cols.add(entry, node.lineno, member, "seq_name")
    return cols.build(in_zip=True)
