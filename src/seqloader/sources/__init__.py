"""Sources: random-access sequence stores (the only layer that does data I/O)."""

from seqloader.sources.audio import AudioOptions, AudioSource
from seqloader.sources.base import KeySpec, Schema, Source, default_length_key
from seqloader.sources.memory import MemorySource

__all__ = [
    "AudioOptions",
    "AudioSource",
    "KeySpec",
    "MemorySource",
    "Schema",
    "Source",
    "default_length_key",
]
