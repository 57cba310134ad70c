"""Sources: random-access sequence stores (the only layer that does data I/O). Audio sources sit in
``seqloader.audio``, which builds on this layer."""

from seqloader.sources.base import (
    DeclaresNeeds,
    HashedTags,
    KeySpec,
    LoaderNeeds,
    Locates,
    PreparesWorkers,
    ReadsMany,
    Schema,
    Source,
    SourceBase,
)
from seqloader.sources.concat import ConcatSource
from seqloader.sources.hdf import HDFSource
from seqloader.sources.hdf_write import convert_contiguous, write_hdf
from seqloader.sources.joined import ZipSource
from seqloader.sources.memory import MemorySource
from seqloader.sources.remote import FileCache

__all__ = [
    "ConcatSource",
    "DeclaresNeeds",
    "FileCache",
    "HDFSource",
    "HashedTags",
    "KeySpec",
    "LoaderNeeds",
    "Locates",
    "MemorySource",
    "PreparesWorkers",
    "ReadsMany",
    "Schema",
    "Source",
    "SourceBase",
    "ZipSource",
    "convert_contiguous",
    "write_hdf",
]
