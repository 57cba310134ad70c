"""The ``Source`` protocol: random-access sequence stores.

A source tells everything planning needs at open time, cheaply (lengths, tags, schema), and reads one
sequence on demand (in a DataLoader worker). Sources must be picklable and must open files lazily in
the process that reads, so they survive fork and spawn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class KeySpec:
    """What one key of a sequence looks like.

    ``feature_shape`` is the shape of one frame (``()`` for sparse/scalar frames); ``vocab_size`` is
    set for sparse (integer label) keys.
    """

    dtype: np.dtype
    feature_shape: tuple[int, ...] = ()
    sparse: bool = False
    vocab_size: int | None = None

    def describe(self) -> str:
        shape = "[T" + "".join(f", {d}" for d in self.feature_shape) + "]"
        extra = f" sparse(vocab={self.vocab_size})" if self.sparse else ""
        return f"{np.dtype(self.dtype).name}{shape}{extra}"


Schema = Mapping[str, KeySpec]


@runtime_checkable
class Source(Protocol):
    """A random-access store of sequences; see the module docstring."""

    def __len__(self) -> int: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def schema(self) -> Schema: ...

    def lengths(self, key: str) -> np.ndarray:
        """Per-sequence lengths (int64 ``[n]``) of ``key``; known at open, no data read."""
        ...

    def tag(self, index: int) -> str: ...

    @property
    def tags(self) -> Sequence[str]: ...

    def read(self, index: int) -> dict[str, np.ndarray]:
        """Sequence ``index`` as ``{key: array [T_key, *feature_shape]}``."""
        ...

    def fingerprint(self) -> str:
        """A content hash: equal for the same data, different for other data."""
        ...


class SourceMetadata:
    """The metadata half of the ``Source`` protocol for sources that keep it in attributes set at
    open: ``_schema`` (its key order is ``keys``), ``_lengths`` (key -> int64 ``[n]``), ``_tags``.
    One implementation, so every source answers planning's questions the same way."""

    _schema: Schema
    _lengths: Mapping[str, np.ndarray]
    _tags: Sequence[str]

    def __len__(self) -> int:
        return len(self._tags)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._schema)

    @property
    def schema(self) -> Schema:
        return self._schema

    def lengths(self, key: str) -> np.ndarray:
        if key not in self._lengths:
            raise KeyError(f"key {key!r} is not in {self!r}; keys: {list(self._schema)}")
        return self._lengths[key]

    @property
    def tags(self) -> Sequence[str]:
        return self._tags

    def tag(self, index: int) -> str:
        return self._tags[index]


def where(source: object, index: int) -> str:
    """Where sequence ``index`` lives, as precisely as the source can say (file and local index)."""
    locate, paths = getattr(source, "locate", None), getattr(source, "paths", None)
    if locate is not None and paths:
        try:
            f, j = locate(int(index))
            return f"file {paths[f]!r} (sequence {j} of that file)"
        except Exception:  # a broken source should not hide the original finding
            pass
    return repr(source)


def default_length_key(source: Source) -> str:
    """The key that planning measures lengths on by default: ``data`` if present, else the first."""
    keys = source.keys
    if not keys:
        raise ValueError("source has no keys")
    return "data" if "data" in keys else keys[0]


def fingerprint_of(
    tags: Sequence[str], lengths: Mapping[str, np.ndarray], schema: Schema, extra: str = ""
) -> str:
    """Hash tags, lengths and schema: cheap (no data read) and catches the usual mismatches
    (other file list, other order, other feature dim) between ranks or between runs."""
    h = hashlib.sha256()
    h.update(str(len(tags)).encode())
    for t in tags:
        h.update(t.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    for key in sorted(lengths):
        spec = schema[key]
        h.update(f"{key}:{spec.describe()}".encode())
        h.update(np.ascontiguousarray(lengths[key], dtype=np.int64).tobytes())
    h.update(extra.encode())
    return h.hexdigest()[:32]
