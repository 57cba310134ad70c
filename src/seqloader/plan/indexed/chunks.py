"""Chunked plans under ``planning="indexed"``: chunks as the planned units, bucketed by their
windows and drawn position by position, with no array per chunk.

The chunks are global planning's (``seqloader.plan.chunks``: the same windows, per-key sizes and
``min_chunk_size`` rule). With the length key chunked ``(size, step)``, every sequence of length
``L`` has the same chunks: ``n(L)`` windows (``chunk_counts``), chunk ``c`` of length
``min(size, L - c * step)``. So the corpus is indexed by length, not by chunk: ``classes`` is a
``BucketIndex`` with one bucket per distinct admitted length (built once per node like the
sequence index, 4 bytes per sequence), and the rest is a table over the distinct lengths:

- a **cell** is (length class ``g``, chunks ``[lo, hi)``) whose windows all fall into one chunk
  bucket: a class's full windows (length ``size``) form one cell, each of its last windows (those
  its end cuts, at most ``ceil(size / step)``) one cell each;
- chunk bucket ``b``'s canonical list is its cells' chunks laid end to end (sequence-major within a
  cell), so the chunk at any position is a ``searchsorted`` over the cells and a division
  (``ChunkBuckets.__getitem__``), as ``BucketIndex.members`` gives a sequence;
- the buckets' edges are cut from the chunks' length histogram (each class's windows weighted by
  its count) by the rule the sequence buckets follow (``edges_of``).

Histogram batching, the keyed draws, ``SortedWindows``, the batch table, ``shard`` distribution,
``uneven``, positions (counting chunks) and elastic resume then work on chunks unchanged: a chunk
travels through the draw as one code ``sequence * stride + chunk`` and is split when the batch
list is made (``ChunkBuckets.split``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.plan.chunks import ChunkSpec, ChunkTable, chunk_counts, chunk_table
from seqloader.plan.indexed.histogram import BucketIndex

#: ``(distinct chunk lengths ascending, chunks of each)`` -> bucket edges over chunk lengths
EdgesOf = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ChunkGeometry:
    """What a length class's value says of its sequences' chunks: how many, and each one's
    window in the length key. Chunked length key (``per == 0``): the class value is the length
    ``L``, ``chunk_counts(L)`` chunks, chunk ``c`` ``min(size, L - c * step)`` long (``size``,
    ``step``, ``least``: its chunking). Length key not chunked (``per > 0``, more than any
    sequence's chunks): the class value is ``L * per + n``, ``n`` chunks counted by the chunked
    keys, every one whole in the length key (``L``).

    >>> g = ChunkGeometry(2, 1, 0, per=10)
    >>> g.counts(np.array([53, 71])).tolist(), g.windows(np.array([53, 71]), 0).tolist()
    ([3, 1], [5, 7])
    >>> ChunkGeometry(500, 250, 0).windows(np.array([900]), np.array([3])).tolist()
    [150]
    """

    size: int
    step: int
    least: int
    per: int = 0

    def counts(self, values: np.ndarray) -> np.ndarray:
        """Chunks of a sequence of each class value -> int64."""
        values = np.asarray(values, dtype=np.int64)
        if self.per:
            return values % self.per
        return chunk_counts(values, self.size, self.step, self.least)

    def windows(self, values: np.ndarray, chunks: np.ndarray | int) -> np.ndarray:
        """Length-key window of chunk ``chunks`` of sequences of class values ``values``."""
        values = np.asarray(values, dtype=np.int64)
        if self.per:
            return np.broadcast_to(values // self.per, np.broadcast(values, chunks).shape).copy()
        return np.minimum(self.size, values - np.asarray(chunks, dtype=np.int64) * self.step)

    def full(self, values: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Leading chunks of each class alike in length (one cell): the windows of length
        ``size``; not chunked, all ``n``."""
        if self.per:
            return np.asarray(n, dtype=np.int64)
        return np.clip((np.asarray(values, np.int64) - self.size) // self.step + 1, 0, n)

    def full_window(self, values: np.ndarray) -> np.ndarray:
        """The window of each class's leading alike chunks -> int64."""
        values = np.asarray(values, dtype=np.int64)
        if self.per:
            return values // self.per
        return np.full(len(values), self.size, dtype=np.int64)

    @property
    def tails(self) -> int:
        """At most how many last windows of a class differ in length (one cell each)."""
        return 0 if self.per else -(-self.size // self.step)

    def whole(self, values: np.ndarray) -> np.ndarray:
        """Each class value's sequence length in the length key -> int64."""
        values = np.asarray(values, dtype=np.int64)
        return values // self.per if self.per else values


@dataclass(frozen=True)
class ChunkBuckets:
    """The chunks of the admitted sequences grouped by bucket of their window (module doc).

    - ``classes``: the admitted sequences grouped by length (one bucket per distinct length,
      ``classes.longest[g]`` its length).
    - ``geometry``: a class's chunks and their windows (``ChunkGeometry``).
    - ``cell_class``, ``cell_lo``, ``cell_width``, ``cell_end``: int64 ``[C]``, the cells in
      bucket order: class, first chunk, chunks per sequence, chunks through the cell.
    - ``starts``: int64 ``[N + 1]`` chunks before each bucket (bucket ``b`` is positions
      ``starts[b]:starts[b + 1]`` of the cells' list); ``longest``: int64 ``[N]`` the longest
      window per bucket; ``edges``: int64 ``[N - 1]`` the bucket edges over window lengths.
    - ``stride``: codes are ``sequence * stride + chunk`` (more than any sequence's chunks).

    >>> lengths = np.array([900, 300, 900, 1200])
    >>> classes = BucketIndex(np.array([1, 0, 2, 3]), np.array([0, 1, 3, 4]),
    ...     np.array([300, 900, 1200]), np.array([900, 1200]))
    >>> cb = ChunkBuckets.of(classes, 500, 250, 0, lambda v, c: np.array([500]))
    >>> cb.counts.tolist()  # windows shorter than 500, and of length 500
    [8, 7]
    >>> seqs, chunks = cb.split(cb[np.arange(15)])  # bucket 0's chunks, then bucket 1's
    >>> chunks.tolist()
    [0, 1, 2, 2, 3, 3, 3, 4, 0, 1, 0, 1, 0, 1, 2]
    """

    classes: BucketIndex
    geometry: ChunkGeometry
    cell_class: np.ndarray
    cell_lo: np.ndarray
    cell_width: np.ndarray
    cell_end: np.ndarray
    starts: np.ndarray
    longest: np.ndarray
    edges: np.ndarray
    stride: int
    #: int64 ``[C]``: each cell's bucket (``kept``; None: from ``starts``, no cell empty)
    cell_bucket: np.ndarray | None = None
    #: int64 ``[G]``: the sequences of each class planned, its first ones by index (None: all;
    #: ``kept``)
    class_counts: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        classes: BucketIndex,
        size: int | ChunkGeometry,
        step: int,
        min_size: int,
        edges_of: EdgesOf,
    ) -> ChunkBuckets:
        """The cells of ``classes`` chunked ``(size, step)`` (windows shorter than ``min_size``
        left out; or as ``size``, a ``ChunkGeometry``, says), bucketed by ``edges_of`` over the
        windows' length histogram."""
        geo = size if isinstance(size, ChunkGeometry) else ChunkGeometry(size, step, min_size)
        values = np.asarray(classes.longest, dtype=np.int64)  # [G] each class's value
        seqs = np.asarray(classes.counts, dtype=np.int64)  # [G]
        n = geo.counts(values)  # [G] chunks of each class's sequences
        full = geo.full(values, n)  # [G] leading windows alike in length
        g_all = np.arange(len(values), dtype=np.int64)
        parts_g, parts_lo, parts_hi, parts_len = (
            [g_all],
            [np.zeros_like(n)],
            [full],
            [geo.full_window(values)],
        )
        for r in range(geo.tails):  # the windows after the full ones, one cell each
            c = full + r
            ok = c < n
            parts_g.append(g_all[ok])
            parts_lo.append(c[ok])
            parts_hi.append(c[ok] + 1)
            parts_len.append(values[ok] - c[ok] * geo.step)
        g = np.concatenate(parts_g)
        lo, hi = np.concatenate(parts_lo), np.concatenate(parts_hi)
        length = np.concatenate(parts_len)
        keep = (hi > lo) & (seqs[g] > 0)
        g, lo, width, length = g[keep], lo[keep], (hi - lo)[keep], length[keep]
        units = seqs[g] * width  # [C] chunks per cell
        hist_values, inverse = np.unique(length, return_inverse=True)
        hist_counts = np.bincount(inverse, weights=units, minlength=len(hist_values))
        edges = np.asarray(edges_of(hist_values, hist_counts.astype(np.int64)), dtype=np.int64)
        bucket = np.searchsorted(edges, length, side="right")  # [C]
        order = np.lexsort((lo, g, bucket))  # cells by bucket, class, first chunk
        n_buckets = len(edges) + 1
        per_bucket = np.bincount(bucket, weights=units, minlength=n_buckets).astype(np.int64)
        starts = np.zeros(n_buckets + 1, dtype=np.int64)
        np.cumsum(per_bucket, out=starts[1:])
        longest = np.zeros(n_buckets, dtype=np.int64)
        np.maximum.at(longest, bucket, length)
        return cls(
            classes,
            geo,
            g[order],
            lo[order],
            width[order],
            np.cumsum(units[order]),
            starts,
            longest,
            edges,
            int(n.max(initial=0)) + 1,
        )

    @property
    def counts(self) -> np.ndarray:
        """Chunks per bucket -> int64 ``[N]``."""
        return np.diff(self.starts)

    @property
    def planned(self) -> np.ndarray:
        """Sequences planned per length class -> int64 ``[G]``."""
        if self.class_counts is not None:
            return self.class_counts
        return np.asarray(self.classes.counts, dtype=np.int64)

    def kept(self, class_counts: np.ndarray) -> ChunkBuckets:
        """The chunks of only the first ``class_counts[g]`` sequences (by index) of each length
        class ``g``: the same cells, edges and longest windows (so the batch sizes), fewer
        chunks per cell (``epoch_wise_filter`` keeps a class's lowest indices, by RETURNN's
        (length, index) order).

        >>> classes = BucketIndex(np.array([1, 0, 2, 3]), np.array([0, 1, 3, 4]),
        ...     np.array([300, 900, 1200]), np.array([900, 1200]))
        >>> cb = ChunkBuckets.of(classes, 500, 250, 0, lambda v, c: np.array([500]))
        >>> short = cb.kept(np.array([1, 1, 0]))  # sequence 1 (300) and sequence 0 (900)
        >>> short.counts.tolist(), sorted(set(short.split(short[np.arange(6)])[0].tolist()))
        ([4, 2], [0, 1])
        """
        class_counts = np.asarray(class_counts, dtype=np.int64)
        units = class_counts[self.cell_class] * self.cell_width  # [C]
        bucket = self.cell_buckets()
        per_bucket = np.bincount(bucket, weights=units, minlength=len(self.longest))
        starts = np.zeros(len(self.longest) + 1, dtype=np.int64)
        np.cumsum(per_bucket.astype(np.int64), out=starts[1:])
        return dataclasses.replace(
            self,
            cell_end=np.cumsum(units),
            starts=starts,
            cell_bucket=bucket,
            class_counts=class_counts,
        )

    @property
    def num_units(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        """The codes of the chunks at positions ``at`` (int64) of the cells' list -> int64."""
        at = np.asarray(at, dtype=np.int64)
        return self.codes_in(at, self.cell_of(at))

    def cell_of(self, at: np.ndarray) -> np.ndarray:
        """The cell of each position ``at`` of the cells' list -> int64."""
        return np.searchsorted(self.cell_end, at, side="right")

    def codes_in(self, at: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """The codes of the chunks at positions ``at`` of the cells' list, in cells ``cell``."""
        g, j, chunk = self._in_cells(at, cell)
        first = np.asarray(self.classes.starts, dtype=np.int64)[g]
        seqs = np.asarray(self.classes.members[first + j], dtype=np.int64)
        return seqs * self.stride + chunk

    def locate(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(length class, the planned sequence's place in its class, chunk index) of the chunks
        at positions ``at`` of the cells' list -> int64 each."""
        at = np.asarray(at, dtype=np.int64)
        return self._in_cells(at, self.cell_of(at))

    def _in_cells(
        self, at: np.ndarray, cell: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        width = self.cell_width[cell]
        g = self.cell_class[cell]
        k = at - self.cell_end[cell] + self.planned[g] * width
        j, c = np.divmod(k, width)
        return g, j, c + self.cell_lo[cell]

    def split(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, chunk index) of ``codes`` -> int64 each."""
        seqs, chunks = np.divmod(np.asarray(codes, dtype=np.int64), self.stride)
        return seqs, chunks

    def cell_windows(self) -> np.ndarray:
        """int64 ``[C]``: each cell's window length in the length key (``ChunkWindows``'): a
        cell's chunks are its class's windows ``lo, lo + 1, ..``, each ``min(size, length - c *
        step)`` long, and a cell of more than one chunk holds only full windows."""
        values = np.asarray(self.classes.longest, dtype=np.int64)[self.cell_class]
        return self.geometry.windows(values, self.cell_lo)

    def alike_keys(self) -> np.ndarray:
        """int64 ``[N]``: the one window length of a bucket whose cells all have one (what
        ``SortedWindows`` sorts its positions by), -1 where they differ, -2 where the bucket has
        no cells. With chunking the full windows' bucket holds most chunks.

        >>> classes = BucketIndex(np.array([1, 0, 2, 3]), np.array([0, 1, 3, 4]),
        ...     np.array([300, 900, 1200]), np.array([900, 1200]))
        >>> ChunkBuckets.of(classes, 500, 250, 0, lambda v, c: np.array([500])).alike_keys().tolist()
        [-1, 500]
        """
        window = self.cell_windows()  # [C]
        cells = np.searchsorted(  # [N + 1] each bucket's first cell
            self.cell_buckets(), np.arange(len(self.longest) + 1), side="left"
        )
        keys = np.full(len(self.longest), -2, dtype=np.int64)
        held = np.flatnonzero(cells[1:] > cells[:-1])  # buckets with cells
        if len(held):
            at = cells[held]
            lo = np.minimum.reduceat(window, at)
            keys[held] = np.where(lo == np.maximum.reduceat(window, at), lo, -1)
        return keys

    def cell_buckets(self) -> np.ndarray:
        """The chunk bucket of each cell -> int64 ``[C]``."""
        if self.cell_bucket is not None:
            return self.cell_bucket
        return np.searchsorted(self.starts, self.cell_end - 1, side="right") - 1  # none empty

    def window_max(self, class_longest: np.ndarray, chunking: tuple[int, int] | None) -> np.ndarray:
        """The longest window per chunk bucket in another key, from that key's longest length
        per length class (``class_longest``, int64 ``[G]``) -> int64 ``[N]``: a cell's chunks
        ``lo, lo + 1, ...`` are at most ``min(size, longest - lo * step)`` long in a key chunked
        ``(size, step)`` (later windows only shorter), the whole length in a key not chunked.

        >>> classes = BucketIndex(np.array([1, 0, 2, 3]), np.array([0, 1, 3, 4]),
        ...     np.array([300, 900, 1200]), np.array([900, 1200]))
        >>> cb = ChunkBuckets.of(classes, 500, 250, 0, lambda v, c: np.array([500]))
        >>> cb.window_max(np.array([30, 95, 120]), (50, 25)).tolist()  # text at 1/10 the rate
        [45, 50]
        >>> cb.window_max(np.array([30, 95, 120]), None).tolist()  # not chunked: whole
        [120, 120]
        """
        top = np.asarray(class_longest, dtype=np.int64)[self.cell_class]  # [C]
        if chunking is not None:
            size, step = chunking
            top = np.clip(np.minimum(size, top - self.cell_lo * step), 0, None)
        out = np.zeros(len(self.longest), dtype=np.int64)
        np.maximum.at(out, self.cell_buckets(), top)
        return out

    def class_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """Per length class its cells' buckets and widths, padded -> (bucket int64 ``[G, R]``,
        width int64 ``[G, R]``; width 0 where a class has fewer cells): what one sequence of the
        class adds to each chunk bucket (``file_chunk_counts``)."""
        n_classes = len(self.classes.longest)
        bucket = self.cell_buckets()  # [C]
        order = np.argsort(self.cell_class, kind="stable")
        g = self.cell_class[order]
        slot = np.arange(len(g)) - np.searchsorted(g, g, side="left")  # the cell's place in g
        r = int(slot.max(initial=-1)) + 1
        out_bucket = np.zeros((n_classes, max(r, 1)), dtype=np.int64)
        out_width = np.zeros((n_classes, max(r, 1)), dtype=np.int64)
        out_bucket[g, slot] = bucket[order]
        out_width[g, slot] = self.cell_width[order]
        return out_bucket, out_width

    def codes_of(self, seqs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk of the admitted sequences ``seqs`` (their class values ``lengths``),
        sequence after sequence -> (codes int64, window lengths int64): what ``files`` ranks
        draw from their own files."""
        lengths = np.asarray(lengths, dtype=np.int64)
        g = np.searchsorted(np.asarray(self.classes.longest, dtype=np.int64), lengths)
        per = self.chunks_per_class[g]  # [s]
        ends = np.cumsum(per)
        chunk = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(
            ends - per, per
        )
        window = self.geometry.windows(np.repeat(lengths, per), chunk)
        return np.repeat(np.asarray(seqs, np.int64), per) * self.stride + chunk, window

    @property
    def chunks_per_class(self) -> np.ndarray:
        """Chunks of one sequence of each length class -> int64 ``[G]``."""
        per = np.zeros(len(self.classes.longest), dtype=np.int64)
        np.add.at(per, self.cell_class, self.cell_width)
        return per


def file_chunk_counts(
    buckets: ChunkBuckets,
    lengths: np.ndarray,
    files: np.ndarray,
    admitted: np.ndarray | None,
    block: int = 1 << 18,
    values: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``distribution="files"``, chunked: admitted chunks per (file, chunk bucket) and admitted
    frames per file -> (int32 while it fits, else int64 ``[F, N]``; int64 ``[F]``), what
    ``BucketIndex.file_counts`` / ``file_frames`` hold for sequences. One pass over the lengths
    in blocks of ``block`` sequences (a node builds it once with the length index): a sequence
    of length class ``g`` adds each of ``g``'s cells' widths to its file's row (``values``: each
    sequence's class value where it is not its length, ``ChunkGeometry``).

    >>> classes = BucketIndex(np.array([1, 0, 2, 3]), np.array([0, 1, 3, 4]),
    ...     np.array([300, 900, 1200]), np.array([900, 1200]))
    >>> cb = ChunkBuckets.of(classes, 500, 250, 0, lambda v, c: np.array([500]))
    >>> lengths, files = np.array([900, 300, 900, 1200]), np.array([0, 2, 4])
    >>> counts, frames = file_chunk_counts(cb, lengths, files, None)
    >>> counts.tolist(), frames.tolist()  # file 0: lengths 900 and 300; file 1: 900 and 1200
    ([[4, 2], [4, 5]], [1200, 2100])
    """
    n_files, n_buckets = len(files) - 1, len(buckets.counts)
    cell_bucket, cell_width = buckets.class_cells()  # [G, R]
    longest = np.asarray(buckets.classes.longest, dtype=np.int64)
    counts = np.zeros(n_files * n_buckets, dtype=np.int64)
    frames = np.zeros(n_files, dtype=np.int64)
    for a in range(0, len(lengths), block):
        here = np.asarray(lengths[a : a + block], dtype=np.int64)
        value = here if values is None else np.asarray(values[a : a + block], dtype=np.int64)
        seqs = np.arange(a, a + len(here), dtype=np.int64)
        if admitted is not None:
            keep = admitted[a : a + block]
            here, value, seqs = here[keep], value[keep], seqs[keep]
        if not len(here):
            continue
        f = np.searchsorted(files, seqs, side="right") - 1
        g = np.searchsorted(longest, value)
        frames += np.bincount(f, weights=here, minlength=n_files).astype(np.int64)
        for j in range(cell_bucket.shape[1]):
            width = cell_width[g, j]
            counts += np.bincount(
                f * n_buckets + cell_bucket[g, j], weights=width, minlength=len(counts)
            ).astype(np.int64)
    table = counts.reshape(n_files, n_buckets)
    if int(table.max(initial=0)) < 2**31:
        table = table.astype(np.int32)
    return table, frames


class ChunkWindows:
    """Window length of coded chunks in the length key (``window[codes]``): what
    ``SortedWindows`` sorts a bucket's window of batches by (``chunk_spans``' arithmetic)."""

    def __init__(self, buckets: ChunkBuckets, lengths: np.ndarray, key: str) -> None:
        self.buckets, self.lengths, self.key = buckets, lengths, key

    def __getitem__(self, codes: np.ndarray) -> np.ndarray:
        seqs, chunks = self.buckets.split(codes)
        return window_lengths(self.buckets, self.key, np.asarray(self.lengths[seqs]), chunks)


def window_lengths(
    buckets: ChunkBuckets, key: str, whole: np.ndarray, chunks: np.ndarray
) -> np.ndarray:
    """Length in ``key`` (the length key) of chunk ``chunks`` of sequences of class values
    ``whole`` (chunked length key: their lengths) -> int64."""
    return buckets.geometry.windows(whole, chunks)


class LazyChunkTable(ChunkTable):
    """A ``ChunkTable`` whose per-sequence arrays are made when first read: the loader needs only
    ``spec`` (the windows a worker cuts), the audit and checks read the rest (O(n), opt-in), and
    planning reads none of it.

    >>> t = LazyChunkTable({"x": (4, 2)}, lambda: chunk_table(
    ...     {"x": np.array([5, 1])}, {"x": (4, 2)}, 0, np.array([True, True])))
    >>> t.spec, t.num_units
    ({'x': (4, 2)}, 4)
    """

    def __init__(self, spec: dict[str, tuple[int, int]], build: Callable[[], ChunkTable]):
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "_build", build)
        object.__setattr__(self, "_table", None)

    def __getattr__(self, name: str) -> object:
        if name not in ("first", "whole", "counts"):
            raise AttributeError(name)
        table = self.__dict__["_table"]
        if table is None:
            table = self.__dict__["_build"]()
            object.__setattr__(self, "_table", table)
        return getattr(table, name)


@dataclass(frozen=True)
class _Build:
    """``chunk_table`` of the admitted sequences (``mask``, None: all), when called: a plain
    object rather than a closure, so a planner's ``chunks`` pickles."""

    lengths: Mapping[str, np.ndarray]
    spec: ChunkSpec
    min_chunk_size: int | Mapping[str, int]
    mask: np.ndarray | None
    tags: Sequence[str] | None
    origin: str

    def __call__(self) -> ChunkTable:
        n = len(next(iter(self.lengths.values())))
        keep = np.ones(n, dtype=bool) if self.mask is None else self.mask
        return chunk_table(
            self.lengths, self.spec, self.min_chunk_size, keep, self.tags, self.origin
        )


def lazy_chunk_table(
    lengths: Mapping[str, np.ndarray],
    spec: ChunkSpec,
    resolved: dict[str, tuple[int, int]],
    min_chunk_size: int | Mapping[str, int],
    mask: np.ndarray | None,
    tags: Sequence[str] | None,
    origin: str,
) -> LazyChunkTable:
    """The planner's ``chunks``: ``resolved`` at once, ``chunk_table`` of the admitted
    sequences (``mask``, None: all) when its arrays are read."""
    return LazyChunkTable(resolved, _Build(lengths, spec, min_chunk_size, mask, tags, origin))
