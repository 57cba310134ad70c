"""The admitted corpus of indexed planning: what a node's bucket index is built from.

Admission (length limits, ``excluded``, ``fixed_random_subset``, sequences without a chunk:
each counted under its reason), the length key's lengths and costs, the batch budget and the
``BucketIndex`` itself: length classes (chunking), per-(file, bucket) counts (``files``), chunk
buckets, the fixed orderings' cuts (``seqloader.plan.indexed.fixed``; with ``files`` one bucket
and the per-file table: ``seqloader.plan.indexed.files_cut``). ``node_bucket_index``
builds one of these and keeps its ``index``; the planner (``IndexedPlanner``) builds one too and
plans from it. Nothing here depends on the seed, ``uneven``, ``mix`` or the epoch.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar, cast

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import subset_order
from seqloader.plan.chunks import (
    ChunkSpec,
    ChunkTable,
    chunk_counts,
    chunk_table,
    resolve_chunking,
)
from seqloader.plan.epochs import (
    Admission,
    admit_at,
    admit_counts,
    admit_mask,
    batch_limits,
    check_fit_alone,
    chunkless_reason,
    excluded_bytes,
    length_key_of,
    part_bounds,
)
from seqloader.plan.files import distributed_files
from seqloader.plan.indexed.budget import (
    edges_for,
    histogram_edges,
    indexed_budget,
    packed_budget,
    sum_budget,
)
from seqloader.plan.indexed.chunks import (
    ChunkBuckets,
    ChunkGeometry,
    file_chunk_counts,
    lazy_chunk_table,
)
from seqloader.plan.indexed.fixed import (
    FIXED_KINDS,
    FixedOrder,
    bucket_values,
    fixed_cuts,
    fixed_edges,
    in_pool_order,
)
from seqloader.plan.indexed.fixed_chunks import Chunking, chunked_cuts, chunked_order
from seqloader.plan.indexed.histogram import BucketIndex, build_bucket_index, length_counts
from seqloader.plan.indexed.sort_bins import DRAWN_KINDS, SORT_BIN_KINDS, order_index_kind
from seqloader.plan.indexed.variants import VariantClasses, key_table
from seqloader.plan.indexed.variants_sorted import SORTED_VARIANT_KINDS, ValueClasses
from seqloader.plan.inputs import PlanInputs, refuse_clashes
from seqloader.plan.options import PlanOptions
from seqloader.plan.variants import VARIANTS_REFUSED

#: the orderings indexed planning plans length variants with (the bucketed ones by classes,
#: ``seqloader.plan.indexed.variants``; the others by per-epoch greedy cuts of the drawn lengths)
VARIANT_KINDS = ("laplace", "buckets", "default", "reverse", "random", *SORTED_VARIANT_KINDS)
_C = TypeVar("_C", bound=VariantClasses)  # the variants' classes of an ordering's kind
_BLOCK = 1 << 18  # sequences per block of the chunking admission scan (its temporaries small)


def unplanned(inputs: PlanInputs) -> OptionError | None:
    """What indexed planning refuses of ``inputs`` that their options alone do not say (None:
    nothing): ``AdmittedCorpus`` raises it, and ``planning="auto"`` resolves to ``global`` for it
    (``seqloader.plan.planners.resolve_planning``)."""
    try:
        refuse_unplanned(inputs)
    except OptionError as refused:
        return refused
    return None


def refuse_unplanned(inputs: PlanInputs) -> None:
    """Refuse what a source declares that indexed planning does not plan (nothing is
    ignored)."""
    _refuse_selections(inputs)
    if inputs.variants is not None:
        refuse_variants(inputs)
    if inputs.pools is not None or inputs.orders is not None:
        raise OptionError(
            "planning='indexed': per-sub-epoch file pools (RETURNN's DistributeFilesDataset) "
            "and a source's own orders (RETURNN's CombinedDataset) are not supported: both are "
            "RETURNN's own global order (file pools are planned with seeding='returnn' only), "
            "which indexed planning does not plan; use planning='global' for them"
        )


def refuse_variants(inputs: PlanInputs) -> None:
    """Length variants under indexed planning: planned with ``VARIANT_KINDS`` (``shard`` or
    ``random_seed_offset``, ``seqloader.plan.indexed.variants``); the options
    whose tables are made once from fixed lengths are refused by name, as is a prebuilt index
    (a node's index holds no variant classes)."""
    o, variants = inputs.options, inputs.variants
    assert variants is not None
    kind = o.parsed_ordering.kind
    what, fix = VARIANTS_REFUSED
    clashes = [
        (f"ordering={o.ordering!r} with planning='indexed'", kind not in VARIANT_KINDS),
        ("chunking", o.chunking is not None),
        ("mix", o.mix is not None),
        ("distribution='files'", o.distribution == "files"),
        ("a prebuilt bucket index", inputs.index is not None),
        (
            "a source's own sort key with a sorting ordering",
            kind in SORTED_VARIANT_KINDS and own_sort_key(inputs) is not None,
        ),
    ]
    fix = (
        "with planning='indexed' they plan with ordering 'laplace', 'buckets:N', 'default', "
        "'reverse', 'random', 'sorted', 'sorted_reverse' or 'sort_bin_shuffle[_x2]' and "
        "distribution 'shard' or 'random_seed_offset'; " + fix
    )
    refuse_clashes(inputs.origin, what, clashes, fix)
    n = len(next(iter(inputs.lengths.values()))) if inputs.lengths else 0
    unknown = sorted(set(variants.lengths) - set(inputs.lengths))
    if unknown or variants.size != n:
        raise OptionError(
            f"{inputs.origin or 'the source'}: length variants of keys {sorted(variants.lengths)} "
            f"for {variants.size} sequences, expected keys of {sorted(inputs.lengths)} for {n} "
            "sequences; fix the source's length_variants()"
        )


def own_sort_key(inputs: PlanInputs) -> np.ndarray | None:
    """The source's own sort key (``order_lengths``) where the ordering sorts (``sorted``,
    ``sorted_reverse``, ``sort_bin_shuffle[_x2]``): what global planning sorts by, so the
    order's index is built on it (its buckets one per key value); None otherwise. An integer
    view (never copied unless it is not integer); a length other than the lengths' is refused.

    >>> from seqloader.plan.options import PlanOptions
    >>> given = PlanInputs({"data": np.array([5, 3])}, PlanOptions(ordering="sorted"),
    ...                    order_lengths=np.array([1, 2]))
    >>> own_sort_key(given).tolist(), own_sort_key(dataclasses.replace(given, order_lengths=None))
    ([1, 2], None)
    """
    kind = inputs.options.parsed_ordering.kind
    if kind not in ("sorted", "sorted_reverse", *SORT_BIN_KINDS):
        return None
    return _given_key(inputs)


def filter_key(inputs: PlanInputs) -> np.ndarray | None:
    """The source's own sort key where ``epoch_wise_filter`` filters a fixed or drawn order's
    sub-epoch (``IndexedPlanner._filtered_part``): global planning's filter keeps the shortest
    by it (RETURNN's ``mean_len_selection`` over ``order_lengths``), whatever the ordering; None
    otherwise (the length key). The bucketed orders filter their buckets by the length key.

    >>> from seqloader.plan.options import PlanOptions
    >>> wise = PlanOptions(ordering="random", epoch_wise_filter={(1, 1): {"max_mean_len": 4}})
    >>> given = PlanInputs({"data": np.array([5, 3])}, wise, order_lengths=np.array([1, 2]))
    >>> filter_key(given).tolist(), filter_key(dataclasses.replace(given, options=PlanOptions()))
    ([1, 2], None)
    """
    o = inputs.options
    kind = o.parsed_ordering.kind
    if not o.epoch_wise_filter or not (kind in FIXED_KINDS or kind in DRAWN_KINDS):
        return None
    return _given_key(inputs)


def _given_key(inputs: PlanInputs) -> np.ndarray | None:
    """``inputs.order_lengths`` as an integer view (copied only if not integer), its length
    checked; None where the source gives none."""
    if inputs.order_lengths is None:
        return None
    key = np.asarray(inputs.order_lengths)
    if not np.issubdtype(key.dtype, np.integer):
        key = key.astype(np.int64)
    n = len(next(iter(inputs.lengths.values()))) if inputs.lengths else 0
    if key.shape != (n,):
        raise OptionError(
            f"order_lengths{' of ' + inputs.origin if inputs.origin else ''}: got shape "
            f"{key.shape}, expected ({n},) (one sort key per sequence); fix the source's "
            "order_lengths"
        )
    return key


def sort_key_digest(key: np.ndarray) -> str:
    """sha256 of a sort key's values (as int64, a block at a time: no copy of size ``n``), what
    a plan's fingerprint and the node's index file name add for a source's own sort key.

    >>> sort_key_digest(np.array([1, 2], np.int32)) == sort_key_digest(np.array([1, 2]))
    True
    """
    h = hashlib.sha256()
    for a in range(0, len(key), _BLOCK):
        h.update(np.asarray(key[a : a + _BLOCK], dtype=np.int64).tobytes())
    return h.hexdigest()[:32]


def _refuse_selections(inputs: PlanInputs) -> None:
    """Epoch selections with what draws no sub-epoch lists of its own for them to filter (the
    fixed and drawn orders list each sub-epoch they apply to: ``IndexedPlanner._filtered_part``,
    chunked too; the bucketed orders filter their buckets' lists, unchunked)."""
    if not inputs.selections:
        return
    o = inputs.options
    kind = o.parsed_ordering.kind
    cut_order = kind in FIXED_KINDS or kind in DRAWN_KINDS
    clashes = [
        (f"distribution={o.distribution!r}", o.distribution == "files"),
        ("mix", o.mix is not None),
        (f"chunking with ordering={o.ordering!r}", o.chunking is not None and not cut_order),
    ]
    named = [name for name, on in clashes if on]
    if named:
        raise OptionError(
            f"{inputs.origin or 'the source'}: epoch selections (RETURNN's epoch_wise_filter "
            f"subdirs) are not supported with planning='indexed' and {', '.join(named)} (they "
            "filter each sub-epoch's lists, which these plans do not draw per sub-epoch); use "
            "distribution='shard' or 'random_seed_offset' (chunked: with a fixed, random or "
            "sort_bin_shuffle ordering), or planning='global'"
        )


class AdmittedCorpus:
    """The admitted sequences of ``inputs`` and their bucket index (``inputs.index`` when a node
    built it, checked against the admission; else built here). Pure: the lengths (and a
    prebuilt index) may be memory-mapped views; nothing of size ``n`` is copied unless sequences
    are filtered (a bool mask: with a prebuilt index made only when read, ``mask``; the counts
    a block at a time, ``admit_counts``) or the cost is quadratic (the costs).

    >>> from seqloader.plan.options import PlanOptions
    >>> options = PlanOptions(ordering="buckets:2", max_frames=16, planning="indexed")
    >>> corpus = AdmittedCorpus(PlanInputs.of({"data": np.array([5, 3, 8, 2, 7, 1])}, options))
    >>> corpus.index.counts.sum(), corpus.admission.filtered_total
    (np.int64(6), 0)
    """

    def __init__(self, inputs: PlanInputs) -> None:
        lengths, options, tags, origin = inputs.lengths, inputs.options, inputs.tags, inputs.origin
        if options.planning != "indexed":
            raise OptionError(
                "IndexedPlanner: options.planning must be 'indexed' (or 'auto', resolved by "
                f"seqloader.plan.planners.resolve_planning), got {options.planning!r}"
            )
        refuse_unplanned(inputs)
        key = length_key_of(lengths, options)
        self.options, self.length_key, self.origin = options, key, origin
        main = np.asarray(lengths[key])
        if not np.issubdtype(main.dtype, np.integer):
            main = main.astype(np.int64)
        self.lengths = main  # int32 memory-mapped views stay views
        #: the batch limits and lengths global planning's greedy cuts batch by (fixed, random)
        self.limits = batch_limits(options, list(lengths), key)
        self.batch_lengths = {**lengths, key: main}
        self.budget = indexed_budget(self.limits, origin)
        kind = options.parsed_ordering.kind
        #: ``random``: an order drawn per epoch and cut greedily (``random``, ``sort_bin_shuffle``)
        self.fixed, self.random = kind in FIXED_KINDS, kind in DRAWN_KINDS
        cost = options.cost
        self.costs = main if cost.quadratic is None else cost.units(main)
        #: the admitted mask (bool ``[n]``; None: all), made when read (``mask``): a rank
        #: planning from a node's index counts what was filtered a block at a time and reads its
        #: admitted sequences from the index (subsets and chunking need the mask at once)
        self._mask: np.ndarray | None = None
        self._mask_of: Callable[[], np.ndarray | None] | None = None
        admission = (lengths, key, options, inputs.excluded)
        lazy = options.fixed_random_subset is None and options.chunking is None
        #: the rules read per sequence while the mask is unmade (``admits``)
        self._admission: tuple | None = None
        if inputs.index is not None and lazy:
            self.filtered, self.examples = admit_counts(*admission)
            self._mask_of = lambda: admit_mask(*admission)[0]
            self._admission = admission
        else:
            self.mask, self.filtered, self.examples = admit_mask(*admission)
        self.subset: np.ndarray | None = None
        self._pool_order: FixedOrder | None = None  # chunked fixed orders over a subset
        self._key_index: BucketIndex | None = None  # chunked: the own sort key's (order_index)
        if options.fixed_random_subset is not None:
            self.mask = self._subset_mask(options)
        #: chunking: the chunks planned (``units``: by bucket of their window; ``chunks``: the
        #: table the loader and checks read, its per-sequence arrays made only when read)
        self.units: ChunkBuckets | None = None
        self.chunks: ChunkTable | None = None
        #: a length class's chunks and windows (``ChunkGeometry``)
        self.chunking: ChunkGeometry | None = None
        #: each sequence's length class value: its length, or with the length key not chunked
        #: ``length * per + chunks`` (``ChunkGeometry``)
        self.class_values: np.ndarray = main
        if options.chunking is not None:
            self._admit_chunks(lengths, tags, origin)
        index = inputs.index
        if index is None or int(np.max(index.longest, initial=0)) > self.fits():
            self._check_fit(tags)  # a prebuilt index says the longest admitted length at once
        self._take_keys(inputs, len(main))
        self.index = self._take_index(self._take_variants(inputs, index))

    def _take_keys(self, inputs: PlanInputs, n: int) -> None:
        """The corpus's own sort and filter keys and its files, each also added to the
        fingerprint, kept apart from the admission so ``__init__`` reads as its steps."""
        #: what the fingerprint adds of the corpus (the planner adds mix and selections)
        self.extra = b"indexed" + excluded_bytes(inputs.excluded)
        #: a source's own sort key (``order_lengths``) that the sorted orders' index sorts by
        self.sort_key = own_sort_key(inputs)
        if self.sort_key is not None:
            self.extra += b"order_lengths" + sort_key_digest(self.sort_key).encode()
        #: what epoch_wise_filter keeps the shortest by in a fixed or drawn order's sub-epoch
        #: (``filter_key``; None: the length key)
        self.filter_key = filter_key(inputs)
        if self.filter_key is not None and self.sort_key is None:  # default, reverse, random
            self.extra += b"filter_lengths" + sort_key_digest(self.filter_key).encode()
        distribution = inputs.options.distribution
        self.files = distributed_files(distribution, inputs.files, n, inputs.origin)
        if self.files is not None:
            self.extra += b"files" + self.files.tobytes()

    def _take_variants(self, inputs: PlanInputs, index: BucketIndex | None) -> BucketIndex | None:
        """Length variants: the classes each full epoch's variants are drawn over
        (``seqloader.plan.indexed.variants``), whose index (the members grouped by class) is the
        corpus's; else ``index`` as given."""
        #: the variants' classes (``laplace``, ``buckets:N``), None otherwise
        self.variants: VariantClasses | None = None
        #: the fixed orders and ``random``: the length key's lengths per variant ``[F, n]``,
        #: drawn per sequence (``variant_of``) and cut greedily each epoch; None otherwise
        self.drawn: np.ndarray | None = None
        #: the sorting orders: the class draw with one bucket per length value (the epoch's
        #: units sorted by drawn length, ``seqloader.plan.indexed.variants_sorted``)
        self.sorted_variants: ValueClasses | None = None
        #: the other keys' lengths per variant ``[F, n]`` (per-key limits read them)
        self.other_variants: dict[str, np.ndarray] = {}
        if inputs.variants is None:
            return index
        table = key_table(inputs.variants, self.length_key, self.lengths)
        lengths = inputs.variants.lengths
        self.other_variants = {k: lengths[k] for k in lengths if k != self.length_key}
        self.extra += inputs.variants.digest()
        built = inputs.variant_classes or {}
        if self.options.parsed_ordering.kind in SORTED_VARIANT_KINDS:
            self.sorted_variants = self._classes(ValueClasses, table, built, "value_classes")
        if self.fixed or self.random:
            self.drawn = table
            return index
        self.variants = self._classes(VariantClasses, table, built, "classes")
        return self.variants.index

    def _classes(
        self, kind: type[_C], table: np.ndarray, built: Mapping[str, np.ndarray], prefix: str
    ) -> _C:
        """The variants' classes: read from ``built`` (``PlanInputs.variant_classes``, a node's
        store) where they are there, else built here (O(n F))."""
        if f"{prefix}.edges" in built:
            return cast(_C, kind.from_columns(table, built, prefix))
        return kind(table, self.mask, self.options, self.budget)

    @property
    def num_admitted(self) -> int:
        return int(self.index.starts[-1])

    @property
    def mask(self) -> np.ndarray | None:
        """The admitted mask (bool ``[n]``; None: all admitted), made on first read where a
        prebuilt index made it unneeded for planning (``admit_mask``)."""
        if self._mask_of is not None:
            self._mask, self._mask_of = self._mask_of(), None
        return self._mask

    @mask.setter
    def mask(self, value: np.ndarray | None) -> None:
        self._mask, self._mask_of = value, None

    def admits(self, seqs: np.ndarray) -> np.ndarray | None:
        """Which of the sequences ``seqs`` are admitted -> bool ``[len(seqs)]`` (None: all): the
        mask's where it is made, else the admission's rules read at ``seqs`` alone
        (``admit_at``), so a ``files`` rank reading its own files' sequences makes no mask of
        ``n``."""
        if self._mask_of is not None and self._admission is not None:
            lengths, key, options, excluded = self._admission
            return admit_at(lengths, key, options, excluded, seqs)
        mask = self.mask
        return None if mask is None else mask[seqs]

    def _admitted_count(self) -> int:
        """How many sequences were admitted: ``n`` less every reason's count (each sequence
        counted under one reason), without the mask."""
        return len(self.lengths) - sum(self.filtered.values())

    @property
    def admission(self) -> Admission:
        """What was admitted and filtered; the counts at once, the admitted index array (``n``
        int64) only when read (``MaskAdmission``: checks and tests read it, planning and
        ``seqloader stats`` do not)."""
        mask = self._mask if self._mask_of is None else (lambda: self.mask)
        return MaskAdmission(mask, len(self.lengths), self.filtered, self.examples)

    def _take_index(self, index: BucketIndex | None) -> BucketIndex:
        """The bucket index (``index``: prebuilt, else built here from the admitted lengths),
        its edges, longest lengths and counts per bucket (chunking: of the chunks' windows)."""
        main = self.lengths
        if index is None:
            adm = main if self.mask is None else main[self.mask]
            if self.chunking is not None:  # sequences by class value: one bucket per value
                main = self.class_values
                adm = main if self.mask is None else main[self.mask]
                index = build_bucket_index(main, length_counts(adm)[0][1:], self.mask)
            elif self.files is not None and (self.fixed or self.random):  # indexed.files_cut
                index = build_bucket_index(main, np.zeros(0, np.int64), self.mask, self.files)
            elif self.fixed or self.random:  # the order's index (indexed.fixed, random_order)
                index = self._order_index()
                # the subset's order within (a mix orders its corpora's streams itself)
                if self.fixed and self.subset is not None and self.options.mix is None:
                    index = in_pool_order(index, self.order_by, self.subset, self.mask)
            else:
                adm_costs = self.costs if self.mask is None else self.costs[self.mask]
                edges = edges_for(
                    adm, self.options, adm_costs, self.budget, sum_budget(self.limits)
                )
                index = build_bucket_index(main, edges, self.mask, self.files)
        self.bucket_edges = np.asarray(index.edges, dtype=np.int64)
        no_cuts = self.files is not None or self.chunking is not None or self.drawn is not None
        if self.fixed and index.cuts is None and not no_cuts:  # drawn: cut per epoch
            index = self._with_cuts(index)
        self._check_index(index)
        self.index = index
        #: the longest length (chunking: window) of each bucket; chunks per bucket
        self.longest, self.bucket_counts = index.longest, index.counts
        if self.chunking is not None:
            edges_of = partial(histogram_edges, self.options, self.budget)
            self.units = ChunkBuckets.of(index, self.chunking, 0, 0, edges_of)
            if self.fixed and self.files is None:  # chunk cuts of the order (fixed_chunks)
                index = self.index = self._with_chunk_cuts(index, self.units.stride)
            self.bucket_edges = self.units.edges
            self.longest, self.bucket_counts = self.units.longest, self.units.counts
            self.extra += b"chunks"
            if self.files is not None:
                index = self.index = self._chunk_file_table(index, self.units)
        if self.variants is not None:  # the buckets of the epochs' drawn lengths
            self.bucket_edges, self.longest = self.variants.edges, self.variants.longest
        self.extra += b"edges" + self.bucket_edges.tobytes()
        return index

    @property
    def order_by(self) -> np.ndarray:
        """What the sorted orders sort by: the source's own sort key, else the length key."""
        return self.lengths if self.sort_key is None else self.sort_key

    def _order_index(self) -> BucketIndex:
        """The order's index of a fixed or drawn ordering (``order_index_kind``): sorted kinds
        one bucket per admitted value of ``order_by`` (members ascending), the others one
        bucket of the admitted sequences."""
        kind = order_index_kind(self.options.parsed_ordering.kind)
        by = self.order_by
        adm_by = by if self.mask is None else by[self.mask]
        return build_bucket_index(by, fixed_edges(adm_by, kind), self.mask)

    def order_index(self, index: BucketIndex | None = None) -> BucketIndex:
        """The index the sorted orders read their order from (``FixedOrder``,
        ``SortBinsOrder``) and a sorted order's mix streams over: the planner's ``index`` (or
        ``index``), but chunked with a source's own sort key the admitted sequences by that key
        (the planner's index holds the length classes the chunks are counted from): built here,
        O(n log n) once per planner and O(n) memory, as a node stores only the length classes
        and the chunk cuts made from this order. So too with the length key not chunked: the
        length classes are (length, chunk count), the order sorts by length alone."""
        keyed = self.sort_key is not None or (self.chunking is not None and self.chunking.per)
        if not keyed or self.chunking is None:
            return self.index if index is None else index
        if self._key_index is None:
            self._key_index = self._order_index()
        return self._key_index

    def _with_cuts(self, index: BucketIndex) -> BucketIndex:
        """``index`` with the fixed ordering's greedy cuts of every sub-epoch part (O(n) once:
        a node stores them with the index; ``seqloader.plan.indexed.fixed``)."""
        order = FixedOrder(index, self.options.parsed_ordering.kind)
        parts = self.options.partition_epoch
        cuts, starts = fixed_cuts(order, parts, self.limits, self.batch_lengths)
        return dataclasses.replace(index, cuts=cuts, cut_starts=starts)

    def fixed_chunking(self) -> Chunking:
        """Chunked fixed orderings and ``random``: how a sequence expands into chunks and their
        windows (``seqloader.plan.indexed.fixed_chunks``)."""
        assert self.chunking is not None and self.chunks is not None
        return Chunking(
            self.batch_lengths, self.length_key, self.chunking, self.chunks.spec, self.class_values
        )

    def fixed_order(self, index: BucketIndex) -> Callable[[np.ndarray], np.ndarray]:
        """The fixed ordering's full-epoch sequence order over ``index`` (chunked: the
        length-class index, ``chunked_order``)."""
        kind = self.options.parsed_ordering.kind
        if self.chunking is None:
            return FixedOrder(index, kind)
        if self.subset is not None:  # the subset's shuffled order (O(m log m), once per planner)
            if self._pool_order is None:
                self._pool_order = FixedOrder(self._pool_index(index, kind), kind)
            return self._pool_order
        return chunked_order(self.order_index(index), kind, self.mask, len(self.lengths))

    def _pool_index(self, index: BucketIndex, kind: str) -> BucketIndex:
        """Chunked with ``fixed_random_subset``: the order's index over the subset's shuffled
        order (sorted kinds: the length classes, each one's members in that order; the others:
        one bucket, the admitted subset in that order), as global planning orders it."""
        assert self.subset is not None
        if kind in ("sorted", "sorted_reverse"):
            return in_pool_order(self.order_index(index), self.order_by, self.subset, self.mask)
        pool = self.subset if self.mask is None else self.subset[self.mask[self.subset]]
        return BucketIndex(
            pool,
            np.array([0, len(pool)], dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
        )

    def _with_chunk_cuts(self, index: BucketIndex, stride: int) -> BucketIndex:
        """Chunked fixed orderings: ``index`` with the chunk batches' bounds and first chunks
        of every sub-epoch part (O(chunks) once, kept with the node's index; a prebuilt index's
        are checked to end at each part's chunks)."""
        parts = self.options.partition_epoch
        if index.cuts is None:
            order = self.fixed_order(index)
            cuts, firsts, starts = chunked_cuts(
                order,
                int(index.starts[-1]),
                parts,
                self.limits,
                self.fixed_chunking(),
                stride,
            )
            return dataclasses.replace(index, cuts=cuts, cut_starts=starts, cut_firsts=firsts)
        given, heads = index.cut_starts, index.cut_firsts
        ok = heads is not None and given is not None and len(given) == parts + 1
        if ok and heads is not None and given is not None:
            size = int(index.starts[-1])
            ends = np.asarray(heads)[np.asarray(given[1:], dtype=np.int64) - 1]
            bounds = (part_bounds(size, parts, p) for p in range(parts))
            ok = ends.tolist() == [(hi - lo) * stride for lo, hi in bounds]
            ok = ok and len(heads) == len(index.cuts)
        if not ok:
            self._index_mismatch()
        return index

    def _chunk_file_table(self, index: BucketIndex, units: ChunkBuckets) -> BucketIndex:
        """Chunked ``files``: ``index`` with the per-(file, chunk bucket) chunk counts and the
        per-file frames (built here in one pass when the index has none; a prebuilt one is
        checked against the chunk buckets)."""
        assert self.files is not None
        if index.file_counts is None:
            table, frames = file_chunk_counts(
                units, self.lengths, self.files, self.mask, values=self.class_values
            )
            return dataclasses.replace(index, file_counts=table, file_frames=frames)
        want = (len(self.files) - 1, len(units.counts))
        if tuple(index.file_counts.shape) != want or index.file_frames is None:
            self._index_mismatch()
        return index

    def _subset_mask(self, options: PlanOptions) -> np.ndarray:
        """The admitted mask less what is not in ``fixed_random_subset`` (RETURNN's draw, as
        global planning: ``subset_order``), counted under global planning's reason."""
        n = len(self.lengths)
        inside = np.zeros(n, dtype=bool)
        subset = options.fixed_random_subset
        assert subset is not None
        #: RETURNN's subset in its shuffled order (the order fixed orderings start from)
        self.subset = subset_order(n, subset, options.fixed_random_subset_seed)
        inside[self.subset] = True
        keep = np.ones(n, dtype=bool) if self.mask is None else self.mask
        hit = np.flatnonzero(keep & ~inside)
        if len(hit):
            self.filtered["not in fixed_random_subset"] = len(hit)
            self.examples["not in fixed_random_subset"] = hit[:5].tolist()
        return keep & inside

    def _admit_chunks(
        self, lengths: Mapping[str, np.ndarray], tags: Sequence[str] | None, origin: str
    ) -> None:
        """Chunking: the length key's (size, step, min_chunk_size); admitted sequences without
        a chunk filtered, counted as global planning counts them; every chunked key giving the
        same number of chunks (else ``chunk_table``'s error). In blocks: no copy of the lengths."""
        options, key = self.options, self.length_key
        spec = cast(ChunkSpec, options.chunking)  # normalised by PlanOptions
        resolved, least = resolve_chunking(spec, options.min_chunk_size, list(lengths))
        # the key that counts chunks: the length key, else (not chunked) the first chunked key
        counter = key if key in resolved else next(iter(resolved))
        size, step = resolved[counter]
        counting = ChunkGeometry(size, step, least.get(counter, 0))
        # the shortest length with a chunk (chunk_counts is monotone in the length), so the
        # scan below compares lengths (1 byte per sequence of a block), counting no chunks
        has = np.flatnonzero(counting.counts(np.arange(size + 2)))
        shortest = int(has[0]) if len(has) else np.iinfo(np.int64).max
        counted = lengths[counter]
        n = len(self.lengths)
        mask = self.mask
        others = {k: v for k, v in resolved.items() if k != counter}
        none_first: list[int] = []
        none_count = 0
        for a in range(0, n, _BLOCK):
            block = np.asarray(counted[a : a + _BLOCK])
            keep = np.ones(len(block), bool) if mask is None else mask[a : a + _BLOCK]
            if others:  # every chunked key the same number of chunks, else chunk_table's error
                count = counting.counts(block)
                for other, (o_size, o_step) in others.items():
                    got = np.asarray(lengths[other][a : a + _BLOCK])
                    if (
                        keep & (chunk_counts(got, o_size, o_step, least.get(other, 0)) != count)
                    ).any():
                        full_keep = np.ones(n, bool) if mask is None else mask
                        chunk_table(lengths, spec, options.min_chunk_size, full_keep, tags, origin)
            hit = np.flatnonzero(keep & (block < shortest))
            if len(hit):
                if mask is None:
                    mask = np.ones(n, dtype=bool)
                mask[hit + a] = False
                none_first.extend((hit[: 5 - len(none_first)] + a).tolist())
                none_count += len(hit)
        if none_count:
            reason = f"no chunk ({chunkless_reason(options)})"
            self.filtered = {**self.filtered, reason: none_count}
            self.examples = {**self.examples, reason: none_first[:5]}
        self.mask = mask
        self.chunking = counting
        if counter != key:
            self._unchunked_classes(counting, np.asarray(counted), mask)
        self.chunks = lazy_chunk_table(
            lengths, spec, resolved, options.min_chunk_size, mask, tags, origin
        )

    def _unchunked_classes(
        self, counting: ChunkGeometry, counted: np.ndarray, mask: np.ndarray | None
    ) -> None:
        """The length key not chunked: a sequence's class value is ``length * per + chunks``
        (``per`` more than any admitted sequence's chunks), so a length class holds sequences
        of one length and one chunk count, every chunk as long as the sequence
        (``ChunkGeometry``). O(n) int64 once per planner."""
        chunks = counting.counts(counted)
        adm = chunks if mask is None else chunks[mask]
        per = int(adm.max(initial=0)) + 1
        self.chunking = dataclasses.replace(counting, per=per)
        self.class_values = np.asarray(self.lengths, dtype=np.int64) * per + chunks

    def fits(self) -> int:
        """The longest length that fits a batch alone (no limit: any)."""
        packed = packed_budget(self.limits)
        most = np.iinfo(np.int64).max if packed is None else packed
        if self.budget is None:
            return most
        cost = self.options.cost
        if cost.quadratic is None:  # frames or packed: the budget is in frames
            return self.budget
        fits = int(cost.longest_fitting(self.budget // cost.quadratic))  # budget = frames * Q
        return min(fits, most)

    def _check_fit(self, tags: Sequence[str] | None) -> None:
        """Every admitted sequence fits a batch alone, else an error naming the first that
        does not (in chunks: no copy of the lengths)."""
        if self.budget is None:
            return
        fits = self.fits()
        if self.chunking is not None and not self.chunking.per and self.chunking.size <= fits:
            return  # no window is longer than the chunk size
        check_fit_alone(
            self.lengths, self.mask, fits, self.options, self.length_key, tags, self.origin
        )

    def _check_index(self, index: BucketIndex) -> None:
        admitted = self._admitted_count()
        ok = len(index.starts) == len(self.bucket_edges) + 2 and int(index.starts[-1]) == admitted
        if self.chunking is not None:  # one bucket per admitted length: its edges are those
            ok = ok and per_value(index, self.class_values)
        if self.fixed and self.files is None and self.chunking is None and self.drawn is None:
            ok = ok and self._fixed_index_ok(index, admitted)
        drawn_kind = order_index_kind(self.options.parsed_ordering.kind)
        one_bucket = (self.random and drawn_kind == "default") or (
            (self.fixed or self.random) and self.files is not None
        )
        if one_bucket and self.chunking is None:  # one bucket: the admitted sequences
            ok = ok and len(index.edges) == 0
        elif self.random and self.chunking is None:  # sort_bin_shuffle: one bucket per length
            ok = ok and per_value(index, self.order_by)
        ok = ok and len(index.members) == admitted and len(index.longest) == len(index.starts) - 1
        if self.files is not None and self.chunking is None:  # chunked: _chunk_file_table
            table = index.file_counts
            ok = ok and table is not None and index.file_frames is not None
            ok = (
                ok
                and table is not None
                and table.shape == (len(self.files) - 1, len(index.starts) - 1)
            )
        if not ok:
            self._index_mismatch()

    def _index_mismatch(self) -> None:
        admitted = self._admitted_count()
        raise OptionError(
            f"the bucket index given for {self.origin or 'the source'} does not match its "
            f"lengths and options ({admitted} admitted sequences, {len(self.bucket_edges) + 1}"
            " buckets): it was built for other data or options. Fix: rebuild it "
            "(node_bucket_index) for these lengths and options."
        )

    def _fixed_index_ok(self, index: BucketIndex, admitted: int) -> bool:
        """A fixed ordering's index: its buckets those of ``fixed_edges``' kind (one per length,
        or one) and its cuts every part's, each ending at the part's size."""
        kind, parts = self.options.parsed_ordering.kind, self.options.partition_epoch
        if kind in ("sorted", "sorted_reverse"):
            ok = per_value(index, self.order_by)
        else:
            ok = len(index.edges) == 0
        starts = index.cut_starts
        if index.cuts is None or starts is None or len(starts) != parts + 1:
            return False
        sizes = [part_bounds(admitted, parts, p) for p in range(parts)]
        ends = np.asarray(index.cuts)[np.asarray(starts[1:], dtype=np.int64) - 1]
        return ok and ends.tolist() == [hi - lo for lo, hi in sizes]


class MaskAdmission(Admission):
    """An ``Admission`` of an admitted mask (None: all of ``n``; or what makes it, called when
    ``admitted`` is read): ``filtered`` and its examples are there at once, ``admitted`` (int64
    ``[n_admitted]``) is made from the mask when read.

    >>> a = MaskAdmission(None, 10**9, {}, {})  # no index array of 10^9 made
    >>> a.filtered_total
    0
    >>> MaskAdmission(np.array([True, False, True]), 3, {"x": 1}, {"x": [1]}).admitted.tolist()
    [0, 2]
    """

    _mask: np.ndarray | Callable[[], np.ndarray | None] | None
    _n: int

    def __init__(
        self,
        mask: np.ndarray | Callable[[], np.ndarray | None] | None,
        n: int,
        filtered: Mapping[str, int],
        examples: Mapping[str, list[int]],
    ) -> None:
        object.__setattr__(self, "filtered", dict(filtered))
        object.__setattr__(self, "filtered_examples", dict(examples))
        object.__setattr__(self, "_mask", mask)
        object.__setattr__(self, "_n", int(n))

    @property
    def admitted(self) -> np.ndarray:
        mask = self._mask() if callable(self._mask) else self._mask
        if mask is None:
            return np.arange(self._n, dtype=np.int64)
        return np.flatnonzero(mask)


def per_value(index: BucketIndex, values: np.ndarray) -> bool:
    """Whether ``index`` holds one bucket per value of ``values`` (the sorted orders' and the
    chunked plans' indexes): its edges its buckets' longest, and every bucket one value
    (``bucket_values``: else the first bucket could hold several below the first edge)."""
    edges = np.array_equal(np.asarray(index.edges), np.asarray(index.longest)[1:])
    return edges and bucket_values(index, values) is not None
