"""Padding sequences into one buffer per key, written once into memory the caller allocates.

``alloc(shape, dtype)`` returns a writable numpy array; the torch layer passes one backed by shared
memory so the padded batch crosses from worker to trainer without another copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from seqloader.errors import DataError
from seqloader.sources.base import Schema

Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def numpy_alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def pad_key(
    key: str, arrays: Sequence[np.ndarray], alloc: Alloc = numpy_alloc
) -> tuple[np.ndarray, np.ndarray]:
    """Pad ``arrays`` (each ``[T_i, *feat]``, at least one) to ``[B, max T_i, *feat]``, zeros after
    each end. Returns (padded, lengths int64 ``[B]``)."""
    first = arrays[0]
    for a in arrays:
        if a.ndim == 0 or a.shape[1:] != first.shape[1:] or a.dtype != first.dtype:
            raise DataError(
                f"key {key!r}: sequences in one batch disagree: {a.dtype}{list(a.shape)} vs "
                f"{first.dtype}{list(first.shape)}; every sequence needs the same dtype and "
                "feature shape [T, ...] (check the data or the transform)"
            )
    lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    t_max = int(lengths.max())
    out = alloc((len(arrays), t_max, *first.shape[1:]), first.dtype)
    for i, a in enumerate(arrays):
        n = a.shape[0]
        out[i, :n] = a
        if n < t_max:
            out[i, n:] = 0
    return out, lengths


def pad_batch(
    seqs: Sequence[Mapping[str, np.ndarray]], alloc: Alloc = numpy_alloc
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pad every key of a non-empty list of sequences -> ({key: padded}, {key: lengths})."""
    data: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    for key in seqs[0]:
        data[key], lengths[key] = pad_key(key, [s[key] for s in seqs], alloc)
    return data, lengths


def pad_empty(
    schema: Schema, alloc: Alloc = numpy_alloc
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A batch of zero sequences with the source's keys (``[0, 0, *feat]``): what a batch becomes
    when the source skipped every sequence in it, so the step still happens (equal steps, C2)."""
    data = {k: alloc((0, 0, *s.feature_shape), np.dtype(s.dtype)) for k, s in schema.items()}
    return data, {k: np.zeros(0, dtype=np.int64) for k in schema}
