"""``AudioOptionsSource`` and ``AudioKeysSource``: the part of a source of the audio keys (``data``, ``audio``, ``text``,
``classes``) that does not depend on its container.

Lhotse cuts, Hugging Face rows and tar shards hold their entries differently, but once a container
has given each entry its decoded sample count, its stored feature frames and its text, the rest is
the same: options and vocabulary parsed alike, lengths and schema per key from the same rules, a
decoded waveform fitted to the plan, an unreadable entry named and skipped (or refused) alike. One
implementation, so an option means the same in every container (``audio/keys.py`` holds the
functions; this holds the order they are called in).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn, TypeVar

import numpy as np

from seqloader.audio.keys import AudioOptions, fit_wave, key_spec, parse_options, planned_lengths
from seqloader.audio.keys import loader_needs as audio_loader_needs
from seqloader.audio.vocab import Vocabulary
from seqloader.sources.base import KeySpec, LoaderNeeds, SourceBase, fingerprint_of

T = TypeVar("T")


class AudioOptionsSource(SourceBase):
    """Base of the sources opened with ``AudioOptions`` and a vocabulary: parsed alike, with
    ``defer_features`` the same needs of the loader, fingerprinted alike."""

    options: AudioOptions
    vocab: Vocabulary | None

    def _open_options(
        self,
        owner: str,
        options: AudioOptions | None,
        option_kwargs: Mapping[str, object],
        vocab: Vocabulary | None,
        *,
        returnn_features: bool = False,
        variants: bool = False,
    ) -> None:
        """``options=AudioOptions(...)`` or its fields as keywords (``parse_options``, which says
        what ``returnn_features`` and ``variants`` allow), and the vocabulary of ``classes``."""
        self.options = parse_options(owner, options, option_kwargs, returnn_features, variants)
        self.vocab = vocab

    def _salted_fingerprint(self, contents: Iterable[str]) -> str:
        """``fingerprint_of`` the tags, lengths and schema, salted with the options, ``contents``
        (what the container holds beyond lengths: texts, columns) and the vocabulary: a source
        opened with other options or another vocabulary plans and reads differently."""
        h = hashlib.sha256(repr(self.options).encode())
        for content in contents:
            h.update(content.encode())
        if self.vocab is not None:
            h.update(self.vocab.fingerprint().encode())
        return fingerprint_of(self._tags, self._lengths, self._schema, h.hexdigest())

    def loader_needs(self) -> LoaderNeeds:
        return audio_loader_needs(self.options)


class AudioKeysSource(AudioOptionsSource):
    """Base of the container sources of the audio keys. A subclass sets at open ``_keys``,
    ``_from_features`` (``data`` is the entries' stored features, not computed from audio),
    ``_rate`` and ``_samples`` (int64 ``[n]``: decoded samples each read is fitted to), and
    ``_class_offsets`` with ``classes``; it answers ``_stored_frames``, ``_stored_feature_dim``,
    ``_text_lengths`` and ``_fail``."""

    _keys: tuple[str, ...]
    _from_features: bool
    _rate: int
    _samples: np.ndarray
    _class_offsets: np.ndarray | None

    # ---- what the container answers ----
    def _stored_frames(self) -> np.ndarray:
        """Frames of every entry's stored features (int64 ``[n]``), when ``data`` is those."""
        raise NotImplementedError(f"{type(self).__name__} stores no features")

    def _stored_feature_dim(self) -> int:
        """Values per frame of the stored features (one for the whole source)."""
        raise NotImplementedError(f"{type(self).__name__} stores no features")

    def _text_lengths(self) -> np.ndarray:
        """Utf-8 bytes of every entry's text (int64 ``[n]``)."""
        raise NotImplementedError(f"{type(self).__name__} holds no texts")

    def _fail(self, index: int, what: str, cause: Exception | None) -> NoReturn:
        """Entry ``index`` cannot be read: ``fail_read`` naming it where the container keeps it."""
        raise NotImplementedError

    # ---- the same in every container ----
    def _planned_lengths(self, key: str) -> np.ndarray:
        """Planned length of ``key`` per entry: stored frames, samples (or frames computed from
        them, ``planned_lengths``), text bytes or token ids."""
        if key == "data" and self._from_features:
            return self._stored_frames()
        if key in ("audio", "data"):
            return planned_lengths(key, self._samples, self.options)
        if key == "text":
            return self._text_lengths()
        assert self._class_offsets is not None  # encoded at open with "classes"
        return np.diff(self._class_offsets)

    def _make_schema(self) -> dict[str, KeySpec]:
        """Schema per key, in key order: stored features as float32 frames of their dimension,
        the rest as ``key_spec`` gives them."""
        schema = {}
        for key in self._keys:
            if key == "data" and self._from_features:
                schema[key] = KeySpec(np.dtype(np.float32), (self._stored_feature_dim(),))
            else:
                schema[key] = key_spec(key, self.options, self.vocab)
        return schema

    def _given_rate(self) -> int | None:
        """The rate the options ask for (``sample_rate``, else the features' rate), else None: the
        container's own rate is used (never assumed: resampling is asked for, not implied)."""
        o = self.options
        return o.rate if o.sample_rate is not None or o.features is not None else None

    def _decoded(self, index: int, what: str, decode: Callable[[], T]) -> T:
        """``decode()``, or ``_fail`` naming ``what`` could not be done and why: decoders and
        storage backends raise many kinds, all meaning "unreadable"."""
        try:
            return decode()
        except Exception as e:
            self._fail(index, f"cannot {what}: {type(e).__name__}: {e}", e)

    def _fitted(self, index: int, wave: np.ndarray, file_rate: int, mismatch: str) -> np.ndarray:
        """Mono ``wave`` at ``file_rate`` resampled and fitted to entry ``index``'s planned
        samples (``fit_wave``), or ``_fail`` with ``mismatch`` saying whose duration was off."""
        want = int(self._samples[index])
        wave, problem = fit_wave(wave, file_rate, self._rate, want, self.options.length_tolerance_s)
        if problem is not None:
            self._fail(index, f"{problem}: {mismatch}", None)
        return wave

    def _described_keys(self) -> str:
        """``key: schema, ...`` for ``repr``."""
        return ", ".join(f"{k}: {s.describe()}" for k, s in self._schema.items())

    # ---- Source protocol ----
    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys
