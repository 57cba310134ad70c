"""The audio keys (``data``, ``audio``, ``text``, ``classes``) and their options (``AudioOptions``)
as every audio-reading source plans and reads them: ``AudioSource`` and the Lhotse and Hugging Face adapters share these, so the same
options mean the same planned lengths and the same arrays whatever the container.

- planned lengths from sample counts (``planned_lengths``), with ``min_speed`` and ``LogMel``;
- the keys a source plans (``choose_keys``) and the schema of each (``key_spec``);
- decoded audio fitted to the plan (``fit_wave``: resample, then crop / zero-pad within
  ``length_tolerance_s``);
- every text's token ids, encoded once at open (``encode_texts``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Literal, NoReturn

import numpy as np

from seqloader.audio.device_features import DeviceFeatures
from seqloader.audio.features import LogMel
from seqloader.audio.kaldi_fbank import KaldiFbank
from seqloader.audio.resample import resample, speed_length
from seqloader.audio.returnn_features import ReturnnFeatures
from seqloader.audio.transforms import SpeedPerturb
from seqloader.audio.vocab import Vocabulary
from seqloader.errors import DataError, OptionError, SequenceSkipped
from seqloader.sources.base import KeySpec, LoaderNeeds
from seqloader.validate import (
    bool_option,
    choice_option,
    choices,
    is_number,
    optional_int_option,
    seconds_option,
)

AUDIO_KEYS = ("data", "audio", "text", "classes")
OnError = Literal["raise", "skip"]
ON_ERROR = choices(OnError)


@dataclass(frozen=True)
class AudioOptions:
    """How an ``AudioSource`` turns files into sequences.

    - ``sample_rate``: rate of ``audio`` and of the features; files at other rates are resampled.
      Default: ``features.sample_rate``, else 16000.
    - ``features``: ``LogMel`` options for the ``data`` key (None: no ``data`` key), ``KaldiFbank``
      for Kaldi-style filterbank frames (Lhotse's ``Fbank``), or
      ``ReturnnFeatures`` for RETURNN's frames: computed on the whole decoded file as RETURNN does
      (no resampling: a file at another rate is an error, as in RETURNN), then cropped or
      edge-padded to the planned frame count when the manifest's duration is rounded.
    - ``defer_features``: ``read`` returns the waveform as ``audio`` and leaves ``data`` to the
      loader's transform (``transforms.Features`` after wave-level steps such as speed
      perturbation); planning still counts ``data`` frames.
    - ``min_speed``: plan for speed perturbation down to this factor (planned lengths are the
      slowest factor's, an upper bound for every factor >= it); 1.0: no perturbation.
    - ``speed``: planned speed perturbation (``SpeedPerturb(factors)``): every epoch, each
      utterance's factor is drawn at planning time (``seqloader.plan.variants``), batches are
      planned on its exact perturbed lengths, and the source reads it at that factor (before the
      features). ``lengths()`` are the slowest factor's; instead of ``min_speed``.
    - ``length_tolerance_s``: decoded length may differ this much from ``duration`` (it is then
      cropped / zero-padded to the planned length); more is a data error.
    - ``on_error``: ``raise`` (default) fails on an unreadable file naming the manifest line;
      ``skip`` leaves the utterance out of its batch, counted in the epoch report.

    >>> opts = AudioOptions(sample_rate=16000, features=sl.LogMel(n_mels=40))
    >>> opts.features.n_mels, opts.on_error
    (40, 'raise')
    """

    sample_rate: int | None = None
    features: LogMel | KaldiFbank | ReturnnFeatures | None = None
    defer_features: bool = False
    min_speed: float = 1.0
    speed: SpeedPerturb | None = None
    length_tolerance_s: float = 0.02
    on_error: OnError = "raise"

    def __post_init__(self) -> None:
        sr = optional_int_option("sample_rate", self.sample_rate, 1)
        if self.features is not None and not isinstance(
            self.features, LogMel | KaldiFbank | ReturnnFeatures
        ):
            raise OptionError(
                f"features: got {self.features!r}, expected a LogMel, KaldiFbank, "
                "ReturnnFeatures or None"
            )
        if self.features is not None and sr is not None and sr != self.features.sample_rate:
            raise OptionError(
                f"sample_rate={sr} differs from features.sample_rate="
                f"{self.features.sample_rate}; give one (the other follows)"
            )
        bool_option("defer_features", self.defer_features)
        if self.defer_features and self.features is None:
            raise OptionError("defer_features=True needs features=LogMel(...)")
        if not (is_number(self.min_speed) and 0.1 <= self.min_speed <= 10.0):
            raise OptionError(f"min_speed: got {self.min_speed!r}, expected a factor in [0.1, 10]")
        if self.speed is not None and not isinstance(self.speed, SpeedPerturb):
            raise OptionError(f"speed: got {self.speed!r}, expected SpeedPerturb(factors) or None")
        if self.speed is not None and self.min_speed != 1.0:
            raise OptionError(
                f"speed={self.speed!r} plans every factor exactly; min_speed={self.min_speed} "
                "(the worst-case bound for an on-the-fly transform) is then not needed: give one"
            )
        seconds_option("length_tolerance_s", self.length_tolerance_s)
        choice_option("on_error", self.on_error, ON_ERROR)

    @property
    def rate(self) -> int:
        if self.sample_rate is not None:
            return self.sample_rate
        return self.features.sample_rate if self.features is not None else 16000


_OPTION_FIELDS = {f.name for f in fields(AudioOptions)}


def parse_options(
    owner: str,
    options: AudioOptions | None,
    option_kwargs: Mapping[str, object],
    returnn_features: bool = False,
    variants: bool = False,
) -> AudioOptions:
    """``options=AudioOptions(...)`` or its fields as keywords (not both), for source ``owner``;
    ``ReturnnFeatures`` only where the source computes them as RETURNN does (``returnn_features``),
    planned ``speed`` only where the source reads length variants (``variants``)."""
    unknown = set(option_kwargs) - _OPTION_FIELDS
    if unknown:
        raise OptionError(
            f"{owner}: unknown option(s) {sorted(unknown)}; expected AudioOptions "
            f"fields {sorted(_OPTION_FIELDS)}, keys= or vocab="
        )
    if options is not None and option_kwargs:
        raise OptionError(f"{owner}: give options= or option keywords, not both")
    parsed = options or AudioOptions(**option_kwargs)  # type: ignore[arg-type]
    if isinstance(parsed.features, ReturnnFeatures) and not returnn_features:
        raise OptionError(
            f"{owner}: features=ReturnnFeatures(...) reproduces RETURNN's OggZipDataset frames "
            "and is supported by AudioSource only; use features=LogMel(...) here"
        )
    if parsed.speed is not None and not variants:
        raise OptionError(
            f"{owner}: speed=SpeedPerturb(...) (planned speed perturbation) is supported by "
            "AudioSource only; here use min_speed=speed.min_factor with the transform "
            "seqloader.transforms.SpeedPerturb (docs/audio.md)"
        )
    return parsed


def planned_lengths(key: str, samples: np.ndarray, options: AudioOptions) -> np.ndarray:
    """Planned length of ``audio`` (samples) or ``data`` (LogMel frames) for decoded lengths
    ``samples`` (int64 ``[n]``): with ``min_speed < 1`` or planned ``speed`` the slowest speed's (an
    upper bound)."""
    slowest = options.min_speed if options.speed is None else options.speed.min_factor
    return factor_lengths(key, samples, slowest, options)


def variant_lengths(key: str, samples: np.ndarray, options: AudioOptions) -> np.ndarray:
    """Lengths of ``audio`` or ``data`` at every factor of the planned ``speed`` -> int64
    ``[F, n]`` (row f: ``options.speed.factors[f]``)."""
    assert options.speed is not None, "variant_lengths needs speed=SpeedPerturb(...)"
    return np.stack([factor_lengths(key, samples, f, options) for f in options.speed.factors])


def factor_lengths(
    key: str, samples: np.ndarray, factor: float, options: AudioOptions
) -> np.ndarray:
    """Length of ``audio`` or ``data`` after speed perturbation by ``factor`` (1.0: none)."""
    if factor != 1.0:
        samples = np.asarray(speed_length(samples, factor), dtype=np.int64)
    if key == "audio":
        return np.asarray(samples, dtype=np.int64)
    if key != "data" or options.features is None:
        raise OptionError(f"planned_lengths: key {key!r} is not computed from audio here")
    return np.asarray(options.features.num_frames(samples), dtype=np.int64)


def key_spec(key: str, options: AudioOptions, vocab: Vocabulary | None) -> KeySpec:
    """Schema of an audio key (``data`` as LogMel frames)."""
    if key == "audio":
        return KeySpec(np.dtype(np.float32))
    if key == "data":
        if options.features is None:
            raise OptionError("key 'data' from audio needs features=LogMel(...)")
        return KeySpec(np.dtype(np.float32), (options.features.n_mels,))
    if key == "text":
        return KeySpec(np.dtype(np.uint8), (), True, 256)
    if key == "classes" and vocab is not None:
        return KeySpec(np.dtype(np.int32), (), True, len(vocab))
    raise OptionError(f"key {key!r}: expected one of {AUDIO_KEYS} (classes needs vocab=...)")


def choose_keys(
    who: str,
    keys: Sequence[str] | None,
    options: AudioOptions,
    vocab: Vocabulary | None,
    *,
    has_text: bool,
    stored_features: bool = False,
    no_text: str = "not every entry has a text",
) -> tuple[str, ...]:
    """The keys a source of audio entries plans: ``keys``, or by default ``data`` (features stored
    with the entries, or computed by ``options.features``) else ``audio``, then ``text`` when the
    entries have texts and ``classes`` with a vocabulary. Refuses unknown or repeated keys and keys
    the entries cannot give (``no_text`` says why texts are missing). ``data`` without any features
    is left to the caller, whose fix depends on the container."""
    if keys is None:
        keys = ["data" if stored_features or options.features is not None else "audio"]
        keys += ["text"] if has_text else []
        keys += ["classes"] if vocab is not None else []
    keys = tuple(keys)
    for k in keys:
        if k not in AUDIO_KEYS:
            raise OptionError(f"{who} keys: got {k!r}, expected some of {AUDIO_KEYS}")
    if len(set(keys)) != len(keys) or not keys:
        raise OptionError(f"{who} keys: got {keys!r}, expected distinct keys, >= 1")
    if ("text" in keys or "classes" in keys) and not has_text:
        raise OptionError(f"{who} keys {keys}: {no_text}")
    if "classes" in keys and vocab is None:
        raise OptionError(f"{who} key 'classes' needs vocab=... (a Vocabulary)")
    if options.defer_features and "data" not in keys:
        raise OptionError("defer_features=True plans 'data' frames: keys must include 'data'")
    return keys


def length_problem(decoded: int, rate: int, want: int, tolerance_s: float) -> str | None:
    """Why ``decoded`` samples at ``rate`` cannot be fitted to the planned ``want`` (more than
    ``tolerance_s`` apart: the container's duration does not describe the audio), else None."""
    if abs(decoded - want) <= tolerance_s * rate:
        return None
    return (
        f"decoded {decoded} samples at {rate} Hz ({decoded / rate:.3f}s), but the planned "
        f"duration gives {want}"
    )


def fit_length(wave: np.ndarray, want: int) -> np.ndarray:
    """Crop or zero-pad a decoded waveform to the planned ``want`` samples."""
    if len(wave) > want:
        return wave[:want]
    if len(wave) < want:
        return np.concatenate([wave, np.zeros(want - len(wave), dtype=np.float32)])
    return wave


def fit_wave(
    wave: np.ndarray, file_rate: int, rate: int, want: int, tolerance_s: float
) -> tuple[np.ndarray, str | None]:
    """Resample mono ``wave`` to ``rate`` and fit it to the planned ``want`` samples: (wave, None),
    or (wave, ``length_problem``) when it is too far off to fit (the caller names the sequence)."""
    if file_rate != rate:
        wave = resample(wave, file_rate, rate)
    problem = length_problem(len(wave), rate, want, tolerance_s)
    return (wave, problem) if problem is not None else (fit_length(wave, want), None)


def loader_needs(options: AudioOptions) -> LoaderNeeds:
    """With ``defer_features`` the loader's transform computes ``data`` from the waveform."""
    if not options.defer_features:
        return LoaderNeeds()
    return LoaderNeeds(
        transform_keys=("data",),
        why="was opened with defer_features=True, so it reads waveforms and leaves the "
        "features ('data') to the transform",
        fix="pass transform=seqloader.transforms.Features(features) (after any wave-level "
        "transforms), or features_on=DEVICE to compute them in the training process after "
        "collation, or open the source without defer_features.",
        on_device=(
            DeviceFeatures(options.features)
            if isinstance(options.features, LogMel | KaldiFbank)
            else None
        ),
    )


def put_wave(
    out: dict[str, np.ndarray], wave: np.ndarray, options: AudioOptions, audio: bool, data: bool
) -> None:
    """Store a decoded, fitted wave as the asked keys: ``audio`` (also when ``data`` is deferred to
    the loader's ``Features`` transform) and ``data`` (LogMel frames, unless deferred)."""
    if audio or (data and options.defer_features):
        out["audio"] = wave
    if data and not options.defer_features:
        assert options.features is not None
        out["data"] = options.features(wave)


def fail_read(
    options: AudioOptions, where: str, what: str, fix: str, cause: Exception | None
) -> NoReturn:
    """A sequence that cannot be read: ``SequenceSkipped`` under ``on_error="skip"`` (left out of
    its batch, counted in the epoch report), else a ``DataError`` naming it and the fix."""
    if options.on_error == "skip":
        raise SequenceSkipped(f"{where}: {what}") from cause
    raise DataError(
        f"{where}: {what}. Fix: {fix}, or open the source with on_error='skip' to leave it out "
        "(counted in the epoch report)."
    ) from cause


def mono(wave: np.ndarray, channel_axis: int) -> np.ndarray:
    """One channel as float32 ``[samples]``: the channel itself, or the mean of several."""
    w = np.asarray(wave, dtype=np.float32)
    if w.ndim == 1:
        return np.ascontiguousarray(w)
    one = w.take(0, axis=channel_axis) if w.shape[channel_axis] == 1 else w.mean(channel_axis)
    return np.ascontiguousarray(one, dtype=np.float32)


def encode_texts(
    vocab: Vocabulary, texts: Iterable[str], where: Callable[[int], str]
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every text, concatenated (int32), with offsets (int64 ``[n + 1]``).
    ``where(i)`` names text ``i`` in an encoding error."""
    parts: list[np.ndarray] = []
    for i, text in enumerate(texts):
        try:
            parts.append(np.asarray(vocab.encode(text), dtype=np.int32))
        except DataError as e:
            raise DataError(f"{where(i)}: {e}") from e
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return (np.concatenate(parts) if parts else np.zeros(0, np.int32)), offsets
