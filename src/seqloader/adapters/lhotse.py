"""``LhotseSource``: Lhotse cuts (a ``CutSet`` or a ``.jsonl``/``.jsonl.gz`` cuts manifest) as a
seqloader source.

- ``data``: the cut's features (``cut.load_features()``, whatever Lhotse storage holds them) when
  the cuts have features; else, with ``features=LogMel(...)``, log-mel frames of the cut's audio
  (``cut.load_audio()``, resampled to the LogMel rate) through the same path as ``AudioSource``
  (``defer_features``, ``min_speed``, ``on_error`` mean the same). Given ``features``, the audio path
  is used even when the cuts have features (an explicit request wins).
- ``audio``: the cut's waveform, mono float32 at ``sample_rate``.
- ``text``: the supervisions' texts joined by a space (utf-8 bytes); ``classes``: their token ids
  under ``vocab`` (encoded at open, so planning knows the token counts).

Planning lengths come from the manifest alone (``num_frames`` of the features, or the samples and
frames of ``duration``): nothing is decoded at open. Tags are the cut ids. Each cut is kept as its
JSON text in one byte blob (no Python objects per cut: forked workers share it copy-on-write, spawn
pickles one array); a worker rebuilds the cut it reads, and Lhotse opens the feature storage in
that worker (cached file handles inherited through fork are dropped first).

A Lhotse Shar corpus (``CutSet.from_shar(...)``, or its ``fields`` dict) holds its data in tar
shards, not in storage a cut can point to: ``LhotseSource`` hands it over to
``seqloader.shards.ShardSource.lhotse_shar`` (random access through the shard index), with the same
keys and options. A Shar ``CutSet`` changed by ``map``/``filter`` cannot be handed over (the
changes are Python functions over a stream) and is refused with the fix.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn

import numpy as np

from seqloader.audio.keyed_source import AudioKeysSource
from seqloader.audio.keys import AudioOptions, choose_keys, encode_texts, fail_read, mono, put_wave
from seqloader.audio.manifest import StringTable
from seqloader.audio.manifest_lines import json_entry, manifest_error, seconds, text_lines
from seqloader.audio.vocab import Vocabulary
from seqloader.errors import DataError, OptionError
from seqloader.extras import require


class LhotseSource(AudioKeysSource):
    """Lhotse cuts in manifest order; see the module docstring.

    ``keys`` selects from ``data``, ``audio``, ``text``, ``classes``; default: ``data`` (cut
    features, or LogMel of the audio with ``features=``; ``audio`` when neither), plus ``text``
    when the cuts have supervision texts, plus ``classes`` with a vocabulary. Audio options:
    ``options=AudioOptions(...)`` or its fields as keywords (``features``, ``sample_rate``, ...).

    >>> from lhotse import CutSet
    >>> from lhotse.testing.dummies import dummy_cut
    >>> src = LhotseSource(CutSet.from_cuts([dummy_cut(i, duration=1.0) for i in range(2)]))
    >>> len(src), src.keys
    (2, ('data',))
    """

    def __new__(cls, cuts: Any = None, **kwargs: Any) -> Any:
        """A Lhotse Shar corpus becomes a ``ShardSource`` (see the module docstring)."""
        fields = shar_fields(cuts)
        if fields is None:
            return super().__new__(cls)
        from seqloader.shards import ShardSource

        return ShardSource.lhotse_shar(fields, **kwargs)

    def __init__(
        self,
        cuts: Any,
        *,
        keys: Sequence[str] | None = None,
        vocab: Vocabulary | None = None,
        options: AudioOptions | None = None,
        **option_kwargs: object,
    ) -> None:
        self._open_options("LhotseSource", options, option_kwargs, vocab)
        self._origin, cut_iter = _open_cuts(cuts)
        cols = _Columns(self._origin)
        for where, cut in cut_iter:
            cols.add(cut, where)
        if not cols.ids:
            raise DataError(f"LhotseSource: {self._origin} holds no cuts")
        self._cuts = StringTable(cols.json)
        self._tags = StringTable(cols.ids)
        self._texts = StringTable(cols.texts)
        self._durations = np.asarray(cols.durations, dtype=np.float64)  # [n] seconds
        self._from_features = self.options.features is None and all(cols.has_features)
        self._keys = self._choose_keys(keys, cols)
        self._rate = self._audio_rate(cols) if not self._audio_free() else 0
        self._samples = self._planned_samples(cols)  # [n] decoded length (0 without audio)
        self._feature_dim = self._check_features(cols) if self._uses_cut_features() else 0
        #: seconds per ``data`` frame when ``data`` is the cuts' own features (one shift for all)
        self.frame_shift: float | None = cols.frame_shifts[0] if self._uses_cut_features() else None
        self._frames = np.asarray(cols.frames, dtype=np.int64)  # [n] cut feature frames
        self._classes: np.ndarray | None = None  # token ids of all texts, concatenated
        self._class_offsets: np.ndarray | None = None  # [n + 1]
        if "classes" in self._keys:
            self._classes, self._class_offsets = self._encode_texts()
        self._lengths = {k: self._planned_lengths(k) for k in self._keys}
        self._schema = self._make_schema()
        self._fingerprint: str | None = None
        self._pid = -1  # the process whose Lhotse file-handle cache is ours

    # ---- open time ----
    def _choose_keys(self, keys: Sequence[str] | None, cols: _Columns) -> tuple[str, ...]:
        keys = choose_keys(
            "LhotseSource",
            keys,
            self.options,
            self.vocab,
            has_text=any(cols.has_text),
            stored_features=self._from_features,
            no_text=f"no cut of {self._origin} has a supervision text",
        )
        if "data" in keys and not self._from_features and self.options.features is None:
            first = cols.ids[cols.has_features.index(False)]
            raise OptionError(
                f"LhotseSource key 'data': cut {first!r} of {self._origin} has no features. Fix: "
                "compute features for every cut (CutSet.compute_and_store_features), or pass "
                "features=LogMel(...) to compute them from the audio, or use keys=['audio']"
            )
        return keys

    def _audio_free(self) -> bool:
        return "audio" not in self._keys and ("data" not in self._keys or self._from_features)

    def _uses_cut_features(self) -> bool:
        return "data" in self._keys and self._from_features

    def _audio_rate(self, cols: _Columns) -> int:
        """``sample_rate``, else the LogMel rate, else the cuts' own rate (all must agree)."""
        given = self._given_rate()
        if given is not None:
            return given
        if None in cols.rates:
            first = cols.ids[cols.rates.index(None)]
            raise OptionError(f"LhotseSource: cut {first!r} of {self._origin} has no recording")
        rates = {r for r in cols.rates if r is not None}
        if len(rates) > 1:
            raise OptionError(
                f"LhotseSource: the cuts of {self._origin} have sampling rates {sorted(rates)}; "
                "pass sample_rate=... (audio is resampled to it)"
            )
        return int(rates.pop())

    def _planned_samples(self, cols: _Columns) -> np.ndarray:
        if self._rate == 0:
            return np.zeros(len(cols.ids), dtype=np.int64)
        missing = [i for i, r in enumerate(cols.rates) if r is None]
        if missing:
            raise OptionError(
                f"LhotseSource: cut {cols.ids[missing[0]]!r} of {self._origin} has no recording, "
                f"but keys {self._keys} need its audio"
            )
        lhotse_utils = require("lhotse.utils", "LhotseSource")
        rate = self._rate
        return np.fromiter(
            (
                n if r == rate else lhotse_utils.compute_num_samples(d, rate)
                for n, r, d in zip(cols.samples, cols.rates, cols.durations)
            ),
            dtype=np.int64,
            count=len(cols.ids),
        )

    def _check_features(self, cols: _Columns) -> int:
        """One kind of features in one source: the same dimension, frame shift and extractor
        (a mix would pad frames of different meaning or duration into one batch), and a reader
        for every storage the cuts use."""
        kinds: tuple[tuple[list, Callable[[Any], str]], ...] = (
            (cols.feature_dims, lambda v: f"{v} features per frame"),
            (cols.frame_shifts, lambda v: f"a frame shift of {1000 * v:g} ms"),
            (cols.feature_types, lambda v: f"features of type {v!r}"),
        )
        for values, say in kinds:
            k = next((i for i, v in enumerate(values) if v != values[0]), None)
            if k is not None:
                raise DataError(
                    f"LhotseSource: cuts of {self._origin} differ in kind: cut {cols.ids[k]!r} "
                    f"has {say(values[k])}, cut {cols.ids[0]!r} has {say(values[0])}; one "
                    "source holds one kind of features. Fix: compute the features of all cuts "
                    "with one extractor and config (or open each kind as its own source)"
                )
        for storage in dict.fromkeys(cols.storage_types):
            missing = [m for m in STORAGE_PACKAGES.get(storage, ()) if not _installed(m)]
            if missing:
                first = cols.ids[cols.storage_types.index(storage)]
                raise OptionError(
                    f"LhotseSource: cut {first!r} of {self._origin} stores its features in "
                    f"Lhotse's {storage!r} storage, whose reader needs the package(s) "
                    f"{', '.join(missing)}, not installed here. Fix: pip install "
                    f"{' '.join(missing)}"
                )
        return int(cols.feature_dims[0])

    def _encode_texts(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.vocab is not None
        return encode_texts(self.vocab, self._texts, self.where)

    def _stored_frames(self) -> np.ndarray:
        return self._frames

    def _stored_feature_dim(self) -> int:
        return self._feature_dim

    def _text_lengths(self) -> np.ndarray:
        return self._texts.byte_lengths()

    # ---- Source protocol ----
    def where(self, index: int) -> str:
        return f"{self._origin} cut {self.tag(index)!r}"

    def read(self, index: int) -> dict[str, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"LhotseSource: sequence {index} out of range for {len(self)}")
        cut = self._cut(index)
        out: dict[str, np.ndarray] = {}
        keys = self._keys
        if self._uses_cut_features():
            out["data"] = self._read_features(index, cut)
        if "audio" in keys or ("data" in keys and not self._from_features):
            wave = self._read_wave(index, cut)
            data = "data" in keys and not self._from_features
            put_wave(out, wave, self.options, "audio" in keys, data)
        if "text" in keys:
            out["text"] = np.array(self._texts.raw(index))
        if "classes" in keys:
            c, ids = self._class_offsets, self._classes
            assert c is not None and ids is not None  # encoded at open for this key
            out["classes"] = ids[c[index] : c[index + 1]].copy()
        return out

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._salted_fingerprint([self._cuts.content_hash()])
        return self._fingerprint

    # ---- reading (in workers) ----
    def _cut(self, index: int) -> Any:
        if self._pid != os.getpid():  # first read in this process: no inherited storage handles
            require("lhotse.features.io", "LhotseSource").close_cached_file_handles()
            self._pid = os.getpid()
        serialization = require("lhotse.serialization", "LhotseSource")
        return serialization.deserialize_item(json.loads(self._cuts[index]))

    def _read_features(self, index: int, cut: Any) -> np.ndarray:
        # storage backends raise OS, h5py, lilcom and KeyErrors
        feats = self._decoded(
            index, "load its features", lambda: np.asarray(cut.load_features(), np.float32)
        )
        want = (int(self._frames[index]), self._feature_dim)
        if feats.shape != want:
            self._fail(
                index,
                f"its features have shape {feats.shape}, the manifest says {want} "
                "(num_frames, num_features); the storage does not match the manifest",
                None,
            )
        return feats

    def _read_wave(self, index: int, cut: Any) -> np.ndarray:
        audio = self._decoded(
            index, "load its audio", lambda: np.asarray(cut.load_audio(), np.float32)
        )  # [channels, samples]
        return self._fitted(
            index,
            mono(audio, 0),
            int(cut.sampling_rate),
            f"its duration {self._durations[index]}s does not describe its audio",
        )

    def _fail(self, index: int, what: str, cause: Exception | None) -> NoReturn:
        where = f"sequence {index} (cut {self.tag(index)!r}) of {self._origin}"
        if isinstance(cause, ImportError):
            # a reader package is missing: every cut would fail alike, so skipping is no fix
            said = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            named = re.search(r"pip install '?([\w.\-]+)", said)
            package = named.group(1) if named else cause.name
            fix = f"pip install {package}" if package else "install the package Lhotse names"
            raise DataError(
                f"{where}: Lhotse cannot read it: a package its reader needs is not installed "
                f"here ({said}). Fix: {fix}"
            ) from cause
        fail_read(self.options, where, what, "repair the cut's files", cause)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pid"] = -1
        return state

    def __repr__(self) -> str:
        return f"LhotseSource({self._origin}; {len(self)} cuts; {self._described_keys()})"


class _Columns:
    """What planning needs of each cut, gathered in one pass over the manifest."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.json: list[str] = []
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.has_text: list[bool] = []
        self.durations: list[float] = []
        self.has_features: list[bool] = []
        self.frames: list[int] = []
        self.feature_dims: list[int] = []
        self.frame_shifts: list[float] = []
        self.feature_types: list[str] = []
        self.storage_types: list[str] = []
        self.rates: list[int | None] = []
        self.samples: list[int] = []

    def add(self, cut: Any, where: str) -> None:
        """``where``: the cut's manifest line (or its position in a CutSet), for errors."""
        if not hasattr(cut, "supervisions") or not hasattr(cut, "has_features"):
            raise OptionError(
                f"LhotseSource: {where} holds a {type(cut).__name__}, expected cuts "
                "(a CutSet, or a cuts manifest written by CutSet.to_file)"
            )
        duration = seconds(f"{where} (cut {cut.id!r})", "duration", _number(cut.duration))
        assert duration is not None  # required
        self.json.append(json.dumps(cut.to_dict(), separators=(",", ":"), allow_nan=False))
        self.ids.append(str(cut.id))
        texts = [s.text for s in cut.supervisions if s.text]
        self.texts.append(" ".join(texts))
        self.has_text.append(bool(texts))
        self.durations.append(duration)
        feats = bool(cut.has_features)
        self.has_features.append(feats)
        self.frames.append(int(cut.num_frames) if feats else 0)
        self.feature_dims.append(int(cut.num_features) if feats else 0)
        self.frame_shifts.append(float(cut.frame_shift) if feats else 0.0)
        self.feature_types.append(str(cut.features.type) if feats else "")
        self.storage_types.append(str(cut.features.storage_type) if feats else "")
        has_audio = bool(cut.has_recording)
        self.rates.append(int(cut.sampling_rate) if has_audio else None)
        self.samples.append(int(cut.num_samples) if has_audio else 0)


#: Lhotse feature storages whose reader needs an optional package (as Lhotse's
#: ``features.io`` declares them), by storage type
STORAGE_PACKAGES: dict[str, tuple[str, ...]] = {
    "lilcom_chunky": ("lilcom",),
    "lilcom_files": ("lilcom",),
    "lilcom_url": ("lilcom",),
    "memory_lilcom": ("lilcom",),
    "lilcom_hdf5": ("h5py", "lilcom"),
    "chunked_lilcom_hdf5": ("h5py", "lilcom"),
    "numpy_hdf5": ("h5py",),
    "kaldiio": ("kaldi_native_io",),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # a module object without a spec: present
        return True


def shar_fields(cuts: Any) -> dict[str, list[str]] | None:
    """The shard paths (``{"cuts": [...], "recording": [...], ...}``) of a Shar ``CutSet`` or of a
    Shar ``fields`` dict, else None. A Shar ``CutSet`` wrapped in lazy ``map``/``filter`` steps is
    an ``OptionError`` naming the fix."""
    if isinstance(cuts, dict) and "cuts" in cuts:
        return {str(k): [os.fspath(p) for p in v] for k, v in cuts.items()}
    data = getattr(cuts, "data", None)
    if data is None or type(cuts).__name__ != "CutSet":
        return None
    depth, node = 0, data
    while node is not None and depth < 32:
        if type(node).__name__ == "LazySharIterator":
            if depth:
                raise OptionError(
                    "LhotseSource: this CutSet reads a Lhotse Shar corpus through lazy "
                    f"{type(data).__name__} steps (map/filter), which a random-access source "
                    "cannot replay. Fix: give LhotseSource the Shar CutSet itself "
                    "(CutSet.from_shar(...)) or ShardSource.lhotse_shar(in_dir), and filter with "
                    "the loader's options (max_frames, ...) or transform= instead"
                )
            return {str(k): [os.fspath(p) for p in v] for k, v in node.streams.items()}
        inner = getattr(node, "iterator", None)
        node, depth = (getattr(node, "data", None) if inner is None else inner), depth + 1
    return None


def _number(value: object) -> object:
    """A numpy or Decimal duration as a Python float for the check (bools and strings kept)."""
    if isinstance(value, bool | str) or value is None:
        return value
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return value


def _manifest_cuts(lhotse: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(manifest line, cut)`` of a cuts manifest, each line checked by
    ``seqloader.audio.manifest_lines`` (UTF-8, JSON without NaN) and built by Lhotse's own
    ``deserialize_item``; a line Lhotse cannot build names the line."""
    serialization = lhotse.serialization  # imported by lhotse itself (load_manifest)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for line_no, text in text_lines(path, f):
                if not text.strip():
                    continue
                where = f"{path} line {line_no}"
                entry = json_entry(path, line_no, text)
                try:
                    item = serialization.deserialize_item(entry)
                except Exception as e:  # Lhotse's own errors: KeyError, TypeError, ValueError
                    raise manifest_error(
                        where,
                        f"Lhotse cannot build a cut from it ({type(e).__name__}: {e})",
                        "write the manifest with CutSet.to_file (or repair this line)",
                    ) from e
                if line_no == 1 and not isinstance(item, lhotse.cut.Cut):
                    kind = serialization.resolve_manifest_set_class(item).__name__
                    raise OptionError(
                        f"LhotseSource: {path!r} is a {kind} manifest, expected cuts; make them "
                        "with CutSet.from_manifests(recordings=..., supervisions=...).to_file()"
                    )
                yield where, item
    except (OSError, EOFError) as e:  # a truncated or damaged .gz
        raise DataError(
            f"LhotseSource: cannot read the manifest {path} ({e}). Fix: write it again with "
            "CutSet.to_file"
        ) from e


def _open_cuts(cuts: Any) -> tuple[str, Iterable[tuple[str, Any]]]:
    """(a description for messages, ``(where, cut)`` in order) of a CutSet or a manifest path."""
    lhotse = require("lhotse", "LhotseSource")
    if isinstance(cuts, str | os.PathLike):
        path = os.fspath(cuts)
        if not path.endswith((".jsonl", ".jsonl.gz")):
            raise OptionError(
                f"LhotseSource: got the path {path!r}, expected a cuts manifest ending in .jsonl "
                "or .jsonl.gz (CutSet.to_file), or a CutSet"
            )
        if not os.path.exists(path):
            raise DataError(f"LhotseSource: manifest {path!r} does not exist")
        return f"manifest {path}", _manifest_cuts(lhotse, path)
    if isinstance(cuts, lhotse.CutSet):
        return "CutSet", ((f"cut {i} of the CutSet", cut) for i, cut in enumerate(cuts))
    raise OptionError(
        f"LhotseSource: got {type(cuts).__name__}, expected a lhotse CutSet or the path of a "
        ".jsonl/.jsonl.gz cuts manifest"
    )
