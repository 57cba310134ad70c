"""RETURNN's ``CombinedDataset`` -> a ``ConcatSource`` of its sub-datasets (by name, sorted, as
RETURNN numbers them), every sequence carrying every key of ``data_map`` (the keys another
sub-dataset gives are empty, length 0, as RETURNN fills them), ordered by ``CombinedOrders``.

RETURNN orders a sub-epoch from each sub-dataset's own sub-epoch order (its ``seq_ordering``,
``partition_epoch``, filters): ``"interleave"`` takes next the sub-dataset least far through its
order (or draws it by the Gumbel-max trick, ``interleave_gumbel_scale``), ``"random_dataset"``
shuffles which sub-dataset comes next with Python's ``Random``, and any other ``seq_ordering`` orders the sub-orders' concatenation jointly
(``random``, or sorted by RETURNN's length estimate). All of these are functions of the epoch and
the seed, so they are planned here exactly; the sub-orders come from the sub-datasets' own plans.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.loading.plan_inputs import plan_inputs
from seqloader.plan import Planner
from seqloader.plan.epochs import EpochIndex, part_bounds
from seqloader.plan.options import Ordering, PlanOptions
from seqloader.plan.ordering import order_sequences
from seqloader.plan.seeding import returnn_rng
from seqloader.returnn.view import ReturnnView
from seqloader.sources.base import KeySpec, Source, SourceBase, prepare_workers, read_batch, where
from seqloader.sources.concat import ConcatSource
from seqloader.validate import supported_options

OWN = (
    "class",
    "datasets",
    "data_map",
    "seq_ordering",
    "partition_epoch",
    "random_seed_offset",
    "fixed_random_seed",
    "interleave_gumbel_scale",
    "data_dims",
    "data_dtypes",
    "window",
)
# options refused, with the reason and the nearest native equivalent
REFUSED = {
    "sampling_sizes": "the installed RETURNN fails on it when its engine builds the dataset "
    "(init_seq_order(epoch=None) leaves the sub-datasets without sequences: ZeroDivisionError in "
    "_get_sampling_seq_order), so there is no behaviour to reproduce; for a fixed number of "
    "sequences per corpus and epoch use seqloader.ConcatSource(...) with mix={...} "
    "(docs/corpora.md)",
    "seq_list_filter_file": "RETURNN's CombinedDataset filters its joint order by it (untested "
    "here); set seq_list_filter_file on the sub-datasets",
}
NO_EFFECT = {
    "name": "RETURNN's name for logs",
    "estimated_num_seqs": "read by RETURNN only when the sub-datasets' sizes are unknown",
}
KIND = "CombinedDataset"
# sub-datasets whose length estimate RETURNN has (get_estimated_seq_length): its joint sorting
# orderings need one; the view's order lengths are that estimate ("data" lengths)
ESTIMATED = ("HDFDataset", "TranslationDataset")
# the orderings RETURNN's CombinedDataset takes beyond Dataset's own
STREAMED = ("interleave", "random_dataset")


class FilledSource(SourceBase):
    """``inner`` with its keys renamed by ``mapping`` (ours -> inner's, None: not given by this
    sub-dataset) and the keys it does not give as empty arrays ``[0, *feature_shape]`` (length 0),
    as RETURNN's ``CombinedDataset`` fills them."""

    def __init__(
        self, inner: Source, mapping: Mapping[str, str | None], schema: Mapping[str, KeySpec]
    ) -> None:
        self._inner = inner
        self._mapping = dict(mapping)
        self._schema = {k: schema[k] for k in mapping}
        zeros = np.zeros(len(inner), dtype=np.int64)
        self._lengths = {
            k: zeros if src is None else inner.lengths(src) for k, src in self._mapping.items()
        }
        self._tags = inner.tags

    def _fill(self, seq: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for key, src in self._mapping.items():
            spec = self._schema[key]
            out[key] = (
                np.zeros((0, *spec.feature_shape), dtype=spec.dtype) if src is None else seq[src]
            )
        return out

    def read(self, index: int) -> dict[str, np.ndarray]:
        return self._fill(self._inner.read(index))

    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]:
        return [self._fill(s) for s in read_batch(self._inner, indices)]

    def prepare_workers(self) -> None:
        prepare_workers(self._inner)

    def where(self, index: int) -> str:
        return where(self._inner, index)

    def fingerprint(self) -> str:
        h = hashlib.sha256(b"filled\0" + self._inner.fingerprint().encode())
        h.update(repr(sorted(self._mapping.items(), key=lambda kv: kv[0])).encode())
        return h.hexdigest()[:32]

    def __repr__(self) -> str:
        return f"FilledSource({self._inner!r}, {self._mapping})"


@dataclass
class SubOrder:
    """One sub-dataset's own sub-epoch order, from its own plan (RETURNN's ``init_seq_order``).
    ``offset``: its own ``random_seed_offset``; None: the parent's, as RETURNN inherits it."""

    view: ReturnnView
    ordering: str
    partition_epoch: int
    offset: int | None
    native: dict[str, Any]
    origin: str

    def __post_init__(self) -> None:
        self._planners: dict[int, Planner] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_planners": {}}  # rebuilt where needed

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        """Sub-dataset indices of ``epoch`` in its own order (its filters applied)."""
        own = self.offset is not None
        offset = int(self.offset) if own else seed  # type: ignore[arg-type]
        planner = self._planners.get(offset)
        if planner is None:
            keys = self.view.keys
            options = PlanOptions(
                ordering=self.ordering,
                partition_epoch=self.partition_epoch,
                seed=offset,
                seeding="returnn",
                length_key="data" if "data" in keys else keys[0],
                **self.native,
            )
            planner = Planner(replace(plan_inputs(self.view, options), origin=self.origin))
            self._planners[offset] = planner
        return np.asarray(planner.sub_epoch_order(epoch, 0 if own else order_rank), np.int64)


@dataclass
class CombinedOrders:
    """RETURNN's ``CombinedDataset`` order of each sub-epoch over the ``ConcatSource`` of its
    sub-datasets (``seqloader.plan.orders.EpochOrders``): ``bounds`` int64 ``[D + 1]``, sub-dataset
    d at ``[bounds[d], bounds[d + 1])``; ``estimates`` int64 ``[n]``: RETURNN's length estimate
    (sorting orderings only)."""

    subs: list[SubOrder]
    bounds: np.ndarray
    ordering: str
    partition_epoch: int
    fixed_random_seed: int | None
    gumbel_scale: float | str | None
    estimates: np.ndarray | None

    def identity(self) -> bytes:
        parts = [
            (s.ordering, s.partition_epoch, s.offset, sorted(s.native.items())) for s in self.subs
        ]
        spec = (self.ordering, self.partition_epoch, self.fixed_random_seed, self.gumbel_scale)
        return repr((parts, spec)).encode() + self.bounds.tobytes()

    def filtered(self, epoch: int, seed: int) -> dict[str, int]:
        """Nothing: every sub-dataset's sub-epoch is delivered whole (their own filters count
        in the sub-datasets' plans, RETURNN's length filter in the planner's admission)."""
        return {}

    def _seed(self, epoch: int, seed: int, order_rank: int, partition: int) -> int:
        """RETURNN's ``_get_random_seed_for_epoch`` (with the rank step of its default offset)."""
        if self.fixed_random_seed is not None:
            return int(self.fixed_random_seed)
        full = (epoch - 1) // partition + 1 if partition > 1 else epoch
        return full + seed + 16127 * order_rank

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        subs = [s.order(epoch, seed, order_rank) for s in self.subs]  # [n_d] each, local
        if self.ordering == "interleave":
            picks = self._interleave(epoch, seed, order_rank, [len(s) for s in subs])
            return self._deliver(subs, picks)
        firsts = np.concatenate([[0], np.cumsum([len(s) for s in subs])]).astype(np.int64)
        if self.ordering == "random_dataset":
            joint = self._random_dataset(epoch, seed, order_rank, [len(s) for s in subs], firsts)
        else:
            joint = self._joint(epoch, seed, order_rank, subs, firsts)
        return _every(subs, self.bounds)[joint]  # positions in the sub-orders -> sequences

    def _deliver(self, subs: list[np.ndarray], picks: list[int]) -> np.ndarray:
        """Sub-dataset picks in order -> each one's next sequence of its own order."""
        used = [0] * len(subs)
        out = np.empty(len(picks), dtype=np.int64)
        for k, d in enumerate(picks):
            out[k] = self.bounds[d] + subs[d][used[d]]
            used[d] += 1
        return out

    def _interleave(self, epoch: int, seed: int, order_rank: int, sizes: list[int]) -> list[int]:
        """RETURNN's ``_expand_dataset_seq_idxs`` for ``"interleave"``: next the sub-dataset with
        the lowest ``get_complete_frac`` (``(used + 1) / n``), the lower index on ties; with
        ``interleave_gumbel_scale``, ``argmax(log(remaining) + scale * gumbel)`` drawn from
        ``RandomState(seed of the epoch)``."""
        rng = np.random.RandomState(self._seed(epoch, seed, order_rank, 1))
        used = [0] * len(sizes)
        picks: list[int] = []
        for _ in range(sum(sizes)):
            cands = [
                (min(float(used[j] + 1) / sizes[j], 1.0), j)
                for j in range(len(sizes))
                if used[j] < sizes[j]
            ]
            if self.gumbel_scale:
                scale = self.gumbel_scale
                if scale == "remaining":
                    scale = 1.0 - max(frac for frac, _ in cands)
                logits = [np.log(max(sizes[j] - used[j], 1.0)) for _, j in cands]
                noise = rng.gumbel(size=len(cands))
                _, j = max(zip(cands, logits, noise), key=lambda c: c[1] + float(scale) * c[2])[0]
            else:
                _, j = min(cands)
            picks.append(j)
            used[j] += 1
        return picks

    def _random_dataset(
        self, epoch: int, seed: int, order_rank: int, sizes: list[int], firsts: np.ndarray
    ) -> np.ndarray:
        """RETURNN's ``_get_random_dataset_seq_order``: the sub-dataset of every position shuffled
        by Python's ``Random(seed)``, each sub-dataset's own order kept; then cut."""
        ids = [d for d, n in enumerate(sizes) for _ in range(n)]
        random.Random(self._seed(epoch, seed, order_rank, self.partition_epoch)).shuffle(ids)
        counters = list(firsts[:-1])
        joint = np.empty(len(ids), dtype=np.int64)
        for k, d in enumerate(ids):
            joint[k] = counters[d]
            counters[d] += 1
        return self._cut(epoch, joint)

    def _cut(self, epoch: int, joint: np.ndarray) -> np.ndarray:
        lo, hi = part_bounds(len(joint), self.partition_epoch, (epoch - 1) % self.partition_epoch)
        return joint[lo:hi]

    def _joint(
        self,
        epoch: int,
        seed: int,
        order_rank: int,
        subs: list[np.ndarray],
        firsts: np.ndarray,
    ) -> np.ndarray:
        """``Dataset.get_seq_order_for_epoch`` over the sub-orders' concatenation, sorted by the
        sub-datasets' length estimates; then cut into the ``partition_epoch`` parts."""
        n = int(firsts[-1])
        lengths = np.zeros(n, dtype=np.int64)
        if self.estimates is not None:
            lengths = self.estimates[_every(subs, self.bounds)]
        parsed = Ordering.parse(self.ordering)
        ep = EpochIndex(epoch, self.partition_epoch)
        rng = returnn_rng(parsed.seed_epoch(ep.full_epoch), seed, order_rank)
        if self.fixed_random_seed is not None:
            rng = np.random.RandomState(self.fixed_random_seed)
        perm = order_sequences(lengths, parsed, rng)
        lo, hi = part_bounds(n, self.partition_epoch, ep.part)
        return perm[lo:hi]


def _every(subs: list[np.ndarray], bounds: np.ndarray) -> np.ndarray:
    """The sub-orders one after another, as sequence indices of the joined source."""
    return np.concatenate([s + bounds[d] for d, s in enumerate(subs)]).astype(np.int64)


def combined(
    name: str,
    opts: dict[str, Any],
    default_ordering: str,
    convert: Callable[[str, dict[str, Any], str], Any],
) -> tuple[ReturnnView, str, int, int | None]:
    """``opts``: the ``CombinedDataset`` dict; ``convert``: ``convert_dataset``. -> (the view,
    with its own orders; the plan's ordering ``"default"``; ``partition_epoch``;
    ``random_seed_offset``)."""
    where = f"{name} dataset ({KIND})"
    for key, why in REFUSED.items():
        if opts.get(key) is not None:
            raise OptionError(f"{where}: option {key!r} is not supported: {why}")
    supported_options(where, opts, OWN, NO_EFFECT)
    if opts.get("window", 1) != 1:
        raise OptionError(f"{where}: window {opts['window']!r}; RETURNN asserts 1 here")
    data_map = opts.get("data_map")
    datasets = opts.get("datasets")
    if not isinstance(data_map, Mapping) or not data_map or not isinstance(datasets, Mapping):
        raise OptionError(
            f"{where}: expected 'datasets' (name -> dataset dict) and 'data_map' ((name, key) "
            "-> key), as RETURNN"
        )
    for k, v in data_map.items():
        if not (isinstance(k, tuple) and len(k) == 2 and isinstance(v, str)):
            raise OptionError(
                f"{where}: data_map entry {k!r}: {v!r}; RETURNN's CombinedDataset maps "
                "(dataset, its key) -> our key (the reverse of MetaDataset's data_map)"
            )
    names = sorted({d for d, _ in data_map})  # RETURNN's dataset_idx2key_map
    missing = [d for d in names if d not in datasets]
    if missing:
        raise OptionError(f"{where}: data_map names datasets {missing} not in 'datasets'")
    ordering = opts.get("seq_ordering", default_ordering)
    if not isinstance(ordering, str):
        raise OptionError(f"{where}: seq_ordering {ordering!r}; a function is not supported")
    partition = opts.get("partition_epoch") or 1
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 1:
        raise OptionError(f"{where}: partition_epoch {partition!r}, expected an int >= 1")
    offset = opts.get("random_seed_offset")
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int)):
        raise OptionError(f"{where}: random_seed_offset {offset!r}, expected an int")
    converted = {}
    for d in names:
        sub = dict(datasets[d])
        if offset is not None:
            sub.setdefault("random_seed_offset", offset)  # RETURNN: inherited from the parent
        c = convert(f"{name}.{d}", sub, "default")
        if c.source.file_pools() is not None or c.source.epoch_orders() is not None:
            raise OptionError(
                f"{name}.{d} ({c.kind}) inside a {KIND}: not supported (it plans its own "
                "per-sub-epoch pools or orders); use it as a dataset of its own"
            )
        converted[d] = c
    gumbel = opts.get("interleave_gumbel_scale")
    _check_ordering(where, ordering, partition, gumbel, converted)
    filled = _filled(where, name, data_map, converted, names)
    try:
        joined = ConcatSource(filled)
    except DataError as e:
        raise OptionError(f"{where}: {e}") from e
    _, bounds = joined.corpus_layout()
    estimates = None
    if Ordering.parse(_plain(ordering)).kind not in ("default", "reverse", "random"):
        estimates = np.concatenate(
            [np.asarray(converted[d].source.order_lengths(), np.int64) for d in names]
        )
    subs = [
        SubOrder(
            c.source,
            c.ordering,
            c.partition_epoch,
            c.random_seed_offset,
            dict(c.native),
            f"{name}.{d} ({c.kind})",
        )
        for d, c in converted.items()
    ]
    fixed = opts.get("fixed_random_seed")
    orders = CombinedOrders(subs, bounds, ordering, int(partition), fixed, gumbel, estimates)
    return ReturnnView(joined, orders=orders), "default", int(partition), offset


def refuse_sharding(name: str, kind: str) -> None:
    """``torch_distributed`` ``"shard"`` on a ``CombinedDataset``: RETURNN's has no sharding
    (``supports_sharding`` False: it asserts ``num_shards == 1`` in ``init_seq_order`` on more
    than one rank), so there is no RETURNN behaviour to plan; refused at conversion."""
    if kind == KIND:
        raise OptionError(
            f"{name} dataset ({KIND}): torch_distributed dataset_distribution 'shard' is not "
            "supported: RETURNN's CombinedDataset does not support sharding (it asserts "
            "num_shards == 1 on more than one rank); use dataset_distribution "
            "'random_seed_offset' (RETURNN's default: every rank its own order of all "
            "sequences), or natively SeqLoader(ConcatSource(...), distribution='shard')"
        )


def _plain(ordering: str) -> str:
    return "default" if ordering in STREAMED else ordering


def _check_ordering(
    where: str,
    ordering: str,
    partition: int,
    gumbel: Any,
    converted: Mapping[str, Any],
) -> None:
    """What RETURNN's CombinedDataset accepts, refused here in its words where it would fail."""
    if gumbel is not None and not (
        gumbel == "remaining" or (isinstance(gumbel, int | float) and not isinstance(gumbel, bool))
    ):
        raise OptionError(
            f"{where}: interleave_gumbel_scale {gumbel!r}; expected a number or 'remaining'"
        )
    if isinstance(gumbel, int | float) and not isinstance(gumbel, bool):
        gumbel = float(gumbel)
    if ordering == "interleave" and partition != 1:
        raise OptionError(
            f"{where}: seq_ordering 'interleave' with partition_epoch {partition}; RETURNN "
            "asserts partition_epoch 1 there: set partition_epoch on the sub-datasets"
        )
    if ordering in STREAMED:
        return
    try:
        parsed = Ordering.parse(ordering)
    except OptionError as e:
        raise OptionError(f"{where}: seq_ordering {ordering!r}: {e}") from e
    if parsed.kind in ("default", "reverse", "random") or parsed.is_buckets:
        if parsed.is_buckets:
            raise OptionError(f"{where}: seq_ordering {ordering!r} is no RETURNN ordering")
        return
    lacking = sorted(d for d, c in converted.items() if c.kind not in ESTIMATED)
    if lacking:
        raise OptionError(
            f"{where}: seq_ordering {ordering!r} sorts by RETURNN's length estimate, which "
            f"{lacking} do not have (RETURNN raises on them): use 'random', 'interleave' or "
            "'random_dataset', or sort each sub-dataset by its own seq_ordering"
        )


def _filled(
    where: str,
    name: str,
    data_map: Mapping[tuple[str, str], str],
    converted: Mapping[str, Any],
    names: list[str],
) -> dict[str, FilledSource]:
    """Each sub-dataset as a source of every mapped key (its own renamed, the others empty)."""
    ours = sorted(set(data_map.values()))
    specs: dict[str, KeySpec] = {}
    given: dict[str, dict[str, str | None]] = {d: dict.fromkeys(ours) for d in names}
    for (d, key), out in data_map.items():
        c = converted[d]
        src_key = "text" if key == "orth" and c.kind == "OggZipDataset" else key
        if src_key not in c.source.keys:
            raise OptionError(
                f"{where}: data_map ({d!r}, {key!r}): {name}.{d} ({c.kind}) has no key {key!r} "
                f"(its keys: {list(c.source.keys)})"
            )
        given[d][out] = src_key
        spec, first = c.source.schema[src_key], specs.get(out)
        if first is not None and (
            np.dtype(first.dtype) != np.dtype(spec.dtype)
            or tuple(first.feature_shape) != tuple(spec.feature_shape)
        ):
            raise OptionError(
                f"{where}: data_map key {out!r} is {spec.describe()} in {name}.{d} but "
                f"{first.describe()} in another sub-dataset; one batch pads them into one tensor: "
                "give both the same dtype and feature shape"
            )
        if first is not None:  # sparse / vocabulary: metadata, RETURNN takes either dim
            sizes = [v for v in (first.vocab_size, spec.vocab_size) if v is not None]
            sparse = first.sparse or spec.sparse
            spec = replace(spec, sparse=sparse, vocab_size=max(sizes) if sizes else None)
        specs[out] = spec
    return {d: FilledSource(converted[d].source, given[d], specs) for d in names}
