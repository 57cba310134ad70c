"""``ordering="buckets:N"``: length buckets with synced steps, as a plan order plus batch bounds.

Why an *arrangement* and not just an order: the W batches that W ranks run in one step should come
from the same bucket (no rank waits for another's long batch), and after ``s`` steps all ranks
together must have consumed a prefix of the sub-epoch's order (what a resume position is). Both
hold when the order is a sequence of *runs*: each run is ``group`` greedy batches of one bucket
(``group`` = the world size the epoch starts with), so batch ``k`` goes to rank ``k % W`` and every
step is one run, or part of one.

How a sub-epoch (a random subset of the corpus, W-independent, so ``partition_epoch`` and ``:K``
work as for every ordering) is arranged for ``group`` ranks:

1. Each sequence's bucket comes from its length (``bucket_edges``: ``N`` buckets of about equal
   total cost over the whole admitted corpus).
2. Within a bucket the order is random; it is sorted by length within windows of about
   ``WINDOW_BATCHES`` batches (alternately ascending and descending, as ``laplace``), which
   removes most of the padding left inside a bucket and keeps batches random across epochs.
3. Greedy batches within each bucket; every ``group`` consecutive batches form a run. A bucket's
   last run, incomplete or ending in the bucket's last (short) batch, goes to a *pool*; the pool is sorted by length and batched and cut into
   runs the same way (its runs hold adjacent buckets' leftovers, longest first). The pool's own
   last, incomplete run (its shortest sequences) would be the sub-epoch's last round: with
   ``uneven="split"`` it is re-cut into exactly ``group`` batches of balanced cost (the least
   threshold that needs no more than ``group`` greedy batches; extended back by whole pool runs
   while it has fewer sequences than that), otherwise it stays last and ``uneven`` applies.
4. Full runs are shuffled (the batch order changes every epoch); the incomplete one goes last.

Greedy batching is memoryless, so re-batching any suffix of the order with a break at every run
start reproduces the same batches from the next batch boundary on: that is how a segment that
starts mid-run (an elastic resume to another world size) is planned, with the same runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from seqloader.parts import part_of
from seqloader.plan.batches import BatchList
from seqloader.plan.batching import greedy_bounds
from seqloader.plan.edges import WINDOW_BATCHES, bucket_of
from seqloader.plan.ordering import argsort_by


@dataclass(frozen=True)
class Arrangement:
    """A sub-epoch arranged in runs: ``order`` int64 ``[m]`` (sequence indices), greedy batch
    ``bounds`` int64 ``[n_batches + 1]`` over it, and ``run_starts`` int64 ``[n_runs]`` (positions
    in ``order``; a subset of ``bounds``). Full runs hold ``group`` batches of one bucket (or of the
    pool); only the last run may hold fewer."""

    order: np.ndarray
    bounds: np.ndarray
    run_starts: np.ndarray
    group: int
    pooled: np.ndarray  # bool [n_runs]: a pool run (leftovers of several buckets), not one bucket
    merged: np.ndarray  # int64 [N]: the (merged) bucket each length bucket is batched in

    def batches_from(
        self, start: int, costs: np.ndarray, max_seqs: int | None, budget: int | None
    ) -> BatchList:
        """Greedy batches of ``order[start:]`` with a break at every run start: the arrangement's
        own batches from the first batch boundary at or after ``start`` (greedy is memoryless),
        re-batched before it up to the end of the run that ``start`` cuts."""
        order, bounds = self.order, self.bounds
        tail = order[start:]
        j = int(np.searchsorted(bounds, start, side="left"))
        if j < len(bounds) and bounds[j] == start:
            return BatchList.from_bounds(tail, bounds[j:] - start)
        r = int(np.searchsorted(self.run_starts, start, side="right"))
        run_end = int(self.run_starts[r]) if r < len(self.run_starts) else len(order)
        head = greedy_bounds(costs[order[start:run_end]], max_seqs, budget)  # [h+1]
        rest = bounds[int(np.searchsorted(bounds, run_end)) + 1 :] - start
        return BatchList.from_bounds(tail, np.concatenate([head, rest]).astype(np.int64))

    def batch_runs(self) -> np.ndarray:
        """Run index of each batch -> int64 ``[n_batches]``."""
        return part_of(self.run_starts, self.bounds[:-1])


def arrange(
    seqs: np.ndarray,
    lengths: np.ndarray,
    costs: np.ndarray,
    edges: np.ndarray,
    group: int,
    max_seqs: int | None,
    budget: int | None,
    rng: np.random.Generator,
    balance_tail: bool = False,
) -> Arrangement:
    """Arrange the sub-epoch ``seqs`` (int64 ``[m]``, in random order) in runs of ``group`` batches
    (see the module doc). ``lengths`` and ``costs`` are per sequence index (int64)."""
    if len(seqs) == 0:
        z = np.zeros(0, dtype=np.int64)
        return Arrangement(
            z,
            np.zeros(1, dtype=np.int64),
            z,
            group,
            np.zeros(0, dtype=bool),
            np.arange(len(edges) + 1),
        )
    if max_seqs is None and budget is None:  # no limits: one batch, the order is all there is
        one = np.array([0, len(seqs)], dtype=np.int64)
        return Arrangement(
            seqs, one, one[:1], group, np.ones(1, dtype=bool), np.zeros(len(edges) + 1, np.int64)
        )
    weight = costs if budget is not None else np.ones(len(costs), dtype=np.int64)
    # one batch's worth of weight (max_seqs is set when budget is not: returned above otherwise)
    batch_weight = budget if budget is not None else int(max_seqs or 1)
    original = bucket_of(lengths[seqs], edges)  # [m]
    merged = merge_small_buckets(original, weight[seqs], len(edges) + 1, 2 * group * batch_weight)
    seqs = _sorted_in_windows(seqs, merged[original], lengths, weight, batch_weight)
    bucket = merged[bucket_of(lengths[seqs], edges)]  # [m] non-decreasing
    main_seqs, main_bounds, pool_seqs = _bucket_runs(seqs, bucket, costs, group, max_seqs, budget)
    pool_seqs = pool_seqs[argsort_by(-lengths[pool_seqs])]  # adjacent lengths share pool runs
    pool_bounds = greedy_bounds(costs[pool_seqs], max_seqs, budget)
    if balance_tail:
        pool_bounds = _balance_last_rounds(pool_seqs, pool_bounds, costs, group, max_seqs, budget)
    batches = BatchList.from_bounds(main_seqs, main_bounds).concat(
        BatchList.from_bounds(pool_seqs, pool_bounds)
    )
    n_full = len(batches) // group
    runs = rng.permutation(n_full).astype(np.int64)  # [n_full] the batch order of this epoch
    ids = (runs[:, None] * group + np.arange(group, dtype=np.int64)).ravel()
    ids = np.concatenate([ids, np.arange(n_full * group, len(batches), dtype=np.int64)])
    out = batches.take(ids)
    run_starts = out.bounds[: len(out) : group].copy()
    pooled = np.append(runs >= (len(main_bounds) - 1) // group, True)[: len(run_starts)]
    return Arrangement(out.seqs, out.bounds, run_starts, group, pooled, merged)


def _bucket_runs(
    seqs: np.ndarray,
    bucket: np.ndarray,
    costs: np.ndarray,
    group: int,
    max_seqs: int | None,
    budget: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy batches within each bucket of ``seqs`` (``bucket``: int64 ``[m]``, non-decreasing
    along ``seqs``) in runs of ``group``: (the runs' sequences, their batch bounds, what is left
    for the pool: each bucket's last, incomplete run and its last, short batch)."""
    cuts = np.flatnonzero(np.diff(bucket)) + 1
    starts = np.concatenate([[0], cuts, [len(seqs)]]).tolist()
    run_bounds, pool = [], []
    for a, b in itertools.pairwise(starts):  # one greedy pass per bucket
        gb = greedy_bounds(costs[seqs[a:b]], max_seqs, budget) + a  # [nb+1]
        full = (len(gb) - 2) // group * group  # the last batch is short: always to the pool
        if full:
            run_bounds.append(gb[: full + 1])
        pool.append(seqs[gb[full] : b])
    in_runs = [seqs[int(rb[0]) : int(rb[-1])] for rb in run_bounds]
    main_seqs = np.concatenate(in_runs) if in_runs else np.zeros(0, dtype=np.int64)
    return main_seqs, _join_bounds([rb - rb[0] for rb in run_bounds]), np.concatenate(pool)


def _balance_last_rounds(
    seqs: np.ndarray,
    bounds: np.ndarray,
    costs: np.ndarray,
    group: int,
    max_seqs: int | None,
    budget: int | None,
) -> np.ndarray:
    """The pool's incomplete last run, extended back by whole runs while it has fewer sequences
    than batches needed, re-cut into whole runs of balanced batches (the step count stays
    ``ceil(batches / group)``). Unchanged if even the whole pool is too small."""
    n_batches = len(bounds) - 1
    first = n_batches - n_batches % group  # first batch of the incomplete run
    if first == n_batches:
        return bounds
    rounds = 1
    while len(seqs) - bounds[first] < rounds * group and first >= group:
        first, rounds = first - group, rounds + 1
    if len(seqs) - bounds[first] < rounds * group:
        return bounds
    a = int(bounds[first])
    tail = balanced_bounds(costs[seqs[a:]], rounds * group, max_seqs, budget) + a
    return np.concatenate([bounds[:first], tail])


def balanced_bounds(
    costs: np.ndarray, k: int, max_seqs: int | None, budget: int | None
) -> np.ndarray:
    """Exactly ``k`` contiguous batches over ``costs`` (int64 ``[n]``, ``n >= k``, which fit in at
    most ``k`` batches under ``budget``) whose largest padded cost is as small as greedy batching
    allows: the least threshold ``T`` whose greedy batches number at most ``k``, then halving the
    largest batch while fewer. -> int64 ``[k + 1]``."""
    n = len(costs)
    if budget is None:  # only max_seqs limits: equal counts
        return (np.arange(k + 1, dtype=np.int64) * n) // k
    lo, hi = max(int(costs.max()), 1), budget  # greedy at hi needs <= k batches
    while lo < hi:
        mid = (lo + hi) // 2
        if len(greedy_bounds(costs, max_seqs, mid)) - 1 <= k:
            hi = mid
        else:
            lo = mid + 1
    bounds = greedy_bounds(costs, max_seqs, lo)
    while len(bounds) - 1 < k:
        s = np.diff(bounds)
        j = len(s) - 1 - int(np.argmax(s[::-1]))  # the largest batch, the latest on ties
        bounds = np.insert(bounds, j + 1, bounds[j] + s[j] // 2 + s[j] % 2)
    return bounds.astype(np.int64)


def _join_bounds(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate bounds arrays that each start at 0 -> one bounds array over the joined runs."""
    out, offset = [np.zeros(1, dtype=np.int64)], 0
    for p in parts:
        out.append(p[1:] + offset)
        offset += int(p[-1])
    return np.concatenate(out).astype(np.int64)


def merge_small_buckets(
    bucket: np.ndarray, weight: np.ndarray, n_buckets: int, min_weight: int
) -> np.ndarray:
    """Merge neighbouring length buckets until each holds at least ``min_weight`` (about two runs'
    worth) of this sub-epoch: a smaller bucket could fill no run and would all go to the pool,
    whose order is sorted and so the same every epoch. -> int64 ``[n_buckets]`` merged index of
    each bucket (non-decreasing)."""
    totals = np.bincount(bucket, weights=weight, minlength=n_buckets).tolist()
    out, current, held = [], 0, 0.0
    for total in totals:
        out.append(current)
        held += total
        if held >= min_weight:
            current, held = current + 1, 0.0
    merged = np.asarray(out, dtype=np.int64)
    if held and current:  # the last, too small: joins the one before it
        merged[merged == current] = current - 1
    return merged


def _sorted_in_windows(
    seqs: np.ndarray,
    bucket: np.ndarray,
    lengths: np.ndarray,
    weight: np.ndarray,
    batch_weight: int,
) -> np.ndarray:
    """``seqs`` grouped by ``bucket`` (int64 ``[m]``, per sequence, ascending), random within a
    bucket but sorted by length within windows of about ``WINDOW_BATCHES`` batches' ``weight``,
    alternately ascending and descending."""
    by_bucket = argsort_by(bucket)  # stable: the random order stays within each bucket
    seqs, bucket = seqs[by_bucket], bucket[by_bucket]
    w = weight[seqs]
    before = np.cumsum(w) - w  # [m] weight before each sequence
    first = np.concatenate([[0], np.flatnonzero(np.diff(bucket)) + 1])  # bucket starts
    start_of = np.repeat(first, np.diff(np.append(first, len(seqs))))  # [m]
    window = (before - before[start_of]) // (WINDOW_BATCHES * batch_weight)  # [m]
    major = bucket * (int(window.max()) + 1) + window
    key = lengths[seqs].copy()
    np.negative(key, out=key, where=window % 2 == 1)  # descending in odd windows
    return seqs[argsort_by(key, major)]
