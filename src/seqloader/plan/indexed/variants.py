"""Length variants (planned speed perturbation, ``seqloader.plan.variants``) under indexed planning.

Global planning draws each sequence's variant by a keyed hash of (seed, full epoch, index) and
batches the whole epoch on the drawn lengths: O(n) per rank and epoch. Here a rank plans from
counts, so the draw is made per *class* instead:

- **Classes** (once per planner, O(n F)): the admitted sequences grouped by the tuple of their
  ``F`` variants' length buckets (the buckets cut on the pooled histogram of every variant's
  length). Every member of a class lands in the same bucket for a given variant.
- **Per full epoch** (O(classes)): class ``c`` (``m`` members) turns ``r_c`` (keyed by the seed
  and full epoch) and permutes its members (a keyed bijection ``sigma_c``); the member at
  permuted position ``x`` takes variant ``(x + r_c) mod F``. So each variant holds a known
  count of every class (``m // F`` or one more), and each bucket's full-epoch list is the
  concatenation of its (class, variant) segments: counts per bucket without touching a member.
- **Members** are drawn where a rank asks: bucket position -> the bucket's keyed permutation
  (``MemberDraw``) -> (class, variant, index in the segment) -> ``sigma_c`` -> the sequence. The
  unit a list holds is coded ``sequence * F + variant`` (``VariantCodes``); the plan's batch list
  carries the variant of every slot (``BatchList.variants``), so a worker reads it from its batch
  and computes nothing.

The draw differs from global planning's on purpose: every sequence still takes each variant with
probability ``1 / F`` per full epoch and the draw is a pure function of (seed, full epoch), but
within a class the variants are balanced exactly rather than independent per sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.indexed.bijection import Bijections
from seqloader.plan.indexed.budget import histogram_edges
from seqloader.plan.indexed.histogram import build_bucket_index, length_counts
from seqloader.plan.indexed.plan import MemberDraw
from seqloader.plan.options import PlanOptions
from seqloader.plan.seeding import PURPOSE_VARIANTS, rng_for
from seqloader.plan.variants import LengthVariants

_BLOCK = 1 << 20  # sequences per block of the class pass
_TABLE = 1 << 24  # lengths looked up in a table of buckets below this (else a binary search)
_TURN, _PERMUTE = 2, 3  # the words after the full epoch: each class's turn, its permutation


class VariantCodes:
    """Units ``sequence * count + variant`` <-> (sequences, variants).

    >>> VariantCodes(3).split(np.array([7, 9]))
    (array([2, 3]), array([1, 0]))
    """

    def __init__(self, count: int) -> None:
        self.count = int(count)

    def split(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seqs, variants = np.divmod(np.asarray(codes, dtype=np.int64), self.count)
        return seqs, variants


class VariantLengths:
    """The length of units (codes) in their variant: ``table[code % F, code // F]``."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table  # [F, n]

    def __getitem__(self, codes: np.ndarray) -> np.ndarray:
        seqs, variants = np.divmod(np.asarray(codes, dtype=np.int64), len(self.table))
        return np.asarray(self.table[variants, seqs], dtype=np.int64)

    def __len__(self) -> int:
        return int(np.shape(self.table)[1])


def key_table(variants: LengthVariants, key: str, base: np.ndarray) -> np.ndarray:
    """The length key's lengths per variant ``[F, n]``: the declared ones, or (the key does not
    vary) the source's in every variant (a broadcast view, no copy)."""
    if key in variants.lengths:
        return np.asarray(variants.lengths[key])
    return np.broadcast_to(np.asarray(base), (variants.count, len(base)))


class VariantClasses:
    """The classes of the admitted sequences (see the module doc) and the epoch buckets: ``edges``
    (cut on the pooled histogram of every variant's length, ``histogram_edges``), ``longest`` per
    bucket (of any variant that lands there), ``index`` (members grouped by class: a
    ``BucketIndex`` whose buckets are the classes) and ``buckets`` (int64 ``[C, F]``: the bucket
    of each class's variants).

    >>> table = np.array([[10, 20, 11, 30], [9, 18, 10, 27]])
    >>> vc = VariantClasses(table, None, PlanOptions(ordering="buckets:2", max_frames=60,
    ...                                               planning="indexed"), 60)
    >>> int(vc.epoch(1, 0).counts.sum()), vc.index.counts.sum()
    (4, np.int64(4))
    """

    def __init__(
        self, table: np.ndarray, mask: np.ndarray | None, options: PlanOptions, budget: int | None
    ) -> None:
        self.table, self.count = table, int(np.shape(table)[0])
        values, counts = _pooled_counts(table, mask)
        self.edges = self._edges(options, budget, values, counts)
        n_buckets = len(self.edges) + 1
        bucket = np.searchsorted(self.edges, values, side="right")
        self.longest = np.zeros(n_buckets, dtype=np.int64)
        np.maximum.at(self.longest, bucket, values)
        keys, self.buckets = self._class_keys(table, mask, n_buckets)
        self.index = build_bucket_index(keys, np.arange(1, len(self.buckets)), mask)
        self.sizes = np.asarray(self.index.counts, dtype=np.int64)  # [C] members per class
        self._kept: tuple[tuple[int, int], VariantEpoch] | None = None

    def columns(self, prefix: str) -> dict[str, np.ndarray]:
        """The classes as named arrays (``from_columns`` reads them back): what a node builds
        once into a store that every rank maps (the build is O(n F), the rest of a rank's
        planning O(n / P))."""
        out = {f"{prefix}.{k}": v for k, v in self.index.columns().items()}
        out[f"{prefix}.edges"], out[f"{prefix}.longest"] = self.edges, self.longest
        out[f"{prefix}.buckets"] = np.ascontiguousarray(self.buckets).ravel()
        return out

    @classmethod
    def from_columns(
        cls, table: np.ndarray, columns: Mapping[str, np.ndarray], prefix: str
    ) -> VariantClasses:
        """The classes of ``table`` from ``columns(prefix)``'s arrays (e.g. memory-mapped views,
        not copied): the same classes, nothing rebuilt."""
        self = cls.__new__(cls)
        self.table, self.count = table, int(np.shape(table)[0])
        self.edges = np.asarray(columns[f"{prefix}.edges"])
        self.longest = np.asarray(columns[f"{prefix}.longest"])
        self.buckets = np.asarray(columns[f"{prefix}.buckets"]).reshape(-1, self.count)
        start = len(prefix) + 1
        index = {k[start:]: v for k, v in columns.items() if k.startswith(f"{prefix}.bucket.")}
        self.index = BucketIndex.from_columns(index)
        self.sizes = np.asarray(self.index.counts, dtype=np.int64)
        self._kept = None
        return self

    def _edges(
        self, options: PlanOptions, budget: int | None, values: np.ndarray, counts: np.ndarray
    ) -> np.ndarray:
        """The epoch buckets' edges from the pooled histogram (``histogram_edges``)."""
        return histogram_edges(options, budget, values, counts)

    def _class_keys(
        self, table: np.ndarray, mask: np.ndarray | None, n_buckets: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(each sequence's class int32/int64 ``[n]``, each class's variant buckets ``[C, F]``): a
        class is a tuple of buckets, built a variant at a time: (class so far, next bucket)
        numbered densely among the admitted pairs (tables of ``C * N``, no sort)."""
        n = int(np.shape(table)[1])
        code = np.zeros(n, dtype=np.int32)  # int64 only where the pairs need it
        if not n or (mask is not None and not mask.any()):  # nothing admitted: one empty class
            return code, np.zeros((1, self.count), dtype=np.int64)
        buckets = np.zeros((1, 0), dtype=np.int64)  # one class of no variant yet
        bucket_of = self._bucket_of(table)
        for f in range(self.count):
            span = len(buckets) * n_buckets
            if span >= 2**31 and code.dtype != np.int64:
                code = code.astype(np.int64)
            present = np.zeros(span, dtype=bool)
            for a in range(0, n, _BLOCK):
                at = code[a : a + _BLOCK]
                at *= n_buckets
                at += bucket_of(np.asarray(table[f, a : a + _BLOCK]))
                present[at if mask is None else at[mask[a : a + _BLOCK]]] = True
            pairs = np.flatnonzero(present)
            number = np.cumsum(present) - 1  # masked sequences: some class, never read
            for a in range(0, n, _BLOCK):
                code[a : a + _BLOCK] = number[code[a : a + _BLOCK]]
            buckets = np.column_stack([buckets[pairs // n_buckets], pairs % n_buckets])
        np.maximum(code, 0, out=code)  # a filtered sequence's: some class, never read
        return code, buckets.astype(np.int64)

    def _bucket_of(self, table: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """Lengths -> their bucket (int64): a table lookup where the lengths are small
        non-negative integers (every one a few bytes), else a binary search."""
        most = int(self.longest.max(initial=0))
        if most < _TABLE and int(np.min(table, initial=0)) >= 0:
            lookup = np.searchsorted(self.edges, np.arange(most + 1), side="right")
            # filtered sequences may be longer: some bucket, never read
            return lambda lengths: lookup[np.minimum(lengths, most)]
        edges = self.edges
        return lambda lengths: np.searchsorted(edges, lengths.astype(np.int64), side="right")

    def epoch(self, seed: int, full_epoch: int) -> VariantEpoch:
        """The full epoch's segments (kept for the last epoch asked)."""
        kept = self._kept
        if kept is None or kept[0] != (seed, full_epoch):
            kept = self._kept = ((seed, full_epoch), VariantEpoch(self, seed, full_epoch))
        return kept[1]


class VariantEpoch:
    """One full epoch's (class, variant) segments laid out bucket after bucket: ``counts`` units
    per bucket, ``starts`` each bucket's first in the laid-out list; ``members`` the unit code at
    laid-out positions (``__getitem__``)."""

    def __init__(self, classes: VariantClasses, seed: int, full_epoch: int) -> None:
        f_count, sizes = classes.count, classes.sizes
        self.classes = classes
        turn = rng_for(seed, PURPOSE_VARIANTS, full_epoch, _TURN).integers(0, f_count, len(sizes))
        variant = np.arange(f_count, dtype=np.int64)
        #: [C, F] the first permuted position of each (class, variant): (f - r_c) mod F
        self.first = (variant[None, :] - turn[:, None]) % f_count
        seg = np.maximum(0, (sizes[:, None] - self.first + f_count - 1) // f_count)  # [C, F]
        flat_bucket = classes.buckets.ravel()
        self.order = np.argsort(flat_bucket, kind="stable")  # by bucket, class, variant
        self.seg_sizes = seg.ravel()[self.order]
        self.seg_ends = np.cumsum(self.seg_sizes)
        n_buckets = len(classes.longest)
        self.counts = np.bincount(flat_bucket, weights=seg.ravel(), minlength=n_buckets).astype(
            np.int64
        )
        self.starts = np.zeros(n_buckets + 1, dtype=np.int64)
        np.cumsum(self.counts, out=self.starts[1:])
        words = [(seed, PURPOSE_VARIANTS, full_epoch, _PERMUTE, c) for c in range(len(sizes))]
        self._sigma = Bijections(sizes.tolist(), words) if len(sizes) else None

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        """Unit codes (``sequence * F + variant``) at laid-out positions ``at``."""
        at = np.asarray(at, dtype=np.int64)
        if not len(at):
            return at
        f_count, index = self.classes.count, self.classes.index
        seg = np.searchsorted(self.seg_ends, at, side="right")
        t = at - (self.seg_ends[seg] - self.seg_sizes[seg])
        c, f = np.divmod(self.order[seg], f_count)
        x = self.first[c, f] + f_count * t
        assert self._sigma is not None
        y = self._sigma(c, x).astype(np.int64)
        seqs = np.asarray(index.members[np.asarray(index.starts)[c] + y], dtype=np.int64)
        return seqs * f_count + f

    def draw(self, offsets: np.ndarray, words: tuple[int, ...]) -> MemberDraw:
        """The keyed draw of the buckets' lists from ``offsets`` on (``MemberDraw`` over the
        laid-out segments)."""
        return MemberDraw(self, self.starts, offsets, words)  # type: ignore[arg-type]


def _pooled_counts(table: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The histogram of every admitted sequence's every variant length (``length_counts`` per
    variant, merged)."""
    parts = [length_counts(row if mask is None else np.asarray(row)[mask]) for row in table]
    values = np.concatenate([v for v, _ in parts]).astype(np.int64)
    counts = np.concatenate([c for _, c in parts]).astype(np.int64)
    uniq, inverse = np.unique(values, return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)
