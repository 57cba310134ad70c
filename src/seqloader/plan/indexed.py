"""``planning="indexed"``: each rank plans only its own batches (10^8 sequences, 1,024 ranks).

Global planning batches one global order greedily, so every rank computes the whole epoch. Here
the epoch is planned from counts, and members are drawn only where a rank needs them:

1. **Buckets** (once per corpus): lengths cut into ``N`` buckets of about equal cost
   (``buckets:N``; ``laplace`` uses ``LAPLACE_BUCKETS``), the admitted sequences grouped by bucket
   (``BucketIndex``: built once per corpus and node, memory-mapped by every rank when the source
   layer stores it; built in chunks here otherwise).
2. **Histogram batching**: bucket ``b``'s batches hold ``k_b`` sequences (as many as fit
   ``max_frames`` at the bucket's longest length, at most ``max_seqs``), the last one fewer
   (``seqloader.plan.histogram``).
3. **Keyed draws**: per full epoch, each bucket's member list is permuted by a keyed bijection
   (``seqloader.plan.bijection``, keyed by seed, epoch and bucket): position ``p``'s member is
   computable alone. Sub-epoch ``i`` of ``partition_epoch=P`` takes slice ``i`` of every bucket's
   permuted list (RETURNN's cut rule per bucket), so a full epoch uses every sequence once.
4. **Order** (``seqloader.plan.batch_table``): ``buckets:N``: runs of one bucket's batches, one
   step of all ranks each, shuffled; ``laplace``: bins over every bucket, ascending and
   descending.
5. **Distribution**: ``shard``: plan batch ``k`` to rank ``k % W``; a rank draws only its own
   batches (``IndexedPlan``). ``files``: files shuffled and cut into sub-epochs and assigned to
   ranks as with global planning; each rank's per-bucket counts come from the per-(file, bucket)
   table, so every rank knows every rank's batch count (equal steps) while drawing only its own
   files' sequences.

Positions and resume work as with global planning (a position is a sequence offset of the order,
always at a batch boundary). ``files`` resumes exactly with the same world size; an elastic resume
of a ``files`` epoch mid-way is refused (it would need every old rank's draws).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from itertools import pairwise

import numpy as np

from seqloader.errors import OptionError, ResumeError, SequenceTooLongError
from seqloader.plan.batch_table import BatchTable, batches_per_bucket, bucket_runs, laplace_bins
from seqloader.plan.batches import BatchList
from seqloader.plan.buckets import bucket_edges
from seqloader.plan.distribute import GlobalPlan
from seqloader.plan.files import assign_lpt, checked_file_bounds, epoch_files, split_batches
from seqloader.plan.histogram import BucketIndex, batch_sizes, build_bucket_index, merge_small
from seqloader.plan.indexed_mix import IndexedMix
from seqloader.plan.indexed_plan import Draw, IndexedPlan, MemberDraw, RankwisePlan
from seqloader.plan.keyed import resolve_keyed
from seqloader.plan.limits import BatchLimits
from seqloader.plan.mix import Corpora, CorpusProgress
from seqloader.plan.options import PlanOptions
from seqloader.plan.planner import Admission, EpochIndex, Planner, default_length_key
from seqloader.plan.pools import FilePools
from seqloader.plan.seeding import (
    PURPOSE_FILES,
    PURPOSE_INDEXED_FILES,
    PURPOSE_INDEXED_MEMBERS,
    PURPOSE_INDEXED_RUNS,
    rng_for,
)
from seqloader.plan.selections import EpochSelection
from seqloader.plan.topology import Topology

#: The algorithm id in the fingerprint of indexed plans (global plans: ``PLAN_ALGORITHM``).
INDEXED_ALGORITHM = "seqloader-plan-indexed/2"
#: The ordering kinds indexed planning plans (``PlanOptions`` refuses the others by name).
INDEXED_KINDS = ("laplace", "buckets")
#: ``files``: a rank's neighbouring buckets are merged until each group holds this many full
#: batches (fewer short last batches when a rank has few sequences; a little more padding)
MERGE_BATCHES = 4
#: Length buckets of ``laplace`` under indexed planning (histogram batching pads up to the
#: bucket's longest length: more buckets, less padding, more short last batches).
LAPLACE_BUCKETS = 64
_CHUNK = 1 << 22


def make_planner(
    lengths: Mapping[str, np.ndarray],
    options: PlanOptions,
    tags: Sequence[str] | None = None,
    origin: str = "",
    order_lengths: np.ndarray | None = None,
    excluded: Mapping[str, np.ndarray] | None = None,
    corpora: Corpora | None = None,
    files: np.ndarray | None = None,
    index: BucketIndex | None = None,
    pools: FilePools | None = None,
    selections: Sequence[EpochSelection] = (),
) -> Planner:
    """The planner ``options.planning`` asks for (``Planner``'s arguments; ``index``: a prebuilt,
    e.g. memory-mapped, ``BucketIndex`` for indexed planning)."""
    if options.planning == "indexed":
        if pools is not None or selections:
            raise OptionError(
                "planning='indexed': per-sub-epoch file pools (RETURNN's DistributeFilesDataset) "
                "and epoch selections (epoch_wise_filter subdirs) are not supported; use "
                "planning='global' (the default) for them"
            )
        return IndexedPlanner(lengths, options, tags, origin, excluded, corpora, files, index)
    return Planner(
        lengths, options, tags, origin, order_lengths, excluded, corpora, files, pools, selections
    )


def edges_for(lengths: np.ndarray, options: PlanOptions, costs: np.ndarray) -> np.ndarray:
    """The length-bucket edges indexed planning uses for ``options`` (``lengths``: the admitted
    lengths of the length key, ``costs`` their cost units)."""
    ordering = options.parsed_ordering
    n_buckets = (ordering.bins or 1) if ordering.is_buckets else LAPLACE_BUCKETS
    return bucket_edges(lengths, costs, n_buckets)


class IndexedPlanner(Planner):
    """``Planner`` for ``planning="indexed"`` (see the module doc). Pure: the lengths (and a
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

    def __init__(
        self,
        lengths: Mapping[str, np.ndarray],
        options: PlanOptions,
        tags: Sequence[str] | None = None,
        origin: str = "",
        excluded: Mapping[str, np.ndarray] | None = None,
        corpora: Corpora | None = None,
        files: np.ndarray | None = None,
        index: BucketIndex | None = None,
    ) -> None:
        if options.planning != "indexed":
            raise OptionError("IndexedPlanner: options.planning must be 'indexed'")
        if not lengths:
            raise OptionError("Planner: no length arrays given")
        key = options.length_key or default_length_key(list(lengths))
        if key not in lengths:
            raise OptionError(f"length_key: got {key!r}, expected one of {sorted(lengths)}")
        self.options, self.length_key, self.origin = options, key, origin
        main = np.asarray(lengths[key])
        if not np.issubdtype(main.dtype, np.integer):
            main = main.astype(np.int64)
        self.lengths = self.order_lengths = main  # int32 memory-mapped views stay views
        limits = BatchLimits.of(
            options.max_seqs, options.max_frames, None, options.cost, list(lengths), key
        )
        self.budget = limits.padded.get(key)
        cost = options.cost
        self.costs = main if cost.quadratic is None else cost.units(main)
        self._mask, self._filtered, self._examples = _admission(lengths, key, options, excluded)
        if index is None or int(np.max(index.longest, initial=0)) > self._fits():
            self._check_fit(tags)  # a prebuilt index says the longest admitted length at once
        self.chunks = None
        self.mix = None
        self.corpora = corpora
        self._reused_orders = None
        self._extra = b"indexed"
        for reason, mask in sorted((excluded or {}).items()):
            self._extra += reason.encode() + np.packbits(np.asarray(mask, dtype=bool)).tobytes()
        self.files = None
        self._epoch_files = {}
        if options.distribution == "files":
            if files is None:
                raise OptionError(
                    f"distribution='files' needs a source that says which sequences each of its "
                    f"files holds (file_layout()), but {origin or 'the source'} does not. Fix: "
                    "use distribution='shard', or give the source a file_layout() (HasFiles)."
                )
            self.files = checked_file_bounds(files, len(main), origin)
            self._extra += b"files" + self.files.tobytes()
        if index is None:
            adm = main if self._mask is None else main[self._mask]
            adm_costs = self.costs if self._mask is None else self.costs[self._mask]
            self.bucket_edges = edges_for(adm, options, adm_costs)
            index = build_bucket_index(main, self.bucket_edges, self._mask, self.files)
        else:
            self.bucket_edges = np.asarray(index.edges, dtype=np.int64)
        self._extra += b"edges" + self.bucket_edges.tobytes()
        self._check_index(index)
        self.index = index
        self.k = batch_sizes(index.longest, cost, options.max_seqs, self.budget)  # [N]
        if options.mix is not None:
            if corpora is None:
                raise OptionError(
                    f"mix={dict(options.mix)} needs named corpora, but {origin or 'the source'} "
                    "has none. Fix: wrap the corpora in seqloader.ConcatSource({'name': source, "
                    "...}), or leave mix out."
                )
            self.mix = IndexedMix(options.seed, options.mix, corpora, index, main, self._mask)
            self._extra += b"mix" + repr(corpora.names).encode() + corpora.bounds.tobytes()
        if self.files is not None:
            assert index.file_counts is not None
            self._file_counts = index.file_counts.sum(axis=1)
            self._file_frames = np.asarray(index.file_frames, dtype=np.int64)

    # ---- admission ----
    def _fits(self) -> int:
        """The longest length that fits a batch alone (no limit: any)."""
        if self.budget is None:
            return np.iinfo(np.int64).max
        return int(self.options.cost.longest_fitting(int(self.options.max_frames)))  # type: ignore[arg-type]

    def _check_fit(self, tags: Sequence[str] | None) -> None:
        """Every admitted sequence fits a batch alone, else an error naming the first that
        does not (in chunks: no copy of the lengths)."""
        if self.budget is None:
            return
        fits = self._fits()
        for a in range(0, len(self.lengths), _CHUNK):
            part = np.asarray(self.lengths[a : a + _CHUNK])
            over = part > fits
            if self._mask is not None:
                over &= self._mask[a : a + _CHUNK]
            hit = np.flatnonzero(over)
            if len(hit):
                i = int(hit[0]) + a
                tag = tags[i] if tags is not None else f"#{i}"
                where = f" in {self.origin}" if self.origin else ""
                raise SequenceTooLongError(
                    f"sequence {i} (tag {tag!r}){where} has {int(self.lengths[i])} frames of "
                    f"{self.length_key!r}, more than max_frames={self.options.max_frames} allows "
                    f"({fits}), so it fits no batch. Fix: raise max_frames, or set "
                    f"max_seq_length={fits} to filter such sequences (counted in the report)."
                )

    def _check_index(self, index: BucketIndex) -> None:
        admitted = len(self.lengths) if self._mask is None else int(self._mask.sum())
        ok = len(index.starts) == len(self.bucket_edges) + 2 and int(index.starts[-1]) == admitted
        ok = ok and len(index.members) == admitted and len(index.longest) == len(index.starts) - 1
        if self.files is not None:
            table = index.file_counts
            ok = ok and table is not None and index.file_frames is not None
            ok = (
                ok
                and table is not None
                and table.shape == (len(self.files) - 1, len(index.starts) - 1)
            )
        if not ok:
            raise OptionError(
                f"the bucket index given for {self.origin or 'the source'} does not match its "
                f"lengths and options ({admitted} admitted sequences, {len(self.bucket_edges) + 1}"
                " buckets): it was built for other data or options. Fix: rebuild it "
                "(build_bucket_index) for these lengths and options."
            )

    @property
    def admission(self) -> Admission:  # type: ignore[override]
        """The admitted sequences (an int64 array of ``n``: for checks and tests, not planning)."""
        n = len(self.lengths)
        admitted = (
            np.arange(n, dtype=np.int64) if self._mask is None else np.flatnonzero(self._mask)
        )
        return Admission(admitted, dict(self._filtered), dict(self._examples))

    @property
    def num_admitted(self) -> int:
        return int(self.index.starts[-1])

    @property
    def admitted_mask(self) -> np.ndarray | None:
        return self._mask

    def filtered(self, epoch: int) -> dict[str, int]:
        return dict(self._filtered)

    # ---- the sub-epoch's batches ----
    def _seed_epoch(self, ep: EpochIndex) -> int:
        return self.options.parsed_ordering.seed_epoch(ep.full_epoch)

    def _counts(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequences per bucket in the sub-epoch, their offset in the full epoch's list, batch
        size per bucket) -> int64 ``[N]`` each."""
        parts = self.options.partition_epoch
        if isinstance(self.mix, IndexedMix):  # every (bucket, corpus) segment cut on its own
            counts = self.mix.part(ep.full_epoch, ep.part, parts)[1].sum(axis=1)
            lo = np.zeros_like(counts)
        else:
            q, r = np.divmod(self.index.counts, parts)
            lo = ep.part * q + np.minimum(ep.part, r)
            counts = q + (ep.part < r)
        sizes = np.where(self.k > 0, self.k, np.maximum(counts, 1))
        return counts, lo, sizes

    def table(self, epoch: int, group: int) -> BatchTable:
        """The sub-epoch's batches in plan order (``group``: the world size the epoch starts
        with; only ``buckets:N`` depends on it)."""
        ep = EpochIndex(epoch, self.options.partition_epoch)
        counts, _, sizes = self._counts(ep)
        ordering = self.options.parsed_ordering
        if ordering.is_buckets:
            words = (PURPOSE_INDEXED_RUNS, self._seed_epoch(ep), ep.part)
            return bucket_runs(counts, sizes, group, rng_for(self.options.seed, *words))
        return laplace_bins(counts, sizes, ordering.num_bins(int(counts.sum())))

    def draw(self, epoch: int) -> Draw:
        ep = EpochIndex(epoch, self.options.partition_epoch)
        if isinstance(self.mix, IndexedMix):
            return self.mix.draw(ep.full_epoch, ep.part, self.options.partition_epoch)
        _, offsets, _ = self._counts(ep)
        words = (self.options.seed, PURPOSE_INDEXED_MEMBERS, self._seed_epoch(ep))
        return MemberDraw(self.index.members, self.index.starts, offsets, words)

    def order_size(self, epoch: int, world_size: int = 1) -> int:
        ep = EpochIndex(epoch, self.options.partition_epoch)
        if self.files is not None:
            return int(self._file_counts[self._part_files(ep)].sum())
        return int(self._counts(ep)[0].sum())

    def _part_files(self, ep: EpochIndex) -> np.ndarray:
        """The files of sub-epoch ``ep`` in the epoch's shuffled order (as global planning)."""
        rng = rng_for(self.options.seed, PURPOSE_FILES, self._seed_epoch(ep))
        parts = self.options.partition_epoch
        return epoch_files(self._file_frames, self._file_counts, parts, rng).part(ep.part)

    def sub_epoch_order(self, epoch: int, order_rank: int = 0, world_size: int = 1) -> np.ndarray:
        """The sub-epoch's sequences in plan order (O(n): for checks and tests)."""
        if self.files is not None:
            plan = self.files_plan(epoch, world_size)[0]
            return plan.batches.seqs[plan.batches.real]
        return IndexedPlan(
            self.table(epoch, world_size), self.draw(epoch), 1, 0, "pad"
        ).batches.seqs

    def sub_epoch_slots(
        self, epoch: int, order_rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(``sub_epoch_order``, the corpus epoch of each slot or None unmixed); O(n)."""
        batches = IndexedPlan(self.table(epoch, 1), self.draw(epoch), 1, 0, "pad").batches
        return batches.seqs, batches.uses

    def corpus_plan(self, epoch: int) -> list[tuple[str, int, CorpusProgress | None]]:
        """Per corpus its slots in ``epoch`` (all ranks) and, mixed, its progress at the
        sub-epoch's end: from the mix's count tables (unmixed: ``_corpus_counts``)."""
        if self.corpora is None:
            return []
        if isinstance(self.mix, IndexedMix):
            ep = EpochIndex(epoch, self.options.partition_epoch)
            lo, count = self.mix.part(ep.full_epoch, ep.part, self.options.partition_epoch)
            start, _ = self.mix.spans(ep.full_epoch)
            here = count.sum(axis=0)  # [C]
            done = (lo + count - start).sum(axis=0)  # [C] slots up to the sub-epoch's end
            progress = self.mix.progress(ep.full_epoch, done)
            return [(name, int(here[c]), progress[c]) for c, name in enumerate(self.corpora.names)]
        here = self._corpus_counts(epoch)
        return [(name, int(here[c]), None) for c, name in enumerate(self.corpora.names)]

    def _corpus_counts(self, epoch: int) -> np.ndarray:
        """Unmixed ``shard``: the sub-epoch's sequences per corpus -> int64 ``[C]``, without its
        order: one sub-epoch holds every admitted sequence (counted per corpus range of the
        mask); with ``partition_epoch > 1`` each bucket's slice is drawn in chunks (O(n / P)
        time, the memory of a chunk). ``files``: counted from the order (O(n))."""
        assert self.corpora is not None
        if self.files is not None:
            return self.corpora.counts(self.sub_epoch_order(epoch))
        if self.options.partition_epoch == 1:
            if self._mask is None:
                return self.corpora.sizes.astype(np.int64)
            edges = self.corpora.bounds.tolist()
            admitted = [np.count_nonzero(self._mask[a:b]) for a, b in pairwise(edges)]
            return np.asarray(admitted, dtype=np.int64)
        ep = EpochIndex(epoch, self.options.partition_epoch)
        counts, _, _ = self._counts(ep)
        draw = self.draw(epoch)
        out = np.zeros(len(self.corpora.names), dtype=np.int64)
        for b, c in enumerate(counts.tolist()):
            for a in range(0, c, _CHUNK):
                pos = np.arange(a, min(c, a + _CHUNK), dtype=np.int64)
                seqs, _ = draw.slots(np.full(len(pos), b, dtype=np.int64), pos)
                out += self.corpora.counts(seqs)
        return out

    # ---- distribution ----
    def global_plan(
        self, epoch: int, world_size: int, start: int = 0, order_world_size: int | None = None
    ) -> GlobalPlan:
        Topology(0, world_size)
        if self.files is not None:
            if start:
                raise OptionError(
                    "distribution='files' plans continue after an elastic resume from their "
                    "segment history (files_plan), not from a start position"
                )
            return self.files_plan(epoch, world_size)[0]
        table = self.table(epoch, order_world_size or world_size)
        first = table.batch_at(int(start))
        return IndexedPlan(table, self.draw(epoch), world_size, first, self.options.uneven)

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[GlobalPlan, np.ndarray]:
        if history:
            raise ResumeError(
                f"planning='indexed' with distribution='files' cannot continue epoch {epoch} "
                f"mid-way on another world size (saved with {history[0][0]} ranks, now "
                f"{world_size}): the rest would need every old rank's draws. Resume with the "
                "same world size, finish the epoch first, or use distribution='shard'."
            )
        self.check_files(world_size)
        ep = EpochIndex(epoch, self.options.partition_epoch)
        seed_epoch = self._seed_epoch(ep)
        part = self._part_files(ep)
        rank_of = assign_lpt(self._file_frames[part], world_size)  # [f]
        per_rank = _rank_counts(self.index.file_counts, part, rank_of, world_size)  # [W, N]
        group, sizes = merge_small(per_rank, self.k, MERGE_BATCHES)  # [W, N] each
        group_counts = np.zeros_like(per_rank)
        np.add.at(
            group_counts,
            (np.repeat(np.arange(world_size), per_rank.shape[1]), group.ravel()),
            per_rank.ravel(),
        )
        n_batches = batches_per_bucket(group_counts, sizes).sum(axis=1)  # [W]
        seqs = per_rank.sum(axis=1)  # [W]
        steps = int(n_batches.max()) if world_size else 0
        if self.options.uneven == "split":
            repeats = int(np.maximum(steps - seqs, 0).sum())
        else:  # pad: one-sequence filler batches
            repeats = int((steps - n_batches).sum())
        words = (PURPOSE_INDEXED_FILES, seed_epoch, ep.part)

        def share(rank: int) -> BatchList:
            own = part[rank_of == rank]
            rng_r = rng_for(self.options.seed, *words, rank)
            return self._own_batches(own, group[rank], sizes[rank], steps, rng_r, part)

        plan = RankwisePlan(share, world_size, steps, int(seqs.sum()), repeats)
        return plan, np.zeros(0, dtype=np.int64)

    def _own_batches(
        self,
        files: np.ndarray,
        group_of: np.ndarray,
        sizes: np.ndarray,
        steps: int,
        rng: np.random.Generator,
        part: np.ndarray,
    ) -> BatchList:
        """One rank's batches from its own ``files``: drawn within its merged buckets
        (``group_of`` ``[N]``, ``sizes`` per group), histogram-batched, ordered, then equal steps
        (split or one-sequence fillers)."""
        assert self.files is not None
        seqs = _ranges(self.files[files], self.files[files + 1])
        if self._mask is not None:
            seqs = seqs[self._mask[seqs]]
        seqs = seqs[rng.permutation(len(seqs))]
        bucket = np.searchsorted(self.bucket_edges, np.asarray(self.lengths[seqs]), side="right")
        bucket = group_of[bucket]
        by = np.argsort(bucket, kind="stable")  # grouped by bucket, random within
        seqs, bucket = seqs[by], bucket[by]
        counts = np.bincount(bucket, minlength=len(sizes)).astype(np.int64)
        nb = batches_per_bucket(counts, sizes)  # [N]
        n_buckets = len(sizes)
        b_of = np.repeat(np.arange(n_buckets, dtype=np.int64), nb)  # [nb] bucket of each batch
        j = np.arange(len(b_of)) - np.repeat(np.cumsum(nb) - nb, nb)
        first = np.cumsum(counts) - counts
        lo = first[b_of] + j * sizes[b_of]
        hi = np.minimum(lo + sizes[b_of], first[b_of] + counts[b_of])
        order = self._batch_order(b_of, j, nb, int(counts.sum()), rng)
        lo, hi = lo[order], hi[order]
        bounds = np.zeros(len(lo) + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=bounds[1:])
        idx = np.repeat(lo - bounds[:-1], hi - lo) + np.arange(bounds[-1], dtype=np.int64)
        batches = BatchList.from_bounds(seqs[idx], bounds)
        if self.options.uneven == "split":
            batches = split_batches(batches, steps)
        missing = steps - len(batches)
        if missing:  # one-sequence fillers: the rank's own, else the sub-epoch's first
            own = batches.seqs if len(batches.seqs) else self._first_sequence(part)
            pick = own[np.arange(missing) % len(own)]
            extra = BatchList(pick, np.arange(missing + 1, dtype=np.int64), np.zeros(missing, bool))
            batches = batches.concat(extra)
        return batches

    def _batch_order(
        self, b_of: np.ndarray, j: np.ndarray, nb: np.ndarray, seqs: int, rng: np.random.Generator
    ) -> np.ndarray:
        """The rank's batches in plan order: shuffled (``buckets:N``), or spread over bins with
        buckets ascending and descending (``laplace``)."""
        ordering = self.options.parsed_ordering
        if ordering.is_buckets:
            return rng.permutation(len(b_of)).astype(np.int64)
        bins = ordering.num_bins(seqs)
        bin_of = (j * bins) // np.maximum(nb[b_of], 1)  # [nb] the bin j falls in, per bucket
        major = np.where(bin_of % 2 == 1, -b_of, b_of)
        return np.lexsort((j, major, bin_of)).astype(np.int64)

    def _first_sequence(self, part: np.ndarray) -> np.ndarray:
        assert self.files is not None
        for f in part.tolist():
            seqs = np.arange(self.files[f], self.files[f + 1], dtype=np.int64)
            if self._mask is not None:
                seqs = seqs[self._mask[seqs]]
            if len(seqs):
                return seqs[:1]
        return np.zeros(1, dtype=np.int64)

    def fingerprint(self, source_fingerprint: str) -> str:
        h = hashlib.sha256()
        for part in (
            INDEXED_ALGORITHM,
            source_fingerprint,
            self.options.to_json(),
            self.length_key,
        ):
            h.update(part.encode())
            h.update(b"\0")
        h.update(self._extra)
        return h.hexdigest()[:32]


def _rank_counts(
    table: np.ndarray | None, part: np.ndarray, rank_of: np.ndarray, world_size: int
) -> np.ndarray:
    """Sequences per (rank, bucket) -> int64 ``[W, N]``, from the per-(file, bucket) ``table``
    (``[F, N]``, e.g. memory-mapped) for files ``part`` assigned ``rank_of``: one column at a time,
    so no ``[f, N]`` copy of the table is made."""
    assert table is not None
    owner = np.full(table.shape[0], world_size, dtype=np.int64)  # files outside: an extra bin
    owner[part] = rank_of
    cols = [
        np.bincount(owner, weights=table[:, b], minlength=world_size + 1)[:world_size]
        for b in range(table.shape[1])
    ]
    return np.stack(cols, axis=1).round().astype(np.int64)


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers of ``[lo[i], hi[i])`` for every i, concatenated -> int64."""
    sizes = hi - lo
    return np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))


def _admission(
    lengths: Mapping[str, np.ndarray],
    key: str,
    options: PlanOptions,
    excluded: Mapping[str, np.ndarray] | None,
) -> tuple[np.ndarray | None, dict[str, int], dict[str, list[int]]]:
    """(bool mask ``[n]`` of admitted sequences, or None when all are; reason -> count; reason
    -> a few indices): ``excluded``, ``max_seq_length``, ``min_seq_length`` as ``admit`` applies
    them, without an index array of ``n``."""
    n = len(lengths[key])
    rules: list[tuple[str, np.ndarray]] = []
    for reason, mask in (excluded or {}).items():
        m = np.asarray(mask, dtype=bool)
        if m.shape != (n,):
            raise OptionError(f"excluded[{reason!r}]: got shape {m.shape}, expected {(n,)}")
        rules.append((reason, m))
    keys = list(lengths)
    longest = resolve_keyed("max_seq_length", options.max_seq_length, keys, key)
    for k, limit in sorted(longest.items()):
        rules.append((f"{k} longer than max_seq_length={limit}", np.asarray(lengths[k]) > limit))
    shortest = resolve_keyed("min_seq_length", options.min_seq_length or None, keys, key)
    for k, limit in sorted(shortest.items()):
        if limit > 0:
            rules.append(
                (f"{k} shorter than min_seq_length={limit}", np.asarray(lengths[k]) < limit)
            )
    keep: np.ndarray | None = None
    filtered: dict[str, int] = {}
    examples: dict[str, list[int]] = {}
    for reason, mask in rules:
        hit = mask if keep is None else mask & keep
        count = int(np.count_nonzero(hit))
        if count:
            filtered[reason] = count
            examples[reason] = np.flatnonzero(hit)[:5].tolist()
            keep = ~hit if keep is None else keep & ~hit
    return keep, filtered, examples
