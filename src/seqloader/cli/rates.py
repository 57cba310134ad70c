"""How many frames of the length key make a second, for turning frames into hours.

A rate is used only when it is known: given (``--frame-rate``), declared by the source (an audio
manifest's sample rate and feature hop, the frame shift of Lhotse features), or read off an
unmistakable layout (1-dim float data as long as audio: raw samples, taken as 16 kHz and said so).
Otherwise the rate is unknown and no hours are printed: a guess of 100 frames/s turned raw audio
samples into a hundred times the real hours."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqloader.audio.keys import AudioOptions
from seqloader.sources.base import KeySpec, Source

#: 1-dim float sequences at least this long (median) are audio samples: 0.5 s at 16 kHz, while
#: features at 100 frames/s that long would be 80 s utterances of one-number frames
RAW_AUDIO_MEDIAN = 8000
RAW_AUDIO_RATE = 16000
HOW_TO_GIVE = "give --frame-rate HZ (e.g. 100 for 10 ms feature frames, 16000 for 16 kHz samples)"


@dataclass(frozen=True)
class FrameRate:
    """Frames per second of the length key (``None``: unknown) and where that comes from."""

    hz: float | None
    source: str  # "--frame-rate", "source", "layout" or "unknown"
    note: str  # follows the hours in text output: the rate and how it is known, or how to give it

    def hours(self, frames: int | float) -> float | None:
        return None if self.hz is None else round(float(frames) / self.hz / 3600, 4)


def frame_rate(given: float | None, source: Source, key: str, lengths: np.ndarray) -> FrameRate:
    """The frame rate of ``key`` of ``source``: ``given`` first, then what the source declares,
    then raw audio recognised by its layout; else unknown."""
    if given is not None:
        return FrameRate(float(given), "--frame-rate", f"at {given:g} frames/s (--frame-rate)")
    declared = declared_rate(source, key)
    if declared is not None:
        hz, what = declared
        return FrameRate(hz, "source", f"at {hz:g} frames/s ({what})")
    if looks_like_raw_audio(source.schema[key], lengths):
        return FrameRate(
            float(RAW_AUDIO_RATE),
            "layout",
            f"at {RAW_AUDIO_RATE} samples/s (1-dim float data of audio length, taken as "
            f"{RAW_AUDIO_RATE // 1000} kHz raw audio; --frame-rate HZ for another rate)",
        )
    return FrameRate(None, "unknown", f"; hours: the frame rate is unknown, {HOW_TO_GIVE}")


def declared_rate(source: Source, key: str) -> tuple[float, str] | None:
    """What an audio source declares: the sample rate of ``audio``, the hop of computed
    features, the frame shift of Lhotse's stored features."""
    shift = getattr(source, "frame_shift", None)
    if key == "data" and isinstance(shift, float) and shift > 0:
        return 1.0 / shift, f"the cuts' frame shift of {1000 * shift:g} ms"
    options = getattr(source, "options", None)
    if not isinstance(options, AudioOptions):
        return None
    if key == "audio":
        return float(options.rate), "the source's sample rate"
    features = options.features
    if key == "data" and features is not None and shift is None:
        return features.sample_rate / features.hop, f"a hop of {features.hop} samples"
    return None


def looks_like_raw_audio(spec: KeySpec, lengths: np.ndarray) -> bool:
    one_dim = tuple(spec.feature_shape) in ((), (1,))
    floats = np.dtype(spec.dtype).kind == "f" and not spec.sparse
    return one_dim and floats and len(lengths) > 0 and np.median(lengths) >= RAW_AUDIO_MEDIAN
