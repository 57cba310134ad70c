"""The planning contract: what callers outside ``plan/`` may use of a planner and of its plans,
and the one factory that picks the planner the options ask for.

Two planners implement it: ``seqloader.plan.greedy.planner.Planner`` (``planning="global"``: one
global order batched greedily, RETURNN's order) and ``seqloader.plan.indexed.IndexedPlanner``
(``planning="indexed"``: each rank plans only its own batches, from counts). Callers hold a
``Planner`` and an ``EpochPlan`` and never ask which kind they have: what differs between the
kinds (the planned step imbalance, what the audit checks a run against, the world sizes a
planner can serve) each planner answers itself.

With ``plan/__init__`` and the modules directly in ``plan/``, this module is ``plan/``'s face: the
algorithm packages ``plan/greedy/`` and ``plan/indexed/`` are imported only inside ``plan/``, and
what callers need of indexed planning's node index (its key, its algorithm id, building it) is
named here (``tests/test_layering.py`` checks both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.audit_order import AuditOrder, AuditRun
from seqloader.plan.batches import BatchList
from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import batch_limits, length_key_of
from seqloader.plan.greedy.planner import PLAN_ALGORITHM as GLOBAL_ALGORITHM
from seqloader.plan.greedy.planner import Planner as GlobalPlanner
from seqloader.plan.indexed.corpus import AdmittedCorpus, own_sort_key, sort_key_digest, unplanned
from seqloader.plan.indexed.planner import (
    INDEXED_ALGORITHM,
    INDEXED_KINDS,
    IndexedPlanner,
    index_key,
)
from seqloader.plan.indexed.variants_sorted import SORTED_VARIANT_KINDS
from seqloader.plan.inputs import PlanInputs, PlannedInputs
from seqloader.plan.mix import CorpusProgress, EpochMix


class Planner(PlannedInputs, Protocol):
    """What a planner answers (``make_planner`` builds one), besides its inputs."""

    @property
    def length_key(self) -> str: ...

    @property
    def costs(self) -> np.ndarray: ...

    @property
    def algorithm(self) -> str: ...

    @property
    def mix(self) -> EpochMix | None: ...

    def global_plan(
        self, epoch: int, world_size: int, start: int = 0, order_world_size: int | None = None
    ) -> EpochPlan: ...

    def files_segment(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, int]: ...

    def order_size(self, epoch: int, world_size: int = 1) -> int: ...

    def reusing_orders(self) -> AbstractContextManager[None]: ...

    def carry(self, state: Mapping[str, object]) -> None:
        """Keep what a loaded ``state`` carries besides its position (``EpochPlan.resume_fields``)
        for the plans it matches; nothing where the planner carries nothing."""
        ...

    def fingerprint(self, source_fingerprint: str) -> str: ...

    def filtered(self, epoch: int) -> dict[str, int]: ...

    def corpus_plan(self, epoch: int) -> list[tuple[str, int, CorpusProgress | None]]: ...

    def slot_costs(self, batches: BatchList) -> np.ndarray: ...

    def check_world(self, world_size: int) -> None: ...

    def per_rank_pools(self, world_size: int) -> bool: ...

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        """The order rank ``rank`` batches on its own (``random_seed_offset``; sharded pools)."""
        ...

    def rank_files(self, plan: EpochPlan, rank: int, start_step: int = 0) -> np.ndarray: ...

    def step_imbalance(self, plan: EpochPlan, from_step: int) -> PlannedImbalance: ...

    def audit_order(
        self, plan: EpochPlan, run: AuditRun, ranks: Sequence[int]
    ) -> list[AuditOrder]: ...


def make_planner(
    inputs: PlanInputs | Mapping[str, np.ndarray], *more: Any, **named: Any
) -> Planner:
    """The planner ``options.planning`` asks for, from ``inputs`` (``PlanInputs``), or the short
    form ``make_planner(lengths, options, tags, files=...)``.

    >>> from seqloader.plan.options import PlanOptions
    >>> planner = make_planner({"data": np.array([5, 3, 8, 2])}, PlanOptions(max_seqs=2))
    >>> planner.global_plan(1, world_size=2).steps
    1
    """
    i = resolve_planning(PlanInputs.of(inputs, *more, **named))
    if i.options.planning == "indexed":
        return IndexedPlanner(i)
    return GlobalPlanner(i)


def resolve_planning(inputs: PlanInputs) -> PlanInputs:
    """``inputs`` with ``planning="auto"`` resolved: ``indexed`` where indexed planning plans
    both the options (``PlanOptions.resolved_planning``) and what the source declares (length
    variants, RETURNN's file pools or orders, epoch selections with what draws no sub-epoch
    lists, a sort key of its own for sorted orders), ``global``
    otherwise. Explicit ``global``/``indexed`` are kept (``indexed`` refuses by name what it does
    not plan). The resolved value is what fingerprints and states record.

    >>> from seqloader.plan.options import PlanOptions
    >>> lengths = {"data": np.array([5, 3, 8, 2])}
    >>> resolve_planning(PlanInputs(lengths, PlanOptions(planning="auto"))).options.planning
    'indexed'
    """
    options = inputs.options
    if options.planning != "auto":
        return inputs
    indexed = options.resolved_planning == "indexed" and (
        unplanned(replace(inputs, options=replace(options, planning="indexed"))) is None
    )
    indexed = indexed and not _looser_than_global(inputs)
    return replace(inputs, options=replace(options, planning="indexed" if indexed else "global"))


def _looser_than_global(inputs: PlanInputs) -> bool:
    """Length variants with ``laplace`` and a per-key ``max_frames`` or ``max_packed_frames``
    limiting another key than the length key: indexed planning sizes a bucket's batches by the
    bucket's longest of each other key (packed: longest times size) where global planning cuts
    each batch on the drawn lengths, so indexed planning's epoch has more steps (speech-like
    corpus, 3 speed variants: 1.06x with per-key ``max_frames``, 1.33x with per-key
    ``max_packed_frames``; docs/performance.md): ``auto`` keeps global planning for them.
    ``buckets:N`` stays indexed (global planning refuses it with variants), as do the greedy
    cuts (global's batches)."""
    o = inputs.options
    if inputs.variants is None or o.parsed_ordering.kind != "laplace":
        return False
    if o.max_packed_frames is None and not isinstance(o.max_frames, Mapping):
        return False  # planned indexed before these combinations were: unchanged
    limits = batch_limits(o, list(inputs.lengths), length_key_of(inputs.lengths, o))
    if not {*limits.padded, *limits.packed} - {limits.length_key}:
        return False  # the length key alone: cut as without other keys (global's steps)
    try:
        replace(o, planning="global")  # what global planning refuses stays indexed
    except OptionError:
        return False
    return True


def node_bucket_index(
    inputs: PlanInputs | Mapping[str, np.ndarray], *more: Any, **named: Any
) -> BucketIndex:
    """The bucket index indexed planning builds from ``inputs`` (or the short form
    ``(lengths, options, ...)``): what a node builds once and maps into every rank's planner,
    ``PlanInputs.index``. Built by the admitted corpus alone (``AdmittedCorpus``: admission,
    lengths, the index), not by a planner."""
    given = resolve_planning(PlanInputs.of(inputs, *more, **named))
    return AdmittedCorpus(replace(given, index=None)).index


#: the orderings whose indexed plans draw length variants over classes (``node_variant_classes``
#: has them); the others draw each sequence's variant alone
VARIANT_CLASS_KINDS = ("laplace", "buckets", *SORTED_VARIANT_KINDS)


def node_variant_classes(inputs: PlanInputs) -> dict[str, np.ndarray]:
    """The length variants' classes indexed planning builds from ``inputs`` (O(n F)), as named
    arrays: what a node builds once and maps into every rank's planner,
    ``PlanInputs.variant_classes`` (empty where the ordering draws no classes)."""
    corpus = AdmittedCorpus(replace(resolve_planning(inputs), index=None, variant_classes=None))
    out: dict[str, np.ndarray] = {}
    if corpus.sorted_variants is not None:
        out.update(corpus.sorted_variants.columns("value_classes"))
    if corpus.variants is not None:
        out.update(corpus.variants.columns("classes"))
    return out


def index_sort_key(inputs: PlanInputs) -> str:
    """What a node's bucket index depends on of ``inputs`` besides the options and the source's
    fingerprint: the digest of a source's own sort key where a sorted ordering's index is built
    on it (``order_lengths``; a view's fingerprint need not cover it), else ``""``.

    >>> from seqloader.plan.options import PlanOptions
    >>> lengths = {"data": np.array([5, 3])}
    >>> index_sort_key(PlanInputs(lengths, PlanOptions(ordering="sorted")))
    ''
    >>> len(index_sort_key(PlanInputs(lengths, PlanOptions(ordering="sorted"),
    ...                               order_lengths=np.array([2, 1]))))
    32
    """
    key = own_sort_key(inputs)
    return "" if key is None else sort_key_digest(key)


__all__ = [
    "GLOBAL_ALGORITHM",
    "INDEXED_ALGORITHM",
    "INDEXED_KINDS",
    "VARIANT_CLASS_KINDS",
    "BucketIndex",
    "EpochPlan",
    "PlanInputs",
    "Planner",
    "index_key",
    "index_sort_key",
    "make_planner",
    "node_bucket_index",
    "node_variant_classes",
    "resolve_planning",
]
