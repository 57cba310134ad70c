"""RETURNN-compatible audio features: the frames RETURNN's ``ExtractAudioFeatures`` computes
(``OggZipDataset(audio={...})``), reproduced in numpy, so a model trained with RETURNN keeps
working on batches from seqloader.

RETURNN computes them with librosa (float64 audio, centred frames). What that means here:

- frames: the signal is zero-padded by ``n_fft // 2`` on both sides (``center=True``), so
  ``frames = 1 + (samples - n_fft % 2) // hop`` (not our ``LogMel``'s ``1 + (samples - n_fft) //
  hop``); ``hop = int(step_len * rate)`` and ``n_fft = int(window_len * rate)`` truncate as
  RETURNN does;
- periodic Hann window of ``n_fft`` samples, power spectrum, Slaney mel scale and Slaney-normalised
  triangles (librosa's ``filters.mel`` defaults, float32 weights as librosa builds them);
- ``log_mel_filterbank``: ``log(max(1e-3, mel))``; ``mfcc``: 128 mel bands in dB (floor 80 dB below
  the utterance's maximum), orthonormal DCT-II, coefficient 0 replaced by the frame RMS energy;
- then deltas (Savitzky-Golay, width 9, librosa's ``delta``), mean/std normalisation and frame
  joining in RETURNN's order.

``raw`` gives the waveform itself (``[samples, 1]``). ``pre_process`` / ``post_process`` run with
RETURNN's call signature; their ``random_state`` is seeded per sequence (``__call__``). Options
that change the audio at random from RETURNN's one RandomState in reading order
(``random_permute``) are refused: they cannot be reproduced independently of the reader.
Tested against ``returnn`` + ``librosa`` themselves on decoded audio files.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.validate import int_option, optional_int_option

# feature type -> (feature_options RETURNN's function accepts, with their defaults)
FEATURE_TYPES: dict[str, dict[str, Any]] = {
    "raw": {},
    "log_mel_filterbank": {},
    "log_log_mel_filterbank": {},
    "mfcc": {"n_mels": 128, "fmin": 0, "fmax": None, "center": True},
    "db_mel_filterbank": {"fmin": 0, "fmax": None, "min_amp": 1e-10, "center": True},
    "linear_spectrogram": {"center": True},
}
# ExtractAudioFeatures options that are refused, with the reason (never silently ignored)
REFUSED = {
    "random_permute": "random audio perturbation drawn from RETURNN's per-epoch RandomState in "
    "reading order; use seqloader.transforms (per-sequence RNG, independent of workers)",
    "raw_ogg_opts": "the raw_ogg features need RETURNN's ParseOggVorbis extension",
    "num_channels": "multi-channel raw waveforms; seqloader mixes files to mono",
    "random_state": "RETURNN's RandomState is only used by the refused random options",
}
_DELTA_WIDTH = 9  # librosa.feature.delta's default, used by RETURNN


def _norm_value(value: object, name: str) -> float | str | tuple[float, ...] | None:
    """``norm_mean`` / ``norm_std_dev`` as RETURNN reads them: a number, ``"per_seq"``, a file
    (``numpy.loadtxt``) or a vector; kept as a tuple so the options stay hashable."""
    if value is None or (isinstance(value, str) and value == "per_seq"):
        return value
    if isinstance(value, bool):
        raise OptionError(f"ReturnnFeatures.{name}: got {value!r}, expected a number or a vector")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str | os.PathLike):
        try:
            value = np.loadtxt(value)
        except OSError as e:
            raise OptionError(f"ReturnnFeatures.{name}: cannot read {value!s}: {e}") from e
    vec = np.asarray(value, dtype=np.float32)
    if vec.ndim != 1:
        raise OptionError(f"ReturnnFeatures.{name}: got shape {vec.shape}, expected a vector")
    return tuple(float(v) for v in vec)


@dataclass(frozen=True)
class ReturnnFeatures:
    """RETURNN's ``ExtractAudioFeatures`` options (same names, same defaults) -> the same frames.

    ``sample_rate`` is needed to plan frame counts before decoding; RETURNN's ``None`` (each file
    at its own rate) is not supported: give the corpus's rate. A file at another rate is an error,
    as in RETURNN ("currently no conversion implemented").

    >>> mfcc = ReturnnFeatures("mfcc", num_feature_filters=13)
    >>> mfcc.num_frames(16000)  # RETURNN's frame count for 1 s at 16 kHz
    101
    """

    features: str = "mfcc"
    window_len: float = 0.025
    step_len: float = 0.010
    num_feature_filters: int | None = None
    with_delta: int | bool = False
    norm_mean: Any = None
    norm_std_dev: Any = None
    feature_options: Any = None
    sample_rate: int = 16000
    peak_normalization: bool = True
    preemphasis: float | None = None
    join_frames: int | None = None
    pre_process: Any = None
    post_process: Any = None
    _options: tuple[tuple[str, Any], ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.features not in FEATURE_TYPES:
            raise OptionError(
                f"ReturnnFeatures.features: got {self.features!r}, expected one of "
                f"{sorted(FEATURE_TYPES)} (RETURNN's 'raw_ogg' needs its C extension; a callable "
                "as features: give pre_process/post_process instead)"
            )
        if self.num_feature_filters is None:  # RETURNN's defaults: 1 for raw, else 40
            set_(self, "num_feature_filters", 1 if self.features == "raw" else 40)
        if self.features == "raw" and (self.num_feature_filters != 1 or self.with_delta):
            raise OptionError(
                f"ReturnnFeatures: raw features have num_feature_filters=1 and no deltas (RETURNN "
                f"asserts it); got {self.num_feature_filters}, with_delta={self.with_delta}"
            )
        for name in ("pre_process", "post_process"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise OptionError(f"ReturnnFeatures.{name}: got {getattr(self, name)!r}, expected "
                                  "a callable")  # fmt: skip
        n = int_option("ReturnnFeatures.num_feature_filters", self.num_feature_filters, 1)
        # RETURNN's with_delta: a bool (True: first order) or the order as an int
        delta = int(self.with_delta) if isinstance(self.with_delta, bool) else self.with_delta
        set_(self, "with_delta", int_option("ReturnnFeatures.with_delta", delta, 0))
        sr = int_option(
            "ReturnnFeatures.sample_rate",
            self.sample_rate,
            1,
            expected="the corpus's rate (an int >= 1); RETURNN's None (each file at its own "
            "rate) cannot be planned before decoding",
        )
        if self.hop < 1 or self.n_fft < 1:
            raise OptionError(
                f"ReturnnFeatures: window_len={self.window_len}, step_len={self.step_len} give "
                f"int(...) = {self.n_fft} / {self.hop} samples at {sr} Hz; expected >= 1"
            )
        optional_int_option("ReturnnFeatures.join_frames", self.join_frames, 1)
        known = FEATURE_TYPES[self.features]
        given = dict(self.feature_options or {})
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise OptionError(
                f"ReturnnFeatures.feature_options: {unknown} not accepted by RETURNN's "
                f"{self.features!r} features; it accepts {sorted(known) or 'none'}"
            )
        set_(self, "_options", tuple(sorted({**known, **given}.items())))
        set_(self, "feature_options", dict(self._options) if given else None)
        for name in ("norm_mean", "norm_std_dev"):
            value = _norm_value(getattr(self, name), name)
            if isinstance(value, tuple) and len(value) != self.dim:
                raise OptionError(
                    f"ReturnnFeatures.{name}: got {len(value)} values, expected the feature "
                    f"dimension {self.dim} (RETURNN asserts the same)"
                )
            set_(self, name, value)
        if self.features == "linear_spectrogram" and (2 * n < self.n_fft or n % 2 != 0):
            raise OptionError(
                f"ReturnnFeatures: linear_spectrogram needs an even num_feature_filters >= half "
                f"the window ({self.n_fft} samples); got {n}"
            )

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        """Stable across processes (fingerprints): callables by their qualified name."""
        fields = []
        for name in self.__dataclass_fields__:
            if name.startswith("_"):
                continue
            value = getattr(self, name)
            if callable(value):
                value = (
                    f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
                )
            fields.append(f"{name}={value!r}")
        return f"ReturnnFeatures({', '.join(fields)})"

    @classmethod
    def from_returnn(
        cls, audio: dict[str, Any], *, sample_rate: int | None = None
    ) -> ReturnnFeatures:
        """From an ``OggZipDataset`` ``audio={...}`` dict; refused options raise naming the key.
        ``sample_rate`` fills in RETURNN's ``None``."""
        opts = dict(audio)
        for key, why in REFUSED.items():
            value = opts.pop(key, None)
            if key == "random_permute" and not value:
                continue  # False / {} / None: disabled
            if value is not None:
                raise OptionError(f"audio option {key!r} is not supported: {why}")
        if opts.get("sample_rate") is None:
            if sample_rate is None:
                raise OptionError(
                    "audio option 'sample_rate' is None (each file at its own rate); seqloader "
                    "plans frames before decoding and needs the corpus's rate: set it"
                )
            opts["sample_rate"] = sample_rate
        names = {f for f in cls.__dataclass_fields__ if not f.startswith("_")}
        unknown = sorted(set(opts) - names)
        if unknown:
            raise OptionError(
                f"audio option(s) {unknown} not supported; supported: {sorted(names)}, "
                f"refused: {sorted(REFUSED)}"
            )
        return cls(**opts)

    # ---- sizes ----
    @property
    def hop(self) -> int:
        return int(self.step_len * self.sample_rate)

    @property
    def n_fft(self) -> int:
        """Window length in samples (the FFT size, except for ``linear_spectrogram``)."""
        return int(self.window_len * self.sample_rate)

    @property
    def dim(self) -> int:
        n = self.num_feature_filters
        assert n is not None
        return (int(self.with_delta) + 1) * n * (self.join_frames or 1)

    @property
    def n_mels(self) -> int:
        """The feature dimension (the name ``AudioSource`` reads for its schema)."""
        return self.dim

    def _opt(self, name: str) -> Any:
        return dict(self._options)[name]

    def _fft_size(self) -> int:
        if self.features == "linear_spectrogram":
            assert self.num_feature_filters is not None
            return 2 * self.num_feature_filters
        return self.n_fft

    def num_frames(self, samples: int | np.ndarray) -> int | np.ndarray:
        """Frames RETURNN produces for ``samples`` samples (works on arrays)."""
        s = np.asarray(samples, dtype=np.int64)
        n_fft, hop = self._fft_size(), self.hop
        if self.features == "raw":
            frames = s
        elif dict(self._options).get("center", True):
            frames = np.where(s >= 1, 1 + (s - n_fft % 2) // hop, 0)
        else:
            frames = np.where(s >= n_fft, 1 + (s - n_fft) // hop, 0)
        if self.join_frames:
            frames = -(-frames // self.join_frames)
        return int(frames) if frames.ndim == 0 else frames

    # ---- computation ----
    def __call__(self, wave: np.ndarray, seq_name: str | None = None) -> np.ndarray:
        """Features of a 1-D waveform at ``sample_rate`` -> float32 ``[frames, dim]``.

        ``pre_process(audio=, sample_rate=, random_state=)`` and ``post_process(features,
        seq_name=)`` are called as RETURNN calls them; ``random_state`` is a ``RandomState``
        seeded from ``seq_name`` (RETURNN's is one stream in reading order, which no other reader
        reproduces), so a deterministic function gives RETURNN's values, a random one the same
        values with any number of workers."""
        audio = np.array(wave, dtype=np.float64)  # a copy: RETURNN works in place on float64
        if audio.ndim != 1:
            raise OptionError(f"ReturnnFeatures: got shape {audio.shape}, expected 1-D [samples]")
        if self.num_frames(len(audio)) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.preemphasis:
            audio[1:] -= self.preemphasis * audio[:-1].copy()  # lfilter([1, -a], [1], audio)
        if self.peak_normalization:
            peak = np.max(np.abs(audio))
            if peak != 0.0:
                audio /= peak
        if self.pre_process is not None:
            n = len(audio)
            audio = self.pre_process(
                audio=audio, sample_rate=self.sample_rate, random_state=_sequence_rng(seq_name)
            )
            if not isinstance(audio, np.ndarray) or audio.ndim != 1 or len(audio) != n:
                raise DataError(
                    f"ReturnnFeatures.pre_process returned {getattr(audio, 'shape', audio)!r} for "
                    f"{n} samples; seqloader plans lengths before decoding, so it must return a "
                    "1-D array of the same length (length-changing perturbation: use "
                    "AudioSource's min_speed= with a seqloader transform)"
                )
        data = _FEATURE_FUNCTIONS[self.features](self, audio)  # float32 [T, n]
        if self.with_delta:
            deltas = [delta(data, order=i) for i in range(1, int(self.with_delta) + 1)]
            # RETURNN's concatenation is C-ordered, the features alone are F-ordered (transposed);
            # the order decides numpy's float32 summation in the per-sequence mean below.
            data = np.ascontiguousarray(np.concatenate([data, *deltas], axis=-1))
        data = self._normalize(data)
        if self.join_frames is not None:
            j = self.join_frames
            pad = (j - data.shape[0] % j) % j
            data = np.pad(data, ((0, pad), (0, 0)), mode="edge")
            data = data.reshape((data.shape[0] // j, data.shape[1] * j))
        if self.post_process is not None:
            shape = data.shape
            data = self.post_process(data, seq_name=seq_name)
            if not isinstance(data, np.ndarray) or data.shape != shape:
                raise DataError(
                    f"ReturnnFeatures.post_process returned {getattr(data, 'shape', data)!r} for "
                    f"features of shape {shape}; it must keep the shape (the frames are planned)"
                )
        return np.ascontiguousarray(data, dtype=np.float32)

    def _normalize(self, data: np.ndarray) -> np.ndarray:
        """RETURNN's order and float32 arithmetic: subtract the mean, then divide by the std."""
        mean, std = self.norm_mean, self.norm_std_dev
        if mean == "per_seq":
            data -= np.mean(data, axis=0, keepdims=True)
        elif isinstance(mean, float):
            data -= mean
        elif mean is not None:
            data -= np.asarray(mean, dtype=np.float32)[np.newaxis, :]
        if std == "per_seq":
            data /= np.maximum(np.std(data, axis=0, keepdims=True), 1e-2)
        elif isinstance(std, float):
            data /= std
        elif std is not None:
            data /= np.asarray(std, dtype=np.float32)[np.newaxis, :]
        return data


# ---- librosa's building blocks, in numpy ----
def _frames(y: np.ndarray, length: int, hop: int) -> np.ndarray:
    """``[length, n_frames]`` strided view (librosa's ``util.frame``)."""
    return np.lib.stride_tricks.sliding_window_view(y, length)[::hop].T


def _centered(y: np.ndarray, n_fft: int, center: bool) -> np.ndarray:
    return np.pad(y, (n_fft // 2, n_fft // 2)) if center else y


@lru_cache(maxsize=16)
def _hann(win: int, n_fft: int) -> np.ndarray:
    """Periodic Hann window of ``win`` samples centred in ``n_fft`` (librosa's ``pad_center``)."""
    w = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(win) / win)
    left = (n_fft - win) // 2
    return np.pad(w, (left, n_fft - win - left))


def stft(y: np.ndarray, n_fft: int, hop: int, win: int, center: bool) -> np.ndarray:
    """Complex STFT ``[n_fft // 2 + 1, frames]``, zero-padded by ``n_fft // 2`` when ``center``."""
    frames = _frames(_centered(y, n_fft, center), n_fft, hop)  # [n_fft, T]
    return np.fft.rfft(_hann(win, n_fft)[:, None] * frames, axis=0)  # [F, T]


def power_spectrum(y: np.ndarray, n_fft: int, hop: int, win: int, center: bool) -> np.ndarray:
    """``|stft|**2`` (librosa's ``melspectrogram`` with ``power=2``)."""
    return np.abs(stft(y, n_fft, hop, win, center)) ** 2


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale (librosa's default, ``htk=False``): linear below 1 kHz, log above."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(
        f >= min_log_hz,
        min_log_hz / f_sp + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep,
        mels,
    )


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@lru_cache(maxsize=16)
def slaney_mel_matrix(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """librosa's ``filters.mel`` (Slaney scale and area normalisation, float32) ``[n_mels, F]``."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, np.newaxis]
    weights.setflags(write=False)
    return weights


@lru_cache(maxsize=16)
def _mel_bands(
    sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float
) -> tuple[tuple[int, int, np.ndarray], ...]:
    """Each filter as (first bin, end bin, float64 weights ``[end - first, 1]``): its support."""
    bands = []
    for row in slaney_mel_matrix(sr, n_fft, n_mels, fmin, fmax).astype(np.float64):
        nz = np.flatnonzero(row)
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if len(nz) else (0, 0)
        bands.append((lo, hi, row[lo:hi, None].copy()))
    return tuple(bands)


def _mel_power(
    f: ReturnnFeatures, y: np.ndarray, n_mels: int, fmin: float, fmax: Any, center: bool
) -> np.ndarray:
    """Mel power spectrogram ``[n_mels, T]`` (librosa's ``melspectrogram``, float64). Each filter
    sums only its own bins with numpy's elementwise loops: no BLAS, whose threads made the cost
    depend on the machine's load (10x slower on a busy 2-core machine)."""
    top = float(f.sample_rate) / 2 if fmax is None else fmax
    power = power_spectrum(y, f.n_fft, f.hop, f.n_fft, center)  # [F, T]
    bands = _mel_bands(f.sample_rate, f.n_fft, n_mels, float(fmin), float(top))
    out = np.zeros((n_mels, power.shape[1]))
    for i, (lo, hi, w) in enumerate(bands):
        if hi > lo:
            out[i] = np.sum(power[lo:hi] * w, axis=0)
    return out


def power_to_db(s: np.ndarray, amin: float = 1e-10, top_db: float = 80.0) -> np.ndarray:
    log_spec = 10.0 * np.log10(np.maximum(amin, s))
    return np.maximum(log_spec, log_spec.max() - top_db)


@lru_cache(maxsize=8)
def _dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II ``[n, n]`` (scipy's ``dct(type=2, norm="ortho")``)."""
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    m = np.cos(np.pi * k * (2 * i + 1) / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


def rms(y: np.ndarray, length: int, hop: int, center: bool) -> np.ndarray:
    """Frame RMS ``[T]`` as librosa computes it (float32 squares and mean)."""
    x = _frames(_centered(y, length, center), length, hop)  # [length, T]
    return np.sqrt(np.mean(np.square(x, dtype=np.float32), axis=-2))


def _log_mel(f: ReturnnFeatures, y: np.ndarray) -> np.ndarray:
    mel = _mel_power(f, y, f.num_feature_filters, 0.0, None, True)  # type: ignore[arg-type]
    return np.log(np.maximum(1e-3, mel)).T.astype(np.float32)


def _log_log_mel(f: ReturnnFeatures, y: np.ndarray) -> np.ndarray:
    mel = _mel_power(f, y, f.num_feature_filters, 0.0, None, True)  # type: ignore[arg-type]
    log_mel = np.log(np.maximum(1e-3, mel))
    return power_to_db(np.square(np.abs(log_mel)), amin=1e-10).T.astype(np.float32)


def _db_mel(f: ReturnnFeatures, y: np.ndarray) -> np.ndarray:
    o = dict(f._options)
    mel = _mel_power(f, y, f.num_feature_filters, o["fmin"], o["fmax"], o["center"])  # type: ignore[arg-type]
    return (20 * np.log10(np.maximum(o["min_amp"], mel))).T.astype(np.float32)


def _mfcc(f: ReturnnFeatures, y: np.ndarray) -> np.ndarray:
    o = dict(f._options)
    n = f.num_feature_filters
    assert n is not None
    db = power_to_db(_mel_power(f, y, o["n_mels"], o["fmin"], o["fmax"], o["center"]))
    coeffs = np.einsum("km,mt->kt", _dct_matrix(o["n_mels"])[:n], db)  # [n, T], no BLAS
    coeffs[0] = rms(y, f.n_fft, f.hop, o["center"])  # energy replaces c0, RETURNN's convention
    return coeffs.T.astype(np.float32)


def _linear(f: ReturnnFeatures, y: np.ndarray) -> np.ndarray:
    n_fft = f._fft_size()
    center = f._opt("center")
    mag = np.abs(stft(y, n_fft, f.hop, f.n_fft, center))
    return mag[1:].T.astype(np.float32)  # without the DC bin


def _raw(f: ReturnnFeatures, audio: np.ndarray) -> np.ndarray:
    """RETURNN's ``raw``: the (pre-emphasised, peak-normalised) waveform as ``[samples, 1]``."""
    return audio.astype(np.float32)[:, None]


def _sequence_rng(seq_name: str | None) -> np.random.RandomState:
    """pre_process's ``random_state``: a function of the sequence only (not of the reader)."""
    return np.random.RandomState(zlib.crc32((seq_name or "").encode("utf-8")))


_FEATURE_FUNCTIONS = {
    "raw": _raw,
    "log_mel_filterbank": _log_mel,
    "log_log_mel_filterbank": _log_log_mel,
    "db_mel_filterbank": _db_mel,
    "mfcc": _mfcc,
    "linear_spectrogram": _linear,
}


# ---- deltas: librosa.feature.delta = scipy's savgol_filter(mode="interp"), in numpy ----
@lru_cache(maxsize=8)
def _savgol_coeffs(width: int, order: int) -> np.ndarray:
    """Weights ``[width]`` of the ``order``-th derivative of the local least-squares polynomial of
    degree ``order``, applied as ``sum_k c[k] x[i + k - width // 2]``."""
    half = width // 2
    x = np.arange(-half, half + 1, dtype=float)
    a = x ** np.arange(order + 1)[:, None]  # [order + 1, width]
    target = np.zeros(order + 1)
    target[order] = float(np.prod(np.arange(1, order + 1)))
    return np.linalg.lstsq(a, target, rcond=None)[0]


def delta(data: np.ndarray, order: int, width: int = _DELTA_WIDTH) -> np.ndarray:
    """``order``-th delta of float32 ``[T, n]`` along time (edges: polynomial fit over the first
    / last ``width`` frames, scipy's ``mode="interp"``) -> float32."""
    t = data.shape[0]
    if t < width:
        raise DataError(
            f"{t} frames are too few for deltas of width {width} (librosa, and so RETURNN, "
            f"refuse them too); filter such sequences with min_seq_length={width}"
        )
    x = data.astype(np.float64)
    half = width // 2
    c = _savgol_coeffs(width, order)
    out = np.zeros_like(x)
    windows = np.lib.stride_tricks.sliding_window_view(x, width, axis=0)  # [T - 2h, n, width]
    out[half : t - half] = np.einsum("tnw,w->tn", windows, c)
    # The edge polynomials have degree `order`, so their `order`-th derivative is the constant
    # order! * leading coefficient, the same for every edge frame.
    pos, scale = np.arange(width), float(np.prod(np.arange(1, order + 1)))
    out[:half] = scale * np.polyfit(pos, x[:width], order)[0]  # [n]
    out[t - half :] = scale * np.polyfit(pos, x[t - width :], order)[0]
    return out.astype(np.float32)


def fit_frames(data: np.ndarray, frames: int) -> np.ndarray:
    """Crop or edge-pad ``data`` ``[T, dim]`` to ``frames`` rows (the planned count, from the
    manifest's duration, which may be rounded). Every frame kept is RETURNN's own."""
    if data.shape[0] == frames:
        return data
    if data.shape[0] > frames:
        return data[:frames]
    if data.shape[0] == 0:
        return np.zeros((frames, data.shape[1]), dtype=data.dtype)
    return np.pad(data, ((0, frames - data.shape[0]), (0, 0)), mode="edge")
