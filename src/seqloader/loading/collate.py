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


def alike_lengths(key: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Lengths (int64 ``[B]``) of one key's arrays, which must agree in dtype and feature shape
    to share a batch (padded or packed alike)."""
    first = arrays[0]
    for a in arrays:
        if a.ndim == 0 or a.shape[1:] != first.shape[1:] or a.dtype != first.dtype:
            raise DataError(
                f"key {key!r}: sequences in one batch disagree: {a.dtype}{list(a.shape)} vs "
                f"{first.dtype}{list(first.shape)}; every sequence needs the same dtype and "
                "feature shape [T, ...] (check the data or the transform)"
            )
    return np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))


def pad_key(
    key: str, arrays: Sequence[np.ndarray], alloc: Alloc = numpy_alloc
) -> tuple[np.ndarray, np.ndarray]:
    """Pad ``arrays`` (each ``[T_i, *feat]``, at least one) to ``[B, max T_i, *feat]``, zeros after
    each end. Returns (padded, lengths int64 ``[B]``)."""
    first = arrays[0]
    lengths = alike_lengths(key, arrays)
    t_max = int(lengths.max())
    out = alloc((len(arrays), t_max, *first.shape[1:]), first.dtype)
    for i, a in enumerate(arrays):
        n = a.shape[0]
        out[i, :n] = a
        if n < t_max:
            out[i, n:] = 0
    return out, lengths


def pack_key(
    key: str, arrays: Sequence[np.ndarray], alloc: Alloc = numpy_alloc
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``arrays`` (each ``[T_i, *feat]``) along time into ``[sum T_i, *feat]``, no
    padding (the layout variable-length attention kernels take). Returns (packed, lengths int64
    ``[B]``); the offsets are ``cumsum(lengths)`` with a leading 0 (``packed_offsets``)."""
    first = arrays[0]
    lengths = alike_lengths(key, arrays)
    out = alloc((int(lengths.sum()), *first.shape[1:]), first.dtype)
    at = 0
    for a in arrays:
        out[at : at + a.shape[0]] = a
        at += a.shape[0]
    return out, lengths


def packed_offsets(lengths: np.ndarray) -> np.ndarray:
    """Where each sequence starts in a packed key, and the total at the end: int32 ``[B + 1]``
    (``cu_seqlens`` of variable-length attention kernels)."""
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return out


def pack_batch(
    seqs: Sequence[Mapping[str, np.ndarray]], alloc: Alloc = numpy_alloc
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pack every key of a non-empty list of sequences -> ({key: packed}, {key: lengths})."""
    return _every_key(pack_key, seqs, alloc)


def pad_batch(
    seqs: Sequence[Mapping[str, np.ndarray]], alloc: Alloc = numpy_alloc
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pad every key of a non-empty list of sequences -> ({key: padded}, {key: lengths})."""
    return _every_key(pad_key, seqs, alloc)


def _every_key(
    collate: Callable[[str, list[np.ndarray], Alloc], tuple[np.ndarray, np.ndarray]],
    seqs: Sequence[Mapping[str, np.ndarray]],
    alloc: Alloc,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``collate`` (``pack_key`` or ``pad_key``) applied to every key of ``seqs``."""
    data: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    for key in seqs[0]:
        data[key], lengths[key] = collate(key, [s[key] for s in seqs], alloc)
    return data, lengths


def pad_empty(
    schema: Schema, alloc: Alloc = numpy_alloc, packed: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A batch of zero sequences with the source's keys (``[0, 0, *feat]``; packed ``[0, *feat]``):
    what a batch becomes when the source skipped every sequence in it, so the step still happens
    (equal steps, C2)."""
    lead = (0,) if packed else (0, 0)
    data = {k: alloc((*lead, *s.feature_shape), np.dtype(s.dtype)) for k, s in schema.items()}
    return data, {k: np.zeros(0, dtype=np.int64) for k in schema}
