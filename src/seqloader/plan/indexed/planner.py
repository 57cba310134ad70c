"""``planning="indexed"``: each rank plans only its own batches (10^8 sequences, 1,024 ranks).

Global planning batches one global order greedily, so every rank computes the whole epoch. Here
the epoch is planned from counts, and members are drawn only where a rank needs them:

1. **Buckets** (once per corpus): lengths cut into ``N`` buckets of about equal cost
   (``buckets:N``; ``laplace`` uses ``LAPLACE_BUCKETS``), the admitted sequences grouped by bucket
   (``BucketIndex``: built once per corpus and node, memory-mapped by every rank when the source
   layer stores it; built in chunks here otherwise).
2. **Histogram batching**: bucket ``b``'s batches hold ``k_b`` sequences (as many as fit
   ``max_frames`` at the bucket's longest length, at most ``max_seqs``), the last one fewer
   (``seqloader.plan.indexed.histogram``).
3. **Keyed draws**: per full epoch, each bucket's member list is permuted by a keyed bijection
   (``seqloader.plan.indexed.bijection``, keyed by seed, epoch and bucket): position ``p``'s member is
   computable alone. Sub-epoch ``i`` of ``partition_epoch=P`` takes slice ``i`` of every bucket's
   permuted list (RETURNN's cut rule per bucket), so a full epoch uses every sequence once.
4. **Order** (``seqloader.plan.indexed.batch_table``): ``buckets:N``: runs of one bucket's batches, one
   step of all ranks each, shuffled; ``laplace``: bins over every bucket, ascending and
   descending.
5. **Distribution**: ``shard``: plan batch ``k`` to rank ``k % W``; a rank draws only its own
   batches (``IndexedPlan``). ``files``: files shuffled and cut into sub-epochs and assigned to
   ranks as with global planning; each rank's per-bucket counts come from the per-(file, bucket)
   table, so every rank knows every rank's batch count (equal steps) while drawing only its own
   files' sequences.

Positions and resume work as with global planning (a position is a sequence offset of the order,
always at a batch boundary). ``files`` resumes elastically from its segment history, replayed on
counts per unit of the epoch (``seqloader.plan.indexed.files``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from seqloader.plan.admission import epoch_filters, filter_reasons
from seqloader.plan.audit_order import AuditOrder, AuditRun, audit_orders
from seqloader.plan.batches import BatchList
from seqloader.plan.chunks import Units as ChunkUnits
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import (
    Admission,
    At,
    EpochIndex,
    check_fit_alone,
    part_bounds,
    part_cut,
)
from seqloader.plan.files import (
    files_read,
)
from seqloader.plan.fingerprint import plan_fingerprint
from seqloader.plan.indexed.batch_table import BatchTable, bucket_runs, laplace_bins
from seqloader.plan.indexed.budget import (
    key_budgets,
    num_buckets,
    packed_budget,
    quadratic_budgets,
    sum_budget,
    tighter,
)
from seqloader.plan.indexed.corpus import AdmittedCorpus
from seqloader.plan.indexed.distributions import Distribution, distribution_of
from seqloader.plan.indexed.files_cut import files_cut
from seqloader.plan.indexed.files_distribution import Files
from seqloader.plan.indexed.filter import RankOrderDraw
from seqloader.plan.indexed.fixed import (
    FIXED_KINDS,
    BoundsTable,
    ListedOrder,
    cut_batcher,
)
from seqloader.plan.indexed.histogram import (
    BucketIndex,
    batch_sizes,
    cut_packed,
    cut_runs,
    row_runs,
    sizes_for_units,
)
from seqloader.plan.indexed.imbalance import bucket_costs, rankwise_imbalance
from seqloader.plan.indexed.mix_kind import MixKind
from seqloader.plan.indexed.mix_rank_slots import rank_slots
from seqloader.plan.indexed.plan import (
    Draw,
    IndexedPlan,
    MemberDraw,
    RunDraw,
    SortedWindows,
)
from seqloader.plan.indexed.random_order import RankBatchOrder
from seqloader.plan.indexed.sort_bins import DRAWN_KINDS, SORT_BIN_KINDS, drawn_order
from seqloader.plan.indexed.units import CutAsk, EpochCut, PlannedUnits, planned_units
from seqloader.plan.indexed.variants import VariantCodes
from seqloader.plan.indexed.variants_filter import filtered_units
from seqloader.plan.indexed.variants_sorted import sorted_order
from seqloader.plan.indexed.variants_units import variant_units
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.limits import BatchLimits
from seqloader.plan.mix import CorpusProgress, mixed_corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.pools import FilePools
from seqloader.plan.seeding import (
    PURPOSE_FIXED_ORDER,
    PURPOSE_INDEXED_BATCH_ORDER,
    PURPOSE_INDEXED_MEMBERS,
    PURPOSE_INDEXED_ORDER,
    PURPOSE_INDEXED_RUNS,
    rng_for,
)
from seqloader.plan.selections import (
    EpochSelection,
    checked_selections,
    selections_bytes,
)
from seqloader.plan.topology import Topology

#: The algorithm id in the fingerprint of indexed plans (global plans: ``PLAN_ALGORITHM``).
INDEXED_ALGORITHM = "seqloader-plan-indexed/13"
#: The ordering kinds indexed planning plans (``PlanOptions`` refuses the others by name); the
#: fixed ones (``seqloader.plan.indexed.fixed``) cut global planning's batches, ``random`` and
#: ``sort_bin_shuffle[_x2]`` cut them on the keyed order of each epoch
#: (``seqloader.plan.indexed.random_order``, ``seqloader.plan.indexed.sort_bins``)
INDEXED_KINDS = ("laplace", "buckets", *FIXED_KINDS, *DRAWN_KINDS)
_CHUNK = 1 << 22
_ROWS = 1 << 10  # files per chunk of the per-(file, bucket) table summed at once


def draw_head(options: PlanOptions) -> tuple[int, ...]:
    """The first key words of every draw: the seed (``fixed_random_seed``: that seed and its
    purpose, the same draws every epoch, as global planning's one order).

    >>> draw_head(PlanOptions(seed=3)), draw_head(PlanOptions(fixed_random_seed=5))
    ((3,), (5, 8))
    """
    if options.fixed_random_seed is not None:
        return (options.fixed_random_seed, PURPOSE_FIXED_ORDER)
    return (options.seed,)


def index_key(options: PlanOptions) -> str:
    """What a corpus's ``BucketIndex`` depends on of ``options``, as JSON: the bucket count, the
    cost, the batch limits (the edges follow the batch sizes), the admission limits, the length
    key and whether per-file tables are kept. Plans that differ only in seed, ordering within a
    bucket count, ``partition_epoch``, ``uneven`` or ``mix`` share one index (a node keeps one
    file for them).

    >>> a = PlanOptions(ordering="buckets:30", max_frames=20_000, seed=1, planning="indexed")
    >>> b = PlanOptions(ordering="buckets:30", max_frames=20_000, seed=7, planning="indexed")
    >>> index_key(a) == index_key(b)
    True
    """
    return json.dumps(
        {
            "buckets": num_buckets(options),
            "max_seqs": options.max_seqs,
            "max_frames": options.max_frames,
            **(
                {"max_packed_frames": options.max_packed_frames}
                if options.max_packed_frames is not None
                else {}
            ),
            "batch_cost": options.batch_cost,
            "max_seq_length": options.max_seq_length,
            "min_seq_length": options.min_seq_length,
            **(
                {"subset": [options.fixed_random_subset, options.fixed_random_subset_seed]}
                if options.fixed_random_subset is not None
                else {}
            ),
            "length_key": options.length_key,
            "files": options.distribution == "files",
            # chunked plans index sequences by length (one more key only then: the node files
            # of unchunked plans keep their names)
            **(
                {"chunking": options.chunking, "min_chunk_size": options.min_chunk_size}
                if options.chunking is not None
                else {}
            ),
            **_order_keys(options),
        },
        sort_keys=True,
    )


def _order_keys(options: PlanOptions) -> dict[str, object]:
    """``index_key``'s entries for what the ordering keeps in the index (none for buckets)."""
    kind = options.parsed_ordering.kind
    if files_cut(options) or kind == "random":
        # random, and fixed orderings over files: one bucket of the admitted sequences (the
        # cuts are made per epoch; files: with the per-file table, ``indexed.files_cut``)
        return {"random": True}
    if kind in FIXED_KINDS:
        # fixed orderings keep their order and greedy cuts per sub-epoch part in the index
        return {"fixed": kind, "partition_epoch": options.partition_epoch}
    if kind in SORT_BIN_KINDS:
        # sort_bin_shuffle: the admitted sequences by length (``indexed.sort_bins``)
        return {"sort_bins": True}
    return {}


class IndexedPlanner:
    """The planner of ``planning="indexed"`` (see the module doc; the contract is
    ``seqloader.plan.planners.Planner``). Pure: the lengths (and a
    prebuilt ``index``) may be memory-mapped views; nothing of size ``n`` is copied unless
    sequences are filtered (a bool mask) or the cost is quadratic (the costs).

    >>> lengths = np.array([5, 3, 8, 2, 7, 1])
    >>> planner = IndexedPlanner({"data": lengths}, PlanOptions(
    ...     ordering="buckets:2", max_frames=16, planning="indexed"))
    >>> plan = planner.global_plan(1, world_size=2)
    >>> shares = [plan.rank_share(rank) for rank in (0, 1)]  # each computed alone
    >>> sorted(np.concatenate([s.seqs[s.real] for s in shares]).tolist())  # real: not fillers
    [0, 1, 2, 3, 4, 5]
    """

    algorithm = INDEXED_ALGORITHM
    #: indexed planning has no per-sub-epoch file pools (``make_planner`` refuses them)
    pools: FilePools | None = None

    def __init__(
        self, inputs: PlanInputs | Mapping[str, np.ndarray], *more: Any, **named: Any
    ) -> None:
        """``inputs``: what to plan from (``PlanInputs``), or the short form
        ``IndexedPlanner(lengths, options, tags, files=...)``."""
        i = PlanInputs.of(inputs, *more, **named)
        if i.options.planning == "auto":  # this class is indexed planning: refused by name
            i = replace(i, options=replace(i.options, planning="indexed"))
        options, origin = i.options, i.origin
        #: admission, lengths, budget and the bucket index (shared with ``node_bucket_index``)
        self.corpus = c = AdmittedCorpus(i)
        self.options, self.length_key, self.origin = options, c.length_key, origin
        self.lengths = c.lengths
        #: what the sorted orders sort by: the length key, or the source's own sort key
        self.order_lengths = c.lengths if c.sort_key is None else c.sort_key
        self.budget, self.costs, self.files = c.budget, c.costs, c.files
        self.units, self.chunks, self.index = c.units, c.chunks, c.index
        #: what the bucket lists hold: sequences, or chunked their chunks: every difference
        #: between the two is an answer of this object (``seqloader.plan.indexed.units``)
        self.planned: PlannedUnits = planned_units(c)
        #: length variants: their classes, and the codes the lists hold (``indexed.variants``)
        self.variants = c.variants
        self.variant_codes: VariantCodes | None = None
        #: the fixed orders and ``random`` with variants: the lengths per variant ``[F, n]``
        self.drawn = c.drawn
        if (coded := variant_units(c)) is not None:
            self.planned, self.variant_codes = coded, coded.codes
        self.bucket_edges, self.longest, self.bucket_counts = (
            c.bucket_edges,
            c.longest,
            c.bucket_counts,
        )
        self._filtered, self._examples = c.filtered, c.examples
        self._extra = c.extra
        self._take_cut_orders(c)
        self.head = draw_head(options)
        #: how a sub-epoch is shared among ranks (``seqloader.plan.indexed.distributions``)
        self.distribution: Distribution = distribution_of(self)
        #: ((epoch, order rank), its epoch_wise_filter cut)
        self._cut_kept: tuple[tuple[int, int], EpochCut] | None = None
        #: (a sub-epoch's bucket counts and sizes, their ``row_runs``): table and draw ask alike
        self._runs_kept: tuple[bytes, tuple[np.ndarray, ...]] | None = None
        self.mix: MixKind | None = None
        self.corpora = corpora = i.corpora
        self.k = batch_sizes(self.longest, options.cost, options.max_seqs, self.budget)  # [N]
        if (packed := packed_budget(c.limits)) is not None:  # quadratic cost and a packed limit
            longest = np.asarray(self.longest, dtype=np.int64)
            self.k = tighter(self.k, sizes_for_units(longest, options.max_seqs, packed))
        self._limit_other_keys(i.lengths, c.limits, i.tags)
        #: a limit on the sum of lengths alone (``packed``): ``cut_rows`` cuts by that sum
        self._sum_budget = sum_budget(c.limits)
        if options.mix is not None:
            corpora = mixed_corpora(options.mix, corpora, origin)
            self.mix = self.distribution.make_mix(corpora)
            self._extra += b"mix" + repr(corpora.names).encode() + corpora.bounds.tobytes()
        self._take_selections(i.selections)

    def _take_cut_orders(self, corpus: AdmittedCorpus) -> None:
        """Orderings batched by global planning's greedy cuts (the fixed ones, random): the
        limits and lengths the cuts batch by, and the last cut each kept."""
        #: fixed orderings: the part kept
        self._fixed, self._random = corpus.fixed, corpus.random
        self._limits, self._batch_lengths = corpus.limits, corpus.batch_lengths
        self._fixed_kept: tuple[int, tuple[BoundsTable, Draw]] | None = None
        #: random: the greedy cuts of each epoch's keyed order, the last epoch's kept
        self._random_kept: tuple[int, tuple[BoundsTable, Draw]] | None = None
        #: epoch_wise_filter: the filtered part of the last epoch asked
        self._filter_kept: tuple[int, tuple[BoundsTable, Draw, dict[str, int]]] | None = None
        #: a mix under random_seed_offset: ((epoch, order rank), the rank's own slots' draw)
        self._slots_kept: tuple[tuple[int, int], Draw] | None = None

    def _take_selections(self, selections: Sequence[EpochSelection]) -> None:
        """Epoch selections (``seqloader.plan.selections``), applied to each sub-epoch's lists
        before ``epoch_wise_filter`` as global planning applies them to its order (refused where
        ``epoch_wise_filter`` is, ``refuse_unplanned``: no sub-epoch list of its own to filter)."""
        self.selections = checked_selections(selections, len(self.lengths))
        if not self.selections:
            return  # the options they clash with: refused by refuse_unplanned
        self._extra += b"selections" + selections_bytes(self.selections)

    def _fixed_part(self, part: int) -> tuple[BoundsTable, Draw]:
        """A fixed ordering's sub-epoch part: its batch table and draw over the index's cuts (a
        view: a rank reads only its own batches' bounds; kept for the last part asked; chunked:
        the chunks' cuts, ``seqloader.plan.indexed.fixed_chunks``)."""
        kept = self._fixed_kept
        if kept is not None and kept[0] == part:
            return kept[1]
        index = self.index
        assert index.cuts is not None and index.cut_starts is not None
        order = self.corpus.fixed_order(index)
        size = int(index.starts[-1])
        lo, hi = part_bounds(size, self.options.partition_epoch, part)
        a, b = (int(x) for x in index.cut_starts[part : part + 2])
        bounds = index.cuts[a:b]
        draw = self.planned.fixed_draw(order, index, slice(a, b), lo, hi)
        self._fixed_kept = (part, (BoundsTable(bounds), draw))
        return self._fixed_kept[1]

    def _random_part(self, ep: EpochIndex, order_rank: int) -> tuple[BoundsTable, Draw]:
        """``random``: sub-epoch ``ep``'s batch table and draw, the greedy cuts of its part of
        the full epoch's keyed order (``RandomOrder``; ``SortBinsOrder``), cut here in blocks: O(n / P) time per
        part, the part's bounds held (kept for the last epoch asked). Every rank cuts the one
        order; under ``random_seed_offset`` a rank visits its batches in its own keyed order
        (``RankBatchOrder``: the same batch count on every rank)."""
        kept = self._random_kept
        if kept is None or kept[0] != ep.epoch:
            mix, parts = self.mix, self.options.partition_epoch
            mixed = None  # a mix: its keyed slot order, cut (MixKind.random_cut)
            if mix is not None:
                mixed = mix.random_cut(ep, parts, cut_batcher(self._limits), self._batch_lengths)
            if mixed is not None:
                kept = self._random_kept = (ep.epoch, mixed)
            else:
                order, lo, hi = self._cut_order(ep)
                kept = self._random_kept = (ep.epoch, self._cut(order, lo, hi, ep))
        return self._own_batches(ep, order_rank, *kept[1])

    def _own_batches(
        self, ep: EpochIndex, order_rank: int, table: BoundsTable, draw: Draw
    ) -> tuple[BoundsTable, Draw]:
        """``random`` under ``random_seed_offset``: the shared batches in the rank's own keyed
        order (``RankBatchOrder``), a mix's of the rank's own slots (``rank_slots``); else as
        they are."""
        if not (self._random and self.distribution.own_orders):
            return table, draw
        words = (*self.head_of(order_rank), PURPOSE_INDEXED_BATCH_ORDER, self.seed_epoch(ep))
        if self.mix is not None:
            kept = self._slots_kept
            if kept is None or kept[0] != (ep.epoch, order_rank):
                made = rank_slots(self.corpus, table, draw, (*words, ep.part, 1))
                kept = self._slots_kept = ((ep.epoch, order_rank), made)
            draw = kept[1]
        return RankBatchOrder(table.bounds, (*words, ep.part)), draw

    def _cut_order(self, ep: EpochIndex) -> tuple[Callable[[np.ndarray], np.ndarray], int, int]:
        """The fixed or random ordering's full-epoch sequence order and sub-epoch ``ep``'s part
        of it (first and end position)."""
        words = (*self.head, PURPOSE_INDEXED_ORDER, self.seed_epoch(ep))
        classes = self.corpus.sorted_variants
        if classes is not None:  # sorted by the drawn lengths (``indexed.variants_sorted``)
            ordering, full = self.options.parsed_ordering, ep.full_epoch
            order: Callable[[np.ndarray], np.ndarray] = sorted_order(
                classes, self.options.seed, full, ordering, words
            )
        elif self._random:
            order = drawn_order(
                self.corpus.order_index(),
                self.planned,
                self.options.parsed_ordering,
                words,
                by_length=self.corpus.sort_key is None,
            )
        else:
            order = self.corpus.fixed_order(self.index)
        lo, hi = part_bounds(self.num_admitted, self.options.partition_epoch, ep.part)
        return order, lo, hi

    def _cut(
        self, order: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, ep: EpochIndex
    ) -> tuple[BoundsTable, Draw]:
        """Greedy batches of positions ``lo .. hi`` of ``order`` in sub-epoch ``ep``, cut in
        blocks by the planned units (``PlannedUnits.greedy_cut``: chunked, each sequence's chunks
        in turn; length variants, on the full epoch's drawn lengths): the table and the draw."""
        batcher = cut_batcher(self._limits)
        return self.planned.greedy_cut(order, lo, hi, batcher, self._batch_lengths, ep.full_epoch)

    def _filtered_part(self, ep: EpochIndex) -> tuple[BoundsTable, Draw, dict[str, int]]:
        """Fixed and random orderings with epoch selections or ``epoch_wise_filter`` in ``ep``:
        the part's sequences in order (O(n / P) time and memory, every sub-epoch one applies
        to), the selections, then RETURNN's ``mean_len_selection`` of each filter in turn (global
        planning's, on the same order), the
        kept sequences cut greedily: (table, draw, {reason: dropped}); kept for the last epoch."""
        kept = self._filter_kept
        if kept is not None and kept[0] == ep.epoch:
            return kept[1]
        order, lo, hi = self._cut_order(ep)
        units = order(np.arange(lo, hi, dtype=np.int64))  # sorted with variants: unit codes
        # epoch selections first, each on what the ones before kept, as global planning's
        by = self.lengths if self.corpus.filter_key is None else self.corpus.filter_key
        means = epoch_filters(self.options.epoch_wise_filter, ep.epoch)  # type: ignore[arg-type]
        codes = self.variant_codes if self.corpus.sorted_variants is not None else None
        seq_of = (lambda u: u) if codes is None else (lambda u: codes.split(u)[0])
        units, reasons = filtered_units(self.selections, means, ep.epoch, units, seq_of, by)
        table, draw = self._cut(ListedOrder(units), 0, len(units), ep)  # variants: drawn lengths
        self._filter_kept = (ep.epoch, (table, draw, reasons))
        return self._filter_kept[1]

    def _cut_filters(self, epoch: int) -> bool:
        """A fixed or random ordering whose ``epoch_wise_filter`` or epoch selections apply to
        ``epoch``."""
        return (
            (self._fixed or self._random)
            and self.mix is None
            and (
                bool(epoch_filters(self.options.epoch_wise_filter, epoch))  # type: ignore[arg-type]
                or any(sel.applies(epoch) for sel in self.selections)
            )
        )

    def _cut_part(self, ep: EpochIndex, order_rank: int) -> tuple[BoundsTable, Draw]:
        """The fixed or random ordering's sub-epoch: its greedy batch table and draw."""
        if self._cut_filters(ep.epoch):
            table, draw, _ = self._filtered_part(ep)
            return self._own_batches(ep, order_rank, table, draw)
        if self._random or self.drawn is not None:  # drawn variants: cut per epoch
            return self._random_part(ep, order_rank)
        mixed = self._mix_fixed_part(ep)  # a mix: its sub-epoch listed (MixKind.fixed_cut)
        return mixed if mixed is not None else self._fixed_part(ep.part)

    def _mix_fixed_part(self, ep: EpochIndex) -> tuple[BoundsTable, Draw] | None:
        """A fixed ordering with a mix: sub-epoch ``ep``'s slots in the ordering, cut (O(slots)
        time and memory, kept for the last epoch asked; ``MixKind.fixed_cut``); None unmixed
        or when the mix leaves the cut to its distribution."""
        if self.mix is None:
            return None
        kept = self._random_kept
        if kept is None or kept[0] != ep.epoch:
            cut = self.mix.fixed_cut(
                ep, self.options.partition_epoch, self.options.parsed_ordering,
                cut_batcher(self._limits), self._batch_lengths, self.length_key,
            )  # fmt: skip
            if cut is None:
                return None
            kept = self._random_kept = (ep.epoch, cut)
        return kept[1]

    def _limit_other_keys(
        self, lengths: Mapping[str, np.ndarray], limits: BatchLimits, tags: Sequence[str] | None
    ) -> None:
        """Per-key limits on other keys than the length key (``max_frames={...}``, ``"*"``,
        ``max_packed_frames``): each bucket's batch size also fits ``budget // longest`` of
        that key's lengths in the bucket (its longest per bucket: one pass over the members,
        O(n) on every rank, as the node's index keeps only the length key's; per unit:
        ``PlannedUnits.key_longest``); a sequence whose longest unit alone is over the limit
        fits no batch: refused naming it."""
        others = {k: b for k, b in key_budgets(limits).items() if k != self.length_key}
        cost = self.options.cost
        quadratic = quadratic_budgets(limits)  # per key, in the quadratic cost's units
        seen: dict[str, np.ndarray] = {}
        for key, budget, square in [
            *((k, b, False) for k, b in sorted(others.items())),
            *((k, b, True) for k, b in sorted(quadratic.items())),
        ]:
            if key not in seen:
                seen[key] = self.planned.key_longest(_bucket_max(self.index, lengths[key]), key)
            longest = seen[key]
            fits = cost.longest_fitting(budget // (cost.quadratic or 1)) if square else budget
            if int(longest.max(initial=0)) > fits:
                first = self.planned.first_lengths(lengths[key], key)
                check_fit_alone(
                    first, self._mask, fits, self.options, key, tags, self.origin, keyed=True
                )
            units = cost.units(longest) if square else longest
            fit = sizes_for_units(units, self.options.max_seqs, budget)
            self.k = tighter(self.k, fit)

    def cut_rows(self, counts: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each row of ``counts`` (sequences per bucket, int64 ``[R, N]``: per old rank of
        ``files``) laid end to end and cut into runs of one batch size -> (row, start, count,
        size) per run (``cut_runs``). Where only a limit on a batch's sum of lengths bounds it
        (``batch_cost="packed"``, ``max_packed_frames``), by that sum (``cut_packed``: a member
        counted at its bucket's longest length), so a batch reaching into the next bucket keeps
        what its shorter members left free."""
        if self._sum_budget is not None:
            longest = np.asarray(self.longest, dtype=np.int64)
            return cut_packed(counts, longest, self._sum_budget, self.options.max_seqs)
        return cut_runs(counts, np.asarray(self.k, dtype=np.int64))

    @property
    def admission(self) -> Admission:
        """What was admitted and filtered (``AdmittedCorpus.admission``)."""
        return self.corpus.admission

    @property
    def num_admitted(self) -> int:
        return int(self.index.starts[-1])

    @property
    def admitted_mask(self) -> np.ndarray | None:
        return self.corpus.mask

    @property
    def _mask(self) -> np.ndarray | None:
        """The admitted mask, made when first read (``AdmittedCorpus.mask``)."""
        return self.corpus.mask

    def filtered(self, epoch: int) -> dict[str, int]:
        """The admission's counts and, with ``epoch_wise_filter``, this epoch's."""
        out = dict(self._filtered)
        if isinstance(self.distribution, Files):  # the files' sub-epoch's kept set's
            ep = EpochIndex(epoch, self.options.partition_epoch)
            kept = self.distribution.epoch_kept(ep)
            for reason, count in (kept.reasons if kept is not None else {}).items():
                out[reason] = out.get(reason, 0) + count
            return out
        if self._cut_filters(epoch):  # fixed and random orderings: their filtered part's
            ep = EpochIndex(epoch, self.options.partition_epoch)
            for reason, count in self._filtered_part(ep)[2].items():
                out[reason] = out.get(reason, 0) + count
            return out
        if self.mix is not None:  # the mix's sub-epoch slots it left out
            parts = self.options.partition_epoch
            for reason, count in self.mix.filtered_reasons(EpochIndex(epoch, parts), parts).items():
                out[reason] = out.get(reason, 0) + count
            return out
        if self.options.epoch_wise_filter or self.selections:
            cut = self._epoch_cut(EpochIndex(epoch, self.options.partition_epoch), 0)
            for reason, count in (cut.reasons if cut is not None else {}).items():
                out[reason] = out.get(reason, 0) + count
        return out

    # ---- the sub-epoch's batches ----
    def seed_epoch(self, ep: EpochIndex) -> int:
        """The full epoch whose draws ``ep`` uses (``:K`` grouping; ``fixed_random_seed``: 0,
        every epoch the same draws, keyed by ``_head``)."""
        if self.options.fixed_random_seed is not None:
            return 0
        return self.options.parsed_ordering.seed_epoch(ep.full_epoch)

    def head_of(self, order_rank: int) -> tuple[int, ...]:
        """The first key words of ``order_rank``'s draws: ``_head``, and under
        ``random_seed_offset`` the rank's own (each rank its own draws of the whole data)."""
        return self.distribution.head(self.head, order_rank)

    def _counts(
        self, ep: EpochIndex, order_rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequences per bucket in the sub-epoch, their offset in the full epoch's list, batch
        size per bucket) -> int64 ``[N]`` each."""
        parts = self.options.partition_epoch
        if self._fixed or self._random:  # one "bucket": the part's order (indexed.fixed)
            one = np.ones(1, dtype=np.int64)
            return one * self._cut_part(ep, order_rank)[0].num_seqs, one * 0, one
        mixed = self.mix.bucket_counts(ep, parts) if self.mix is not None else None
        if mixed is not None:  # every (bucket, corpus) segment cut on its own
            counts, lo = mixed, np.zeros_like(mixed)
        else:
            counts, lo = self.base_counts(ep)
            cut = self._epoch_cut(ep, order_rank)
            if cut is not None:
                counts = cut.counts
        sizes = np.where(self.k > 0, self.k, np.maximum(counts, 1))
        return counts, lo, sizes

    def base_counts(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray]:
        """Unmixed: (sequences per bucket in the sub-epoch before ``epoch_wise_filter``, their
        offset in the full epoch's list): RETURNN's cut rule per bucket."""
        full = self.bucket_counts
        if self.variants is not None:  # this full epoch's units per bucket
            full = self.variants.epoch(self.options.seed, ep.full_epoch).counts
        lo, counts = part_cut(full, self.options.partition_epoch, ep.part)
        return counts, lo

    @property
    def _shared_sets(self) -> bool:
        """``random_seed_offset`` with ``epoch_wise_filter`` and sub-epochs: the sub-epochs'
        sets are drawn alike on every rank (so the filter keeps the same counts on every rank:
        equal steps, nothing dropped), and each rank orders its sub-epoch with its own draws
        (``RankOrderDraw``)."""
        o = self.options
        return (
            self.distribution.own_orders
            and (o.epoch_wise_filter is not None or bool(self.selections))
            and o.partition_epoch > 1
        )

    def _rank_ordered(self, mixed: bool) -> bool:
        """Whether a rank orders a set every rank shares with its own draws
        (``RankOrderDraw``): ``_shared_sets``, and under ``random_seed_offset`` a mix, whose
        slots the mix draws alike on every rank: ``laplace`` (``seqloader-plan-indexed/11``)
        and ``buckets:N`` (``/12``: its runs' order by the rank alone left every rank the same
        batches), so each rank batches its own draw of the shared slots."""
        return self._shared_sets or (mixed and self.distribution.own_orders)

    def member_draw(self, ep: EpochIndex, offsets: np.ndarray, order_rank: int) -> MemberDraw:
        head = self.head if self._shared_sets else self.head_of(order_rank)
        words = (*head, PURPOSE_INDEXED_MEMBERS, self.seed_epoch(ep))
        if self.variants is not None:  # the full epoch's (class, variant) segments
            return self.variants.epoch(self.options.seed, ep.full_epoch).draw(offsets, words)
        return self.planned.draw(offsets, words)

    def _epoch_cut(self, ep: EpochIndex, order_rank: int) -> EpochCut | None:
        """Epoch selections, then ``epoch_wise_filter``, on the sub-epoch
        (``seqloader.plan.indexed.filter``), None when none applies to ``ep``; kept for the last
        (epoch, order rank) asked (table, draw and counts ask)."""
        means = epoch_filters(self.options.epoch_wise_filter, ep.epoch)  # type: ignore[arg-type]
        chosen = [sel for sel in self.selections if sel.applies(ep.epoch)]
        every = self.planned.cuts_every_epoch(self.options)
        cut_orders = self._fixed or self._random  # their filter: _filtered_part
        if (not means and not chosen and not every) or self.mix is not None or cut_orders:
            return None
        if self._shared_sets:  # one cut for every rank
            order_rank = 0
        kept = self._cut_kept
        if kept is not None and kept[0] == (ep.epoch, order_rank):
            return kept[1]
        cut = self.planned.cut(self, CutAsk(ep, order_rank, means, chosen))
        cut.reasons.update(filter_reasons(means, ep.epoch, cut.dropped))  # after the selections'
        self._cut_kept = ((ep.epoch, order_rank), cut)
        return cut

    def table(self, epoch: int, group: int, order_rank: int = 0) -> BatchTable | BoundsTable:
        """The sub-epoch's batches in plan order (``group``: the world size the epoch starts
        with; only ``buckets:N`` depends on it; ``order_rank``: the rank's own under
        ``random_seed_offset``)."""
        ep = EpochIndex(epoch, self.options.partition_epoch)
        if self._fixed or self._random:
            return self._cut_part(ep, order_rank)[0]
        counts, _, sizes = self._counts(ep, order_rank)
        ordering = self.options.parsed_ordering
        if ordering.is_buckets:
            words = (PURPOSE_INDEXED_RUNS, self.seed_epoch(ep), ep.part)
            return bucket_runs(counts, sizes, group, rng_for(*self.head_of(order_rank), *words))
        runs, run_sizes, _, top = self._row_runs(counts, sizes)  # a short batch per fall
        return laplace_bins(runs, run_sizes, ordering.num_bins(int(counts.sum())), top)

    def _row_runs(self, counts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
        """``row_runs`` (read-only), kept for the last buckets asked: a rank's table and draw
        ask for the same, and a plan's shares ask again and again."""
        key = counts.tobytes() + sizes.tobytes()  # as long as each other: unambiguous
        kept = self._runs_kept
        if kept is None or kept[0] != key:
            runs = row_runs(counts, sizes)
            for a in runs:
                a.flags.writeable = False
            kept = self._runs_kept = (key, runs)
        return kept[1]

    def draw(self, epoch: int, windows: bool = True, order_rank: int = 0) -> Draw:
        """The sub-epoch's slots by (table bucket, position): the keyed member draw (``laplace``:
        over the table's runs of buckets, ``RunDraw``), sorted by length within windows of
        batches (``SortedWindows``; ``windows=False``: by bucket, unsorted, for counts)."""
        ep = EpochIndex(epoch, self.options.partition_epoch)
        if self._fixed or self._random:  # greedy batches: nothing to sort within
            return self._cut_part(ep, order_rank)[1]
        counts, offsets, sizes = self._counts(ep, order_rank)
        draw: Draw
        cut = self._epoch_cut(ep, order_rank)
        mix = self.mix
        mixed = mix.bucket_draw(ep, self.options.partition_epoch) if mix is not None else None
        if mixed is not None:
            draw = mixed
        elif cut is not None:
            draw = cut.draw
        else:
            draw = self.member_draw(ep, offsets, order_rank)
        if self._rank_ordered(mix is not None):  # a shared set in the rank's own order
            words = (PURPOSE_INDEXED_MEMBERS, self.seed_epoch(ep), ep.part)
            draw = RankOrderDraw(draw, counts, (*self.head_of(order_rank), *words))
        if not windows:
            return draw
        if not self.options.parsed_ordering.is_buckets:  # laplace: the table's runs
            runs, sizes, starts, _ = self._row_runs(counts, sizes)
            draw, counts = RunDraw(draw, counts, starts), runs
        return SortedWindows(draw, self.planned.lengths, counts, sizes)

    def order_size(self, epoch: int, world_size: int = 1) -> int:
        return self.distribution.order_size(epoch, world_size)

    def sub_epoch_size(self, epoch: int) -> int:
        """Units of ``epoch`` from the buckets' counts (not ``files``)."""
        return int(self._counts(EpochIndex(epoch, self.options.partition_epoch))[0].sum())

    def sub_epoch_order(self, epoch: int, order_rank: int = 0, world_size: int = 1) -> np.ndarray:
        """The sub-epoch's sequences in plan order (O(n): for checks and tests)."""
        return self.distribution.sub_epoch_order(epoch, order_rank, world_size)

    def sub_epoch_units(self, epoch: int, order_rank: int = 0, world_size: int = 1) -> ChunkUnits:
        """Chunking: the sub-epoch's chunks in plan order (``order_rank``: the rank's own under
        ``random_seed_offset``, else 0; ``world_size``: the one the epoch starts with). O(n):
        for checks. ``files``: the plan's real chunks, then what ``drop`` leaves out."""
        return self.distribution.sub_epoch_units(epoch, order_rank, world_size)

    def sub_epoch_slots(
        self, epoch: int, order_rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(``sub_epoch_order``, the corpus epoch of each slot or None unmixed); O(n). A mix
        over files: its pieces' slots, piece after piece."""
        parts = self.options.partition_epoch
        mix, ep = self.mix, EpochIndex(epoch, parts)
        listed = mix.listed_slots(ep, parts) if mix is not None else None
        if listed is not None:
            return listed
        table = self.table(epoch, 1, order_rank)  # random_seed_offset: the rank's own order
        draw = self.draw(epoch, order_rank=order_rank)
        batches = IndexedPlan(table, draw, 1, 0, "pad", self.units, self.variant_codes).batches
        return batches.seqs, batches.uses

    def corpus_plan(self, epoch: int) -> list[tuple[str, int, CorpusProgress | None]]:
        """Per corpus its slots in ``epoch`` (all ranks) and, mixed, its progress at the
        sub-epoch's end: from the mix's count tables (unmixed: the distribution's
        ``corpus_counts``)."""
        if self.corpora is None:
            return []
        if self.mix is not None:  # from the mix's counts
            parts = self.options.partition_epoch
            here, progress = self.mix.corpus_slots(EpochIndex(epoch, parts), parts)
            return [(name, int(here[c]), progress[c]) for c, name in enumerate(self.corpora.names)]
        here = self.distribution.corpus_counts(epoch)
        return [(name, int(here[c]), None) for c, name in enumerate(self.corpora.names)]

    def table_corpus_counts(self, epoch: int) -> np.ndarray:
        """Unmixed, planned from the batch table (not ``files``): the sub-epoch's sequences per
        corpus -> int64 ``[C]``, without its order: one sub-epoch holds every admitted sequence
        (``PlannedUnits.corpus_counts``); filtered or with ``partition_epoch > 1`` each bucket's
        slice is drawn in chunks (O(n / P) time, the memory of a chunk)."""
        assert self.corpora is not None
        if (
            self.options.partition_epoch == 1
            and not self._cut_filters(epoch)
            and self._epoch_cut(EpochIndex(epoch, 1), 0) is None
        ):
            return self.planned.corpus_counts(self.corpora, self._mask)
        ep = EpochIndex(epoch, self.options.partition_epoch)
        counts, _, _ = self._counts(ep)
        draw = self.draw(epoch, windows=False)  # counts only: the order within does not matter
        out = np.zeros(len(self.corpora.names), dtype=np.int64)
        for b, c in enumerate(counts.tolist()):
            for a in range(0, c, _CHUNK):
                pos = np.arange(a, min(c, a + _CHUNK), dtype=np.int64)
                seqs, _ = draw.slots(np.full(len(pos), b, dtype=np.int64), pos)
                out += self.corpora.counts(self.planned.sequences(seqs))  # per unit
        return out

    # ---- distribution ----
    def global_plan(
        self, epoch: int, world_size: int, start: int = 0, order_world_size: int | None = None
    ) -> EpochPlan:
        Topology(0, world_size)
        return self.distribution.segment(epoch, world_size, At(start, (), order_world_size))[0]

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        """``files``: (the current segment's plan, the units consumed before it, drawn: O(n),
        for the audit and tests; resuming uses ``files_segment``)."""
        return self.distribution.files_plan(epoch, world_size, history)

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        """``files``: (units, file of each unit) of ``epoch`` (O(n): for the audit and tests)."""
        return self.distribution.sub_epoch_files(epoch)

    def files_segment(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, int]:
        """(the current segment's plan, units consumed before it): ``files`` from its segment
        ``history``; the other distributions refuse a history."""
        return self.distribution.segment(epoch, world_size, At(history=tuple(history)))

    # ---- what the contract asks of every planner ----
    def check_world(self, world_size: int) -> None:
        """Refuse a world size the distribution cannot serve (``files``: fewer files than
        ``partition_epoch * world_size``)."""
        self.distribution.check_world(world_size)

    def per_rank_pools(self, world_size: int) -> bool:
        return False  # no file pools

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        """``random_seed_offset``: the order rank ``rank`` plans alone (its own draws)."""
        return self.distribution.rank_order(epoch, rank, world_size)

    def rank_files(self, plan: EpochPlan, rank: int, start_step: int = 0) -> np.ndarray:
        """The files rank ``rank`` reads in ``plan`` from ``start_step`` on (``files_read``)."""
        assert self.files is not None, "rank_files needs distribution='files'"
        return files_read(self.files, plan.rank_share(rank, start_step).seqs)

    def carry(self, state: Mapping[str, object]) -> None:
        """Keep what a loaded state carries for the distribution's plans (``files``: a saved
        segment's units and consumption, ``seqloader.plan.indexed.files_carry``)."""
        self.distribution.carry(state)

    @contextlib.contextmanager
    def reusing_orders(self) -> Iterator[None]:
        """Nothing to reuse: an indexed plan is drawn from counts, not from a kept order."""
        yield

    def slot_costs(self, batches: BatchList) -> np.ndarray:
        """Cost units of each slot of ``batches`` (chunking: of its chunk's window)."""
        return self.planned.slot_costs(batches, self.costs, self.options.cost)

    def audit_order(self, plan: EpochPlan, run: AuditRun, ranks: Sequence[int]) -> list[AuditOrder]:
        """What a run of ``plan`` must deliver, for the exactly-once audit (``audit_orders``)."""
        return audit_orders(self, plan, run, ranks)

    def step_imbalance(self, plan: EpochPlan, from_step: int) -> PlannedImbalance:
        """The planned step imbalance of ``plan`` (one of this planner's) from ``from_step`` on,
        without every rank's batches (``seqloader.plan.indexed.imbalance``): ``shard`` off the
        batch table (milliseconds), ``files`` from counts, rank by rank: each plan kind answers
        (``EpochPlan.step_imbalance``)."""
        if self._fixed or self._random:  # greedy cuts of real lengths: each slot's cost
            # (chunked: its window's, as global planning's chunked plans count it)
            return PlannedImbalance(partial(rankwise_imbalance, plan, self.slot_costs, from_step))
        return plan.step_imbalance(from_step, self.costs, bucket_costs(self))

    def fingerprint(self, source_fingerprint: str) -> str:
        return plan_fingerprint(
            self.algorithm, source_fingerprint, self.options, self.length_key, self._extra
        )


def _bucket_max(index: BucketIndex, lengths: np.ndarray) -> np.ndarray:
    """The longest of ``lengths`` (another key's) per bucket -> int64 ``[N]`` (0 when empty),
    a chunk of members at a time."""
    starts = np.asarray(index.starts, dtype=np.int64)
    out = np.zeros(len(starts) - 1, dtype=np.int64)
    for a in range(0, int(starts[-1]), _CHUNK):
        hi = min(int(starts[-1]), a + _CHUNK)
        values = np.asarray(lengths[np.asarray(index.members[a:hi], dtype=np.int64)], np.int64)
        first, last = np.searchsorted(starts, [a, hi - 1], side="right") - 1
        lo_b = np.clip(starts[first : last + 1], a, hi) - a  # the buckets' parts in the chunk
        hi_b = np.clip(starts[first + 1 : last + 2], a, hi) - a
        held = hi_b > lo_b
        which = np.arange(first, last + 1)[held]
        out[which] = np.maximum(out[which], np.maximum.reduceat(values, lo_b[held]))
    return out
