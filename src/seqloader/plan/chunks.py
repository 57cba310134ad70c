"""Chunking: each sequence cut into windows ``[start, end)`` per key, and every window planned as a
unit of its own (RETURNN's ``chunking``, as its torch engine applies it: after the length filter,
before batching).

A key chunked with ``(size, step)`` has windows starting at ``0, step, 2*step, ...`` (below the
length), each ``[start, min(start + size, length))``; windows shorter than ``min_chunk_size`` are
left out (they are always the last ones). Every chunked key of a sequence must give the same number
of windows (chunk ``i`` is window ``i`` of each chunked key); keys not chunked are whole in every
chunk. A sequence with no window (empty, or shorter than ``min_chunk_size``) is filtered, counted.

A *unit* is ``(sequence, chunk index)``; units are numbered sequence after sequence, chunk after
chunk (``ChunkTable``). The planner orders sequences, expands each into its chunks (consecutive, as
RETURNN's pipe yields them), and batches and distributes units: every contract the plan keeps for
sequences it keeps for chunks. ``buckets:N`` arranges the chunks themselves (bucketed by their
windows); in a mix each chunk carries its slot's corpus epoch; with ``distribution="files"`` a
sequence's chunks stay with its file's rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError, sequence_named
from seqloader.plan.keyed import EVERY_KEY, resolve_keyed

#: canonical chunking: ``{key or "*": (size, step)}``
ChunkSpec = dict[str, tuple[int, int]]


def chunk_counts(lengths: np.ndarray, size: int, step: int, min_size: int) -> np.ndarray:
    """Windows of each sequence -> int64 ``[n]``: starts ``0, step, ...`` below the length whose
    window ``min(size, length - start)`` is at least ``min_size`` (RETURNN's rule)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if min_size > size:
        return np.zeros(len(lengths), dtype=np.int64)
    if min_size <= 0:
        return -(-lengths // step)  # ceil(length / step): every start below the length
    return np.where(lengths >= min_size, (lengths - min_size) // step + 1, 0).astype(np.int64)


@dataclass(frozen=True)
class Units:
    """Planned units in order: the sequence and chunk of each, and each one's length per key
    (all int64 ``[u]``)."""

    seqs: np.ndarray
    chunks: np.ndarray
    lengths: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.seqs)

    def tail(self, start: int) -> Units:
        """The units from position ``start`` on (views)."""
        return Units(
            self.seqs[start:], self.chunks[start:], {k: v[start:] for k, v in self.lengths.items()}
        )


@dataclass(frozen=True)
class ChunkTable:
    """The chunks of a corpus: ``first[i]:first[i+1]`` number sequence i's chunks (a filtered
    sequence has none). Nothing is stored per chunk: a chunk's window follows from its index
    (``start = c * step``), so the table costs ``O(sequences)`` however many chunks there are.

    - ``first``: int64 ``[n + 1]`` (CSR over sequences; ``first[-1]`` chunks in all).
    - ``spec``: ``{key: (size, step)}`` of every chunked key (resolved from ``"*"``).
    - ``whole``: ``{key: int64 [n]}`` the whole sequences' lengths.
    - ``counts``: int32 ``[n]`` each sequence's number of chunks.
    """

    first: np.ndarray
    spec: dict[str, tuple[int, int]]
    whole: dict[str, np.ndarray]
    counts: np.ndarray  # int32 [n] chunks of each sequence (np.diff(first))

    @property
    def num_units(self) -> int:
        return int(self.first[-1])

    def unit_ids(self, seqs: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """A number per chunk, ``0..num_units-1`` (sequence after sequence) -> int64 ``[u]``."""
        return self.first[np.asarray(seqs, dtype=np.int64)] + np.asarray(chunks, dtype=np.int64)

    def expand(
        self,
        seqs: np.ndarray,
        keys: Sequence[str] = (),
        counts: np.ndarray | None = None,
        ends: np.ndarray | None = None,
    ) -> Units:
        """The chunks of ``seqs`` (int64 ``[m]``), each sequence's in order; with their lengths
        for ``keys``. Sequential work only (``repeat``, ``cumsum``), no gather over all chunks;
        chunk indices are int32 (fewer than 2^31 chunks are planned, ``bounds``). ``counts``
        (``self.counts[seqs]``) and ``ends`` (their cumulative sum): when the caller has them."""
        seqs = np.asarray(seqs, dtype=np.int64)
        counts = self.counts[seqs] if counts is None else counts  # [m]
        ends = np.cumsum(counts, dtype=np.int64) if ends is None else ends  # [m]
        total = int(ends[-1]) if len(ends) else 0
        slot_seqs = np.repeat(seqs, counts)  # [u]
        # chunk index: 1 per slot, minus the previous sequence's count at each sequence start
        chunks = np.ones(total, dtype=np.int32)
        if total:
            nonempty = counts > 0
            if not nonempty.all():  # planned sequences all have chunks; others are skipped
                counts, ends = counts[nonempty], ends[nonempty]
            chunks[ends[:-1]] = 1 - counts[:-1]
            chunks[0] = 0
            np.cumsum(chunks, out=chunks)
        lengths = {}
        for key in keys:
            whole = np.repeat(self.whole[key][seqs], counts)  # [u]
            lengths[key] = self.window(key, whole, chunks, out=whole)
        return Units(slot_seqs, chunks, lengths)

    def window(
        self, key: str, whole: np.ndarray, chunks: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Length of chunk ``chunks`` of sequences of length ``whole`` in ``key`` -> int64
        (keys not chunked: the whole length); ``out``: where to write it (may be ``whole``)."""
        if key not in self.spec:
            return np.asarray(whole, dtype=np.int64)
        size, step = self.spec[key]
        start = np.multiply(chunks, step, dtype=np.int64)  # [u]
        res = np.subtract(whole, start, out=out if out is not None else start)
        return np.minimum(res, size, out=res)

    def longest(self, key: str) -> np.ndarray:
        """Each sequence's longest chunk in ``key`` (its first) -> int64 ``[n]``."""
        whole = np.asarray(self.whole[key], dtype=np.int64)
        if key not in self.spec:
            return whole
        return np.minimum(whole, self.spec[key][0])


def resolve_chunking(
    spec: ChunkSpec, min_chunk_size: int | Mapping[str, int], keys: Sequence[str]
) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """(``{key: (size, step)}`` of every chunked key of ``keys``, ``"*"`` resolved; the
    ``min_chunk_size`` of each) -> both in the data's key order. A named key not in the data is
    an ``OptionError``.

    >>> resolve_chunking({"*": (4, 2), "y": (2, 1)}, 1, ["x", "y"])
    ({'x': (4, 2), 'y': (2, 1)}, {'x': 1, 'y': 1})
    """
    keys = list(keys)
    resolved: dict[str, tuple[int, int]] = {}
    for key, pair in spec.items():
        if key != EVERY_KEY and key not in keys:
            raise OptionError(f"chunking: key {key!r} is not in the data; keys: {sorted(keys)}")
        for k in keys if key == EVERY_KEY else [key]:
            resolved.setdefault(k, pair)
    resolved.update({k: v for k, v in spec.items() if k != EVERY_KEY})
    resolved = {k: resolved[k] for k in keys if k in resolved}
    if isinstance(min_chunk_size, Mapping):
        mins_of = resolve_keyed("min_chunk_size", min_chunk_size, keys, keys[0])
    else:
        mins_of = {k: int(min_chunk_size) for k in resolved}
    return resolved, mins_of


def chunk_table(
    lengths: Mapping[str, np.ndarray],
    spec: ChunkSpec,
    min_chunk_size: int | Mapping[str, int],
    keep: np.ndarray,
    tags: Sequence[str] | None = None,
    origin: str = "",
) -> ChunkTable:
    """The chunks of the sequences ``keep`` (bool ``[n]``) under ``spec``. Raises naming the first
    sequence whose chunked keys disagree on the number of chunks (RETURNN refuses them too)."""
    keys = list(lengths)
    resolved, mins_of = resolve_chunking(spec, min_chunk_size, keys)
    whole = {k: np.asarray(v, dtype=np.int64) for k, v in lengths.items()}
    counts: np.ndarray | None = None
    first_key = ""
    for key, (size, step) in resolved.items():
        c = chunk_counts(whole[key], size, step, mins_of.get(key, 0))
        if counts is None:
            counts, first_key = c, key
            continue
        bad = np.flatnonzero(keep & (c != counts))
        if len(bad):
            i = int(bad[0])
            raise OptionError(
                f"chunking: {sequence_named(i, tags, origin)} gives {int(counts[i])} chunk(s) of "
                f"{first_key!r} (length {int(whole[first_key][i])}, size:step "
                f"{resolved[first_key][0]}:{resolved[first_key][1]}) but {int(c[i])} of {key!r} "
                f"(length {int(whole[key][i])}, size:step {size}:{step}); "
                f"{len(bad)} sequence(s) like this. Every chunked key must give the same number "
                "of chunks (RETURNN asserts the same). Fix: scale each key's size and step by its "
                "frame rate (e.g. chunking=({'data': (400, 200), 'classes': (100, 50)})), or "
                "chunk only one key."
            )
    assert counts is not None
    counts = np.where(keep, counts, 0)
    first = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    return ChunkTable(first, resolved, whole, counts.astype(np.int32))


def chunk_spans(
    spec: Mapping[str, tuple[int, int]], lengths: Mapping[str, np.ndarray], chunks: np.ndarray
) -> dict[str, np.ndarray]:
    """``{key: int64 [B, 2]}`` the ``[start, end)`` of each chunk per chunked key (``lengths``:
    the whole sequences' lengths per key, ``[B]``; ``chunks``: chunk index per slot, ``[B]``)."""
    out = {}
    for key, (size, step) in spec.items():
        start = np.asarray(chunks, dtype=np.int64) * step
        end = np.minimum(start + size, np.asarray(lengths[key], dtype=np.int64))
        out[key] = np.stack([start, end], axis=1)
    return out
