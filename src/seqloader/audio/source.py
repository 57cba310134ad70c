"""``AudioSource``: utterance manifests (JSON lines, RETURNN OggZip) decoded with soundfile, with
on-the-fly log-mel features and token ids.

Planning needs lengths at open, so they come from the manifests' ``duration`` (nothing is decoded):

- ``audio`` (samples at ``sample_rate``):  ``S = round(duration * sample_rate)``; with
  ``min_speed < 1`` the planned length is the speed-perturbed bound ``ceil(S * den / num)`` for
  ``min_speed ~ num / den`` (``seqloader.audio.resample.speed_length``).
- ``data`` (log-mel frames): ``LogMel.num_frames`` of the planned samples,
  ``1 + (samples - n_fft) // hop`` (0 below one window).
- ``text``: utf-8 bytes; ``classes``: token count of the vocabulary's encoding (encoded at open).

``read`` makes the decoded audio match the plan exactly: after resampling to ``sample_rate`` it
crops or zero-pads to ``S`` samples, as long as the difference is within ``length_tolerance_s``
(manifests store rounded durations; codecs add or drop a few samples). A larger difference means the
manifest does not describe the file, and is an error naming the manifest line.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from seqloader.audio.keyed_source import AudioOptionsSource
from seqloader.audio.keys import (
    AUDIO_KEYS,
    AudioOptions,
    encode_texts,
    fail_read,
    fit_length,
    key_spec,
    length_problem,
    planned_lengths,
    variant_lengths,
)
from seqloader.audio.manifest import Manifest, StringTable, open_manifest
from seqloader.audio.resample import resample
from seqloader.audio.returnn_features import ReturnnFeatures, fit_frames
from seqloader.audio.transforms import perturb
from seqloader.audio.vocab import Vocabulary
from seqloader.errors import DataError, OptionError
from seqloader.sources.base import KeySpec
from seqloader.sources.remote import FileCache, RemoteFiles, cache_for


class AudioSource(AudioOptionsSource):
    """Utterances of one or more manifests (``.jsonl`` or OggZip ``.zip``), in the given order.

    ``keys`` selects from ``data`` (log-mel, needs ``features``), ``audio`` (float32 waveform),
    ``text`` (uint8 utf-8 bytes) and ``classes`` (int32 ids, needs ``vocab``); default: ``data``
    (or ``audio`` without features), plus ``text`` when the manifests have texts, plus ``classes``
    with a vocabulary. Options: ``options=AudioOptions(...)`` or its fields as keywords.
    OggZip corpora may be URLs, read through a local cache as ``HDFSource`` reads its URLs
    (``cache_dir``, ``cache_bytes``, ``storage_options`` or ``cache``; docs/remote.md).

    >>> from seqloader.synthetic.audio import write_audio_corpus
    >>> corpus = write_audio_corpus(".", 2, seconds=(0.5, 0.5))
    >>> src = AudioSource(corpus.jsonl, features=sl.LogMel(n_mels=40))
    >>> len(src), src.read(0)["data"].shape
    (2, (48, 40))
    """

    def __init__(
        self,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        keys: Sequence[str] | None = None,
        vocab: Vocabulary | None = None,
        options: AudioOptions | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        storage_options: dict | None = None,
        cache: FileCache | None = None,
        **option_kwargs: object,
    ) -> None:
        self._open_options(
            "AudioSource", options, option_kwargs, vocab, returnn_features=True, variants=True
        )
        path_list = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        if not path_list:
            raise OptionError("AudioSource: no manifest given; expected a .jsonl or .zip path")
        remote = cache_for(
            "AudioSource",
            [os.fspath(p) for p in path_list],
            cache,
            cache_dir,
            cache_bytes,
            storage_options,
        )
        self._manifests = [open_manifest(p, remote) for p in path_list]
        counts = [len(m) for m in self._manifests]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._remote = None
        if remote is not None:  # OggZip URLs: each zip is one file of the cache
            files = tuple(m.remote for m in self._manifests if m.remote is not None)
            self._remote = RemoteFiles(remote, files, self._starts)
        self._keys = self._choose_keys(keys)
        self._tags = StringTable(itertools.chain.from_iterable(m.tags for m in self._manifests))
        self._samples = np.rint(
            np.concatenate([m.durations for m in self._manifests]) * self.options.rate
        ).astype(np.int64)  # [n] the decoded length every read is fitted to
        self._classes: np.ndarray | None = None  # token ids of all texts, concatenated
        self._class_offsets: np.ndarray | None = None  # int64 [n + 1]
        if "classes" in self._keys:
            self._classes, self._class_offsets = self._encode_texts()
        self._lengths = {k: self._planned_lengths(k) for k in self._keys}
        self._variants = self._variant_lengths()
        self._schema = self._make_schema()
        self._fingerprint: str | None = None

    # ---- open time ----
    def _choose_keys(self, keys: Sequence[str] | None) -> tuple[str, ...]:
        o, has_text = self.options, all(m.texts is not None for m in self._manifests)
        if keys is None:
            keys = ["data" if o.features is not None else "audio"]
            keys += ["text"] if has_text else []
            keys += ["classes"] if self.vocab is not None else []
        keys = tuple(keys)
        needs = {
            "data": (o.features is not None, "features=LogMel(...)"),
            "audio": (True, ""),
            "text": (has_text, "a 'text' in every manifest entry"),
            "classes": (self.vocab is not None and has_text, "vocab=... and texts"),
        }
        for k in keys:
            if k not in needs:
                raise OptionError(f"AudioSource keys: got {k!r}, expected some of {AUDIO_KEYS}")
            if not needs[k][0]:
                raise OptionError(f"AudioSource key {k!r} needs {needs[k][1]}")
        if len(set(keys)) != len(keys) or not keys:
            raise OptionError(f"AudioSource keys: got {keys!r}, expected distinct keys, >= 1")
        if o.defer_features and "data" not in keys:
            raise OptionError("defer_features=True plans 'data' frames: keys must include 'data'")
        return keys

    def _encode_texts(self) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of every text, concatenated (int32) with offsets (int64 ``[n + 1]``)."""
        assert self.vocab is not None
        texts = itertools.chain.from_iterable(m.text_table() for m in self._manifests)
        return encode_texts(self.vocab, texts, self.where)

    def _planned_lengths(self, key: str) -> np.ndarray:
        if key in ("audio", "data"):
            return planned_lengths(key, self._samples, self.options)
        if key == "text":
            return np.concatenate([m.text_table().byte_lengths() for m in self._manifests])
        assert self._class_offsets is not None
        return np.diff(self._class_offsets)

    def _variant_lengths(self) -> dict[str, np.ndarray] | None:
        """Planned speed perturbation: ``audio`` / ``data`` lengths at every factor, int64
        ``[F, n]`` (None without ``speed``)."""
        if self.options.speed is None:
            return None
        varying = [k for k in self._keys if k in ("audio", "data")]
        if not varying:
            raise OptionError(
                f"AudioSource speed={self.options.speed!r}: keys {self._keys} hold no audio or "
                "features to perturb; add 'audio' or 'data' to keys, or drop speed="
            )
        return {k: variant_lengths(k, self._samples, self.options) for k in varying}

    def _make_schema(self) -> dict[str, KeySpec]:
        return {key: key_spec(key, self.options, self.vocab) for key in self._keys}

    # ---- Source protocol ----
    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    def where(self, index: int) -> str:
        """``MANIFEST line N (audio FILE)`` of sequence ``index``."""
        m, j = self._locate(index)
        return m.where(j)

    def remote_files(self) -> RemoteFiles | None:
        """The OggZip files behind URLs and their cache (None: local manifests)."""
        return self._remote

    def length_variants(self) -> tuple[tuple[str, ...], dict[str, np.ndarray]] | None:
        """Planned speed perturbation (``HasLengthVariants``): the factors' names and the
        ``audio`` / ``data`` lengths at each, int64 ``[F, n]``; None without ``speed``."""
        speed = self.options.speed
        if speed is None or self._variants is None:
            return None
        return speed.labels, self._variants

    def read(self, index: int) -> dict[str, np.ndarray]:
        if self.options.speed is not None:
            raise OptionError(
                f"AudioSource with speed={self.options.speed!r} reads each utterance at the "
                "factor its plan drew: read it through SeqLoader (or read_variant(index, "
                "variant)); a wrapping source that does not pass length variants on cannot "
                "plan it: give the AudioSource to the loader itself"
            )
        return self._read(index, None)

    def read_variant(self, index: int, variant: int) -> dict[str, np.ndarray]:
        """Utterance ``index`` at ``speed.factors[variant]`` (``HasLengthVariants``): the waveform
        resampled, then its features; lengths are ``length_variants()``'s."""
        speed = self.options.speed
        if speed is None or not 0 <= variant < len(speed.factors):
            raise OptionError(
                f"AudioSource.read_variant: variant {variant!r} of speed={speed!r}; expected "
                "0 <= variant < len(speed.factors)"
            )
        return self._read(index, variant)

    def _read(self, index: int, variant: int | None) -> dict[str, np.ndarray]:
        m, j = self._locate(index)
        out: dict[str, np.ndarray] = {}
        keys, o = self._keys, self.options
        if "audio" in keys or "data" in keys:
            whole = self._read_wave(index, m, j)  # checked against the plan, not yet fitted
            wave = fit_length(whole, int(self._samples[index]))
            if variant is not None:
                assert o.speed is not None
                factor = o.speed.factors[variant]
                wave, whole = perturb(wave, factor), perturb(whole, factor)
            if o.defer_features or "audio" in keys:
                out["audio"] = wave
            if "data" in keys and not o.defer_features:
                out["data"] = self._features(index, m, j, whole, wave, variant)
        if "text" in keys:
            out["text"] = np.array(m.text_table().raw(j))
        if "classes" in keys:
            classes, c = self._classes, self._class_offsets
            assert classes is not None and c is not None  # encoded at open with "classes"
            out["classes"] = classes[c[index] : c[index + 1]].copy()
        return out

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._salted_fingerprint(
                m.texts.content_hash() for m in self._manifests if m.texts is not None
            )
        return self._fingerprint

    def manifest_bounds(self) -> np.ndarray:
        """Manifest m (in the given order) holds utterances ``[b[m], b[m + 1])`` -> int64
        ``[M + 1]``."""
        return self._starts.copy()

    def durations(self) -> np.ndarray:
        """Every utterance's manifest duration in seconds, float64 ``[n]``."""
        return np.concatenate([m.durations for m in self._manifests])

    # ---- reading ----
    def _features(
        self,
        index: int,
        m: Manifest,
        j: int,
        whole: np.ndarray,
        wave: np.ndarray,
        variant: int | None = None,
    ) -> np.ndarray:
        """``data`` of the fitted ``wave``; RETURNN's features see the ``whole`` file (its peak,
        per-sequence norms and last frames depend on every sample), then fit the plan (the
        ``variant``'s with planned speed perturbation)."""
        features = self.options.features
        assert features is not None  # "data" is planned only with features
        if not isinstance(features, ReturnnFeatures):
            return features(wave)
        try:
            data = features(whole, seq_name=self.tag(index))
        except DataError as e:
            self._fail(index, m, j, str(e), e)
        if variant is None or self._variants is None:
            want = self._lengths["data"][index]
        else:
            want = self._variants["data"][variant, index]
        return fit_frames(data, int(want))

    def _locate(self, index: int) -> tuple[Manifest, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"AudioSource: sequence {index} out of range for {len(self)}")
        k = int(np.searchsorted(self._starts, index, side="right")) - 1
        return self._manifests[k], index - int(self._starts[k])

    def _read_wave(self, index: int, m: Manifest, j: int) -> np.ndarray:
        """Decode, mix to mono, resample to ``sample_rate``; check the length against the plan."""
        rate = self.options.rate
        try:
            wave, file_rate = m.read_audio(j)
        except Exception as e:  # soundfile, zipfile and OS errors all mean "unreadable"
            self._fail(index, m, j, f"cannot read the audio: {type(e).__name__}: {e}", e)
        if file_rate != rate and isinstance(self.options.features, ReturnnFeatures):
            self._fail(
                index,
                m,
                j,
                f"the file is at {file_rate} Hz, the RETURNN features at {rate} Hz; RETURNN does "
                "not resample either ('currently no conversion implemented'): resample the "
                "corpus, or use LogMel features",
                None,
            )
        if file_rate != rate:
            wave = resample(wave, file_rate, rate)
        want = int(self._samples[index])
        problem = length_problem(len(wave), rate, want, self.options.length_tolerance_s)
        if problem is not None:
            self._fail(
                index,
                m,
                j,
                f"{problem}: the manifest's duration {m.durations[j]}s does not describe this "
                "file (regenerate it, or raise length_tolerance_s)",
                None,
            )
        return wave

    def _fail(
        self, index: int, m: Manifest, j: int, what: str, cause: Exception | None
    ) -> NoReturn:
        where = f"sequence {index} (tag {self.tag(index)!r}), {m.where(j)}"
        fail_read(self.options, where, what, "repair or remove the file", cause)

    def close(self) -> None:
        for m in self._manifests:
            m.close()

    def __repr__(self) -> str:
        first = self._manifests[0].path
        more = f" +{len(self._manifests) - 1} more" if len(self._manifests) > 1 else ""
        keys = ", ".join(f"{k}: {s.describe()}" for k, s in self._schema.items())
        return (
            f"AudioSource({first}{more}; {len(self)} utterances at {self.options.rate} Hz; {keys})"
        )
