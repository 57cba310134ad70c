"""A sub-epoch's batches in plan order, as a short table of per-bucket runs (indexed planning).

With histogram batching (``seqloader.plan.indexed.histogram``) bucket ``b`` of a sub-epoch holds ``c_b``
sequences in ``ceil(c_b / k_b)`` batches: batch ``j`` is positions ``[j*k_b, min((j+1)*k_b, c_b))``
of the bucket's (keyed, random) member list. An ordering only decides in which order those
``(bucket, j)`` batches come, and it does so in *segments*, runs of consecutive batches of one
bucket: a few thousand rows for 10^8 sequences. Any batch's bucket, index, size and the number
of sequences before it follow by ``searchsorted`` on the table, without listing the batches.

Orderings (``indexed`` planning):

- ``buckets:N`` (``bucket_runs``): per bucket, runs of ``group`` (the world size the epoch
  starts with) full batches, so one step of all ranks is one bucket. What is left of each bucket
  (fewer than ``group`` full batches and the short last one) forms a pool, longest bucket first,
  cut into runs of ``group`` batches. All full runs are shuffled with the epoch's stream; the
  pool's incomplete run comes last (the last round, where ``uneven`` applies).
- ``laplace`` (``laplace_bins``): the table's buckets are runs of buckets
  (``seqloader.plan.indexed.histogram.row_runs``: the sub-epoch's buckets laid end to end, cut
  where the batch size falls, so one short batch per fall rather than per bucket; ``top`` maps
  a run to its longest bucket). Each run's batches are spread evenly over the ``B`` bins
  (bin ``i`` gets batches ``[i*nb//B, (i+1)*nb//B)``); bins come in order, and within a bin the
  runs ascend in even bins and descend in odd ones: lengths rise and fall across the epoch,
  and every bin holds a random part of every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError


@dataclass(frozen=True)
class BatchTable:
    """Batches in plan order: segment ``s`` is batches ``first[s] .. first[s] + count[s] - 1``
    of bucket ``bucket[s]``. ``counts``/``sizes``: sequences per bucket in the sub-epoch and per
    full batch of it, int64 ``[N]`` (sizes >= 1). ``top``: where the table's buckets are runs
    of buckets (``laplace``: ``histogram.cut_runs``), each run's longest bucket ``[N]``, whose
    cost its batches are planned at (None: the table's buckets are the planner's)."""

    counts: np.ndarray
    sizes: np.ndarray
    bucket: np.ndarray  # int64 [S]
    first: np.ndarray  # int64 [S]
    count: np.ndarray  # int64 [S]
    top: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        counts: np.ndarray,
        sizes: np.ndarray,
        bucket: np.ndarray,
        first: np.ndarray,
        count: np.ndarray,
        top: np.ndarray | None = None,
    ) -> BatchTable:
        keep = count > 0
        return cls(
            counts,
            sizes,
            bucket[keep].astype(np.int64),
            first[keep].astype(np.int64),
            count[keep].astype(np.int64),
            top,
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_batch_end", np.cumsum(self.count))
        seqs = self.seqs_through(self.bucket, self.first + self.count)
        seqs -= self.seqs_through(self.bucket, self.first)
        object.__setattr__(self, "_seq_end", np.cumsum(seqs))

    @property
    def batch_end(self) -> np.ndarray:
        return self._batch_end  # type: ignore[attr-defined]

    @property
    def seq_end(self) -> np.ndarray:
        return self._seq_end  # type: ignore[attr-defined]

    @property
    def num_batches(self) -> int:
        return int(self.batch_end[-1]) if len(self.batch_end) else 0

    @property
    def num_seqs(self) -> int:
        return int(self.seq_end[-1]) if len(self.seq_end) else 0

    def unit_costs(self, bucket_costs: np.ndarray) -> np.ndarray:
        """The planner's per-bucket costs as per table bucket (a run costs its longest bucket's)."""
        costs = np.asarray(bucket_costs)
        return costs if self.top is None else costs[self.top]

    def seqs_through(self, bucket: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Sequences in batches ``0 .. j-1`` of ``bucket`` -> int64 (same shape)."""
        return np.minimum(j * self.sizes[bucket], self.counts[bucket])

    def locate(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, batch index in the bucket) of plan batches ``g`` (int64 array)."""
        s = np.searchsorted(self.batch_end, g, side="right")
        before = self.batch_end[s] - self.count[s]
        return self.bucket[s], self.first[s] + (g - before)

    def batch_sizes(self, g: np.ndarray) -> np.ndarray:
        b, j = self.locate(g)
        return self.seqs_through(b, j + 1) - self.seqs_through(b, j)

    def seqs_before(self, g: int) -> int:
        """Sequences in plan batches ``0 .. g-1``."""
        if g <= 0:
            return 0
        if g >= self.num_batches:
            return self.num_seqs
        s = int(np.searchsorted(self.batch_end, g, side="right"))
        done = int(self.seq_end[s - 1]) if s else 0
        b, first = self.bucket[s : s + 1], self.first[s : s + 1]
        j = first + (g - (int(self.batch_end[s]) - int(self.count[s])))
        return done + int((self.seqs_through(b, j) - self.seqs_through(b, first))[0])

    def batch_at(self, seqs: int, what: str = "start") -> int:
        """The plan batch that begins after ``seqs`` sequences of the order; an ``OptionError``
        when ``seqs`` is not at a batch boundary (positions of indexed plans always are)."""
        total = self.num_seqs
        if not 0 <= seqs <= total:
            raise OptionError(f"{what}: got {seqs}, expected a sequence position 0..{total}")
        if seqs == total:
            return self.num_batches
        s = int(np.searchsorted(self.seq_end, seqs, side="right"))
        done = int(self.seq_end[s - 1]) if s else 0
        b, first = int(self.bucket[s]), int(self.first[s])
        into = seqs - done + min(first * int(self.sizes[b]), int(self.counts[b]))
        j, rest = divmod(into, int(self.sizes[b]))
        if rest:
            raise OptionError(
                f"{what}: got {seqs}, which is not at a batch boundary of the indexed plan (it "
                "falls inside a batch); the position belongs to another plan"
            )
        before = int(self.batch_end[s]) - int(self.count[s])
        return before + j - first


def batches_per_bucket(counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``ceil(counts / sizes)`` -> int64 ``[N]``."""
    return -(-counts // sizes)


def bucket_runs(
    counts: np.ndarray, sizes: np.ndarray, group: int, rng: np.random.Generator
) -> BatchTable:
    """``buckets:N``: runs of ``group`` batches of one bucket, shuffled; leftovers pooled (see
    the module doc)."""
    n_buckets = len(counts)
    nb = batches_per_bucket(counts, sizes)
    runs = (counts // sizes) // group  # [N] full runs per bucket
    main_bucket = np.repeat(np.arange(n_buckets, dtype=np.int64), runs)
    main_first = (np.arange(len(main_bucket)) - np.repeat(np.cumsum(runs) - runs, runs)) * group
    left = nb - runs * group  # [N] pooled batches per bucket
    desc = np.arange(n_buckets - 1, -1, -1, dtype=np.int64)  # the pool: longest bucket first
    pool_bucket = np.repeat(desc, left[desc])
    pool_first = np.repeat(runs[desc] * group, left[desc])
    pool_first += np.arange(len(pool_bucket)) - np.repeat(
        np.cumsum(left[desc]) - left[desc], left[desc]
    )
    n_main, n_pool = len(main_bucket), len(pool_bucket)
    full_pool = n_pool // group
    order = rng.permutation(n_main + full_pool).astype(np.int64)  # the full runs, shuffled
    # every run as (first segment, segment count): main runs are one segment of `group` batches,
    # pool runs `group` segments of one batch
    run_first = np.concatenate([np.arange(n_main), n_main + np.arange(full_pool) * group])
    run_len = np.concatenate([np.ones(n_main, np.int64), np.full(full_pool, group, np.int64)])
    tail = n_pool - full_pool * group
    run_first = np.append(run_first[order], n_main + full_pool * group).astype(np.int64)
    run_len = np.append(run_len[order], tail).astype(np.int64)
    seg = np.repeat(run_first - (np.cumsum(run_len) - run_len), run_len)
    seg += np.arange(int(run_len.sum()), dtype=np.int64)
    bucket = np.concatenate([main_bucket, pool_bucket])[seg]
    first = np.concatenate([main_first, pool_first])[seg]
    count = np.concatenate([np.full(n_main, group, np.int64), np.ones(n_pool, np.int64)])[seg]
    return BatchTable.of(counts, sizes, bucket, first, count)


def laplace_bins(
    counts: np.ndarray, sizes: np.ndarray, bins: int, top: np.ndarray | None = None
) -> BatchTable:
    """``laplace``: every bucket's batches spread over ``bins`` bins; buckets ascending in even
    bins, descending in odd ones (see the module doc). ``top``: ``BatchTable.top``."""
    n_buckets = len(counts)
    nb = batches_per_bucket(counts, sizes)  # [N]
    i = np.arange(bins + 1, dtype=np.int64)[:, None]  # [B+1, 1]
    edges = (i * nb[None, :]) // bins  # [B+1, N] first batch of each bin
    first, count = edges[:-1], np.diff(edges, axis=0)  # [B, N]
    bucket = np.broadcast_to(np.arange(n_buckets, dtype=np.int64), first.shape).copy()
    odd = np.arange(bins) % 2 == 1
    for a in (first, count, bucket):
        a[odd] = a[odd, ::-1]
    return BatchTable.of(counts, sizes, bucket.ravel(), first.ravel(), count.ravel(), top)
