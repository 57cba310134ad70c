"""Synthetic corpora for demos, benchmarks and tests without real data, in one place:
``frames`` (a speech-like corpus of feature frames in memory) and ``audio`` (the same kind of
utterances written as audio files with JSON-lines and OggZip manifests; needs soundfile)."""

from seqloader.synthetic.frames import (
    SyntheticSpec,
    class_means,
    synthetic_corpus,
    synthetic_lengths,
    synthetic_sequence,
    synthetic_tag,
)

__all__ = [
    "SyntheticSpec",
    "class_means",
    "synthetic_corpus",
    "synthetic_lengths",
    "synthetic_sequence",
    "synthetic_tag",
]
