"""Values RETURNN reads as paths although they are objects: RETURNN's ``CachedFile`` (the file it
copies to a local cache first: the same data, so its original path here), sisyphus ``tk.Path``
(``get_path()``), any ``os.PathLike``, and sisyphus' delayed values (``get()``)."""

from __future__ import annotations

import os
from typing import Any

from seqloader.returnn.stubs import Stub


def plain_value(value: Any) -> Any:
    """``value`` with every path object inside dicts, lists and tuples replaced by its path string.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class CachedFile:
    ...     filename: str
    >>> plain_value({"files": [CachedFile("/data/a.hdf")], "partition_epoch": 2})
    {'files': ['/data/a.hdf'], 'partition_epoch': 2}
    """
    if isinstance(value, str | bytes | int | float | bool | Stub | type) or value is None:
        return value  # a class (e.g. the config's own path class) is no path
    if type(value).__name__ == "CachedFile" and isinstance(getattr(value, "filename", None), str):
        return value.filename  # RETURNN's file_cache.CachedFile: the file before caching
    if callable(getattr(value, "get_path", None)):
        return os.fspath(value.get_path())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if type(value).__module__.startswith("sisyphus") and callable(getattr(value, "get", None)):
        return plain_value(value.get())
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_value(v) for v in value)
    return value
