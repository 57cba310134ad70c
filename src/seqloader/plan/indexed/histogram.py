"""Histogram batching: batches of a fixed size per length bucket, known from counts alone.

Greedy batching of an order is sequential: where batch ``j`` starts depends on every sequence
before it. Indexed planning (``seqloader.plan.indexed.planner``) instead batches each length bucket in
batches of one size, ``k_b = min(max_seqs, budget // cost(longest length in bucket b))``: every
batch of the bucket fits its limits whatever lengths it draws, and bucket ``b`` with ``c``
sequences has ``ceil(c / k_b)`` batches, the last one short. So batch boundaries, step counts and
who gets what follow from per-bucket counts; members are drawn only where needed.

``BucketIndex`` is what that needs of the corpus, built once per corpus and node (by
``build_bucket_index``, in chunks, no copy of the lengths) and memory-mapped by every rank: the
admitted sequences grouped by bucket (``uint32`` while indices fit), the longest length per bucket
and, for ``distribution="files"``, the per-(file, bucket) counts and per-file frames.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from seqloader.parts import part_of
from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.cost import BatchCost

_CHUNK = 1 << 20  # sequences per chunk: its temporaries stay in cache (2.6x faster than 2^22 here)


def build_bucket_index(
    lengths: np.ndarray,
    edges: np.ndarray,
    admitted: np.ndarray | None = None,
    files: np.ndarray | None = None,
) -> BucketIndex:
    """Group the admitted sequences (bool mask ``[n]``, None: all) by bucket (``edges``: bucket of
    length L = number of edges <= L), in chunks: peak memory is the output plus a few chunks.
    ``files``: int64 ``[F + 1]`` file bounds, for the per-file tables.

    Two passes over the lengths. The first counts: where lengths are small non-negative
    integers (the usual case) a histogram of the admitted lengths gives every bucket's count and
    longest length at once, and a table ``bucket of length L`` replaces a binary search per
    sequence. The second places each chunk's sequences, grouped by bucket with a stable counting
    sort (ascending within a bucket), straight into their bucket's slice."""
    n, n_buckets = len(lengths), len(edges) + 1
    index_dtype = np.uint32 if n < 2**32 else np.int64
    table = _bucket_table(lengths, edges)
    counts, longest = _count(lengths, edges, admitted, table)
    starts = np.zeros(n_buckets + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    members = np.empty(int(starts[-1]), dtype=index_dtype)
    at = starts[:-1].copy()  # [N] next free slot of each bucket
    n_files = 0 if files is None else len(files) - 1
    count_dtype = np.int32 if n < 2**31 else np.int64  # half the node file; a column at a time
    file_counts = np.zeros((n_files, n_buckets), count_dtype) if files is not None else None
    file_frames = np.zeros(n_files, dtype=np.int64) if files is not None else None
    for a, part in _bucket_chunks(lengths, edges, admitted, table):
        order = np.argsort(part, kind="stable")  # grouped by bucket, ascending within
        here = np.bincount(part, minlength=n_buckets + 1)[:n_buckets]  # [N]
        first = np.zeros(n_buckets + 1, dtype=np.int64)
        np.cumsum(here, out=first[1:])
        for b in np.flatnonzero(here).tolist():
            ids = order[first[b] : first[b + 1]]
            members[at[b] : at[b] + len(ids)] = ids + a
            at[b] += len(ids)
        if file_counts is not None and file_frames is not None and files is not None:
            chunk_lengths = np.asarray(lengths[a : a + len(part)])
            _count_files(files, a, part, chunk_lengths, n_buckets, file_counts, file_frames)
    if longest is None:
        longest = _longest_by_search(lengths, edges, admitted, members, starts)
    table_out = file_counts
    if (
        table_out is not None
        and table_out.dtype != np.int32
        and int(table_out.max(initial=0)) < 2**31
    ):
        table_out = table_out.astype(np.int32)
    return BucketIndex(
        members, starts, longest, np.asarray(edges, np.int64), table_out, file_frames
    )


#: lengths up to this use a table "bucket of length L" and a length histogram (int64 each entry)
_TABLE_LENGTHS = 1 << 22


def _bucket_table(lengths: np.ndarray, edges: np.ndarray) -> np.ndarray | None:
    """``table[L]`` = bucket of length ``L`` for every ``0 <= L <= max(lengths)`` (uint8/uint16),
    or None where lengths are negative or too long for a table (then binary search)."""
    if len(lengths) == 0:
        return None
    lo = min(int(np.min(lengths[a : a + _CHUNK])) for a in range(0, len(lengths), _CHUNK))
    hi = max(int(np.max(lengths[a : a + _CHUNK])) for a in range(0, len(lengths), _CHUNK))
    if lo < 0 or hi >= _TABLE_LENGTHS:
        return None
    dtype = _part_dtype(len(edges) + 1)
    return np.searchsorted(edges, np.arange(hi + 1), side="right").astype(dtype)


def _part_dtype(n_buckets: int) -> type:
    return np.uint8 if n_buckets < 255 else np.uint16 if n_buckets < 65535 else np.int64


def _count(
    lengths: np.ndarray, edges: np.ndarray, admitted: np.ndarray | None, table: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(admitted sequences per bucket int64 ``[N]``, longest admitted length per bucket int64
    ``[N]`` or None when it is left to the placing pass)."""
    n_buckets = len(edges) + 1
    if table is None:
        counts = np.zeros(n_buckets + 1, dtype=np.int64)  # the last: not admitted
        for _, part in _bucket_chunks(lengths, edges, admitted, None):
            counts += np.bincount(part, minlength=n_buckets + 1)
        return counts[:-1], None
    hist = np.zeros(len(table), dtype=np.int64)  # admitted sequences per length
    for a in range(0, len(lengths), _CHUNK):
        chunk = np.asarray(lengths[a : a + _CHUNK])
        if admitted is not None:
            chunk = chunk[admitted[a : a + _CHUNK]]
        hist += np.bincount(chunk, minlength=len(table))
    buckets = np.arange(n_buckets)
    lo = np.searchsorted(table, buckets, side="left")  # bucket b: lengths [lo[b], hi[b])
    hi = np.searchsorted(table, buckets, side="right")
    below = np.zeros(len(hist) + 1, dtype=np.int64)
    np.cumsum(hist, out=below[1:])
    counts = below[hi] - below[lo]
    present = np.flatnonzero(hist)  # lengths that occur, ascending
    last = np.searchsorted(present, hi, side="left") - 1  # the longest present below hi[b]
    longest = np.where(counts > 0, present[np.maximum(last, 0)] if len(present) else 0, 0)
    return counts, longest.astype(np.int64)


def _longest_by_search(
    lengths: np.ndarray,
    edges: np.ndarray,
    admitted: np.ndarray | None,
    members: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """The longest admitted length per bucket, from the placed members (no table)."""
    longest = np.zeros(len(edges) + 1, dtype=np.int64)
    for b in range(len(longest)):
        for a in range(int(starts[b]), int(starts[b + 1]), _CHUNK):
            ids = members[a : min(int(starts[b + 1]), a + _CHUNK)]
            longest[b] = max(int(longest[b]), int(np.asarray(lengths)[ids].max()))
    return longest


def _count_files(
    files: np.ndarray,
    a: int,
    part: np.ndarray,
    chunk_lengths: np.ndarray,
    n_buckets: int,
    file_counts: np.ndarray,
    file_frames: np.ndarray,
) -> None:
    """Add a chunk's admitted sequences (``part`` ``N`` where not admitted) to the per-(file,
    bucket) counts and per-file frames. The chunk covers files ``f0..f1``, a range: each
    sequence's file comes from repeating the file ids by their sizes inside the chunk."""
    k = len(part)
    f0, f1 = (int(f) for f in part_of(files, np.array([a, a + k - 1])))
    bounds = np.clip(files[f0 : f1 + 2], a, a + k) - a
    file_of = np.repeat(np.arange(f1 - f0 + 1), np.diff(bounds))  # [k], relative to f0
    width = n_buckets + 1  # the last column: not admitted
    grid = np.bincount(file_of * width + part, minlength=(f1 - f0 + 1) * width)
    file_counts[f0 : f1 + 1] += grid.reshape(f1 - f0 + 1, width)[:, :n_buckets]
    keep = part < n_buckets
    weights = chunk_lengths if bool(keep.all()) else np.where(keep, chunk_lengths, 0)
    file_frames[f0 : f1 + 1] += np.bincount(file_of, weights=weights, minlength=f1 - f0 + 1).astype(
        np.int64
    )


def _bucket_chunks(
    lengths: np.ndarray,
    edges: np.ndarray,
    admitted: np.ndarray | None,
    table: np.ndarray | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """(start, bucket of each sequence of the chunk, ``N`` where not admitted) per chunk."""
    n_buckets = len(edges) + 1
    dtype = _part_dtype(n_buckets)
    for a in range(0, len(lengths), _CHUNK):
        chunk = lengths[a : a + _CHUNK]
        if table is not None:
            part = table[chunk]
        else:
            part = np.searchsorted(edges, chunk, side="right").astype(dtype)
        if admitted is not None:
            part[~admitted[a : a + _CHUNK]] = n_buckets
        yield a, part


def batch_sizes(
    longest: np.ndarray, cost: BatchCost, max_seqs: int | None, budget: int | None
) -> np.ndarray:
    """Sequences per batch of each bucket (``longest``: int64 ``[N]``) -> int64 ``[N]`` >= 1:
    as many as fit ``budget`` (cost units) at the bucket's longest length, at most ``max_seqs``;
    0 for no limit at all (one batch per bucket)."""
    units = np.asarray(cost.units(np.asarray(longest, dtype=np.int64)), dtype=np.int64)
    return sizes_for_units(units, max_seqs, budget)


def sizes_for_units(units: np.ndarray, max_seqs: int | None, budget: int | None) -> np.ndarray:
    """``batch_sizes`` for lengths given by their cost ``units`` (int64 ``[N]``)."""
    n_buckets = len(units)
    cap = np.full(n_buckets, 0 if max_seqs is None else max_seqs, dtype=np.int64)
    if budget is None:
        return cap
    fit = np.full(n_buckets, np.iinfo(np.int64).max, dtype=np.int64)
    np.floor_divide(budget, units, out=fit, where=units > 0)
    if max_seqs is not None:
        fit = np.minimum(fit, max_seqs)
    fit = np.where(units > 0, fit, cap)  # empty sequences: only max_seqs bounds them
    return np.maximum(fit, 0)


def cut_runs(counts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row of ``counts`` (int64 ``[R, N]``: sequences per bucket, e.g. per rank), the row's
    buckets laid end to end, shortest first, cut into runs of batches of one size, as greedy
    batching by count cuts them where the batch size falls: a batch takes the next sequences
    while it holds fewer than the smallest ``sizes`` (int64 ``[N]``, >= 1) of the buckets it
    reaches (0: unbounded). A run is a stretch of full batches of one size and, where the next
    bucket's size is smaller than what the open batch holds, that batch, short, at its end;
    where the open batch fits the next size it starts the next run instead. Where the next size
    is larger (a limit on another key), the open batch fills at its size and the next run
    starts after it. So a row has one short batch
    where the size falls below a batch's fill, and at its end: not one per bucket.

    -> (row, start position in the row, count, size) of each run, int64 ``[U]`` each, row by
    row, runs in position order (they cover each row's positions ``0 .. counts.sum(1)``).

    >>> rows, starts, counts, sizes = cut_runs(np.array([[5, 3, 4]]), np.array([4, 4, 2]))
    >>> starts.tolist(), counts.tolist(), sizes.tolist()
    ([0, 8], [8, 4], [4, 2])
    """
    n_buckets = counts.shape[1]
    if n_buckets == 0:
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(4))
    huge = np.iinfo(np.int64).max
    caps = np.where(sizes > 0, sizes, huge).astype(np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    last = np.where(counts > 0, np.arange(n_buckets, dtype=np.int32), -1)
    np.maximum.accumulate(last, axis=1, out=last)  # each row's last non-empty bucket so far
    # where the open run's size changes: a non-empty bucket after another of another size
    moves = (counts[:, 1:] > 0) & (last[:, :-1] >= 0) & (caps[last[:, :-1]] != caps[1:])
    at = np.flatnonzero(moves.any(axis=0))  # before the buckets where some row's size changes
    first, closes, total = _changes(moves, last, caps, counts, at)
    run = np.flatnonzero(closes)  # the runs that are not empty: row by row, in position order
    rows, starts = run // (len(at) + 1), first.ravel()[run]
    ends = np.append(starts[1:], 0)  # a run ends where its row's next one starts,
    row_end = np.ones(len(rows), dtype=bool)
    row_end[:-1] = rows[1:] != rows[:-1]
    ends[row_end] = total[rows[row_end]]  # a row's last one at the row's end
    runs = ends - starts
    size = caps[last[rows, np.append(at, n_buckets - 1)[run % (len(at) + 1)]]]  # its last bucket's
    size = np.where(size < huge, size, np.maximum(runs, 1))  # unbounded: one batch
    return rows, starts, runs, size


def _changes(
    moves: np.ndarray, last: np.ndarray, caps: np.ndarray, counts: np.ndarray, at: np.ndarray
) -> tuple[np.ndarray, ...]:
    """``cut_runs``' one sequential step, bucket after bucket, every row at once: where a row's
    batch size changes (``moves[:, b]`` for bucket ``b + 1``; only the buckets ``at`` visited)
    the open run closes where its open batch's fill says, and that fill depends on where the run
    started, the previous change's answer -> (the first position of the run each change closes,
    then of each row's last run, int64 ``[R, len(at) + 1]``; which of them are not empty, bool,
    alike; each row's positions ``[R]``)."""
    n_rows = len(counts)
    start = np.zeros(n_rows, dtype=np.int64)  # each row's open run's first position
    closes = np.zeros((n_rows, len(at) + 1), dtype=bool)
    # each changing bucket's first position, then each row's end; a column, once read, holds
    # the first position of the run its change closes (one matrix, not two)
    first = np.add.reduceat(counts, np.append(0, at + 1), axis=1)
    np.cumsum(first, axis=1, out=first)
    for i, b in enumerate(at.tolist()):
        pos = first[:, i].copy()
        first[:, i] = start
        fill = pos - start  # the open run's positions so far
        s, k = caps[last[:, b]], caps[b + 1]  # its batch size and the next
        held = fill % s  # its open batch's fill
        # falling: a batch that fits the new size moves along, a larger one closes short;
        # rising: the open batch fills at its size (from the bucket), the new run after it
        step = np.where(
            s > k, np.where(held <= k, -held, 0), np.minimum(-fill % s, counts[:, b + 1])
        )
        closes[:, i] = moves[:, b] & (step > -fill)  # the next run starts past this one's start
        np.copyto(start, pos + step, where=moves[:, b])
    total = first[:, -1].copy()
    first[:, -1], closes[:, -1] = start, total > start
    return first, closes, total


def length_counts(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct lengths ascending int64 ``[G]``, sequences of each int64 ``[G]``), in chunks (no
    copy of the lengths): a histogram where lengths are small non-negative integers, else
    ``np.unique`` per chunk, merged."""
    if len(lengths) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    lo = min(int(np.min(lengths[a : a + _CHUNK])) for a in range(0, len(lengths), _CHUNK))
    hi = max(int(np.max(lengths[a : a + _CHUNK])) for a in range(0, len(lengths), _CHUNK))
    if lo >= 0 and hi < _TABLE_LENGTHS:
        hist = np.zeros(hi + 1, dtype=np.int64)
        for a in range(0, len(lengths), _CHUNK):
            hist += np.bincount(np.asarray(lengths[a : a + _CHUNK]), minlength=hi + 1)
        values = np.flatnonzero(hist)
        return values.astype(np.int64), hist[values]
    chunks = range(0, len(lengths), _CHUNK)
    parts = [np.unique(lengths[a : a + _CHUNK], return_counts=True) for a in chunks]
    values = np.concatenate([v for v, _ in parts]).astype(np.int64)
    counts = np.concatenate([c for _, c in parts]).astype(np.int64)
    uniq, inverse = np.unique(values, return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)


def batching_edges(
    values: np.ndarray,
    counts: np.ndarray,
    units: np.ndarray,
    max_seqs: int | None,
    budget: int | None,
    coarse: np.ndarray,
) -> np.ndarray:
    """Bucket edges for histogram batching from the admitted lengths' histogram (``values``
    ascending, ``counts``, ``units``: the cost units of each value) -> int64 edges ascending.

    A bucket's batches hold ``k_b = min(max_seqs, budget // cost(longest))`` sequences, so a
    bucket whose lengths all give one ``k`` batches them as densely as any batching of those
    lengths can, and costs only its short last batch (half a batch on average) beyond that.
    The buckets are the runs of lengths with one ``k``, cut at every ``coarse`` edge as well
    (``buckets:N``'s buckets, or ``laplace``'s cost buckets, which matter when ``k`` is one
    everywhere); a run is merged into the next, longer one while that costs fewer batches (at the
    longer run's ``k``) than the short batch it saves."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    k = sizes_for_units(units, max_seqs, budget)  # [G] per distinct length
    crossing = np.searchsorted(coarse, values, side="right")  # coarse bucket of each value
    new = np.ones(len(values), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (crossing[1:] != crossing[:-1])
    starts = np.flatnonzero(new)  # first value of each run
    run_counts = np.add.reduceat(counts, starts).tolist()
    run_k = k[np.append(starts[1:], len(values)) - 1].tolist()  # k at each run's longest
    forced = (crossing[starts[1:]] != crossing[starts[1:] - 1]).tolist()
    keep = [0]
    held, held_k = run_counts[0], run_k[0]
    for i in range(1, len(starts)):
        nxt = run_k[i]
        extra = held / nxt - held / held_k if nxt > 0 and held_k > 0 else 0.0
        if not forced[i - 1] and extra < 0.5:  # merging costs less than the short batch
            held, held_k = held + run_counts[i], nxt
            continue
        keep.append(i)
        held, held_k = run_counts[i], nxt
    return values[starts[keep[1:]]].astype(np.int64)


def row_runs(counts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """One sub-epoch's buckets (``counts``, ``sizes``: int64 ``[N]``) laid end to end and cut
    into runs of one batch size (``cut_runs``), each run then batched as one bucket (``laplace``):
    one short batch where the size falls below a batch's fill, not one per bucket.

    -> (sequences per run, batch size per run, the run's first position in the laid-out buckets,
    the run's longest bucket, whose cost its batches are planned at), int64 ``[U]`` each.

    >>> counts, sizes, starts, top = row_runs(np.array([5, 3, 4]), np.array([4, 4, 2]))
    >>> counts.tolist(), sizes.tolist(), starts.tolist(), top.tolist()
    ([8, 4], [4, 2], [0, 8], [1, 2])
    """
    counts = np.asarray(counts, dtype=np.int64)
    _, starts, runs, size = cut_runs(counts[None, :], np.asarray(sizes, dtype=np.int64))
    ends = np.cumsum(counts)  # each bucket's end in the laid-out row
    top = np.searchsorted(ends, starts + runs - 1, side="right")  # bucket of the run's last
    return runs, size, starts, top.astype(np.int64)


def cut_packed(
    counts: np.ndarray, weights: np.ndarray, budget: int, max_seqs: int | None
) -> tuple[np.ndarray, ...]:
    """``cut_runs`` for a limit on a batch's SUM of lengths (``batch_cost="packed"``,
    ``max_packed_frames``): each row's buckets laid end to end, shortest first, batched greedily
    by an upper bound of each batch's sum, a member of bucket ``b`` counted at its bucket's
    longest length (``weights`` int64 ``[N]``, in the limit's units): a batch takes the next
    sequences while that bound stays within ``budget`` and it holds at most ``max_seqs``. So a
    batch that reaches into the next bucket keeps what the shorter members left free, where
    ``cut_runs`` sizes it all at the longer bucket's ``k``, and any sequences of a batch, in any
    order, fit the limit (what a resumed suffix or a split piece takes is a part of a batch).

    Within a bucket the batches after the first hold ``k_b = min(max_seqs, budget // w_b)``,
    one run; the batch that a bucket's last members open and the next buckets' first members
    fill is a run of its own (one batch of its count). -> as ``cut_runs``: (row, start, count,
    size) of each run, int64 ``[U]`` each, row by row in position order.

    >>> rows, starts, counts, sizes = cut_packed(np.array([[6, 3, 4]]), np.array([2, 3, 5]), 10, None)
    >>> starts.tolist(), counts.tolist(), sizes.tolist()
    ([0, 5, 8, 10, 12], [5, 3, 2, 2, 1], [5, 3, 2, 2, 1])
    """
    counts = np.asarray(counts, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.int64)
    walk = _PackedWalk(counts.shape[0], budget, _UNBOUNDED if max_seqs is None else int(max_seqs))
    for b in range(counts.shape[1]):
        walk.bucket(b, counts[:, b], int(weights[b]))
    return walk.runs()


#: ``cut_packed``'s "no limit" (on the sequences of a batch, or the room of a zero weight): far
#: above any count, with room to add counts to it
_UNBOUNDED = np.iinfo(np.int64).max // 4


class _PackedWalk:
    """``cut_packed``'s walk over the buckets, all rows at once: each row's position so far and
    its open batch (first position, sequences, bound of its sum; 0 sequences: none open), and
    the runs closed so far."""

    def __init__(self, n_rows: int, budget: int, cap: int) -> None:
        self.budget, self.cap = budget, cap
        self.pos = np.zeros(n_rows, dtype=np.int64)
        self.start = np.zeros(n_rows, dtype=np.int64)
        self.held = np.zeros(n_rows, dtype=np.int64)
        self.bound = np.zeros(n_rows, dtype=np.int64)
        self.out: list[tuple[np.ndarray, ...]] = []

    def bucket(self, b: int, c: np.ndarray, w: int) -> None:
        """Bucket ``b`` (``c``: its count in each row, ``w``: its longest length): the open
        batches take what fits, the rest is batched by ``k_b``."""
        here = np.flatnonzero(c > 0)
        if not len(here):
            return
        k = min(self.cap, self.budget // w) if w > 0 else self.cap
        if k < 1:
            raise ValueError(  # the planner refuses such a sequence by name before
                f"cut_packed: bucket {b}'s longest length {w} is over the budget {self.budget}"
            )
        cb = c[here]
        take, stays = self._fill_open(here, cb, w)
        fresh = ~stays  # the rest of the bucket: full batches of k, then an open batch
        self._open_rest(
            here[fresh], cb[fresh] - take[fresh], self.pos[here[fresh]] + take[fresh], w, k
        )
        self.pos += c

    def _fill_open(self, here: np.ndarray, cb: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
        """The open batches of rows ``here`` take what fits of the bucket's ``cb`` members: one
        that cannot take them all is full (one batch, a run of its own), one that can stays
        open. -> (members taken, stays open), per row of ``here``."""
        h, f = self.held[here], self.bound[here]
        room = np.minimum((self.budget - f) // w if w > 0 else _UNBOUNDED, self.cap - h)
        take = np.where(h > 0, np.minimum(cb, np.maximum(room, 0)), 0)
        closes = (h > 0) & (take < cb)
        if closes.any():
            rows = here[closes]
            whole = h[closes] + take[closes]
            self.out.append((rows, self.start[rows], whole, whole))
        stays = (h > 0) & ~closes
        self.held[here[stays]] += cb[stays]
        self.bound[here[stays]] += cb[stays] * w
        return take, stays

    def _open_rest(
        self, rows: np.ndarray, rest: np.ndarray, at: np.ndarray, w: int, k: int
    ) -> None:
        """Rows ``rows``' ``rest`` members from position ``at``: full batches of ``k`` (one run),
        then an open batch of what is left."""
        full = (rest // k) * k
        some = full > 0
        if some.any():
            self.out.append(
                (rows[some], at[some], full[some], np.full(int(some.sum()), k, np.int64))
            )
        self.start[rows] = at + full
        self.held[rows] = rest - full
        self.bound[rows] = (rest - full) * w

    def runs(self) -> tuple[np.ndarray, ...]:
        """The open batches close; -> (row, start, count, size) of each run, row by row in
        position order."""
        rows = np.flatnonzero(self.held > 0)
        out = [*self.out, (rows, self.start[rows], self.held[rows], self.held[rows])]
        empty = np.zeros(0, dtype=np.int64)
        r, s, n, z = (
            np.concatenate([empty, *(o[i] for o in out)]).astype(np.int64) for i in range(4)
        )
        by = np.lexsort((s, r))
        return r[by], s[by], n[by], z[by]


#: ``narrow_edges``: the widest a bucket's lengths may span (longest / shortest) where the sum
#: limit, not ``max_seqs``, bounds its batches
NARROW_SPAN = 1.1


def narrow_edges(
    values: np.ndarray, edges: np.ndarray, budget: int, max_seqs: int | None
) -> np.ndarray:
    """``edges`` (ascending) cut further for ``cut_packed``, which counts each member of a batch
    at its bucket's longest length: a bucket whose occurring lengths (``values``, ascending)
    span more than ``NARROW_SPAN`` and whose batches the sum ``budget`` bounds (fewer than
    ``max_seqs`` of its longest fit) is cut at lengths ``NARROW_SPAN`` apart (each cut at an
    occurring length, so no bucket is empty). ``batching_edges``' buckets are the runs of one
    batch size ``k``, about ``1/k`` wide: those of long sequences (``k`` < 10) are wider, up
    to twice as long at their longest as at their shortest, and a member counted at twice its
    length wastes what a shorter one would fill.

    >>> narrow_edges(np.array([10, 20, 40, 60, 80, 100]), np.array([60]), 200, None).tolist()
    [20, 40, 60, 80, 100]
    """
    values = np.asarray(values, dtype=np.int64)
    edges = np.asarray(edges, dtype=np.int64)
    if not len(values):
        return edges
    bucket = np.searchsorted(edges, values, side="right")  # of each occurring length
    firsts = np.flatnonzero(np.diff(bucket, prepend=-1))
    lasts = np.append(firsts[1:], len(values)) - 1
    cuts = []
    for a, z in zip(values[firsts].tolist(), values[lasts].tolist()):
        bound = budget // z if z > 0 else budget + 1
        if a <= 0 or z <= a * NARROW_SPAN or (max_seqs is not None and bound >= max_seqs):
            continue
        m = int(np.ceil(np.log(z / a) / np.log(NARROW_SPAN)))
        want = np.ceil(a * (z / a) ** (np.arange(1, m) / m))  # m pieces of equal span
        at = np.searchsorted(values, want, side="left")  # the first occurring length >= each
        cuts.append(values[np.minimum(at, len(values) - 1)])
    return np.union1d(edges, np.concatenate([edges[:0], *cuts])).astype(np.int64)
