"""A synthetic, speech-like corpus: for demos, benchmarks and tests without real data.

Shaped like an ASR training set so planning behaves as on real data: log-normal durations
(long right tail), 40-dim float32 "log-mel" frames, a framewise alignment ``classes`` (sparse,
segments of a few frames) and the collapsed label sequence ``labels`` (sparse, shorter than the
frames, as CTC targets). Features depend on the aligned class, so a tiny model can learn them and a
demo shows a falling loss. Every sequence is drawn from its own RNG keyed by (seed, index): the
corpus is a pure function of ``SyntheticSpec``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from seqloader.errors import OptionError
from seqloader.sources.memory import MemorySource
from seqloader.validate import int_option


@dataclass(frozen=True)
class SyntheticSpec:
    """What the corpus looks like. Lengths are frames (10 ms each at the usual 100 frames/s).

    ``median_frames`` and ``sigma`` parameterise the log-normal duration; draws are clipped to
    ``[min_frames, max_frames]``. ``mean_segment`` is the mean number of frames per aligned label.
    """

    num_seqs: int = 1000
    feature_dim: int = 40
    num_classes: int = 12
    median_frames: int = 150
    sigma: float = 0.5
    min_frames: int = 10
    max_frames: int = 1000
    mean_segment: float = 8.0
    noise: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_seqs", "feature_dim", "num_classes", "median_frames", "min_frames"):
            int_option(f"SyntheticSpec.{name}", getattr(self, name), 1)
        int_option(
            "SyntheticSpec.max_frames",
            self.max_frames,
            self.min_frames,
            expected=f"an int >= min_frames={self.min_frames}",
        )
        if self.max_frames < self.min_frames:
            raise OptionError(
                f"SyntheticSpec.max_frames: got {self.max_frames}, expected >= min_frames="
                f"{self.min_frames}"
            )
        if self.sigma < 0 or self.mean_segment < 1 or self.noise < 0:
            raise OptionError(
                f"SyntheticSpec: got sigma={self.sigma}, mean_segment={self.mean_segment}, "
                f"noise={self.noise}; expected sigma >= 0, mean_segment >= 1, noise >= 0"
            )

    def to_dict(self) -> dict:
        return asdict(self)


def synthetic_lengths(spec: SyntheticSpec) -> np.ndarray:
    """Frame counts of all sequences -> int64 ``[num_seqs]`` (log-normal, clipped)."""
    rng = np.random.default_rng([spec.seed, 0])
    raw = rng.lognormal(np.log(spec.median_frames), spec.sigma, size=spec.num_seqs)
    return np.clip(np.rint(raw), spec.min_frames, spec.max_frames).astype(np.int64)


def synthetic_tag(index: int) -> str:
    """RETURNN-style tag ("corpus/recording/segment")."""
    return f"synthetic/rec{index // 10:05d}/{index % 10}"


def class_means(spec: SyntheticSpec) -> np.ndarray:
    """The mean frame of each class -> float32 ``[num_classes, feature_dim]``."""
    rng = np.random.default_rng([spec.seed, 1])
    return rng.standard_normal((spec.num_classes, spec.feature_dim)).astype(np.float32)


def synthetic_sequence(
    spec: SyntheticSpec, index: int, length: int, means: np.ndarray
) -> dict[str, np.ndarray]:
    """Sequence ``index``: ``data`` float32 ``[T, F]``, ``classes`` int32 ``[T]``, ``labels`` int32
    ``[U]`` (U = number of aligned segments, U <= T)."""
    rng = np.random.default_rng([spec.seed, 2, index])
    # segment durations: geometric with the given mean, enough of them to cover T frames
    n_seg_max = length  # at least one frame per segment
    durations = rng.geometric(1.0 / spec.mean_segment, size=n_seg_max)  # [n_seg_max]
    ends = np.cumsum(durations)
    n_seg = int(np.searchsorted(ends, length)) + 1  # segments needed to reach T
    # neighbouring segments get different labels (as after CTC collapsing)
    steps = rng.integers(1, spec.num_classes, size=n_seg) if spec.num_classes > 1 else 0
    labels = (np.cumsum(steps) % spec.num_classes).astype(np.int32)  # [U]
    seg_of_frame = np.searchsorted(ends[:n_seg], np.arange(length), side="right")  # [T]
    classes = labels[seg_of_frame]  # [T]
    noise = rng.standard_normal((length, spec.feature_dim)).astype(np.float32)
    data = means[classes] + np.float32(spec.noise) * noise  # [T, F]
    return {"data": data, "classes": classes, "labels": labels}


def synthetic_corpus(spec: SyntheticSpec | None = None) -> MemorySource:
    """The whole corpus in memory (about ``num_seqs * median_frames * feature_dim * 4`` bytes)."""
    spec = spec or SyntheticSpec()
    lengths = synthetic_lengths(spec)
    means = class_means(spec)
    seqs = [synthetic_sequence(spec, i, int(n), means) for i, n in enumerate(lengths)]
    return MemorySource(
        {key: [s[key] for s in seqs] for key in ("data", "classes", "labels")},
        tags=[synthetic_tag(i) for i in range(spec.num_seqs)],
        vocab_sizes={"classes": spec.num_classes, "labels": spec.num_classes},
    )
