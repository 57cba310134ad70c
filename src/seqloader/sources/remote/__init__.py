"""Remote corpora: files behind fsspec URLs (S3, GCS, Azure, HTTP, ...) read from whole local
copies in a ``FileCache``, with their metadata indexed locally (``index``). No torch here; the
loader's plan-driven prefetcher is ``seqloader.trainer.prefetch``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError
from seqloader.parts import part_of
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
        return part_of(self.bounds, seqs)


def cache_for(
    who: str,
    paths: Sequence[str],
    cache: FileCache | None,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    storage_options: dict | None,
) -> FileCache | None:
    """The cache ``who`` (a source) reads its remote files through: the given one, or a new one in
    ``cache_dir`` (None: the paths are local; mixing URLs and paths is refused)."""
    urls = [p for p in paths if is_url(p)]
    given = cache is not None or cache_dir is not None or cache_bytes is not None
    if not urls:
        if given or storage_options:
            raise OptionError(
                f"{who}: cache_dir, cache_bytes, storage_options and cache apply to remote "
                f"files (URLs such as 's3://bucket/x.hdf'), but all paths are local ({paths[0]!r}"
                "...). Fix: drop them, or give the files as URLs."
            )
        return None
    if len(urls) != len(paths):
        local = next(p for p in paths if not is_url(p))
        raise OptionError(
            f"{who}: the files mix URLs ({urls[0]!r}) and local paths ({local!r}). Fix: give "
            "every file as a URL (file:///abs/path for a local one) or every file as a path."
        )
    if cache is not None:
        if cache_dir is not None or cache_bytes is not None or storage_options:
            raise OptionError(
                f"{who}: give either cache=FileCache(...) or cache_dir/cache_bytes/"
                "storage_options, not both"
            )
        return cache
    if cache_dir is None:
        raise OptionError(
            f"{who}: remote files ({urls[0]!r}) are read from whole local copies, so they "
            f"need cache_dir (a directory on local disk). Fix: {who}(urls, cache_dir=..., "
            "cache_bytes=...)"
        )
    return FileCache(cache_dir, cache_bytes, storage_options)


__all__ = [
    "COUNTERS",
    "FetchCounters",
    "FileCache",
    "RemoteFile",
    "RemoteFiles",
    "cache_for",
    "is_url",
]
