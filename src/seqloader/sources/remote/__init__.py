"""Remote corpora: files behind fsspec URLs (S3, GCS, Azure, HTTP, ...) read from whole local
copies in a ``FileCache``, with their metadata indexed locally (``index``). No torch here; the
loader's plan-driven prefetcher is ``seqloader.torch.prefetch``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqloader.sources.remote.cache import FileCache, RemoteFile, is_url
from seqloader.sources.remote.stats import COUNTERS, FetchCounters


@dataclass(frozen=True)
class RemoteFiles:
    """A source's remote files, for the loader's prefetcher: file ``f`` is ``files[f]`` and holds
    the source's sequences ``[bounds[f], bounds[f + 1])``."""

    cache: FileCache
    files: tuple[RemoteFile, ...]
    bounds: np.ndarray  # int64 [F + 1]

    def file_of(self, seqs: np.ndarray) -> np.ndarray:
        """The file number of each sequence index."""
        return np.searchsorted(self.bounds, seqs, side="right") - 1


__all__ = ["COUNTERS", "FetchCounters", "FileCache", "RemoteFile", "RemoteFiles", "is_url"]
