"""``Planner``: the whole epoch plan as a pure function of (lengths, options, epoch, world size).

Steps: admit (filter, counted) -> [mix: select the full epoch's sequences from each corpus'
stream] -> order the full epoch -> cut the sub-epoch -> greedy batches -> distribute over ranks.
Resume enters at a *position* in the sub-epoch's sequence order (see ``Segment``); in a mixed epoch
the order is one of *slots* (a sequence may fill several), and positions count slots.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import mean_filtered, subset_order
from seqloader.plan.audit_order import AuditOrder, AuditRun, audit_orders
from seqloader.plan.batches import BatchList
from seqloader.plan.bounds import check_bins, check_chunk_units
from seqloader.plan.chunks import ChunkSpec, ChunkTable, Units, chunk_table
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.edges import bucket_edges
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import (
    EpochIndex,
    admit,
    batch_limits,
    chunkless_reason,
    excluded_bytes,
    length_key_of,
    part_bounds,
)
from seqloader.plan.files import (
    checked_file_bounds,
    distributed_files,
    files_read,
)
from seqloader.plan.fingerprint import plan_fingerprint
from seqloader.plan.greedy.buckets import Arrangement, arrange
from seqloader.plan.greedy.distribute import GlobalPlan
from seqloader.plan.greedy.distributions import At, Distribution, Files, distribution_of
from seqloader.plan.greedy.units import PlannedSequences, planned_units
from seqloader.plan.inputs import PlanInputs, refuse_clashes
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import Corpora, CorpusProgress, EpochMix, MixPlan, mixed_corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.ordering import Rng, order_sequences
from seqloader.plan.orders import EpochOrders, check_source_order
from seqloader.plan.pools import FilePools
from seqloader.plan.seeding import (
    PURPOSE_BUCKETS,
    PURPOSE_FIXED_ORDER,
    PURPOSE_ORDER,
    returnn_rng,
    rng_for,
)
from seqloader.plan.selections import EpochSelection, apply_selections, checked_selections
from seqloader.plan.topology import Topology
from seqloader.plan.variants import VARIANTS_REFUSED, LengthVariants
from seqloader.validate import is_int

#: Bumped whenever the same options and data would give another plan (orderings, batching, split).
PLAN_ALGORITHM = "seqloader-plan/1"


class Planner:
    """Plans epochs for one dataset. Pure: no torch, no I/O; every method is a function of the
    constructor arguments and its own arguments.

    >>> planner = Planner({"data": np.array([5, 3, 8, 2])}, PlanOptions(max_seqs=2, ordering="sorted"))
    >>> share = planner.global_plan(1, world_size=1).rank_share(0)
    >>> [share.batch(k)[0].tolist() for k in range(len(share))]  # sequence indices per batch
    [[3, 1], [0, 2]]
    """

    #: (epoch, order rank) -> sub-epoch slots, inside ``reusing_orders`` only
    _reused_orders: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] | None = None
    #: per-sub-epoch file pools (``seqloader.plan.pools``); None: the whole data is ordered
    pools: FilePools | None = None
    #: the sequences some epochs keep (``seqloader.plan.selections``)
    selections: tuple[EpochSelection, ...] = ()
    #: the source's own order per sub-epoch (``seqloader.plan.orders``); None: planned here
    orders: EpochOrders | None = None

    @property
    def algorithm(self) -> str:
        """The planning algorithm's id (in the plan fingerprint; named when a state is refused);
        read from the module so that bumping ``PLAN_ALGORITHM`` is the one place to change."""
        return PLAN_ALGORITHM

    def __init__(
        self, inputs: PlanInputs | Mapping[str, np.ndarray], *more: Any, **named: Any
    ) -> None:
        """``inputs``: what to plan from (``PlanInputs`` says what each part means), or the short
        form ``Planner(lengths, options, tags, files=...)``."""
        i = PlanInputs.of(inputs, *more, **named)
        if i.options.planning == "auto":  # this class is the greedy algorithm: asked by name
            i = replace(i, options=replace(i.options, planning="global"))
        lengths, options, tags, origin = i.lengths, i.options, i.tags, i.origin
        if options.planning != "global":
            raise OptionError(
                f"Planner plans with planning='global', but the options say "
                f"planning={options.planning!r}: build the planner with "
                "seqloader.plan.planners.make_planner, which picks the planner the options ask for"
            )
        if i.index is not None:
            raise OptionError(
                f"{origin or 'Planner'}: a prebuilt bucket index (PlanInputs.index) is indexed "
                "planning's; global planning builds none: leave index=None with planning='global'"
            )
        key = length_key_of(lengths, options)
        self.options, self.length_key = options, key
        self._take_lengths(lengths[key], i.order_lengths)
        limits = batch_limits(options, list(lengths), key)
        plain = limits.plain and options.chunking is None
        self.admission = admit(lengths, key, options, tags, origin, i.excluded, check_fit=plain)
        self._take_excluded(i.excluded)
        self._plan_units(lengths, options, tags, origin)
        #: the admitted sequences in stored order (ascending, or the subset's order)
        self._pool = self._pool_all[self._admitted_mask[self._pool_all]]
        self.batcher = Batcher(limits, {**lengths, key: self.lengths})  # one int64 copy
        if not plain:
            self._check_fits(tags, origin)
        self.costs = self.batcher.costs  # int64 [n] what max_frames bounds, per sequence
        self.budget = self.batcher.budget  # max_frames in cost units (the length key's)
        check_bins(options.parsed_ordering, options.ordering, len(self.lengths))
        self._arrange_buckets(key)
        self._take_mix(i.corpora, origin)
        self._take_files(i.files, origin)
        self._select_epochs(i.selections, i.pools, origin)
        self._take_orders(i.orders, origin)
        self.origin = origin
        self.variants = self._checked_variants(i.variants, lengths)
        self._epoch_batcher: tuple[int, Batcher] | None = None  # (full epoch, its batcher)
        #: with variants, the epoch of each plan made (id of its seqs -> (weak ref to them, epoch))
        self._plan_epochs: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}

    def _take_lengths(self, main: np.ndarray, order_lengths: np.ndarray | None) -> None:
        """The length key's lengths, and what sorting orderings sort by (int64 ``[n]`` each;
        given ones go into the fingerprint)."""
        self.lengths = np.ascontiguousarray(main, dtype=np.int64)
        self.order_lengths = self.lengths
        self._extra = b""
        if order_lengths is not None:
            self.order_lengths = np.ascontiguousarray(order_lengths, dtype=np.int64)
            if self.order_lengths.shape != self.lengths.shape:
                raise OptionError(
                    f"order_lengths: got shape {self.order_lengths.shape}, expected "
                    f"{self.lengths.shape} (one per sequence)"
                )
            self._extra = self.order_lengths.tobytes()

    def _take_excluded(self, excluded: Mapping[str, np.ndarray] | None) -> None:
        """The admitted mask, the source's filters (``excluded``) joined, and their bytes in the
        fingerprint."""
        self._extra += excluded_bytes(excluded)
        self._admitted_mask = np.zeros(len(self.lengths), dtype=bool)
        self._admitted_mask[self.admission.admitted] = True
        self._excluded: np.ndarray | None = None  # bool [n]: left out by the source's filters
        for mask in (excluded or {}).values():
            m = np.asarray(mask, dtype=bool)
            self._excluded = m.copy() if self._excluded is None else self._excluded | m

    def _take_mix(self, corpora: Corpora | None, origin: str) -> None:
        """The source's corpora and, with ``options.mix``, the plan of every full epoch's mix."""
        self.corpora = corpora
        self.mix: EpochMix | None = None
        if self.options.mix is not None:
            mixed = mixed_corpora(self.options.mix, corpora, origin)
            self.mix = MixPlan(self.options.seed, self.options.mix, mixed, self.admission.admitted)

    def _take_files(self, files: np.ndarray | None, origin: str) -> None:
        """The source's file layout with ``distribution="files"`` (None otherwise), and the
        admitted frames and sequences per file."""
        self.files = distributed_files(self.options.distribution, files, len(self.lengths), origin)
        if self.files is not None:  # int64 [F + 1] with distribution="files"
            self._extra += b"files" + self.files.tobytes()

    def _checked_variants(
        self, variants: LengthVariants | None, lengths: Mapping[str, np.ndarray]
    ) -> LengthVariants | None:
        """Length variants, refused with the options whose plans do not follow each epoch's
        lengths (chunk tables, mixes, file layouts, pools and buckets are built once)."""
        if variants is None:
            return None
        o = self.options
        what, fix = VARIANTS_REFUSED
        clashes = (
            ("chunking", o.chunking is not None),
            ("mix", o.mix is not None),
            ("distribution='files'", o.distribution == "files"),
            ("file pools", self.pools is not None),
            ("the source's own orders", self.orders is not None),
            (f"ordering={o.ordering!r}", o.parsed_ordering.is_buckets),
        )
        refuse_clashes(self.origin, what, clashes, fix)
        unknown = sorted(set(variants.lengths) - set(lengths))
        if unknown or variants.size != len(self.lengths):
            raise OptionError(
                f"{self.origin or 'the source'}: length variants of keys {sorted(variants.lengths)} "
                f"for {variants.size} sequences, expected keys of {sorted(lengths)} for "
                f"{len(self.lengths)}"
            )
        self._extra += variants.digest()
        return variants

    def epoch_lengths(self, full_epoch: int) -> dict[str, np.ndarray]:
        """The lengths batching uses in ``full_epoch`` (0-based), per batched key: the drawn
        variants' with length variants, else the source's."""
        base = self.batcher.lengths
        if self.variants is None:
            return dict(base)
        return self.variants.at(self.options.seed, full_epoch, base)

    def batcher_of(self, epoch: int | None) -> Batcher:
        """The batcher of ``epoch`` (1-based; None: the source's lengths): with length variants
        one over the epoch's drawn lengths, kept for the last full epoch asked."""
        if self.variants is None or epoch is None:
            return self.batcher
        full = EpochIndex(epoch, self.options.partition_epoch).full_epoch
        kept = self._epoch_batcher
        if kept is None or kept[0] != full:
            kept = (full, Batcher(self.batcher.limits, self.epoch_lengths(full)))
            self._epoch_batcher = kept
        return kept[1]

    def _plan_units(
        self,
        lengths: Mapping[str, np.ndarray],
        options: PlanOptions,
        tags: Sequence[str] | None,
        origin: str,
    ) -> None:
        """The planned units: a fixed random subset of the sequences, and with chunking their
        chunks (sequences without one are counted as filtered)."""
        #: every sequence in stored order (what orderings start from); a fixed random subset
        #: re-orders and cuts it, as RETURNN re-indexes its data
        self._pool_all = np.arange(len(self.lengths), dtype=np.int64)
        if options.fixed_random_subset is not None:
            self._pool_all = subset_order(
                len(self.lengths), options.fixed_random_subset, options.fixed_random_subset_seed
            )
            outside = np.ones(len(self.lengths), dtype=bool)
            outside[self._pool_all] = False
            self.admission = self.admission.without(outside, "not in fixed_random_subset")
            self._admitted_mask[outside] = False
        #: chunking: the chunks of every admitted sequence (None: the planned units are the
        #: sequences themselves)
        self.chunks: ChunkTable | None = None
        if options.chunking is not None:
            spec = cast(ChunkSpec, options.chunking)  # normalised by PlanOptions
            self.chunks = chunk_table(
                lengths, spec, options.min_chunk_size, self._admitted_mask, tags, origin
            )
            check_chunk_units(self.chunks.num_units, options.chunking, len(self.lengths))
            none = self._admitted_mask & (np.diff(self.chunks.first) == 0)
            self.admission = self.admission.without(none, f"no chunk ({chunkless_reason(options)})")
            self._admitted_mask[none] = False
        #: what the batch lists hold, sequences or chunks: every difference answered there
        self.units: PlannedSequences = planned_units(self, self._check_start, self.chunks)

    def _arrange_buckets(self, key: str) -> None:
        """``buckets:N``: the bucket edges over the admitted units' lengths and costs (chunking:
        every chunk's window)."""
        options = self.options
        ordering = options.parsed_ordering
        self.bucket_edges = np.zeros(0, dtype=np.int64)
        #: what buckets:N arranges, per unit (sequence index, or chunk number): lengths, costs
        self._arranged = (self.lengths, self.costs)
        if ordering.is_buckets:
            self._arranged, (lens, costs) = self.units.bucket_inputs(self.admission.admitted, key)
            self.bucket_edges = bucket_edges(lens, costs, ordering.bins or 1)

    def _select_epochs(
        self, selections: Sequence[EpochSelection], pools: FilePools | None, origin: str
    ) -> None:
        """Epoch selections and per-sub-epoch file pools, checked against the options."""
        options = self.options
        self.selections = checked_selections(selections, len(self.lengths))
        if self.selections and (
            options.mix is not None or options.distribution == "files" or pools is not None
        ):
            raise OptionError(
                f"{origin or 'the source'}: epoch selections (RETURNN's epoch_wise_filter "
                "subdirs) are not supported with mix, distribution='files' or file pools (they "
                "filter each sub-epoch's order); use distribution='shard' or 'random_seed_offset'"
            )
        for sel in self.selections:
            self._extra += repr((sel.first, sel.last, sel.name)).encode()
            self._extra += np.packbits(sel.keep).tobytes()
        self.pools = pools
        if pools is not None:
            self._validate_pools(pools, origin)

    def _validate_pools(self, pools: FilePools, origin: str) -> None:
        """File pools are RETURNN's: its seeding, and no option that orders across pools."""
        o = self.options
        refuse_clashes(
            origin,
            "per-sub-epoch file pools (RETURNN's DistributeFilesDataset) are",
            (
                ("seeding='seqloader'", o.seeding != "returnn"),
                (f"distribution={o.distribution!r}", o.distribution == "files"),
                ("mix", o.mix is not None),
                (f"ordering={o.ordering!r}", o.parsed_ordering.is_buckets),
                ("fixed_random_subset", o.fixed_random_subset is not None),
                ("epoch_wise_filter", o.epoch_wise_filter is not None),
            ),
            "the pools are RETURNN's order, the sub-dataset's ordering within each; use "
            "seeding='returnn' with another ordering/distribution",
        )
        pools.check_bins(o.partition_epoch)
        checked_file_bounds(pools.bounds, len(self.lengths), origin)
        self._extra += b"pools" + pools.bounds.tobytes() + pools.sizes.tobytes()
        self._extra += repr((pools.shuffle, pools.fixed_seed, pools.shard_files)).encode()

    def _take_orders(self, orders: EpochOrders | None, origin: str) -> None:
        """The source's own orders, refused with options that would order it again."""
        self.orders = orders
        if orders is None:
            return
        o = self.options
        refuse_clashes(
            origin,
            "the source orders its own sub-epochs (RETURNN's CombinedDataset), which is",
            (
                (f"ordering={o.ordering!r}", o.parsed_ordering.kind != "default"),
                (f"distribution={o.distribution!r}", o.distribution == "files"),
                ("mix", o.mix is not None),
                ("file pools", self.pools is not None),
                ("epoch selections", bool(self.selections)),
                ("fixed_random_subset", o.fixed_random_subset is not None),
                ("fixed_random_seed", o.fixed_random_seed is not None),
                ("epoch_wise_filter", o.epoch_wise_filter is not None),
            ),
            "leave the ordering to the source",
        )
        self._extra += b"orders" + orders.identity()

    @functools.cached_property
    def distribution(self) -> Distribution:
        """How the epoch is shared among ranks (``seqloader.plan.greedy.distributions``)."""
        return distribution_of(self)

    def _files(self) -> Files:
        """The ``distribution="files"`` object (its per-file tables and epoch file orders)."""
        files = self.distribution
        assert isinstance(files, Files), "needs distribution='files'"
        return files

    def check_world(self, world_size: int) -> None:
        """Refuse, before any epoch, a world size the data cannot serve: too few files in a
        sub-epoch's pool, or (``distribution="files"``) too few files."""
        self.distribution.check_world(world_size)

    def per_rank_pools(self, world_size: int) -> bool:
        """True if each rank plans its own file pool (sharded pools on more than one rank)."""
        return self.pools is not None and self.pools.shard_files and world_size > 1

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        """The order rank ``rank`` batches on its own (``random_seed_offset``, or its share of
        sharded file pools: its bins of the one file order, RETURNN's seeds unshifted), as
        ``sub_epoch_order`` (one slot per chunk when chunking)."""
        if self.per_rank_pools(world_size):
            return self.units.slots(self.pool_order(epoch, 0, world_size, rank))
        return self.sub_epoch_order(epoch, rank)

    def _check_fits(self, tags: Sequence[str] | None, origin: str) -> None:
        """Every planned unit (admitted sequence, or chunk) fits a batch alone, else an error."""
        adm = self.admission.admitted
        longest, what = self.units.fit_lengths(adm)
        self.batcher.check_fits(longest, adm, tags, origin, what)

    @property
    def num_admitted(self) -> int:
        return len(self.admission.admitted)

    @property
    def admitted_mask(self) -> np.ndarray | None:
        """Which sequences are admitted, bool ``[n]`` (None: all of them)."""
        return self._admitted_mask

    def sub_epoch_order(self, epoch: int, order_rank: int = 0, world_size: int = 1) -> np.ndarray:
        """Admitted sequence indices of ``epoch`` in plan order -> int64 ``[m]`` (in a mixed epoch
        one per slot, so a sequence can appear more than once).

        ``order_rank`` selects the rank's own permutation under ``random_seed_offset``; with
        ``shard`` it is always 0 (one order for all ranks). ``world_size``: the world size the
        epoch starts with; only ``buckets:N`` depends on it (its runs are one step of all ranks).
        """
        if self.files is not None:
            return self.units.slots(self.sub_epoch_files(epoch)[0].seqs)
        if self.options.parsed_ordering.is_buckets:
            arranged = self.arrangement(epoch, order_rank, world_size).order
            return self.units.arranged_slots(arranged)
        return self.units.slots(self.sub_epoch_slots(epoch, order_rank)[0])  # chunked: per chunk

    def order_size(self, epoch: int, world_size: int = 1) -> int:
        """Sequences (slots) in the sub-epoch order of ``epoch`` (what positions index)."""
        return len(self.sub_epoch_order(epoch, 0, world_size))

    def carry(self, state: Mapping[str, object]) -> None:
        """Nothing carried: global planning's states hold their position only."""

    @contextlib.contextmanager
    def reusing_orders(self) -> Iterator[None]:
        """Within this context each sub-epoch order is computed once and reused (an elastic
        resume plans the old segment and the new one from the same order); the orders are
        dropped when the outermost context ends, so nothing stays held."""
        outer = self._reused_orders
        if outer is None:
            self._reused_orders = {}
        try:
            yield
        finally:
            if outer is None:
                self._reused_orders = None

    def sub_epoch_slots(
        self, epoch: int, order_rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(``sub_epoch_order``, the corpus epoch of each slot ``[m]``, or None unmixed)."""
        reused = self._reused_orders
        if reused is None:
            return self._sub_epoch_slots(epoch, order_rank)
        key = (epoch, order_rank)
        if key not in reused:
            reused[key] = self._sub_epoch_slots(epoch, order_rank)
        return reused[key]

    def _sub_epoch_slots(self, epoch: int, order_rank: int) -> tuple[np.ndarray, np.ndarray | None]:
        if self.pools is not None:
            return self.pool_order(epoch, order_rank), None
        if self.orders is not None:  # the source's order; RETURNN's length filter after it
            part = np.asarray(self.orders.order(epoch, self.options.seed, order_rank), np.int64)
            check_source_order(part, len(self.lengths), epoch)
            if self._excluded is not None:
                part = part[~self._excluded[part]]
            return part[self._admitted_mask[part]], None
        ep = EpochIndex(epoch, self.options.partition_epoch)
        pool, uses, perm = self._full_epoch(ep.full_epoch, order_rank)
        lo, hi = part_bounds(len(perm), self.options.partition_epoch, ep.part)
        perm = perm[lo:hi]
        part = perm if self._is_everything(pool, uses) else pool[perm]
        if self.options.seeding == "returnn" and len(pool) != self.num_admitted:
            # RETURNN filters after the cut: its dataset's tag filter, then its epoch-wise
            # filter, then the pipeline's length filter
            if self._excluded is not None:
                part = part[~self._excluded[part]]
            part = self._epoch_filtered(epoch, part)[0]
            return part[self._admitted_mask[part]], None
        part = self._epoch_filtered(epoch, part)[0]  # no mix with it: uses is None then
        return part, None if uses is None else uses[perm]

    def pool_order(
        self, epoch: int, order_rank: int = 0, num_shards: int = 1, shard: int = 0
    ) -> np.ndarray:
        """File pools: ``epoch``'s pool (this rank's with ``shard_files``) ordered by the
        sub-dataset's ordering, RETURNN's filters applied after -> int64 ``[m]``. RETURNN seeds
        the file shuffle and the sub-dataset's order by the full epoch (``init_seq_order(epoch=
        full_epoch + 1)`` on a sub-dataset of one partition); ``order_rank`` adds RETURNN's rank
        step (``random_seed_offset`` distribution)."""
        pools = self.pools
        assert pools is not None, "pool_order needs pools"
        o = self.options
        ep = EpochIndex(epoch, o.partition_epoch)
        files_rng = returnn_rng(ep.full_epoch, o.seed, order_rank)
        pool = pools.pool(ep.part, o.partition_epoch, files_rng, num_shards, shard)
        ordering = o.parsed_ordering
        rng: Rng = returnn_rng(ordering.seed_epoch(ep.full_epoch), o.seed, order_rank)
        if o.fixed_random_seed is not None:
            rng = np.random.RandomState(o.fixed_random_seed)
        part = pool[order_sequences(self.order_lengths[pool], ordering, rng)]
        if self._excluded is not None:
            part = part[~self._excluded[part]]
        return part[self._admitted_mask[part]]

    def _epoch_filtered(self, epoch: int, part: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
        """``selections`` and ``epoch_wise_filter`` applied to a sub-epoch's order -> (kept,
        {reason: count})."""
        part, counts = apply_selections(self.selections, epoch, part)
        wise = self.options.epoch_wise_filter
        part, means = mean_filtered(wise, epoch, part, self.order_lengths)  # type: ignore[arg-type]
        return part, {**counts, **means}

    def filtered(self, epoch: int) -> dict[str, int]:
        """What is filtered in ``epoch``, per reason: the admission's counts and, with
        ``epoch_wise_filter``, this epoch's (for the epoch report)."""
        out = dict(self.admission.filtered)
        if self.orders is not None:  # the source's own curriculum (no filter of ours then)
            for reason, count in self.orders.filtered(epoch, self.options.seed).items():
                out[reason] = out.get(reason, 0) + count
            return out
        if not self.options.epoch_wise_filter and not self.selections:
            return out
        ep = EpochIndex(epoch, self.options.partition_epoch)
        pool, _, perm = self._full_epoch(ep.full_epoch)
        lo, hi = part_bounds(len(perm), self.options.partition_epoch, ep.part)
        part = pool[perm[lo:hi]]
        if self.options.seeding == "returnn" and self._excluded is not None:
            part = part[~self._excluded[part]]
        for reason, count in self._epoch_filtered(epoch, part)[1].items():
            out[reason] = out.get(reason, 0) + count
        return out

    def _full_epoch(
        self, full_epoch: int, order_rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(pool ``[m]``, corpus epochs ``[m]`` or None, ordering permutation ``[m]``) of one full
        epoch: the full epoch in plan order is ``pool[permutation]``. The pool is the admitted
        sequences; under ``seeding="returnn"`` every sequence (RETURNN orders all and cuts the
        sub-epoch before any filter drops some); in a mix, the epoch's selection (with repeats)."""
        ordering = self.options.parsed_ordering
        seed_epoch = ordering.seed_epoch(full_epoch)
        uses = None
        rng: Rng
        fixed = self.options.fixed_random_seed
        if self.options.seeding == "returnn":
            pool = self._pool_all
            rng = returnn_rng(seed_epoch, self.options.seed, order_rank)
            if fixed is not None:  # RETURNN: this one seed, every epoch and rank
                rng = np.random.RandomState(fixed)
        else:
            rng = rng_for(self.options.seed, PURPOSE_ORDER, seed_epoch, order_rank)
            if fixed is not None:  # one order every epoch
                rng = rng_for(fixed, PURPOSE_FIXED_ORDER, order_rank)
            pool = self._pool  # [n_admitted]
            if self.mix is not None:
                selection = self.mix.select(full_epoch)
                pool, uses = selection.seqs, selection.uses  # [m] canonical order
        everything = self._is_everything(pool, uses)  # no gather: half the memory at 10^8
        by = self.order_lengths
        if self.variants is not None and self.order_lengths is self.lengths:  # sort as batched
            by = self.batcher_of(full_epoch * self.options.partition_epoch + 1).lengths[
                self.length_key
            ]
        pool_lengths = by if everything else by[pool]
        return pool, uses, order_sequences(pool_lengths, ordering, rng)

    def _is_everything(self, pool: np.ndarray, uses: np.ndarray | None) -> bool:
        """True if ``pool`` (ascending, without repeats unless mixed) is every sequence, i.e.
        ``arange(n)``: positions in it are sequence indices, and nothing needs gathering."""
        subset = self.options.fixed_random_subset is not None  # a pool in the subset's order
        return uses is None and not subset and len(pool) == len(self.lengths)

    def corpus_plan(self, epoch: int) -> list[tuple[str, int, CorpusProgress | None]]:
        """Per corpus (``corpora`` given): its slots in ``epoch`` (all ranks), and with a mix its
        progress once ``epoch`` is done (at a full epoch's end an exact stream position; after a
        sub-epoch, the slots used so far in the full epoch)."""
        if self.corpora is None:
            return []
        if self.files is not None:  # no mix (refused): the sub-epoch's sequences, per corpus
            here = self.corpora.counts(self.sub_epoch_files(epoch)[0].seqs)
            return [(name, int(here[c]), None) for c, name in enumerate(self.corpora.names)]
        ep = EpochIndex(epoch, self.options.partition_epoch)
        selected, _, perm = self._full_epoch(ep.full_epoch)
        lo, hi = part_bounds(len(perm), self.options.partition_epoch, ep.part)
        done = self.corpora.counts(selected[perm[:hi]])  # [C] slots up to this sub-epoch's end
        here = done - self.corpora.counts(selected[perm[:lo]])  # [C]
        progress = self.mix.progress(ep.full_epoch, done) if self.mix is not None else None
        return [
            (name, int(here[c]), None if progress is None else progress[c])
            for c, name in enumerate(self.corpora.names)
        ]

    def arrangement(self, epoch: int, order_rank: int = 0, world_size: int = 1) -> Arrangement:
        """``buckets:N``: the sub-epoch arranged in runs of ``world_size`` same-bucket batches
        (``seqloader.plan.greedy.buckets``); the random subset is W-independent, the runs are not.
        Chunking: the sub-epoch's chunks are arranged, bucketed by their windows, and the
        arrangement's ``order`` holds chunk numbers (``ChunkTable.unit_ids``)."""
        Topology(0, world_size)  # validates world_size
        ep = EpochIndex(epoch, self.options.partition_epoch)
        seed_epoch = self.options.parsed_ordering.seed_epoch(ep.full_epoch)
        rng = rng_for(self.options.seed, PURPOSE_BUCKETS, seed_epoch, order_rank, ep.part)
        o = self.options
        order = self.sub_epoch_slots(epoch, order_rank)[0]  # a random subset (no mix: refused)
        return arrange(
            self.units.arranged_ids(order),
            *self._arranged,
            self.bucket_edges,
            world_size,
            o.max_seqs,
            self.budget,
            rng,
            balance_tail=o.uneven == "split",
        )

    def batches(
        self, order: np.ndarray, uses: np.ndarray | None = None, epoch: int | None = None
    ) -> BatchList:
        """Greedy batches over ``order`` (unit indices: sequences, or chunks when chunking;
        ``uses``: their corpus epochs), by ``epoch``'s lengths (``batcher_of``)."""
        return BatchList.from_bounds(order, self.batcher_of(epoch).bounds(order), uses)

    def sub_epoch_units(self, epoch: int, order_rank: int = 0) -> Units:
        """Chunking: the chunks of ``epoch`` in plan order (the sub-epoch's sequences, each
        expanded into its chunks, consecutive), with their lengths for batching. With
        ``distribution="files"`` the sub-epoch's files' sequences (a set: each rank orders its
        own)."""
        assert self.chunks is not None, "sub_epoch_units needs chunking"
        if self.files is not None:
            order = self.sub_epoch_files(epoch)[0].seqs
        else:
            order = self.sub_epoch_slots(epoch, order_rank)[0]
        return self.chunks.expand(order, self.batcher.keys)

    def slot_costs(self, batches: BatchList) -> np.ndarray:
        """Cost units of each slot of ``batches`` -> int64 ``[slots]`` (a chunk costs its window
        on the length key)."""
        return self.units.slot_costs(batches)

    def audit_order(self, plan: EpochPlan, run: AuditRun, ranks: Sequence[int]) -> list[AuditOrder]:
        """What a run of ``plan`` must deliver, for the exactly-once audit (``audit_orders``)."""
        return audit_orders(self, plan, run, ranks)

    def step_imbalance(self, plan: EpochPlan, from_step: int) -> PlannedImbalance:
        """The planned step imbalance of ``plan`` (one of this planner's) from ``from_step`` on,
        read off its batch list: O(n), so computed off the training loop."""
        return self.units.step_imbalance(plan, from_step)

    def global_plan(
        self, epoch: int, world_size: int, start: int = 0, order_world_size: int | None = None
    ) -> GlobalPlan:
        """All ranks' batches of ``epoch``, starting at sequence position ``start`` of the
        sub-epoch order (0 = the whole sub-epoch; > 0 only after an elastic resume).
        ``order_world_size``: the world size the epoch started with (default ``world_size``);
        only ``buckets:N`` orders depend on it."""
        Topology(0, world_size)  # validates world_size
        return self.distribution.segment(epoch, world_size, At(start, (), order_world_size))[0]

    def shard_batches(self, epoch: int, start: int, order_world_size: int) -> BatchList:
        """The batches of ``epoch``'s one order (``shard``) from sequence position ``start``;
        ``order_world_size``: the world size the epoch started with (``buckets:N``)."""
        if self.options.parsed_ordering.is_buckets:
            return self._arranged_batches(epoch, 0, order_world_size, start)
        order, uses = self.sub_epoch_slots(epoch)
        return self.units.batches(order, start, epoch, uses)

    def own_batches(self, epoch: int, rank: int) -> BatchList:
        """The batches of rank ``rank``'s own order of ``epoch`` (``random_seed_offset``)."""
        if self.options.parsed_ordering.is_buckets:
            return self._arranged_batches(epoch, rank, 1, 0)
        order, uses = self.sub_epoch_slots(epoch, rank)  # uses: None (a mix is refused)
        return self.units.batches(order, 0, epoch, uses)

    def pool_batches(self, epoch: int, world_size: int, rank: int) -> BatchList:
        """The batches of rank ``rank``'s own file pool of ``epoch`` (sharded pools)."""
        return self.units.batches(self.pool_order(epoch, 0, world_size, rank), 0, epoch)

    def noted(self, plan: GlobalPlan, epoch: int) -> GlobalPlan:
        """``plan``, remembered as ``epoch``'s when there are length variants: its step
        imbalance then costs that epoch's drawn lengths (``step_imbalance``)."""
        if self.variants is not None:
            seqs = plan.batches.seqs
            alive = {k: v for k, v in self._plan_epochs.items() if v[0]() is not None}
            self._plan_epochs = {**alive, id(seqs): (weakref.ref(seqs), epoch)}
        return plan

    def costs_of(self, plan: EpochPlan) -> np.ndarray:
        """Per-sequence costs of ``plan``: its epoch's drawn lengths' with length variants, else
        the source's."""
        seqs = plan.batches.seqs
        noted = self._plan_epochs.get(id(seqs))
        if noted is None or noted[0]() is not seqs:
            return self.costs
        return self.batcher_of(noted[1]).costs

    # ---- distribution="files" (seqloader.plan.greedy.distributions.Files) ----
    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        """(units, file of each unit int64 ``[u]``) of ``epoch`` with ``distribution="files"``:
        per file of the sub-epoch (in the epoch's shuffled file order), its admitted sequences."""
        return self._files().sub_epoch_files(epoch)

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[GlobalPlan, np.ndarray]:
        """(the plan of the current segment, the units consumed before it int64 ``[c]``: sequence
        indices, or chunk numbers ``ChunkTable.unit_ids`` when chunking) with
        ``distribution="files"``. ``history``: ``(world_size, steps)`` of each earlier segment of
        the epoch (elastic resumes)."""
        return self._files().plan(epoch, world_size, history)

    def files_segment(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[GlobalPlan, int]:
        """(the plan of the current segment, how many units were consumed before it): what
        resuming needs of ``files_plan`` (indexed planning computes it from counts)."""
        return self.distribution.segment(epoch, world_size, At(history=tuple(history)))

    def rank_files(self, plan: EpochPlan, rank: int, start_step: int = 0) -> np.ndarray:
        """The files rank ``rank`` reads in ``plan`` from ``start_step`` on (``files_read``)."""
        assert self.files is not None, "rank_files needs distribution='files'"
        return files_read(self.files, plan.rank_share(rank, start_step).seqs)

    def rank_batches(
        self, seqs: np.ndarray, rng: np.random.Generator, left: np.ndarray | None = None
    ) -> BatchList:
        """One rank's sequences ordered with the configured ordering and batched greedily
        (``buckets:N``: arranged in runs of one batch); chunking: each sequence's chunks (those
        ``left``, bool ``[chunks]``, when given) batched."""
        ordering = self.options.parsed_ordering
        order = seqs[order_sequences(self.order_lengths[seqs], ordering, rng)]
        if not ordering.is_buckets:
            return self.units.batches(order, 0, None, left=left)
        ids = self.units.arranged_ids(order, left)  # the rank's units, arranged
        o = self.options
        arranged = arrange(ids, *self._arranged, self.bucket_edges, 1, o.max_seqs, self.budget, rng)
        return self.units.slot_batches(BatchList.from_bounds(arranged.order, arranged.bounds))

    def _arranged_batches(self, epoch: int, order_rank: int, group: int, start: int) -> BatchList:
        arranged = self.arrangement(epoch, order_rank, group)
        self._check_start(start, len(arranged.order), epoch)
        costs = self._arranged[1]
        batches = arranged.batches_from(int(start), costs, self.options.max_seqs, self.budget)
        return self.units.slot_batches(batches)

    @staticmethod
    def _check_start(start: object, size: int, epoch: int) -> None:
        if not is_int(start) or not 0 <= start <= size:
            raise OptionError(
                f"start: got {start!r}, expected a sequence position 0..{size} of epoch {epoch}"
            )

    def fingerprint(self, source_fingerprint: str) -> str:
        """What all ranks (and a resumed run) must agree on: data, options, length key, and the
        planning algorithm's version (a seqloader that plans differently must not mix in)."""
        return plan_fingerprint(  # _extra: order lengths, exclusions, files, pools, selections
            self.algorithm, source_fingerprint, self.options, self.length_key, self._extra
        )
