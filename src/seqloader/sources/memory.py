"""``MemorySource``: sequences held in memory (for tests, synthetic data and small corpora)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from seqloader.errors import DataError
from seqloader.sources.base import KeySpec, SourceBase, fingerprint_of


class MemorySource(SourceBase):
    """Sequences given as ``{key: [array per sequence]}``.

    Arrays of one key must agree on dtype and feature shape. ``vocab_sizes`` marks integer 1-D keys
    as sparse with that vocabulary size (as RETURNN's HDF ``inputPattSize`` / ``targets/size``).
    ``file_bounds``: int ``[F + 1]``, as if file f held sequences ``[b[f], b[f + 1])`` (for
    ``distribution="files"`` without files on disk; default: one file).

    >>> src = MemorySource({"data": [np.ones((3, 2), "float32"), np.ones((5, 2), "float32")]}, tags=["a", "b"])
    >>> len(src), src.lengths("data").tolist(), src.tag(1), src.read(1)["data"].shape
    (2, [3, 5], 'b', (5, 2))
    """

    def __init__(
        self,
        data: Mapping[str, Sequence[np.ndarray]],
        tags: Sequence[str] | None = None,
        vocab_sizes: Mapping[str, int] | None = None,
        file_bounds: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        if not data:
            raise DataError("MemorySource: no keys given; expected {key: [array per sequence]}")
        counts = {k: len(v) for k, v in data.items()}
        n = next(iter(counts.values()))
        if any(c != n for c in counts.values()):
            raise DataError(f"MemorySource: keys have different sequence counts: {counts}")
        self._n = n
        self._tags = list(tags) if tags is not None else [f"seq-{i}" for i in range(n)]
        if len(self._tags) != n:
            raise DataError(f"MemorySource: got {len(self._tags)} tags for {n} sequences")
        vocab_sizes = dict(vocab_sizes or {})
        self._data: dict[str, list[np.ndarray]] = {}
        self._lengths: dict[str, np.ndarray] = {}
        schema: dict[str, KeySpec] = {}
        for key, seqs in data.items():
            arrays = [np.asarray(a) for a in seqs]
            spec = _spec_of(key, arrays, vocab_sizes.get(key), self._tags)
            schema[key] = spec
            self._data[key] = arrays
            self._lengths[key] = np.fromiter((a.shape[0] for a in arrays), np.int64, count=n)
        self._schema = schema
        self._fingerprint: str | None = None
        files = [0, n] if file_bounds is None else file_bounds  # checked where it is used
        self._files = np.asarray(files, dtype=np.int64)

    def file_layout(self) -> np.ndarray:
        return self._files

    def read(self, index: int) -> dict[str, np.ndarray]:
        return {k: v[index] for k, v in self._data.items()}

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self._tags, self._lengths, self._schema, "memory")
        return self._fingerprint

    def __repr__(self) -> str:
        keys = ", ".join(f"{k}: {s.describe()}" for k, s in self._schema.items())
        return f"MemorySource({self._n} seqs; {keys})"


def _spec_of(key: str, arrays: list[np.ndarray], vocab: int | None, tags: list[str]) -> KeySpec:
    if not arrays:  # no sequence to infer from: sparse keys are int32 labels, others float32
        dtype = np.dtype(np.int32 if vocab is not None else np.float32)
        return KeySpec(dtype, (), vocab is not None, vocab)
    first = arrays[0]
    if first.ndim == 0:
        raise DataError(
            f"MemorySource: key {key!r}, sequence 0 ({tags[0]!r}) is a scalar; "
            "expected an array with a time axis first"
        )
    for i, a in enumerate(arrays):
        if a.ndim == 0 or a.dtype != first.dtype or a.shape[1:] != first.shape[1:]:
            raise DataError(
                f"MemorySource: key {key!r}, sequence {i} ({tags[i]!r}) has dtype {a.dtype} "
                f"shape {a.shape}; expected dtype {first.dtype} and shape [T, *{first.shape[1:]}] "
                "like sequence 0"
            )
    sparse = vocab is not None
    if sparse and (first.ndim != 1 or not np.issubdtype(first.dtype, np.integer)):
        raise DataError(f"MemorySource: key {key!r} given a vocabulary size but is not 1-D ints")
    return KeySpec(first.dtype, tuple(first.shape[1:]), sparse, vocab)
