"""``ShardSource``: tar-sharded speech corpora (Lhotse Shar, NeMo tarred audio, WebDataset) as a
random-access source.

At open, the shard index (``seqloader.shards.index``: one memory-mapped ``ColumnStore`` per corpus
and node, built once from the listings and the tars' headers) gives every length planning needs,
without decoding audio. Reading a sequence is one ranged read of its tar member, decoded through
the audio layer as ``AudioSource`` decodes (same resampling, fitting to the plan, ``LogMel`` /
``KaldiFbank`` features, ``defer_features``, ``on_error``); Shar feature members decode as Lhotse
decodes them (lilcom or numpy). Each shard is a file of the source (``HasFiles``), so
``distribution="files"`` hands ranks whole shards, and shards behind URLs are read from whole
local copies in a ``FileCache`` fetched ahead of the plan (``FetchesRemote``): their listings are
read at open, their member positions when their copy first arrives.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from seqloader.audio.decode import span_into
from seqloader.audio.flac import read_audio
from seqloader.audio.kaldi_fbank import KaldiFbank
from seqloader.audio.keyed_source import AudioKeysSource
from seqloader.audio.keys import AudioOptions, choose_keys, encode_texts, fail_read, mono, put_wave
from seqloader.audio.vocab import Vocabulary
from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.extras import require
from seqloader.shards.index import (
    Collector,
    Problems,
    index_members,
    listing_entries,
    match,
    member_rates,
    split_by_shard_id,
    webdataset_entries,
)
from seqloader.shards.layouts import Entry, Layout, nemo_layout, shar_layout, webdataset_layout
from seqloader.sources.columns import (
    ColumnStore,
    StoredStrings,
    StringColumn,
    narrow_lengths,
    open_or_build,
)
from seqloader.sources.padded_rows import RowScreen, put_row
from seqloader.sources.remote import FileCache, RemoteFile, RemoteFiles, cache_for
from seqloader.sources.tar_index import (
    BLOCK,
    TarMembers,
    read_member_view,
    scan_tar,
)

log = logging.getLogger("seqloader")

INDEX_VERSION = "shards4"  # the index's columns; a change of columns changes it


class ShardSource(AudioKeysSource):
    """Sequences of tar shards, shard after shard in the given order; open one with
    ``ShardSource.lhotse_shar``, ``ShardSource.nemo`` or ``ShardSource.webdataset``.

    ``keys`` from ``data`` (Shar features, or ``features=LogMel(...)``/``KaldiFbank(...)`` of the
    audio), ``audio``, ``text`` and ``classes`` (with ``vocab``); default as ``AudioSource``.
    Audio options as ``AudioSource`` (``options=AudioOptions(...)`` or its fields as keywords).
    ``index_dir``: where the shard index of local shards is kept (default: the user's cache
    directory, ``$XDG_CACHE_HOME/seqloader/shards``). URLs need ``cache_dir`` (and optionally
    ``cache_bytes``, ``storage_options``) or ``cache=FileCache(...)``, as ``HDFSource``.

    >>> import tarfile, io, json, os, tempfile, numpy as np, soundfile as sf
    >>> d = tempfile.mkdtemp()
    >>> with tarfile.open(os.path.join(d, "shard-000.tar"), "w") as tar:
    ...     for key in ("a", "b"):
    ...         wav = io.BytesIO(); sf.write(wav, np.zeros(1600, "float32"), 16000, format="WAV")
    ...         for name, data in ((f"{key}.wav", wav.getvalue()), (f"{key}.txt", b"hi")):
    ...             info = tarfile.TarInfo(name); info.size = len(data)
    ...             tar.addfile(info, io.BytesIO(data))
    >>> src = ShardSource.webdataset(os.path.join(d, "shard-000.tar"))
    >>> len(src), src.tags[1], src.read(0)["audio"].shape
    (2, 'b', (1600,))
    """

    _tags: StoredStrings
    _samples: np.ndarray  # int64 [n]: the decoded samples each read is fitted to
    _classes: np.ndarray | None  # int32: every text's token ids, one after another
    _class_offsets: np.ndarray | None  # int64 [n + 1]
    _rate: int

    def __init__(
        self,
        layout: Layout,
        *,
        keys: Sequence[str] | None = None,
        vocab: Vocabulary | None = None,
        options: AudioOptions | None = None,
        index_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        storage_options: dict | None = None,
        cache: FileCache | None = None,
        **option_kwargs: object,
    ) -> None:
        self._open_options("ShardSource", options, option_kwargs, vocab)
        self.layout = layout
        if not layout.shards:
            raise OptionError(f"ShardSource.{layout.name}: no shards given")
        tars = [s.tar for s in layout.shards]
        listings = [s.listing for s in layout.shards if s.listing is not None]
        self._cache = cache_for(
            "ShardSource", tars + listings, cache, cache_dir, cache_bytes, storage_options
        )
        self._store, self.index_built = self._open_index(tars, listings, index_dir)
        meta = self._store.meta
        self.problems: dict[str, int] = dict(meta["problems"])
        if self.problems:
            warnings.warn(
                "ShardSource: left out or ignored (on_error='skip', or the format's own "
                "convention): "
                + "; ".join(
                    f"{n} x {k} (e.g. {meta['examples'][k]})" for k, n in self.problems.items()
                ),
                DataWarning,
                stacklevel=3,
            )
        self._bounds = np.array(self._store.column("bounds"), dtype=np.int64)
        self._tags = self._store.strings("tags")
        self._member_names = self._store.strings("member")  # one per sequence read: made once
        self._has_text = bool(meta["texts"])
        self._from_features = layout.field == "features" and self.options.features is None
        self._keys = self._choose_keys(keys)
        self._planned = self._open_planned()
        self._use_planned()
        self._schema = self._make_schema()
        self._fingerprint: str | None = None
        self._pid = -1
        self._fds: dict[int, tuple[int, int]] = {}  # shard -> (fd, inode) in this process
        self._members: dict[int, tuple[np.ndarray, np.ndarray, list[str]]] = {}  # remote shards
        self._scratch: np.ndarray | None = None  # read_into's waveforms when only data is asked

    # ---- the three layouts ----
    @classmethod
    def lhotse_shar(
        cls, in_dir_or_fields: Any, *, field: str | None = None, **kwargs: Any
    ) -> ShardSource:
        """A Lhotse Shar corpus: its directory, or the ``fields`` dict ``CutSet.from_shar``
        takes (``{"cuts": [...], "recording": [...]}``; paths or URLs). ``field``: the tar field
        read (default ``features`` when present and no ``features=`` option, else
        ``recording``)."""
        options = kwargs.get("options")
        if field is None and (
            kwargs.get("features") is not None
            or (options is not None and options.features is not None)
            or "audio" in (kwargs.get("keys") or ())
        ):
            field = "recording"
        return cls(shar_layout(in_dir_or_fields, field), **kwargs)

    @classmethod
    def nemo(
        cls, manifest_filepaths: Any, tarred_audio_filepaths: Any, **kwargs: Any
    ) -> ShardSource:
        """NeMo tarred audio: ``manifest_filepaths`` and ``tarred_audio_filepaths`` as NeMo takes
        them: a string expanded as NeMo's ``expand_sharded_filepaths`` expands it (``{0..N}``,
        ``_OP_0..N_CL_``, ``[0..N]``, ``(0..N)``, ``<0..N>``; commas outside braces separate), a
        list taken as it is, buckets as a list of lists (or its ``"[[...],[...]]"`` string).
        Remote shards need ``sample_rate=`` (the members' rates arrive with their copies)."""
        return cls(nemo_layout(manifest_filepaths, tarred_audio_filepaths), **kwargs)

    @classmethod
    def webdataset(cls, urls: Any, **kwargs: Any) -> ShardSource:
        """WebDataset tars (``KEY.flac`` with ``KEY.json`` / ``KEY.txt``, extensions of any case),
        ``urls`` expanded as WebDataset expands them (``{000..099}``, ``::``)."""
        return cls(webdataset_layout(urls), **kwargs)

    # ---- the index ----
    def _open_index(
        self, tars: list[str], listings: list[str], index_dir: str | os.PathLike | None
    ) -> tuple[ColumnStore, bool]:
        skip = self.options.on_error == "skip"
        salt = f"{INDEX_VERSION}\0{self.layout.name}\0{self.layout.field}\0{skip}"
        if self._cache is None:
            for p in tars + listings:
                if not os.path.isfile(p):
                    raise DataError(f"ShardSource.{self.layout.name}: {p!r} does not exist")
            stats = [os.stat(p) for p in tars]
            self._files = [(int(s.st_size), int(s.st_mtime_ns)) for s in stats]
            self._remote: RemoteFiles | None = None
            identity = _identity(salt, [(os.path.abspath(p), os.stat(p)) for p in tars + listings])
            path = _index_path(index_dir, identity)
            return open_or_build(
                path, identity, lambda: self._build(tars, None), format=INDEX_VERSION
            )
        cache = self._cache
        remote = cache.stat(tars + listings)
        h = hashlib.sha256(salt.encode())
        for r in remote:
            h.update(f"{r.key}\0".encode())
        identity = h.hexdigest()[:32]
        self._files = [(r.size, 0) for r in remote[: len(tars)]]
        path = os.path.join(cache.cache_dir, "index", f"shards-{identity}.cols")
        store, built = open_or_build(
            path, identity, lambda: self._build(tars, remote), format=INDEX_VERSION
        )
        self._remote = RemoteFiles(
            cache, tuple(remote[: len(tars)]), np.array(store.column("bounds"), dtype=np.int64)
        )
        return store, built

    def _build(
        self, tars: list[str], remote: list[RemoteFile] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        layout, problems, out = self.layout, Problems(self.options.on_error == "skip"), Collector()
        skipped: dict[int, set[str]] = {}  # NeMo: shard -> members of its entries marked _skipme
        listed = self._nemo_entries(remote, problems, skipped) if layout.name == "nemo" else {}
        for f, shard in enumerate(layout.shards):
            label = shard.tar
            local = shard.tar if remote is None else None
            if remote is not None and layout.name == "webdataset":
                assert self._cache is not None  # the listing is in the tar: fetch it now
                local = self._cache.ensure(remote[f], reader=False)
            entries: list[Entry]
            members: TarMembers | None
            if layout.name == "webdataset":
                assert local is not None
                members = scan_tar(local, label)
                entries = webdataset_entries(members, local, label, problems)
            else:
                assert shard.listing is not None
                entries = (
                    listed[f]
                    if f in listed
                    else listing_entries(
                        layout, f, self._listing_bytes(f, remote), shard.listing, problems, []
                    )
                )
                members = index_members(layout, local, label) if local is not None else None
            keys, lines = [e.key for e in entries], [e.line for e in entries]
            if members is None:  # a remote shard: indexed when its copy arrives
                n = len(entries)
                names = [""] * n
                header, size = np.full(n, -2, np.int64), np.full(n, -2, np.int64)
                _check_keys(keys, lines, label, shard.listing or label, problems)
            else:
                wants = [e.key if e.member is None else e.member for e in entries]
                names, header, size = match(
                    layout,
                    keys,
                    lines,
                    members,
                    label,
                    shard.listing or label,
                    problems,
                    wants,
                    skipped.get(f, set()),
                )
                if layout.name == "nemo" and local is not None:  # the rate is the audio's own
                    for e, rate in zip(
                        entries, member_rates(local, members, header, label, problems)
                    ):
                        e.rate = int(rate) or None
            out.add(entries, names, header, size)
        if not out.entries:
            raise DataError(f"ShardSource.{layout.name}: the shards hold no sequences")
        meta = {
            "layout": layout.name,
            "field": layout.field,
            "texts": out.all_texts(),
            "problems": problems.counts,
            "examples": problems.examples,
            "skipped members": {str(f): sorted(m) for f, m in skipped.items()},
        }
        return out.columns(), meta

    def _nemo_entries(
        self, remote: list[RemoteFile] | None, problems: Problems, skipped: dict[int, set[str]]
    ) -> dict[int, list[Entry]]:
        """Every NeMo shard's entries, each manifest read once: a manifest serving several tars
        (or one naming several shard_ids) is split by shard_id, matched to the number in each
        tar's name (``split_by_shard_id``). ``skipped``: shard -> the members of its entries
        marked ``_skipme`` (member names repeat across shards)."""
        by_listing: dict[str, list[int]] = {}
        for f, shard in enumerate(self.layout.shards):
            assert shard.listing is not None
            by_listing.setdefault(shard.listing, []).append(f)
        out: dict[int, list[Entry]] = {}
        for listing, fs in by_listing.items():
            data = self._listing_bytes(fs[0], remote)
            left_out: list[Entry] = []
            entries = listing_entries(self.layout, fs[0], data, listing, problems, left_out)
            if len(fs) == 1 and len({e.shard_id for e in entries}) <= 1:
                out[fs[0]] = entries
                skipped[fs[0]] = {e.member or e.key for e in left_out}
                continue
            shards = [self.layout.shards[f] for f in fs]
            numbers = [s.number for s in shards]
            slot = {n: f for n, f in zip(numbers, fs, strict=True)}
            for e in left_out:  # an entry of a shard not given excuses no member
                if e.shard_id in slot:
                    skipped.setdefault(slot[e.shard_id], set()).add(e.member or e.key)
            parts = split_by_shard_id(entries, numbers, listing, [s.tar for s in shards], problems)
            out.update(zip(fs, parts))
        return out

    def _listing_bytes(self, f: int, remote: list[RemoteFile] | None) -> bytes | None:
        """A remote listing's bytes (read whole: listings are small); None for a local one."""
        if remote is None:
            return None
        assert self._cache is not None
        url = self.layout.shards[f].listing
        assert url is not None
        fs = self._cache.filesystem(url)

        def read() -> bytes:
            with fs.open(url, "rb") as fh:
                return fh.read()

        return self._cache._retry(read, url, "read")

    # ---- open time ----
    def _choose_keys(self, keys: Sequence[str] | None) -> tuple[str, ...]:
        keys = choose_keys(
            "ShardSource",
            keys,
            self.options,
            self.vocab,
            has_text=self._has_text,
            stored_features=self._from_features,
            no_text="not every entry of the shards has a text",
        )
        if self.layout.field == "features" and "audio" in keys:
            raise OptionError(
                "ShardSource: keys include 'audio' but the Shar field read is 'features'; open "
                "with field='recording' to read audio"
            )
        if "data" in keys and not self._from_features and self.options.features is None:
            raise OptionError(
                "ShardSource key 'data' needs features=LogMel(...) or KaldiFbank(...) (or Shar "
                "'features' shards); or use keys=['audio']"
            )
        return keys

    def _open_planned(self) -> ColumnStore:
        """What planning and reading derive from the index for these keys and options (samples
        each read is fitted to, lengths per key, class ids), as a second store beside the index:
        derived once per node, then mapped by every rank and worker (no private int64 copies)."""
        h = hashlib.sha256(f"{self._store.identity}\0{self.options!r}\0{self._keys}".encode())
        if self.vocab is not None:
            h.update(self.vocab.fingerprint().encode())
        base = self._store.path.removesuffix(".cols")
        path = f"{base}-planned-{h.hexdigest()[:16]}.cols"

        def build() -> tuple[dict[str, Any], dict[str, Any]]:
            self._rate = 0
            self._samples = self._planned_samples()
            self._classes = self._class_offsets = None
            columns: dict[str, Any] = {"samples": self._samples}
            if "classes" in self._keys:
                assert self.vocab is not None
                self._classes, self._class_offsets = encode_texts(
                    self.vocab, self._store.strings("text"), self.where
                )
                columns["classes"] = self._classes
                columns["classes.offsets"] = self._class_offsets
            for k in self._keys:
                columns[f"len.{k}"] = narrow_lengths(self._planned_lengths(k))
            return columns, {"rate": self._rate}

        store, _ = open_or_build(path, h.hexdigest()[:32], build)
        return store

    def _use_planned(self) -> None:
        """Views of the planned store's columns (recreated after unpickling, never pickled)."""
        planned = self._planned
        self._rate = int(planned.meta["rate"])
        self._samples = planned.column("samples")
        self._classes = planned.column("classes") if "classes" in planned else None
        self._class_offsets = planned.column("classes.offsets") if "classes" in planned else None
        self._lengths = {k: planned.column(f"len.{k}") for k in self._keys}

    def _planned_samples(self) -> np.ndarray:
        """Decoded samples every read is fitted to: the listing's count where it is at the
        planned rate, else ``round(duration * rate)``."""
        if self._from_features or not ({"audio", "data"} & set(self._keys)):
            return np.zeros(len(self), dtype=np.int64)
        rate = self._rate = self._audio_rate()
        rates = self._store.column("rate")
        given = self._store.column("samples")
        computed = np.rint(self._store.column("duration") * rate).astype(np.int64)
        return np.where((rates == rate) & (given >= 0), given, computed)

    def _audio_rate(self) -> int:
        o = self.options
        if o.sample_rate is not None or o.features is not None:
            return o.rate
        # min / max, not np.unique: one pass, no sort, and np.unique's first call imports numpy.ma
        # (~50 ms, most of a small corpus's first open in a fresh process)
        rates = self._store.column("rate")
        rates = rates[rates > 0]
        if len(rates) and rates.min() != rates.max():
            rates = np.unique(rates)
            raise OptionError(
                f"ShardSource: the shards hold audio at {rates.tolist()} Hz; pass sample_rate=... "
                "(audio is resampled to it)"
            )
        if not len(rates):  # never assumed: resampling is asked for, not implied
            raise OptionError(
                f"ShardSource.{self.layout.name}: the audio's rate is not known at open (remote "
                "NeMo shards: their members' headers are read when the copies arrive); pass "
                "sample_rate=... (audio at another rate is resampled to it)"
            )
        return int(rates[0])

    def _stored_frames(self) -> np.ndarray:
        frames = np.asarray(self._store.column("frames"), dtype=np.int64)
        if (frames < 0).any():
            k = int(np.flatnonzero(frames < 0)[0])
            raise DataError(f"{self.where(k)}: the cut has no 'features' (num_frames)")
        return frames

    def _text_lengths(self) -> np.ndarray:
        return np.diff(np.asarray(self._store.column("text.offsets")))

    def _stored_feature_dim(self) -> int:
        dims = np.unique(self._store.column("dim"))
        if len(dims) != 1 or dims[0] < 1:
            raise DataError(
                f"ShardSource: the cuts' features have {dims.tolist()} features per "
                "frame; a key has one feature dimension. Fix: compute all features with "
                "one extractor"
            )
        return int(dims[0])

    # ---- Source protocol ----
    @property
    def tags(self) -> StoredStrings:
        return self._tags

    def file_layout(self) -> np.ndarray:
        """Shard f holds sequences ``[b[f], b[f + 1])`` (``HasFiles``)."""
        return self._bounds

    def remote_files(self) -> RemoteFiles | None:
        """The shards behind URLs and their cache (None: local shards)."""
        return self._remote

    def shard_of(self, index: int) -> int:
        if not 0 <= index < len(self):
            raise IndexError(f"ShardSource: sequence {index} out of range for {len(self)}")
        return int(np.searchsorted(self._bounds, index, side="right")) - 1

    def where(self, index: int) -> str:
        """``tar shard S member M (listing line N)`` of sequence ``index``."""
        f = self.shard_of(int(index))
        shard = self.layout.shards[f]
        member = self._store.strings("member")[index] or f"(none; key {self.tag(index)!r})"
        line = int(self._store.column("line")[index])
        at = f" ({shard.listing} line {line})" if line else ""
        return f"tar shard {shard.tar!r} member {member!r}{at}"

    @property
    def store(self) -> ColumnStore:
        """The memory-mapped index of the shards (the node's file, built once)."""
        return self._store

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(f"{INDEX_VERSION}\0{self.options!r}\0".encode())
            buf, off = self._tags.buffers()
            h.update(np.asarray(buf).tobytes())
            h.update(np.asarray(off).tobytes())
            if self._has_text:
                h.update(np.asarray(self._store.column("text.bytes")).tobytes())
            for key, spec in self._schema.items():
                h.update(f"{key}:{spec.describe()}".encode())
                h.update(np.ascontiguousarray(self._lengths[key], dtype=np.int64).tobytes())
            if self.vocab is not None:
                h.update(self.vocab.fingerprint().encode())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def durations(self) -> np.ndarray:
        """Every sequence's listed duration in seconds, float64 ``[n]``."""
        return np.array(self._store.column("duration"))

    # ---- reading ----
    def read(self, index: int) -> dict[str, np.ndarray]:
        return self._read(int(index), features=True)[0]

    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]:
        """Sequences ``indices`` as ``read`` gives them (``ReadsMany``); ``KaldiFbank`` features of
        the batch's waveforms are computed together (``KaldiFbank.many``: one FFT, one filter
        product, one log for all)."""
        o = self.options
        if (
            "data" not in self._keys
            or self._from_features
            or o.defer_features
            or not isinstance(o.features, KaldiFbank)
        ):
            return [self.read(int(i)) for i in indices]
        read = [self._read(int(i), features=False) for i in indices]
        feats = o.features.many([wave for _, wave in read])
        for (out, _), data in zip(read, feats):
            out["data"] = data
        return [out for out, _ in read]

    def can_read_into(self) -> bool:
        """Reads match the planned keys and lengths (``ReadsIntoWhen``): not with ``min_speed <
        1``, whose planned audio and frames are the slowest speed's bound, nor with
        ``defer_features`` (waveforms read for a planned ``data``)."""
        o = self.options
        if o.defer_features:
            return False
        return o.min_speed == 1.0 or not {"audio", "data"} & set(self._keys)

    def read_into(
        self, indices: np.ndarray, out: Mapping[str, np.ndarray], screen: bool = False
    ) -> list[int]:
        """Sequences ``indices`` straight into the padded batch ``out`` (``ReadsInto``), as
        ``read_many`` reads them: each member's planned span decoded into its row of ``audio``
        (or of a reused buffer when only ``data`` is asked; ``audio.decode.span_into``), the
        features of the batch's waveforms computed together into ``data`` (``KaldiFbank``:
        ``many_into``), text and token ids copied into their rows; zeros after each sequence.
        With ``screen``, returns the rows whose float keys may hold NaN/Inf."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        keys = self._keys
        decoded = ("audio" in keys or "data" in keys) and not self._from_features
        flac_rows: list[bool] = []  # rows of "audio" FLAC filled: never NaN/Inf, not screened
        if decoded:
            waves, flac_rows = self._waves_into(idx, out.get("audio"))
            if "data" in keys:
                self._features_into(waves, out["data"])
        elif "data" in keys:  # Shar feature members
            for j, i in enumerate(idx.tolist()):
                f = self.shard_of(i)
                put_row(out["data"][j], self._features(i, *self._member(i, f)))
        for key in ("text", "classes"):
            if key in keys:
                for j, i in enumerate(idx.tolist()):
                    put_row(out[key][j], self._stored(key, i))
        if not screen:
            return []
        found = RowScreen()
        for key in ("audio", "data"):
            if key in out:
                skip = flac_rows if key == "audio" else []
                for j in range(len(idx)):
                    if not (skip and skip[j]):
                        found.add(j, out[key][j].reshape(-1))
        return sorted(set(found.suspects()))

    def _waves_into(
        self, idx: np.ndarray, rows: np.ndarray | None
    ) -> tuple[list[np.ndarray], list[bool]]:
        """Each sequence's fitted waveform written into ``rows[j]`` (zeros after it), or into a
        buffer of this process when ``rows`` is None -> the waveforms (views of where they went)
        and, per sequence, whether a FLAC stream's samples filled it. The batch's index columns
        are looked up at once (per sequence they cost more than the member's read)."""
        want = self._samples[idx].tolist()
        if rows is None:
            need = sum(want)
            if self._scratch is None or len(self._scratch) < need:
                self._scratch = np.empty(need, np.float32)
            buffer = self._scratch
        waves, flac = [], []
        at = 0
        positions = self._positions(idx)
        offsets = self._store.column("offset")[idx].tolist()
        for j, (i, n, at_f, offset) in enumerate(zip(idx.tolist(), want, positions, offsets)):
            dst = buffer[at : at + n] if rows is None else rows[j]
            at += n
            flac.append(self._wave_into(i, dst, self._member_at(i, *at_f), offset))
            waves.append(dst[:n])
        return waves, flac

    def _wave_into(
        self,
        index: int,
        dst: np.ndarray,
        member: tuple[bytes | memoryview, str] | None = None,
        offset: float | None = None,
    ) -> bool:
        """The fitted waveform of ``index`` into ``dst[:planned]``, zeros after: decoded in place
        where ``span_into`` can, else by ``_wave`` (which names any error). ``member``: its
        bytes and name, when already read; ``offset``: its ``offset`` column, when looked up.
        -> whether ``span_into`` decoded a FLAC stream into it (integer samples scaled by a power
        of two: never NaN/Inf)."""
        blob, name = member or self._member(index, self.shard_of(index))
        want = int(self._samples[index])
        if offset is None:
            offset = float(self._store.column("offset")[index])
        segment = None
        if offset >= 0:  # NeMo: the entry is seconds [offset, offset + duration) of its member
            duration = float(self._store.column("duration")[index])
            segment = (_to_samples(offset, self._rate), _to_samples(duration, self._rate))
        n = span_into(blob, dst[:want], self._rate, self.options.length_tolerance_s, segment)
        flac = n is not None and blob[:4] == b"fLaC"
        if n is None:
            wave = self._wave(index, blob, name)
            n = len(wave)
            dst[:n] = wave
        dst[n:] = 0.0
        return flac

    def _features_into(self, waves: list[np.ndarray], out: np.ndarray) -> None:
        """``data`` of the batch's fitted waveforms into the padded ``out``."""
        features = self.options.features
        assert features is not None  # decoded "data" is planned only with features
        if isinstance(features, KaldiFbank):
            features.many_into(waves, out)
            return
        for j, wave in enumerate(waves):
            put_row(out[j], features(wave))

    def _read(self, index: int, features: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Sequence ``index``, with its ``data`` features only if ``features``; and its decoded
        waveform (empty when none is read)."""
        f = self.shard_of(index)
        out: dict[str, np.ndarray] = {}
        keys = self._keys
        wave = np.zeros(0, np.float32)
        if "audio" in keys or "data" in keys:
            if self._from_features:
                blob, name = self._member(index, f)
                out["data"] = self._features(index, blob, name)
            else:
                wave = np.empty(int(self._samples[index]), np.float32)
                member = self._member_at(index, f, *self._position(index, f))  # a view: no copy
                self._wave_into(index, wave, member)  # the planned span, decoded in place
                put_wave(out, wave, self.options, "audio" in keys, "data" in keys and features)
        for key in ("text", "classes"):
            if key in keys:
                out[key] = self._stored(key, index).copy()
        return out, wave

    def _stored(self, key: str, index: int) -> np.ndarray:
        """``text`` (utf-8 bytes) or ``classes`` (token ids) of ``index``: a view of the index."""
        if key == "text":
            return np.frombuffer(self._store.strings("text").raw(index), np.uint8)
        c, ids = self._class_offsets, self._classes
        assert c is not None and ids is not None
        return ids[c[index] : c[index + 1]]

    def _member(self, index: int, f: int) -> tuple[bytes, str]:
        blob, name = self._member_at(index, f, *self._position(index, f))
        return bytes(blob), name

    def _member_at(
        self, index: int, f: int, header: int, size: int, name: str, fd: int | None = None
    ) -> tuple[memoryview, str]:
        """Member ``name`` of shard ``f`` at ``header`` (``_position``), checked -> a view of its
        data in the read (the audio decoders take any buffer: no copy) and its name. ``fd``: the
        shard's descriptor, when already looked up (``_positions``)."""
        if header < 0:
            self._fail(
                index, "its listing entry has no member in the tar (see the open warning)", None
            )
        if fd is None:
            fd = self._fd(f)
        try:
            return read_member_view(fd, header, size, name, self.layout.shards[f].tar), name
        except DataError as e:
            if self._remote is not None:
                raise
            self._fail(index, str(e), e)

    def _positions(self, idx: np.ndarray) -> list[tuple[int, int, int, str, int | None]]:
        """(shard, header, size, member name, descriptor) of each sequence of ``idx``, looked up
        together (``_position`` one by one where a remote shard's members are indexed on arrival;
        no descriptor for remote shards: ``_fd`` checks their cached copy on each read)."""
        n = len(self)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise IndexError(f"ShardSource: sequence {bad} out of range for {n}")
        shards = (np.searchsorted(self._bounds, idx, side="right") - 1).tolist()
        header = self._store.column("header")[idx].tolist()
        if -2 in header or self._remote is not None:
            return [(f, *self._position(i, f), None) for i, f in zip(idx.tolist(), shards)]
        size = self._store.column("size")[idx].tolist()
        names = self._member_names.take(idx)
        fds = {f: self._fd(f) for f in set(shards)}
        return [(f, h, n, name, fds[f]) for f, h, n, name in zip(shards, header, size, names)]

    def _position(self, index: int, f: int) -> tuple[int, int, str]:
        header = int(self._store.column("header")[index])
        if header != -2:
            return (
                header,
                int(self._store.column("size")[index]),
                self._member_names[index],
            )
        got = self._members.get(f)
        if got is None:
            got = self._members[f] = self._index_remote_shard(f)
        j = index - int(self._bounds[f])
        return int(got[0][j]), int(got[1][j]), got[2][j]

    def _index_remote_shard(self, f: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """A remote shard's member positions, from its cached copy (headers only; kept in the
        cache's index directory, once per node)."""
        assert self._remote is not None
        cache, rf = self._remote.cache, self._remote.files[f]
        path = cache.ensure(rf)
        label = rf.url

        def build() -> tuple[dict[str, Any], dict[str, Any]]:
            members = index_members(self.layout, path, label)
            return {
                "names": StringColumn.from_strings(members.names),
                "header": members.header,
                "size": members.size,
            }, {"ended": members.ended}

        store, _ = open_or_build(cache.index_path(rf, "tar2.cols"), rf.key, build)
        header = np.asarray(store.column("header"))
        members = TarMembers(
            list(store.strings("names")),
            header,
            header + BLOCK,
            store.column("size"),
            bool(store.meta["ended"]),
        )
        a, b = int(self._bounds[f]), int(self._bounds[f + 1])
        tags = self._tags.take(np.arange(a, b))
        wants = self._store.strings("want").take(np.arange(a, b))
        lines = self._store.column("line")[a:b].tolist()
        problems = Problems(self.options.on_error == "skip")
        names, header, size = match(
            self.layout,
            tags,
            lines,
            members,
            label,
            self.layout.shards[f].listing or label,
            problems,
            wants,
            set(self._store.meta["skipped members"].get(str(f), ())),
        )
        if problems.counts:  # skip: entries without members are counted when read; say the rest
            warnings.warn(
                f"ShardSource: remote shard {label!r}, indexed on arrival: "
                + "; ".join(
                    f"{n} x {k} (e.g. {problems.examples[k]})" for k, n in problems.counts.items()
                ),
                DataWarning,
                stacklevel=2,
            )
        return header, size, names

    def _fd(self, f: int) -> int:
        if self._pid != os.getpid():  # never use descriptors inherited through fork
            self._fds, self._pid = {}, os.getpid()
        got = self._fds.get(f)
        if self._remote is not None:
            path = self._remote.cache.ensure(self._remote.files[f])
            inode = os.stat(path).st_ino
            if got is not None and got[1] != inode:  # evicted and fetched again
                os.close(got[0])
                got = None
            if got is None:
                got = self._fds[f] = (os.open(path, os.O_RDONLY), inode)
            return got[0]
        if got is None:
            path = self.layout.shards[f].tar
            fd = os.open(path, os.O_RDONLY)
            st = os.fstat(fd)
            if (int(st.st_size), int(st.st_mtime_ns)) != tuple(self._files[f]):
                os.close(fd)
                raise DataError(
                    f"tar shard {path!r} changed since its index was built (size/mtime "
                    f"{st.st_size}/{st.st_mtime_ns}, indexed {self._files[f]}). Fix: open a new "
                    "ShardSource (and loader) after replacing shards; the index is rebuilt"
                )
            got = self._fds[f] = (fd, int(st.st_ino))
        return got[0]

    def _wave(self, index: int, blob: bytes | memoryview, name: str) -> np.ndarray:
        audio, file_rate = self._decoded(index, f"decode member {name!r}", lambda: read_audio(blob))
        wave = mono(audio, 1)
        offset = float(self._store.column("offset")[index])
        if offset >= 0:  # NeMo: the entry is audio[offset : offset + duration] of its member
            wave = self._segment(index, wave, int(file_rate), offset, name)
        duration = self._store.column("duration")[index]
        return self._fitted(
            index,
            wave,
            int(file_rate),
            f"the listed duration {duration}s does not describe the member",
        )

    def _segment(
        self, index: int, wave: np.ndarray, rate: int, offset: float, name: str
    ) -> np.ndarray:
        """Seconds ``[offset, offset + duration)`` of a member, as NeMo cuts them (with Lhotse:
        start and length rounded half up to samples at the member's rate)."""
        duration = float(self._store.column("duration")[index])
        start, n = _to_samples(offset, rate), _to_samples(duration, rate)
        if start + n > len(wave) + self.options.length_tolerance_s * rate:
            self._fail(
                index,
                f"the entry asks for seconds [{offset}, {offset + duration}) of member {name!r}, "
                f"which holds {len(wave) / rate:.3f}s",
                None,
            )
        return wave[start : start + n]

    def _features(self, index: int, blob: bytes, name: str) -> np.ndarray:
        try:
            if name.endswith(".llc"):
                feats = require("lilcom", "Shar lilcom features").decompress(blob)
            else:
                feats = np.load(io.BytesIO(blob), allow_pickle=False)
        except Exception as e:
            self._fail(index, f"cannot decode member {name!r}: {type(e).__name__}: {e}", e)
        feats = np.asarray(feats, dtype=np.float32)
        want = (int(self._lengths["data"][index]), self._schema["data"].feature_shape[0])
        if feats.ndim != 2 or feats.shape[1] != want[1] or abs(feats.shape[0] - want[0]) > 1:
            self._fail(
                index,
                f"member {name!r} holds features of shape {feats.shape}, the cut says {want} "
                "(num_frames, num_features)",
                None,
            )
        if feats.shape[0] != want[0]:  # Lhotse rounds frame counts; one frame is its tolerance
            pad = np.repeat(feats[-1:], max(0, want[0] - feats.shape[0]), axis=0)
            feats = np.concatenate([feats, pad])[: want[0]]
        return feats

    def _fail(self, index: int, what: str, cause: Exception | None) -> NoReturn:
        where = f"sequence {index} (tag {self.tag(index)!r}), {self.where(index)}"
        fail_read(self.options, where, what, "repair or re-create the shard", cause)

    def close(self) -> None:
        """Close this process's shard descriptors (reopened on the next read)."""
        if self._pid == os.getpid():
            for fd, _ in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fds"], state["_pid"], state["_members"], state["_scratch"] = {}, -1, {}, None
        for name in ("_samples", "_classes", "_class_offsets", "_lengths"):  # views of _planned
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._use_planned()

    def __repr__(self) -> str:
        return (
            f"ShardSource.{self.layout.name}({len(self.layout.shards)} shards, first "
            f"{self.layout.shards[0].tar}; {len(self)} sequences; {self._described_keys()})"
        )


def _check_keys(
    keys: list[str], lines: list[int], label: str, listing: str, problems: Problems
) -> None:
    seen: set[str] = set()
    for key, line in zip(keys, lines):
        if key in seen:
            problems.add(
                "duplicate key", f"tar shard {label!r} ({listing} line {line}, key {key!r})"
            )
        seen.add(key)


def _to_samples(seconds: float, rate: int) -> int:
    """Seconds as samples, rounded half up after 8 decimals (Lhotse's rounding, which NeMo's
    reader cuts segments with; Python's ``round`` would round halves to even)."""
    return math.floor(round(seconds * rate, 8) + 0.5)


def _identity(salt: str, files: list[tuple[str, os.stat_result]]) -> str:
    h = hashlib.sha256(salt.encode())
    for path, st in files:
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def _index_path(index_dir: str | os.PathLike | None, identity: str) -> str:
    """Where a local corpus' index lives: ``index_dir``, else the user's cache directory
    (``$XDG_CACHE_HOME/seqloader/shards``). Not beside the shards: Lhotse lists a Shar folder's
    files as fields, so a file there would break ``CutSet.from_shar(in_dir=...)``."""
    name = f"shards-{identity}.cols"
    if index_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        index_dir = os.path.join(base, "seqloader", "shards")
    return os.path.join(os.fspath(index_dir), name)
