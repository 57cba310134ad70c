"""Audio transforms for ``SeqLoader(..., transform=...)``: ``fn(seq, rng) -> seq`` (the contract and
the seeding are in ``seqloader.transforms``; combine steps with ``seqloader.transforms.compose``).

Length changes and planning: planning sees the source's lengths before any transform runs. A
transform that lengthens a sequence must be planned on an upper bound, or a batch could exceed
``max_frames``. ``SpeedPerturb`` lengthens audio by up to ``1 / min(factors)``: open the source
with ``AudioSource(..., min_speed=speed.min_factor)``, which plans every utterance at the slowest
factor's exact length, so real batches stay within ``max_frames`` (padded frames are then at most
the planned ones). Better, give it to the source, ``AudioSource(..., speed=SpeedPerturb(...))``:
each factor is then drawn at planning time and every batch planned on the exact lengths
(``seqloader.plan.variants``). Wave-level steps need the features computed after them: open the source with
``defer_features=True`` and put ``Features`` after them (see docs/audio.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqloader.audio.features import LogMel
from seqloader.audio.resample import resample, speed_ratio
from seqloader.errors import OptionError
from seqloader.validate import int_option

Seq = dict[str, np.ndarray]


@dataclass(frozen=True)
class SpeedPerturb:
    """Resample ``key`` (a waveform) to play ``factor`` times faster, the factor drawn uniformly
    from ``factors`` (Kaldi's 0.9/1.0/1.1 recipe by default): ``n`` samples become
    ``speed_length(n, factor)``. Two ways to plan it: ``AudioSource(..., speed=SpeedPerturb(...))``
    draws each factor at planning time and plans the exact lengths (no transform needed);
    as a transform it draws in the worker, and the source must plan the worst case,
    ``AudioSource(..., min_speed=self.min_factor)``."""

    factors: tuple[float, ...] = (0.9, 1.0, 1.1)
    key: str = "audio"

    def __post_init__(self) -> None:
        if not self.factors:
            raise OptionError("SpeedPerturb.factors: got none, expected at least one factor")
        for f in self.factors:
            speed_ratio(f)  # validates

    @property
    def min_factor(self) -> float:
        """The slowest factor: the planning bound for ``AudioSource(min_speed=...)``."""
        return min(self.factors)

    @property
    def labels(self) -> tuple[str, ...]:
        """The factors' names, e.g. ``('speed 0.9', 'speed 1', 'speed 1.1')``."""
        return tuple(f"speed {f:g}" for f in self.factors)

    def __call__(self, seq: Seq, rng: np.random.Generator) -> Seq:
        factor = self.factors[int(rng.integers(len(self.factors)))]
        orig, new = speed_ratio(factor)
        if orig == new:
            return seq
        return {**seq, self.key: perturb(_key(seq, self.key, 1), factor)}


def perturb(wave: np.ndarray, factor: float) -> np.ndarray:
    """``wave`` played ``factor`` times faster: ``speed_length(len(wave), factor)`` samples (the
    one resampling of both the on-the-fly transform and the planned ``AudioSource(speed=...)``).

    >>> perturb(np.zeros(1000, "float32"), 1.1).shape
    (910,)
    """
    orig, new = speed_ratio(factor)
    return wave if orig == new else resample(wave, orig, new)


@dataclass(frozen=True)
class AddNoise:
    """Add white Gaussian noise to ``key`` at a signal-to-noise ratio drawn uniformly from
    ``snr_db`` (dB, relative to the sequence's own power), with probability ``p``."""

    snr_db: tuple[float, float] = (10.0, 30.0)
    p: float = 1.0
    key: str = "audio"

    def __post_init__(self) -> None:
        lo, hi = self.snr_db
        if lo > hi:
            raise OptionError(
                f"AddNoise.snr_db: got {self.snr_db}, expected (low, high), low<=high"
            )
        if not 0.0 <= self.p <= 1.0:
            raise OptionError(f"AddNoise.p: got {self.p!r}, expected a probability in [0, 1]")

    def __call__(self, seq: Seq, rng: np.random.Generator) -> Seq:
        x = _key(seq, self.key, None)
        apply, snr = rng.random() < self.p, rng.uniform(*self.snr_db)
        if not apply or x.size == 0:
            return seq
        power = float(np.mean(np.square(x, dtype=np.float64)))
        scale = np.sqrt(power / 10.0 ** (snr / 10.0))
        noise = rng.standard_normal(x.shape) * scale
        return {**seq, self.key: (x + noise).astype(x.dtype)}


@dataclass(frozen=True)
class SpecAugment:
    """SpecAugment-style masking of ``key`` (``[T, F]`` features): ``time_masks`` spans of up to
    ``max_time_width`` frames (and at most ``max_time_ratio`` of the sequence each), and
    ``freq_masks`` bands of up to ``max_freq_width`` channels, filled with ``fill`` (None: the
    sequence's mean). Lengths are unchanged."""

    time_masks: int = 2
    max_time_width: int = 20
    max_time_ratio: float = 0.2
    freq_masks: int = 2
    max_freq_width: int = 10
    fill: float | None = None
    key: str = "data"

    def __post_init__(self) -> None:
        for name in ("time_masks", "max_time_width", "freq_masks", "max_freq_width"):
            v = getattr(self, name)
            int_option(f"SpecAugment.{name}", v, 0)  # True is no count
        if not 0.0 <= self.max_time_ratio <= 1.0:
            raise OptionError(
                f"SpecAugment.max_time_ratio: got {self.max_time_ratio!r}, expected in [0, 1]"
            )

    def __call__(self, seq: Seq, rng: np.random.Generator) -> Seq:
        x = _key(seq, self.key, 2)
        t, f = x.shape
        out = x.copy()
        fill = self.fill if self.fill is not None else (float(x.mean()) if x.size else 0.0)
        max_t = min(self.max_time_width, int(self.max_time_ratio * t))
        for _ in range(self.time_masks):
            start, width = _span(rng, t, max_t)
            out[start : start + width] = fill
        for _ in range(self.freq_masks):
            start, width = _span(rng, f, min(self.max_freq_width, f))
            out[:, start : start + width] = fill
        return {**seq, self.key: out}


@dataclass(frozen=True)
class Features:
    """Compute ``out_key`` (log-mel) from the waveform ``audio_key`` — the feature step after
    wave-level transforms, for a source opened with ``defer_features=True`` (pass that source's
    ``features`` options). Drops the waveform unless ``keep_audio``."""

    features: LogMel
    audio_key: str = "audio"
    out_key: str = "data"
    keep_audio: bool = False

    def __call__(self, seq: Seq, rng: np.random.Generator) -> Seq:
        out = dict(seq)
        wave = out[self.audio_key] if self.keep_audio else out.pop(self.audio_key)
        out[self.out_key] = self.features(wave)
        return out


def _key(seq: Seq, key: str, ndim: int | None) -> np.ndarray:
    if key not in seq:
        raise OptionError(f"transform: the sequence has no key {key!r}; it has {sorted(seq)}")
    x = seq[key]
    if ndim is not None and x.ndim != ndim:
        raise OptionError(f"transform: key {key!r} has shape {x.shape}, expected {ndim} dims")
    return x


def _span(rng: np.random.Generator, size: int, max_width: int) -> tuple[int, int]:
    """A random span (start, width) inside ``[0, size)``, ``0 <= width <= max_width``."""
    width = int(rng.integers(0, max_width + 1)) if max_width > 0 else 0
    start = int(rng.integers(0, size - width + 1)) if size > width else 0
    return start, width
