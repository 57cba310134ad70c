"""Audio: ``AudioSource`` over manifests (JSON lines, RETURNN OggZip) of audio files, decoding and
resampling, log-mel features (numpy), text vocabularies and the audio transforms.

Above ``sources/`` (it implements the ``Source`` protocol) and below the torch glue: nothing here
imports torch (see docs/architecture.md).
"""

from seqloader.audio.features import LogMel
from seqloader.audio.kaldi_fbank import KaldiFbank
from seqloader.audio.returnn_features import ReturnnFeatures
from seqloader.audio.source import AudioOptions, AudioSource
from seqloader.audio.vocab import SentencePieceVocab, TokenVocab, Vocabulary

__all__ = [
    "AudioOptions",
    "AudioSource",
    "KaldiFbank",
    "LogMel",
    "ReturnnFeatures",
    "SentencePieceVocab",
    "TokenVocab",
    "Vocabulary",
]
