"""Sources: random-access sequence stores (the only layer that does data I/O). Audio sources sit in
``seqloader.audio``, which builds on this layer."""

from seqloader.sources.base import KeySpec, Schema, Source, default_length_key
from seqloader.sources.hdf import HDFSource
from seqloader.sources.hdf_write import convert_contiguous, write_hdf
from seqloader.sources.memory import MemorySource

__all__ = [
    "HDFSource",
    "KeySpec",
    "MemorySource",
    "Schema",
    "Source",
    "convert_contiguous",
    "default_length_key",
    "write_hdf",
]
