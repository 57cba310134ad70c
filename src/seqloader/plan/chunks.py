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
sequences it keeps for chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.keyed import EVERY_KEY, keyed_int_option, resolve_keyed
from seqloader.validate import int_option, is_int

#: canonical chunking: ``{key or "*": (size, step)}``
ChunkSpec = dict[str, tuple[int, int]]

_EXPECTED = (
    "expected None/0/'0' (off), size, 'size:step', (size, step), {key: size}, "
    "{key: (size, step)} or ({key: size}, {key: step}), sizes and steps ints >= 1"
)


def chunking_option(value: object) -> ChunkSpec | None:
    """``chunking`` in any of RETURNN's forms -> ``{key: (size, step)}`` (``"*"``: every key), or
    None when off (``None``, ``0``, ``"0"``, ``""``, RETURNN's "off" values)."""
    if value is None or (is_int(value) and value == 0) or value in ("0", "", {}):
        return None
    if isinstance(value, str):
        try:
            parts = [int(p) for p in value.split(":")]
        except ValueError:
            raise OptionError(f"chunking: got {value!r}, {_EXPECTED}") from None
        if len(parts) not in (1, 2):
            raise OptionError(f"chunking: got {value!r}, {_EXPECTED}")
        value = tuple(parts) if len(parts) == 2 else parts[0]
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise OptionError(f"chunking: got {value!r}, {_EXPECTED}")
        size, step = value
        if isinstance(size, Mapping):
            if step in (None, 0):
                step = size
            if not isinstance(step, Mapping) or sorted(step) != sorted(size):
                raise OptionError(
                    f"chunking: got {value!r}; the step dict must name the same keys as the size "
                    f"dict ({_EXPECTED})"
                )
            return _checked({k: (size[k], step[k]) for k in size}, value)
        if step in (None, 0):
            step = size
        return _checked({EVERY_KEY: (size, step)}, value)
    if isinstance(value, Mapping):
        pairs = {}
        for k, v in value.items():
            pairs[k] = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
        return _checked(pairs, value)
    if is_int(value):
        return _checked({EVERY_KEY: (value, value)}, value)
    raise OptionError(f"chunking: got {value!r}, {_EXPECTED}")


def _checked(pairs: Mapping[object, object], given: object) -> ChunkSpec:
    out: ChunkSpec = {}
    for key, pair in pairs.items():
        if not isinstance(key, str) or not isinstance(pair, tuple) or len(pair) != 2:
            raise OptionError(f"chunking: got {given!r}, {_EXPECTED}")
        size = int_option(f"chunking[{key!r}] size", pair[0], 1)
        step = int_option(f"chunking[{key!r}] step", pair[1], 1)
        out[key] = (size, step)
    return dict(sorted(out.items()))


def min_chunk_size_option(value: object) -> int | dict[str, int]:
    """``min_chunk_size``: an int for every chunked key, or ``{key: int}`` (others: 0)."""
    return keyed_int_option("min_chunk_size", 0 if value is None else value, 0)


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
class ChunkTable:
    """The units of a chunked corpus: ``first[i]:first[i+1]`` are sequence i's chunks.

    - ``first``: int64 ``[n + 1]`` (CSR over sequences; a filtered sequence has none).
    - ``spec``: ``{key: (size, step)}`` of every chunked key (resolved from ``"*"``).
    - ``lengths``: ``{key: int64 [units]}`` each unit's length per key (chunked keys: the window;
      others: the whole sequence).
    """

    first: np.ndarray
    spec: dict[str, tuple[int, int]]
    lengths: dict[str, np.ndarray]

    @property
    def num_units(self) -> int:
        return int(self.first[-1])

    def unit_seq(self) -> np.ndarray:
        """The sequence of each unit -> int64 ``[units]``."""
        counts = np.diff(self.first)
        return np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    def unit_chunk(self) -> np.ndarray:
        """The chunk index (within its sequence) of each unit -> int64 ``[units]``."""
        counts = np.diff(self.first)
        return np.arange(self.num_units, dtype=np.int64) - np.repeat(self.first[:-1], counts)

    def expand(self, seqs: np.ndarray) -> np.ndarray:
        """Units of ``seqs`` (int64 ``[m]``), each sequence's chunks in order -> int64 ``[u]``."""
        seqs = np.asarray(seqs, dtype=np.int64)
        starts = self.first[seqs]
        counts = self.first[seqs + 1] - starts  # [m]
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        ends = np.cumsum(counts)
        base = np.repeat(starts - (ends - counts), counts)  # unit id minus its output position
        return base + np.arange(total, dtype=np.int64)


def chunk_table(
    lengths: Mapping[str, np.ndarray],
    spec: ChunkSpec,
    min_chunk_size: int | Mapping[str, int],
    keep: np.ndarray,
    tags: Sequence[str] | None = None,
    origin: str = "",
) -> ChunkTable:
    """The units of the sequences ``keep`` (bool ``[n]``) under ``spec``. Raises naming the first
    sequence whose chunked keys disagree on the number of chunks (RETURNN refuses them too)."""
    keys = list(lengths)
    resolved: dict[str, tuple[int, int]] = {}
    for key, pair in spec.items():
        targets = keys if key == EVERY_KEY else [key]
        if key != EVERY_KEY and key not in lengths:
            raise OptionError(f"chunking: key {key!r} is not in the data; keys: {sorted(keys)}")
        for k in targets:
            resolved.setdefault(k, pair)
    explicit = {k: v for k, v in spec.items() if k != EVERY_KEY}
    resolved.update(explicit)
    resolved = {k: resolved[k] for k in keys if k in resolved}
    mins = min_chunk_size
    if isinstance(mins, Mapping):
        mins_of = resolve_keyed("min_chunk_size", mins, keys, keys[0])
    else:
        mins_of = {k: int(mins) for k in resolved}
    counts: np.ndarray | None = None
    first_key = ""
    for key, (size, step) in resolved.items():
        c = chunk_counts(lengths[key], size, step, mins_of.get(key, 0))
        if counts is None:
            counts, first_key = c, key
            continue
        bad = np.flatnonzero(keep & (c != counts))
        if len(bad):
            i = int(bad[0])
            tag = tags[i] if tags is not None else f"#{i}"
            where = f" in {origin}" if origin else ""
            raise OptionError(
                f"chunking: sequence {i} (tag {tag!r}){where} gives {int(counts[i])} chunk(s) of "
                f"{first_key!r} (length {int(lengths[first_key][i])}, size:step "
                f"{resolved[first_key][0]}:{resolved[first_key][1]}) but {int(c[i])} of {key!r} "
                f"(length {int(lengths[key][i])}, size:step {size}:{step}); "
                f"{len(bad)} sequence(s) like this. Every chunked key must give the same number "
                "of chunks (RETURNN asserts the same). Fix: scale each key's size and step by its "
                "frame rate (e.g. chunking=({'data': (400, 200), 'classes': (100, 50)})), or "
                "chunk only one key."
            )
    assert counts is not None
    counts = np.where(keep, counts, 0)
    first = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    table = ChunkTable(first, resolved, {})
    seq = table.unit_seq()
    chunk = table.unit_chunk()
    unit_lengths = {}
    for key in keys:
        whole = np.asarray(lengths[key], dtype=np.int64)[seq]
        if key in resolved:
            size, step = resolved[key]
            start = chunk * step
            unit_lengths[key] = np.minimum(start + size, whole) - start
        else:
            unit_lengths[key] = whole
    return ChunkTable(first, resolved, unit_lengths)


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
